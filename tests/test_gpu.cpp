// The GPU half, on a real CUDA device: fp16 loss scaling against PyTorch's GradScaler,
// autocast dtypes against PyTorch's, the allocator's counters in PeakMemMetric, NCCL and
// Gloo-on-CUDA data parallel against one process, an NCCL rank losing its peer (two
// GPUs), SyncBatchNorm on CUDA tensors, and a pipeline over CUDA stages with
// GradientClip. Without a CUDA device the suite reports itself skipped (tests/main.cpp),
// and never counts as passed.
#include <csignal>
#include <filesystem>
#include <tuple>

#include "core/autocast.h"
#include "core/device.h"
#include "helpers.h"
#include "channels_last_batchnorm_check.h"
#include "synced_arithmetic.h"
#include "vision/augment.h"
#if FASTCPP_HAS_OPENCV
#include "vision/datasets/image_folder.h"
#include "vision/device_decode.h"
#endif
#include "worker_process.h"

#if FASTCPP_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

const torch::Device kCuda0("cuda:0");
const std::vector<std::string> kSharedGpuEnv{"FASTCPP_WORKER_DEVICE=cuda:0", "FASTCPP_WORKER_BACKEND=gloo"};

}  // namespace

TEST_SUITE("gpu" * doctest::skip(!torch::cuda::is_available())) {
  TEST_CASE("GradScaler on CUDA gradients equals PyTorch's torch.amp.GradScaler: scales, skipped steps, weights") {
    auto fx = read_fixture("grad_scaler.txt");
    auto param = torch::tensor(fx["init"], torch::kFloat).to(kCuda0).requires_grad_(true);
    auto opt = sgd()({ParamGroup{{param}, {}, {}}});
    opt->set_hyper("lr", 0.1);
    GradScaler scaler({.init_scale = 1024, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 3});
    for (int k = 0; k < 10; ++k) {
      const auto key = std::to_string(k);
      param.mutable_grad() = scaler.scale(torch::tensor(fx["grad." + key], torch::kFloat).to(kCuda0));
      const bool stepped = scaler.step(*opt);
      scaler.update();
      INFO("step " << k);
      CHECK(stepped == (k != 2 && k != 7));
      CHECK(scaler.get_scale() == fx["scale." + key][0]);
      // On CUDA, SGD's fused kernel steps with a double learning rate (PyTorch's does the
      // same), the fixture's CPU step with a float one: a few ulps apart.
      CHECK(torch::allclose(param.detach().cpu(), torch::tensor(fx["param." + key], torch::kFloat), 1e-6, 1e-7));
    }
  }

  TEST_CASE("autocast on CUDA gives each op the dtype PyTorch's autocast gives it, for fp16 and bf16") {
    // PyTorch, on this GPU, prints "<autocast dtype> <op> <result dtype>" per line.
    const auto expected = output_of(std::string(FASTCPP_PYTHON) + " " + FASTCPP_FIXTURES + "/autocast_dtypes.py");
    auto gen = at::make_generator<at::CPUGeneratorImpl>(0);
    auto x = torch::randn({4, 8}, gen).to(kCuda0), w = torch::randn({3, 8}, gen).to(kCuda0);
    auto img = torch::randn({2, 3, 8, 8}, gen).to(kCuda0), kernel = torch::randn({4, 3, 3, 3}, gen).to(kCuda0);
    auto target = torch::randint(3, {4}, gen, torch::kLong).to(kCuda0);
    const std::vector<std::pair<std::string, std::function<torch::Tensor()>>> ops{
        {"conv2d", [&] { return torch::conv2d(img, kernel); }},
        {"linear", [&] { return torch::linear(x, w); }},
        {"matmul", [&] { return torch::matmul(x, w.t()); }},
        {"softmax", [&] { return torch::softmax(x, 1); }},
        {"log_softmax", [&] { return torch::log_softmax(x, 1); }},
        {"layer_norm", [&] { return torch::layer_norm(x, {8}); }},
        {"mse_loss", [&] { return torch::mse_loss(x, x * 2); }},
        {"cross_entropy", [&] { return torch::nn::functional::cross_entropy(torch::linear(x, w), target); }},
        {"relu", [&] { return torch::relu(x); }},
        {"cat_half_float", [&] { return torch::cat({x.to(torch::kHalf), x}); }},
    };
    std::string got;
    for (auto dtype : {torch::kHalf, torch::kBFloat16}) {
      set_autocast(torch::kCUDA, true, dtype);
      for (const auto& [name, op] : ops)
        got += std::string(c10::toString(dtype)) + " " + name + " " + c10::toString(op().scalar_type()) + "\n";
      set_autocast(torch::kCUDA, false, dtype);
    }
    CHECK(got == expected);
  }

  TEST_CASE("to_fp16 on CUDA: the default device, pinned host batches, a Half forward, a float loss, a scaler that steps") {
    Learner learn(synthetic_dls(64, 16, 16), tiny_model(), CrossEntropyLoss(), {}, {.progress = false});
    silence(learn);
    CHECK(learn.device == kCuda0);
    CHECK(learn.dls.train.make_batch(learn.dls.train.order(0), 0, 0).x.is_pinned());
    struct DtypeProbe : Callback {
      explicit DtypeProbe(int o) { order = o; }
      void after_pred() override { seen.emplace_back(learn().xb.device(), learn().pred.scalar_type()); }
      std::vector<std::pair<torch::Device, c10::ScalarType>> seen;
    };
    auto raw = learn.add_cb(DtypeProbe(5)), cast = learn.add_cb(DtypeProbe(15));
    learn.to_fp16();
    learn.fit(3, 1e-2);
    CHECK(raw->seen.front().first == kCuda0);
    CHECK((raw->seen.front().second == torch::kHalf));
    CHECK((cast->seen.front().second == torch::kFloat));
    CHECK(learn.recorder->losses.back() < learn.recorder->losses.front());
    REQUIRE(learn.scaler);
    CHECK(learn.scaler->history().size() == 12);  // an update per batch: 4 batches x 3 epochs
    CHECK(learn.scaler->get_scale() <= 65536.0);

    learn.to_bf16();
    raw->seen.clear();
    learn.fit(1, 1e-2);
    CHECK((raw->seen.front().second == torch::kBFloat16));
  }

  TEST_CASE("get_preds on CUDA gives CPU tensors, as fastai's, equal to those of the same model on the CPU") {
    Learner learn(synthetic_dls(64, 16, 16), tiny_model(), CrossEntropyLoss(), {}, {.progress = false});
    silence(learn);
    REQUIRE(learn.device == kCuda0);
    const auto got = learn.get_preds(nullptr, /*with_loss=*/true);
    for (const auto& t : {got.preds, got.targets, got.losses}) CHECK(t.device().is_cpu());
    learn.to(torch::kCPU);
    const auto on_cpu = learn.get_preds(nullptr, /*with_loss=*/true);
    CHECK(torch::allclose(got.preds, on_cpu.preds, 1e-4, 1e-5));
    CHECK(torch::equal(got.targets, on_cpu.targets));
    CHECK(torch::allclose(got.losses, on_cpu.losses, 1e-4, 1e-5));
  }

  TEST_CASE("the progress bar's smoothed loss on CUDA is one the Recorder records, an earlier batch's, never a wait") {
    // Read at every batch as the progress bar reads it: each value read is the Recorder's
    // smoothed loss after some batch no later than the current one, in order.
    struct Reader : Callback {
      Reader() { order = 100; }
      void before_epoch() override { read.emplace_back(); }
      void after_batch() override {
        if (!learn().training) return;
        read.back().push_back(learn().recorder->smooth_loss_lagged());
        torch::cuda::synchronize();  // the copy this draw started has arrived by the next draw
      }
      std::vector<std::vector<double>> read;
    };
    Learner learn(synthetic_dls(64, 16, 8), tiny_model(), CrossEntropyLoss(), {}, {.progress = false});
    silence(learn);
    auto reader = learn.add_cb(Reader());
    learn.fit(2, 1e-2);
    const auto& losses = learn.recorder->losses;
    REQUIRE(losses.size() == 16);
    for (size_t epoch = 0; epoch < 2; ++epoch) {
      const auto& read = reader->read[epoch];
      REQUIRE(read.size() == 8);
      // The first draw of the second epoch shows the first epoch's last value; after that,
      // each draw shows the batch before it (its copy was synchronized).
      if (epoch == 0) CHECK(std::isnan(read[0]));
      else CHECK(read[0] == losses[7]);
      for (size_t i = 1; i < 8; ++i) CHECK(read[i] == losses[epoch * 8 + i - 1]);
    }
  }

  TEST_CASE("PeakMemMetric's GPU columns are the caching allocator's counters (torch.cuda.memory_allocated), reset per epoch") {
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {},
                  {.cbs = {std::make_shared<PeakMemMetric>()}, .device = kCuda0, .progress = false});
    silence(learn);
    struct Allocate : Callback {  // holds 64 MiB during epoch 0's training
      void before_train() override {
        if (learn().epoch == 0) block = torch::ones({16 * 1024 * 1024}, torch::TensorOptions().device(kCuda0));
      }
      void after_epoch() override { block = torch::Tensor(); }
      torch::Tensor block;
    };
    struct AllocatorProbe : Callback {  // reads the counters right after PeakMemMetric (order 49)
      AllocatorProbe() { order = 55; }
      void before_epoch() override { start = stats().current; }
      void after_epoch() override {
        const auto s = stats();
        used.push_back(s.current / 1048576.0 - start / 1048576.0);  // in MB, computed as the metric does
        peak.push_back(s.peak / 1048576.0 - start / 1048576.0);
      }
      static c10::CachingAllocator::Stat stats() {
        return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0];
      }
      int64_t start = 0;
      std::vector<double> used, peak;
    };
    learn.add_cb(Allocate());
    auto probe = learn.add_cb(AllocatorProbe());
    learn.fit(2);
    for (size_t epoch = 0; epoch < 2; ++epoch) {
      const auto& row = learn.recorder->values[epoch];  // train, valid, cpu used, cpu peak, gpu used, gpu peak
      INFO("epoch " << epoch);
      CHECK(row[4] == probe->used[epoch]);
      CHECK(row[5] == probe->peak[epoch]);
    }
    CHECK(learn.recorder->values[0][5] >= 64);  // the 64 MiB block
    CHECK(learn.recorder->values[1][5] < 64);   // the peak was reset for epoch 1
  }

  TEST_CASE("aug_transforms on a CUDA batch equals the CPU's: the same draws, images to float rounding, the same masks") {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
    const auto x = torch::randint(256, {6, 3, 40, 56}, gen, torch::kLong).to(torch::kUInt8);
    const auto masks = torch::randint(5, {6, 40, 56}, gen, torch::kLong);
    for (const auto& options : {vision::AugOptions{}, vision::AugOptions{.flip_vert = true, .size = std::pair<int64_t, int64_t>{16, 20}}}) {
      const vision::AugTransforms aug(options);
      const auto cpu = aug.apply({x, masks}, 17);
      const auto cuda = aug.apply({x.to(kCuda0), masks.to(kCuda0)}, 17);
      CHECK(cuda.x.is_cuda());
      CHECK((cuda.x.cpu() - cpu.x).abs().max().item<double>() < 1e-4);
      // Nearest sampling may round a coordinate on a pixel's edge the other way.
      CHECK((cuda.y.cpu() != cpu.y).sum().item<int64_t>() <= cpu.y.numel() / 1000);
    }
  }

#if FASTCPP_HAS_OPENCV
  TEST_CASE("Decode::Device on CUDA: nvJPEG's batch equals the CPU's decode within the decoders' rounding") {
    const auto dir = temp_path("gpu_decode");
    output_of(std::string(FASTCPP_PYTHON) + " " + FASTCPP_FIXTURES + "/make_jpegs.py " + dir + " 8");
    const auto folder = vision::ImageFolder::scan(
        dir, {.item_tfms = {vision::RandomResizedCrop(64), vision::FlipItem()}, .decode = vision::Decode::Device});
    REQUIRE(folder.size() == 8);
    const auto batch = folder.get_batch({0, 1, 2, 3, 4, 5, 6, 7}, 3);
    REQUIRE(batch.x_stage);
    const auto on_cpu = batch.x_stage->run(torch::kCPU);
    const auto on_gpu = batch.x_stage->run(kCuda0);
    CHECK(on_gpu.is_cuda());
    const auto difference = (on_gpu.cpu().to(torch::kFloat) - on_cpu.to(torch::kFloat)).abs();
    CHECK(difference.mean().item<double>() < 1.5);  // IDCTs and upsampling differ by a level or two
    // But not everywhere: at a sharp colour edge, chroma upsampled by libjpeg's triangle
    // filter and by nvJPEG's hardware decoder differ by up to ~60 levels (68 on an H200),
    // as a model of the two upsamplings predicts for these pictures (0.3% of values past 24).
    CHECK((difference > 24).to(torch::kFloat).mean().item<double>() < 0.02);
    CHECK(vision::device_decoder_name(kCuda0).rfind("nvJPEG", 0) == 0);
    MESSAGE("JPEG decoder on the GPU: " << vision::device_decoder_name(kCuda0));
    std::filesystem::remove_all(dir);
  }
#endif

  TEST_CASE("a CUDA device that is not there is an error naming it and what there is") {
    const auto n = torch::cuda::device_count();
    const auto missing = "cuda:" + std::to_string(n);
    CHECK(error_of([&] { Learner(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, {.device = torch::Device(missing), .progress = false}); }) ==
          "Learner: device " + missing + " is not on this machine, which has " + cuda_devices_text());
  }

  TEST_CASE("NCCL with a world of 1 ends with the weights of plain training") {
    const auto plain_out = temp_path("nccl_plain"), ddp_out = temp_path("nccl_ddp");
    REQUIRE(wait_for(spawn_worker("single_bs4", plain_out, {"FASTCPP_WORKER_DEVICE=cuda:0"}), 120) == 0);
    auto env = rank_env(0, 1, free_port() + 30);
    env.push_back("FASTCPP_WORKER_DEVICE=cuda:0");
    REQUIRE(wait_for(spawn_worker("ddp", ddp_out, env), 120) == 0);
    check_same_params(ddp_out + ".0", plain_out, 1e-4, 1e-5);
    CHECK(read_result(ddp_out + ".0").get(3).toInt() == 30);  // an all-reduce per training batch: 10 x 3 epochs
    std::filesystem::remove(ddp_out + ".0");
    std::filesystem::remove(plain_out);
  }

  TEST_CASE("an NCCL rank whose peer stops answering ends with an error naming what it lost, within the timeout") {
    // NCCL refuses two ranks on one GPU, so this needs two.
    if (torch::cuda::device_count() < 2) {
      MESSAGE("skipped: NCCL between two ranks needs two GPUs");
      return;
    }
    const auto base = temp_path("nccl_dies"), log = base + ".log";
    const int port = free_port() + 37;
    auto env = [&](int rank) {  // `resume` mode: rank 1 kills itself after epoch 0; nobody restarts it
      auto vars = rank_env(rank, 2, port);
      vars.insert(vars.end(), {"TORCHELASTIC_RESTART_COUNT=0", "FASTCPP_WORKER_BACKEND=nccl",
                               "FASTCPP_WORKER_DEVICE=cuda:" + std::to_string(rank), "FASTCPP_WORKER_NCCL_TIMEOUT_S=20"});
      return vars;
    };
    const auto start = std::chrono::steady_clock::now();
    const pid_t rank0 = spawn_worker("resume", base, env(0), log), rank1 = spawn_worker("resume", base, env(1));
    CHECK(wait_for(rank1, 120) == 128 + SIGKILL);
    CHECK(wait_for(rank0, 180) != 0);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20 + 90));  // the timeout, plus start-up
    std::ifstream in(log);
    const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Our lost-peer error when a Gloo (CPU) collective notices first; NCCL's watchdog when
    // the all-reduce of the gradients does.
    CHECK_MESSAGE((output.find("lost rank 1") != std::string::npos ||
                   output.find("Watchdog caught collective operation timeout") != std::string::npos),
                  output);
    for (const auto* suffix : {".log", ".ckpt", ".0", ".1"}) std::filesystem::remove(base + suffix);
  }

  TEST_CASE("2 processes sharing one GPU over Gloo end with the weights and metrics of 1 process") {
    check_two_ranks_equal_one_process(33, kSharedGpuEnv, 1e-4, 1e-5);
  }

  TEST_CASE("parameters frozen and unfrozen between batches, and inside accumulation windows, on 2 processes sharing "
            "one GPU over Gloo: they end as 1 process") {
    // Gloo's broadcast of CUDA tensors bumps their version: a rebuild must not broadcast
    // the weights the forward saved for the backward.
    for (const auto& [single_mode, mode, port] : std::vector<std::tuple<std::string, std::string, int>>{
             {"single_unfreeze", "unfreeze", 54}, {"single_unfreeze_acc", "unfreeze_acc", 55}}) {
      CAPTURE(mode);
      const auto single = temp_path(single_mode);
      REQUIRE(wait_for(spawn_worker(single_mode, single, kSharedGpuEnv), 120) == 0);
      for (const auto& out : run_two_ranks(mode, port, kSharedGpuEnv)) {
        check_same_params(out, single, 1e-4, 1e-5);
        std::filesystem::remove(out);
      }
      std::filesystem::remove(single);
    }
  }

  TEST_CASE("a U-Net on 2 processes sharing one GPU over Gloo (SyncBatchNorm) ends as 1 process with BatchNorm") {
    auto env = kSharedGpuEnv;
    env.push_back("FASTCPP_WORKER_MODEL=unet");
    check_two_ranks_equal_one_process(39, env, 1e-4, 1e-5);
  }

  TEST_CASE("a RetinaNet on 2 processes sharing one GPU over Gloo (SyncBatchNorm) ends as 1 process with BatchNorm") {
    auto env = kSharedGpuEnv;
    env.push_back("FASTCPP_WORKER_MODEL=retinanet");
    CHECK(check_two_ranks_equal_one_process(42, env, 1e-4, 1e-5) > 0);  // AP50
  }

  TEST_CASE("SyncBatchNorm on CUDA tensors equals BatchNorm on the whole batch: ATen's kernels, and channels-last "
            "the library's, between the collectives of 2 processes") {
    check_syncbn_equals_batchnorm(36, kSharedGpuEnv);
    auto channels_last = kSharedGpuEnv;
    channels_last.push_back("FASTCPP_WORKER_CHANNELS_LAST=1");
    check_syncbn_equals_batchnorm(45, channels_last, /*kernels=*/true);
  }

  TEST_CASE("SyncBatchNorm's channels-last CUDA kernels equal BatchNorm: fp32, fp16, bf16, 16-byte packs and single "
            "values, odd channels, batch 1, many blocks, one peer and two") {
    const auto cuda = torch::TensorOptions().device(kCuda0);
    const std::vector<std::vector<int64_t>> shapes{{6, 8, 5, 3},  {5, 7, 3, 2},   {1, 3, 4, 4},     {9, 12},
                                                   {2, 24, 5, 5}, {64, 64, 28, 28}, {3, 2048, 7, 7}, {4, 1000}};
    for (const auto& shape : shapes) {
      check_channels_last_batchnorm(cuda.dtype(torch::kFloat), shape, 1e-5, 1e-5);
      check_channels_last_batchnorm(cuda.dtype(torch::kHalf), shape, 1e-2, 1e-2);
      check_channels_last_batchnorm(cuda.dtype(torch::kBFloat16), shape, 2e-2, 5e-2);
    }
  }

  TEST_CASE("SyncBatchNorm's synced arithmetic on CUDA (its kernels channels-last, ATen's else; no collective) equals "
            "BatchNorm, fp16 models too") {
    const auto cuda = torch::TensorOptions().device(kCuda0);
    check_synced_arithmetic_equals_batchnorm(cuda.dtype(torch::kFloat), at::MemoryFormat::Contiguous, 1e-4, 1e-5);
    check_synced_arithmetic_equals_batchnorm(cuda.dtype(torch::kHalf), at::MemoryFormat::ChannelsLast, 1e-2, 1e-2);
    // A model made fp16 as a whole: the backward reads the weight in the statistics' fp32.
    for (const auto format : {at::MemoryFormat::Contiguous, at::MemoryFormat::ChannelsLast})
      check_synced_arithmetic_equals_batchnorm(cuda.dtype(torch::kHalf), format, 1e-2, 1e-2, torch::kHalf);
  }

  TEST_CASE("a pipeline over CUDA stages equals the plain model: outputs, gradients, training, GradientClip") {
    // A stage on the CPU after a GPU's reads its input only once the copy has landed.
    std::vector<std::vector<torch::Device>> device_sets{{kCuda0, kCuda0}, {kCuda0, torch::kCPU}, {torch::kCPU, kCuda0}};
    if (torch::cuda::device_count() > 1) device_sets.push_back({kCuda0, torch::Device("cuda:1")});
    else MESSAGE("stages on cuda:0 and cuda:1 skipped: one GPU");
    auto mlp = [] {
      torch::manual_seed(0);
      return torch::nn::Sequential(torch::nn::Linear(4, 100), torch::nn::ReLU(), torch::nn::Linear(100, 100),
                                   torch::nn::ReLU(), torch::nn::Linear(100, 3));
    };
    for (const auto& devices : device_sets) {
      CAPTURE(devices.front());
      CAPTURE(devices.back());
      auto plain = mlp();
      plain->to(kCuda0);
      auto net = distributed::pipeline(mlp(), {.devices = devices, .chunks = 3});
      auto x = torch::randn({7, 4}).to(kCuda0);
      auto y_plain = plain->forward(x), y_net = net->forward(x);
      CHECK(torch::allclose(y_plain.cpu(), y_net.cpu(), 1e-5, 1e-6));
      y_plain.pow(2).sum().backward();
      y_net.pow(2).sum().backward();
      auto a = plain->parameters(), b = net->parameters();
      for (size_t i = 0; i < a.size(); ++i) CHECK(torch::allclose(a[i].grad().cpu(), b[i].grad().cpu(), 1e-4, 1e-6));

      // Trained, and trained with GradientClip: its global norm spans the stages' devices.
      for (const double clip : {0.0, 0.05}) {
        CAPTURE(clip);
        auto cbs = [clip]() -> std::vector<CallbackPtr> {
          if (clip == 0) return {};
          return {std::make_shared<GradientClip>(clip)};
        };
        Learner plain_learn(synthetic_dls(16, 8, 4), mlp(), CrossEntropyLoss(), {}, {.cbs = cbs(), .device = kCuda0, .progress = false});
        auto piped = distributed::pipeline(mlp(), {.devices = devices, .chunks = 2});
        Learner piped_learn(synthetic_dls(16, 8, 4), piped, CrossEntropyLoss(), {},
                            {.cbs = cbs(), .device = piped->output_device(), .progress = false});
        silence(plain_learn);
        silence(piped_learn);
        plain_learn.fit(2, 1e-2);
        piped_learn.fit(2, 1e-2);
        auto p = plain_learn.model.module().parameters(), q = piped_learn.model.module().parameters();
        for (size_t i = 0; i < p.size(); ++i) CHECK(torch::allclose(p[i].cpu(), q[i].cpu(), 1e-4, 1e-6));
      }
    }
  }
}

#endif  // FASTCPP_HAS_CUDA
