#include "vision/mask_png.h"

#include <torch/torch.h>

#include "core/error.h"
#include "formats/file_io.h"
#include "formats/png.h"

namespace fastcpp::vision {
namespace {

// Twenty colours far apart (after Sasha Trubetskoy's list), background first.
constexpr uint8_t kPalette[][3] = {{0, 0, 0},       {230, 25, 75},   {60, 180, 75},   {255, 225, 25},  {0, 130, 200},
                                   {245, 130, 48},  {145, 30, 180},  {70, 240, 240},  {240, 50, 230},  {210, 245, 60},
                                   {250, 190, 212}, {0, 128, 128},   {220, 190, 255}, {170, 110, 40},  {255, 250, 200},
                                   {128, 0, 0},     {170, 255, 195}, {128, 128, 0},   {255, 215, 180}, {0, 0, 128}};
constexpr int64_t kColours = sizeof(kPalette) / sizeof(kPalette[0]);

}  // namespace

std::array<uint8_t, 3> class_colour(int64_t index) {
  const auto& c = kPalette[((index % kColours) + kColours) % kColours];
  return {c[0], c[1], c[2]};
}

torch::Tensor colour_mask(const torch::Tensor& mask, std::optional<int64_t> void_index) {
  if (mask.dim() != 2) throw Error("colour_mask: expected a mask [H, W], got " + c10::str(mask.sizes()));
  const auto palette = torch::from_blob(const_cast<uint8_t*>(&kPalette[0][0]), {kColours, 3}, torch::kByte);
  const auto classes = mask.to(torch::kCPU, torch::kLong);
  auto rgb = palette.index_select(0, classes.remainder(kColours).flatten()).view({mask.size(0), mask.size(1), 3});
  if (void_index) rgb.masked_fill_((classes == *void_index).unsqueeze(-1), 255);
  return rgb;
}

void write_mask_png(const std::string& path, const torch::Tensor& mask, std::optional<int64_t> void_index) {
  const auto rgb = colour_mask(mask, void_index).contiguous();
  const std::vector<uint8_t> pixels(rgb.data_ptr<uint8_t>(), rgb.data_ptr<uint8_t>() + rgb.numel());
  const auto png = encode_png(pixels, static_cast<int>(mask.size(1)), static_cast<int>(mask.size(0)));
  write_atomically(path, std::vector<char>(png.begin(), png.end()), "mask");
}

}  // namespace fastcpp::vision
