#include "vision/device_decode.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "vision/image.h"
#if FASTCPP_HAS_NVJPEG
#include "vision/nvjpeg_decoder.h"
#endif

namespace fastcpp::vision {
namespace {

// The normalized coordinate (grid_sample, align_corners false) of pixel centre p of n.
double normalized(double p, int64_t n) { return (2 * p + 1) / double(n) - 1; }

// Every JPEG of the batch decoded into its slot of `canvas`, on the canvas's device.
void decode_jpegs(torch::Tensor& canvas, const std::vector<EncodedImage>& items) {
#if FASTCPP_HAS_NVJPEG
  if (canvas.is_cuda()) {
    std::vector<JpegToDecode> jpegs;
    for (size_t i = 0; i < items.size(); ++i)
      if (!items[i].jpeg.empty()) jpegs.push_back({&items[i].jpeg, &items[i].path, static_cast<int64_t>(i)});
    if (!jpegs.empty()) nvjpeg_decode(canvas, jpegs);
    return;
  }
#endif
  if (!canvas.is_cpu())
    throw Error("decoding images on " + canvas.device().str() + ": this build has no decoder there (" +
                device_decoder_name(canvas.device()) + ")");
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].jpeg.empty()) continue;
    const auto decoded = image_to_tensor(decode_image(items[i].jpeg, items[i].path, {.channels = 3}));
    canvas[int64_t(i)].narrow(1, 0, decoded.size(1)).narrow(2, 0, decoded.size(2)).copy_(decoded);
  }
}

}  // namespace

DeviceDecode::DeviceDecode(std::vector<EncodedImage> items, cv::Size out) : items_(std::move(items)), out_(out) {}

torch::Tensor DeviceDecode::run(torch::Device device) const {
  const auto n = static_cast<int64_t>(items_.size());
  int64_t height = 1, width = 1;
  for (const auto& item : items_) {
    const cv::Size size = item.jpeg.empty() ? cv::Size(int(item.ready.size(2)), int(item.ready.size(1))) : item.size;
    height = std::max<int64_t>(height, size.height);
    width = std::max<int64_t>(width, size.width);
  }
  // Zeros where no image lies: never sampled, but kept out of the arithmetic's way.
  auto canvas = torch::zeros({n, 3, height, width}, torch::TensorOptions(torch::kUInt8).device(device));
  decode_jpegs(canvas, items_);

  // Per item: where the output samples the canvas (its crop, flipped or not), the crop's
  // outermost pixel centres, so that its edge repeats as OpenCV's resize does, and how
  // many samples a side each output pixel averages: one (bilinear) unless the crop
  // shrinks both ways, where OpenCV's resize averages areas.
  auto theta = torch::zeros({n, 2, 3}, torch::kDouble);
  auto bounds = torch::empty({n, 4}, torch::kDouble);
  auto t = theta.accessor<double, 3>();
  auto b = bounds.accessor<double, 2>();
  std::map<int, std::vector<int64_t>> by_samples;
  for (int64_t i = 0; i < n; ++i) {
    const auto& item = items_[size_t(i)];
    if (item.jpeg.empty()) {  // already the item: copied in as it is, sampled at its pixel centres
      const auto ready = item.ready.to(device);
      canvas[i].narrow(1, 0, ready.size(1)).narrow(2, 0, ready.size(2)).copy_(ready);
    }
    const cv::Rect crop = item.jpeg.empty() ? cv::Rect(0, 0, out_.width, out_.height) : item.plan.crop;
    const bool flip = !item.jpeg.empty() && item.plan.flip;
    t[i][0][0] = (flip ? -1.0 : 1.0) * crop.width / double(width);
    t[i][0][2] = (2.0 * crop.x + crop.width) / double(width) - 1;
    t[i][1][1] = crop.height / double(height);
    t[i][1][2] = (2.0 * crop.y + crop.height) / double(height) - 1;
    b[i][0] = normalized(crop.x, width);
    b[i][1] = normalized(crop.x + crop.width - 1, width);
    b[i][2] = normalized(crop.y, height);
    b[i][3] = normalized(crop.y + crop.height - 1, height);
    const double shrink = std::min(crop.width / double(out_.width), crop.height / double(out_.height));
    by_samples[shrink > 1 ? std::min(8, int(std::ceil(shrink))) : 1].push_back(i);
  }
  namespace F = torch::nn::functional;
  const auto options = torch::TensorOptions(torch::kFloat).device(device);
  const auto pixels = canvas.to(torch::kFloat);
  theta = theta.to(options);
  bounds = bounds.to(options);
  auto out = torch::empty({n, 3, out_.height, out_.width}, torch::TensorOptions(torch::kUInt8).device(device));
  for (const auto& [samples, members] : by_samples) {
    const bool all = int64_t(members.size()) == n;
    const auto index = torch::tensor(members, torch::kLong).to(device);
    const auto m = int64_t(members.size());
    auto grid = F::affine_grid(all ? theta : theta.index_select(0, index),
                               {m, 3, out_.height * samples, out_.width * samples}, /*align_corners=*/false);
    const auto limits = (all ? bounds : bounds.index_select(0, index)).view({m, 1, 1, 4});
    grid = torch::stack({torch::max(torch::min(grid.select(3, 0), limits.select(3, 1)), limits.select(3, 0)),
                         torch::max(torch::min(grid.select(3, 1), limits.select(3, 3)), limits.select(3, 2))},
                        3);
    auto sampled = F::grid_sample(all ? pixels : pixels.index_select(0, index), grid,
                                  F::GridSampleFuncOptions().mode(torch::kBilinear).padding_mode(torch::kBorder).align_corners(false));
    if (samples > 1) sampled = F::avg_pool2d(sampled, F::AvgPool2dFuncOptions(samples));
    out.index_copy_(0, index, sampled.round_().clamp_(0, 255).to(torch::kUInt8));
  }
  return out;
}

std::string device_decoder_name(torch::Device device) {
  if (device.is_cpu()) return "libjpeg on the CPU";
#if FASTCPP_HAS_NVJPEG
  if (device.is_cuda()) return nvjpeg_backend(device);
  return "none on " + device.str();
#else
  return "none on " + device.str() + ": fastcpp was built without nvJPEG (the nvidia-nvjpeg wheel's nvjpeg.h)";
#endif
}

}  // namespace fastcpp::vision
