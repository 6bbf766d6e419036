// The event system: order of events, cancel exceptions' paths, callback ordering,
// run_train/run_valid, and errors escaping callbacks.
#include "helpers.h"

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

using Events = std::vector<std::string>;

const Events kTrainBatch{"before_batch", "after_pred", "after_loss", "before_backward", "after_backward",
                         "before_step", "after_step", "after_batch"};
const Events kValidBatch{"before_batch", "after_pred", "after_loss", "after_batch"};

Events concat(std::initializer_list<Events> parts) {
  Events all;
  for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
  return all;
}

// Throws a cancel exception of type E at `event` (the first time, in epoch `at_epoch`).
template <class E>
class Canceller : public Callback {
 public:
  Canceller(Event event, int at_epoch = 0) : event_(event), at_epoch_(at_epoch) { order = 5; }
  void before_epoch() override { maybe(Event::before_epoch); }
  void before_batch() override { maybe(Event::before_batch); }
  void before_backward() override { maybe(Event::before_backward); }
  void before_step() override { maybe(Event::before_step); }
  void before_validate() override { maybe(Event::before_validate); }
  void after_epoch() override { maybe(Event::after_epoch); }

 private:
  void maybe(Event e) {
    if (e == event_ && learn().epoch == at_epoch_ && !fired_) {
      fired_ = true;
      throw E();
    }
  }
  Event event_;
  int at_epoch_;
  bool fired_ = false;
};

struct Fixture {
  Fixture() : learn(synthetic_dls(4, 2, 2), tiny_model(), CrossEntropyLoss(), {}, quiet({.cbs = {probe}})) {
    silence(learn);
    created = probe->events;
    probe->events.clear();
  }
  std::shared_ptr<EventProbe> probe = std::make_shared<EventProbe>();
  Learner learn;
  Events created;
};

// The `count` events from the first training batch's before_batch on.
Events first_batch_events(const Fixture& f, size_t count) {
  const auto first = f.probe->events.begin() + 3;  // after before_fit, before_epoch, before_train
  return Events(first, first + static_cast<std::ptrdiff_t>(count));
}

}  // namespace

TEST_SUITE("events") {
  TEST_CASE("a fit with training and validation runs fastai's events in order") {
    Fixture f;
    CHECK(f.created == Events{"after_create"});
    f.learn.fit(1);
    const Events expected = concat({{"before_fit", "before_epoch", "before_train"}, kTrainBatch, kTrainBatch,
                                    {"after_train", "before_validate"}, kValidBatch,
                                    {"after_validate", "after_epoch", "after_fit"}});
    CHECK(f.probe->events == expected);
  }

  TEST_CASE("a callback added after the constructor gets after_create once, when added") {
    Fixture f;
    auto late = std::make_shared<EventProbe>();
    f.learn.add_cb(late);
    CHECK(late->events == Events{"after_create"});
    CHECK(f.probe->events.empty());  // the others had theirs
    f.learn.remove_cb(late);
    f.learn.add_cb(late);  // back on the same Learner: not created again
    CHECK(late->events == Events{"after_create"});

    auto for_fit = std::make_shared<EventProbe>();  // fit's cbs: added for each fit
    f.learn.fit(1, {}, {.cbs = {for_fit}});
    f.learn.fit(1, {}, {.cbs = {for_fit}});
    CHECK(std::count(for_fit->events.begin(), for_fit->events.end(), "after_create") == 1);
    CHECK(for_fit->events.front() == "after_create");
  }

  TEST_CASE("callbacks are added all or none: a fit's null callback, one already added, a failed after_create") {
    Fixture f;
    const auto before = f.learn.cbs();
    auto extra = std::make_shared<EventProbe>();
    CHECK_THROWS_WITH_AS(f.learn.fit(1, {}, {.cbs = {extra, nullptr}}), "add_cb: null callback", Error);
    CHECK(f.learn.cbs() == before);
    CHECK(extra->events == Events{"after_create"});
    CHECK_THROWS_WITH_AS(f.learn.fit(1, {}, {.cbs = {extra, f.probe}}),
                         "add_cb: this EventProbe is already added (each event would run it twice)", Error);
    CHECK(f.learn.cbs() == before);  // the probe that was there stays
    CHECK(f.probe->events.empty());

    struct FailsToStart : Callback {
      void after_create() override {
        if (++tries == 1) throw std::runtime_error("no disk");
      }
      int tries = 0;
    };
    auto failing = std::make_shared<FailsToStart>();
    CHECK_THROWS_WITH_AS(f.learn.add_cb(failing),
                         "Exception occurred in `FailsToStart` when calling event `after_create`:\n\tno disk", Error);
    CHECK(f.learn.cbs() == before);
    f.learn.add_cb(failing);  // added again, it is set up again
    CHECK(failing->tries == 2);
    CHECK(f.learn.cbs().size() == before.size() + 1);
  }

  TEST_CASE("a callback added during after_create gets its own after_create") {
    struct Adder : Callback {
      std::shared_ptr<EventProbe> added = std::make_shared<EventProbe>();
      void after_create() override { learn().add_cb(added); }
    };
    auto adder = std::make_shared<Adder>();
    Learner learn(synthetic_dls(4, 2, 2), tiny_model(), CrossEntropyLoss(), {}, quiet({.cbs = {adder}}));
    CHECK(adder->added->events == Events{"after_create"});
  }

  TEST_CASE("CancelBatchException in before_step skips step and zero_grad") {
    Fixture f;
    struct GradsAtAfterBatch : Callback {  // zero_grad drops the grads before after_batch, unless skipped
      GradsAtAfterBatch() { run_valid = false; }
      void after_batch() override { kept.push_back(learn().model.module().parameters()[0].grad().defined()); }
      std::vector<bool> kept;
    };
    auto grads = f.learn.add_cb(GradsAtAfterBatch());
    f.learn.add_cb(Canceller<CancelBatchException>(Event::before_step));
    f.learn.fit(1);
    CHECK(grads->kept == std::vector<bool>{true, false});  // batch 0 cancelled, batch 1 normal
    CHECK(first_batch_events(f, 8) == Events{"before_batch", "after_pred", "after_loss", "before_backward", "after_backward",
                                "before_step", "after_cancel_batch", "after_batch"});
  }

  TEST_CASE("CancelStepException skips the step but not zero_grad") {
    Fixture f;
    auto before = snapshot(f.learn.model.module());
    struct AlwaysCancelStep : Callback {
      void before_step() override { throw CancelStepException(); }
    };
    f.learn.add_cb(AlwaysCancelStep());
    f.learn.fit(1);
    CHECK(first_batch_events(f, 8) == Events{"before_batch", "after_pred", "after_loss", "before_backward", "after_backward",
                                "before_step", "after_cancel_step", "after_step"});
    CHECK(all_equal(before, snapshot(f.learn.model.module())));
  }

  TEST_CASE("CancelBackwardException lands in after_cancel_backward, then the step runs") {
    Fixture f;
    f.learn.add_cb(Canceller<CancelBackwardException>(Event::before_backward));
    f.learn.fit(1);
    CHECK(first_batch_events(f, 9) == Events{"before_batch", "after_pred", "after_loss", "before_backward",
                                "after_cancel_backward", "after_backward", "before_step", "after_step",
                                "after_batch"});
  }

  TEST_CASE("CancelTrainException ends training (no after_batch), validation still runs") {
    Fixture f;
    f.learn.add_cb(Canceller<CancelTrainException>(Event::before_batch));
    f.learn.fit(1);
    const Events expected = concat({{"before_fit", "before_epoch", "before_train", "before_batch", "after_cancel_train",
                                     "after_train", "before_validate"},
                                    kValidBatch,
                                    {"after_validate", "after_epoch", "after_fit"}});
    CHECK(f.probe->events == expected);
  }

  TEST_CASE("CancelValidException skips validation") {
    Fixture f;
    f.learn.add_cb(Canceller<CancelValidException>(Event::before_validate));
    f.learn.fit(1);
    const Events tail(f.probe->events.end() - 5, f.probe->events.end());
    CHECK(tail == Events{"before_validate", "after_cancel_validate", "after_validate", "after_epoch", "after_fit"});
    CHECK(std::isnan(f.learn.recorder->values.back()[1]));  // no valid_loss
  }

  TEST_CASE("CancelEpochException skips to the next epoch") {
    Fixture f;
    f.learn.add_cb(Canceller<CancelEpochException>(Event::before_epoch, 0));
    f.learn.fit(2);
    const Events head(f.probe->events.begin(), f.probe->events.begin() + 6);
    CHECK(head == Events{"before_fit", "before_epoch", "after_cancel_epoch", "after_epoch", "before_epoch",
                         "before_train"});
  }

  TEST_CASE("CancelFitException ends the fit after the current epoch's after_epoch") {
    Fixture f;
    f.learn.add_cb(Canceller<CancelFitException>(Event::after_epoch, 0));
    f.learn.fit(3);
    const Events tail(f.probe->events.end() - 3, f.probe->events.end());
    CHECK(tail == Events{"after_epoch", "after_cancel_fit", "after_fit"});
    CHECK(std::count(f.probe->events.begin(), f.probe->events.end(), "before_epoch") == 1);
  }

  TEST_CASE("callbacks run sorted by order") {
    Fixture f;
    std::vector<int> seen;
    struct Ordered : Callback {
      Ordered(int o, std::vector<int>* seen) : seen_(seen) { order = o; }
      void before_fit() override { seen_->push_back(order); }
      std::vector<int>* seen_;
    };
    f.learn.add_cb(Ordered(30, &seen));
    f.learn.add_cb(Ordered(-5, &seen));
    f.learn.add_cb(Ordered(7, &seen));
    f.learn.fit(1);
    CHECK(seen == std::vector<int>{-5, 7, 30});
  }

  TEST_CASE("run_train and run_valid restrict the batch events") {
    Fixture f;
    struct CountBatches : Callback {
      int train = 0, valid = 0;
      void after_batch() override { (learn().training ? train : valid) += 1; }
    };
    auto train_only = f.learn.add_cb(CountBatches());
    train_only->run_valid = false;
    auto valid_only = f.learn.add_cb(CountBatches());
    valid_only->run_train = false;
    f.learn.fit(1);
    CHECK(train_only->train == 2);
    CHECK(train_only->valid == 0);
    CHECK(valid_only->train == 0);
    CHECK(valid_only->valid == 1);
  }

  TEST_CASE("an exception escaping a callback names the callback, the event and the batch") {
    Fixture f;
    struct Faulty : Callback {
      void after_pred() override { throw std::runtime_error("boom"); }
    };
    f.learn.add_cb(Faulty());
    CHECK(error_of([&] { f.learn.fit(1); }) ==
          "Exception occurred in `Faulty` when calling event `after_pred`:\n\tboom\n\t(in training batch 0 of epoch 0)");
    // The fit was abandoned, yet the learner is usable again.
    f.learn.remove_cb(f.learn.get_cb<Faulty>());
    CHECK_NOTHROW(f.learn.fit(1));
  }
}
