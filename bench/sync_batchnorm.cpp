// SyncBatchNorm's synced path on a GPU against BatchNorm: forward + backward over the
// BatchNorm layers of ResNet-50 (their channels and sizes, batch 128 at 224 px), fp16
// inputs in channels-last with fp32 affine parameters, as autocast trains them. The
// synced path runs in a one-rank process group, so it times the statistics, their
// gather over the ranks' counts, the normalization, the backward and the collectives'
// own cost, where the layer itself would skip the sync (no peers). The same arithmetic
// without the collectives is timed too, to tell the kernels' share from the
// collectives'. The three alternate per round; the median round counts. With --profile,
// one more pass of each under PyTorch's profiler gives its GPU time, which tells a
// host-bound path (GPU time well under the wall time) from slow kernels.
//
//   bench_sync_batchnorm [--backend nccl|gloo] [--rounds 5] [--iters 10] [--profile DIR]
//
// Last lines: "SyncBatchNorm's synced path ...: <ratio>x the forward+backward rate of BatchNorm (goal >= 0.9x)",
// then the ratio of the arithmetic alone.
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
    time_passes(layers, 2, plain);  // cuDNN's algorithm choice, the allocator's blocks, the communicator
    time_passes(layers, 2, synced);
    time_passes(layers, 2, arithmetic);
    std::vector<double> plain_s, synced_s, arithmetic_s;
    for (int round = 0; round < rounds; ++round) {
      plain_s.push_back(time_passes(layers, iters, plain));
      synced_s.push_back(time_passes(layers, iters, synced));
      arithmetic_s.push_back(time_passes(layers, iters, arithmetic));
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
    }
    comm.shutdown();
  } catch (const std::exception& e) {
    std::cerr << "bench_sync_batchnorm: " << e.what() << "\n";
    return 1;
  }
}
