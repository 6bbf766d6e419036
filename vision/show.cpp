#include "vision/show.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "formats/canvas.h"
#include "learner/learner.h"
#include "vision/detection/detector_output.h"
#include "vision/detection/postprocess.h"
#include "vision/mask_png.h"

namespace fastcpp::vision {
namespace {

constexpr Rgb kInk{0, 0, 0}, kWrong{220, 30, 30};
constexpr int kTextScale = 2, kLabelHeight = 5 * kTextScale + 6, kGap = 8;

}  // namespace

torch::Tensor decode_images(torch::Tensor x, const std::vector<BatchTransform>& batch_tfms) {
  x = x.detach().to(torch::kCPU);
  if (x.dim() != 4) throw Error("show_batch: expected image batches [N, C, H, W], got " + c10::str(x.sizes()));
  if (x.is_floating_point()) {
    x = x.to(torch::kFloat);
    for (auto it = batch_tfms.rbegin(); it != batch_tfms.rend(); ++it)
      if (const auto* normalize = it->target<Normalize>()) {
        const auto shape = std::vector<int64_t>{1, static_cast<int64_t>(normalize->mean.size()), 1, 1};
        x = x * torch::tensor(normalize->std).to(torch::kFloat).view(shape) +
            torch::tensor(normalize->mean).to(torch::kFloat).view(shape);
      }
    x = (x * 255).round().clamp(0, 255).to(torch::kByte);
  }
  // Three channels or more: the first three; fewer: the first, in grey.
  x = x.size(1) < 3 ? x.narrow(1, 0, 1).expand({x.size(0), 3, x.size(2), x.size(3)}) : x.narrow(1, 0, 3);
  return x.permute({0, 2, 3, 1}).contiguous();
}

namespace {

int enlargement(const torch::Tensor& images, int min_side) {
  const auto side = std::max(images.size(1), images.size(2));
  return std::max<int>(1, static_cast<int>((min_side + side - 1) / side));
}

void paste(Canvas& canvas, int x, int y, const torch::Tensor& hwc, int scale) {
  const auto pixels = hwc.contiguous();
  canvas.paste(x, y, pixels.data_ptr<uint8_t>(), static_cast<int>(pixels.size(1)), static_cast<int>(pixels.size(0)), scale);
}

std::string name_of(int64_t index, const std::vector<std::string>& vocab) {
  return index >= 0 && index < static_cast<int64_t>(vocab.size()) ? vocab[static_cast<size_t>(index)] : std::to_string(index);
}

// A classification target or decision: a class index, or a multi-label row (0/1 per
// class) as the names of the classes set, joined by ';' as fastai shows them.
std::string labels_of(const torch::Tensor& target, const std::vector<std::string>& vocab) {
  if (target.dim() == 0) return name_of(target.item<int64_t>(), vocab);
  std::string names;
  const auto set = (target > 0.5).nonzero().flatten();
  for (int64_t k = 0; k < set.size(0); ++k) names.append(k ? ";" : "").append(name_of(set[k].item<int64_t>(), vocab));
  return names;
}

// A regression target or output: its first values, two decimals each, joined by ','
// (a caption sets its image's width: many values end in "...").
std::string values_of(const torch::Tensor& target) {
  constexpr int64_t kShown = 6;
  std::string text;
  const auto values = target.to(torch::kFloat).flatten();
  for (int64_t k = 0; k < std::min(values.size(0), kShown); ++k) {
    char value[32];
    std::snprintf(value, sizeof value, "%.2f", static_cast<double>(values[k].item<float>()));
    text.append(k ? "," : "").append(value);
  }
  if (values.size(0) > kShown) text += ",...";
  return text;
}

// Whether targets name classes (indices, or a multi-label loader's 0/1 rows) rather than
// hold a regression's values (floats of a single-label loader).
bool names_classes(const torch::Tensor& targets, bool multi_label) {
  return multi_label || !targets.is_floating_point();
}

// What a target says: classes by name, or its values.
std::string caption_of(const torch::Tensor& target, const std::vector<std::string>& vocab, bool multi_label) {
  return names_classes(target, multi_label) ? labels_of(target, vocab) : values_of(target);
}

// A grid of labelled images: text[i] above image i, in red where wrong[i].
void write_labelled_grid(const std::string& path, const torch::Tensor& images, const std::vector<std::string>& text,
                         const std::vector<bool>& wrong, const ShowOptions& o) {
  const int n = static_cast<int>(images.size(0)), cols = std::max(1, std::min(o.ncols, n));
  const int rows = (n + cols - 1) / cols, scale = enlargement(images, o.min_side);
  int cell_w = static_cast<int>(images.size(2)) * scale;
  for (const auto& t : text) cell_w = std::max(cell_w, Canvas::text_width(t, kTextScale));
  const int cell_h = static_cast<int>(images.size(1)) * scale + kLabelHeight;
  Canvas canvas(cols * (cell_w + kGap) + kGap, rows * (cell_h + kGap) + kGap);
  for (int i = 0; i < n; ++i) {
    const int x = kGap + (i % cols) * (cell_w + kGap), y = kGap + (i / cols) * (cell_h + kGap);
    canvas.text(x, y, text[static_cast<size_t>(i)], wrong[static_cast<size_t>(i)] ? kWrong : kInk, kTextScale);
    paste(canvas, x, y + kLabelHeight, images[i], scale);
  }
  canvas.save_png(path);
}

bool is_mask_batch(const torch::Tensor& y) { return y.dim() == 3 && !y.is_floating_point(); }
// Detection targets: [N, boxes, 5] (x1 y1 x2 y2 label, label -1 for padding).
bool is_box_batch(const torch::Tensor& y) { return y.dim() == 3 && y.size(2) == 5 && y.is_floating_point(); }

struct ShownBoxes {
  torch::Tensor boxes, labels, scores;  // scores undefined: ground truth
};

// Each box in its class's colour, its name (and score) above it; the image at (x, y) scaled.
void draw_boxes(Canvas& canvas, int x, int y, const ShownBoxes& shown, int scale, const std::vector<std::string>& vocab) {
  const auto boxes = shown.boxes.to(torch::kCPU, torch::kDouble) * scale;
  for (int64_t i = 0; i < boxes.size(0); ++i) {
    const auto label = shown.labels[i].item<int64_t>();
    const auto colour = class_colour(label + 1);
    const double x1 = x + boxes[i][0].item<double>(), y1 = y + boxes[i][1].item<double>();
    const double x2 = x + boxes[i][2].item<double>(), y2 = y + boxes[i][3].item<double>();
    canvas.line(x1, y1, x2, y1, colour);
    canvas.line(x2, y1, x2, y2, colour);
    canvas.line(x2, y2, x1, y2, colour);
    canvas.line(x1, y2, x1, y1, colour);
    auto text = name_of(label, vocab);
    if (shown.scores.defined()) text += " " + std::to_string(static_cast<int>(std::lround(100 * shown.scores[i].item<double>())));
    canvas.text(static_cast<int>(x1) + 2, static_cast<int>(std::max<double>(y, y1 - 5 * kTextScale - 2)), text, colour, kTextScale);
  }
}

// Rows of one image in each column with that column's boxes, a title above each column;
// one column: a grid of ncols images.
void write_box_panels(const std::string& path, const torch::Tensor& images, const std::vector<std::vector<ShownBoxes>>& columns,
                      const std::vector<std::string>& titles, const std::vector<std::string>& vocab, const ShowOptions& o) {
  const int n = static_cast<int>(images.size(0)), scale = enlargement(images, o.min_side);
  const int w = static_cast<int>(images.size(2)) * scale, h = static_cast<int>(images.size(1)) * scale;
  const int panels = static_cast<int>(columns.size());
  const int per_row = panels == 1 ? std::max(1, std::min(o.ncols, n)) : 1, cols = panels * per_row;
  const int rows = (n + per_row - 1) / per_row, top = titles.empty() ? 0 : kLabelHeight;
  Canvas canvas(cols * (w + kGap) + kGap, top + rows * (h + kGap) + kGap);
  for (int c = 0; c < static_cast<int>(titles.size()); ++c)
    canvas.text(kGap + c * (w + kGap), kGap, titles[static_cast<size_t>(c)], kInk, kTextScale);
  for (int i = 0; i < n; ++i)
    for (int p = 0; p < panels; ++p) {
      const int column = (i % per_row) * panels + p;
      const int x = kGap + column * (w + kGap), y = kGap + top + (i / per_row) * (h + kGap);
      paste(canvas, x, y, images[i], scale);
      draw_boxes(canvas, x, y, columns[static_cast<size_t>(p)][static_cast<size_t>(i)], scale, vocab);
    }
  canvas.save_png(path);
}

std::vector<ShownBoxes> truth_of(const torch::Tensor& targets) {
  std::vector<ShownBoxes> shown;
  for (int64_t i = 0; i < targets.size(0); ++i) {
    const auto truth = image_boxes(targets, i, /*crowds=*/false);  // the objects only
    shown.push_back({truth.boxes, truth.labels, {}});
  }
  return shown;
}

}  // namespace

void write_mask_rows(const std::string& path, const torch::Tensor& images, const std::vector<torch::Tensor>& masks,
                     const std::vector<std::string>& titles, const std::vector<std::string>& captions,
                     const ShowOptions& o) {
  if (titles.size() != masks.size() + 1)
    throw Error("write_mask_rows: " + std::to_string(titles.size()) + " titles for " + std::to_string(masks.size() + 1) +
                " columns");
  const int n = static_cast<int>(images.size(0)), scale = enlargement(images, o.min_side);
  const int w = static_cast<int>(images.size(2)) * scale, h = static_cast<int>(images.size(1)) * scale;
  const int cols = 1 + static_cast<int>(masks.size());
  const int row_h = h + kGap + (captions.empty() ? 0 : kLabelHeight);
  Canvas canvas(cols * (w + kGap) + kGap, kLabelHeight + n * row_h + kGap);
  for (int c = 0; c < cols; ++c) canvas.text(kGap + c * (w + kGap), kGap, titles[static_cast<size_t>(c)], kInk, kTextScale);
  for (int i = 0; i < n; ++i) {
    int y = kGap + kLabelHeight + i * row_h;
    if (static_cast<size_t>(i) < captions.size()) {
      canvas.text(kGap, y, captions[static_cast<size_t>(i)], kInk, kTextScale);
      y += kLabelHeight;
    }
    paste(canvas, kGap, y, images[i], scale);
    for (size_t m = 0; m < masks.size(); ++m)
      paste(canvas, kGap + static_cast<int>(m + 1) * (w + kGap), y, colour_mask(masks[m][i], o.void_index), scale);
  }
  canvas.save_png(path);
}

void show_batch(const DataLoaders& dls, const std::string& path, ShowOptions o) {
  DataLoader loader = dls.train;  // its own pass: the caller's loader is left as it was
  const auto batch = *loader.begin();
  const int64_t n = std::min<int64_t>(o.max_n, batch.x.size(0));
  const auto images = decode_images(batch.x.narrow(0, 0, n), dls.train.options().batch_tfms);
  const auto y = batch.y.narrow(0, 0, n).to(torch::kCPU);
  if (!o.void_index) o.void_index = dls.void_index;
  if (is_box_batch(y)) return write_box_panels(path, images, {truth_of(y)}, {}, dls.vocab, o);
  if (is_mask_batch(y)) return write_mask_rows(path, images, {y}, {"image", "mask"}, {}, o);
  std::vector<std::string> text;
  for (int64_t i = 0; i < n; ++i) text.push_back(y.dim() <= 2 ? caption_of(y[i], dls.vocab, dls.multi_label) : "");
  write_labelled_grid(path, images, text, std::vector<bool>(static_cast<size_t>(n), false), o);
}

void show_results(Learner& learn, const std::string& path, ShowOptions o) {
  const auto batch = *learn.dls.valid.begin();
  const int64_t n = std::min<int64_t>(o.max_n, batch.x.size(0));
  torch::NoGradGuard no_grad;
  learn.model.module().eval();
  const auto output = learn.model(batch.x.narrow(0, 0, n).to(learn.device));
  const auto images = decode_images(batch.x.narrow(0, 0, n), learn.dls.valid.options().batch_tfms);
  const auto y = batch.y.narrow(0, 0, n).to(torch::kCPU);
  if (is_box_batch(y)) {
    std::vector<ShownBoxes> found;
    for (const auto& d : detections(output)) {
      const auto kept = d.scores >= o.min_score;
      found.push_back({d.boxes.index({kept}), d.labels.index({kept}), d.scores.index({kept})});
    }
    return write_box_panels(path, images, {truth_of(y), found}, {"target", "prediction"}, learn.dls.vocab, o);
  }
  if (!o.void_index) o.void_index = learn.dls.void_index;
  if (is_mask_batch(y))
    return write_mask_rows(path, images, {y, output.argmax(1).to(torch::kCPU)}, {"image", "target", "prediction"}, {},
                           o);
  if (y.dim() > 2) {  // an image-like target without a class or a few values to caption it (as show_batch)
    const auto count = static_cast<size_t>(n);
    return write_labelled_grid(path, images, std::vector<std::string>(count), std::vector<bool>(count, false), o);
  }
  const auto captions = result_captions(y, output.to(torch::kCPU), learn.dls.vocab, learn.dls.multi_label);
  write_labelled_grid(path, images, captions.text, captions.wrong, o);
}

ResultCaptions result_captions(const torch::Tensor& targets, const torch::Tensor& outputs,
                               const std::vector<std::string>& vocab, bool multi_label) {
  const bool classes = names_classes(targets, multi_label);
  const bool same_shape = multi_label || !classes;  // a class index against a row of scores otherwise
  if (targets.size(0) != outputs.size(0) ||
      (same_shape && targets.numel() != outputs.numel()) || (multi_label && targets.sizes() != outputs.sizes()))
    throw Error("result_captions: targets " + c10::str(targets.sizes()) + " do not match outputs " +
                c10::str(outputs.sizes()));
  ResultCaptions captions;
  if (!classes) {  // regression: no class to be wrong about, the values side by side
    for (int64_t i = 0; i < targets.size(0); ++i) {
      captions.text.push_back(values_of(targets[i]) + "/" + values_of(outputs[i]));
      captions.wrong.push_back(false);
    }
    return captions;
  }
  // A multi-label output is a logit per class: set where its sigmoid passes 0.5 (fastai's threshold).
  const auto decided = multi_label ? (outputs > 0).to(torch::kLong) : outputs.argmax(1);
  for (int64_t i = 0; i < targets.size(0); ++i) {
    captions.text.push_back(labels_of(targets[i], vocab) + "/" + labels_of(decided[i], vocab));
    captions.wrong.push_back(!torch::equal(targets[i].to(torch::kLong), decided[i]));
  }
  return captions;
}

}  // namespace fastcpp::vision
