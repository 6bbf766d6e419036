#pragma once
// fastai's SGD and Adam, and the factories a Learner takes as opt_func.
//
// SGD:  p *= 1 - lr*wd (decoupled);  mom == 0: p -= lr*g;
//       otherwise grad_avg = mom*grad_avg + g; p -= lr*grad_avg.
// Adam: p *= 1 - lr*wd (decoupled, i.e. AdamW);
//       grad_avg = mom*grad_avg + (1-mom)*g;  sqr_avg = sqr_mom*sqr_avg + (1-sqr_mom)*g^2;
//       p -= lr/(1-mom^t) * grad_avg / (sqrt(sqr_avg)/sqrt(1-sqr_mom^t) + eps)
//       (bias correction with the current mom, as fastai; equals torch.optim.AdamW).
#include "learner/optimizer.h"

namespace fastcpp {

class SGD : public Optimizer {
 public:
  using Optimizer::Optimizer;

 protected:
  void update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state, const Hypers& hypers,
              bool do_wd) override;
};

class Adam : public Optimizer {
 public:
  using Optimizer::Optimizer;

 protected:
  void update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state, const Hypers& hypers,
              bool do_wd) override;
};

struct SGDOptions {
  double mom = 0.0;
  double wd = 0.0;
};

struct AdamOptions {
  double mom = 0.9;
  double sqr_mom = 0.99;
  double eps = 1e-5;
  double wd = 0.01;
};

OptFunc sgd(SGDOptions options = {});
OptFunc adam(AdamOptions options = {});

}  // namespace fastcpp
