#include "data/batch_transforms.h"

#include <torch/torch.h>

#include <cmath>

#include "core/error.h"
#include "core/spec_text.h"
#include "data/buffer_pool.h"

namespace fastcpp {

torch::Tensor IntToFloat::operator()(const torch::Tensor& x) const {
  if (x.is_floating_point()) return x;
  return x.to(torch::kFloat).div_(255);
}

namespace {

// out = x * scale[c] + shift[c]: scale = 1/std (1/(255 std) for integer input, read as
// x/255 as IntToFloat reads it), shift = -mean/std; rounded to the output's dtype where
// they meet the data.
struct ChannelAffine {
  std::vector<double> scale, shift;
  bool uniform() const {  // one scale and shift for every channel: scalars will do
    for (size_t c = 1; c < scale.size(); ++c)
      if (scale[c] != scale[0] || shift[c] != shift[0]) return false;
    return true;
  }
};

ChannelAffine channel_affine(const Normalize& n, bool integer_input) {
  ChannelAffine affine;
  for (size_t c = 0; c < n.mean.size(); ++c) {
    affine.scale.push_back(1.0 / ((integer_input ? 255.0 : 1.0) * n.std[c]));
    affine.shift.push_back(-n.mean[c] / n.std[c]);
  }
  return affine;
}

}  // namespace

torch::Tensor Normalize::normalize_bytes(const torch::Tensor& x) const {
  const auto affine = channel_affine(*this, /*integer_input=*/true);
  auto input = x.contiguous();
  auto out = pooled_empty(input.sizes(), torch::kFloat);
  const int64_t batch = input.size(0), channels = input.size(1);
  const int64_t plane = input.numel() / std::max<int64_t>(batch * channels, 1);
  const uint8_t* src = input.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < channels; ++c) {
      const size_t stat = affine.scale.size() == 1 ? 0 : static_cast<size_t>(c);
      const auto scale = static_cast<float>(affine.scale[stat]), shift = static_cast<float>(affine.shift[stat]);
      const int64_t offset = (b * channels + c) * plane;
      for (int64_t i = 0; i < plane; ++i) dst[offset + i] = static_cast<float>(src[offset + i]) * scale + shift;
    }
  return out;
}

// The same arithmetic as normalize_bytes, one ATen kernel per step (a product, then a
// sum: never fused into one rounding, so uint8 batches match it bitwise). No copy from
// the host per batch when every channel has the same statistics; otherwise one,
// asynchronous (from pinned memory to a GPU: the host does not wait for the device).
torch::Tensor Normalize::normalize_tensor(const torch::Tensor& x) const {
  const bool integer_input = !x.is_floating_point();
  const auto affine = channel_affine(*this, integer_input);
  auto apply = [&](const auto& scale, const auto& shift) {
    return (integer_input ? x.to(torch::kFloat).mul_(scale) : x.mul(scale)).add_(shift);
  };
  if (affine.uniform()) return apply(affine.scale[0], affine.shift[0]);
  const auto channels = static_cast<int64_t>(affine.scale.size());
  auto values = affine.scale;
  values.insert(values.end(), affine.shift.begin(), affine.shift.end());
  auto stats = torch::tensor(values, torch::kDouble).view({2, channels}).to(integer_input ? torch::kFloat : x.scalar_type());
  if (x.is_cuda()) stats = stats.pin_memory();
  stats = stats.to(x.device(), /*non_blocking=*/true);
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = channels;
  return apply(stats[0].view(shape), stats[1].view(shape));
}

Normalize Normalize::from_data(const Dataset& dataset, size_t max_items) {
  const size_t n = std::min(dataset.size(), max_items);
  if (n == 0) throw Error("Normalize::from_data: the dataset is empty");
  // Items spread evenly over the dataset: a folder's first ones are often all one class.
  std::vector<int64_t> indices(n);
  for (size_t i = 0; i < n; ++i) indices[i] = static_cast<int64_t>(i * dataset.size() / n);
  // Chunk by chunk (2048 224-pixel images in doubles would be 2.5 GB), each chunk's mean and
  // sum of squared deviations merged into the running ones (Chan et al.), per channel.
  constexpr size_t kChunk = 128;
  torch::Tensor mean, squares;  // [channels]
  double count = 0;
  for (size_t begin = 0; begin < n; begin += kChunk) {
    const std::vector<int64_t> chunk(indices.begin() + static_cast<std::ptrdiff_t>(begin),
                                     indices.begin() + static_cast<std::ptrdiff_t>(std::min(n, begin + kChunk)));
    const auto x = IntToFloat()(dataset.get_batch(chunk).x).to(torch::kDouble);
    if (x.dim() < 2) throw Error("Normalize::from_data: items need a channel dimension, got " + c10::str(x.sizes()));
    const auto per_channel = x.transpose(0, 1).reshape({x.size(1), -1});
    const auto chunk_count = static_cast<double>(per_channel.size(1));
    const auto chunk_mean = per_channel.mean(1);
    const auto chunk_squares = (per_channel - chunk_mean.unsqueeze(1)).square().sum(1);
    if (!mean.defined()) {
      mean = chunk_mean, squares = chunk_squares, count = chunk_count;
      continue;
    }
    if (chunk_mean.size(0) != mean.size(0))
      throw Error("Normalize::from_data: items have " + std::to_string(chunk_mean.size(0)) + " channels here and " +
                  std::to_string(mean.size(0)) + " before");
    const auto delta = chunk_mean - mean;
    const double total = count + chunk_count;
    mean = mean + delta * (chunk_count / total);
    squares = squares + chunk_squares + delta.square() * (count * chunk_count / total);
    count = total;
  }
  // Unbiased, as torch.std, and fastai's 1e-7 more: a constant channel (an opaque alpha) normalizes to 0.
  const auto std = (squares / (count - 1)).sqrt() + 1e-7;
  Normalize result;
  for (int64_t c = 0; c < mean.size(0); ++c) {
    result.mean.push_back(mean[c].item<double>());
    result.std.push_back(std[c].item<double>());
  }
  return result;
}

torch::Tensor Normalize::operator()(const torch::Tensor& x) const {
  if (mean.empty() || mean.size() != std.size())
    throw Error("Normalize: need as many means as stds, got " + std::to_string(mean.size()) + " and " +
                std::to_string(std.size()));
  for (size_t c = 0; c < std.size(); ++c)
    if (!(std[c] > 0 && std::isfinite(std[c])))
      throw Error("Normalize: std " + spec_text::number(std[c]) + " of channel " + std::to_string(c) +
                  " is not a positive number");
  const auto channels = static_cast<int64_t>(mean.size());
  if (x.dim() < 2 || (x.size(1) != channels && channels != 1))
    throw Error("Normalize: " + std::to_string(channels) + " channel statistics for a batch of shape " +
                c10::str(x.sizes()));
  if (x.scalar_type() == torch::kUInt8 && x.device().is_cpu()) return normalize_bytes(x);
  return normalize_tensor(x);
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
