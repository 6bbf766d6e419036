// The library's own channels-last CPU kernels against the ATen kernels they replace, on the
// same maps, forward and backward in training, 2 threads by default:
// - BatchNorm + residual add + ReLU (SyncBatchNorm::forward_relu) against ATen's BatchNorm,
//   add and ReLU: the Fashion-MNIST example's nine BatchNorms (batch 128);
// - AvgPool (vision::AvgPool, 2x2, ceil_mode) against ATen's avg_pool2d: its four shortcut pools;
// - GroupNorm (vision::GroupNorm) against ATen's GroupNorm channels-last and contiguous: a
//   RetinaNet head's 16x128xHxW map, 32 groups, at each FPN size;
// - convolutions over maps smaller than the kernel's reach (vision::conv2d, one matrix
//   product) against ATen's (oneDNN's): the example's last 3x3 over 2x2, a RetinaNet head's
//   convolutions at its 2x2 level and its P7 convolution (2x2 to 1x1);
// - 3x3 convolutions at stride 1 by Winograd's F(4x4, 3x3) (vision::winograd_conv2d) against
//   oneDNN's: a RetinaNet head's levels, ResNet-18's stages at 128 px, the example's stages;
// - cross-entropy over 2 to 15 classes (CrossEntropyLoss's own path) against ATen's.
//
//   bench_cpu_kernels [--threads 2] [--steps 50] [--only winograd]
//
// One line per map: the times in ms and fastcpp / ATen (lower is better); for the example's
// layers also the sums, one training step's worth.
#include <fastcpp.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "learner/few_class_cross_entropy.h"
#include "vision/models/winograd_conv.h"

using namespace fastcpp;

namespace {

using Layer = std::function<torch::Tensor(const torch::Tensor&)>;

// ms per forward + backward of `layer` on x, after 5 untimed ones. The inputs' gradients are
// dropped before each step, so that backward hands them over rather than adding them up.
double time_ms(const Layer& layer, const torch::Tensor& x, int steps, const std::vector<torch::Tensor>& inputs) {
  const auto dy = torch::randn_like(layer(x));
  auto step = [&] {
    for (auto t : inputs) t.mutable_grad() = torch::Tensor();
    layer(x).backward(dy);
  };
  for (int i = 0; i < 5; ++i) step();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / steps;
}

// Times ours and ATen's on x (and the residual, if any), prints the line, adds to the sums.
void race(const char* what, const Layer& ours, const Layer& aten, const torch::Tensor& x, const torch::Tensor& residual,
          int steps, double& ours_total, double& aten_total) {
  std::vector<torch::Tensor> inputs{x};
  if (residual.defined()) inputs.push_back(residual);
  const double ours_ms = time_ms(ours, x, steps, inputs), aten_ms = time_ms(aten, x, steps, inputs);
  ours_total += ours_ms;
  aten_total += aten_ms;
  std::printf("  %s: fastcpp %.3f ms, ATen %.3f ms, ratio %.3f\n", what, ours_ms, aten_ms, ours_ms / aten_ms);
}

torch::Tensor channels_last_map(std::vector<int64_t> shape) {
  return torch::randn(shape).contiguous(torch::MemoryFormat::ChannelsLast).requires_grad_(true);
}

void batchnorm_relu(int steps) {
  std::printf("BatchNorm + add + ReLU, the Fashion-MNIST example's (batch 128):\n");
  struct Map {
    int64_t channels, size;
    bool residual;
  };
  double ours_total = 0, aten_total = 0;
  for (const auto& [channels, size, with_residual] :
       std::vector<Map>{{16, 28, false}, {32, 14, false}, {32, 14, true}, {64, 7, false}, {64, 7, true},
                        {128, 4, false}, {128, 4, true}, {256, 2, false}, {256, 2, true}}) {
    distributed::SyncBatchNorm ours(channels);
    torch::nn::BatchNorm2d aten(channels);
    const auto x = channels_last_map({128, channels, size, size});
    const auto residual = with_residual ? channels_last_map({128, channels, size, size}) : torch::Tensor();
    const auto what = "128x" + std::to_string(channels) + "x" + std::to_string(size) + "x" + std::to_string(size) +
                      (with_residual ? " + residual" : "");
    race(
        what.c_str(), [&](const torch::Tensor& in) { return ours->forward_relu(in, residual); },
        [&](const torch::Tensor& in) {
          const auto y = aten(in);
          return torch::relu(with_residual ? y + residual : y);
        },
        x, residual, steps, ours_total, aten_total);
  }
  std::printf("  the nine: fastcpp %.3f ms, ATen %.3f ms, ratio %.3f\n", ours_total, aten_total, ours_total / aten_total);
}

void avg_pool(int steps) {
  std::printf("AvgPool 2x2 ceil_mode, the Fashion-MNIST example's shortcuts (batch 128):\n");
  vision::AvgPool ours(2, /*ceil_mode=*/true);
  double ours_total = 0, aten_total = 0;
  for (const auto& [channels, size] : std::vector<std::pair<int64_t, int64_t>>{{16, 28}, {32, 14}, {64, 7}, {128, 4}}) {
    const auto what = "128x" + std::to_string(channels) + "x" + std::to_string(size) + "x" + std::to_string(size);
    race(
        what.c_str(), [&](const torch::Tensor& in) { return ours(in); },
        [&](const torch::Tensor& in) { return torch::avg_pool2d(in, 2, 2, 0, true); },
        channels_last_map({128, channels, size, size}), torch::Tensor(), steps, ours_total, aten_total);
  }
  std::printf("  the four: fastcpp %.3f ms, ATen %.3f ms, ratio %.3f\n", ours_total, aten_total, ours_total / aten_total);
}

void group_norm(int steps) {
  std::printf("GroupNorm, a RetinaNet head's map (16x128, 32 groups):\n");
  vision::GroupNorm ours(32, 128);
  torch::nn::GroupNorm aten(torch::nn::GroupNormOptions(32, 128));
  for (const int64_t size : {8, 16, 32}) {
    const auto x = channels_last_map({16, 128, size, size});
    const auto contiguous = x.detach().contiguous().requires_grad_(true);
    double ours_total = 0, aten_total = 0;
    const auto what = "16x128x" + std::to_string(size) + "x" + std::to_string(size);
    race((what + ", ATen channels-last").c_str(), [&](const torch::Tensor& in) { return ours(in); },
         [&](const torch::Tensor& in) { return aten(in); }, x, torch::Tensor(), steps, ours_total, aten_total);
    const double contiguous_ms = time_ms([&](const torch::Tensor& in) { return aten(in); }, contiguous, steps, {contiguous});
    std::printf("  %s, ATen contiguous %.3f ms, ratio %.3f\n", what.c_str(), contiguous_ms, ours_total / contiguous_ms);
  }
}

void small_map_conv(int steps) {
  std::printf("3x3 convolutions over maps smaller than the kernel's reach:\n");
  struct Map {
    const char* what;
    int64_t batch, channels, size, stride;
    bool bias;
  };
  for (const auto& [what, batch, channels, size, stride, bias] :
       std::vector<Map>{{"the example's last (128x256x2x2)", 128, 256, 2, 1, false},
                        {"a head's at 2x2 (16x128x2x2, bias)", 16, 128, 2, 1, true},
                        {"P7, stride 2 (16x128x2x2 to 1x1, bias)", 16, 128, 2, 2, true}}) {
    torch::nn::Conv2d conv(torch::nn::Conv2dOptions(channels, channels, 3).stride(stride).padding(1).bias(bias));
    conv->weight.set_data(conv->weight.contiguous(torch::MemoryFormat::ChannelsLast));
    const auto x = channels_last_map({batch, channels, size, size});
    std::vector<torch::Tensor> parameters = conv->parameters();
    parameters.push_back(x);
    const double ours_ms = time_ms([&](const torch::Tensor& in) { return vision::conv2d(*conv, in); }, x, steps, parameters);
    const double aten_ms = time_ms([&](const torch::Tensor& in) { return conv(in); }, x, steps, parameters);
    std::printf("  %s: fastcpp %.3f ms, ATen %.3f ms, ratio %.3f\n", what, ours_ms, aten_ms, ours_ms / aten_ms);
  }
}

void winograd_conv(int steps) {
  std::printf("3x3 convolutions at stride 1 by Winograd's F(4x4, 3x3) (vision/models/winograd_conv.h):\n");
  struct Map {
    const char* what;
    int64_t batch, in, out, size;
  };
  for (const auto& [what, batch, in, out, size] :
       std::vector<Map>{{"a head's at 16x16 (16x128x16x16)", 16, 128, 128, 16},
                        {"a head's at 8x8 (16x128x8x8)", 16, 128, 128, 8},
                        {"a head's at 4x4 (16x128x4x4)", 16, 128, 128, 4},
                        {"a head's classifier at 16x16 (16x128x16x16 to 45)", 16, 128, 45, 16},
                        {"a head's box regressor at 8x8 (16x128x8x8 to 36)", 16, 128, 36, 8},
                        {"ResNet-18's layer1 at 128 px (16x64x32x32)", 16, 64, 64, 32},
                        {"ResNet-18's layer3 at 128 px (16x256x8x8)", 16, 256, 256, 8},
                        {"ResNet-18's layer4 at 128 px (16x512x4x4)", 16, 512, 512, 4},
                        {"the example's first stage (128x16x28x28)", 128, 16, 16, 28},
                        {"the example's 32 channels (128x32x14x14)", 128, 32, 32, 14},
                        {"the example's 64 channels (128x64x7x7)", 128, 64, 64, 7},
                        {"the example's 128 channels (128x128x4x4)", 128, 128, 128, 4}}) {
    torch::nn::Conv2d conv(torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false));
    conv->weight.set_data(conv->weight.contiguous(torch::MemoryFormat::ChannelsLast));
    const auto x = channels_last_map({batch, in, size, size});
    std::vector<torch::Tensor> parameters = conv->parameters();
    parameters.push_back(x);
    const auto ours = [&](const torch::Tensor& t) { return vision::winograd_conv2d(t, conv->weight, conv->bias); };
    const double error = (ours(x) - conv(x)).abs().max().item<double>() / conv(x).abs().max().item<double>();
    const double ours_ms = time_ms(ours, x, steps, parameters);
    const double aten_ms = time_ms([&](const torch::Tensor& t) { return conv(t); }, x, steps, parameters);
    std::printf("  %s: fastcpp %.3f ms, ATen %.3f ms, ratio %.3f (output off by %.1e of its largest)\n", what, ours_ms,
                aten_ms, ours_ms / aten_ms, error);
  }
}

void cross_entropy_race(int steps) {
  std::printf("Cross-entropy over fewer classes than a vector holds (learner/few_class_cross_entropy.h):\n");
  for (const int64_t classes : {2, 3, 5, 10, 15}) {
    const auto logits = torch::randn({128, classes}).requires_grad_(true);
    const auto labels = torch::randint(classes, {128}, torch::kLong);
    const auto ours = [&](const torch::Tensor& x) { return few_class_cross_entropy(x, labels, 0.0, true); };
    const double ours_ms = time_ms(ours, logits, steps, {logits});
    const auto aten = [&](const torch::Tensor& x) { return torch::nn::functional::cross_entropy(x, labels); };
    const double aten_ms = time_ms(aten, logits, steps, {logits});
    std::printf("  128 rows of %ld classes: fastcpp %.4f ms, ATen %.4f ms, ratio %.3f\n", static_cast<long>(classes),
                ours_ms, aten_ms, ours_ms / aten_ms);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, steps = 50;
  std::string only;
  CommandLine cli("bench_cpu_kernels", "The library's CPU kernels (BatchNorm + add + ReLU, AvgPool, GroupNorm, "
                                       "small-map and Winograd convolutions, few-class cross-entropy) against ATen's on the same "
                                       "inputs: forward and backward.");
  cli.flag("--threads", threads, "CPU threads").range(1, 4096);
  cli.flag("--steps", steps, "timed steps a cell").range(1, 100000);
  cli.flag("--only", only, "one section (to profile it alone)")
      .choices({"batchnorm", "avg-pool", "group-norm", "small-map", "winograd", "cross-entropy"});
  cli.example("bench_cpu_kernels --threads 2");
  cli.parse(argc, argv);
  torch::set_num_threads(threads);
  torch::manual_seed(0);
  const auto section = [&](const char* name) { return only.empty() || only == name; };
  if (section("batchnorm")) batchnorm_relu(steps);
  if (section("avg-pool")) avg_pool(steps);
  if (section("group-norm")) group_norm(steps);
  if (section("small-map")) small_map_conv(steps);
  if (section("winograd")) winograd_conv(steps);
  if (section("cross-entropy")) cross_entropy_race(steps * 100);  // microseconds a step: many more of them
}
