// SyncBatchNorm's synced path on a GPU against BatchNorm: forward + backward over the
// BatchNorm layers of ResNet-50 (their channels and sizes, batch 128 at 224 px), fp16
// inputs in channels-last with fp32 affine parameters, as autocast trains them. The
// synced path runs in a one-rank process group, so it times the statistics, their
// gather over the ranks' counts, the normalization, the backward and the collectives'
// own cost, where the layer itself would skip the sync (no peers); its kernels are the
// library's channels-last ones (FASTCPP_SYNC_BN_KERNELS=aten: ATen's). The same arithmetic
// without the collectives is timed too, to tell the kernels' share from the
// collectives', and PyTorch's own synced path (its SyncBatchNorm function in ATen's
// operators, as it runs at a world above one) as the peer. The four alternate per round;
// the median round counts. With --profile,
// one more pass of each under PyTorch's profiler gives its GPU time, which tells a
// host-bound path (GPU time well under the wall time) from slow kernels.
//
//   bench_sync_batchnorm [--backend nccl|gloo] [--rounds 5] [--iters 10] [--profile DIR]
//
// Last lines: "SyncBatchNorm's synced path ...: <ratio>x the forward+backward rate of BatchNorm (goal >= 0.9x)",
// the ratio of the arithmetic alone, then ours against PyTorch's synced path (goal >= 1.3x).
#include <fastcpp.h>

#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

using namespace fastcpp;

namespace {

struct Layer {
  distributed::SyncBatchNorm bn;
  torch::Tensor x, dy;
};

// (channels, height) of each BatchNorm in ResNet-50, in order: the stem, then each
// stage's bottlenecks (bn1, bn2, bn3; the first block's conv2 strides, and it has a
// downsample BatchNorm).
std::vector<std::pair<int64_t, int64_t>> resnet50_batchnorms() {
  std::vector<std::pair<int64_t, int64_t>> shapes{{64, 112}};
  const int64_t widths[] = {64, 128, 256, 512}, blocks[] = {3, 4, 6, 3};
  int64_t size = 56;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t width = widths[stage], in_size = size;
    if (stage > 0) size /= 2;
    for (int64_t block = 0; block < blocks[stage]; ++block) {
      shapes.emplace_back(width, block == 0 ? in_size : size);
      shapes.emplace_back(width, size);
      shapes.emplace_back(4 * width, size);
      if (block == 0) shapes.emplace_back(4 * width, size);
    }
  }
  return shapes;
}

std::vector<Layer> make_layers(int64_t batch) {
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kHalf);
  std::vector<Layer> layers;
  for (const auto& [channels, size] : resnet50_batchnorms()) {
    Layer layer{distributed::SyncBatchNorm(channels), {}, {}};
    layer.bn->to(torch::kCUDA);
    layer.x = torch::randn({batch, channels, size, size}, options).contiguous(at::MemoryFormat::ChannelsLast);
    layer.x.requires_grad_(true);
    layer.dy = torch::randn_like(layer.x);
    layers.push_back(std::move(layer));
  }
  return layers;
}

// Seconds for `iters` passes over every layer as a network's step makes them: each
// layer's forward in order, then one backward from all their outputs, whose input
// gradients come back as a network hands them to the layer below (not added into a
// .grad: that would be one more pass over each activation, and one backward call per
// layer would put the engine's start-up, not the layers, on the host's path).
template <class Forward>
double time_passes(std::vector<Layer>& layers, int iters, Forward forward) {
  std::vector<torch::Tensor> xs, dys;
  for (const auto& layer : layers) {
    xs.push_back(layer.x);
    dys.push_back(layer.dy);
  }
  torch::cuda::synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    std::vector<torch::Tensor> ys;
    for (auto& layer : layers) ys.push_back(forward(layer));
    torch::autograd::grad(ys, xs, dys);
  }
  torch::cuda::synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The group the synced paths exchange through (one rank); set by main.
distributed::Communicator* the_group = nullptr;

// The peer: PyTorch's synced path as torch.nn.SyncBatchNorm runs it at a world above one
// (its SyncBatchNorm autograd function), in the same ATen operators: each rank's
// statistics, their all-gather with the counts, the combined statistics (and the running
// ones), the elementwise normalization; backward, each rank's reductions, their
// all-reduce, the elementwise input gradient.
struct PyTorchSyncBatchNorm : torch::autograd::Function<PyTorchSyncBatchNorm> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias, torch::Tensor running_mean,
                               torch::Tensor running_var, double momentum, double eps) {
    const int64_t channels = x.size(1);
    auto [mean, invstd] = at::batch_norm_stats(x, eps);
    const auto count = torch::full({1}, static_cast<double>(x.numel() / channels), mean.options());
    const auto all = the_group->all_gather(torch::cat({mean, invstd, count}));  // [world, 2C + 1]
    const auto counts = all.narrow(1, 2 * channels, 1);
    std::tie(mean, invstd) = at::batch_norm_gather_stats_with_counts(
        x, all.narrow(1, 0, channels), all.narrow(1, channels, channels), running_mean, running_var, momentum, eps,
        counts.reshape({-1}));
    ctx->save_for_backward({x, weight, mean, invstd, counts.to(torch::kInt)});
    return at::batch_norm_elemt(x, weight, bias, mean, invstd, eps);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3], &counts = saved[4];
    const auto grad = grads[0].contiguous(x.suggest_memory_format());
    auto [sum_dy, sum_dy_xmu, grad_weight, grad_bias] =
        at::batch_norm_backward_reduce(grad, x, mean, invstd, weight, true, true, true);
    const int64_t channels = sum_dy.size(0);
    auto sums = torch::cat({sum_dy, sum_dy_xmu});
    the_group->all_reduce_sum(sums);
    const auto grad_input = at::batch_norm_backward_elemt(grad, x, mean, invstd, weight, sums.narrow(0, 0, channels),
                                                          sums.narrow(0, channels, channels), counts);
    return {grad_input, grad_weight, grad_bias, {}, {}, {}, {}};
  }
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend = "nccl", trace_dir;
  int rounds = 5, iters = 10;
  CommandLine cli("bench_sync_batchnorm", "SyncBatchNorm's synced path on a GPU against cuDNN's BatchNorm: forward + "
                                          "backward over ResNet-50's BatchNorm layers, fp16 channels-last, in a "
                                          "one-rank process group; alternating rounds, the median.");
  cli.flag("--backend", backend, "the process group's backend").choices({"nccl", "gloo"});
  cli.flag("--rounds", rounds, "alternating rounds").range(1, 1000);
  cli.flag("--iters", iters, "passes per round").range(1, 100000);
  cli.flag("--profile", trace_dir, "one more pass of each under PyTorch's profiler: traces in this folder, GPU times "
                                   "and top kernels printed");
  cli.example("bench_sync_batchnorm --backend nccl");
  cli.parse(argc, argv);
  if (!torch::cuda::is_available()) {
    std::cout << "bench_sync_batchnorm: skipped: no CUDA device\n";
    return 0;
  }
  try {
    at::globalContext().setBenchmarkCuDNN(true);
    distributed::DistEnv one_rank;
    one_rank.master_port = 29541;
    if (const char* port = std::getenv("MASTER_PORT")) one_rank.master_port = std::stoi(port);
    distributed::Communicator comm(one_rank, {.backend = backend, .device = torch::Device(torch::kCUDA, 0)});
    torch::manual_seed(0);
    auto layers = make_layers(128);
    auto plain = [](Layer& l) {
      return torch::batch_norm(l.x, l.bn->weight, l.bn->bias, l.bn->running_mean, l.bn->running_var,
                               /*training=*/true, l.bn->momentum, l.bn->eps, /*cudnn_enabled=*/true);
    };
    auto synced = [&comm](Layer& l) { return distributed::synchronized_batch_norm(*l.bn, l.x, &comm); };
    auto arithmetic = [](Layer& l) { return distributed::synchronized_batch_norm(*l.bn, l.x, nullptr); };
    the_group = &comm;
    auto pytorch_synced = [](Layer& l) {
      return PyTorchSyncBatchNorm::apply(l.x, l.bn->weight, l.bn->bias, l.bn->running_mean, l.bn->running_var,
                                         l.bn->momentum, l.bn->eps);
    };
    time_passes(layers, 2, plain);  // cuDNN's algorithm choice, the allocator's blocks, the communicator
    time_passes(layers, 2, synced);
    time_passes(layers, 2, arithmetic);
    // On one rank a synced path must compute what BatchNorm computes: the output and the
    // input gradient of the first layer (the widest maps) and the last (the most channels).
    auto agrees_with_batchnorm = [&](auto forward) {
      for (auto* layer : {&layers.front(), &layers.back()}) {
        auto pass = [layer](auto f) {
          const auto y = f(*layer);
          const auto dx = torch::autograd::grad({y}, {layer->x}, {layer->dy})[0];
          return std::pair{y.to(torch::kFloat), dx.to(torch::kFloat)};
        };
        const auto [y, dx] = pass(plain);
        const auto [other_y, other_dx] = pass(forward);
        if (!torch::allclose(y, other_y, 1e-2, 1e-2) || !torch::allclose(dx, other_dx, 1e-2, 1e-2)) return false;
      }
      return true;
    };
    if (!agrees_with_batchnorm(synced))
      std::printf("WRONG: SyncBatchNorm's synced path (its channels-last kernels, unless FASTCPP_SYNC_BN_KERNELS=aten) "
                  "differs from BatchNorm's output or input gradient on one rank\n");
    bool with_peer = true;  // a peer that fails is reported, and the figures above still come
    try {
      time_passes(layers, 2, pytorch_synced);
      if (!agrees_with_batchnorm(pytorch_synced))
        throw std::runtime_error("its output or input gradient differs from BatchNorm's");
    } catch (const std::exception& e) {
      std::printf("PyTorch's synced path failed, left out: %s\n", e.what());
      with_peer = false;
    }
    std::vector<double> plain_s, synced_s, arithmetic_s, pytorch_s;
    for (int round = 0; round < rounds; ++round) {
      plain_s.push_back(time_passes(layers, iters, plain));
      synced_s.push_back(time_passes(layers, iters, synced));
      arithmetic_s.push_back(time_passes(layers, iters, arithmetic));
      if (with_peer) pytorch_s.push_back(time_passes(layers, iters, pytorch_synced));
    }
    const auto ms = [iters](const std::vector<double>& seconds) { return median(seconds) / iters * 1e3; };
    const double plain_ms = ms(plain_s), synced_ms = ms(synced_s), arithmetic_ms = ms(arithmetic_s);
    std::printf("BatchNorm (cuDNN): %.2f ms, synced path: %.2f ms, its arithmetic without the collectives: %.2f ms per "
                "forward+backward of the %zu layers\n",
                plain_ms, synced_ms, arithmetic_ms, layers.size());
    std::printf("SyncBatchNorm's synced path on %s, world 1 (ResNet-50's BatchNorm layers, batch 128, fp16 "
                "channels-last): %.3fx the forward+backward rate of BatchNorm (goal >= 0.9x)\n",
                backend.c_str(), plain_ms / synced_ms);
    std::printf("SyncBatchNorm's synced arithmetic alone (the same kernels, no collective): %.2fx the "
                "forward+backward rate of BatchNorm\n",
                plain_ms / arithmetic_ms);
    if (with_peer)
      std::printf("SyncBatchNorm's synced path against PyTorch's (its SyncBatchNorm function, ATen's kernels): %.2fx "
                  "its forward+backward rate, %.2f against %.2f ms (goal >= 1.3x)\n",
                  ms(pytorch_s) / synced_ms, synced_ms, ms(pytorch_s));
    std::fflush(stdout);  // the goal's figure kept, whatever the profiler below does
    if (!trace_dir.empty()) {
      std::filesystem::create_directories(trace_dir);
      // The GPU time of one pass of each: against the wall times above it tells whether a
      // path waits on the host (launches, collectives) or on its kernels.
      auto gpu_ms = [&](const char* name, auto forward) {
        ProfileWindow window(/*gpu=*/true);
        window.start();
        time_passes(layers, 1, forward);
        const auto summary = window.stop(trace_dir + "/sync_batchnorm_" + name + ".json", 1, 6);
        std::printf("%s\n", summary.text().c_str());
        return summary.gpu_ms_per_step;
      };
      const double plain_gpu = gpu_ms("batchnorm", plain), synced_gpu = gpu_ms("synced", synced),
                   arithmetic_gpu = gpu_ms("arithmetic", arithmetic);
      std::printf("GPU time per forward+backward (profiled pass): BatchNorm %.2f ms of %.2f ms wall, synced path "
                  "%.2f of %.2f, its arithmetic %.2f of %.2f\n",
                  plain_gpu, plain_ms, synced_gpu, synced_ms, arithmetic_gpu, arithmetic_ms);
      // The synced path's two goals: its kernels' time, and no host overhead on top of it.
      std::printf("SyncBatchNorm's synced path, GPU time against BatchNorm's (profiled pass): %.2fx (goal <= 1.4x)\n",
                  synced_gpu / plain_gpu);
      std::printf("SyncBatchNorm's synced path, wall time against its GPU time: %.2fx (goal <= 1.05x)\n",
                  synced_ms / synced_gpu);
    }
    comm.shutdown();
  } catch (const std::exception& e) {
    std::cerr << "bench_sync_batchnorm: " << e.what() << "\n";
    return 1;
  }
}
