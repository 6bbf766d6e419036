#pragma once
// A convolution over a map with fewer pixels than half its kernel's taps (a 3x3 kernel over
// 2x2 maps: the last stage of a ResNet on 28-64 px images, a detector's coarsest levels)
// reads, for each output pixel, nearly every input pixel. There it is one matrix product:
// the map's pixels [N, H*W*C] times a weight matrix that holds, for each pair of an output
// and an input pixel, the kernel tap that joins them (zero where none does). Over 2x2 that
// is 4 multiply-adds per output pixel and channel pair instead of the kernel's 9 (oneDNN
// multiplies the padding too), at a GEMM's speed: 0.57x oneDNN's time for the Fashion-MNIST
// example's last convolution (bench_cpu_kernels).
//
// A 1x1 map stays torch's. A GEMM rounds a row otherwise for another number of rows, where
// oneDNN's convolution does not; on a ResNet encoder whose last stage is all 1x1 (32 px
// images), replicas' half batches then end further from one device than Adam's tolerance
// (tests/test_parallel.cpp), for a fraction of a millisecond won.
#include <torch/nn/modules/conv.h>

namespace fastcpp::vision {

// conv.forward(x), as one matrix product on the CPU where that path applies: channels-last
// float maps of 2 pixels or more and at most half as many as the kernel has taps, no groups,
// no dilation, zero padding, no autocast. Elsewhere it is Winograd's F(4x4, 3x3) where
// winograd_applies (vision/models/winograd_conv.h), and conv.forward(x) everywhere else.
torch::Tensor conv2d(torch::nn::Conv2dImpl& conv, const torch::Tensor& x);

}  // namespace fastcpp::vision
