#pragma once
// The layers of a torch::nn::Sequential with their names. A Sequential keeps its layers
// twice, as named modules and as type-erased AnyModules (what forward and push_back
// use), in the same order; code that rebuilds, splits or walks a Sequential needs both.
#include <torch/nn/modules/container/sequential.h>

#include <memory>
#include <optional>
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

// Deep copies of seq's layers (on `device` if given) pushed into `copy` under their own
// names (libtorch's Sequential::clone numbers them "0", "1", ... instead).
inline void clone_layers_into(torch::nn::SequentialImpl& copy, const torch::nn::SequentialImpl& seq,
                              const std::optional<torch::Device>& device) {
  for (const auto& layer : named_layers(seq)) copy.push_back(layer.name, layer.any.clone(device));
}

}  // namespace fastcpp
