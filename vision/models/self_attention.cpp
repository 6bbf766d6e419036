#include "vision/models/self_attention.h"

#include <torch/nn/functional/conv.h>
#include <torch/nn/functional/normalization.h>
#include <torch/nn/init.h>

#include <cmath>

namespace fastcpp::vision {
namespace {

namespace F = torch::nn::functional;

// torch's F.normalize(x, dim=0, eps=1e-12): x / max(|x|, eps).
torch::Tensor unit(const torch::Tensor& x) { return F::normalize(x, F::NormalizeFuncOptions().dim(0).eps(1e-12)); }

}  // namespace

SpectralConv1dImpl::SpectralConv1dImpl(int64_t ni_, int64_t nf_) : ni(ni_), nf(nf_) {
  reset();
  torch::NoGradGuard no_grad;
  // nn.Conv1d's initialisation, then spectral_norm's random unit u and v.
  torch::nn::init::kaiming_uniform_(weight_orig, std::sqrt(5.0));
  weight_u.copy_(unit(torch::randn({nf})));
  weight_v.copy_(unit(torch::randn({ni})));
}

void SpectralConv1dImpl::reset() {
  weight_orig = register_parameter("weight_orig", torch::empty({nf, ni, 1}));
  weight_u = register_buffer("weight_u", torch::empty({nf}));
  weight_v = register_buffer("weight_v", torch::empty({ni}));
}

torch::Tensor SpectralConv1dImpl::normalized_weight() {
  const auto matrix = weight_orig.reshape({nf, -1});
  if (!is_training()) return weight_orig / torch::dot(weight_u, torch::mv(matrix, weight_v));
  {
    torch::NoGradGuard no_grad;
    weight_v.copy_(unit(torch::mv(matrix.t(), weight_u)));
    weight_u.copy_(unit(torch::mv(matrix, weight_v)));
  }
  // Copies, as torch's: the next power iteration changes the buffers before backward reads them.
  return weight_orig / torch::dot(weight_u.clone(), torch::mv(matrix, weight_v.clone()));
}

torch::Tensor SpectralConv1dImpl::forward(const torch::Tensor& x) { return F::conv1d(x, normalized_weight()); }

SelfAttentionImpl::SelfAttentionImpl(int64_t channels_) : channels(channels_) {
  reset();
  query->push_back(SpectralConv1d(channels, channels / 8));
  key->push_back(SpectralConv1d(channels, channels / 8));
  value->push_back(SpectralConv1d(channels, channels));
}

void SelfAttentionImpl::reset() {
  query = register_module("query", torch::nn::Sequential());
  key = register_module("key", torch::nn::Sequential());
  value = register_module("value", torch::nn::Sequential());
  gamma = register_parameter("gamma", torch::zeros({1}));
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x) {
  const auto flat = x.flatten(2);  // [N, C, pixels]
  const auto f = query->forward(flat), g = key->forward(flat), h = value->forward(flat);
  const auto beta = torch::softmax(torch::bmm(f.transpose(1, 2), g), 1);  // [N, pixels, pixels]
  return (gamma * torch::bmm(h, beta) + flat).view(x.sizes()).contiguous();
}

}  // namespace fastcpp::vision
