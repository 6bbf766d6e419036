#pragma once
// Batch transforms: run on a whole batch of x, on its device, after the transfer
// (so images cross to the GPU as uint8, a quarter of the bytes of float). When the
// device is the CPU they run on the loader's worker threads, so they must be
// thread-safe (these are: they hold no mutable state).
#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace fastcpp {

using BatchTransform = std::function<torch::Tensor(const torch::Tensor&)>;

// uint8 in [0, 255] -> float in [0, 1]; float input passes through.
struct IntToFloat {
  torch::Tensor operator()(const torch::Tensor& x) const;
};

// (x - mean) / std per channel (dimension 1), uint8 input read as x/255, computed as
// float(x) * scale + shift. On the CPU uint8 batches take one pass (no intermediate
// float copy); elsewhere ATen's kernels compute the same products and sums, bitwise, so
// a model sees the same inputs on the GPU as on the CPU.
struct Normalize {
  std::vector<double> mean;
  std::vector<double> std;
  torch::Tensor operator()(const torch::Tensor& x) const;
  torch::Tensor normalize_bytes(const torch::Tensor& x) const;   // uint8 on the CPU
  torch::Tensor normalize_tensor(const torch::Tensor& x) const;  // any dtype and device
  static Normalize imagenet() { return {{0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}}; }
  // Per-channel statistics of max_items items spread evenly over the dataset (uint8 read
  // as x/255), the std 1e-7 more as fastai's Normalize.setups.
  static Normalize from_data(const Dataset& dataset, size_t max_items = 2048);
};

// Text forms of the transforms above, which an exported model carries:
// "IntToFloat", "Normalize 0.485,0.456,0.406 0.229,0.224,0.225". Empty for any other
// function.
std::string batch_transform_spec(const BatchTransform& tfm);
// The transform a text form describes; a fastcpp::Error for one it does not know.
BatchTransform batch_transform_from_spec(const std::string& spec);

}  // namespace fastcpp
