#pragma once
// Model: any torch::nn::Module with forward(Tensor) -> Tensor, type-erased once so the
// Learner needs no base class from the user. Wrappers (data parallel, distributed
// hooks) replace the forward function and keep the module.
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>

#include <functional>
#include <memory>
#include <string>
#include <type_traits>

#include "core/sequential.h"

namespace fastcpp {

class Model {
 public:
  using Forward = std::function<torch::Tensor(const torch::Tensor&)>;

  // From a module holder (torch::nn::Sequential, or a TORCH_MODULE of the user's).
  template <class Holder, class = decltype(std::declval<Holder&>().ptr()->forward(std::declval<torch::Tensor>()))>
  Model(Holder holder)  // NOLINT: implicit, so Learner(dls, my_net, ...) reads naturally
      : Model(holder.ptr()) {}

  // From a shared pointer to a module.
  template <class Impl, class = decltype(std::declval<Impl&>().forward(std::declval<torch::Tensor>()))>
  Model(std::shared_ptr<Impl> impl)  // NOLINT
      : module_(impl),
        forward_([impl](const torch::Tensor& x) { return impl->forward(x); }),
        replicate_([](const torch::nn::Module& module, const torch::Device& device) {
          if constexpr (std::is_same_v<Impl, torch::nn::SequentialImpl>) {
            auto copy = std::make_shared<torch::nn::SequentialImpl>();
            clone_layers_into(*copy, static_cast<const torch::nn::SequentialImpl&>(module), device);
            return Model(copy);
          } else {
            return Model(std::dynamic_pointer_cast<Impl>(module.clone(device)));
          }
        }) {}

  Model(std::shared_ptr<torch::nn::Module> module, Forward forward)
      : module_(std::move(module)), forward_(std::move(forward)) {}

  torch::Tensor operator()(const torch::Tensor& x) const { return forward_(x); }

  torch::nn::Module& module() const { return *module_; }
  const std::shared_ptr<torch::nn::Module>& ptr() const { return module_; }
  void set_forward(Forward forward) { forward_ = std::move(forward); }

  // A deep copy on `device` with the same forward (to_parallel's replicas). Needs a
  // module that can clone itself (torch::nn::Cloneable, as Sequential and libtorch's
  // layers are); otherwise a fastcpp::Error names the module.
  Model replicate(const torch::Device& device) const;

 private:
  using Replicate = std::function<Model(const torch::nn::Module&, const torch::Device&)>;
  std::shared_ptr<torch::nn::Module> module_;
  Forward forward_;
  Replicate replicate_;  // empty when built from a module and a forward function
};

}  // namespace fastcpp
