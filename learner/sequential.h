#pragma once
// The layers of a torch::nn::Sequential with their names. A Sequential keeps its layers
// twice, as named modules and as type-erased AnyModules (what forward and push_back
// use), in the same order; code that rebuilds, splits or walks a Sequential needs both.
#include <torch/nn/modules/container/sequential.h>

#include <memory>
#include <string>
#include <vector>

namespace fastcpp {

struct NamedLayer {
  std::string name;
  std::shared_ptr<torch::nn::Module> module;
  torch::nn::AnyModule any;  // for forward, or to push it into another Sequential
};

inline std::vector<NamedLayer> named_layers(const torch::nn::SequentialImpl& seq) {
  std::vector<NamedLayer> layers;
  auto any = seq.begin();
  for (const auto& child : seq.named_children()) layers.push_back({child.key(), child.value(), *any++});
  return layers;
}

}  // namespace fastcpp
