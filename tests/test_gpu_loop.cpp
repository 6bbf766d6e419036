// The training loop on a real CUDA device, watched for what slows it: host syncs inside
// a training batch (PyTorch's sync debug mode) and the autograd warning that a step's
// graph outlived it or crossed streams. Part of the gpu suite; the stream-warning case
// runs in a process of its own (ctest entry gpu_stream_warnings), because libtorch
// prints that warning once per process.
//
// The syncs that remain, by design, and where:
//   - fp16: GradScaler's found-inf check before the step (PyTorch's GradScaler.step has
//     the same one), one per training batch;
//   - at the end of each phase: the Recorder's smoothed losses and validation sums, and
//     the metrics' values, read once.
// The live progress bar (on a terminal) shows the loss as of its previous draw, copied
// back behind an event: no sync.
#include "helpers.h"
#include "operator_count.h"

#if FASTCPP_HAS_CUDA
#include <c10/cuda/CUDAFunctions.h>

#include <mutex>
#include <numeric>

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

const torch::Device kCuda0("cuda:0");

// Every warning libtorch raises on this thread (and those the autograd engine's threads
// hand back to it at the end of backward), each with the calls that raised it: a sync
// warning names no operation, the stack does.
struct WarningCollector : c10::WarningHandler {
  void process(const c10::Warning& warning) override {
    std::lock_guard<std::mutex> lock(mutex);
    messages.push_back(warning.msg() + "\n" + c10::get_backtrace(/*frames_to_skip=*/1, /*maximum_number_of_frames=*/24));
  }
  size_t count(const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex);
    return static_cast<size_t>(std::count_if(messages.begin(), messages.end(),
                                             [&](const std::string& m) { return m.find(text) != std::string::npos; }));
  }
  std::mutex mutex;
  std::vector<std::string> messages;
};

// Counts the host syncs of each training batch, in libtorch's sync debug mode (warn).
// A batch's window runs from its before_batch, ahead of every other callback, to the
// next batch's (or the phase's end): every callback's after_batch, and the loading of
// the next batch, count too.
class SyncCounter : public Callback {
 public:
  SyncCounter(WarningCollector& warnings) : warnings_(warnings) { order = -100; }
  void before_batch() override {
    if (!learn().training) return;
    close_window();
    seen_ = warnings_.count("synchroniz");
    open_ = true;
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
  }
  void after_train() override { close_window(); }
  std::vector<size_t> per_batch;

 private:
  void close_window() {
    if (!open_) return;
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    per_batch.push_back(warnings_.count("synchroniz") - seen_);
    open_ = false;
  }
  WarningCollector& warnings_;
  size_t seen_ = 0;
  bool open_ = false;
};

// Makes every host sync of the training phase an error, from the first batch's
// before_batch to the phase's end, on any thread (libtorch's sync debug mode is
// process-wide): a sync on a replica's thread, in a callback or in loading a batch
// fails the fit.
class SyncForbidden : public Callback {
 public:
  SyncForbidden() { order = -100; }
  void before_batch() override {
    if (learn().training) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  }
  void after_train() override { c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED); }
};

DataLoaders image_dls() {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  auto images = torch::randint(0, 256, {20 * 16, 3, 16, 16}, gen, torch::kLong).to(torch::kByte);
  auto labels = torch::randint(0, 4, {20 * 16}, gen, torch::kLong);
  const std::vector<BatchTransform> tfms{Normalize{{0.5, 0.5, 0.5}, {0.25, 0.25, 0.25}}};
  auto data = std::make_shared<TensorDataset>(images, labels);
  return {DataLoader(data, {.bs = 16, .shuffle = true, .workers = 2, .batch_tfms = tfms}),
          DataLoader(data, {.bs = 64, .batch_tfms = tfms})};
}

Model small_cnn() {
  torch::manual_seed(0);
  return vision::resnet18({.num_classes = 4, .stem = vision::Stem::cifar, .width = 8});
}

}  // namespace

TEST_SUITE("gpu" * doctest::skip(!torch::cuda::is_available())) {
  TEST_CASE("a training batch syncs with the host only where PyTorch's loop does: none in fp32 and bf16, one in fp16") {
    for (const std::string precision : {"fp32", "bf16", "fp16"}) {
      CAPTURE(precision);
      WarningCollector warnings;
      c10::WarningUtils::WarningHandlerGuard guard(&warnings);
      // The live bar as on a terminal, drawn every 100 ms.
      Learner learn(image_dls(), small_cnn(), CrossEntropyLoss(), {metrics::accuracy()},
                    {.cbs = {std::make_shared<GradientClip>(1.0), std::make_shared<MixUp>(),
                             std::make_shared<ProgressCallback>(/*live=*/true)},
                     .device = kCuda0,
                     .progress = false});
      silence(learn);
      auto counter = learn.add_cb(SyncCounter(warnings));
      if (precision == "bf16") learn.to_bf16();
      // A scale that does not overflow here: a skipped step reads one flag more (is the
      // loss itself finite? a divergence, not an overflow, gets its own error).
      if (precision == "fp16") learn.to_fp16({.init_scale = 1024});
      learn.fit_one_cycle(1, 1e-2);
      REQUIRE(counter->per_batch.size() == 20);
      const size_t expected = precision == "fp16" ? 1 : 0;
      for (size_t i = 0; i < counter->per_batch.size(); ++i) {
        INFO("batch " << i << "; warnings: " << (warnings.messages.empty() ? "" : warnings.messages.back()));
        CHECK(counter->per_batch[i] == expected);
      }
    }
  }

  TEST_CASE("a label out of range on the GPU ends the fit with the CPU's error, and the device stays usable") {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(2);
    auto labels = torch::randint(0, 3, {64}, gen, torch::kLong);
    labels[37] = 7;  // batch 2, position 5
    auto data = std::make_shared<TensorDataset>(torch::randn({64, 4}, gen), labels);
    torch::manual_seed(0);
    Learner learn({DataLoader(data, {.bs = 16}), DataLoader(data, {.bs = 16})},
                  torch::nn::Sequential(torch::nn::Linear(4, 3)), CrossEntropyLoss(), {}, {.device = kCuda0});
    silence(learn);
    const auto message = error_of([&] { learn.fit(1, 1e-2); });
    CHECK(message.rfind("label 7 at position 5 of a batch is outside [0, 3): the model has 3 outputs; check the "
                        "dataset's labels or the model's output size", 0) == 0);
    // No device-side assert: the CUDA context still computes.
    CHECK((torch::ones({4}, kCuda0) * 2).sum().item<double>() == 8.0);
  }

  TEST_CASE("Normalize on the GPU gives the CPU's floats, bitwise, with per-channel and shared statistics") {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    const auto bytes = torch::randint(0, 256, {8, 3, 6, 6}, gen, torch::kLong).to(torch::kByte);
    for (const auto& normalize : {Normalize::imagenet(), Normalize{{0.3}, {0.2}}}) {
      CAPTURE(normalize.mean.size());
      CHECK(torch::equal(normalize(bytes.to(kCuda0)).cpu(), normalize(bytes)));
    }
  }

  TEST_CASE("in-memory data go to the GPU once and give the host loader's batches, bitwise") {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
    auto data = std::make_shared<TensorDataset>(torch::randint(0, 256, {100, 1, 8, 8}, gen, torch::kLong).to(torch::kByte),
                                                torch::randint(0, 10, {100}, gen, torch::kLong));
    DataLoader resident(data, {.bs = 16, .shuffle = true, .seed = 5}), host(data, {.bs = 16, .shuffle = true, .workers = 2, .resident = false, .seed = 5});
    resident.to(kCuda0);
    host.to(kCuda0);
    std::vector<Batch> a, b;
    for (const auto& batch : resident) a.push_back(batch);
    for (const auto& batch : host) b.push_back(batch);
    CHECK(resident.resident());
    CHECK(!host.resident());
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i].x.device() == kCuda0);
      CHECK(torch::equal(a[i].x.cpu(), b[i].x.cpu()));
      CHECK(torch::equal(a[i].y.cpu(), b[i].y.cpu()));
    }
  }

  TEST_CASE("two loaders over one in-memory dataset share its one copy on the GPU") {
    auto data = std::make_shared<TensorDataset>(torch::arange(64 * 4, torch::kFloat).view({64, 4}),
                                                torch::arange(64, torch::kLong));
    DataLoader train(data, {.bs = 8, .sampler = std::make_shared<SequentialSampler>(32)}),
        valid(data, {.bs = 16});
    train.to(kCuda0);
    valid.to(kCuda0);
    auto a = train.begin(), b = valid.begin();  // each first batch is a view of the resident copy
    REQUIRE((train.resident() && valid.resident()));
    CHECK((*a).x.data_ptr() == (*b).x.data_ptr());
    CHECK(torch::equal((*b).x.cpu(), data->x().narrow(0, 0, 16)));
  }

  TEST_CASE("a channels-last net with a one-channel stem and a 1x1 convolution steps with Adam's fused kernel") {
    // cuDNN may lay out such weights' gradients otherwise on their size-1 dimension;
    // the fused kernels take that, and so must the check that picks them.
    struct CountStep : Callback {
      explicit CountStep(OperatorCount& count) : count(count) {}
      void before_step() override {
        if (learn().iter == 1) count.start();
      }
      void after_step() override {
        if (learn().iter == 1) counts = count.stop();
      }
      OperatorCount& count;
      std::map<std::string, int> counts;
    };
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    auto data = std::make_shared<TensorDataset>(torch::randn({64, 1, 8, 8}, gen), torch::randint(0, 3, {64}, gen, torch::kLong));
    torch::manual_seed(0);
    torch::nn::Sequential net(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 3).padding(1)), torch::nn::BatchNorm2d(8),
                              torch::nn::ReLU(), torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 8, 1)), torch::nn::ReLU(),
                              torch::nn::AdaptiveAvgPool2d(1), torch::nn::Flatten(), torch::nn::Linear(8, 3));
    Learner learn({DataLoader(data, {.bs = 16, .shuffle = true}), DataLoader(data, {.bs = 16})}, net, CrossEntropyLoss(),
                  {}, {.opt_func = adam(), .device = kCuda0});
    silence(learn);
    learn.to_channels_last();
    OperatorCount count;
    auto window = learn.add_cb(CountStep(count));
    learn.fit(1, 1e-3);
    // One launch for the weights that decay, one for the norm layers and biases.
    CHECK(window->counts["aten::_fused_adamw_"] == 2);
  }

  TEST_CASE("a Learner asked for a bare `cuda` names the current GPU, and its in-memory data go there once") {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(4);
    auto data = std::make_shared<TensorDataset>(torch::randint(0, 256, {64, 1, 4, 4}, gen, torch::kLong).to(torch::kByte),
                                                torch::randint(0, 3, {64}, gen, torch::kLong));
    const std::vector<BatchTransform> tfms{IntToFloat()};
    Learner learn({DataLoader(data, {.bs = 16, .shuffle = true, .batch_tfms = tfms}), DataLoader(data, {.bs = 16, .batch_tfms = tfms})},
                  torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(16, 3)), CrossEntropyLoss(), {},
                  {.device = torch::Device(torch::kCUDA)});
    silence(learn);
    CHECK(learn.device == kCuda0);
    CHECK(learn.dls.train.device() == kCuda0);
    learn.fit(1, 1e-2);
    REQUIRE(learn.dls.train.resident());
    // Items 0..15 are a view of the copy on the GPU. Held here, the copy's memory cannot
    // be handed to a second copy: the same pointer after another fit means none was made.
    std::vector<int64_t> first(16);
    std::iota(first.begin(), first.end(), 0);
    const auto view = learn.dls.train.make_batch(first, 0, 0).x;
    learn.fit(1, 1e-2);
    CHECK(learn.dls.train.make_batch(first, 0, 0).x.data_ptr() == view.data_ptr());
    // to_parallel too: {cuda, cuda:0} are two replicas on the current GPU.
    learn.to_parallel({torch::Device(torch::kCUDA), kCuda0});
    learn.fit(1, 1e-2);
    CHECK(learn.get_cb<distributed::DataParallel>()->devices() == std::vector<torch::Device>{kCuda0, kCuda0});
  }

  TEST_CASE("to_parallel on {cuda:0, cuda:0}: no host sync inside a training batch, the replicas' synced BatchNorm "
            "included (fp32, bf16; bf16 channels-last by the library's kernels)") {
    for (const std::string precision : {"fp32", "bf16", "bf16 channels-last"}) {
      CAPTURE(precision);
      Learner learn(image_dls(), small_cnn(), CrossEntropyLoss(), {metrics::accuracy()}, {.device = kCuda0});
      silence(learn);
      learn.add_cb(SyncForbidden());
      if (precision != "fp32") learn.to_bf16();
      if (precision == "bf16 channels-last") learn.to_channels_last();
      learn.to_parallel({kCuda0, kCuda0});
      CHECK_NOTHROW(learn.fit(1, 1e-2));
      c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);  // a fit cut mid-batch
    }
  }

  TEST_CASE("no AccumulateGrad stream warning: plain, fp16 channels-last, and to_parallel on {cuda:0, cuda:0}") {
    WarningCollector warnings;
    c10::WarningUtils::WarningHandlerGuard guard(&warnings);
    for (const bool parallel : {false, true}) {
      Learner learn(image_dls(), small_cnn(), CrossEntropyLoss(), {metrics::accuracy()}, {.device = kCuda0});
      silence(learn);
      learn.to_fp16();
      learn.to_channels_last();
      if (parallel) learn.to_parallel({kCuda0, kCuda0});
      learn.fit(2, 1e-2);
    }
    const std::string first = warnings.messages.empty() ? std::string() : warnings.messages.front();
    INFO(first);
    CHECK(warnings.count("AccumulateGrad") == 0);
  }
}

#endif  // FASTCPP_HAS_CUDA
