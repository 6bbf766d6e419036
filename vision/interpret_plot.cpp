// The PNG pictures of ClassificationInterpretation, drawn with OpenCV.
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "vision/image.h"
#include "vision/interpret.h"

namespace fastcpp::vision {
namespace {

const int kFont = cv::FONT_HERSHEY_SIMPLEX;

// An item of the dataset as a BGR picture `size` pixels square.
cv::Mat to_picture(torch::Tensor x, int size) {
  x = x.detach().to(torch::kCPU);
  if (x.dim() == 2) x = x.unsqueeze(0);
  if (x.dim() != 3) throw Error("plot_top_losses: items must be images [C, H, W], got " + c10::str(x.sizes()));
  if (x.scalar_type() != torch::kByte) {  // normalized floats: stretch to the full range for display
    x = x.to(torch::kFloat);
    x = ((x - x.min()) / (x.max() - x.min()).clamp_min(1e-12) * 255).round().to(torch::kByte);
  }
  // Three channels or more: the first three (as BGR); fewer: the first, in grey.
  x = (x.size(0) < 3 ? x.narrow(0, 0, 1).expand({3, x.size(1), x.size(2)}) : x.narrow(0, 0, 3).flip(0))
          .permute({1, 2, 0})
          .contiguous();
  cv::Mat image(static_cast<int>(x.size(0)), static_cast<int>(x.size(1)), CV_8UC3, x.data_ptr());
  cv::Mat resized;
  const int interpolation = image.rows < size ? cv::INTER_NEAREST : cv::INTER_AREA;
  cv::resize(image, resized, cv::Size(size, size), 0, 0, interpolation);
  return resized;
}

}  // namespace

void ClassificationInterpretation::plot_confusion_matrix(const std::string& path) const {
  const auto cm = confusion_matrix();
  const auto counts = cm.accessor<int64_t, 2>();
  const int n = static_cast<int>(cm.size(0)), cell = 48;
  int label_width = 0;
  for (int c = 0; c < n; ++c)
    label_width = std::max(label_width, cv::getTextSize(label(c), kFont, 0.45, 1, nullptr).width);
  const int left = label_width + 20, top = 40, bottom = label_width + 40;
  cv::Mat image(top + n * cell + bottom, left + n * cell + 20, CV_8UC3, cv::Scalar(255, 255, 255));
  const double max_count = std::max<double>(1, cm.max().item<double>());
  for (int a = 0; a < n; ++a)
    for (int p = 0; p < n; ++p) {
      const double t = counts[a][p] / max_count;  // white to dark blue
      const cv::Scalar color(255 - t * 148, 255 - t * 207, 255 - t * 247);
      const cv::Rect box(left + p * cell, top + a * cell, cell, cell);
      cv::rectangle(image, box, color, cv::FILLED);
      const auto text = std::to_string(counts[a][p]);
      const auto size = cv::getTextSize(text, kFont, 0.45, 1, nullptr);
      cv::putText(image, text, {box.x + (cell - size.width) / 2, box.y + (cell + size.height) / 2}, kFont, 0.45,
                  t > 0.5 ? cv::Scalar(255, 255, 255) : cv::Scalar(0, 0, 0), 1, cv::LINE_AA);
    }
  cv::putText(image, "actual (rows) / predicted (columns)", {left, 25}, kFont, 0.5, {0, 0, 0}, 1, cv::LINE_AA);
  for (int c = 0; c < n; ++c) {
    const auto size = cv::getTextSize(label(c), kFont, 0.45, 1, nullptr);
    cv::putText(image, label(c), {left - 10 - size.width, top + c * cell + (cell + size.height) / 2}, kFont, 0.45,
                {0, 0, 0}, 1, cv::LINE_AA);
    // Column labels run downwards: drawn horizontally into a strip, then rotated.
    cv::Mat strip(cell, label_width + 10, CV_8UC3, cv::Scalar(255, 255, 255));
    cv::putText(strip, label(c), {label_width + 5 - size.width, (cell + size.height) / 2}, kFont, 0.45, {0, 0, 0}, 1, cv::LINE_AA);
    cv::Mat rotated;
    cv::rotate(strip, rotated, cv::ROTATE_90_COUNTERCLOCKWISE);
    rotated.copyTo(image(cv::Rect(left + c * cell, top + n * cell + 10, rotated.cols, rotated.rows)));
  }
  write_png(path, image, /*bgr=*/true);
}

void ClassificationInterpretation::plot_top_losses(size_t k, const std::string& path) const {
  const auto top = top_losses(k);
  if (top.empty()) throw Error("plot_top_losses: no items");
  const int columns = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(top.size()))));
  const int rows = static_cast<int>((top.size() + columns - 1) / columns);
  const int size = 128, caption = 36, pad = 8;
  cv::Mat image(rows * (size + caption + pad) + pad, columns * (size + pad) + pad, CV_8UC3, cv::Scalar(255, 255, 255));
  for (size_t i = 0; i < top.size(); ++i) {
    const int x = pad + static_cast<int>(i % columns) * (size + pad);
    const int y = pad + static_cast<int>(i / columns) * (size + caption + pad);
    to_picture(dl_.dataset().get(static_cast<size_t>(top[i].index)).x, size).copyTo(image(cv::Rect(x, y, size, size)));
    char numbers[64];
    std::snprintf(numbers, sizeof numbers, "%.2f / %.2f", top[i].loss, top[i].probability);
    cv::putText(image, label(top[i].predicted) + "/" + label(top[i].actual), {x, y + size + 14}, kFont, 0.4, {0, 0, 0}, 1, cv::LINE_AA);
    cv::putText(image, numbers, {x, y + size + 30}, kFont, 0.4, {80, 80, 80}, 1, cv::LINE_AA);
  }
  write_png(path, image, /*bgr=*/true);
}

}  // namespace fastcpp::vision
