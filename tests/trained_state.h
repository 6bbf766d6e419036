#pragma once
// What the "replicas train as one device" tests compare: a trained Learner's every weight
// and buffer by name, and its validation loss.
#include <ATen/Context.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "learner/learner.h"
#include <doctest/doctest.h>

namespace fastcpp::testing {

struct TrainedState {
  std::vector<std::string> names;
  std::vector<torch::Tensor> tensors;  // on the CPU
  double valid_loss = 0;
};

inline TrainedState trained_state_of(Learner& learn) {
  TrainedState trained;
  for (const auto& [name, tensor] : named_state(learn.model.module())) {
    trained.names.push_back(name);
    trained.tensors.push_back(tensor.detach().cpu().clone());
  }
  trained.valid_loss = learn.validate()[0];
  return trained;
}

// A BatchNorm running statistic carries the differences of every layer below it: ten
// times the weights' tolerance.
inline double running_tolerance(const std::string& name, double tolerance) {
  return name.find("running_") != std::string::npos ? 10 * tolerance : tolerance;
}

// Every weight and buffer of `parallel` as `single`'s, relatively and absolutely within
// `tolerance`; the integer buffers (batches tracked: each global batch once) exactly; the
// validation loss within `tolerance` relatively.
inline void check_trained_alike(const TrainedState& parallel, const TrainedState& single, double tolerance) {
  REQUIRE(parallel.names == single.names);
  for (size_t i = 0; i < single.tensors.size(); ++i) {
    const auto &got = parallel.tensors[i], &expected = single.tensors[i];
    INFO(single.names[i] << ", largest difference " << (got - expected).abs().max().item<double>());
    if (expected.is_floating_point())
      CHECK(torch::allclose(got, expected, running_tolerance(single.names[i], tolerance), tolerance));
    else
      CHECK(torch::equal(got, expected));
  }
  CHECK(parallel.valid_loss == doctest::Approx(single.valid_loss).epsilon(tolerance));
}

// cuDNN's fp32 convolutions round their inputs to TF32 (10-bit mantissas) by default, so
// half a batch and the whole batch differ at 1e-3 whatever to_parallel does: the fp32
// comparisons of replicas with one GPU run in full fp32 while this lives.
class FullFp32Convolutions {
 public:
  FullFp32Convolutions() : was_(at::globalContext().allowTF32CuDNN()) { at::globalContext().setAllowTF32CuDNN(false); }
  ~FullFp32Convolutions() { at::globalContext().setAllowTF32CuDNN(was_); }
  FullFp32Convolutions(const FullFp32Convolutions&) = delete;
  FullFp32Convolutions& operator=(const FullFp32Convolutions&) = delete;

 private:
  bool was_;
};

}  // namespace fastcpp::testing
