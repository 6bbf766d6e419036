#pragma once
// SGD's and Adam's update of a whole parameter group in a few launches of ATen's fused
// kernels (those torch.optim's fused=True runs), with fastai's semantics: decoupled
// weight decay on the params whose do_wd is set, bias-corrected Adam as AdamW. Per
// parameter, six or more small kernels would each cost a launch: on a GPU, a small
// model's step is then bound by the host; on the CPU each is a dispatch and a pass over
// memory (the Fashion-MNIST model's Adam step: 2.4-2.9 ms per-param, 0.6-0.8 ms fused on
// 2 cores). The optimizers take this path wherever fusable() holds.
#include "optim/optimizer.h"

namespace fastcpp {

// Whether the fused kernels take these tensors: one device, one floating dtype, dense
// gradients and state buffers laid out as their params, every param at the same step.
bool fusable(const GroupTensors& group);

void fused_sgd_update(GroupTensors& group, const Hypers& hypers, bool momentum);
void fused_adam_update(GroupTensors& group, const Hypers& hypers);

}  // namespace fastcpp
