// SyncBatchNorm::forward_relu's fused CPU kernel against ATen's BatchNorm, add and ReLU on
// the same channels-last maps: forward and backward in training, for each BatchNorm of the
// Fashion-MNIST example's network (batch 128), with and without a residual.
//
//   bench_batchnorm_relu [--threads 2] [--steps 50]
//
// One line per map: both times in ms and fastcpp / ATen (lower is better); then the sums
// over the example's nine BatchNorms, one training step's worth.
#include <fastcpp.h>

#include <chrono>
#include <cstdio>
#include <functional>

using namespace fastcpp;

namespace {

// ms per forward + backward of `layer` on x, after 5 untimed ones. The inputs' gradients are
// dropped before each step, so that backward hands them over rather than adding them up.
double time_ms(const std::function<torch::Tensor(const torch::Tensor&)>& layer, torch::Tensor x,
               torch::Tensor residual, int steps) {
  const auto dy = torch::randn_like(x);
  auto step = [&] {
    x.mutable_grad() = torch::Tensor();
    if (residual.defined()) residual.mutable_grad() = torch::Tensor();
    layer(x).backward(dy);
  };
  for (int i = 0; i < 5; ++i) step();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / steps;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, steps = 50;
  CommandLine cli("bench_batchnorm_relu", "SyncBatchNorm::forward_relu's fused CPU kernel against ATen's BatchNorm, "
                                          "add and ReLU: forward and backward on channels-last maps.");
  cli.flag("--threads", threads, "CPU threads").range(1, 4096);
  cli.flag("--steps", steps, "timed steps a cell").range(1, 100000);
  cli.example("bench_batchnorm_relu --threads 2");
  cli.parse(argc, argv);
  torch::set_num_threads(threads);
  torch::manual_seed(0);
  struct Map {
    int64_t channels, size, count;  // how many of the example's BatchNorms see such a map
    bool residual;
  };
  double fastcpp_total = 0, aten_total = 0;
  for (const auto& [channels, size, count, with_residual] : std::vector<Map>{{16, 28, 1, false},
                                                                              {32, 14, 1, false},
                                                                              {32, 14, 1, true},
                                                                              {64, 7, 1, false},
                                                                              {64, 7, 1, true},
                                                                              {128, 4, 1, false},
                                                                              {128, 4, 1, true},
                                                                              {256, 2, 1, false},
                                                                              {256, 2, 1, true}}) {
    distributed::SyncBatchNorm ours(channels);
    torch::nn::BatchNorm2d aten(channels);
    const auto map = (torch::randn({128, channels, size, size}) + 0.5).contiguous(torch::MemoryFormat::ChannelsLast);
    const auto x = map.requires_grad_(true);
    const auto residual =
        with_residual ? torch::randn_like(map).requires_grad_(true) : torch::Tensor();
    const double fastcpp_ms = time_ms([&](const torch::Tensor& in) { return ours->forward_relu(in, residual); }, x, residual, steps);
    const double aten_ms = time_ms(
        [&](const torch::Tensor& in) {
          const auto y = aten(in);
          return torch::relu(with_residual ? y + residual : y);
        },
        x, residual, steps);
    fastcpp_total += count * fastcpp_ms;
    aten_total += count * aten_ms;
    std::printf("128x%ldx%ldx%ld%s: fastcpp %.3f ms, ATen %.3f ms, ratio %.3f\n", static_cast<long>(channels),
                static_cast<long>(size), static_cast<long>(size), with_residual ? " + residual" : "", fastcpp_ms,
                aten_ms, fastcpp_ms / aten_ms);
  }
  std::printf("the example's nine BatchNorms: fastcpp %.3f ms, ATen %.3f ms, ratio %.3f\n", fastcpp_total, aten_total,
              fastcpp_total / aten_total);
}
