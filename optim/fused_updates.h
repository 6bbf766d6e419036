#pragma once
// SGD's and Adam's update of a whole parameter group in a few launches of ATen's fused
// kernels (those torch.optim's fused=True runs), with fastai's semantics: decoupled
// weight decay on the params whose do_wd is set, bias-corrected Adam as AdamW. Per
// parameter, six or more small kernels would each cost a launch: on a GPU, a small
// model's step is then bound by the host. The optimizers take this path on CUDA; the
// kernels exist on the CPU too, where the tests compare it with the per-param update.
#include "optim/optimizer.h"

namespace fastcpp {

// Whether the fused kernels take these tensors: one device, one floating dtype, dense
// gradients and state buffers laid out as their params, every param at the same step.
bool fusable(const GroupTensors& group);

void fused_sgd_update(GroupTensors& group, const Hypers& hypers);
void fused_adam_update(GroupTensors& group, const Hypers& hypers);

}  // namespace fastcpp
