#pragma once
// 3x3 convolutions at stride 1 on the CPU by Winograd's minimal filtering F(4x4, 3x3): each
// 4x4 block of output pixels comes from its 6x6 block of input pixels in 36 products per
// channel pair instead of the direct method's 144 (Lavin and Gray, "Fast Algorithms for
// Convolutional Neural Networks", 2016). oneDNN's direct convolutions run near the cores'
// peak already; the 4x fewer multiply-adds are what is left to win, where the 36 matrix
// products are large enough to run near a GEMM's peak too (core/block_gemm.h; a RetinaNet
// head's convolutions over the 16x16 level of a batch of 16 take 0.42-0.45 of oneDNN's time
// forward and backward in bench_cpu_kernels, ResNet-18's first stage at 128 px 0.48-0.50).
//
// The transforms hold 16 channels in an AVX-512 register. Each thread takes its own tiles
// through all three steps, a block that fits its core's L2 cache at a time, and sums its own
// part of the weight's gradient: threads never read what another wrote.
//
// The three passes share the transforms:
// - forward: V = B'dB per tile and input channel, M[p] = V[p] U[p] for each of the 36
//   positions p (a matrix product over the channels, U = GgG' the transformed kernel), then
//   y = A'MA per tile;
// - input gradient: the forward pass on dy with the kernel turned 180 degrees and its
//   channels swapped (at stride 1 and padding 1 that is the transposed convolution);
// - weight gradient: the forward pass's transpose, dU[p] = (A dy A')[p]' V[p] summed over the
//   tiles, then dg = G'dU G.
// The results differ from the direct method's by rounding: about 1e-5 of the output's
// largest element in float. A backward pass that records its own graph (a second
// derivative) goes through torch's convolution instead.
#include <torch/nn/modules/conv.h>

namespace fastcpp::vision {

// Whether vision::conv2d computes conv.forward(x) by winograd_conv2d: a CPU with AVX-512
// and a float map in channels-last memory of 4x4 pixels or more, a 3x3 kernel at stride 1
// with padding 1, no groups or dilation, zero padding, no autocast; and where it is faster:
// 64 channels or more in and 32 or more out, over 64 tiles of 4x4 output pixels or more (a
// batch of 16 at 8x8), and at least half as many tiles as channels.
bool winograd_applies(const torch::nn::Conv2dImpl& conv, const torch::Tensor& x);

// conv2d(x, weight, bias, stride 1, padding 1) by F(4x4, 3x3), with its gradients. x: a
// channels-last float map [n, c, h, w]; weight [o, c, 3, 3]; bias [o] or undefined. The
// output is channels-last. Throws fastcpp::Error on a CPU without AVX-512.
torch::Tensor winograd_conv2d(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

}  // namespace fastcpp::vision
