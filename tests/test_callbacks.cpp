// The concrete callbacks: trackers (EarlyStopping, ReduceLROnPlateau, SaveModel),
// TerminateOnNaN, GradientClip, CSVLogger, and the progress table.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "callbacks/tensorboard_events.h"
#include "core/autocast.h"
#include "helpers.h"
#include "learner/train_eval.h"

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

// A metric whose value in epoch e is values[e]: drives the trackers exactly.
class Scripted : public Metric {
 public:
  explicit Scripted(std::vector<double> values) : values_(std::move(values)) {}
  std::string name() const override { return "scripted_loss"; }
  void reset() override {}
  void accumulate(const Learner& learn) override { epoch_ = learn.epoch; }
  double value() const override { return values_.at(static_cast<size_t>(epoch_)); }

 private:
  std::vector<double> values_;
  int epoch_ = 0;
};

std::vector<std::string> file_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The weights after each epoch, to compare with those a callback reloads.
struct KeepWeights : Callback {
  KeepWeights() { order = 70; }
  void after_epoch() override { per_epoch.push_back(snapshot(learn().model.module())); }
  std::vector<std::vector<torch::Tensor>> per_epoch;
};

struct Tracked {
  explicit Tracked(std::vector<double> values, std::vector<CallbackPtr> cbs)
      : learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {std::make_shared<Scripted>(std::move(values))},
              quiet({.cbs = std::move(cbs)})) {
    silence(learn, &lines);
  }
  std::vector<std::string> lines;
  Learner learn;
};

}  // namespace

TEST_SUITE("callbacks") {
  TEST_CASE("EarlyStopping stops after `patience` epochs without improvement") {
    Tracked t({0.5, 0.4, 0.45, 0.46, 0.3, 0.2},
              {std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "scripted_loss", .patience = 2})});
    t.learn.fit(6);
    CHECK(t.learn.recorder->values.size() == 4);
    CHECK(t.lines.back() == "No improvement since epoch 1: early stopping");
  }

  TEST_CASE("EarlyStopping on any value with comp: a 'loss' that should grow, with Comp::higher") {
    // Inferred from the name, 0.5 -> 0.6 -> 0.7 gets worse; told that higher is better, it improves.
    Tracked inferred({0.5, 0.6, 0.7, 0.8}, {std::make_shared<EarlyStopping>(
                                               EarlyStoppingOptions{.monitor = "scripted_loss", .patience = 1})});
    inferred.learn.fit(4);
    CHECK(inferred.learn.recorder->values.size() == 2);
    Tracked higher({0.5, 0.6, 0.7, 0.65, 0.6}, {std::make_shared<EarlyStopping>(EarlyStoppingOptions{
                                                    .monitor = "scripted_loss", .comp = Comp::higher, .patience = 1})});
    higher.learn.fit(5);
    CHECK(higher.learn.recorder->values.size() == 4);
    CHECK(higher.lines.back() == "No improvement since epoch 2: early stopping");
  }

  TEST_CASE("min_delta: a value is better only when it beats the best by more than min_delta, as in fastai") {
    auto stopper = [](Comp comp) {
      return std::make_shared<EarlyStopping>(
          EarlyStoppingOptions{.monitor = "scripted_loss", .min_delta = 0.1, .comp = comp, .patience = 3});
    };
    // fastai: 0.95 and 0.92 are within 0.1 of 1.0, 0.85 beats it by more, 0.8 is within 0.1 of 0.85
    auto lower = stopper(Comp::infer);
    Tracked loss({1.0, 0.95, 0.85, 0.8}, {lower});
    loss.learn.fit(4);
    CHECK(lower->best() == 0.85);
    auto higher = stopper(Comp::higher);  // 0.45 is worse, 0.55 is not better by more than 0.1
    Tracked metric({0.5, 0.45, 0.55}, {higher});
    metric.learn.fit(3);
    CHECK(higher->best() == 0.5);
    Tracked stalled({1.0, 0.95, 0.92, 0.91, 0.5}, {stopper(Comp::infer)});
    stalled.learn.fit(5);
    CHECK(stalled.learn.recorder->values.size() == 4);
    CHECK(stalled.lines.back() == "No improvement since epoch 0: early stopping");
  }

  TEST_CASE("epochs a resumed fit skips count for nothing: EarlyStopping and ReduceLROnPlateau wait for trained ones") {
    auto reduce = std::make_shared<ReduceLROnPlateau>(
        ReduceLROnPlateauOptions{.monitor = "scripted_loss", .patience = 1, .factor = 10});
    auto early = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "scripted_loss", .patience = 2});
    Tracked t({9, 9, 9, 0.5, 0.4}, {reduce, early});
    t.learn.fit(5, 1e-2, {.start_epoch = 3});
    REQUIRE(t.learn.recorder->values.size() == 5);
    CHECK(std::isfinite(t.learn.recorder->values.back()[0]));  // epoch 4 trained
    CHECK(t.learn.opt->hyper("lr")[0] == doctest::Approx(1e-2).epsilon(1e-12));
    CHECK(early->best() == 0.4);
    CHECK(t.lines.empty());
  }

  TEST_CASE("a fit resumed from its checkpoint goes on with the trackers' best values and epochs without improvement") {
    const auto dir = temp_path("resume_trackers");
    std::filesystem::remove_all(dir);
    const std::vector<double> values{0.5, 0.3, 0.4, 0.45, 0.35, 0.2};
    struct CrashAfterEpoch2 : Callback {  // after the checkpoint of epoch 2 is written
      CrashAfterEpoch2() { order = 80; }
      void after_epoch() override {
        if (learn().epoch == 2) throw std::runtime_error("preempted");
      }
    };
    auto callbacks = [&](std::vector<CallbackPtr> more) {
      std::vector<CallbackPtr> cbs{
          std::make_shared<SaveModel>(SaveModelOptions{.monitor = "scripted_loss", .model_dir = dir}),
          std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "scripted_loss", .patience = 3}),
          std::make_shared<ResumeFromCheckpoint>(dir + "/resume.pt")};
      cbs.insert(cbs.end(), more.begin(), more.end());
      return cbs;
    };
    auto keep = std::make_shared<KeepWeights>();
    Tracked first(values, callbacks({keep, std::make_shared<CrashAfterEpoch2>()}));
    CHECK_THROWS_AS(first.learn.fit(6, 1e-2), Error);
    Tracked restarted(values, callbacks({}));
    restarted.learn.fit(6, 1e-2);
    // As the uninterrupted run: 0.3 at epoch 1 stays the best, epoch 4 is the third without improvement.
    CHECK(restarted.learn.get_cb<SaveModel>()->best() == 0.3);
    CHECK(restarted.lines == std::vector<std::string>{"resuming from '" + dir + "/resume.pt' at epoch 3",
                                                      "No improvement since epoch 1: early stopping"});
    CHECK(all_equal(snapshot(restarted.learn.model.module()), keep->per_epoch[1]));  // SaveModel's best, loaded
    CHECK_FALSE(std::filesystem::exists(dir + "/resume.pt"));  // stopped early: nothing to resume
    // A fit that ran all its epochs leaves nothing to resume, although SaveModel's reload of
    // epoch 0 set learn.epoch back; a second run of the program trains again.
    Tracked complete({0.3, 0.4}, callbacks({}));
    complete.learn.fit(2, 1e-2);
    CHECK_FALSE(std::filesystem::exists(dir + "/resume.pt"));
    Tracked again({0.3, 0.4}, callbacks({}));
    again.learn.fit(2, 1e-2);
    CHECK(again.learn.train_iter == complete.learn.train_iter);
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("a resume checkpoint whose extras are numbers of the wrong kind is an Error naming them") {
    const auto path = temp_path("resume_extras.pt");
    Tracked t({0.5}, {std::make_shared<ResumeFromCheckpoint>(path)});
    t.learn.save(path, true, {{"fit", 1.5}});
    const auto failed = "Exception occurred in `ResumeFromCheckpoint` when calling event `before_fit`:\n\tcannot read "
                        "checkpoint '" + path + "': its extra 'fit' ";
    CHECK(error_of([&] { t.learn.fit(1, 1e-2); }) == failed + "is not an integer");
    t.learn.save(path, true, {{"fit", int64_t{0}}});
    CHECK(error_of([&] { t.learn.fit(1, 1e-2); }) == failed + "is 0, not a fit's number");
    SaveModel tracker;
    CHECK(error_of([&] { tracker.load_state({{"wait", std::nan("")}}); }) ==
          "TrackerCallback: a saved 'wait' of nan epochs");
    std::filesystem::remove(path);
  }

  TEST_CASE("ReduceLROnPlateau divides the lr by factor on each plateau") {
    Tracked t({0.5, 0.6, 0.4, 0.7, 0.8},
              {std::make_shared<ReduceLROnPlateau>(ReduceLROnPlateauOptions{.monitor = "scripted_loss", .patience = 1, .factor = 10})});
    t.learn.fit(5, 1e-2);
    CHECK(t.learn.opt->hyper("lr")[0] == doctest::Approx(1e-5).epsilon(1e-12));
    CHECK(t.lines.back() == "Epoch 4: reducing lr to 1e-05");
  }

  TEST_CASE("SaveModel keeps the best epoch's weights and loads them at the end") {
    const auto dir = (std::filesystem::temp_directory_path() / ("fastcpp_save_" + std::to_string(::getpid()))).string();
    auto keep = std::make_shared<KeepWeights>();
    Tracked t({0.5, 0.3, 0.4}, {std::make_shared<SaveModel>(SaveModelOptions{.monitor = "scripted_loss", .model_dir = dir}), keep});
    t.learn.fit(3, 1e-2);
    CHECK(std::filesystem::exists(dir + "/model.pt"));
    CHECK(all_equal(snapshot(t.learn.model.module()), keep->per_epoch[1]));
    CHECK(t.lines == std::vector<std::string>{"Better model found at epoch 0 with scripted_loss value: 0.5.",
                                              "Better model found at epoch 1 with scripted_loss value: 0.3."});
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("SaveModel loads a best value of -inf where lower is better (a perfect fit's log loss)") {
    const auto dir = temp_path("save_infinite");
    std::filesystem::remove_all(dir);
    auto keep = std::make_shared<KeepWeights>();
    Tracked t({0.5, -std::numeric_limits<double>::infinity(), 0.4},
              {std::make_shared<SaveModel>(SaveModelOptions{.monitor = "scripted_loss", .model_dir = dir}), keep});
    t.learn.fit(3, 1e-2);
    CHECK(all_equal(snapshot(t.learn.model.module()), keep->per_epoch[1]));
    CHECK(t.lines.size() == 2);
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("reset_on_fit false: the best of an earlier fit stays the one to beat, as fastai's reset_on_fit=False") {
    auto kept = std::make_shared<EarlyStopping>(
        EarlyStoppingOptions{.monitor = "scripted_loss", .patience = 1, .reset_on_fit = false});
    auto reset = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "scripted_loss", .patience = 1});
    Tracked once({0.5, 0.3}, {kept}), again({0.5, 0.3}, {reset});
    for (auto* t : {&once, &again}) t->learn.fit(2);
    for (auto* t : {&once, &again}) t->learn.fit(2);  // epoch 0's 0.5 again: worse than 0.3 unless reset
    CHECK(once.learn.recorder->values.size() == 1);
    CHECK(once.lines.back() == "No improvement on an earlier fit's best: early stopping");
    CHECK(kept->best() == 0.3);
    CHECK(again.learn.recorder->values.size() == 2);
    CHECK(again.lines.empty());

    const auto dir = temp_path("save_kept_best");
    std::filesystem::remove_all(dir);
    auto keep = std::make_shared<KeepWeights>();
    Tracked saved({0.5, 0.3, 0.4}, {std::make_shared<SaveModel>(SaveModelOptions{
                                        .monitor = "scripted_loss", .model_dir = dir, .reset_on_fit = false}),
                                    keep});
    saved.learn.fit(2, 1e-2);
    saved.learn.fit(3, 1e-2);  // nothing beats the first fit's 0.3: its weights come back
    CHECK(all_equal(snapshot(saved.learn.model.module()), keep->per_epoch[1]));
    CHECK(saved.lines.size() == 2);
    CHECK(saved.learn.epochs_before == 5);  // the reload leaves the count of epochs trained as it is
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("SaveModel loads only what this fit saved: a file of an earlier run stays unread when nothing improved") {
    const auto dir = temp_path("save_stale");
    std::filesystem::remove_all(dir);
    auto keep = std::make_shared<KeepWeights>();
    const double nan = std::nan("");
    Tracked t({nan, nan},
              {std::make_shared<SaveModel>(SaveModelOptions{.monitor = "scripted_loss", .model_dir = dir}), keep});
    std::filesystem::create_directories(dir);
    t.learn.save(dir + "/model.pt");  // an earlier run's best
    t.learn.fit(2, 1e-2);
    CHECK(all_equal(snapshot(t.learn.model.module()), keep->per_epoch[1]));
    CHECK(t.lines.empty());
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("a fit from start_epoch: the rows of the skipped epochs hold no values of an earlier validation") {
    const auto path = temp_path("skipped_rows.csv");
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {},
                  quiet({.cbs = {std::make_shared<CSVLogger>(path)}}));
    silence(learn);
    learn.validate();
    learn.fit(3, 1e-2, {.start_epoch = 2});
    REQUIRE(learn.recorder->values.size() == 3);
    CHECK(std::isnan(learn.recorder->values[0][0]));
    CHECK(std::isnan(learn.recorder->values[0][1]));
    const auto lines = file_lines(path);
    REQUIRE(lines.size() == 4);
    CHECK(lines[1] == "0,,,00:00");
    std::filesystem::remove(path);
  }

  TEST_CASE("CSVLogger sits out lr_find: the history of the fit before stays") {
    const auto path = temp_path("history_lr_find.csv");
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {},
                  quiet({.cbs = {std::make_shared<CSVLogger>(path)}}));
    silence(learn);
    learn.fit(1, 1e-2);
    learn.lr_find({.num_it = 12, .stop_div = false, .plot = ""});
    const auto lines = file_lines(path);
    REQUIRE(lines.size() == 2);
    CHECK(lines[0] == "epoch,train_loss,valid_loss,time");
    CHECK(lines[1].rfind("0,", 0) == 0);
    std::filesystem::remove(path);
  }

  TEST_CASE("a fit that fails puts back what its start changed: autocast off, lr_find's weights restored") {
    struct FailsAtBatch : Callback {
      explicit FailsAtBatch(int64_t at) : at(at) {}
      void after_loss() override {
        if (learn().train_iter == at) throw std::runtime_error("out of memory");
      }
      int64_t at;
    };
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    learn.to_bf16();
    CHECK_THROWS_AS(learn.fit(1, 1e-2, {.cbs = {std::make_shared<FailsAtBatch>(1)}}), Error);
    CHECK_FALSE(at::autocast::is_autocast_enabled(at::kCPU));  // later predictions are not bf16
    learn.to_fp32();
    const auto before = snapshot(learn.model.module());
    learn.add_cb(std::make_shared<FailsAtBatch>(5));
    CHECK_THROWS_AS(learn.lr_find({.num_it = 20, .stop_div = false, .plot = ""}), Error);
    CHECK(all_equal(snapshot(learn.model.module()), before));
  }

  TEST_CASE("a callback's table columns leave with it: PeakMemMetric passed to one fit is not read by the next") {
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    learn.fit(1, 1e-2, {.cbs = {std::make_shared<PeakMemMetric>()}});
    CHECK(learn.recorder->values.back().size() == 6);  // the losses and its four columns
    learn.fit(1, 1e-2);  // the metric is gone: its columns must not be read
    CHECK(learn.recorder->metric_names() == std::vector<std::string>{"epoch", "train_loss", "valid_loss", "time"});
    CHECK(learn.recorder->values.back().size() == 2);
  }

  TEST_CASE("a cancel raised where nothing it cancels is running is an Error naming it and the batch") {
    struct CancelsTooLate : Callback {
      void after_batch() override { throw CancelBatchException(); }
    };
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    CHECK(error_of([&] { learn.fit(1, 1e-2, {.cbs = {std::make_shared<CancelsTooLate>()}}); }) ==
          "CancelBatchException was raised where nothing it cancels was running (training batch 0 of epoch 0); each is "
          "caught only inside what it names, as in fastai");
  }

  TEST_CASE("a tracker names the values it could monitor") {
    Tracked t({0.5}, {std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "acuracy"})});
    CHECK(error_of([&] { t.learn.fit(1); }) ==
          "Exception occurred in `EarlyStopping` when calling event `before_train`:\n\tcannot monitor 'acuracy': "
          "the recorded values are train_loss, valid_loss, scripted_loss");
    CHECK(t.learn.train_iter == 0);  // refused before an epoch's training, not after it
  }

  TEST_CASE("after a failed fit every callback runs again, as after_fit would have made it (trackers sit out lr_find)") {
    Tracked t({0.5, 0.4}, {std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "scripted_loss"})});
    struct FailsInBatch : Callback {
      void after_batch() override { throw std::runtime_error("out of memory"); }
    };
    CHECK_THROWS_AS(t.learn.fit(1, {}, {.cbs = {std::make_shared<LRFinder>(), std::make_shared<FailsInBatch>()}}),
                    Error);
    CHECK(t.learn.get_cb<EarlyStopping>()->run);
  }

  TEST_CASE("callbacks refuse arguments that cannot work, naming them") {
    CHECK(error_of([] { SaveModel({.every_epoch = -1}); }) ==
          "SaveModel: every_epoch must be >= 0 (0: save the best), got -1");
    CHECK(error_of([] { ReduceLROnPlateau({.factor = 0.5}); }) ==
          "ReduceLROnPlateau: factor must be > 1 (the lr is divided by it), got 0.5");
    CHECK(error_of([] { ReduceLROnPlateau({.min_lr = -1e-3}); }) == "ReduceLROnPlateau: min_lr must be >= 0, got -0.001");
    CHECK(error_of([] { LRFinder(1e-3, 1e-5); }) == "LRFinder: need 0 < start_lr < end_lr, got start_lr 0.001 and end_lr 1e-05");
    CHECK(error_of([] { LRFinder(0, 10); }) == "LRFinder: need 0 < start_lr < end_lr, got start_lr 0 and end_lr 10");
    CHECK(error_of([] { LRFinder(1e-7, 10, 0); }) == "LRFinder: num_it must be positive, got 0");
    CHECK(error_of([] { GradientClip(-1); }) == "GradientClip: max_norm must be positive, got -1");
    CHECK(error_of([] { GradientClip(1, 0); }) == "GradientClip: norm_type must be positive, got 0");
  }

  TEST_CASE("BnFreeze keeps the running statistics of frozen BatchNorm layers, as fastai's; trainable ones still move") {
    // A layer holding a synced BatchNorm, as a ResNet's blocks do.
    struct NormBlockImpl : torch::nn::Cloneable<NormBlockImpl> {
      NormBlockImpl() { reset(); }
      void reset() override { norm = register_module("norm", distributed::SyncBatchNorm(4)); }
      torch::Tensor forward(const torch::Tensor& x) { return norm(x); }
      distributed::SyncBatchNorm norm{nullptr};
    };
    // A body (the first group) frozen with train_bn = false: its BatchNorm's parameters too.
    // Two epochs: from the second on, a validation has put every layer in eval mode between.
    auto run = [](bool with_bn_freeze, bool parallel = false) {
      torch::manual_seed(0);
      torch::nn::BatchNorm1d body_bn(4), head_bn(4);
      torch::nn::ModuleHolder<NormBlockImpl> block;
      torch::nn::Sequential model(torch::nn::Linear(4, 4), body_bn, block, torch::nn::Linear(4, 4), head_bn,
                                  torch::nn::Linear(4, 2));
      auto data = std::make_shared<TensorDataset>(torch::randn({16, 4}) * 3 + 1, torch::randint(2, {16}, torch::kLong));
      std::vector<CallbackPtr> cbs;
      if (with_bn_freeze) cbs.push_back(std::make_shared<BnFreeze>());
      Learner learn({DataLoader(data, {.bs = 8}), DataLoader(data, {.bs = 8})}, model, CrossEntropyLoss(), {},
                    quiet({.train_bn = false, .cbs = cbs, .splitter = split_after(3), .frozen = true}));
      silence(learn);
      if (parallel) learn.to_parallel({torch::kCPU, torch::kCPU});  // its replicas follow each layer's mode
      learn.fit(2);
      return std::tuple{body_bn->running_mean.clone(), block->norm->running_mean.clone(),
                        head_bn->running_mean.clone()};
    };
    const auto [body, nested, head] = run(true);
    CHECK(torch::equal(body, torch::zeros({4})));
    CHECK(torch::equal(nested, torch::zeros({4})));
    CHECK_FALSE(torch::equal(head, torch::zeros({4})));
    const auto [drifting_body, drifting_nested, drifting_head] = run(false);  // without it, they drift
    CHECK_FALSE(torch::equal(drifting_body, torch::zeros({4})));
    CHECK_FALSE(torch::equal(drifting_nested, torch::zeros({4})));
    const auto [parallel_body, parallel_nested, parallel_head] = run(true, true);
    CHECK(torch::equal(parallel_body, torch::zeros({4})));
    CHECK(torch::equal(parallel_nested, torch::zeros({4})));
    CHECK(torch::allclose(parallel_head, head, 1e-5, 1e-6));
  }

  TEST_CASE("TerminateOnNaN stops the fit naming the batch, training or validation") {
    auto nan_after_two = [calls = std::make_shared<int>(0)](const torch::Tensor& pred, const torch::Tensor& target) {
      auto loss = torch::nn::functional::cross_entropy(pred, target);
      return ++*calls > 2 ? loss * std::nan("") : loss;
    };
    auto stop = std::make_shared<TerminateOnNaN>();
    Learner learn(synthetic_dls(8, 4, 2), tiny_model(), Loss(nan_after_two), {}, quiet({.cbs = {stop}}));
    std::vector<std::string> lines;
    silence(learn, &lines);
    learn.fit(3);
    CHECK(stop->reason() ==
          "TerminateOnNaN: the training loss is nan at training batch 2 of epoch 0; stopping the fit (try a lower "
          "learning rate, or gradient clipping)");
    CHECK(learn.recorder->values.empty());  // stopped inside the first epoch
    // A validation loss too, as fastai's: 2 training batches, then the first validation batch.
    auto nan_in_validation = [calls = std::make_shared<int>(0)](const torch::Tensor& pred, const torch::Tensor& target) {
      auto loss = torch::nn::functional::cross_entropy(pred, target);
      return ++*calls > 2 ? loss * std::nan("") : loss;
    };
    auto stop_valid = std::make_shared<TerminateOnNaN>();
    Learner valid_nan(synthetic_dls(8, 4, 4), tiny_model(), Loss(nan_in_validation), {}, quiet({.cbs = {stop_valid}}));
    silence(valid_nan, &lines);
    valid_nan.fit(3);
    CHECK(stop_valid->reason() ==
          "TerminateOnNaN: the validation loss is nan at validation batch 0 of epoch 0; stopping the fit (try a lower "
          "learning rate, or gradient clipping)");
    // Outside a fit there is nothing to cancel: validate's error says so.
    CHECK(error_of([&] { valid_nan.validate(); }) ==
          "CancelFitException was raised where nothing it cancels was running (validation batch 0 of epoch 0); each is "
          "caught only inside what it names, as in fastai");
  }

  TEST_CASE("GradientClip bounds the gradient norm seen by the step") {
    struct NormProbe : Callback {
      NormProbe() { order = 20; }
      void before_step() override {
        double sq = 0;
        for (const auto& p : learn().model.module().parameters()) sq += p.grad().pow(2).sum().item<double>();
        norms.push_back(std::sqrt(sq));
      }
      std::vector<double> norms;
    };
    auto probe = std::make_shared<NormProbe>();
    Learner learn(synthetic_dls(), tiny_model(), Loss([](const torch::Tensor& p, const torch::Tensor&) { return 100 * p.sum(); }),
                  {}, quiet({.cbs = {std::make_shared<GradientClip>(0.5), probe}}));
    silence(learn);
    learn.fit(1);
    REQUIRE(probe->norms.size() == 4);
    for (double norm : probe->norms) CHECK(norm == doctest::Approx(0.5).epsilon(1e-5));
  }

  TEST_CASE("ShowGraph rewrites its PNG after every epoch") {
    const auto path = temp_path("show_graph.png");
    std::filesystem::remove(path);
    struct Watch : Callback {  // the file as each epoch left it
      explicit Watch(std::string p) : path(std::move(p)) { order = 70; }
      void after_epoch() override {
        std::ifstream in(path, std::ios::binary);
        seen.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      }
      std::string path;
      std::vector<std::string> seen;
    };
    auto watch = std::make_shared<Watch>(path);
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {},
                  quiet({.cbs = {std::make_shared<ShowGraph>(path), watch}}));
    silence(learn);
    learn.fit(2, 1e-2);
    REQUIRE(watch->seen.size() == 2);
    for (const auto& png : watch->seen) CHECK(png.rfind("\x89PNG\r\n\x1a\n", 0) == 0);
    CHECK(watch->seen[0] != watch->seen[1]);  // a second epoch's losses drawn
    learn.remove_cb(watch);
    learn.lr_find({.num_it = 12, .stop_div = false, .plot = ""});
    std::ifstream in(path, std::ios::binary);
    const std::string after{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    CHECK(after == watch->seen[1]);  // lr_find's epochs do not draw over the fit's graph (as fastai's)
  }

  TEST_CASE("CSVLogger writes the header and one row per epoch") {
    const auto path = (std::filesystem::temp_directory_path() / ("fastcpp_hist_" + std::to_string(::getpid()) + ".csv")).string();
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {metrics::accuracy()},
                  quiet({.cbs = {std::make_shared<CSVLogger>(path)}}));
    silence(learn);
    learn.fit(3);
    const auto rows = file_lines(path);
    REQUIRE(rows.size() == 4);
    CHECK(rows[0] == "epoch,train_loss,valid_loss,accuracy,time");
    CHECK(rows[3].rfind("2,", 0) == 0);
    // The values exactly, as fastai's str(float), not the table's six decimals
    for (size_t epoch = 0; epoch < 3; ++epoch) {
      std::istringstream row(rows[epoch + 1]);
      std::vector<std::string> cells;
      for (std::string cell; std::getline(row, cell, ',');) cells.push_back(cell);
      REQUIRE(cells.size() == 5);
      for (size_t i = 0; i < 3; ++i) CHECK(std::stod(cells[i + 1]) == learn.recorder->values[epoch][i]);
    }
    std::filesystem::remove(path);
  }

  TEST_CASE("CSVLogger: a fit that failed leaves it usable; a rank other than 0 writes nothing") {
    const auto path = temp_path("history_retry.csv");
    std::filesystem::remove(path);
    auto logger = std::make_shared<CSVLogger>(path);
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet({.cbs = {logger}}));
    silence(learn);
    struct FailsInEpoch1 : Callback {
      void after_epoch() override {
        if (learn().epoch == 1) throw std::runtime_error("disk full");
      }
    };
    CHECK_THROWS_AS(learn.fit(3, {}, {.cbs = {std::make_shared<FailsInEpoch1>()}}), Error);
    learn.fit(2);  // the file the failed fit left open is opened again, not refused
    CHECK(file_lines(path).size() == 3);
    std::filesystem::remove(path);
    learn.rank = 1;
    learn.fit(1);
    CHECK_FALSE(std::filesystem::exists(path));
  }

  TEST_CASE("CSVLogger in append mode adds a second fit's rows under the first's header") {
    const auto path = temp_path("history_append.csv");
    std::filesystem::remove(path);
    for (int fit = 0; fit < 2; ++fit) {
      Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {},
                    quiet({.cbs = {std::make_shared<CSVLogger>(path, /*append=*/true)}}));
      silence(learn);
      learn.fit(2);
    }
    const auto rows = file_lines(path);
    REQUIRE(rows.size() == 5);  // one header, 2 + 2 rows
    CHECK(rows[0] == "epoch,train_loss,valid_loss,time");
    CHECK(rows[2].rfind("1,", 0) == 0);
    CHECK(rows[3].rfind("0,", 0) == 0);
    CHECK(rows[4].rfind("1,", 0) == 0);
    // A fit with another column (a metric named with a comma): its rows under a header of its own.
    const auto half = [](const torch::Tensor&, const torch::Tensor&) { return torch::tensor(0.5); };
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {metrics::from_fn("f1, \"macro\"", half)},
                  quiet({.cbs = {std::make_shared<CSVLogger>(path, /*append=*/true)}}));
    silence(learn);
    learn.fit(1);
    const auto more = file_lines(path);
    REQUIRE(more.size() == 7);
    CHECK(more[5] == "epoch,train_loss,valid_loss,\"f1, \"\"macro\"\"\",time");
    CHECK(more[6].find(",0.5,") != std::string::npos);
    std::filesystem::remove(path);
  }

  TEST_CASE("SaveModel every_epoch writes one checkpoint per epoch, each that epoch's weights") {
    const auto dir = temp_path("save_every");
    std::filesystem::remove_all(dir);
    auto keep = std::make_shared<KeepWeights>();
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {},
                  quiet({.cbs = {std::make_shared<SaveModel>(SaveModelOptions{.model_dir = dir, .every_epoch = true}), keep}}));
    silence(learn);
    learn.fit(3, 1e-2);
    for (int epoch = 0; epoch < 3; ++epoch) {
      CAPTURE(epoch);
      Learner reloaded(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
      reloaded.load(dir + "/model_" + std::to_string(epoch) + ".pt", /*with_opt=*/false);
      CHECK(all_equal(snapshot(reloaded.model.module()), keep->per_epoch[static_cast<size_t>(epoch)]));
    }
    CHECK_FALSE(std::filesystem::exists(dir + "/model.pt"));
    std::filesystem::remove_all(dir);
    // every_epoch = n: epochs 0, n, 2n, ... as fastai's
    const auto every_second_epoch = std::make_shared<SaveModel>(SaveModelOptions{.model_dir = dir, .every_epoch = 2});
    Learner every_second(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet({.cbs = {every_second_epoch}}));
    silence(every_second);
    every_second.fit(5, 1e-2);
    std::set<std::string> saved;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) saved.insert(entry.path().filename().string());
    CHECK(saved == std::set<std::string>{"model_0.pt", "model_2.pt", "model_4.pt"});
    std::filesystem::remove_all(dir);
    // with at_end, fastai's: the final model as well, under fname (epoch 3 of 4 is not among every second)
    Learner at_end(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {},
                   quiet({.cbs = {std::make_shared<SaveModel>(SaveModelOptions{.model_dir = dir, .every_epoch = 2,
                                                                               .at_end = true})}}));
    silence(at_end);
    at_end.fit(4, 1e-2);
    Learner reloaded(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    reloaded.load(dir + "/model.pt", /*with_opt=*/false);
    CHECK(all_equal(snapshot(reloaded.model.module()), snapshot(at_end.model.module())));
    CHECK(std::filesystem::exists(dir + "/model_2.pt"));
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("a live progress bar is cleared when a fit fails, so that the error starts on a clean line") {
    struct FailsInBatch : Callback {
      void after_batch() override {
        if (learn().iter == 1) throw std::runtime_error("out of memory");
      }
    };
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {},
                  quiet({.cbs = {std::make_shared<ProgressCallback>(true), std::make_shared<FailsInBatch>()}}));
    silence(learn);
    std::ostringstream out;
    auto* const previous = std::cout.rdbuf(out.rdbuf());
    CHECK_THROWS_AS(learn.fit(1), Error);
    std::cout.rdbuf(previous);
    const std::string text = out.str();
    REQUIRE(text.find("train [") != std::string::npos);  // the bar was drawn
    CHECK(text.substr(text.size() - 4) == "\r\033[K");
  }

  TEST_CASE("a live bar is cleared before any logged line: an epoch or fit cancelled mid-phase leaves none behind") {
    struct CancelsMidPhase : Callback {  // epoch 0 cancelled in its second batch, the fit in epoch 1's
      void after_batch() override {
        if (!learn().training || learn().iter != 1) return;
        if (learn().epoch == 1) throw CancelFitException();  // nothing logged: the fit's end clears the bar
        learn().logger("stopping");
        throw CancelEpochException();
      }
    };
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {},
                  quiet({.cbs = {std::make_shared<ProgressCallback>(true), std::make_shared<CancelsMidPhase>()}}));
    std::ostringstream out;
    learn.logger = [&](const std::string& line) { out << line << "\n"; };
    auto* const previous = std::cout.rdbuf(out.rdbuf());
    learn.fit(3);
    std::cout.rdbuf(previous);
    const std::string text = out.str();
    REQUIRE(text.find("train [") != std::string::npos);
    std::istringstream lines(text);
    int logged = 0;
    for (std::string line; std::getline(lines, line);) {
      CAPTURE(line);
      const auto bar = line.rfind("train ["), cleared = line.rfind("\r\033[K");
      CHECK((bar == std::string::npos || (cleared != std::string::npos && cleared > bar)));
      logged += line.find("stopping") != std::string::npos;
    }
    CHECK(logged == 1);
    CHECK(text.substr(text.size() - 4) == "\r\033[K");
    learn.logger("after");  // the Learner's own logger back
    CHECK(out.str().substr(text.size()) == "after\n");
  }

  TEST_CASE("the progress table: a header and one row per epoch when not on a terminal") {
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {metrics::accuracy()},
                  quiet({.cbs = {std::make_shared<ProgressCallback>(false)}}));
    std::vector<std::string> lines;
    silence(learn, &lines);
    learn.fit(2);
    REQUIRE(lines.size() == 3);
    CHECK(lines[0] == "epoch       train_loss  valid_loss  accuracy    time      ");
    CHECK(lines[1].rfind("0           ", 0) == 0);
    CHECK(lines[2].substr(lines[2].size() - 10) == "00:00     ");
    // values in the row are the recorder's
    char expected[32];
    std::snprintf(expected, sizeof expected, "%.6f", learn.recorder->values[1][1]);
    CHECK(lines[2].find(expected) != std::string::npos);
  }

  TEST_CASE("TensorBoardLogger: TensorBoard's own reader gets back each step's loss and hypers, each epoch's metrics, the histograms") {
    const auto dir = temp_path("runs");
    Learner learn(synthetic_dls(16, 8, 4), tiny_model(), CrossEntropyLoss(), {metrics::accuracy()},
                  quiet({.splitter = two_groups}));
    silence(learn);
    auto logger = learn.add_cb(TensorBoardLogger(dir, {.histograms = true}));
    learn.fit_one_cycle(2, slice(1e-3, 1e-2));
    // tag -> [(step, value)] from "scalar <tag> <step> <value>" lines
    std::map<std::string, std::vector<std::pair<int64_t, double>>> scalars;
    std::map<std::string, std::vector<double>> histograms;  // tag -> num, sum, min, max, buckets
    std::istringstream lines(output_of(std::string(FASTCPP_PYTHON) + " " + FASTCPP_FIXTURES + "/read_tensorboard.py " +
                                       logger->path()));
    for (std::string kind, tag; lines >> kind >> tag;) {
      int64_t step = 0;
      lines >> step;
      if (kind == "scalar") {
        double value = 0;
        lines >> value;
        scalars[tag].emplace_back(step, value);
      } else {
        std::vector<double> fields(5);
        for (auto& f : fields) lines >> f;
        histograms[tag] = fields;
      }
    }
    const auto& r = *learn.recorder;
    REQUIRE(scalars["train_loss"].size() == 8);  // 4 batches x 2 epochs
    for (size_t i = 0; i < 8; ++i) {
      CAPTURE(i);
      CHECK(scalars["train_loss"][i] == std::make_pair(static_cast<int64_t>(i + 1), double(float(r.losses[i]))));
      CHECK(scalars["lr_1"][i].second == double(float(r.lrs[i])));  // the Recorder keeps the last group's
      CHECK(scalars["mom_1"][i].second == double(float(r.moms[i])));
      CHECK(scalars["lr_0"][i].second == doctest::Approx(r.lrs[i] / 10).epsilon(1e-6));  // slice(1e-3, 1e-2)
    }
    CHECK(scalars["wd_0"].size() == 8);
    for (size_t epoch = 0; epoch < 2; ++epoch) {
      const auto step = static_cast<int64_t>(4 * (epoch + 1));
      CHECK(scalars["valid_loss"][epoch] == std::make_pair(step, double(float(r.values[epoch][1]))));
      CHECK(scalars["accuracy"][epoch] == std::make_pair(step, double(float(r.values[epoch][2]))));
    }
    REQUIRE(histograms.size() == learn.model.module().parameters().size());
    const auto weight = learn.model.module().named_parameters()["0.weight"];
    CHECK(histograms["weights/0.weight"][0] == weight.numel());
    CHECK(histograms["weights/0.weight"][1] == doctest::Approx(weight.to(torch::kDouble).sum().item<double>()));
    CHECK(histograms["weights/0.weight"][2] == weight.min().item<float>());
    CHECK(histograms["weights/0.weight"][4] == 30);
    {  // a diverged weight: its histogram is of the finite values
      EventFileWriter diverged(dir + "/diverged");
      diverged.histogram("w", 0, torch::tensor({1.0f, 2.0f, INFINITY, NAN, 4.0f}));
      diverged.flush();
      std::istringstream line(output_of(std::string(FASTCPP_PYTHON) + " " + FASTCPP_FIXTURES +
                                        "/read_tensorboard.py " + diverged.path()));
      std::string kind, tag;
      int64_t step = -1;
      std::vector<double> fields(5);
      line >> kind >> tag >> step;
      for (auto& f : fields) line >> f;
      CHECK(kind == "histogram");
      CHECK(fields == std::vector<double>{3, 7, 1, 4, 30});
    }
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("TensorBoardLogger: a file per fit, lr_find not logged, a cancelled or failed fit's last steps kept") {
    const auto dir = temp_path("runs_fits");
    std::filesystem::remove_all(dir);
    Learner learn(synthetic_dls(16, 8, 4), tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    auto logger = learn.add_cb(TensorBoardLogger(dir));
    learn.fit(1);
    const auto first = logger->path();
    learn.fit(1);  // within the same second, as fine_tune's two fits on small data
    CHECK(logger->path() != first);
    learn.lr_find({.num_it = 12, .stop_div = false, .plot = ""});
    auto files = [&] {
      size_t n = 0;
      for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++n;
      return n;
    };
    CHECK(files() == 2);

    struct StopAtBatch : Callback {  // as TerminateOnNaN: the fit cancelled after a batch
      StopAtBatch() { order = 70; }
      void after_batch() override {
        if (learn().training && learn().train_iter == 6) throw CancelFitException();
      }
    };
    const auto steps_of = [&](const std::string& tag_wanted) {
      std::istringstream lines(output_of(std::string(FASTCPP_PYTHON) + " " + FASTCPP_FIXTURES +
                                         "/read_tensorboard.py " + logger->path()));
      std::vector<int64_t> steps;
      for (std::string line; std::getline(lines, line);) {
        std::istringstream words(line);
        std::string kind, tag;
        int64_t step = 0;
        if (words >> kind >> tag >> step && tag == tag_wanted) steps.push_back(step);
      }
      return steps;
    };
    learn.fit(3, {}, {.cbs = {std::make_shared<StopAtBatch>()}});
    CHECK(steps_of("train_loss") == std::vector<int64_t>{1, 2, 3, 4, 5, 6});  // epoch 1's batches 5 and 6 too

    struct FailAtBatch : Callback {  // a fit that fails: its steps up to the failure, each with its loss
      FailAtBatch() { order = 70; }
      void after_batch() override {
        if (learn().training && learn().train_iter == 6) throw std::runtime_error("disk full");
      }
    };
    CHECK_THROWS_AS(learn.fit(3, {}, {.cbs = {std::make_shared<FailAtBatch>()}}), Error);
    CHECK(learn.recorder->losses.size() == 6);
    CHECK(steps_of("train_loss") == std::vector<int64_t>{1, 2, 3, 4, 5, 6});
    CHECK(steps_of("lr_0") == std::vector<int64_t>{1, 2, 3, 4, 5, 6});
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("docs/callbacks.md lists every built-in callback with its order in the code") {
    const std::map<std::string, int> in_code{
        {"TrainEvalCallback", TrainEvalCallback().order},
        {"TerminateOnNaN", TerminateOnNaN().order},
        {"BnFreeze", BnFreeze().order},
        {"ChannelsLast", ChannelsLast().order},
        {"MixUp", MixUp().order},
        {"CutMix", CutMix().order},
        {"GradientAccumulation", GradientAccumulation().order},
        {"MixedPrecision", MixedPrecision().order},
        {"GradientClip", GradientClip().order},
        {"DistributedTrainer", distributed::DistributedTrainer().order},
        {"DataParallel", distributed::DataParallel().order},
        {"PeakMemMetric", PeakMemMetric().order},
        {"Recorder", Recorder().order},
        {"ParamScheduler", ParamScheduler({}).order},
        {"LRFinder", LRFinder().order},
        {"ProgressCallback", ProgressCallback(false).order},
        {"CSVLogger", CSVLogger().order},
        {"TensorBoardLogger", TensorBoardLogger().order},
        {"SaveModel", SaveModel().order},
        {"ResumeFromCheckpoint", ResumeFromCheckpoint("checkpoint.pt").order},
        {"ReduceLROnPlateau", ReduceLROnPlateau().order},
        {"EarlyStopping", EarlyStopping().order},
        {"ShowGraph", ShowGraph().order},
        {"CudaGraphs", CudaGraphs().order},
        {"ProfileSteps", ProfileSteps({}).order}};
    // Rows "| `A`, `B` | order | ...": each name in the first cell has the second's order.
    std::ifstream doc(std::string(FASTCPP_FIXTURES) + "/../../docs/callbacks.md");
    REQUIRE(doc);
    std::map<std::string, int> in_doc;
    for (std::string line; std::getline(doc, line);) {
      if (line.rfind("| `", 0) != 0) continue;
      const auto second = line.find('|', 1);
      const auto third = line.find('|', second + 1);
      const int order = std::stoi(line.substr(second + 1, third - second - 1));
      std::string names = line.substr(1, second - 1);
      for (auto tick = names.find('`'); tick != std::string::npos; tick = names.find('`', tick)) {
        const auto end = names.find('`', tick + 1);
        in_doc[names.substr(tick + 1, end - tick - 1)] = order;
        tick = end + 1;
      }
    }
    CHECK(in_doc == in_code);
  }

  TEST_CASE("ProfileSteps profiles exactly its window of training steps and writes the trace") {
    const auto trace = temp_path("profile_steps.json");
    Learner learn(synthetic_dls(8, 4, 2), tiny_model(), CrossEntropyLoss(), {}, quiet());
    std::vector<std::string> lines;
    silence(learn, &lines);
    // 4 training steps an epoch; the window holds steps 1 and 2, each a forward through
    // the model's two Linear layers: one addmm apiece.
    auto profile = learn.add_cb(ProfileSteps({.skip = 1, .steps = 2, .trace = trace, .top = 1000}));
    learn.fit(1, 1e-2);
    const auto& summary = profile->summary();
    CHECK(summary.steps == 2);
    CHECK_FALSE(summary.on_gpu);
    CHECK(summary.wall_ms_per_step > 0);
    CHECK(summary.gpu_ms_per_step == 0);
    int64_t addmms = -1;
    for (const auto& entry : summary.top)
      if (entry.name == "aten::addmm") addmms = entry.count;
    CHECK(addmms == 4);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].rfind("profile of 2 steps: ", 0) == 0);
    std::ifstream file(trace);
    const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    CHECK(text.find("\"traceEvents\"") != std::string::npos);
    CHECK(text.find("aten::addmm") != std::string::npos);
    std::filesystem::remove(trace);
  }

  TEST_CASE("ProfileSteps closes its window when the fit ends inside it, and refuses an empty window") {
    Learner learn(synthetic_dls(8, 4, 2), tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    auto profile = learn.add_cb(ProfileSteps({.skip = 3, .steps = 5, .trace = "", .top = 1000}));
    learn.fit(1, 1e-2);
    CHECK(profile->summary().steps == 1);
    CHECK(error_of([] { ProfileSteps({.skip = 0, .steps = 0}); }) ==
          "ProfileSteps: skip must be >= 0 and steps >= 1 (got skip 0, steps 0)");
  }
}
