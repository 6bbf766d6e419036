#include "vision/transforms.h"

#include <cmath>
#include <opencv2/imgproc.hpp>

#include "core/error.h"
#include "core/spec_text.h"

namespace fastcpp::vision {
namespace {

cv::Mat resize_to(const cv::Mat& image, cv::Size size, const Sampling& sampling) {
  if (image.size() == size) return image;
  cv::Mat out;
  // Shrinking, an average over each output pixel's area (antialiased, as fastai's Pillow
  // resize): bilinear reads 2 of the pixels an output pixel covers, and aliases. Pillow
  // filters each axis by its own factor: where one shrinks and the other does not (a
  // squish, a crop of another aspect), the shrinking one is averaged first, alone.
  const bool narrower = size.width < image.cols, shorter = size.height < image.rows;
  if (!sampling.nearest && narrower != shorter) {
    cv::Mat averaged;
    cv::resize(image, averaged, narrower ? cv::Size(size.width, image.rows) : cv::Size(image.cols, size.height), 0, 0,
               cv::INTER_AREA);
    return resize_to(averaged, size, sampling);
  }
  const bool shrinks = narrower && shorter;
  // Masks: the nearest pixel to each output pixel's centre, as Pillow's NEAREST (fastai's
  // for masks) and where the image's own samples are centred; INTER_NEAREST takes the one
  // at its top-left corner, shifting the mask up to half a pixel against its image.
  const int how = sampling.nearest ? cv::INTER_NEAREST_EXACT : shrinks ? cv::INTER_AREA : cv::INTER_LINEAR;
  cv::resize(image, out, size, 0, 0, how);
  return out;
}

// The size x size window at (x, y), padded by `pad_mode` where it leaves the image (with
// sampling.fill for zeros). Mirrored and repeated edges are those of the window's part of
// the image; every caller that does not pad with zeros keeps the whole image in its window.
cv::Mat window(const cv::Mat& image, int x, int y, int size, const Sampling& sampling,
               PadMode pad_mode = PadMode::Zeros) {
  const cv::Rect inside = cv::Rect(x, y, size, size) & cv::Rect(0, 0, image.cols, image.rows);
  if (inside.width == size && inside.height == size) return image(inside).clone();
  if (inside.area() == 0) return cv::Mat(size, size, image.type(), cv::Scalar::all(sampling.fill));
  const int border = pad_mode == PadMode::Reflection ? cv::BORDER_REFLECT_101  // torchvision's "reflect"
                     : pad_mode == PadMode::Border   ? cv::BORDER_REPLICATE
                                                     : cv::BORDER_CONSTANT;
  cv::Mat out;
  cv::copyMakeBorder(image(inside), out, inside.y - y, y + size - inside.br().y, inside.x - x, x + size - inside.br().x,
                     border, cv::Scalar::all(sampling.fill));
  return out;
}

// The offset that centres a `size` window on a `side` long image, rounded down as fastai's
// CropPad (a window larger than the image pads one pixel more before than after).
int centred(int side, int size) { return static_cast<int>(std::floor((side - size) / 2.0)); }

void check_size(int size, const char* name) {
  if (size <= 0) throw Error(std::string(name) + ": size must be positive, got " + std::to_string(size));
}

}  // namespace

std::optional<BoxMap> ImageTransform::box_map(cv::Size size, Rng& rng, bool train) const {
  const auto p = plan(size, rng, train);
  if (!p) return std::nullopt;
  const double scale_x = double(p->out.width) / p->crop.width, scale_y = double(p->out.height) / p->crop.height;
  return BoxMap{scale_x, scale_y, p->crop.x * scale_x, p->crop.y * scale_y, p->out, p->flip};
}

cv::Mat ImageTransform::apply_mask(const cv::Mat&, Rng&, bool, int) const {
  throw Error("item transform '" + spec() + "' has no form for masks (ImageTransform::apply_mask)");
}

std::vector<std::string> transform_specs(const std::vector<ItemTransform>& tfms, const std::string& who) {
  std::vector<std::string> specs;
  for (size_t i = 0; i < tfms.size(); ++i) {
    specs.push_back(tfms[i].spec());
    if (specs.back().empty())
      throw Error(who + ": item transform " + std::to_string(i) +
                  " has no text form (ImageTransform::spec), so an exported model cannot carry it");
  }
  return specs;
}

Resize::Resize(int size, ResizeMethod method, PadMode pad_mode) : size_(size), method_(method), pad_mode_(pad_mode) {
  check_size(size, "Resize");
}

Resize::Layout Resize::layout(cv::Size size, Rng& rng, bool train) const {
  const double w = size.width, h = size.height;
  if (method_ == ResizeMethod::Crop) {
    const double scale = size_ / std::min(w, h);
    const cv::Size covering(std::max(size_, int(std::lround(w * scale))), std::max(size_, int(std::lround(h * scale))));
    const int slack_x = covering.width - size_, slack_y = covering.height - size_;
    const int x = train ? int(rng.integer(0, slack_x)) : slack_x / 2;
    const int y = train ? int(rng.integer(0, slack_y)) : slack_y / 2;
    return {covering, {x, y}};
  }
  const double scale = size_ / std::max(w, h);  // Pad
  const cv::Size inside(std::max(1, int(std::lround(w * scale))), std::max(1, int(std::lround(h * scale))));
  const int slack_x = size_ - inside.width, slack_y = size_ - inside.height;
  const int x = train ? int(rng.integer(0, slack_x)) : slack_x / 2;
  const int y = train ? int(rng.integer(0, slack_y)) : slack_y / 2;
  return {inside, {-x, -y}};
}

cv::Mat Resize::transform(const cv::Mat& image, Rng& rng, bool train, const Sampling& sampling) const {
  if (method_ == ResizeMethod::Squish) return resize_to(image, {size_, size_}, sampling);
  const auto [resized, corner] = layout(image.size(), rng, train);
  return window(resize_to(image, resized, sampling), corner.x, corner.y, size_, sampling, pad_mode_);
}

std::optional<BoxMap> Resize::box_map(cv::Size size, Rng& rng, bool train) const {
  if (method_ == ResizeMethod::Squish) return ImageTransform::box_map(size, rng, train);
  const auto [resized, corner] = layout(size, rng, train);
  return BoxMap{double(resized.width) / size.width, double(resized.height) / size.height, double(corner.x),
                double(corner.y), {size_, size_}};
}

RandomResizedCrop::RandomResizedCrop(int size, std::pair<double, double> scale, std::pair<double, double> ratio,
                                     double val_xtra)
    : size_(size), scale_(scale), ratio_(ratio), val_xtra_(val_xtra) {
  check_size(size, "RandomResizedCrop");
  if (scale.first <= 0 || scale.first > scale.second || ratio.first <= 0 || ratio.first > ratio.second)
    throw Error("RandomResizedCrop: scale and ratio must be positive (low, high) pairs");
  if (!(val_xtra >= 0)) throw Error("RandomResizedCrop: val_xtra must be >= 0, got " + spec_text::number(val_xtra));
}

int RandomResizedCrop::min_input_side() const {
  // The crop is shortest across at the ratio's ends: its height at the widest, its width at the narrowest.
  const double longest_over_shortest = std::max(ratio_.second, 1 / ratio_.first);
  const int training = static_cast<int>(std::ceil(size_ * std::sqrt(longest_over_shortest / scale_.first)));
  // The validation crop keeps size / (size + extra) of each side.
  return std::max(training, size_ + validation_extra());
}

cv::Rect RandomResizedCrop::crop_for(cv::Size image, Rng& rng) const {
  const double area = double(image.width) * image.height;
  const double log_low = std::log(ratio_.first), log_high = std::log(ratio_.second);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.uniform(scale_.first, scale_.second);
    const double aspect = std::exp(rng.uniform(log_low, log_high));
    const int w = int(std::lround(std::sqrt(target_area * aspect)));
    const int h = int(std::lround(std::sqrt(target_area / aspect)));
    if (w > 0 && h > 0 && w <= image.width && h <= image.height) {
      const int y = int(rng.integer(0, image.height - h));
      const int x = int(rng.integer(0, image.width - w));
      return {x, y, w, h};
    }
  }
  // Fallback: the centre crop with the ratio clamped into range.
  const double in_ratio = double(image.width) / image.height;
  int w = image.width, h = image.height;
  if (in_ratio < ratio_.first) h = int(std::lround(w / ratio_.first));
  else if (in_ratio > ratio_.second) w = int(std::lround(h * ratio_.second));
  return {(image.width - w) / 2, (image.height - h) / 2, w, h};
}

int RandomResizedCrop::validation_extra() const {
  return static_cast<int>(std::ceil(size_ * val_xtra_ / 8)) * 8;  // fastai's, a multiple of 8
}

cv::Rect RandomResizedCrop::validation_crop(cv::Size image) const {
  const int xtra = validation_extra();
  const double kept = double(size_) / (size_ + xtra), offset = double(xtra / 2) / (size_ + xtra);
  const int w = std::max(1, int(std::lround(image.width * kept))), h = std::max(1, int(std::lround(image.height * kept)));
  return {std::min(int(image.width * offset), image.width - w), std::min(int(image.height * offset), image.height - h), w, h};
}

std::optional<CropPlan> RandomResizedCrop::plan(cv::Size size, Rng& rng, bool train) const {
  return CropPlan{train ? crop_for(size, rng) : validation_crop(size), {size_, size_}};
}

cv::Mat RandomResizedCrop::transform(const cv::Mat& image, Rng& rng, bool train, const Sampling& sampling) const {
  const auto crop = train ? crop_for(image.size(), rng) : validation_crop(image.size());
  return resize_to(image(crop), {size_, size_}, sampling);
}

CenterCrop::CenterCrop(int size) : size_(size) { check_size(size, "CenterCrop"); }

RandomCrop::RandomCrop(int size, int padding) : size_(size), padding_(padding) {
  check_size(size, "RandomCrop");
  if (padding < 0) throw Error("RandomCrop: padding must be >= 0, got " + std::to_string(padding));
}

cv::Mat CenterCrop::transform(const cv::Mat& image, Rng&, bool, const Sampling& sampling) const {
  return window(image, centred(image.cols, size_), centred(image.rows, size_), size_, sampling);
}

std::optional<BoxMap> CenterCrop::box_map(cv::Size size, Rng&, bool) const {
  return BoxMap{1, 1, double(centred(size.width, size_)), double(centred(size.height, size_)), {size_, size_}};
}

cv::Point RandomCrop::corner(cv::Size size, Rng& rng, bool train) const {
  if (!train) return {centred(size.width, size_), centred(size.height, size_)};
  const int x = int(rng.integer(-padding_, std::max(-padding_, size.width + padding_ - size_)));
  const int y = int(rng.integer(-padding_, std::max(-padding_, size.height + padding_ - size_)));
  return {x, y};
}

cv::Mat RandomCrop::transform(const cv::Mat& image, Rng& rng, bool train, const Sampling& sampling) const {
  const auto at = corner(image.size(), rng, train);
  return window(image, at.x, at.y, size_, sampling);
}

std::optional<BoxMap> RandomCrop::box_map(cv::Size size, Rng& rng, bool train) const {
  const auto at = corner(size, rng, train);
  return BoxMap{1, 1, double(at.x), double(at.y), {size_, size_}};
}

std::optional<CropPlan> Resize::plan(cv::Size size, Rng&, bool) const {
  if (method_ != ResizeMethod::Squish) return std::nullopt;  // Crop and Pad round their sizes first
  return CropPlan{{0, 0, size.width, size.height}, {size_, size_}};
}

FlipItem::FlipItem(double p) : p_(p) {
  if (!(p >= 0 && p <= 1)) throw Error("FlipItem: p must be a probability in [0, 1], got " + spec_text::number(p));
}

std::optional<CropPlan> FlipItem::plan(cv::Size size, Rng& rng, bool train) const {
  return CropPlan{{0, 0, size.width, size.height}, size, train && rng.bernoulli(p_)};
}

std::optional<CropPlan> plan_of(const std::vector<ItemTransform>& tfms, cv::Size size, Rng& rng, bool train) {
  CropPlan whole{{0, 0, size.width, size.height}, size};
  for (const auto& tfm : tfms) {
    const auto step = tfm.plan(whole.out, rng, train);
    if (!step) return std::nullopt;
    if (step->crop != cv::Rect(0, 0, whole.out.width, whole.out.height)) {
      // A crop of a resized crop would not fall on whole pixels of the input; a crop of
      // a flipped image would resize mirrored pixels, which no resize gives bitwise.
      if (whole.out != whole.crop.size() || whole.flip) return std::nullopt;
      whole.crop = {whole.crop.x + step->crop.x, whole.crop.y + step->crop.y, step->crop.width, step->crop.height};
    }
    whole.out = step->out;
    whole.flip = whole.flip != step->flip;
  }
  return whole;
}

cv::Mat apply_plan(const cv::Mat& crop, const CropPlan& plan) {
  cv::Mat out = resize_to(crop, plan.out, {});
  if (plan.flip) cv::flip(out, out, 1);
  return out;
}

cv::Mat FlipItem::transform(const cv::Mat& image, Rng& rng, bool train, const Sampling& sampling) const {
  if (!train || !rng.bernoulli(p_)) return image;
  cv::Mat out;
  cv::flip(image, out, 1);
  return out;
}

// ---------------------------------------------------------------- text forms

namespace {

const char* method_name(ResizeMethod method) {
  switch (method) {
    case ResizeMethod::Squish: return "squish";
    case ResizeMethod::Crop: return "crop";
    case ResizeMethod::Pad: return "pad";
  }
  return "";
}

// The words after a transform's name read as numbers, the first `whole` of them whole
// numbers; nullopt when there are not `count` of them or one does not fit.
std::optional<std::vector<double>> arguments(const std::vector<std::string>& words, size_t count, size_t whole = 0) {
  if (words.size() != count + 1) return std::nullopt;
  std::vector<double> out;
  for (size_t i = 1; i < words.size(); ++i) {
    const auto value = spec_text::to_number(words[i]);
    if (!value || (i <= whole && *value != std::floor(*value))) return std::nullopt;
    out.push_back(*value);
  }
  return out;
}

int as_int(double value) { return static_cast<int>(value); }

}  // namespace

std::string Resize::spec() const {
  const std::string spec = "Resize " + std::to_string(size_) + " " + method_name(method_);
  return method_ == ResizeMethod::Pad ? spec + " " + pad_mode_name(pad_mode_) : spec;
}

std::string RandomResizedCrop::spec() const {
  return "RandomResizedCrop " + std::to_string(size_) + " " + spec_text::number(scale_.first) + " " +
         spec_text::number(scale_.second) + " " + spec_text::number(ratio_.first) + " " +
         spec_text::number(ratio_.second) + " " + spec_text::number(val_xtra_);
}

std::string CenterCrop::spec() const { return "CenterCrop " + std::to_string(size_); }

std::string RandomCrop::spec() const {
  return "RandomCrop " + std::to_string(size_) + " " + std::to_string(padding_);
}

std::string FlipItem::spec() const { return "FlipItem " + spec_text::number(p_); }

ItemTransform item_transform_from_spec(const std::string& spec) {
  const auto words = spec_text::words(spec);
  const std::string name = words.empty() ? "" : words[0];
  auto malformed = [&](const std::string& form) {
    return Error("item transform '" + spec + "' is not '" + form + "'");
  };
  if (name == "Resize") {
    // "Resize SIZE pad" without a pad mode comes from before there was one, when Pad padded with zeros.
    const bool counted = words.size() == 3 || words.size() == 4;
    const auto size = counted ? arguments({name, words[1]}, 1, 1) : std::nullopt;
    std::optional<PadMode> pad_mode = PadMode::Zeros;
    if (words.size() == 4) pad_mode = pad_mode_named(words[3]);
    for (auto method : {ResizeMethod::Squish, ResizeMethod::Crop, ResizeMethod::Pad})
      if (size && words[2] == method_name(method) && pad_mode && (words.size() == 3 || method == ResizeMethod::Pad))
        return Resize(as_int((*size)[0]), method, *pad_mode);
    throw malformed("Resize SIZE crop|squish|pad [reflection|border|zeros]");
  }
  if (name == "RandomResizedCrop") {
    const auto a = words.size() == 6 ? arguments(words, 5, 1) : arguments(words, 6, 1);  // 5: before val_xtra
    if (!a) throw malformed("RandomResizedCrop SIZE SCALE_MIN SCALE_MAX RATIO_MIN RATIO_MAX VAL_XTRA");
    return RandomResizedCrop(as_int((*a)[0]), {(*a)[1], (*a)[2]}, {(*a)[3], (*a)[4]}, a->size() == 6 ? (*a)[5] : 0.14);
  }
  if (name == "CenterCrop") {
    const auto a = arguments(words, 1, 1);
    if (!a) throw malformed("CenterCrop SIZE");
    return CenterCrop(as_int((*a)[0]));
  }
  if (name == "RandomCrop") {
    const auto a = arguments(words, 2, 2);
    if (!a) throw malformed("RandomCrop SIZE PADDING");
    return RandomCrop(as_int((*a)[0]), as_int((*a)[1]));
  }
  if (name == "FlipItem") {
    const auto a = arguments(words, 1);
    if (!a) throw malformed("FlipItem P");
    return FlipItem((*a)[0]);
  }
  throw Error("unknown item transform '" + spec + "' (known: Resize, RandomResizedCrop, CenterCrop, RandomCrop, FlipItem)");
}

}  // namespace fastcpp::vision
