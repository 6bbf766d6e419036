#include "vision/datasets/detection_data.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/spec_text.h"
#include "vision/data_block.h"
#include "vision/datasets/coco.h"
#include "vision/datasets/image_folder.h"
#include "vision/detection/detector_output.h"
#include "vision/image.h"

namespace fastcpp::vision {
namespace {

namespace fs = std::filesystem;

// The boxes under one map, clipped to its output.
torch::Tensor apply_map(const torch::Tensor& boxes, const BoxMap& map) {
  auto x = boxes.index({torch::indexing::Slice(), torch::indexing::Slice(0, 4, 2)}) * map.scale_x - map.left;
  auto y = boxes.index({torch::indexing::Slice(), torch::indexing::Slice(1, 4, 2)}) * map.scale_y - map.top;
  if (map.flip) x = map.out.width - x.flip({1});  // x2 becomes the left edge
  x = x.clamp(0, map.out.width);
  y = y.clamp(0, map.out.height);
  return torch::stack({x.select(1, 0), y.select(1, 0), x.select(1, 1), y.select(1, 1)}, 1);
}

}  // namespace

MovedBoxes transform_boxes(const std::vector<ItemTransform>& tfms, const torch::Tensor& boxes, cv::Size size, Rng rng,
                           bool train) {
  auto moved = boxes.to(torch::kFloat);
  for (const auto& tfm : tfms) {
    const auto map = tfm.box_map(size, rng, train);
    if (!map) throw Error("item transform '" + tfm.spec() + "' cannot move boxes (ImageTransform::box_map)");
    moved = apply_map(moved, *map);
    size = map->out;
  }
  const auto kept = torch::nonzero((moved.select(1, 2) > moved.select(1, 0)) & (moved.select(1, 3) > moved.select(1, 1)))
                        .squeeze(1);
  return {moved.index({kept}), kept, size};
}

torch::Tensor boxes_to_image(const std::vector<ItemTransform>& tfms, const torch::Tensor& boxes, cv::Size size) {
  std::vector<BoxMap> maps;  // the validation forms draw nothing: any Rng
  Rng rng(0);
  for (const auto& tfm : tfms) {
    const auto map = tfm.box_map(maps.empty() ? size : maps.back().out, rng, false);
    if (!map) throw Error("item transform '" + tfm.spec() + "' cannot move boxes (ImageTransform::box_map)");
    maps.push_back(*map);
  }
  auto x = boxes.index({torch::indexing::Slice(), torch::indexing::Slice(0, 4, 2)}).to(torch::kFloat);
  auto y = boxes.index({torch::indexing::Slice(), torch::indexing::Slice(1, 4, 2)}).to(torch::kFloat);
  for (auto map = maps.rbegin(); map != maps.rend(); ++map) {
    if (map->flip) x = map->out.width - x.flip({1});
    x = (x + map->left) / map->scale_x;
    y = (y + map->top) / map->scale_y;
  }
  x = x.clamp(0, size.width);
  y = y.clamp(0, size.height);
  return torch::stack({x.select(1, 0), y.select(1, 0), x.select(1, 1), y.select(1, 1)}, 1);
}

DetectionDataset::DetectionDataset(std::vector<BoxedImage> images, std::vector<std::string> classes,
                                   DetectionDataOptions options)
    : images_(std::move(images)), classes_(std::move(classes)), options_(std::move(options)) {
  if (classes_.empty()) throw Error("DetectionDataset: no classes");
  for (auto& item : images_) {
    if (item.crowd_boxes.defined() != item.crowd_labels.defined())
      throw Error("DetectionDataset: image '" + item.image + "' has crowd " +
                  (item.crowd_boxes.defined() ? "boxes without labels" : "labels without boxes"));
    if (!item.crowd_boxes.defined()) {
      item.crowd_boxes = torch::empty({0, 4});
      item.crowd_labels = torch::empty({0}, torch::kLong);
    }
    for (const auto& [boxes, labels, what, label] : {std::tuple{item.boxes, item.labels, "boxes", "label"},
                                                     std::tuple{item.crowd_boxes, item.crowd_labels, "crowd boxes",
                                                                "crowd label"}}) {
      const auto n = labels.numel();
      if (boxes.dim() != 2 || boxes.size(0) != n || boxes.size(1) != 4)
        throw Error("DetectionDataset: image '" + item.image + "' has " + what + " " + c10::str(boxes.sizes()) +
                    " for " + std::to_string(n) + " labels");
      if (n && (labels.min().item<int64_t>() < 0 || labels.max().item<int64_t>() >= int64_t(classes_.size())))
        throw Error("DetectionDataset: image '" + item.image + "' has a " + label + " outside [0, " +
                    std::to_string(classes_.size()) + ")");
    }
  }
  check_box_areas();
}

// All images' boxes at once (a few operations for COCO's 118k images, not a few per image).
void DetectionDataset::check_box_areas() const {
  std::vector<torch::Tensor> all;
  for (const auto& item : images_) all.push_back(torch::cat({item.boxes, item.crowd_boxes}).to(torch::kDouble));
  if (all.empty()) return;
  const auto b = torch::cat(all);
  const auto bad =
      (b.select(1, 2) <= b.select(1, 0)) | (b.select(1, 3) <= b.select(1, 1)) | b.isfinite().logical_not().any(1);
  if (!bad.any().item<bool>()) return;
  const int64_t first_bad = bad.nonzero()[0][0].item<int64_t>();
  std::string corners;
  for (int64_t c = 0; c < 4; ++c) corners += (c ? ", " : "") + spec_text::number(b[first_bad][c].item<double>());
  int64_t row = first_bad;  // of its image's boxes, then crowd boxes
  size_t image = 0;
  while (row >= all[image].size(0)) row -= all[image++].size(0);
  const auto objects = images_[image].boxes.size(0);
  throw Error("DetectionDataset: image '" + images_[image].image + "' has " + (row < objects ? "box " : "crowd box ") +
              std::to_string(row < objects ? row : row - objects) + " [" + corners +
              "] with no area or a corner that is not finite (boxes are x1 y1 x2 y2, x2 > x1 and y2 > y1)");
}

Example DetectionDataset::get(size_t index) const {
  Rng rng(index);
  return get(index, rng);
}

Example DetectionDataset::get(size_t index, Rng& rng) const {
  const auto& item = images_.at(index);
  cv::Mat image = read_image(item.image, {.channels = options_.channels});
  const auto boxes = torch::cat({item.boxes.to(torch::kFloat), item.crowd_boxes.to(torch::kFloat)});
  const auto labels = torch::cat({item.labels, crowd_label(0) - item.crowd_labels});
  const auto moved = transform_boxes(options_.item_tfms, boxes, image.size(), rng, options_.train);
  for (const auto& tfm : options_.item_tfms) image = tfm(image, rng, options_.train);
  auto y = torch::cat({moved.boxes, labels.index({moved.kept}).to(torch::kFloat).unsqueeze(1)}, 1);
  return {image_to_tensor(image), y};
}

Batch DetectionDataset::collate_items(const std::vector<Example>& examples) const {
  if (examples.empty()) throw Error("collate: empty batch");
  std::vector<torch::Tensor> xs;
  std::vector<ImageBoxes> boxes;  // each item's rows as they are: crowd regions keep their crowd labels
  for (const auto& example : examples) {
    xs.push_back(example.x);
    boxes.push_back({example.y.narrow(1, 0, 4), example.y.select(1, 4).to(torch::kLong)});
  }
  return {torch::stack(xs), box_targets(boxes)};
}

DatasetPtr DetectionDataset::augmented() const {
  if (options_.item_tfms.empty()) return nullptr;
  auto options = options_;
  options.train = true;
  return std::make_shared<DetectionDataset>(with_options(std::move(options)));
}

std::vector<std::string> DetectionDataset::item_transform_specs() const {
  return transform_specs(options_.item_tfms, "DetectionDataset");
}

DetectionDataset DetectionDataset::with_options(DetectionDataOptions options) const {
  return DetectionDataset(images_, classes_, std::move(options));
}

DetectionDataset DetectionDataset::subset(const std::vector<int64_t>& indices) const {
  std::vector<BoxedImage> images;
  for (const auto i : indices) images.push_back(images_.at(static_cast<size_t>(i)));
  return DetectionDataset(std::move(images), classes_, options_);
}

DataLoaders DetectionDataLoaders::from_images(std::vector<BoxedImage> images, std::vector<std::string> classes,
                                              DetectionLoadersOptions o) {
  if (images.empty()) throw Error("DetectionDataLoaders: no images");
  std::vector<std::string> paths;
  for (const auto& item : images) paths.push_back(item.image);
  DetectionDataOptions train_options{o.channels, o.item_tfms, /*train=*/true};
  auto valid_options = train_options;
  valid_options.train = false;
  const DetectionDataset all(std::move(images), classes, train_options);
  const auto split = o.splitter ? o.splitter(paths) : RandomSplitter{o.valid_pct, o.seed}.split(all.size());
  if (split.train.empty()) throw Error("DetectionDataLoaders: the split left no training images");
  auto train = std::make_shared<DetectionDataset>(all.subset(split.train));
  auto valid = std::make_shared<DetectionDataset>(all.subset(split.valid).with_options(valid_options));
  return image_dataloaders({train, valid, std::move(classes)}, o.batch_tfms, o.aug_tfms,
                           {.bs = o.bs, .workers = o.workers, .seed = o.seed, .val_bs = o.val_bs});
}

DataLoaders DetectionDataLoaders::from_coco(const std::string& json_path, const std::string& images_dir,
                                            DetectionLoadersOptions options) {
  auto coco = read_coco(json_path, images_dir);
  return from_images(std::move(coco.images), std::move(coco.classes), std::move(options));
}

namespace {

struct BoxLine {
  std::string name;
  float x1, y1, x2, y2;
};

std::vector<BoxLine> parse_box_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("box file '" + path + "' not found");
  std::vector<BoxLine> boxes;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::istringstream words(line);
    BoxLine box;
    std::string extra;
    if (!(words >> box.name >> box.x1 >> box.y1 >> box.x2 >> box.y2) || (words >> extra))
      throw Error("box file '" + path + "' line " + std::to_string(number) + ": expected \"class x1 y1 x2 y2\", got \"" +
                  line + "\"");
    if (box.x2 <= box.x1 || box.y2 <= box.y1)
      throw Error("box file '" + path + "' line " + std::to_string(number) + ": the box has no area (x2 <= x1 or y2 <= y1)");
    boxes.push_back(box);
  }
  return boxes;
}

BoxedImage boxed(const std::string& image, const std::vector<BoxLine>& lines, const std::vector<std::string>& classes,
                 const std::string& box_file) {
  std::vector<float> coordinates;
  std::vector<int64_t> labels;
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto found = std::find(classes.begin(), classes.end(), lines[i].name);
    if (found == classes.end())
      throw Error("box file '" + box_file + "' box " + std::to_string(i + 1) + ": unknown class '" + lines[i].name + "'");
    labels.push_back(found - classes.begin());
    coordinates.insert(coordinates.end(), {lines[i].x1, lines[i].y1, lines[i].x2, lines[i].y2});
  }
  const auto n = static_cast<int64_t>(labels.size());
  return {image, torch::tensor(coordinates, torch::kFloat).reshape({n, 4}), torch::tensor(labels, torch::kLong).reshape({n})};
}

}  // namespace

BoxedImage read_box_file(const std::string& image, const std::string& box_file, const std::vector<std::string>& classes) {
  return boxed(image, parse_box_file(box_file), classes, box_file);
}

DataLoaders DetectionDataLoaders::from_box_files(const std::string& images_dir, const std::string& boxes_dir,
                                                 DetectionLoadersOptions options) {
  std::error_code ec;
  if (!fs::is_directory(images_dir, ec)) throw Error("DetectionDataLoaders: image folder '" + images_dir + "' not found");
  const auto paths = image_files_in(images_dir);
  std::vector<std::pair<std::string, std::vector<BoxLine>>> files;
  std::set<std::string> names;
  for (const auto& path : paths) {
    const auto box_file = (fs::path(boxes_dir) / fs::path(path).stem()).string() + ".txt";
    files.emplace_back(box_file, parse_box_file(box_file));
    for (const auto& box : files.back().second) names.insert(box.name);
  }
  const std::vector<std::string> classes(names.begin(), names.end());
  std::vector<BoxedImage> images;
  for (size_t i = 0; i < paths.size(); ++i) images.push_back(boxed(paths[i], files[i].second, classes, files[i].first));
  return from_images(std::move(images), classes, std::move(options));
}

}  // namespace fastcpp::vision
