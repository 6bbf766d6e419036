#pragma once
// The small residual network of the Fashion-MNIST examples (and of the Python peer in
// bench/fashion_mnist_peer.py): a conv stem, four residual blocks halving the
// resolution and doubling the width, global pooling and a linear classifier.
// The stem and blocks hold SyncBatchNorm: plain BatchNorm in one process, synchronized under
// to_distributed and to_parallel (a torch::nn::BatchNorm2d member could not be swapped
// for it), and are Cloneable, so that to_parallel can copy them onto each device.
#include <fastcpp.h>

inline torch::nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

// A residual block: two 3x3 convs with BatchNorm, plus a shortcut pooled and widened to match.
struct ResBlockImpl : torch::nn::Cloneable<ResBlockImpl> {
  ResBlockImpl(int64_t in, int64_t out, int64_t stride) : in(in), out(out), stride(stride) { reset(); }
  void reset() override {
    conv1 = register_module("conv1", conv3x3(in, out, stride));
    bn1 = register_module("bn1", fastcpp::distributed::SyncBatchNorm(out));
    conv2 = register_module("conv2", conv3x3(out, out, 1));
    bn2 = register_module("bn2", fastcpp::distributed::SyncBatchNorm(out));
    if (stride != 1) pool = register_module("pool", fastcpp::vision::AvgPool(2, /*ceil_mode=*/true));
    if (in != out) idconv = register_module("idconv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).bias(false)));
  }
  // relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut), each BatchNorm with what follows it in
  // one kernel on the CPU (forward_relu); the last block's second convolution, over 2x2 maps, is
  // one matrix product there (vision::conv2d).
  torch::Tensor forward(const torch::Tensor& x) {
    const auto hidden = bn1->forward_relu(fastcpp::vision::conv2d(*conv1, x));
    const auto shortcut = pool ? pool(x) : x;
    return bn2->forward_relu(fastcpp::vision::conv2d(*conv2, hidden), idconv ? idconv(shortcut) : shortcut);
  }
  int64_t in, out, stride;
  torch::nn::Conv2d conv1{nullptr};
  fastcpp::distributed::SyncBatchNorm bn1{nullptr};
  torch::nn::Conv2d conv2{nullptr};
  fastcpp::distributed::SyncBatchNorm bn2{nullptr};
  fastcpp::vision::AvgPool pool{nullptr};
  torch::nn::Conv2d idconv{nullptr};
};
TORCH_MODULE(ResBlock);

// The stem: a 3x3 conv, then BatchNorm and ReLU in one kernel on the CPU.
struct StemImpl : torch::nn::Cloneable<StemImpl> {
  StemImpl(int64_t in, int64_t out) : in(in), out(out) { reset(); }
  void reset() override {
    conv = register_module("conv", conv3x3(in, out, 1));
    bn = register_module("bn", fastcpp::distributed::SyncBatchNorm(out));
  }
  torch::Tensor forward(const torch::Tensor& x) { return bn->forward_relu(conv(x)); }
  int64_t in, out;
  torch::nn::Conv2d conv{nullptr};
  fastcpp::distributed::SyncBatchNorm bn{nullptr};
};
TORCH_MODULE(Stem);

inline torch::nn::Sequential make_model() {
  return torch::nn::Sequential(Stem(1, 16),            // 28x28
                               ResBlock(16, 32, 2),    // 14x14
                               ResBlock(32, 64, 2),    // 7x7
                               ResBlock(64, 128, 2),   // 4x4
                               ResBlock(128, 256, 2),  // 2x2
                               torch::nn::AdaptiveAvgPool2d(1), torch::nn::Flatten(), torch::nn::Linear(256, 10));
}
