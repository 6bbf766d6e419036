#include "vision/detection/detector_output.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "core/spec_text.h"

namespace fastcpp::vision {

DetectorOutput::DetectorOutput(torch::Tensor out, const char* who) : output(std::move(out)) {
  if (output.dim() != 3 || output.size(2) <= kPrefix || !output.is_floating_point())
    throw Error(std::string(who) + ": expected a detector's output [images, anchors, 12 + logits], got " +
                std::string(c10::toString(output.scalar_type())) + " " + c10::str(output.sizes()));
}

void AnchorColumns::remake(const torch::Tensor& anchors, const std::vector<int64_t>& per_cell,
                           const std::vector<std::pair<int64_t, int64_t>>& feature_sizes,
                           std::pair<int64_t, int64_t> image_size, torch::Device device) {
  std::vector<torch::Tensor> levels;
  for (size_t k = 0; k < feature_sizes.size(); ++k)
    levels.push_back(torch::full({feature_sizes[k].first * feature_sizes[k].second * per_cell[k]}, double(k)));
  const auto n = anchors.size(0);
  const auto head = torch::tensor({double(scoring_ == Scoring::softmax), double(image_size.first), double(image_size.second)},
                                  anchors.options());
  columns_ = torch::cat({head.narrow(0, 0, 1).expand({n, 1}), torch::cat(levels).to(anchors.options()).unsqueeze(1),
                         head.narrow(0, 1, 2).expand({n, 2}), anchors}, 1)
                 .to(device);
  feature_sizes_ = feature_sizes;
  image_size_ = image_size;
}

torch::Tensor DetectorOutput::pack(const torch::Tensor& codes, const torch::Tensor& logits,
                                   const torch::Tensor& anchor_columns) {
  const auto n = codes.size(0), a = codes.size(1);
  const auto dtype = torch::promote_types(anchor_columns.scalar_type(), logits.scalar_type());
  return torch::cat({anchor_columns.unsqueeze(0).expand({n, a, 8}).to(dtype), codes.to(dtype), logits.to(dtype)}, 2);
}

// The scoring and the image size are the same in every row: read from the first (none: sigmoid, 0 x 0).
// Each read waits for the output (decoding does; the losses read none of them).
Scoring DetectorOutput::scoring() const {
  return output.size(0) && output.size(1) && output[0][0][0].item<double>() > 0.5 ? Scoring::softmax : Scoring::sigmoid;
}
int64_t DetectorOutput::num_classes() const {
  return output.size(2) - kPrefix - (scoring() == Scoring::softmax ? 1 : 0);
}
int64_t DetectorOutput::image_height() const { return output.size(0) && output.size(1) ? output[0][0][2].item<int64_t>() : 0; }
int64_t DetectorOutput::image_width() const { return output.size(0) && output.size(1) ? output[0][0][3].item<int64_t>() : 0; }

void check_box_targets(const torch::Tensor& targets, const DetectorOutput& output, const char* who) {
  const int64_t images = output.output.size(0), num_classes = output.num_classes();
  if (targets.dim() != 3 || targets.size(0) != images || targets.size(2) != 5)
    throw Error(std::string(who) + ": expected targets [" + std::to_string(images) +
                ", boxes, 5] (x1 y1 x2 y2 label), got " + c10::str(targets.sizes()));
  const auto labels = targets.select(2, 4);
  const auto x1 = targets.select(2, 0), y1 = targets.select(2, 1), x2 = targets.select(2, 2), y2 = targets.select(2, 3);
  // -1 marks padding; any other label must be a class or a crowd region's (NaN is neither: it
  // differs from its floor)
  const auto classes = torch::where(labels >= 0, labels, crowd_label(0) - labels);
  const auto bad_label = (labels != -1) & ((classes < 0) | (classes >= num_classes) | (labels != labels.floor()));
  const auto no_area = (x2 <= x1) | (y2 <= y1) | targets.narrow(2, 0, 4).isfinite().logical_not().any(2);
  // A box wholly off the image overlaps no anchor: the matching would give every anchor to it.
  const auto as_double = targets.options().dtype(torch::kDouble);
  const auto image_size = output.output.size(0) && output.output.size(1)
                              ? output.output[0][0].narrow(0, 2, 2).to(targets.device(), torch::kDouble)
                              : torch::full({2}, std::numeric_limits<double>::infinity(), as_double);
  const auto off_image = (x2 <= 0) | (y2 <= 0) | (x1 >= image_size[1]) | (y1 >= image_size[0]);
  const auto bad = bad_label | ((labels >= 0) & (no_area | off_image));
  if (!bad.any().item<bool>()) return;  // one read-back a batch; the matching reads more
  const auto at = bad.nonzero()[0].cpu();
  const int64_t image = at[0].item<int64_t>(), box = at[1].item<int64_t>();
  const auto row = targets[image][box].to(torch::kCPU, torch::kDouble);
  const auto value = [&](int64_t k) { return spec_text::number(row[k].item<double>()); };
  const auto where = std::string(who) + ": image " + std::to_string(image) + "'s box " + std::to_string(box) + " ";
  const auto model_classes =
      "the model's " + std::to_string(num_classes) + " (0 to " + std::to_string(num_classes - 1) + ")";
  const double label = row[4].item<double>();
  if (bad_label[image][box].item<bool>() && label < -1 && label == std::floor(label))
    throw Error(where + "has label " + value(4) + ": a crowd region of class " +
                spec_text::number(crowd_label(0) - label) + ", not one of " + model_classes);
  if (bad_label[image][box].item<bool>())
    throw Error(where + "has label " + value(4) + ", not a class of " + model_classes);
  const auto corners = "[" + value(0) + ", " + value(1) + ", " + value(2) + ", " + value(3) + "]";
  if (off_image[image][box].item<bool>())
    throw Error(where + corners + " lies outside the image (" + std::to_string(output.image_width()) + " x " +
                std::to_string(output.image_height()) + " pixels, width x height)");
  throw Error(where + corners + " has no area (x2 <= x1 or y2 <= y1) or a corner that is not finite");
}

ImageBoxes image_boxes(const torch::Tensor& targets, int64_t i, bool crowds) {
  if (targets.dim() != 3 || targets.size(2) != 5)
    throw Error("detection targets: expected [images, boxes, 5] (x1 y1 x2 y2 label), got " + c10::str(targets.sizes()));
  const auto rows = targets[i];
  const auto objects = rows.index({rows.select(1, 4) >= 0});
  ImageBoxes image{objects.narrow(1, 0, 4), objects.select(1, 4).to(torch::kLong)};
  if (crowds) {
    const auto regions = rows.index({rows.select(1, 4) <= crowd_label(0)});
    image.crowd_boxes = regions.narrow(1, 0, 4);
    image.crowd_labels = (crowd_label(0) - regions.select(1, 4)).to(torch::kLong);
  }
  return image;
}

torch::Tensor box_targets(const std::vector<ImageBoxes>& images) {
  const auto crowds_of = [](const ImageBoxes& image) {
    return image.crowd_labels.defined() ? image.crowd_labels.size(0) : int64_t{0};
  };
  int64_t most = 0;
  for (const auto& image : images) most = std::max(most, image.labels.size(0) + crowds_of(image));
  auto targets = torch::full({static_cast<int64_t>(images.size()), most, 5}, -1.0);
  for (size_t i = 0; i < images.size(); ++i) {
    int64_t row = 0;
    const auto put = [&](const torch::Tensor& boxes, const torch::Tensor& labels, const char* what) {
      const auto n = labels.size(0);
      if (!boxes.defined() || boxes.dim() != 2 || boxes.size(0) != n || boxes.size(1) != 4)
        throw Error("box_targets: image " + std::to_string(i) + " has " + what + " " +
                    (boxes.defined() ? c10::str(boxes.sizes()) : "none") +
                    " for " + std::to_string(n) + " labels");
      targets[i].narrow(0, row, n).narrow(1, 0, 4).copy_(boxes);
      targets[i].narrow(0, row, n).select(1, 4).copy_(labels);
      row += n;
    };
    put(images[i].boxes, images[i].labels, "boxes");
    if (crowds_of(images[i])) put(images[i].crowd_boxes, crowd_label(0) - images[i].crowd_labels, "crowd boxes");
  }
  return targets;
}

}  // namespace fastcpp::vision
