#pragma once
// What the detection tests share: fixture entries, a tolerance check, and a set of squares.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <memory>
#include <string>

#include "data/dataset.h"
#include <doctest/doctest.h>

namespace fastcpp::testing {

inline torch::Tensor entry(const c10::impl::GenericDict& fixtures, const std::string& key) {
  return fixtures.at(c10::IValue(key)).toTensor();
}

inline bool close(const torch::Tensor& got, const torch::Tensor& expected, double tolerance = 1e-5) {
  REQUIRE(got.sizes() == expected.sizes());
  return torch::allclose(got, expected, tolerance, tolerance);
}

// n images 3 x size x size of faint noise, each with one square of 3/8 to 5/8 of the side
// (24-40 pixels at 64): red for class 0, green for class 1. Targets [n, 1, 5].
inline std::shared_ptr<TensorDataset> squares(int64_t n, uint64_t seed, int64_t size = 64) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto x = torch::rand({n, 3, size, size}, gen) * 0.1;
  auto y = torch::zeros({n, 1, 5});
  for (int64_t i = 0; i < n; ++i) {
    const auto side = torch::randint(size * 3 / 8, size * 5 / 8 + 1, {1}, gen).item<int64_t>();
    const auto left = torch::randint(0, size - side, {1}, gen).item<int64_t>();
    const auto top = torch::randint(0, size - side, {1}, gen).item<int64_t>();
    const auto label = i % 2;
    x[i][label].narrow(0, top, side).narrow(1, left, side).fill_(1.0);
    y[i][0] = torch::tensor({double(left), double(top), double(left + side), double(top + side), double(label)});
  }
  return std::make_shared<TensorDataset>(x, y);
}

}  // namespace fastcpp::testing
