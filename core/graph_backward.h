#pragma once
// The CPU kernels' own autograd functions write their gradients through raw pointers:
// such gradients have no graph. Where a backward pass records one (create_graph: a second
// derivative, as a gradient penalty takes; GradMode is on inside backward then), they
// take their gradients through ATen's differentiable operators instead:
//
//   if (torch::GradMode::is_enabled())
//     return gradients_with_graph(ctx, {x, weight}, torch::conv2d(x, weight), grads[0]);
#include <torch/autograd.h>

namespace fastcpp {

// The gradients of `output` (recomputed from `inputs`, the function's inputs in its
// apply order, by differentiable operators) against `dy`, with a graph: at the inputs the
// context needs a gradient for, undefined at the others; one entry per input.
torch::autograd::variable_list gradients_with_graph(torch::autograd::AutogradContext* ctx,
                                                    const torch::autograd::variable_list& inputs,
                                                    const torch::Tensor& output, const torch::Tensor& dy);

}  // namespace fastcpp
