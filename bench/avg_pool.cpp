// vision::AvgPool's channels-last CPU path against ATen's avg_pool2d on the same maps:
// forward and backward of the Fashion-MNIST example's shortcut pools (2x2, ceil_mode, batch 128).
//
//   bench_avg_pool [--threads 2] [--steps 50]
//
// One line per map: both times in ms and fastcpp / ATen (lower is better); then the sums over
// the example's four pools, one training step's worth.
#include <fastcpp.h>

#include <chrono>
#include <cstdio>
#include <functional>

using namespace fastcpp;

namespace {

// ms per forward + backward of `pool` on x, after 5 untimed ones (x's gradient dropped before
// each, so that backward hands it over rather than adding it up).
double time_ms(const std::function<torch::Tensor(const torch::Tensor&)>& pool, torch::Tensor x, int steps) {
  const auto dy = torch::randn_like(pool(x));
  auto step = [&] {
    x.mutable_grad() = torch::Tensor();
    pool(x).backward(dy);
  };
  for (int i = 0; i < 5; ++i) step();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / steps;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, steps = 50;
  CommandLine cli("bench_avg_pool", "vision::AvgPool's channels-last CPU path against ATen's avg_pool2d: forward "
                                    "and backward of 2x2 ceil-mode pools on channels-last maps.");
  cli.flag("--threads", threads, "CPU threads").range(1, 4096);
  cli.flag("--steps", steps, "timed steps a cell").range(1, 100000);
  cli.example("bench_avg_pool --threads 2");
  cli.parse(argc, argv);
  torch::set_num_threads(threads);
  torch::manual_seed(0);
  vision::AvgPool ours(2, /*ceil_mode=*/true);
  double fastcpp_total = 0, aten_total = 0;
  for (const auto& [channels, size] : std::vector<std::pair<int64_t, int64_t>>{{16, 28}, {32, 14}, {64, 7}, {128, 4}}) {
    const auto x = torch::randn({128, channels, size, size}).contiguous(torch::MemoryFormat::ChannelsLast);
    x.requires_grad_(true);
    const double fastcpp_ms = time_ms([&](const torch::Tensor& in) { return ours(in); }, x, steps);
    const double aten_ms = time_ms([&](const torch::Tensor& in) { return torch::avg_pool2d(in, 2, 2, 0, true); }, x, steps);
    fastcpp_total += fastcpp_ms;
    aten_total += aten_ms;
    std::printf("128x%ldx%ldx%ld: fastcpp %.3f ms, ATen %.3f ms, ratio %.3f\n", static_cast<long>(channels),
                static_cast<long>(size), static_cast<long>(size), fastcpp_ms, aten_ms, fastcpp_ms / aten_ms);
  }
  std::printf("the example's four pools: fastcpp %.3f ms, ATen %.3f ms, ratio %.3f\n", fastcpp_total, aten_total,
              fastcpp_total / aten_total);
}
