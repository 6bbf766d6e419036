#pragma once
// COCO's object-detection annotations (an "instances" JSON file: images, annotations with
// bbox [x, y, width, height] and category_id, categories), read with nlohmann's JSON.
// Categories become classes 0 ... K-1 in the order of their ids; boxes are cut to their
// image, and boxes without area (width or height 0, or nothing left inside the image) are
// left out, as torchvision's detection references do. Crowd annotations (iscrowd 1) become
// the images' crowd regions: not trained on, and where detections are neither right nor
// wrong for the COCO evaluation, as for pycocotools. Images without boxes are kept
// (background only).
//
// Errors name the file and the annotation: not JSON, not COCO's layout, an annotation of
// an image or a category the file does not list, a negative width or height, an image
// without a size.
#include <string>
#include <vector>

#include "vision/datasets/detection_data.h"

namespace fastcpp::vision {

struct CocoDetections {
  std::vector<std::string> classes;     // category names, by category id
  std::vector<int64_t> category_ids;    // COCO's id of each class
  std::vector<int64_t> image_ids;       // COCO's id of each image
  std::vector<BoxedImage> images;       // paths under images_dir, boxes in pixels (x1 y1 x2 y2)
};

CocoDetections read_coco(const std::string& json_path, const std::string& images_dir);

}  // namespace fastcpp::vision
