#pragma once
// Writes an in-memory image dataset (x uint8 [N, C, H, W], y class indices) as an
// ImageFolder tree of PNG files: dir/<class name>/<index>.png. Class names are made
// safe for file names ('/' becomes '_').
#include <string>
#include <vector>

#include "data/dataset.h"

namespace fastcpp::vision {

void export_image_folder(const TensorDataset& dataset, const std::vector<std::string>& vocab, const std::string& dir);

}  // namespace fastcpp::vision
