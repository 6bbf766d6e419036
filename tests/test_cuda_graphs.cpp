// The training step as a CUDA graph (callbacks/cuda_graphs.h). On the CPU: the optimizer's
// step on the device (optim/device_step.h) equals its host step, skips where GradScaler
// found an overflow, and reads nothing back; the decisions to train eagerly and their
// messages. On a GPU (the gpu suite): recorded and replayed steps equal eager ones.
#include "freeze_mid_fit.h"
#include "helpers.h"
#include "operator_count.h"

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

// A weight with decay and a bias without in one group, another weight in a second.
std::vector<ParamGroup> two_groups_of(const std::vector<torch::Tensor>& params) {
  return {ParamGroup{{params[0], params[1]}, {true, false}, {}}, ParamGroup{{params[2]}, {true}, {}}};
}

std::vector<torch::Tensor> copies_of(const std::vector<torch::Tensor>& init) {
  std::vector<torch::Tensor> copies;
  for (const auto& t : init) copies.push_back(t.clone().requires_grad_(true));
  return copies;
}

// Steps a host optimizer and a device one over the same gradients, with a one-cycle lr
// (halved for the first group) and mom (or mom 0); found[k] 1 makes step k overflow: its gradients
// get an inf and a nan, the device optimizer is told so, and the host one does not step
// (as MixedPrecision's CancelStep). Every param and state entry must agree.
void check_device_step_equals_host(const OptFunc& opt_func, const std::vector<int>& found, bool with_mom = true) {
  torch::manual_seed(0);
  const std::vector<torch::Tensor> init{torch::randn({5, 3}), torch::randn({5}), torch::randn({2, 5})};
  auto host_params = copies_of(init), device_params = copies_of(init);
  auto host = opt_func(two_groups_of(host_params)), device = opt_func(two_groups_of(device_params));
  device->set_device_step(true);
  const auto lr = combined_cos(0.25, 1e-3, 5e-2, 1e-5);
  const auto mom = combined_cos(0.25, 0.95, 0.85, 0.95);
  for (size_t k = 0; k < found.size(); ++k) {
    const double pos = static_cast<double>(k) / found.size();
    for (auto* opt : {host.get(), device.get()}) {
      opt->set_hyper("lr", {lr(pos) / 2, lr(pos)});
      opt->set_hyper("mom", with_mom ? mom(pos) : 0.0);
      opt->set_hyper("wd", 0.1);
    }
    for (size_t i = 0; i < init.size(); ++i) {
      const auto grad = torch::randn_like(init[i]);
      host_params[i].mutable_grad() = grad.clone();
      device_params[i].mutable_grad() = grad.clone();
    }
    if (found[k]) {
      device_params[0].mutable_grad()[0][0] = INFINITY;
      device_params[2].mutable_grad()[1][1] = NAN;
      device->skip_next_step_if(torch::ones({1}));
    } else {
      host->step();
      device->skip_next_step_if(torch::zeros({1}));
    }
    device->step();
    host->zero_grad();
    device->zero_grad();
  }
  for (size_t i = 0; i < init.size(); ++i) {
    CAPTURE(i);
    CHECK(torch::allclose(device_params[i], host_params[i], /*rtol=*/1e-5, /*atol=*/1e-6));
  }
  // SGD made without momentum: the host keeps no grad_avg, the device one always does.
  const auto host_state = host->state_dict(), device_state = device->state_dict();
  CHECK(host_state.size() <= device_state.size());
  for (const auto& entry : host_state) {
    const auto& key = entry.key().toStringRef();
    CAPTURE(key);
    REQUIRE(device_state.contains(key));
    const auto& other = device_state.at(key);
    if (entry.value().isTensor())
      CHECK(torch::allclose(other.toTensor(), entry.value().toTensor(), 1e-5, 1e-6));
    else if (entry.value().isInt())
      CHECK(other.toInt() == entry.value().toInt());
    else if (entry.value().isString())
      CHECK(other.toStringRef() == entry.value().toStringRef());
    else
      CHECK(other.toDouble() == doctest::Approx(entry.value().toDouble()).epsilon(1e-12));
  }
}

// Overrides one step event; capturable or not as the test says.
class LossProbe : public Callback {
 public:
  void after_loss() override { ++losses; }
  int losses = 0;
};

Learner cpu_learner(OptFunc opt_func = sgd({.mom = 0.9}), std::vector<CallbackPtr> cbs = {}) {
  return Learner(synthetic_dls(24, 8, 4), tiny_model(), CrossEntropyLoss(), {},
                 quiet({.opt_func = std::move(opt_func), .cbs = std::move(cbs), .splitter = two_groups}));
}

// Turns the optimizer's device step on for a fit, as to_graphs does on a GPU.
class DeviceStep : public Callback {
 public:
  void before_fit() override { learn().opt->set_device_step(true); }
  void after_fit() override { learn().opt->set_device_step(false); }
};

}  // namespace

TEST_SUITE("optimizers") {
  // Decoupled weight decay, and L2 regularization (decouple_wd false).
  const std::vector<std::pair<const char*, OptFunc>> kDeviceSteppers{
      {"SGD", sgd({.mom = 0.9})},
      {"Adam", adam()},
      {"SGD with L2", sgd({.mom = 0.9, .decouple_wd = false})},
      {"Adam with L2", adam({.decouple_wd = false})}};

  TEST_CASE("SGD's and Adam's step on the device equals their host step over a one-cycle lr and mom") {
    for (const auto& [name, opt_func] : kDeviceSteppers) {
      CAPTURE(name);
      check_device_step_equals_host(opt_func, {0, 0, 0, 0, 0, 0, 0, 0});
    }
    check_device_step_equals_host(sgd(), {0, 0, 0, 0}, /*with_mom=*/false);
    check_device_step_equals_host(sgd(), {0, 0, 0, 0});  // made without momentum: the scheduled mom is ignored
  }

  TEST_CASE("a step the device skips (found_inf 1, inf and nan gradients) leaves params, averages and counts alone") {
    for (const auto& [name, opt_func] : kDeviceSteppers) {
      CAPTURE(name);
      check_device_step_equals_host(opt_func, {0, 1, 0, 1, 1, 0, 0});
      // A first step skipped leaves the count at 0, where Adam's bias correction is 0.
      check_device_step_equals_host(opt_func, {1, 0, 0});
    }
  }

  TEST_CASE("the device step and GradScaler's device verdict read nothing back to the host") {
    auto param = torch::ones({4}, torch::kFloat).requires_grad_(true);
    auto opt = adam()({ParamGroup{{param}, {}, {}}});
    opt->set_device_step(true);
    GradScaler scaler({.init_scale = 1024, .growth_interval = 2});
    OperatorCount count;
    count.start();
    for (int k = 0; k < 5; ++k) {
      scaler.scale((param * param).sum()).backward();
      opt->skip_next_step_if(scaler.unscale_on_device(*opt));
      opt->step();
      scaler.update();
      opt->zero_grad();
    }
    const auto counts = count.stop();
    CHECK(counts.count("aten::_local_scalar_dense") == 0);
    CHECK(counts.count("aten::item") == 0);
    CHECK(scaler.history() == std::vector<double>{1024, 2048, 2048, 4096, 4096});
    CHECK(opt->state_dict().at("0.0.step").toInt() == 5);
  }

  TEST_CASE("the optimizer's state generation changes whenever its state tensors are replaced") {
    auto param = torch::ones({3}).requires_grad_(true);
    auto opt = adam()({ParamGroup{{param}, {}, {}}});
    auto last = opt->state_generation();
    const auto changed = [&] {
      const bool moved = opt->state_generation() != last;
      last = opt->state_generation();
      return moved;
    };
    param.mutable_grad() = torch::ones({3});
    opt->step();
    CHECK_FALSE(changed());
    opt->set_device_step(true);
    CHECK(changed());
    opt->step();
    CHECK_FALSE(changed());
    opt->load_state_dict(opt->state_dict(), "test");
    CHECK(changed());
    opt->clear_state();
    CHECK(changed());
  }

  TEST_CASE("the device step keeps its counts across set_device_step and clear_state; others refuse it") {
    // `unused` never gets a gradient: it keeps its own count, 0, not the group's.
    auto param = torch::ones({3}).requires_grad_(true), unused = torch::ones({2}).requires_grad_(true);
    auto opt = sgd({.mom = 0.9})({ParamGroup{{param, unused}, {}, {}}});
    opt->set_device_step(true);
    for (int k = 0; k < 3; ++k) {
      param.mutable_grad() = torch::ones({3});
      opt->step();
    }
    CHECK(opt->state_dict().at("0.0.step").toInt() == 3);
    CHECK(opt->state_dict().at("0.1.step").toInt() == 0);
    opt->set_device_step(false);
    CHECK(opt->state_dict().at("0.0.step").toInt() == 3);
    CHECK(opt->state_dict().at("0.1.step").toInt() == 0);
    opt->set_device_step(true);
    opt->clear_state();
    CHECK(opt->state_dict().at("0.0.step").toInt() == 0);
    CHECK(opt->device_step());
    auto radam_opt = radam()({ParamGroup{{torch::ones({3}).requires_grad_(true)}, {}, {}}});
    CHECK_FALSE(radam_opt->has_device_step());
    CHECK(error_of([&] { radam_opt->set_device_step(true); }) ==
          "set_device_step: RAdam has no step on the device (SGD and Adam have)");
  }
}

TEST_SUITE("callbacks") {
  TEST_CASE("a fit with the optimizer's step on the device trains as with its host step") {
    for (const auto& [name, opt_func] : {std::pair{"SGD", sgd({.mom = 0.9, .wd = 0.01})}, std::pair{"Adam", adam()}}) {
      CAPTURE(name);
      auto eager = cpu_learner(opt_func);
      auto on_device = cpu_learner(opt_func, {std::make_shared<DeviceStep>()});
      eager.fit_one_cycle(2, 1e-2);
      on_device.fit_one_cycle(2, 1e-2);
      const auto expected = snapshot(eager.model.module()), got = snapshot(on_device.model.module());
      for (size_t i = 0; i < expected.size(); ++i) CHECK(torch::allclose(got[i], expected[i], 1e-5, 1e-6));
      CHECK_FALSE(on_device.opt->device_step());
      CHECK(on_device.opt->state_dict().at("1.0.step").toInt() == eager.opt->state_dict().at("1.0.step").toInt());
    }
  }

  TEST_CASE("a callback's own step events are known once they reached it") {
    LossProbe probe;
    CHECK_FALSE(probe.overrides(Event::after_loss).has_value());
    auto learn = cpu_learner();
    auto added = learn.add_cb(LossProbe());
    CHECK_FALSE(CudaGraphs::host_step_callbacks(learn).has_value());
    learn.fit(1);
    CHECK(added->overrides(Event::after_loss) == true);
    CHECK(added->overrides(Event::before_step) == false);
    CHECK(CudaGraphs::host_step_callbacks(learn) == "LossProbe (after_loss)");
    added->capturable = true;  // MixedPrecision and GradientClip are, and so pass
    learn.to_bf16();
    learn.add_cb(GradientClip(1.0));
    learn.fit(1);
    CHECK(CudaGraphs::host_step_callbacks(learn) == "");
    // FreezeMidFit changes parameters before a batch: nothing of the step runs on the host.
    auto freezing = cpu_learner();
    freezing.add_cb(FreezeMidFit({.epoch = 0, .iter = 1}, {.epoch = 0, .iter = 2}));
    freezing.fit(1);
    CHECK(CudaGraphs::host_step_callbacks(freezing) == "");
    auto between = cpu_learner();
    between.add_cb(FreezeMidFit({.epoch = 0, .iter = 1}, {.epoch = 0, .iter = 2}, 2, /*between_passes=*/true));
    between.fit(1);
    CHECK(CudaGraphs::host_step_callbacks(between) == "FreezeMidFit (after_loss)");
  }

  TEST_CASE("to_graphs says why it trains eagerly") {
    CHECK(CudaGraphs::fallback_reason(cpu_learner()) == "CUDA graphs need a CUDA device, and this learner trains on cpu");
    auto with_radam = cpu_learner(radam());
    with_radam.create_opt();  // as fit does before before_fit
    CHECK(CudaGraphs::fallback_reason(with_radam) == "RAdam has no step on the device (SGD and Adam have)");
    CHECK(CudaGraphs::fallback_reason(cpu_learner(sgd(), {std::make_shared<MixUp>()})) ==
          "MixUp draws its mixing weights on the host at each batch");
    CHECK(CudaGraphs::fallback_reason(cpu_learner(sgd(), {std::make_shared<GradientAccumulation>(4)})) ==
          "GradientAccumulation steps when a count kept on the host says so");
    auto parallel = cpu_learner();
    parallel.to_parallel({torch::kCPU, torch::kCPU});
    CHECK(CudaGraphs::fallback_reason(parallel) == "to_parallel runs its own step across devices, which is not recorded");
  }

  TEST_CASE("to_graphs on the CPU says so once and trains exactly as without it") {
    auto eager = cpu_learner();
    auto graphed = cpu_learner();
    std::vector<std::string> lines;
    silence(graphed, &lines);
    graphed.to_graphs();
    graphed.to_graphs();  // one callback
    eager.fit_one_cycle(1, 1e-2);
    graphed.fit_one_cycle(1, 1e-2);
    eager.fit(1, 1e-3);
    graphed.fit(1, 1e-3);
    CHECK(all_equal(snapshot(graphed.model.module()), snapshot(eager.model.module())));
    CHECK(lines == std::vector<std::string>{
                       "to_graphs: training eagerly, as CUDA graphs need a CUDA device, and this learner trains on cpu"});
    const auto graphs = graphed.get_cb<CudaGraphs>();
    REQUIRE(graphs);
    CHECK(graphs->replays() == 0);
    CHECK(error_of([] { CudaGraphs({.warmup = 0}); }) == "CudaGraphs: warmup must be at least 1, got 0");
  }
}

#if FASTCPP_HAS_CUDA

namespace {

const torch::Device kCuda0("cuda:0");

// 21 batches of 16 (the last of 8) of 16x16 images on the GPU, and a small ResNet.
DataLoaders gpu_image_dls() {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  auto images = torch::randn({20 * 16 + 8, 3, 16, 16}, gen);
  auto labels = torch::randint(0, 4, {20 * 16 + 8}, gen, torch::kLong);
  auto data = std::make_shared<TensorDataset>(images, labels);
  return {DataLoader(data, {.bs = 16, .shuffle = true}), DataLoader(data, {.bs = 64})};
}

struct GraphRun {
  std::vector<torch::Tensor> params;
  std::vector<double> losses;
  std::shared_ptr<CudaGraphs> graphs;
  std::vector<std::string> lines;
  double scale = 0;  // fp16's loss scale at the end
};

// How a run of train_on_gpu trains: with to_graphs; eagerly stepping on the device, so as
// to differ from the graphed run only in the recording (the device step against the host
// one: the optimizers suite); or plainly eagerly, as to_graphs does where it falls back.
enum class Training { graphed, eager_device_step, eager };

// Two epochs of one-cycle training with weight decay; `setup` picks precision and callbacks.
GraphRun train_on_gpu(Training training, OptFunc opt_func, const std::function<void(Learner&)>& setup) {
  torch::manual_seed(0);
  auto model = vision::resnet18({.num_classes = 4, .stem = vision::Stem::cifar, .width = 8});
  Learner learn(gpu_image_dls(), model, CrossEntropyLoss(), {},
                {.opt_func = std::move(opt_func), .wd = 0.01, .device = kCuda0, .progress = false});
  GraphRun run;
  silence(learn, &run.lines);
  setup(learn);
  if (training == Training::graphed)
    learn.to_graphs();
  else if (training == Training::eager_device_step)
    learn.add_cb(DeviceStep());
  torch::manual_seed(1);  // the same shuffles
  learn.fit_one_cycle(2, 1e-2);
  for (const auto& t : learn.model.module().parameters()) run.params.push_back(t.detach().cpu());
  for (const auto& t : learn.model.module().buffers()) run.params.push_back(t.detach().cpu().to(torch::kDouble));
  run.losses = learn.recorder->losses;
  run.graphs = learn.get_cb<CudaGraphs>();
  if (learn.scaler) run.scale = learn.scaler->get_scale();
  return run;
}

void check_runs_alike(const GraphRun& eager, const GraphRun& graphed, double tolerance) {
  REQUIRE(eager.params.size() == graphed.params.size());
  for (size_t i = 0; i < eager.params.size(); ++i) {
    CAPTURE(i);
    CHECK(torch::allclose(graphed.params[i].to(torch::kDouble), eager.params[i].to(torch::kDouble), tolerance, tolerance));
  }
  REQUIRE(eager.losses.size() == graphed.losses.size());
  for (size_t i = 0; i < eager.losses.size(); ++i) {
    CAPTURE(i);
    if (tolerance == 0)
      CHECK(graphed.losses[i] == eager.losses[i]);
    else
      CHECK(graphed.losses[i] == doctest::Approx(eager.losses[i]).epsilon(tolerance));
  }
}

// Deterministic kernels and full fp32 for a case, the previous settings back after it.
// cuBLAS needs CUBLAS_WORKSPACE_CONFIG (the gpu suite's ctest entries set it) to promise
// determinism; warn-only, so that a run without it still tests.
struct Deterministic {
  Deterministic() {
    auto& context = at::globalContext();
    context.setDeterministicAlgorithms(true, /*warn_only=*/true);
    context.setDeterministicCuDNN(true);
    context.setBenchmarkCuDNN(false);
    context.setAllowTF32CuBLAS(false);
    context.setAllowTF32CuDNN(false);
  }
  ~Deterministic() {
    auto& context = at::globalContext();
    context.setDeterministicAlgorithms(algorithms_, warn_only_);
    context.setDeterministicCuDNN(cudnn_);
    context.setBenchmarkCuDNN(benchmark_);
    context.setAllowTF32CuBLAS(tf32_cublas_);
    context.setAllowTF32CuDNN(tf32_cudnn_);
  }
  bool algorithms_ = at::globalContext().deterministicAlgorithms(),
       warn_only_ = at::globalContext().deterministicAlgorithmsWarnOnly(),
       cudnn_ = at::globalContext().deterministicCuDNN(), benchmark_ = at::globalContext().benchmarkCuDNN(),
       tf32_cublas_ = at::globalContext().allowTF32CuBLAS(), tf32_cudnn_ = at::globalContext().allowTF32CuDNN();
};

}  // namespace

TEST_SUITE("gpu" * doctest::skip(!torch::cuda::is_available())) {
  TEST_CASE("to_graphs: recorded and replayed steps equal eager ones in fp32, a short last batch eager") {
    Deterministic deterministic;
    // With L2 too: wd*p added into the recorded gradients, wd read from the device.
    for (const auto& [name, opt_func] :
         {std::pair{"SGD", sgd({.mom = 0.9})}, std::pair{"Adam", adam()},
          std::pair{"SGD with L2", sgd({.mom = 0.9, .wd = 0.01, .decouple_wd = false})},
          std::pair{"Adam with L2", adam({.wd = 0.01, .decouple_wd = false})}}) {
      CAPTURE(name);
      const auto eager = train_on_gpu(Training::eager_device_step, opt_func, [](Learner&) {});
      const auto graphed = train_on_gpu(Training::graphed, opt_func, [](Learner&) {});
      check_runs_alike(eager, graphed, 1e-6);
      CHECK(graphed.lines.empty());
      CHECK(graphed.graphs->eager_reason() == "");
      // 20 full batches an epoch: 3 eager, the 4th recorded and replayed, then replays.
      CHECK(graphed.graphs->replays() == 17 + 20);
    }
  }

  TEST_CASE("to_graphs in bf16, and in fp16 with overflowing steps skipped on the device, equal eager steps") {
    Deterministic deterministic;
    const auto bf16 = [](Learner& learn) { learn.to_bf16(); };
    check_runs_alike(train_on_gpu(Training::eager_device_step, adam(), bf16),
                     train_on_gpu(Training::graphed, adam(), bf16), 1e-2);
    // The scale doubles every 2 clean steps from 2^10, so that replayed steps overflow
    // fp16 again and again (and back off); the eager warm-up steps do not.
    const auto fp16 = [](Learner& learn) {
      learn.to_fp16({.init_scale = 1024, .growth_interval = 2});
      learn.add_cb(GradientClip(1.0));
    };
    const auto eager = train_on_gpu(Training::eager_device_step, sgd({.mom = 0.9}), fp16);
    const auto graphed = train_on_gpu(Training::graphed, sgd({.mom = 0.9}), fp16);
    check_runs_alike(eager, graphed, 1e-2);
    CHECK(graphed.graphs->replays() == 37);
    CHECK(eager.scale < 2147483648.0);  // 2^31 after 42 clean steps: it did back off
    CHECK(graphed.scale == eager.scale);
  }

  TEST_CASE("to_graphs records again after parameters are frozen or unfrozen between batches, and equals eager") {
    Deterministic deterministic;
    const auto freezing = [](Learner& learn) {
      learn.add_cb(FreezeMidFit({.epoch = 0, .iter = 8}, {.epoch = 1, .iter = 5}));
    };
    const auto eager = train_on_gpu(Training::eager_device_step, sgd({.mom = 0.9}), freezing);
    const auto graphed = train_on_gpu(Training::graphed, sgd({.mom = 0.9}), freezing);
    check_runs_alike(eager, graphed, 1e-6);
    CHECK(!torch::equal(graphed.params[0], train_on_gpu(Training::graphed, sgd({.mom = 0.9}), [](Learner&) {}).params[0]));
    // Each change: 3 eager steps, then recorded again. Epoch 0: batches 3-7 and 11-19 from
    // graphs; epoch 1: 0-4 and 8-19.
    CHECK(graphed.graphs->replays() == 5 + 9 + 5 + 12);
  }

  TEST_CASE("to_graphs: a label out of range in a replayed batch ends the fit with the eager step's error") {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(2);
    auto labels = torch::randint(0, 4, {16 * 12}, gen, torch::kLong);
    labels[16 * 9 + 5] = 7;  // batch 9: replayed
    auto data = std::make_shared<TensorDataset>(torch::randn({16 * 12, 3, 16, 16}, gen), labels);
    torch::manual_seed(0);
    Learner learn({DataLoader(data, {.bs = 16}), DataLoader(data, {.bs = 64})},
                  vision::resnet18({.num_classes = 4, .stem = vision::Stem::cifar, .width = 8}), CrossEntropyLoss(), {},
                  {.opt_func = sgd({.mom = 0.9}), .device = kCuda0, .progress = false});
    silence(learn);
    learn.to_graphs();
    const auto error = error_of([&] { learn.fit(1, 1e-2); });
    CHECK(error.find("label 7 at position 5 of a batch is outside [0, 4)") != std::string::npos);
    CHECK(learn.get_cb<CudaGraphs>()->replays() > 0);
  }

  TEST_CASE("to_graphs trains eagerly with a callback whose step events run on the host, saying which") {
    const auto probe = [](Learner& learn) { learn.add_cb(LossProbe()); };
    const auto graphed = train_on_gpu(Training::graphed, sgd({.mom = 0.9}), probe);
    CHECK(graphed.lines == std::vector<std::string>{
                               "to_graphs: training eagerly, as these callbacks' step events would run only once, when "
                               "the step is recorded: LossProbe (after_loss) (mark a callback `capturable` if they only "
                               "queue device work)"});
    CHECK(graphed.graphs->replays() == 0);
  }

  TEST_CASE("to_graphs trains eagerly with MixUp, saying so once") {
    Deterministic deterministic;
    const auto mixup = [](Learner& learn) { learn.add_cb(MixUp()); };
    const auto graphed = train_on_gpu(Training::graphed, adam(), mixup);
    CHECK(graphed.lines == std::vector<std::string>{
                               "to_graphs: training eagerly, as MixUp draws its mixing weights on the host at each batch"});
    CHECK(graphed.graphs->replays() == 0);
    // Falling back, it steps on the host again, as plain eager training does.
    check_runs_alike(train_on_gpu(Training::eager, adam(), mixup), graphed, 0);
  }
}

#endif  // FASTCPP_HAS_CUDA
