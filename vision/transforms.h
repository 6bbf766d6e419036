#pragma once
// Item transforms on decoded images (HWC, 8-bit), run on the loader's workers.
// Random ones draw from the item's Rng, and act on the training set only; on the
// validation set each does its deterministic counterpart (fastai's split_idx):
//   Resize             to size x size: Squish, Crop (random crop of the resized
//                      short side when training, centre otherwise) or Pad (the
//                      long side resized to size, the short one padded by pad_mode
//                      to size; placed at random when training, centred otherwise).
//                      For boxes, pad with zeros: a mirror shows objects without a box
//   RandomResizedCrop  torchvision's: area fraction in `scale`, aspect ratio in
//                      `ratio` (log-uniform), 10 tries then a centre crop; resized
//                      to size. Validation, fastai's: the image squished to size + xtra
//                      (val_xtra of size, up to a multiple of 8), then its centre
//                      size x size; done as one centre crop of each side, resized
//   CenterCrop         the centre size x size (padded with zeros if smaller)
//   RandomCrop         zero-pad by `padding`, then a random size x size crop
//                      (CIFAR's pad-4 crop). Validation: centre crop, no padding
//   FlipItem           horizontal flip with probability p. Validation: nothing
#include <opencv2/core.hpp>

#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "data/random.h"
#include "vision/pad_mode.h"

namespace fastcpp::vision {

// A transform's whole geometry when it is one crop of its input, resized to `out`, then
// flipped left-right or not: what a loader can do on the GPU after decoding there.
struct CropPlan {
  cv::Rect crop;
  cv::Size out;
  bool flip = false;
};

// Where a transform sends the points of its input, as boxes need it: x -> x * scale_x - left,
// y -> y * scale_y - top, into a result of size `out`, then x -> out.width - x if flipped.
// Every built-in transform is such a map (a resize, a window, a mirror).
struct BoxMap {
  double scale_x = 1, scale_y = 1, left = 0, top = 0;
  cv::Size out;
  bool flip = false;
};

class ImageTransform {
 public:
  virtual ~ImageTransform() = default;
  virtual cv::Mat apply(const cv::Mat& image, Rng& rng, bool train) const = 0;
  // The same change of geometry on a mask of class indices, drawing what apply draws
  // (give it a copy of the Rng that apply gets): resampled by nearest neighbour, never
  // interpolated, and `fill` wherever it leaves the mask. The default refuses: a
  // transform of a program's own has no mask form unless it gives one.
  virtual cv::Mat apply_mask(const cv::Mat& mask, Rng& rng, bool train, int fill) const;
  // This transform as a crop plan for an input of `size`, drawing exactly what apply
  // draws (so both give the same item); nullopt where it is not one crop and resize.
  virtual std::optional<CropPlan> plan(cv::Size size, Rng& rng, bool train) const { return std::nullopt; }
  // The map of points for an input of `size`, drawing exactly what apply draws (give it a
  // copy of apply's Rng): what moves an image's boxes with it. By default the plan's map
  // where there is a plan; nullopt: the transform cannot move boxes.
  virtual std::optional<BoxMap> box_map(cv::Size size, Rng& rng, bool train) const;
  // The shortest image side this transform needs for full quality (0: no need):
  // lets JPEG decoding skip pixels that would be thrown away.
  virtual int min_input_side() const { return 0; }
  // The text form an exported model carries ("Resize 224 crop"), which
  // item_transform_from_spec reads back; empty: the transform has none.
  virtual std::string spec() const { return ""; }
};

// A transform held by value in a list: item_tfms = {RandomResizedCrop(224), FlipItem()}.
class ItemTransform {
 public:
  template <class T, class = std::enable_if_t<std::is_base_of_v<ImageTransform, T>>>
  ItemTransform(T transform)  // NOLINT: implicit on purpose
      : impl_(std::make_shared<T>(std::move(transform))) {}
  cv::Mat operator()(const cv::Mat& image, Rng& rng, bool train) const { return impl_->apply(image, rng, train); }
  cv::Mat mask(const cv::Mat& mask, Rng& rng, bool train, int fill) const {
    return impl_->apply_mask(mask, rng, train, fill);
  }
  std::optional<CropPlan> plan(cv::Size size, Rng& rng, bool train) const { return impl_->plan(size, rng, train); }
  std::optional<BoxMap> box_map(cv::Size size, Rng& rng, bool train) const { return impl_->box_map(size, rng, train); }
  int min_input_side() const { return impl_->min_input_side(); }
  std::string spec() const { return impl_->spec(); }

 private:
  std::shared_ptr<const ImageTransform> impl_;
};

// How a geometric transform resamples: images bilinearly (by area when shrinking
// strongly) with zeros outside; masks by nearest neighbour with their fill value
// (Resize's pad method mirrors or repeats both alike, unless it pads with zeros).
struct Sampling {
  bool nearest = false;
  int fill = 0;
};

// The built-in transforms: one geometry for images and masks.
class GeometricTransform : public ImageTransform {
 public:
  cv::Mat apply(const cv::Mat& image, Rng& rng, bool train) const final { return transform(image, rng, train, {}); }
  cv::Mat apply_mask(const cv::Mat& mask, Rng& rng, bool train, int fill) const final {
    return transform(mask, rng, train, {true, fill});
  }
  virtual cv::Mat transform(const cv::Mat& pixels, Rng& rng, bool train, const Sampling& sampling) const = 0;
};

// What `tfms` do to an input of `size` as one crop plan, drawing what they would draw
// applied one after the other; nullopt unless each is a plan and one crop, before any
// flip, is all the cropping they do.
std::optional<CropPlan> plan_of(const std::vector<ItemTransform>& tfms, cv::Size size, Rng& rng, bool train);
// The plan done to `crop`, the plan's crop of an image: resized as the transforms resize,
// then flipped; the same pixels as the transforms give.
cv::Mat apply_plan(const cv::Mat& crop, const CropPlan& plan);

// The text forms of `tfms`; throws naming `who` for a transform without one.
std::vector<std::string> transform_specs(const std::vector<ItemTransform>& tfms, const std::string& who);

enum class ResizeMethod { Squish, Crop, Pad };

class Resize : public GeometricTransform {
 public:
  explicit Resize(int size, ResizeMethod method = ResizeMethod::Crop, PadMode pad_mode = PadMode::Reflection);
  cv::Mat transform(const cv::Mat& pixels, Rng& rng, bool train, const Sampling& sampling) const override;
  std::optional<CropPlan> plan(cv::Size size, Rng& rng, bool train) const override;  // Squish only
  std::optional<BoxMap> box_map(cv::Size size, Rng& rng, bool train) const override;
  int min_input_side() const override { return size_; }
  std::string spec() const override;

 private:
  // Crop and Pad: the image resized to `resized`, then the size x size window at `corner`
  // of it (negative: padding).
  struct Layout {
    cv::Size resized;
    cv::Point corner;
  };
  Layout layout(cv::Size size, Rng& rng, bool train) const;
  int size_;
  ResizeMethod method_;
  PadMode pad_mode_;
};

class RandomResizedCrop : public GeometricTransform {
 public:
  explicit RandomResizedCrop(int size, std::pair<double, double> scale = {0.08, 1.0},
                             std::pair<double, double> ratio = {3.0 / 4, 4.0 / 3}, double val_xtra = 0.14);
  cv::Mat transform(const cv::Mat& pixels, Rng& rng, bool train, const Sampling& sampling) const override;
  std::optional<CropPlan> plan(cv::Size size, Rng& rng, bool train) const override;
  // Reduced decoding must keep even the smallest possible crop (scale.first of the
  // area, at the ratios' ends) at >= size pixels, so that no crop is upscaled more than
  // torchvision's would be: short side >= size * sqrt(max(ratio.second, 1 / ratio.first)
  // / scale.first), and the validation crop too (short side >= size + its extra).
  int min_input_side() const override;
  std::string spec() const override;
  // The crop torchvision would take from a width x height image.
  cv::Rect crop_for(cv::Size image, Rng& rng) const;
  // What fastai's validation form keeps of a width x height image.
  cv::Rect validation_crop(cv::Size image) const;
  // The pixels a side has beyond `size` before the validation crop (fastai's size * val_xtra).
  int validation_extra() const;

 private:
  int size_;
  std::pair<double, double> scale_, ratio_;
  double val_xtra_;
};

class CenterCrop : public GeometricTransform {
 public:
  explicit CenterCrop(int size);
  cv::Mat transform(const cv::Mat& pixels, Rng& rng, bool train, const Sampling& sampling) const override;
  std::optional<BoxMap> box_map(cv::Size size, Rng& rng, bool train) const override;
  std::string spec() const override;

 private:
  int size_;
};

class RandomCrop : public GeometricTransform {
 public:
  explicit RandomCrop(int size, int padding = 0);
  cv::Mat transform(const cv::Mat& pixels, Rng& rng, bool train, const Sampling& sampling) const override;
  std::optional<BoxMap> box_map(cv::Size size, Rng& rng, bool train) const override;
  std::string spec() const override;

 private:
  cv::Point corner(cv::Size size, Rng& rng, bool train) const;  // of the window, in the unpadded image
  int size_, padding_;
};

class FlipItem : public GeometricTransform {
 public:
  explicit FlipItem(double p = 0.5);
  cv::Mat transform(const cv::Mat& pixels, Rng& rng, bool train, const Sampling& sampling) const override;
  std::optional<CropPlan> plan(cv::Size size, Rng& rng, bool train) const override;
  std::string spec() const override;

 private:
  double p_;
};

// The transform a text form describes (as ImageTransform::spec writes it); a
// fastcpp::Error for one it does not know or a malformed one.
ItemTransform item_transform_from_spec(const std::string& spec);

}  // namespace fastcpp::vision
