// fastcpp against real fastai: the fixtures of tests/fixtures/fastai_reference.py (run by
// ctest's fastai_fixtures entry with the venv's fastai) for schedules, lr_find, the
// optimizers and the label-smoothing losses.
#include <fstream>
#include <set>

#include "helpers.h"
#include "vision/augment.h"

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

const std::string kDir = FASTCPP_FASTAI_FIXTURES;

std::map<std::string, std::vector<double>> fixture(const std::string& name) { return read_fixture(name, kDir); }

// A fixture the bundle for a GPU machine leaves out for its size (scripts/gpu_bundle.sh
// lists it in left_out.txt); everywhere else a missing fixture is an error.
bool left_out(const std::string& name) {
  std::ifstream list(kDir + "/left_out.txt");
  for (std::string line; std::getline(list, line);)
    if (line == name) return true;
  return false;
}

// True, saying so, where the bundle left the fixture out: the case skips what needs it.
bool skipped(const std::string& name) {
  if (!left_out(name)) return false;
  MESSAGE("skipped: the fixture " << name << " was left out of this machine's bundle");
  return true;
}

// Every parameter group's hyper-parameters before each training batch, after the
// ParamScheduler (order 60) has set them, as the fixture's recorder does.
class HyperRecorder : public Callback {
 public:
  HyperRecorder() { order = 70; }
  void before_batch() override {
    if (!learn().training) return;
    const auto& groups = learn().opt->param_groups();
    for (size_t g = 0; g < groups.size(); ++g)
      for (const auto& name : Hypers::names()) rows[name + "." + std::to_string(g)].push_back(groups[g].hypers.at(name));
  }
  std::map<std::string, std::vector<double>> rows;
};

// |actual - expected| <= rtol * scale at each index, the scale being the largest
// expected value's size (or each value's own, with per_value).
void check_close(const std::vector<double>& actual, const std::vector<double>& expected, double rtol,
                 bool per_value = true, const std::vector<size_t>& skip = {}) {
  REQUIRE(actual.size() == expected.size());
  double largest = 0;
  for (double value : expected) largest = std::max(largest, std::abs(value));
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::find(skip.begin(), skip.end(), i) != skip.end()) continue;
    INFO("index " << i << ": " << actual[i] << " vs fastai's " << expected[i]);
    CHECK(std::abs(actual[i] - expected[i]) <= rtol * (per_value ? std::abs(expected[i]) : largest) + 1e-15);
  }
}

// 16 training items of 4 features in batches of 4, two parameter groups (the first
// linear layer, the rest), fastai's Adam: the fixture's learner.
void check_schedule(const std::string& run, const std::function<void(Learner&)>& fit,
                    const std::vector<size_t>& skip = {}) {
  auto recorder = std::make_shared<HyperRecorder>();
  Learner learn(synthetic_dls(16, 8, 4), tiny_model(), CrossEntropyLoss(), {},
                quiet({.opt_func = adam(), .cbs = {recorder}, .splitter = two_groups}));
  silence(learn);
  fit(learn);
  const auto expected = fixture("schedules.txt");
  for (const auto& name : Hypers::names())
    for (const char* group : {"0", "1"}) {
      const auto key = name + "." + group;
      CAPTURE(run + "." + key);
      // fastai's combine_scheds rounds the position to float32 (a torch tensor), ours is a
      // double: equal to 1e-6 of the run's largest value.
      check_close(recorder->rows[key], expected.at(run + "." + key), 1e-6, /*per_value=*/false, skip);
    }
}

// Records every event it sees, and throws at one: (event, epoch, iter or -1, training).
class ScriptedEvents : public Callback {
 public:
  struct At {
    std::string event;
    int epoch = 0;
    int iter = -1;  // -1: an event outside the batches
    bool training = true;
  };
  ScriptedEvents(std::optional<At> at, std::function<void()> raise) : at_(std::move(at)), raise_(std::move(raise)) {}
  std::vector<std::string> events;

#define FASTCPP_SCRIPTED(name) \
  void name() override { seen(#name); }
  FASTCPP_SCRIPTED(before_fit)
  FASTCPP_SCRIPTED(before_epoch)
  FASTCPP_SCRIPTED(before_train)
  FASTCPP_SCRIPTED(before_batch)
  FASTCPP_SCRIPTED(after_pred)
  FASTCPP_SCRIPTED(after_loss)
  FASTCPP_SCRIPTED(before_backward)
  FASTCPP_SCRIPTED(after_cancel_backward)
  FASTCPP_SCRIPTED(after_backward)
  FASTCPP_SCRIPTED(before_step)
  FASTCPP_SCRIPTED(after_cancel_step)
  FASTCPP_SCRIPTED(after_step)
  FASTCPP_SCRIPTED(after_cancel_batch)
  FASTCPP_SCRIPTED(after_batch)
  FASTCPP_SCRIPTED(after_cancel_train)
  FASTCPP_SCRIPTED(after_train)
  FASTCPP_SCRIPTED(before_validate)
  FASTCPP_SCRIPTED(after_cancel_validate)
  FASTCPP_SCRIPTED(after_validate)
  FASTCPP_SCRIPTED(after_cancel_epoch)
  FASTCPP_SCRIPTED(after_epoch)
  FASTCPP_SCRIPTED(after_cancel_fit)
  FASTCPP_SCRIPTED(after_fit)
#undef FASTCPP_SCRIPTED

 private:
  void seen(const std::string& event) {
    events.push_back(event);
    const auto& l = learn();
    if (!at_ || event != at_->event || l.epoch != at_->epoch) return;
    if (at_->iter >= 0 && (static_cast<int>(l.iter) != at_->iter || l.training != at_->training)) return;
    raise_();
  }
  std::optional<At> at_;
  std::function<void()> raise_;
};

template <class E>
std::function<void()> raise() {
  return [] { throw E(); };
}

std::vector<std::string> words_of(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

}  // namespace

TEST_SUITE("fastai") {
  TEST_CASE("the events of a fit, plain, with each cancel exception and with an error, are fastai's") {
    using At = ScriptedEvents::At;
    const std::map<std::string, std::pair<std::optional<At>, std::function<void()>>> runs{
        {"plain", {std::nullopt, nullptr}},
        {"cancel_batch", {At{"before_step", 0, 1}, raise<CancelBatchException>()}},
        {"cancel_step", {At{"before_step", 0, 0}, raise<CancelStepException>()}},
        {"cancel_backward", {At{"before_backward", 1, 2}, raise<CancelBackwardException>()}},
        {"cancel_train", {At{"after_batch", 0, 1}, raise<CancelTrainException>()}},
        {"cancel_validate", {At{"before_validate", 1}, raise<CancelValidException>()}},
        {"cancel_epoch", {At{"after_batch", 1, 0}, raise<CancelEpochException>()}},
        {"cancel_fit", {At{"after_epoch", 0}, raise<CancelFitException>()}},
        {"error", {At{"after_loss", 0, 1}, [] { throw std::runtime_error("scripted"); }}}};
    std::map<std::string, std::vector<std::string>> expected;
    std::ifstream in(kDir + "/events.txt");
    for (std::string line; std::getline(in, line);)
      expected[line.substr(0, line.find(':'))] = words_of(line.substr(line.find(':') + 1));
    REQUIRE(expected.size() == runs.size());
    for (const auto& [name, run] : runs) {
      CAPTURE(name);
      auto script = std::make_shared<ScriptedEvents>(run.first, run.second);
      Learner learn(synthetic_dls(12, 4, 4), tiny_model(), CrossEntropyLoss(), {}, quiet({.cbs = {script}}));
      silence(learn);
      try {
        learn.fit(2, 1e-3);
      } catch (const Error&) {
        CHECK(name == "error");
      }
      CHECK(script->events == expected.at(name));
    }
  }

  TEST_CASE("fit_one_cycle, fit_flat_cos, fine_tune and fit_sgdr set fastai's hyper-parameters at every batch (their "
            "options, a list of lrs)") {
    check_schedule("one_cycle", [](Learner& l) { l.fit_one_cycle(2, slice(1e-4, 1e-2)); });
    check_schedule("flat_cos", [](Learner& l) { l.fit_flat_cos(2, slice(1e-4, 1e-2)); });
    check_schedule("fine_tune", [](Learner& l) { l.fine_tune(2, {.base_lr = 2e-3, .freeze_epochs = 1}); });
    check_schedule("fine_tune_moms", [](Learner& l) {
      l.fine_tune(1, {.base_lr = 1e-3, .freeze_epochs = 1, .div_final = 1e3, .moms = {0.9, 0.8, 0.9}});
    });
    check_schedule("one_cycle_list", [](Learner& l) { l.fit_one_cycle(2, {3e-4, 5e-3}); });
    // fit_sgdr, but for batch 12, the first of the third cycle (position 3/7): fastai's
    // float32 position falls just short of its float32 cycle boundary, so fastai takes the
    // second cycle's last value (~0) where we restart at lr_max.
    check_schedule("sgdr", [](Learner& l) { l.fit_sgdr(3, 1, slice(1e-4, 1e-2)); }, {12});
    const auto expected = fixture("schedules.txt");
    CHECK(expected.at("sgdr.lr.1")[12] < 1e-12);
    CHECK(expected.at("sgdr.lr.1")[13] == doctest::Approx(1e-2).epsilon(0.02));  // the restart, a batch late
  }

  TEST_CASE("fit_sgdr restarts at lr_max on the first batch of each cycle") {
    auto recorder = std::make_shared<HyperRecorder>();
    Learner learn(synthetic_dls(16, 8, 4), tiny_model(), CrossEntropyLoss(), {}, quiet({.cbs = {recorder}}));
    silence(learn);
    learn.fit_sgdr(3, 1, 1e-2);
    const auto& lrs = recorder->rows["lr.0"];
    REQUIRE(lrs.size() == 28);  // 1 + 2 + 4 epochs of 4 batches
    for (size_t first : {0, 4, 12}) CHECK(lrs[first] == doctest::Approx(1e-2).epsilon(1e-12));
    CHECK(lrs[2] == doctest::Approx(5e-3).epsilon(1e-12));   // half-way down the first cycle
    CHECK(lrs[20] == doctest::Approx(5e-3).epsilon(1e-12));  // and the third
  }

  TEST_CASE("fit_sgdr: cycles of 1, 2 and 4 epochs, and bad arguments") {
    Learner learn(synthetic_dls(8, 4, 4), tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    learn.fit_sgdr(3, 1, 1e-2);
    CHECK(learn.n_epoch == 7);
    CHECK_THROWS_WITH_AS(learn.fit_sgdr(0, 1), "fit_sgdr: n_cycles, cycle_len and cycle_mult must be at least 1, got 0, 1 and 2",
                         Error);
  }

  TEST_CASE("fastai's scikit-learn and regression metrics: the same values over the same two batches") {
    const auto fx = fixture("metrics.txt");
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    auto measured = [&](const MetricPtr& metric, const std::string& data) {
      const auto n = static_cast<int64_t>(fx.at(data + ".items")[0]);
      const bool regression = data == "regression", multi_label = data == "multilabel";
      const auto pred = torch::tensor(fx.at(data + ".pred"), torch::kDouble).to(torch::kFloat).view({n, -1});
      const auto target = torch::tensor(fx.at(data + ".target"), torch::kDouble)
                              .to(regression || multi_label ? torch::kFloat : torch::kLong)
                              .view(multi_label ? std::vector<int64_t>{n, -1} : std::vector<int64_t>{n});
      const auto first = static_cast<int64_t>(fx.at(data + ".first")[0]);
      metric->reset();
      for (const auto& [from, to] : {std::pair{int64_t{0}, first}, std::pair{first, n}}) {
        learn.pred = regression ? pred.flatten().slice(0, from, to) : pred.slice(0, from, to);
        learn.yb = target.slice(0, from, to);
        metric->accumulate(learn);
      }
      return metric->value();
    };
    using metrics::Average;
    const std::vector<std::tuple<std::string, std::string, MetricPtr>> cases{
        {"multi", "f1_macro", metrics::f1_score({.average = Average::macro})},
        {"multi", "f1_micro", metrics::f1_score({.average = Average::micro})},
        {"multi", "f1_weighted", metrics::f1_score({.average = Average::weighted})},
        {"multi", "precision_macro", metrics::precision({.average = Average::macro})},
        {"multi", "recall_weighted", metrics::recall({.average = Average::weighted})},
        {"multi", "fbeta2_macro", metrics::fbeta(2, {.average = Average::macro})},
        {"multi", "mcc", metrics::matthews_corrcoef()},
        {"multi", "balanced", metrics::balanced_accuracy()},
        {"multi", "roc_auc", metrics::roc_auc()},
        {"multi", "kappa", metrics::cohen_kappa()},
        {"multi", "kappa_linear", metrics::cohen_kappa(metrics::KappaWeights::linear)},
        {"multi", "kappa_quadratic", metrics::cohen_kappa(metrics::KappaWeights::quadratic)},
        // Class 3 predicted, never a target: among the classes averaged over, not in balanced accuracy.
        {"absent", "f1_macro", metrics::f1_score({.average = Average::macro})},
        {"absent", "precision_weighted", metrics::precision({.average = Average::weighted})},
        {"absent", "recall_macro", metrics::recall({.average = Average::macro})},
        {"absent", "balanced", metrics::balanced_accuracy()},
        {"absent", "mcc", metrics::matthews_corrcoef()},
        {"absent", "kappa_quadratic", metrics::cohen_kappa(metrics::KappaWeights::quadratic)},
        {"binary", "f1", metrics::f1_score()},
        {"binary", "precision", metrics::precision()},
        {"binary", "recall", metrics::recall()},
        {"binary", "fbeta_half", metrics::fbeta(0.5)},
        {"binary", "f1_pos0", metrics::f1_score({.pos_label = 0})},
        {"binary", "mcc", metrics::matthews_corrcoef()},
        {"binary", "roc_auc", metrics::roc_auc_binary()},  // tied scores count a half
        {"binary", "kappa", metrics::cohen_kappa()},
        {"regression", "mse", metrics::mse()},
        {"regression", "rmse", metrics::rmse()},
        {"regression", "mae", metrics::mae()},
        {"regression", "msle", metrics::msle()},
        {"regression", "exp_rmspe", metrics::exp_rmspe()},
        {"regression", "r2", metrics::r2_score()},
        // An item with no label and none predicted: its samples score is 0, as scikit-learn's.
        {"multilabel", "f1_macro", metrics::f1_score_multi()},
        {"multilabel", "f1_micro", metrics::f1_score_multi({.average = metrics::MultiAverage::micro})},
        {"multilabel", "f1_samples", metrics::f1_score_multi({.average = metrics::MultiAverage::samples})},
        {"multilabel", "fbeta2_samples", metrics::fbeta_multi(2, {.average = metrics::MultiAverage::samples})},
        {"multilabel", "precision_weighted", metrics::precision_multi({.average = metrics::MultiAverage::weighted})},
        {"multilabel", "recall_macro", metrics::recall_multi()},
        {"multilabel", "precision_thresh",
         metrics::precision_multi({.thresh = 0.2, .sigmoid = false, .average = metrics::MultiAverage::micro})},
    };
    for (const auto& [data, name, metric] : cases) {
      CAPTURE(data);
      CAPTURE(name);
      CHECK(measured(metric, data) == doctest::Approx(fx.at(data + "." + name)[0]).epsilon(1e-6));
    }
    REQUIRE(torch::tensor(fx.at("absent.pred")).view({-1, 4}).argmax(1).eq(3).any().item<bool>());
    REQUIRE_FALSE(torch::tensor(fx.at("absent.target")).eq(3).any().item<bool>());
    const auto perplexity = metrics::perplexity();
    perplexity->reset();
    for (const auto& [loss, bs] : {std::pair{1.3, int64_t{9}}, std::pair{0.7, int64_t{12}}}) {
      learn.loss = torch::tensor(loss);
      learn.yb = torch::zeros({bs});
      perplexity->accumulate(learn);
    }
    CHECK(perplexity->value() == doctest::Approx(fx.at("perplexity")[0]).epsilon(1e-6));

    CHECK(error_of([&] { measured(metrics::f1_score(), "multi"); }) ==
          "f1_score: average binary scores two classes, the targets and predictions hold 4 (0, 1, 2, 3); use macro, "
          "micro or weighted");
    CHECK(error_of([&] { measured(metrics::precision({.pos_label = 2}), "binary"); }) ==
          "precision_score: pos_label 2 is not one of the classes 0, 1");
    CHECK(error_of([&] { measured(metrics::roc_auc(), "absent"); }) ==
          "roc_auc_score: one class against the rest needs each of the 4 classes among the targets, which hold 3");
    CHECK(error_of([&] { metrics::binary_roc_auc(torch::rand({3}), torch::zeros({3}, torch::kLong)); }) ==
          "roc_auc_score: only one class is present in the targets, and the area under the ROC curve needs both");
    const auto two = torch::tensor({0, 1}, torch::kLong);
    CHECK(error_of([&] { metrics::binary_roc_auc(torch::tensor({0.5, std::nan("")}), two); }) ==
          "roc_auc_score: the scores hold nan or infinity");  // a diverged model's, which ranks nothing
    CHECK(error_of([&] { metrics::binary_roc_auc(torch::rand({2}), torch::tensor({-1, 1}, torch::kLong)); }) ==
          "roc_auc_score: binary targets are 0 or 1, got -1");
    CHECK(error_of([&] { metrics::fbeta(std::numeric_limits<double>::infinity()); }) ==
          "fbeta_score: beta must be positive and finite, got inf");
    CHECK(error_of([&] { metrics::accuracy_fn(torch::zeros({4, 0}), torch::zeros({5})); }) ==
          "accuracy: predictions [4, 0] score no class");
    // A stray class index far past the outputs is one more class, not a matrix of its square.
    const auto stray = torch::tensor({0, 1000000}, torch::kLong);
    CHECK(metrics::precision_value(torch::eye(2), stray, {.average = Average::macro}) == doctest::Approx(1.0 / 3));
    learn.pred = torch::zeros({6, 4});
    learn.yb = torch::zeros({12});
    CHECK(error_of([&] { metrics::mse()->accumulate(learn); }) ==
          "mse: predictions [6, 4] and targets [12] hold different numbers of values");
    const auto per_item =
        metrics::from_fn("per_item", [](const torch::Tensor& pred, const torch::Tensor&) { return pred; });
    CHECK(error_of([&] { per_item->accumulate(learn); }) ==
          "metric 'per_item' gave a tensor of [6, 4] for a batch, not one number");
  }

  TEST_CASE("Learner::load of what fastai's learn.save wrote: the model's weights, and a line saying so") {
    Learner learn(synthetic_dls(8, 4, 4), tiny_model(), CrossEntropyLoss(), {}, quiet());
    std::vector<std::string> said;
    silence(learn, &said);
    const auto path = kDir + "/fastai_save.pth";
    learn.load(path);
    auto expected = tiny_model();
    load_state_dict(*expected, kDir + "/lr_find_init.pt");
    CHECK(all_equal(snapshot(learn.model.module()), snapshot(*expected)));
    CHECK(said == std::vector<std::string>{"checkpoint '" + path + "' is a state dict, not a fastcpp checkpoint: the "
                                           "model's weights were loaded, nothing else"});
  }

  TEST_CASE("lr_find on fastai's weights and data: the same lrs, losses, stop and suggestions") {
    const auto data = read_torch_file(read_file(kDir + "/lr_find_data.pt")).toGenericDict();
    auto x = data.at(c10::IValue(std::string("x"))).toTensor(), y = data.at(c10::IValue(std::string("y"))).toTensor();
    auto model = tiny_model();
    load_state_dict(*model, kDir + "/lr_find_init.pt");
    auto valid = synthetic_dataset(8, 4, 3, 2);
    Learner learn({DataLoader(std::make_shared<TensorDataset>(x, y), {.bs = 8}), DataLoader(valid, {.bs = 8})}, model,
                  CrossEntropyLoss(), {}, quiet());
    silence(learn);
    const auto found = learn.lr_find({.plot = ""});

    const auto expected = fixture("lr_find.txt");
    CHECK(found.lrs.size() == static_cast<size_t>(expected.at("iterations")[0]));
    check_close(found.lrs, expected.at("lrs"), 1e-12);
    // The losses follow fastai's to float precision while the lr is sane; the last ones,
    // where the loss diverges, amplify the last bits.
    const auto& losses = expected.at("losses");
    for (size_t i = 0; i < std::min(found.losses.size(), losses.size()) - 8; ++i) {
      INFO("iteration " << i);
      CHECK(found.losses[i] == doctest::Approx(losses[i]).epsilon(1e-4));
    }
    // From fastai's own record, our suggestions are fastai's.
    const auto suggested = suggest_lrs(expected.at("lrs"), losses, 100);
    check_close({suggested.valley, suggested.minimum, suggested.steep, suggested.slide}, expected.at("suggestions"), 1e-6);
  }

  TEST_CASE("every optimizer takes fastai's steps on the same parameters and gradients, decoupled and with L2") {
    const auto fx = fixture("optimizers.txt");
    const std::map<std::string, std::pair<OptFunc, double>> optimizers{
        {"sgd", {sgd({.mom = 0.9, .wd = 0.01}), 0.1}},   {"adam", {adam({.wd = 0.01}), 0.05}},
        {"radam", {radam({.wd = 0.01}), 0.05}},          {"qhadam", {qhadam({.wd = 0.01}), 0.05}},
        {"larc", {larc({.wd = 0.01}), 0.5}},             {"lars", {lars({.wd = 0.01}), 0.5}},
        {"lamb", {lamb({.wd = 0.01}), 0.05}},            {"ranger", {ranger(), 0.05}},
        {"sgd_l2", {sgd({.mom = 0.9, .wd = 0.1, .decouple_wd = false}), 0.1}},
        {"adam_l2", {adam({.wd = 0.1, .decouple_wd = false}), 0.05}},
        {"radam_l2", {radam({.wd = 0.1, .decouple_wd = false}), 0.05}},
        {"qhadam_l2", {qhadam({.wd = 0.1, .decouple_wd = false}), 0.05}},
        {"larc_l2", {larc({.wd = 0.1, .decouple_wd = false}), 0.5}},
        {"lars_l2", {lars({.wd = 0.1, .decouple_wd = false}), 0.5}},
        {"lamb_l2", {lamb({.wd = 0.1, .decouple_wd = false}), 0.05}},
        {"ranger_l2", {ranger({.wd = 0.1, .decouple_wd = false}), 0.05}}};
    for (const auto& [name, make] : optimizers) {
      CAPTURE(name);
      auto param = torch::tensor(fx.at("init"), torch::kFloat).requires_grad_(true);
      auto opt = make.first({ParamGroup{{param}, {}, {}}});
      opt->set_hyper("lr", make.second);
      for (int k = 0; k < 7; ++k) {
        opt->set_hyper("mom", fx.at("mom")[static_cast<size_t>(k)]);
        param.mutable_grad() = torch::tensor(fx.at("grad." + std::to_string(k)), torch::kFloat);
        opt->step();
        const auto expected = torch::tensor(fx.at(name + "." + std::to_string(k)), torch::kFloat);
        CAPTURE(k);
        CHECK(torch::allclose(param.detach(), expected, /*rtol=*/1e-6, /*atol=*/1e-6));
      }
    }
  }

  TEST_CASE("fastai's own XResNet-18 and -50 state dicts load into ours strictly and compute the same outputs") {
    for (const std::string arch : {"xresnet18", "xresnet50"}) {
      CAPTURE(arch);
      if (skipped(arch + ".pth")) continue;
      const vision::XResNetOptions options{.n_out = 10, .widen = 0.25};
      auto model = arch == "xresnet18" ? vision::xresnet18(options) : vision::xresnet50(options);
      load_state_dict(*model, kDir + "/" + arch + ".pth");  // strict: every name and shape fastai's
      model->eval();
      const auto io = read_torch_file(read_file(kDir + "/" + arch + "_io.pt")).toGenericDict();
      torch::NoGradGuard no_grad;
      const auto expected = io.at(c10::IValue(std::string("output"))).toTensor();
      const auto output = model->forward(io.at(c10::IValue(std::string("input"))).toTensor());
      CHECK((output - expected).abs().max().item<double>() < 1e-4 * expected.abs().max().item<double>());
    }
  }

  TEST_CASE("fastai's DynamicUnet on ResNet-34: its state dict loads into ours strictly, same keys, same outputs") {
    if (skipped("unet_resnet34.pth")) return;
    auto unet = vision::DynamicUnet(vision::unet_encoder(vision::resnet34), {.n_out = 5, .img_size = {64, 64}});
    const auto saved = read_state_dict(kDir + "/unet_resnet34.pth");
    std::set<std::string> ours, theirs;
    for (const auto& [name, tensor] : named_state(*unet)) ours.insert(name);
    for (const auto& entry : saved) theirs.insert(entry.key().toStringRef());
    CHECK(ours == theirs);  // so ours loads into fastai's strictly as well
    load_state_dict(*unet, saved, "fastai's DynamicUnet");  // strict: every name and shape
    unet->eval();
    const auto io = read_torch_file(read_file(kDir + "/unet_resnet34_io.pt")).toGenericDict();
    auto entry = [&](const char* key) { return io.at(c10::IValue(std::string(key))).toTensor(); };
    torch::NoGradGuard no_grad;
    for (const std::string input : {"input", "odd_input"}) {  // 64x64, and 70x58: every resize path
      CAPTURE(input);
      const auto expected = entry(input == "input" ? "output" : "odd_output");
      const auto output = unet->forward(entry(input.c_str()));
      REQUIRE(output.sizes() == expected.sizes());
      CHECK((output - expected).abs().max().item<double>() < 1e-5 * std::max(1.0, expected.abs().max().item<double>()));
    }
  }

  TEST_CASE("fastai's DynamicUnet options on an XResNet encoder: blur, blur_final, y_range, self_attention, last_cross") {
    const std::vector<std::pair<std::string, vision::UnetOptions>> cases{
        {"xresnet", {.n_out = 3, .img_size = {64, 64}}},
        {"blur_yrange", {.n_out = 3, .img_size = {64, 64}, .blur = true, .blur_final = false, .y_range = std::make_pair(-1.0, 2.0)}},
        {"attention_nocross", {.n_out = 3, .img_size = {64, 64}, .blur = true, .self_attention = true, .last_cross = false}}};
    auto encoder = [] { return vision::unet_encoder(vision::xresnet18, {.width = 16}); };  // widen 0.25
    for (const auto& [name, options] : cases) {
      CAPTURE(name);
      if (skipped("unet_" + name + ".pth")) continue;
      auto unet = vision::DynamicUnet(encoder(), options);
      const auto saved = read_state_dict(kDir + "/unet_" + name + ".pth");
      std::set<std::string> ours, theirs;
      for (const auto& [key, tensor] : named_state(*unet)) ours.insert(key);
      for (const auto& entry : saved) theirs.insert(entry.key().toStringRef());
      CHECK(ours == theirs);
      load_state_dict(*unet, saved, "fastai's DynamicUnet");  // strict: every name and shape
      const auto io = read_torch_file(read_file(kDir + "/unet_" + name + "_io.pt")).toGenericDict();
      auto entry = [&](const std::string& key) { return io.at(c10::IValue(key)).toTensor(); };
      auto close = [](const torch::Tensor& output, const torch::Tensor& expected) {
        REQUIRE(output.sizes() == expected.sizes());
        return (output - expected).abs().max().item<double>() < 1e-5 * std::max(1.0, expected.abs().max().item<double>());
      };
      torch::NoGradGuard no_grad;
      unet->eval();
      CHECK(close(unet->forward(entry("input")), entry("output")));
      unet->train();  // batch statistics, and one power iteration of each spectral norm
      CHECK(close(unet->forward(entry("input")), entry("train_output")));
      const auto state = named_state(*unet);
      int refined = 0;
      for (const auto& [key, tensor] : state)
        if (key.ends_with("weight_u")) {
          CAPTURE(key);
          CHECK(close(tensor, entry("after_train." + key)));
          ++refined;
        }
      CHECK(refined == (options.self_attention ? 3 : 0));
    }

    // bottle: fastai's ResBlock halves the channels, but its final conv expects them whole,
    // so its model cannot run forward. Ours feeds the halved channels to the final conv:
    // every other name and shape is fastai's.
    if (skipped("unet_bottle_shapes.pth")) return;
    auto bottle = vision::DynamicUnet(encoder(), {.n_out = 3, .img_size = {64, 64}, .bottle = true});
    const auto shapes = read_state_dict(kDir + "/unet_bottle_shapes.pth");
    const auto ours = named_state(*bottle);
    REQUIRE(ours.size() == shapes.size());
    for (const auto& [key, tensor] : ours) {
      CAPTURE(key);
      const auto theirs = shapes.at(c10::IValue(key)).toTensor().sizes().vec();
      if (key == "layers.12.0.weight") CHECK(theirs == std::vector<int64_t>{3, 51, 1, 1});
      CHECK(tensor.sizes().vec() == (key == "layers.12.0.weight" ? std::vector<int64_t>{3, 25, 1, 1} : theirs));
    }
    CHECK(bottle->forward(torch::randn({1, 3, 64, 64})).sizes() == torch::IntArrayRef({1, 3, 64, 64}));
  }

  TEST_CASE("segmentation losses and metrics equal fastai's: CrossEntropyLossFlat, DiceLoss, FocalLossFlat, Dice, IoU") {
    const auto fx = fixture("segmentation.txt");
    auto tensor = [&](const std::string& key, std::vector<int64_t> shape, torch::Dtype dtype = torch::kFloat) {
      return torch::tensor(fx.at(key), torch::kDouble).view(shape).to(dtype);
    };
    const auto output = tensor("output", {2, 3, 5, 4});
    const auto mask = tensor("mask", {2, 5, 4}, torch::kLong), void_mask = tensor("void_mask", {2, 5, 4}, torch::kLong);
    auto loss = [&](const Loss& fn, const torch::Tensor& target) { return fn(output, target).item<double>(); };
    CHECK(loss(vision::CrossEntropyLossFlat(), mask) == doctest::Approx(fx.at("ce_flat")[0]).epsilon(1e-6));
    CHECK(loss(vision::CrossEntropyLossFlat({.ignore_index = 255}), void_mask) ==
          doctest::Approx(fx.at("ce_flat_void")[0]).epsilon(1e-6));
    CHECK(loss(vision::DiceLoss(), mask) == doctest::Approx(fx.at("dice_loss")[0]).epsilon(1e-6));
    CHECK(loss(vision::DiceLoss({.mean = true, .square_in_union = true}), mask) ==
          doctest::Approx(fx.at("dice_loss_mean_square")[0]).epsilon(1e-6));
    CHECK(loss(vision::DiceLoss(), void_mask) == doctest::Approx(fx.at("dice_loss_void")[0]).epsilon(1e-6));
    CHECK(torch::allclose(vision::DiceLoss().per_item(output, mask).to(torch::kDouble),
                          torch::tensor(fx.at("dice_loss_per_item"), torch::kDouble), 1e-5, 1e-7));
    CHECK(loss(vision::FocalLossFlat(), mask) == doctest::Approx(fx.at("focal")[0]).epsilon(1e-6));
    CHECK(loss(vision::FocalLossFlat(1.0), mask) == doctest::Approx(fx.at("focal_gamma1")[0]).epsilon(1e-6));
    // The void pixels ignored: the focal loss of the other pixels alone.
    const auto kept = void_mask.ne(255);
    const auto log_p = torch::log_softmax(output, 1).gather(1, void_mask.where(kept, 0).unsqueeze(1)).squeeze(1);
    const auto focal_kept = (-(1 - log_p.exp()).pow(2) * log_p).masked_select(kept).mean().item<double>();
    REQUIRE(kept.logical_not().any().item<bool>());
    CHECK(loss(vision::FocalLossFlat(2.0, {.ignore_index = 255}), void_mask) == doctest::Approx(focal_kept).epsilon(1e-6));

    // Each metric accumulated over the same two batches (2 and 3 items) as in fastai.
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    auto run = [&](const MetricPtr& metric, int n_classes) {
      metric->reset();
      const int64_t sizes[] = {2, 3};
      for (int i = 0; i < 2; ++i) {
        const auto suffix = std::to_string(n_classes) + "." + std::to_string(i);
        learn.pred = tensor("pred" + suffix, {sizes[i], n_classes, 6, 5});
        learn.yb = tensor("mask" + suffix, {sizes[i], 6, 5}, torch::kLong);
        metric->accumulate(learn);
      }
      return metric->value();
    };
    CHECK(run(vision::dice(), 2) == doctest::Approx(fx.at("dice")[0]).epsilon(1e-9));
    CHECK(run(vision::jaccard_coeff(), 2) == doctest::Approx(fx.at("jaccard")[0]).epsilon(1e-9));
    CHECK(run(vision::dice_multi(), 4) == doctest::Approx(fx.at("dice_multi")[0]).epsilon(1e-9));  // class 3 absent: skipped
    CHECK(run(vision::jaccard_coeff_multi(), 4) == doctest::Approx(fx.at("jaccard_multi")[0]).epsilon(1e-9));
    CHECK(run(vision::foreground_acc(), 4) == doctest::Approx(fx.at("foreground_acc")[0]).epsilon(1e-6));

    // Class by class, what the metric accumulated is per_class_iou over both batches at once.
    const auto iou = vision::jaccard_coeff_multi();
    CHECK(error_of([&] { vision::per_class_scores(*iou); }) == "per_class_scores: jaccard_coeff_multi has seen no batch");
    run(iou, 4);
    const auto all_preds = torch::cat({tensor("pred4.0", {2, 4, 6, 5}), tensor("pred4.1", {3, 4, 6, 5})});
    const auto all_masks = torch::cat({tensor("mask4.0", {2, 6, 5}, torch::kLong), tensor("mask4.1", {3, 6, 5}, torch::kLong)});
    const auto scores = vision::per_class_scores(*iou), expected = vision::per_class_iou(all_preds, all_masks);
    REQUIRE(scores.size() == 4);
    for (size_t c = 0; c < scores.size(); ++c) {
      CAPTURE(c);
      if (std::isnan(expected[c])) CHECK(std::isnan(scores[c]));  // class 3 is absent
      else CHECK(scores[c] == doctest::Approx(expected[c]).epsilon(1e-12));
    }
    CHECK(error_of([] { vision::per_class_scores(*metrics::accuracy()); }) ==
          "per_class_scores: accuracy is not a per-class Dice or IoU metric (dice_multi, jaccard_coeff_multi)");

    // Beyond fastai: void pixels are left out. Right everywhere but on the void pixels.
    learn.yb = void_mask;
    learn.pred = torch::nn::functional::one_hot(mask, 3).movedim(-1, 1).to(torch::kFloat);
    for (const auto& metric : {vision::dice_multi({.void_index = 255}), vision::jaccard_coeff_multi({.void_index = 255}),
                               vision::foreground_acc(0, {.void_index = 255})}) {
      CAPTURE(metric->name());
      metric->reset();
      metric->accumulate(learn);
      CHECK(metric->value() == 1.0);
    }
    const auto counted = vision::dice_multi();
    counted->reset();
    counted->accumulate(learn);
    CHECK(counted->value() < 1.0);  // fastai's way: the void pixels' predictions count in the union

    learn.dls.void_index = 255;  // ... unless the data declare a void index: then every metric takes it
    for (const auto& metric : {vision::dice_multi(), vision::jaccard_coeff_multi(), vision::foreground_acc()}) {
      CAPTURE(metric->name());
      metric->reset();
      metric->accumulate(learn);
      CHECK(metric->value() == 1.0);
    }

    // Beyond fastai: a batch without foreground pixels weighs nothing (fastai's epoch value is NaN then).
    learn.dls.void_index.reset();
    const auto foreground = vision::foreground_acc();
    foreground->reset();
    learn.yb = torch::zeros_like(mask);
    foreground->accumulate(learn);
    CHECK(std::isnan(foreground->value()));
    learn.yb = mask;
    foreground->accumulate(learn);
    CHECK(foreground->value() == 1.0);
  }

  TEST_CASE("saturation and hue with fastai's draws: fastai's images, a grey one included") {
    const auto fx = fixture("augment.txt");
    const auto x = torch::tensor(fx.at("colour.x"), torch::kFloat).view({3, 3, 12, 16});
    for (const auto& [name, change] : {std::pair{"saturation", vision::ColorChange::saturation},
                                       std::pair{"hue", vision::ColorChange::hue}}) {
      CAPTURE(name);
      const vision::ColorAugment augment(change, {.p = 1});
      const auto out = augment.apply_draws({.x = x.clone()}, fx.at(std::string(name) + ".draws")).x;
      CHECK(torch::allclose(out, torch::tensor(fx.at(std::string(name) + ".x"), torch::kFloat).view_as(out), 1e-5, 1e-6));
    }
    // Drawn from the seed: p and the range, one draw for the batch where asked, uint8 read as x / 255.
    const vision::ColorAugment every(vision::ColorChange::saturation, {.max = 0.3, .p = 1});
    for (const double factor : every.draw(64, 5)) {
      CHECK(factor >= 0.7);
      CHECK(factor <= 1 / 0.7);
    }
    const auto rarely = vision::ColorAugment(vision::ColorChange::hue, {.p = 0.25}).draw(400, 3);
    CHECK(std::count(rarely.begin(), rarely.end(), 0.0) == doctest::Approx(300).epsilon(0.15));
    const auto once = vision::ColorAugment(vision::ColorChange::hue, {.p = 1, .batch = true}).draw(5, 9);
    CHECK(std::count(once.begin(), once.end(), once[0]) == 5);
    const auto bytes = (x * 255).round().to(torch::kByte);
    CHECK(torch::allclose(every.apply_draws({.x = bytes}, {1, 1, 1}).x, bytes.to(torch::kFloat) / 255));
    CHECK(error_of([&] { every.apply_draws({.x = x.narrow(1, 0, 1)}, {1, 1, 1}); }) ==
          "saturation: expects RGB images [batch, 3, height, width], got [3, 1, 12, 16]");
    CHECK(error_of([] { vision::hue({.max = 1}); }) == "hue: max must be in [0, 1), got 1");
  }

  TEST_CASE("aug_transforms with fastai's draws: fastai's images and masks") {
    const auto fx = fixture("augment.txt");
    const auto x = torch::tensor(fx.at("x"), torch::kFloat).view({3, 3, 12, 16});
    const auto mask = torch::tensor(fx.at("mask"), torch::kDouble).to(torch::kLong).view({3, 12, 16});
    const std::map<std::string, vision::AugOptions> cases{
        {"default", {}},
        {"dihedral_zeros", {.flip_vert = true, .max_lighting = 0, .max_warp = 0, .pad_mode = vision::PadMode::Zeros}},
        {"resize_border", {.max_lighting = 0, .size = std::pair<int64_t, int64_t>{5, 6}, .pad_mode = vision::PadMode::Border}},
        {"shrink", {.max_lighting = 0, .max_warp = 0, .size = std::pair<int64_t, int64_t>{4, 5}}},
        {"unaligned", {.max_lighting = 0, .align_corners = false}}};
    for (const auto& [name, options] : cases) {
      CAPTURE(name);
      auto draw = [&](const std::string& key, size_t i, double neutral) {
        const auto it = fx.find(name + "." + key);
        return it == fx.end() ? neutral : it->second.at(i);
      };
      std::vector<vision::AugDraw> draws(3);
      for (size_t i = 0; i < 3; ++i)
        draws[i] = {.dihedral = static_cast<int>(draw("dihedral", i, draw("flip", i, 0))),
                    .rotate = draw("rotate", i, 0),
                    .zoom = draw("zoom", i, 1),
                    .zoom_col = draw("zoom_col", i, 0.5),
                    .zoom_row = draw("zoom_row", i, 0.5),
                    .warp_x = draw("warp_x", i, 0),
                    .warp_y = draw("warp_y", i, 0),
                    .brightness = draw("brightness", i, 0.5),
                    .contrast = draw("contrast", i, 1)};
      const auto out = vision::AugTransforms(options).apply_draws({x.clone(), mask.clone()}, draws);
      const auto shape = fx.at(name + ".x_shape");
      const auto expected = torch::tensor(fx.at(name + ".x"), torch::kFloat).view({3, 3, int64_t(shape[2]), int64_t(shape[3])});
      REQUIRE((out.x.sizes() == expected.sizes()));
      CHECK((out.x - expected).abs().max().item<double>() < 2e-5);
      const auto expected_mask = torch::tensor(fx.at(name + ".mask"), torch::kDouble).to(torch::kLong).view_as(out.y);
      CHECK(torch::equal(out.y, expected_mask));
    }
  }

  TEST_CASE("MixUp and CutMix after the same seed: fastai's images, lam, shuffled targets and loss") {
    const auto fx = fixture("mixup.txt");
    const auto x = torch::tensor(fx.at("x"), torch::kFloat).view({4, 3, 8, 8});
    const auto y = torch::tensor(fx.at("y"), torch::kFloat).to(torch::kLong);
    const auto pred = torch::tensor(fx.at("pred"), torch::kFloat).view({4, 3});
    const std::vector<std::pair<std::string, std::shared_ptr<MixHandler>>> handlers{
        {"mixup", std::make_shared<MixUp>()}, {"cutmix", std::make_shared<CutMix>()}};
    for (const auto& [name, cb] : handlers) {
      CAPTURE(name);
      Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet({.cbs = {cb}}));
      learn.xb = x.clone();
      learn.yb = y.clone();
      learn.training = true;
      cb->before_train();
      torch::manual_seed(5);
      cb->before_batch();
      CHECK(torch::allclose(learn.xb, torch::tensor(fx.at(name + ".x"), torch::kFloat).view({4, 3, 8, 8}), 1e-6, 1e-6));
      CHECK(torch::allclose(cb->lam(), torch::tensor(fx.at(name + ".lam"), torch::kFloat), 1e-6, 1e-7));
      CHECK(learn.loss_func(pred, y).item<double>() == doctest::Approx(fx.at(name + ".loss")[0]).epsilon(1e-6));
      cb->after_train();  // the plain loss again
      CHECK(learn.loss_func(pred, y).item<double>() == doctest::Approx(CrossEntropyLoss()(pred, y).item<double>()));
    }
  }

  TEST_CASE("MixUp and CutMix train a model, and leave validation batches alone") {
    for (const auto& cb : std::vector<CallbackPtr>{std::make_shared<MixUp>(), std::make_shared<CutMix>()}) {
      auto images = std::make_shared<TensorDataset>(torch::randn({16, 3, 8, 8}), torch::randint(3, {16}, torch::kLong));
      auto model = torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(192, 3));
      Learner learn({DataLoader(images, {.bs = 4}), DataLoader(images, {.bs = 4})}, model, CrossEntropyLoss(), {},
                    quiet({.cbs = {cb}}));
      silence(learn);
      const auto before = learn.validate()[0];
      learn.fit(3, 1e-2);
      CHECK(learn.validate()[0] < before);
      CHECK(learn.recorder->values.size() == 3);
    }
    CHECK_THROWS_WITH_AS(MixUp(0), "MixUp/CutMix: alpha must be positive, got 0.000000", Error);
  }

  TEST_CASE("MixUp with a loss that has no unreduced form: each item's loss on its own, said once") {
    auto images = std::make_shared<TensorDataset>(torch::randn({16, 3, 8, 8}), torch::randint(3, {16}, torch::kLong));
    auto model = torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(192, 3));
    const Loss mean_only([](const torch::Tensor& pred, const torch::Tensor& y) {
      return torch::nn::functional::cross_entropy(pred, y);
    });
    Learner learn({DataLoader(images, {.bs = 4}), DataLoader(images, {.bs = 4})}, model, mean_only, {},
                  quiet({.cbs = {std::make_shared<MixUp>()}}));
    std::vector<std::string> lines;
    silence(learn, &lines);
    const auto before = learn.validate()[0];
    learn.fit(2, 1e-2);
    CHECK(learn.validate()[0] < before);
    CHECK(std::count(lines.begin(), lines.end(),
                     "MixUp/CutMix: the loss has no unreduced form, so each item's loss is a call of its own (4 a "
                     "batch): give Loss its per_item function to make them one call") == 1);
  }

  TEST_CASE("MixUp gives the plain loss back however its fit ends: an epoch cancelled in training, a failed fit") {
    auto images = std::make_shared<TensorDataset>(torch::randn({16, 3, 8, 8}), torch::randint(3, {16}, torch::kLong));
    auto model = torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(192, 3));
    Learner learn({DataLoader(images, {.bs = 4}), DataLoader(images, {.bs = 4})}, model, CrossEntropyLoss(), {}, quiet());
    silence(learn);
    const auto plain = learn.validate()[0];
    struct CancelFirstEpoch : Callback {  // after its second training batch
      void after_batch() override {
        if (learn().training && learn().epoch == 0 && learn().iter == 1) throw CancelEpochException();
      }
    };
    struct FailInSecondEpoch : Callback {  // while training: no after_train
      void after_batch() override {
        if (learn().training && learn().epoch == 1) throw std::runtime_error("disk full");
      }
    };
    // lr 0: the weights stay, so validation gives the plain loss exactly, unless the loss
    // function is still MixUp's
    auto mixup = std::make_shared<MixUp>();
    learn.fit(1, 0.0, {.cbs = {mixup, std::make_shared<CancelFirstEpoch>()}});  // the fit's last epoch
    CHECK(learn.validate()[0] == plain);
    CHECK_THROWS_AS(learn.fit(3, 0.0, {.cbs = {mixup, std::make_shared<FailInSecondEpoch>()}}), Error);
    CHECK(learn.validate()[0] == plain);
  }

  TEST_CASE("create_head: fastai's layers in fastai's order, the same outputs from fastai's weights") {
    const auto heads = read_torch_file(read_file(kDir + "/head.pt")).toGenericDict();
    const std::map<std::string, vision::HeadOptions> options{
        {"default", {}},
        {"deep", {.lin_ftrs = {32, 16}, .ps = 0.25, .bn_final = true}},
        {"range", {.y_range = std::pair{-1.0, 3.0}}},
        {"lin_first", {.lin_ftrs = {32, 16}, .lin_first = true}},
        {"lin_first_flat", {.lin_ftrs = {}, .lin_first = true}},
        {"no_first_bn", {.concat_pool = false, .first_bn = false}},
        {"no_pool", {.lin_ftrs = {32}, .pool = false}}};
    for (const auto& [name, o] : options) {
      CAPTURE(name);
      const auto fx = heads.at(c10::IValue(name)).toGenericDict();
      auto field = [&](const char* key) { return fx.at(c10::IValue(std::string(key))); };
      auto head = vision::create_head(64, 10, o);
      std::string layers;  // as the fixture names them: where the dropouts and norms stand
      for (const auto& layer : head->children()) {
        std::string kind = layer->name();
        kind = kind.substr(kind.rfind(':') + 1);
        kind = kind.substr(0, kind.size() - 4);  // "Impl"
        if (const auto* dropout = layer->as<torch::nn::Dropout>()) kind += c10::str("(", dropout->options.p(), ")");
        if (kind == "Linear" || kind == "BatchNorm1d" || kind == "ReLU" || kind.rfind("Dropout", 0) == 0)
          layers += layers.empty() ? kind : " " + kind;
      }
      CHECK(layers == field("layers").toStringRef());
      auto params = head->parameters();
      auto buffers = head->buffers();
      const auto fastai_params = field("params").toList(), fastai_buffers = field("buffers").toList();
      REQUIRE(params.size() == fastai_params.size());
      REQUIRE(buffers.size() == fastai_buffers.size());
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        const auto theirs = fastai_params.get(i).toTensor();
        REQUIRE(params[i].sizes() == theirs.sizes());
        params[i].copy_(theirs);
      }
      for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(fastai_buffers.get(i).toTensor());
      head->eval();
      const auto output = head->forward(field("input").toTensor());
      CHECK(torch::allclose(output, field("output").toTensor(), 1e-5, 1e-6));
    }
  }

  TEST_CASE("CrossEntropyLoss with label smoothing equals LabelSmoothingCrossEntropy and CrossEntropyLossFlat's") {
    const auto fx = fixture("losses.txt");
    const auto output = torch::tensor(fx.at("output"), torch::kFloat).view({6, 5});
    const auto target = torch::tensor(fx.at("target"), torch::kFloat).to(torch::kLong);
    const double loss = CrossEntropyLoss({.label_smoothing = 0.1})(output, target).item<double>();
    CHECK(loss == doctest::Approx(fx.at("label_smoothing_ce")[0]).epsilon(1e-6));
    CHECK(loss == doctest::Approx(fx.at("ce_flat_smoothing")[0]).epsilon(1e-6));
  }
#if FASTCPP_HAS_OPENCV
  // tests/fixtures/fastai_data_blocks.py: fastai's factories and DataBlocks on a tree of
  // small images it writes beside the fixture.
  TEST_CASE("data factories and DataBlocks: fastai's items, labels, vocab and split for the same files and seed") {
    std::map<std::string, std::vector<std::string>> fx;  // "<case>.<key>" -> its words
    {
      std::ifstream in(kDir + "/data_blocks.txt");
      REQUIRE_MESSAGE(in.good(), "missing fixture data_blocks.txt");
      for (std::string line; std::getline(in, line);) {
        std::istringstream words(line.substr(line.find(':') + 1));
        auto& row = fx[line.substr(0, line.find(':'))];
        for (std::string word; words >> word;) row.push_back(word);
      }
    }
    const std::string root = kDir + "/data_blocks";
    auto relative = [&](const std::vector<std::string>& paths) {
      std::vector<std::string> out;
      for (const auto& path : paths) out.push_back(std::filesystem::path(path).lexically_relative(root).string());
      return out;
    };
    auto labels = [](const vision::ImageFolder& set) {
      std::vector<std::string> out;
      for (size_t i = 0; i < set.size(); ++i) {
        if (!set.multi_label()) {
          out.push_back(set.vocab()[static_cast<size_t>(set.labels()[i])]);
          continue;
        }
        std::string joined;
        const auto row = set.multi_hot()[static_cast<int64_t>(i)];
        for (int64_t c = 0; c < row.size(0); ++c)
          if (row[c].item<float>() == 1) joined += (joined.empty() ? "" : ",") + set.vocab()[static_cast<size_t>(c)];
        out.push_back(joined);
      }
      return out;
    };
    auto check = [&](const std::string& name, const DataLoaders& dls) {
      INFO(name);
      const auto& train = dynamic_cast<const vision::ImageFolder&>(dls.train.dataset());
      const auto& valid = dynamic_cast<const vision::ImageFolder&>(dls.valid.dataset());
      CHECK(relative(train.paths()) == fx.at(name + ".train"));
      CHECK(relative(valid.paths()) == fx.at(name + ".valid"));
      CHECK(labels(train) == fx.at(name + ".train_y"));
      CHECK(labels(valid) == fx.at(name + ".valid_y"));
      CHECK(dls.vocab == fx.at(name + ".vocab"));
    };
    using vision::ImageDataLoaders;
    const std::vector<vision::ItemTransform> resize{vision::Resize(4)};
    const auto pets = vision::get_image_files(root + "/pets");
    check("name_func", ImageDataLoaders::from_name_func(
                           pets, [](const std::string& name) { return std::isupper(name[0]) ? "cat" : "dog"; },
                           {.valid_pct = 0.25, .seed = 7, .bs = 2, .workers = 0, .item_tfms = resize}));
    const std::string pattern = R"(^(.+)_\d+\.png$)";
    check("name_re", ImageDataLoaders::from_name_re(pets, pattern, {.valid_pct = 0.2, .seed = 2, .bs = 2, .workers = 0}));
    // fastai finds the unseen label when it reads the validation item; fastcpp when it makes the datasets.
    CHECK(error_of([&] { ImageDataLoaders::from_name_re(pets, pattern, {.valid_pct = 0.2, .seed = 42}); })
              .starts_with("DataBlock: label '" + fx.at("name_re_unseen.label").at(0) + "' of '" + root + "/pets/"));
    std::vector<std::string> list_labels;
    for (const auto& pet : pets) list_labels.push_back(std::to_string(std::filesystem::path(pet).stem().string().size() % 3 * 5));
    check("lists", ImageDataLoaders::from_lists(pets, list_labels, {.valid_pct = 0.3, .seed = 3, .bs = 2, .workers = 0}));
    check("csv", ImageDataLoaders::from_csv(root + "/csv", {.csv_fname = "labels.csv", .fn_col = "name", .folder = "images",
                                                            .label_col = "label", .valid_col = Column("is_valid")},
                                            {.bs = 2, .workers = 0}));
    check("csv_numbers", ImageDataLoaders::from_csv(root + "/csv", {.csv_fname = "numbers.csv", .folder = "images"},
                                                    {.valid_pct = 0.25, .seed = 5, .bs = 2, .workers = 0}));
    check("csv_multi", ImageDataLoaders::from_csv(
                           root + "/csv", {.csv_fname = "multi.csv", .folder = "images", .label_col = "tags", .label_delim = " "},
                           {.valid_pct = 0.3, .seed = 11, .bs = 2, .workers = 0}));
    check("grandparent", vision::DataBlock<>{.get_y = vision::parent_label, .splitter = GrandparentSplitter{}, .item_tfms = resize}
                             .dataloaders(root + "/folders", {.bs = 2, .workers = 0}));
    const auto starts_with_1 = [](const std::string& path) { return std::filesystem::path(path).filename().string()[0] == '1'; };
    check("func", vision::DataBlock<>{.get_y = vision::parent_label, .splitter = FuncSplitter{starts_with_1}, .item_tfms = resize}
                      .dataloaders(root + "/folders", {.bs = 2, .workers = 0}));
    const auto masks =
        vision::DataBlock<>{.blocks = {vision::ImageBlock{}, vision::MaskBlock{{"background", "thing"}}},
                            .get_y = [&](const std::string& image) { return root + "/seg/masks/" + std::filesystem::path(image).filename().string(); },
                            .splitter = RandomSplitter{.valid_pct = 0.3, .seed = 1},
                            .item_tfms = resize}
            .dataloaders(root + "/seg/images", {.bs = 2, .workers = 0});
    CHECK(relative(dynamic_cast<const vision::SegmentationDataset&>(masks.train.dataset()).images()) == fx.at("masks.train"));
    CHECK(relative(dynamic_cast<const vision::SegmentationDataset&>(masks.valid.dataset()).images()) == fx.at("masks.valid"));
    CHECK(masks.vocab == std::vector<std::string>{"background", "thing"});
  }
#endif
}

