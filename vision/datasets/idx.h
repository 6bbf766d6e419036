#pragma once
// The idx format of MNIST and Fashion-MNIST (gzipped or not): a magic number giving
// the element type and rank, the dimensions, then the data, big-endian.
#include <torch/types.h>

#include <memory>
#include <string>

#include "data/dataset.h"

namespace fastcpp::vision {

// The file's array as a tensor (uint8 stays uint8). Errors name the file.
torch::Tensor read_idx(const std::string& path);

// An (images, labels) pair of idx files as a dataset: x uint8 [N, 1, H, W],
// y int64 [N]. `prefix` is "train" or "t10k" as in MNIST's file names; the files
// may end in .gz or not.
std::shared_ptr<TensorDataset> idx_image_dataset(const std::string& dir, const std::string& prefix);

// Where Fashion-MNIST's idx files are: $FASTCPP_FASHION_MNIST when set, else Debian's
// dataset-fashion-mnist folder (/usr/share/datasets/fashion-mnist).
std::string fashion_mnist_dir();
// Fashion-MNIST's ten class names, in label order.
const std::vector<std::string>& fashion_mnist_vocab();

}  // namespace fastcpp::vision
