// Mixed precision: GradScaler against PyTorch's, MixedPrecision's interplay with
// GradientAccumulation and GradientClip, bf16 autocast on the CPU, the fp16-on-CPU
// error, checkpoints with the scaler, PeakMemMetric and ChannelsLast.
#include <sys/mman.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "helpers.h"
#include "operator_count.h"

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

// Scaled (order 9) and unscaled (order 12) gradient norms seen at before_step.
class GradProbe : public Callback {
 public:
  explicit GradProbe(int o) { order = o; }
  void before_step() override {
    double sq = 0;
    for (const auto& p : learn().model.module().parameters())
      if (p.grad().defined()) sq += p.grad().pow(2).sum().item<double>();
    norms.push_back(std::sqrt(sq));
    scales.push_back(learn().scaler ? learn().scaler->get_scale() : 1.0);
  }
  std::vector<double> norms, scales;
};

}  // namespace

TEST_SUITE("precision") {
  TEST_CASE("GradScaler equals PyTorch's GradScaler, overflow skips and growth included") {
    auto fx = read_fixture("grad_scaler.txt");
    auto param = torch::tensor(fx["init"], torch::kFloat).requires_grad_(true);
    auto opt = sgd()({ParamGroup{{param}, {}, {}}});
    opt->set_hyper("lr", 0.1);
    GradScaler scaler({.init_scale = 1024, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 3});
    for (int k = 0; k < 10; ++k) {
      const auto key = std::to_string(k);
      param.mutable_grad() = torch::tensor(fx["grad." + key], torch::kFloat) * scaler.get_scale();
      const bool stepped = scaler.step(*opt);
      scaler.update();
      INFO("step " << k);
      CHECK(stepped == (k != 2 && k != 7));
      CHECK(scaler.get_scale() == fx["scale." + key][0]);
      CHECK(torch::equal(param.detach(), torch::tensor(fx["param." + key], torch::kFloat)));
    }
  }

  // On a GPU each value read back to the host (aten::_local_scalar_dense) waits for it:
  // the scale and its history stay on the gradients' device, read when asked.
  TEST_CASE("GradScaler reads one value back to the host per step, found_inf, and none to scale or update") {
    auto param = torch::ones({4}, torch::kFloat).requires_grad_(true);
    auto opt = sgd()({ParamGroup{{param}, {}, {}}});
    opt->set_hyper("lr", 0.1);
    GradScaler scaler({.init_scale = 1024, .growth_interval = 2});
    OperatorCount count;
    count.start();
    for (int k = 0; k < 5; ++k) {
      scaler.scale((param * param).sum()).backward();
      scaler.step(*opt);
      scaler.update();
      opt->zero_grad();
    }
    CHECK(count.stop()["aten::_local_scalar_dense"] == 5);
    CHECK(scaler.history() == std::vector<double>{1024, 2048, 2048, 4096, 4096});
    CHECK(scaler.scale(torch::tensor(2.0f)).dim() == 0);  // as PyTorch's
    // Half gradients are refused, as PyTorch's unscale_ does ("Attempting to unscale FP16 gradients").
    auto half = torch::ones({4}, torch::kHalf).requires_grad_(true);
    auto half_opt = sgd()({ParamGroup{{half}, {}, {}}});
    half.mutable_grad() = torch::ones({4}, torch::kHalf);
    CHECK(error_of([&] { scaler.unscale_(*half_opt); }) ==
          "GradScaler: a parameter's gradient is Half: under loss scaling the parameters stay float (autocast runs "
          "the layers in Half; leave the model's dtype float)");
  }

  TEST_CASE("GradScaler's unscale_ after unscale_on_device gives this step's verdict, not the last read one") {
    auto param = torch::ones({2}).requires_grad_(true);
    auto opt = sgd()({ParamGroup{{param}, {}, {}}});
    GradScaler scaler({.init_scale = 4});
    param.mutable_grad() = torch::full({2}, INFINITY);
    CHECK(scaler.unscale_(*opt));  // an overflow: skip
    scaler.update();
    param.mutable_grad() = torch::ones({2});
    scaler.unscale_on_device(*opt);
    CHECK_FALSE(scaler.unscale_(*opt));  // gradient clipping's later read: finite now
    CHECK(torch::equal(param.grad(), torch::full({2}, 0.5)));  // unscaled once, by 1/2
  }

  TEST_CASE("fp16 on the CPU is an error that suggests bf16") {
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    learn.to_fp16();
    CHECK(error_of([&] { learn.fit(1); }) ==
          "Exception occurred in `MixedPrecision` when calling event `before_fit`:\n\tfp16 training needs a CUDA "
          "device, and this learner runs on cpu: use learn.to_bf16() on the CPU (or learn.to_fp32())");
  }

  TEST_CASE("bf16 autocast on the CPU: the model runs in bf16, pred comes back as float, the loss falls") {
    Learner learn(synthetic_dls(64, 16, 16), tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    struct DtypeProbe : Callback {
      explicit DtypeProbe(int o) { order = o; }
      void after_pred() override { seen.push_back(learn().pred.scalar_type()); }
      std::vector<c10::ScalarType> seen;
    };
    auto raw = learn.add_cb(DtypeProbe(5)), cast = learn.add_cb(DtypeProbe(15));
    learn.to_bf16();
    learn.fit(3, 1e-2);
    CHECK((raw->seen.front() == torch::kBFloat16));
    CHECK((cast->seen.front() == torch::kFloat));
    CHECK(learn.recorder->losses.back() < learn.recorder->losses.front());
    CHECK(!learn.scaler);  // bf16 needs no loss scaling
    learn.to_fp32();
    CHECK(!learn.get_cb<MixedPrecision>());
  }

  TEST_CASE("loss scaling with GradientAccumulation and GradientClip: unscaled once per real step, clip sees unscaled grads") {
    auto scaled = std::make_shared<GradProbe>(9), unscaled = std::make_shared<GradProbe>(12);
    Learner learn(synthetic_dls(16, 4, 2), tiny_model(), CrossEntropyLoss(), {},
                  quiet({.cbs = {std::make_shared<MixedPrecision>(MixedPrecisionOptions{
                                     .dtype = torch::kBFloat16, .scaler = {.init_scale = 256}, .loss_scale = true}),
                                 std::make_shared<GradientAccumulation>(4), std::make_shared<GradientClip>(1e9), scaled,
                                 unscaled}}));
    silence(learn);
    learn.fit(1, 1e-2);
    // 8 batches of 2, accumulation over 4 samples: 4 real steps, each unscaled and updated once
    REQUIRE(learn.scaler);
    CHECK(learn.scaler->history().size() == 4);
    REQUIRE(unscaled->norms.size() == 4);
    REQUIRE(scaled->norms.size() == 4);  // GradientAccumulation (order 6) ended the other batches before them
    for (size_t i = 0; i < 4; ++i)
      CHECK(scaled->norms[i] == doctest::Approx(unscaled->norms[i] * unscaled->scales[i]).epsilon(1e-4));
  }

  TEST_CASE("an overflow skips the step, halves the scale, and the loss stays usable") {
    auto calls = std::make_shared<int>(0);
    Loss loss([calls](const torch::Tensor& pred, const torch::Tensor& target) {
      auto l = torch::nn::functional::cross_entropy(pred, target);
      return ++*calls == 2 ? l * 1e38 : l;  // the scaled loss overflows float on batch 1
    });
    Learner learn(synthetic_dls(8, 4, 2), tiny_model(), loss, {},
                  quiet({.cbs = {std::make_shared<MixedPrecision>(MixedPrecisionOptions{
                      .dtype = torch::kBFloat16, .scaler = {.init_scale = 1024}, .loss_scale = true})}}));
    silence(learn);
    struct WeightProbe : Callback {
      WeightProbe() { order = 100; }
      void after_batch() override {
        if (learn().training) weights.push_back(snapshot(learn().model.module()));
      }
      std::vector<std::vector<torch::Tensor>> weights;
    };
    auto probe = learn.add_cb(WeightProbe());
    learn.fit(1, 1e-2);
    CHECK(learn.scaler->history() == std::vector<double>{1024, 512, 512, 512});
    CHECK(all_equal(probe->weights[0], probe->weights[1]));  // batch 1's step was skipped
    CHECK(!all_equal(probe->weights[1], probe->weights[2]));
  }

  TEST_CASE("a step cancelled before loss scaling unscaled it: no update, no error, and the fit goes on") {
    Learner learn(synthetic_dls(8, 4, 2), tiny_model(), CrossEntropyLoss(), {},
                  quiet({.cbs = {std::make_shared<MixedPrecision>(MixedPrecisionOptions{
                      .dtype = torch::kBFloat16, .scaler = {.init_scale = 1024}, .loss_scale = true})}}));
    silence(learn);
    struct SkipSecondStep : Callback {  // before MixedPrecision (order 10) in before_step
      SkipSecondStep() { order = 5; }
      void before_step() override {
        if (learn().iter == 1) throw CancelStepException();
      }
    };
    learn.fit(1, 1e-2, {.cbs = {std::make_shared<SkipSecondStep>()}});
    CHECK(learn.scaler->history().size() == 3);  // 4 batches, 3 steps unscaled and updated
  }

  TEST_CASE("a fit that failed between unscaling and stepping leaves nothing to the next: it trains as a fresh one") {
    struct FailingStep : Callback {  // an optimizer step that fails once (out of memory, say), after the unscale
      FailingStep() { order = 100; }
      void before_step() override {
        if (!failed) {
          failed = true;
          throw Error("the step failed");
        }
      }
      bool failed = false;
    };
    auto scaled_learner = [] {
      return Learner(synthetic_dls(2, 2, 2), tiny_model(), CrossEntropyLoss(), {},
                     quiet({.cbs = {std::make_shared<MixedPrecision>(
                         MixedPrecisionOptions{.dtype = torch::kBFloat16, .loss_scale = true})}}));
    };
    auto fresh = scaled_learner(), failed = scaled_learner();
    silence(fresh);
    silence(failed);
    fresh.fit(1, 1e-2);
    auto failing = std::make_shared<FailingStep>();
    CHECK_THROWS(failed.fit(1, 1e-2, {.cbs = {failing}}));
    failed.fit(1, 1e-2);
    CHECK(all_equal(snapshot(failed.model.module()), snapshot(fresh.model.module())));
    CHECK(failed.scaler->history() == fresh.scaler->history());
  }

  TEST_CASE("a nan loss under loss scaling stops with the scale history at the next batch, unless a callback ends "
            "the fit first") {
    Loss nan_loss([](const torch::Tensor& pred, const torch::Tensor& target) {
      return torch::nn::functional::cross_entropy(pred, target) * std::nan("");
    });
    Learner learn(synthetic_dls(8, 4, 2), tiny_model(), nan_loss, {},
                  quiet({.cbs = {std::make_shared<MixedPrecision>(
                      MixedPrecisionOptions{.dtype = torch::kBFloat16, .loss_scale = true})}}));
    silence(learn);
    CHECK(error_of([&] { learn.fit(1); }) ==
          "Exception occurred in `MixedPrecision` when calling event `before_batch`:\n\tfp16: the loss is nan/inf at "
          "training batch 0 of epoch 0: the model diverged (this is not a loss-scale overflow); loss scale 65536; "
          "last updates:\n\t(in training batch 1 of epoch 0)");
    std::vector<std::string> lines;
    silence(learn, &lines);
    learn.fit(1, 1e-2, {.cbs = {std::make_shared<TerminateOnNaN>()}});  // ends the fit at batch 0, no error
    REQUIRE(!lines.empty());
    CHECK(lines.back().find("training batch 0 of epoch 0") != std::string::npos);
    // lr_find without stop_div goes on past nan losses, as without loss scaling, and suggests.
    auto calls = std::make_shared<int>(0);
    Loss nan_later([calls](const torch::Tensor& pred, const torch::Tensor& target) {
      const auto loss = torch::nn::functional::cross_entropy(pred, target);
      return ++*calls > 20 ? loss * std::nan("") : loss;
    });
    Learner finder(synthetic_dls(64, 4, 2), tiny_model(), nan_later, {},
                   quiet({.cbs = {std::make_shared<MixedPrecision>(
                       MixedPrecisionOptions{.dtype = torch::kBFloat16, .loss_scale = true})}}));
    silence(finder);
    const auto before = snapshot(finder.model.module());
    const auto found = finder.lr_find({.num_it = 30, .stop_div = false, .plot = ""});
    CHECK(*calls == 30);
    CHECK(std::isfinite(found.valley));
    CHECK(all_equal(snapshot(finder.model.module()), before));
  }

  TEST_CASE("a checkpoint restores the loss scaler") {
    const auto path = (std::filesystem::temp_directory_path() / ("fastcpp_scaler_" + std::to_string(::getpid()) + ".pt")).string();
    Learner a(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    a.scaler = std::make_shared<GradScaler>(GradScalerOptions{.init_scale = 128, .growth_interval = 7});
    a.create_opt();
    auto param = a.model.module().parameters()[0];
    param.mutable_grad() = torch::ones_like(param);
    a.scaler->unscale_(*a.opt);
    a.scaler->update();
    a.save(path);
    Learner b(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    b.load(path);
    REQUIRE(b.scaler);
    CHECK(b.scaler->get_scale() == 128);
    CHECK(b.scaler->growth_tracker() == 1);
    CHECK(b.scaler->state_dict().at(c10::IValue(std::string("growth_interval"))).toInt() == 7);
    b.to_fp16({.init_scale = 8});  // after the load: the loaded scale goes on
    CHECK(b.scaler->get_scale() == 128);
    b.to_fp32();
    CHECK(!b.scaler);
    b.to_fp16({.init_scale = 8});
    CHECK(b.get_cb<MixedPrecision>());
    std::filesystem::remove(path);
  }

  TEST_CASE("PeakMemMetric adds four columns; gpu is n/a on the CPU; peak >= used") {
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {metrics::accuracy()},
                  quiet({.cbs = {std::make_shared<PeakMemMetric>()}}));
    // Holds 64 MB during epoch 0's training: fresh pages from the kernel, written, so the
    // resident size grows whatever memory the allocator kept from earlier tests.
    struct Allocate : Callback {
      const size_t bytes = 64u << 20;
      void before_train() override {
        if (learn().epoch != 0) return;
        block = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        REQUIRE(block != MAP_FAILED);
        std::memset(block, 1, bytes);
      }
      void after_epoch() override {
        if (block) munmap(block, bytes);
        block = nullptr;
      }
      void* block = nullptr;
    };
    learn.add_cb(Allocate());
    silence(learn);
    learn.fit(2);
    const auto names = learn.recorder->metric_names();
    CHECK(names == std::vector<std::string>{"epoch", "train_loss", "valid_loss", "accuracy", "cpu used", "cpu peak",
                                            "gpu used", "gpu peak", "time"});
    const auto& row0 = learn.recorder->values[0];  // train, valid, accuracy, cpu used, cpu peak, gpu used, gpu peak
    CHECK(row0[4] >= 60);  // epoch 0 peaked above 64 MB (the kernel's own high-water mark)
    CHECK(row0[4] >= row0[3]);
    CHECK(std::isnan(row0[5]));
    CHECK(learn.recorder->log[6] == "n/a");
    CHECK(learn.recorder->values[1][4] >= learn.recorder->values[1][3]);
  }

  TEST_CASE("ChannelsLast puts 4-d weights and inputs in NHWC layout, grey images too") {
    // One channel: NCHW and NHWC describe the same bytes, so only the strides tell the
    // kernels which layout to use (suggest_memory_format).
    auto x = torch::randn({8, 1, 6, 6});
    auto ds = std::make_shared<TensorDataset>(x, torch::randint(2, {8}, torch::kLong));
    torch::nn::Sequential model(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)), torch::nn::Flatten(),
                                torch::nn::Linear(64, 2));
    Learner learn({DataLoader(ds, {.bs = 4}), DataLoader(ds, {.bs = 4})}, model, CrossEntropyLoss(), {}, quiet());
    silence(learn);
    learn.to_channels_last();
    struct LayoutProbe : Callback {
      LayoutProbe() { order = 5; }
      void before_batch() override {
        nhwc = nhwc && learn().xb.suggest_memory_format() == torch::MemoryFormat::ChannelsLast;
      }
      bool nhwc = true;
    };
    auto probe = learn.add_cb(LayoutProbe());
    learn.fit(1);
    CHECK(probe->nhwc);
    const auto weight = model->parameters()[0];
    CHECK(weight.suggest_memory_format() == torch::MemoryFormat::ChannelsLast);
    CHECK(model[0]->as<torch::nn::Conv2d>()->forward(x).suggest_memory_format() == torch::MemoryFormat::ChannelsLast);
  }
}
