#include "core/graph_backward.h"

namespace fastcpp {

torch::autograd::variable_list gradients_with_graph(torch::autograd::AutogradContext* ctx,
                                                    const torch::autograd::variable_list& inputs,
                                                    const torch::Tensor& output, const torch::Tensor& dy) {
  torch::autograd::variable_list wanted, out(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (ctx->needs_input_grad(i) && inputs[i].defined() && inputs[i].requires_grad()) wanted.push_back(inputs[i]);
  if (wanted.empty()) return out;
  const auto grads = torch::autograd::grad({output}, wanted, {dy}, /*retain_graph=*/true, /*create_graph=*/true,
                                           /*allow_unused=*/true);
  for (size_t i = 0, next = 0; i < inputs.size(); ++i)
    if (ctx->needs_input_grad(i) && inputs[i].defined() && inputs[i].requires_grad()) out[i] = grads[next++];
  return out;
}

}  // namespace fastcpp
