// The concrete callbacks: trackers (EarlyStopping, ReduceLROnPlateau, SaveModel),
// TerminateOnNaN, GradientClip, CSVLogger, and the progress table.
#include <filesystem>
#include <fstream>

#include "helpers.h"

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

  TEST_CASE("ReduceLROnPlateau divides the lr by factor on each plateau") {
    Tracked t({0.5, 0.6, 0.4, 0.7, 0.8},
              {std::make_shared<ReduceLROnPlateau>(ReduceLROnPlateauOptions{.monitor = "scripted_loss", .patience = 1, .factor = 10})});
    t.learn.fit(5, 1e-2);
    CHECK(t.learn.opt->hyper("lr")[0] == doctest::Approx(1e-5).epsilon(1e-12));
    CHECK(t.lines.back() == "Epoch 4: reducing lr to 1e-05");
  }

  TEST_CASE("SaveModel keeps the best epoch's weights and loads them at the end") {
    const auto dir = (std::filesystem::temp_directory_path() / ("fastcpp_save_" + std::to_string(::getpid()))).string();
    struct KeepWeights : Callback {  // weights after each epoch, to compare with the reloaded ones
      KeepWeights() { order = 70; }
      void after_epoch() override { per_epoch.push_back(snapshot(learn().model.module())); }
      std::vector<std::vector<torch::Tensor>> per_epoch;
    };
    auto keep = std::make_shared<KeepWeights>();
    Tracked t({0.5, 0.3, 0.4}, {std::make_shared<SaveModel>(SaveModelOptions{.monitor = "scripted_loss", .model_dir = dir}), keep});
    t.learn.fit(3, 1e-2);
    CHECK(std::filesystem::exists(dir + "/model.pt"));
    CHECK(all_equal(snapshot(t.learn.model.module()), keep->per_epoch[1]));
    CHECK(t.lines == std::vector<std::string>{"Better model found at epoch 0 with scripted_loss value: 0.5.",
                                              "Better model found at epoch 1 with scripted_loss value: 0.3."});
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("a tracker names the values it could monitor") {
    Tracked t({0.5}, {std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "acuracy"})});
    CHECK(error_of([&] { t.learn.fit(1); }) ==
          "Exception occurred in `EarlyStopping` when calling event `after_epoch`:\n\tcannot monitor 'acuracy': "
          "the recorded values are train_loss, valid_loss, scripted_loss");
  }

  TEST_CASE("TerminateOnNaN stops the fit naming the batch") {
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

  TEST_CASE("CSVLogger writes the header and one row per epoch") {
    const auto path = (std::filesystem::temp_directory_path() / ("fastcpp_hist_" + std::to_string(::getpid()) + ".csv")).string();
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {metrics::accuracy()},
                  quiet({.cbs = {std::make_shared<CSVLogger>(path)}}));
    silence(learn);
    learn.fit(3);
    std::ifstream in(path);
    std::vector<std::string> rows;
    for (std::string line; std::getline(in, line);) rows.push_back(line);
    REQUIRE(rows.size() == 4);
    CHECK(rows[0] == "epoch,train_loss,valid_loss,accuracy,time");
    CHECK(rows[3].rfind("2,", 0) == 0);
    std::filesystem::remove(path);
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
}
