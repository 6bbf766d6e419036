// ResumeFromCheckpoint: a program of several fits, killed and run again, ends with the
// weights of an uninterrupted run (dropout and shuffled data included).
#include <filesystem>
#include <optional>
#include <stdexcept>

#include "helpers.h"

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

struct CrashPoint {
  int fit, epoch;  // the fit's number (1 for the first) and the epoch after whose save it dies
};

// Dies (an exception no callback catches, as a killed process) after the save of `at`.
class Crash : public Callback {
 public:
  explicit Crash(CrashPoint at) : at_(at) { order = 100; }  // after ResumeFromCheckpoint's save
  void before_fit() override { ++fit_; }
  void after_epoch() override {
    if (fit_ == at_.fit && learn().epoch == at_.epoch) throw std::runtime_error("killed");
  }

 private:
  CrashPoint at_;
  int fit_ = 0;
};

struct ProgramRun {
  std::vector<torch::Tensor> weights;
  std::vector<double> last_row;  // train_loss (smoothed over the fit's batches), valid_loss
  std::vector<std::string> log;
  int last_resumed_from;
};

// fine_tune (a frozen fit of 2 epochs, then an unfrozen one of 3) of a model with dropout
// on shuffled data, restartable through `checkpoint`.
ProgramRun fine_tune_program(const std::string& checkpoint, std::optional<CrashPoint> crash = {}) {
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(4, 16), torch::nn::ReLU(), torch::nn::Dropout(0.5),
                              torch::nn::Linear(16, 3));
  DataLoaders dls{DataLoader(synthetic_dataset(32, 4, 3, 1), {.bs = 4, .shuffle = true, .seed = 3}),
                  DataLoader(synthetic_dataset(8, 4, 3, 2), {.bs = 4})};
  Learner learn(dls, model, CrossEntropyLoss(), {}, quiet({.splitter = split_after(3)}));
  ProgramRun run;
  silence(learn, &run.log);
  auto resume = learn.add_cb(ResumeFromCheckpoint(checkpoint));
  if (crash) learn.add_cb(Crash(*crash));
  learn.fine_tune(3, {.base_lr = 1e-2, .freeze_epochs = 2});
  run.weights = snapshot(learn.model.module());
  run.last_row = learn.recorder->values.back();
  run.last_resumed_from = resume->resumed_from();
  return run;
}

}  // namespace

TEST_SUITE("callbacks") {
  TEST_CASE("ResumeFromCheckpoint: a fine_tune killed in either phase and run again ends as an uninterrupted one") {
    const auto uninterrupted = fine_tune_program(temp_path("resume_whole.pt"));
    CHECK(!std::filesystem::exists(temp_path("resume_whole.pt")));
    SUBCASE("killed in the second phase: the first is skipped, the second resumed") {
      const auto path = temp_path("resume_second.pt");
      CHECK_THROWS(fine_tune_program(path, CrashPoint{2, 1}));
      const auto again = fine_tune_program(path);
      CHECK(again.log == std::vector<std::string>{"skipping fit 1: '" + path + "' holds fit 2",
                                                  "resuming from '" + path + "' at epoch 2"});
      CHECK(again.last_resumed_from == 2);
      CHECK(all_equal(again.weights, uninterrupted.weights));
      CHECK(again.last_row == uninterrupted.last_row);  // the smoothing went on from the checkpoint's
      CHECK(!std::filesystem::exists(path));
    }
    SUBCASE("killed in the first phase: it resumes, the second trains from its start") {
      const auto path = temp_path("resume_first.pt");
      CHECK_THROWS(fine_tune_program(path, CrashPoint{1, 0}));
      const auto again = fine_tune_program(path);
      CHECK(again.log == std::vector<std::string>{"resuming from '" + path + "' at epoch 1"});
      CHECK(again.last_resumed_from == 0);
      CHECK(all_equal(again.weights, uninterrupted.weights));
    }
  }

  TEST_CASE("ResumeFromCheckpoint: a fit stopped early is done, its checkpoint removed as a whole fit's") {
    // Stops the fit after epoch 1's save, as EarlyStopping would after its patience.
    struct StopAfterSecond : Callback {
      StopAfterSecond() { order = 100; }
      void after_epoch() override {
        if (learn().epoch == 1) throw CancelFitException();
      }
    };
    const auto path = temp_path("resume_stopped.pt");
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    learn.add_cb(ResumeFromCheckpoint(path));
    learn.add_cb(StopAfterSecond());
    learn.fit(5);
    CHECK(learn.epoch == 1);
    CHECK(!std::filesystem::exists(path));  // a restart would have resumed at epoch 2, past the stop
  }
}

TEST_SUITE("callbacks") {
  TEST_CASE("ResumeFromCheckpoint: every rank's seed is rank 0's (Learner::from_rank_0), the one its checkpoint keeps") {
    // Processes whose generators differ train alike when rank 0's draw is shared, so a
    // resumed rank (which reads rank 0's seed back) repeats its own dropout.
    const auto path = temp_path("rank_0_seed.ckpt");
    auto trained = [&](uint64_t own_seed, bool shared) {
      torch::manual_seed(0);
      torch::nn::Sequential model(torch::nn::Linear(4, 16), torch::nn::ReLU(), torch::nn::Dropout(0.5),
                                  torch::nn::Linear(16, 3));
      DataLoaders dls{DataLoader(synthetic_dataset(16, 4, 3, 1), {.bs = 4, .shuffle = true, .seed = 3}),
                      DataLoader(synthetic_dataset(8, 4, 3, 2), {.bs = 4})};
      Learner learn(dls, model, CrossEntropyLoss(), {}, quiet());
      silence(learn);
      learn.add_cb(ResumeFromCheckpoint(path));
      // Rank 0's seed is 77 (the first call); what the ranks find in the checkpoint agrees.
      if (shared) learn.from_rank_0 = [calls = 0](int64_t mine) mutable { return calls++ == 0 ? int64_t{77} : mine; };
      torch::manual_seed(own_seed);
      learn.fit(2, 1e-2);
      return snapshot(learn.model.module());
    };
    CHECK(all_equal(trained(1, true), trained(2, true)));
    CHECK_FALSE(all_equal(trained(1, false), trained(2, false)));
    std::filesystem::remove(path);
  }
}

TEST_SUITE("callbacks") {
  TEST_CASE("ResumeFromCheckpoint refuses a checkpoint of another number of epochs, and a rank that finds another "
            "checkpoint than rank 0's") {
    const auto path = temp_path("resume_refused.pt");
    auto learner = [&] {
      auto learn = std::make_unique<Learner>(synthetic_dls(), tiny_model(), CrossEntropyLoss(), std::vector<MetricPtr>{},
                                             quiet());
      silence(*learn);
      learn->add_cb(ResumeFromCheckpoint(path));
      return learn;
    };
    {
      auto learn = learner();
      learn->add_cb(Crash({1, 1}));
      CHECK_THROWS(learn->fit(3));
    }
    const std::string in_before_fit = "Exception occurred in `ResumeFromCheckpoint` when calling event `before_fit`:\n\t";
    CHECK(error_of([&] { learner()->fit(5); }) ==
          in_before_fit + "checkpoint '" + path + "' holds a fit of 3 epochs, this fit has 5: its schedule would not go on where it "
          "stopped; remove the checkpoint to train this fit from its start");
    // Rank 1 on a node that does not see rank 0's file.
    auto rank_1 = learner();
    rank_1->rank = 1;
    rank_1->from_rank_0 = [calls = 0](int64_t mine) mutable { return calls++ == 0 ? mine : int64_t{1}; };
    const auto elsewhere = temp_path("resume_elsewhere.pt");
    rank_1->remove_cb(rank_1->get_cb<ResumeFromCheckpoint>());
    rank_1->add_cb(ResumeFromCheckpoint(elsewhere));
    CHECK(error_of([&] { rank_1->fit(3); }) ==
          in_before_fit + "checkpoint '" + elsewhere + "': rank 0 finds fit 1's, rank 1 finds none; every rank reads rank 0's "
          "checkpoint: put it on a file system all nodes share");
    auto again = learner();  // the same fit resumes
    again->fit(3);
    CHECK(again->get_cb<ResumeFromCheckpoint>()->resumed_from() == 2);
    CHECK(!std::filesystem::exists(path));
  }
}
