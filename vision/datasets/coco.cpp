#include "vision/datasets/coco.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace fastcpp::vision {
namespace {

using nlohmann::json;

std::string number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// The list `key` of COCO's top level; an error unless it is there and a list.
const json& list_of(const json& root, const char* key, const std::string& path) {
  const auto found = root.find(key);
  if (found == root.end() || !found->is_array())
    throw Error("'" + path + "' is not COCO's instances format: no \"" + key + "\" list");
  return *found;
}

// A field of an entry; the error names the entry.
template <class T>
T field(const json& entry, const char* key, const std::string& where) {
  const auto found = entry.find(key);
  if (found == entry.end()) throw Error(where + " has no \"" + key + "\"");
  try {
    return found->get<T>();
  } catch (const json::exception&) {
    throw Error(where + ": \"" + key + "\" is " + found->dump() + ", not of the expected type");
  }
}

}  // namespace

CocoDetections read_coco(const std::string& json_path, const std::string& images_dir) {
  std::ifstream in(json_path);
  if (!in) throw Error("COCO annotations '" + json_path + "' not found");
  json root;
  try {
    root = json::parse(in);
  } catch (const json::parse_error& e) {
    throw Error("'" + json_path + "' is not JSON: " + e.what());
  }
  if (!root.is_object()) throw Error("'" + json_path + "' is not COCO's instances format: not an object");
  const auto& images = list_of(root, "images", json_path);
  const auto& annotations = list_of(root, "annotations", json_path);
  const auto& categories = list_of(root, "categories", json_path);

  CocoDetections coco;
  std::map<int64_t, std::string> names;
  for (const auto& category : categories) {
    const auto where = "'" + json_path + "': category " + category.dump();
    names[field<int64_t>(category, "id", where)] = field<std::string>(category, "name", where);
  }
  std::map<int64_t, int64_t> class_of;
  for (const auto& [id, name] : names) {
    class_of[id] = static_cast<int64_t>(coco.classes.size());
    coco.classes.push_back(name);
    coco.category_ids.push_back(id);
  }

  struct Image {
    size_t index;
    std::string file;
    double width, height;
    std::vector<float> boxes, crowd_boxes;
    std::vector<int64_t> labels, crowd_labels;
  };
  std::map<int64_t, Image> by_id;
  for (const auto& image : images) {
    const auto where = "'" + json_path + "': image " + image.dump();
    const auto id = field<int64_t>(image, "id", where);
    if (by_id.count(id)) throw Error("'" + json_path + "': image id " + std::to_string(id) + " is listed twice");
    const auto width = field<double>(image, "width", where), height = field<double>(image, "height", where);
    if (!(width > 0 && height > 0)) throw Error(where + " has no size (width and height must be > 0)");
    by_id[id] = {coco.image_ids.size(), field<std::string>(image, "file_name", where), width, height, {}, {}, {}, {}};
    coco.image_ids.push_back(id);
  }

  for (const auto& annotation : annotations) {
    const auto where = "'" + json_path + "': annotation " +
                       (annotation.contains("id") ? annotation["id"].dump() : annotation.dump());
    const auto image_id = field<int64_t>(annotation, "image_id", where);
    const auto category_id = field<int64_t>(annotation, "category_id", where);
    const auto bbox = field<std::vector<double>>(annotation, "bbox", where);
    const auto image = by_id.find(image_id);
    if (image == by_id.end()) throw Error(where + " is of image " + std::to_string(image_id) + ", which \"images\" lacks");
    const auto label = class_of.find(category_id);
    if (label == class_of.end())
      throw Error(where + " names category " + std::to_string(category_id) + ", which \"categories\" lacks");
    if (bbox.size() != 4) throw Error(where + ": bbox has " + std::to_string(bbox.size()) + " numbers, not 4");
    const auto [x, y, w, h] = std::tuple{bbox[0], bbox[1], bbox[2], bbox[3]};
    const auto box_text = "bbox [" + number(x) + ", " + number(y) + ", " + number(w) + ", " + number(h) + "]";
    if (w < 0 || h < 0) throw Error(where + ": " + box_text + " has a negative " + (w < 0 ? "width" : "height"));
    auto& target = image->second;
    // Cut to the image, as torchvision's COCO reader: exported sets have boxes a few pixels over.
    const double x1 = std::clamp(x, 0.0, target.width), x2 = std::clamp(x + w, 0.0, target.width);
    const double y1 = std::clamp(y, 0.0, target.height), y2 = std::clamp(y + h, 0.0, target.height);
    if (x2 <= x1 || y2 <= y1) continue;  // nothing left of the box
    const bool crowd = annotation.value("iscrowd", 0) == 1;
    auto& corners = crowd ? target.crowd_boxes : target.boxes;
    corners.insert(corners.end(), {float(x1), float(y1), float(x2), float(y2)});
    (crowd ? target.crowd_labels : target.labels).push_back(label->second);
  }

  coco.images.resize(by_id.size());
  const auto boxes = [](const std::vector<float>& corners) {
    return torch::tensor(corners, torch::kFloat).reshape({static_cast<int64_t>(corners.size() / 4), 4});
  };
  for (auto& [id, image] : by_id)
    coco.images[image.index] = {(std::filesystem::path(images_dir) / image.file).string(), boxes(image.boxes),
                                torch::tensor(image.labels, torch::kLong), boxes(image.crowd_boxes),
                                torch::tensor(image.crowd_labels, torch::kLong)};
  return coco;
}

}  // namespace fastcpp::vision
