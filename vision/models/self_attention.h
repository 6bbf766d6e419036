#pragma once
// fastai's SelfAttention (SAGAN's, in the U-Net's third block from the end with
// self_attention): over the pixels of x [N, C, H, W], query and key 1x1 convs to C/8
// channels and a value conv to C, each spectrally normalized; out = gamma * attended + x,
// gamma a parameter that starts at 0 (the layer starts as the identity).
// State-dict keys as fastai's: query.0.weight_orig, query.0.weight_u, query.0.weight_v,
// key.0.*, value.0.*, gamma.
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

namespace fastcpp::vision {

// A 1x1 Conv1d without bias whose weight is divided by its largest singular value, as
// torch.nn.utils.spectral_norm keeps it: the singular vectors u and v are buffers that
// one power iteration refines at each forward in training mode (in place, without
// gradient); eval mode uses them as they are.
struct SpectralConv1dImpl : torch::nn::Cloneable<SpectralConv1dImpl> {
  SpectralConv1dImpl(int64_t ni, int64_t nf);
  void reset() override;  // the tensors registered, not initialised: a clone copies them
  torch::Tensor forward(const torch::Tensor& x);
  // weight_orig / sigma, with sigma = u . (W v): the weight the conv uses.
  torch::Tensor normalized_weight();

  int64_t ni, nf;
  torch::Tensor weight_orig, weight_u, weight_v;
};
TORCH_MODULE(SpectralConv1d);

struct SelfAttentionImpl : torch::nn::Cloneable<SelfAttentionImpl> {
  explicit SelfAttentionImpl(int64_t channels);
  void reset() override;  // empty layers that a clone fills with copies
  torch::Tensor forward(const torch::Tensor& x);

  int64_t channels;
  torch::nn::Sequential query{nullptr}, key{nullptr}, value{nullptr};
  torch::Tensor gamma;
};
TORCH_MODULE(SelfAttention);

}  // namespace fastcpp::vision
