#include "data/batch_transforms.h"

#include <torch/torch.h>

#include "core/error.h"
#include "core/spec_text.h"
#include "data/buffer_pool.h"

namespace fastcpp {

torch::Tensor IntToFloat::operator()(const torch::Tensor& x) const {
  if (x.is_floating_point()) return x;
  return x.to(torch::kFloat).div_(255);
}

// out = x * scale[c] + shift[c] with scale = 1/(255 std), shift = -mean/std: one pass.
torch::Tensor Normalize::normalize_bytes(const torch::Tensor& x) const {
  auto input = x.contiguous();
  auto out = pooled_empty(input.sizes(), torch::kFloat);
  const int64_t batch = input.size(0), channels = input.size(1);
  const int64_t plane = input.numel() / std::max<int64_t>(batch * channels, 1);
  const uint8_t* src = input.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < channels; ++c) {
      const size_t stat = mean.size() == 1 ? 0 : static_cast<size_t>(c);
      const float scale = static_cast<float>(1.0 / (255.0 * std[stat]));
      const float shift = static_cast<float>(-mean[stat] / std[stat]);
      const int64_t offset = (b * channels + c) * plane;
      for (int64_t i = 0; i < plane; ++i) dst[offset + i] = static_cast<float>(src[offset + i]) * scale + shift;
    }
  return out;
}

Normalize Normalize::from_data(const Dataset& dataset, size_t max_items) {
  const size_t n = std::min(dataset.size(), max_items);
  if (n == 0) throw Error("Normalize::from_data: the dataset is empty");
  std::vector<int64_t> indices(n);
  for (size_t i = 0; i < n; ++i) indices[i] = static_cast<int64_t>(i);
  auto x = IntToFloat()(dataset.get_batch(indices).x).to(torch::kDouble);
  if (x.dim() < 2) throw Error("Normalize::from_data: items need a channel dimension, got " + c10::str(x.sizes()));
  auto per_channel = x.transpose(0, 1).reshape({x.size(1), -1});
  auto mean = per_channel.mean(1), std = per_channel.std(1);
  Normalize result;
  for (int64_t c = 0; c < x.size(1); ++c) {
    result.mean.push_back(mean[c].item<double>());
    result.std.push_back(std[c].item<double>());
  }
  return result;
}

torch::Tensor Normalize::operator()(const torch::Tensor& x) const {
  if (mean.empty() || mean.size() != std.size())
    throw Error("Normalize: need as many means as stds, got " + std::to_string(mean.size()) + " and " +
                std::to_string(std.size()));
  const auto channels = static_cast<int64_t>(mean.size());
  if (x.dim() < 2 || (x.size(1) != channels && channels != 1))
    throw Error("Normalize: " + std::to_string(channels) + " channel statistics for a batch of shape " +
                c10::str(x.sizes()));
  if (x.scalar_type() == torch::kUInt8 && x.device().is_cpu()) return normalize_bytes(x);
  auto input = IntToFloat()(x);
  std::vector<int64_t> shape(static_cast<size_t>(input.dim()), 1);
  shape[1] = channels;
  auto options = torch::TensorOptions().dtype(input.scalar_type());
  auto mean_t = torch::tensor(mean, options).view(shape).to(input.device(), /*non_blocking=*/true);
  auto std_t = torch::tensor(std, options).view(shape).to(input.device(), /*non_blocking=*/true);
  return (input - mean_t) / std_t;
}

std::string batch_transform_spec(const BatchTransform& tfm) {
  if (tfm.target<IntToFloat>()) return "IntToFloat";
  if (const auto* n = tfm.target<Normalize>())
    return "Normalize " + spec_text::numbers(n->mean) + " " + spec_text::numbers(n->std);
  return "";
}

BatchTransform batch_transform_from_spec(const std::string& spec) {
  const auto words = spec_text::words(spec);
  const std::string name = words.empty() ? "" : words[0];
  if (name == "IntToFloat" && words.size() == 1) return IntToFloat();
  if (name == "Normalize") {
    const auto means = words.size() == 3 ? spec_text::to_numbers(words[1]) : std::nullopt;
    const auto stds = words.size() == 3 ? spec_text::to_numbers(words[2]) : std::nullopt;
    if (!means || !stds || means->size() != stds->size())
      throw Error("batch transform '" + spec + "' is not 'Normalize MEANS STDS' with as many of each");
    return Normalize{*means, *stds};
  }
  throw Error("unknown batch transform '" + spec + "' (known: Normalize, IntToFloat)");
}

}  // namespace fastcpp
