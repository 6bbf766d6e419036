#pragma once
// fastai's optimizers, and the factories a Learner takes as opt_func: SGD, Adam,
// RAdam, QHAdam, LARC/LARS, LAMB, and Lookahead around any of them (ranger = RAdam +
// Lookahead). Each equals fastai's step for step (tests/test_fastai.cpp).
//
// Weight decay is fastai's decoupled p *= 1 - lr*wd before each update below, or with
// decouple_wd false L2 regularization, grad += wd*p (Optimizer::set_decouple_wd).
// SGD:  made with mom == 0: p -= lr*g (a scheduled mom is
//       ignored, as fastai's sgd_step); otherwise grad_avg = mom*grad_avg + g; p -= lr*grad_avg.
// Adam: (decoupled decay: AdamW; L2: torch.optim.Adam's weight_decay)
//       grad_avg = mom*grad_avg + (1-mom)*g;  sqr_avg = sqr_mom*sqr_avg + (1-sqr_mom)*g^2;
//       p -= lr/(1-mom^t) * grad_avg / (sqrt(sqr_avg)/sqrt(1-sqr_mom^t) + eps)
//       (bias correction with the current mom, as fastai; equals torch.optim.AdamW).
// RAdam: Adam's averages; once the variance's length r > 5, Adam's step scaled by
//       the rectification sqrt((r-4)(r-2)r_inf / ((r_inf-4)(r_inf-2)r)), before it
//       a momentum step lr/(1-mom^t) * grad_avg. (beta > 0: softplus of the denominator, SAdam.)
// QHAdam: p -= lr * ((1-nu_1) g + nu_1 m^) / (sqrt((1-nu_2) g^2 + nu_2 v^) + eps).
// LARC:  SGD whose lr is, per parameter tensor, lr*trust*|p| / (|g| + wd|p| + eps),
//       at most lr (clip; without the clip: LARS).
// LAMB:  Adam's debiased step u scaled by the trust ratio min(rms(p)/rms(u), 10).
// Lookahead: every k steps of the inner optimizer, slow += alpha*(p - slow); p = slow
//       (k counts each parameter's own steps: fastai counts the optimizer's, the same
//       when every parameter has a gradient at every step).
#include <memory>

#include "optim/optimizer.h"

namespace fastcpp {

class SGD : public Optimizer {
 public:
  // momentum: averages the gradients; decided once, as fastai (from the factory's mom != 0).
  SGD(std::vector<ParamGroup> groups, bool momentum) : Optimizer(std::move(groups)), momentum_(momentum) {}

 protected:
  void update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state, const Hypers& hypers,
              bool do_wd) override;
  bool update_group(GroupTensors& group, const Hypers& hypers) override;
  std::vector<const char*> device_buffers() const override { return {"grad_avg"}; }
  void update_on_device(GroupTensors& group, DeviceHypers& hypers, const torch::Tensor& found_inf) override;

 private:
  bool momentum_;
};

class Adam : public Optimizer {
 public:
  using Optimizer::Optimizer;

 protected:
  void update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state, const Hypers& hypers,
              bool do_wd) override;
  bool update_group(GroupTensors& group, const Hypers& hypers) override;
  std::vector<const char*> device_buffers() const override { return {"grad_avg", "sqr_avg"}; }
  void update_on_device(GroupTensors& group, DeviceHypers& hypers, const torch::Tensor& found_inf) override;
};

class RAdam : public Optimizer {
 public:
  RAdam(std::vector<ParamGroup> groups, double beta = 0) : Optimizer(std::move(groups)), beta_(beta) {}

 protected:
  void update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state, const Hypers& hypers,
              bool do_wd) override;

 private:
  double beta_;
};

class QHAdam : public Optimizer {
 public:
  QHAdam(std::vector<ParamGroup> groups, double nu_1, double nu_2)
      : Optimizer(std::move(groups)), nu_1_(nu_1), nu_2_(nu_2) {}

 protected:
  void update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state, const Hypers& hypers,
              bool do_wd) override;

 private:
  double nu_1_, nu_2_;
};

class Larc : public Optimizer {
 public:
  Larc(std::vector<ParamGroup> groups, double trust_coeff, bool clip, bool momentum)
      : Optimizer(std::move(groups)), trust_coeff_(trust_coeff), clip_(clip), momentum_(momentum) {}

 protected:
  void update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state, const Hypers& hypers,
              bool do_wd) override;

 private:
  double trust_coeff_;
  bool clip_;
  bool momentum_;  // as SGD's
};

class Lamb : public Optimizer {
 public:
  using Optimizer::Optimizer;

 protected:
  void update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state, const Hypers& hypers,
              bool do_wd) override;
};

class Lookahead : public Optimizer {
 public:
  // Takes over `inner`'s groups (with the hyper-parameters its factory set).
  Lookahead(std::unique_ptr<Optimizer> inner, int k, double alpha);
  std::string name() const override { return "Lookahead<" + inner_->name() + ">"; }

 protected:
  void update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state, const Hypers& hypers,
              bool do_wd) override;

 private:
  std::unique_ptr<Optimizer> inner_;
  int k_;
  double alpha_;
};

struct SGDOptions {
  double mom = 0.0;
  double wd = 0.0;
  bool decouple_wd = true;  // false: L2 regularization (Optimizer::set_decouple_wd)
};

struct AdamOptions {
  double mom = 0.9;
  double sqr_mom = 0.99;
  double eps = 1e-5;
  double wd = 0.01;
  bool decouple_wd = true;  // false: L2 regularization (Optimizer::set_decouple_wd)
};

struct RAdamOptions {
  double mom = 0.9;
  double sqr_mom = 0.99;
  double eps = 1e-5;
  double wd = 0.0;
  double beta = 0.0;  // > 0: SAdam
  bool decouple_wd = true;  // false: L2 regularization (Optimizer::set_decouple_wd)
};
struct QHAdamOptions {
  double mom = 0.999;
  double sqr_mom = 0.999;
  double nu_1 = 0.7;
  double nu_2 = 1.0;
  double eps = 1e-8;
  double wd = 0.0;
  bool decouple_wd = true;  // false: L2 regularization (Optimizer::set_decouple_wd)
};
struct LarcOptions {  // larc and lars alike
  double mom = 0.9;
  double trust_coeff = 0.02;
  double eps = 1e-8;
  double wd = 0.0;
  bool decouple_wd = true;  // false: L2 regularization (Optimizer::set_decouple_wd)
};
struct LambOptions {
  double mom = 0.9;
  double sqr_mom = 0.99;
  double eps = 1e-5;
  double wd = 0.0;
  bool decouple_wd = true;  // false: L2 regularization (Optimizer::set_decouple_wd)
};
struct LookaheadOptions {
  int k = 6;
  double alpha = 0.5;
};
struct RangerOptions {
  double mom = 0.95;
  double sqr_mom = 0.99;
  double eps = 1e-6;
  double wd = 0.01;
  int k = 6;
  double alpha = 0.5;
  bool decouple_wd = true;
};

OptFunc sgd(SGDOptions options = {});
OptFunc adam(AdamOptions options = {});
OptFunc radam(RAdamOptions options = {});
OptFunc qhadam(QHAdamOptions options = {});
OptFunc larc(LarcOptions options = {});
OptFunc lars(LarcOptions options = {});  // LARC without the clip
OptFunc lamb(LambOptions options = {});
OptFunc lookahead(OptFunc inner, LookaheadOptions options = {});
OptFunc ranger(RangerOptions options = {});

}  // namespace fastcpp
