#include "vision/transforms.h"

#include <cmath>
#include <opencv2/imgproc.hpp>

#include "core/error.h"

namespace fastcpp::vision {
namespace {

cv::Mat resize_to(const cv::Mat& image, cv::Size size) {
  if (image.size() == size) return image;
  cv::Mat out;
  // Area averaging only for strong shrinking, where bilinear would alias; it costs
  // several times more.
  const bool strong = size.width * 2 < image.cols && size.height * 2 < image.rows;
  cv::resize(image, out, size, 0, 0, strong ? cv::INTER_AREA : cv::INTER_LINEAR);
  return out;
}

// The size x size window at (x, y), zero-filled where it leaves the image.
cv::Mat window(const cv::Mat& image, int x, int y, int size) {
  const cv::Rect inside = cv::Rect(x, y, size, size) & cv::Rect(0, 0, image.cols, image.rows);
  if (inside.width == size && inside.height == size) return image(inside).clone();
  cv::Mat out = cv::Mat::zeros(size, size, image.type());
  if (inside.area() > 0) image(inside).copyTo(out(cv::Rect(inside.x - x, inside.y - y, inside.width, inside.height)));
  return out;
}

void check_size(int size, const char* name) {
  if (size <= 0) throw Error(std::string(name) + ": size must be positive, got " + std::to_string(size));
}

}  // namespace

Resize::Resize(int size, ResizeMethod method) : size_(size), method_(method) { check_size(size, "Resize"); }

cv::Mat Resize::apply(const cv::Mat& image, Rng& rng, bool train) const {
  const double w = image.cols, h = image.rows;
  switch (method_) {
    case ResizeMethod::Squish:
      return resize_to(image, {size_, size_});
    case ResizeMethod::Crop: {
      const double scale = size_ / std::min(w, h);
      auto resized = resize_to(image, {std::max(size_, int(std::lround(w * scale))), std::max(size_, int(std::lround(h * scale)))});
      const int slack_x = resized.cols - size_, slack_y = resized.rows - size_;
      const int x = train ? int(rng.integer(0, slack_x)) : slack_x / 2;
      const int y = train ? int(rng.integer(0, slack_y)) : slack_y / 2;
      return window(resized, x, y, size_);
    }
    case ResizeMethod::Pad: {
      const double scale = size_ / std::max(w, h);
      auto resized = resize_to(image, {std::max(1, int(std::lround(w * scale))), std::max(1, int(std::lround(h * scale)))});
      return window(resized, -(size_ - resized.cols) / 2, -(size_ - resized.rows) / 2, size_);
    }
  }
  return image;
}

RandomResizedCrop::RandomResizedCrop(int size, std::pair<double, double> scale, std::pair<double, double> ratio)
    : size_(size), scale_(scale), ratio_(ratio) {
  check_size(size, "RandomResizedCrop");
  if (scale.first <= 0 || scale.first > scale.second || ratio.first <= 0 || ratio.first > ratio.second)
    throw Error("RandomResizedCrop: scale and ratio must be positive (low, high) pairs");
}

int RandomResizedCrop::min_input_side() const {
  return static_cast<int>(std::ceil(size_ * std::sqrt(ratio_.second / scale_.first)));
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

cv::Mat RandomResizedCrop::apply(const cv::Mat& image, Rng& rng, bool train) const {
  if (!train) {
    const int side = std::min(image.cols, image.rows);
    return resize_to(image(cv::Rect((image.cols - side) / 2, (image.rows - side) / 2, side, side)), {size_, size_});
  }
  return resize_to(image(crop_for(image.size(), rng)), {size_, size_});
}

cv::Mat CenterCrop::apply(const cv::Mat& image, Rng&, bool) const {
  return window(image, (image.cols - size_) / 2, (image.rows - size_) / 2, size_);
}

cv::Mat RandomCrop::apply(const cv::Mat& image, Rng& rng, bool train) const {
  if (!train) return window(image, (image.cols - size_) / 2, (image.rows - size_) / 2, size_);
  const int x = int(rng.integer(-padding_, std::max(-padding_, image.cols + padding_ - size_)));
  const int y = int(rng.integer(-padding_, std::max(-padding_, image.rows + padding_ - size_)));
  return window(image, x, y, size_);
}

cv::Mat FlipItem::apply(const cv::Mat& image, Rng& rng, bool train) const {
  if (!train || !rng.bernoulli(p_)) return image;
  cv::Mat out;
  cv::flip(image, out, 1);
  return out;
}

}  // namespace fastcpp::vision
