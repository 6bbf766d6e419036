// vision::GroupNorm's channels-last CPU path against ATen's GroupNorm on the same map,
// channels-last (the peer it replaces) and contiguous (ATen's fast layout): forward and
// backward of a RetinaNet head's map (batch 16, 128 channels, 32 groups) at each FPN size.
//
//   bench_group_norm [--threads 2] [--steps 50]
//
// One line per size: the three times in ms, then fastcpp / ATen channels-last and
// fastcpp / ATen contiguous (lower is better).
#include <fastcpp.h>

#include <chrono>
#include <cstdio>
#include <functional>

using namespace fastcpp;

namespace {

// ms per forward + backward of `norm` on x, after 5 untimed ones.
double time_ms(const std::function<torch::Tensor(const torch::Tensor&)>& norm, const torch::Tensor& x, int steps) {
  const auto dy = torch::ones_like(x);
  auto step = [&] { norm(x).backward(dy); };
  for (int i = 0; i < 5; ++i) step();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / steps;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, steps = 50;
  CommandLine cli("bench_group_norm", "vision::GroupNorm's channels-last CPU path against ATen's GroupNorm, "
                                      "channels-last and contiguous: forward and backward of a 16x128xHxW map.");
  cli.flag("--threads", threads, "CPU threads").range(1, 4096);
  cli.flag("--steps", steps, "timed steps a cell").range(1, 100000);
  cli.example("bench_group_norm --threads 2");
  cli.parse(argc, argv);
  torch::set_num_threads(threads);
  torch::manual_seed(0);
  vision::GroupNorm ours(32, 128);
  torch::nn::GroupNorm aten(torch::nn::GroupNormOptions(32, 128));
  for (const int64_t size : {8, 16, 32}) {
    const auto map = torch::randn({16, 128, size, size});
    const auto channels_last = map.contiguous(torch::MemoryFormat::ChannelsLast).requires_grad_(true);
    const auto contiguous = map.clone().requires_grad_(true);
    const double fastcpp_ms = time_ms([&](const torch::Tensor& x) { return ours(x); }, channels_last, steps);
    const double aten_cl_ms = time_ms([&](const torch::Tensor& x) { return aten(x); }, channels_last, steps);
    const double aten_contiguous_ms = time_ms([&](const torch::Tensor& x) { return aten(x); }, contiguous, steps);
    std::printf("16x128x%ldx%ld: fastcpp channels-last %.3f ms, ATen channels-last %.3f ms, ATen contiguous %.3f ms; "
                "ratio %.3f against ATen channels-last, %.3f against ATen contiguous\n",
                static_cast<long>(size), static_cast<long>(size), fastcpp_ms, aten_cl_ms, aten_contiguous_ms,
                fastcpp_ms / aten_cl_ms, fastcpp_ms / aten_contiguous_ms);
  }
}
