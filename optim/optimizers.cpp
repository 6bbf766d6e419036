#include "optim/optimizers.h"

#include <torch/torch.h>

#include <cmath>

#include "core/error.h"
#include "optim/device_step.h"
#include "optim/fused_updates.h"

namespace fastcpp {
namespace {

void decay_weights(torch::Tensor& param, const Hypers& hypers, bool do_wd) {
  if (do_wd && hypers.wd != 0) param.mul_(1 - hypers.lr * hypers.wd);
}

// fastai's average_grad (dampened: Adam's 1 - mom) and average_sqr_grad.
torch::Tensor& average_grad(ParamState& state, const torch::Tensor& grad, double mom, bool dampened) {
  return state_buffer(state, "grad_avg", grad).mul_(mom).add_(grad, dampened ? 1 - mom : 1.0);
}

torch::Tensor& average_sqr_grad(ParamState& state, const torch::Tensor& grad, double sqr_mom) {
  return state_buffer(state, "sqr_avg", grad).mul_(sqr_mom).addcmul_(grad, grad, 1 - sqr_mom);
}

// Adam's two averages and its step count, one step on.
struct Moments {
  const torch::Tensor& grad_avg;
  const torch::Tensor& sqr_avg;
  double step;
};
Moments adam_moments(ParamState& state, const torch::Tensor& grad, const Hypers& hypers) {
  const auto& grad_avg = average_grad(state, grad, hypers.mom, true);
  const auto& sqr_avg = average_sqr_grad(state, grad, hypers.sqr_mom);  // map entries keep their address
  return {grad_avg, sqr_avg, static_cast<double>(++state.step)};
}

// sqrt(v / (1 - sqr_mom^t)) + eps, Adam's denominator.
torch::Tensor adam_denominator(const torch::Tensor& sqr_avg, const Hypers& hypers, double step) {
  return sqr_avg.div(1 - std::pow(hypers.sqr_mom, step)).sqrt_().add_(hypers.eps);
}

}  // namespace

void SGD::update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state, const Hypers& hypers,
                 bool do_wd) {
  decay_weights(param, hypers, do_wd);
  ++state.step;
  if (!momentum_) {
    param.add_(grad, -hypers.lr);
    return;
  }
  param.add_(average_grad(state, grad, hypers.mom, false), -hypers.lr);
}

bool SGD::update_group(GroupTensors& group, const Hypers& hypers) {
  // ATen's fused SGD takes no momentum buffers at mom 0 (a schedule may reach it): one by one then.
  if (!fusable(group) || (momentum_ && hypers.mom == 0)) return false;
  fused_sgd_update(group, hypers, momentum_);
  return true;
}

bool Adam::update_group(GroupTensors& group, const Hypers& hypers) {
  if (!fusable(group)) return false;
  fused_adam_update(group, hypers);
  return true;
}

void SGD::update_on_device(GroupTensors& group, DeviceHypers& hypers, const torch::Tensor& found_inf) {
  device_sgd_update(group, hypers, found_inf, momentum_);
}

void Adam::update_on_device(GroupTensors& group, DeviceHypers& hypers, const torch::Tensor& found_inf) {
  device_adam_update(group, hypers, found_inf);
}

void Adam::update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state, const Hypers& hypers,
                  bool do_wd) {
  decay_weights(param, hypers, do_wd);
  const auto [grad_avg, sqr_avg, step] = adam_moments(state, grad, hypers);
  param.addcdiv_(grad_avg, adam_denominator(sqr_avg, hypers, step), -hypers.lr / (1 - std::pow(hypers.mom, step)));
}

void RAdam::update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state, const Hypers& hypers,
                   bool do_wd) {
  decay_weights(param, hypers, do_wd);
  const auto [grad_avg, sqr_avg, step] = adam_moments(state, grad, hypers);
  const double debias1 = 1 - std::pow(hypers.mom, step);
  const double r_inf = 2 / (1 - hypers.sqr_mom) - 1;
  const double r = r_inf - 2 * step * std::pow(hypers.sqr_mom, step) / (1 - std::pow(hypers.sqr_mom, step));
  if (r <= 5) {
    param.add_(grad_avg, -hypers.lr / debias1);
    return;
  }
  const double v = std::sqrt((r - 4) * (r - 2) * r_inf / ((r_inf - 4) * (r_inf - 2) * r));
  auto denom = adam_denominator(sqr_avg, hypers, step);
  if (beta_ != 0) denom = torch::softplus(denom, beta_);
  param.addcdiv_(grad_avg, denom, -hypers.lr * v / debias1);
}

void QHAdam::update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state, const Hypers& hypers,
                    bool do_wd) {
  decay_weights(param, hypers, do_wd);
  const auto [grad_avg, sqr_avg, step] = adam_moments(state, grad, hypers);
  const double debias1 = 1 - std::pow(hypers.mom, step), debias2 = 1 - std::pow(hypers.sqr_mom, step);
  const auto numerator = grad * (1 - nu_1_) + grad_avg * (nu_1_ / debias1);
  const auto denom = (grad.square() * (1 - nu_2_) + sqr_avg * (nu_2_ / debias2)).sqrt_().add_(hypers.eps);
  param.addcdiv_(numerator, denom, -hypers.lr);
}

void Larc::update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state, const Hypers& hypers,
                  bool do_wd) {
  decay_weights(param, hypers, do_wd);
  ++state.step;
  const auto& direction = momentum_ ? average_grad(state, grad, hypers.mom, false) : grad;
  const auto p_norm = param.norm();
  auto local_lr = p_norm * (hypers.lr * trust_coeff_) / (grad.norm() + p_norm * hypers.wd + hypers.eps);
  if (clip_) local_lr = local_lr.clamp_max(hypers.lr);
  param.sub_(direction * local_lr);  // a tensor lr: no host sync
}

void Lamb::update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state, const Hypers& hypers,
                  bool do_wd) {
  decay_weights(param, hypers, do_wd);
  const auto [grad_avg, sqr_avg, step] = adam_moments(state, grad, hypers);
  const auto direction = grad_avg.div(1 - std::pow(hypers.mom, step)).div_(adam_denominator(sqr_avg, hypers, step));
  const auto r1 = param.square().mean().sqrt(), r2 = direction.square().mean().sqrt();
  const auto trust = torch::where(r1.eq(0).logical_or(r2.eq(0)), torch::ones_like(r1), (r1 / r2).clamp_max(10));
  param.sub_(direction * (trust * hypers.lr));
}

Lookahead::Lookahead(std::unique_ptr<Optimizer> inner, int k, double alpha)
    : Optimizer(inner ? inner->param_groups() : throw Error("Lookahead: no optimizer to wrap")),
      inner_(std::move(inner)), k_(k), alpha_(alpha) {
  set_decouple_wd(inner_->decouple_wd());  // the wrapper's step runs the inner update
  if (k_ < 1)
    throw Error("Lookahead: k must be >= 1 (steps between syncs of the slow weights), got " + std::to_string(k));
}

void Lookahead::update(torch::Tensor& param, const torch::Tensor& grad, ParamState& state, const Hypers& hypers,
                       bool do_wd) {
  auto& slow = state.buffers["slow_weights"];
  if (!slow.defined()) slow = param.clone();
  inner_->update(param, grad, state, hypers, do_wd);
  if (state.step % k_ != 0) return;
  slow.add_(param - slow, alpha_);
  param.copy_(slow);
}

namespace {

// Sets the hyper-parameters every optimizer shares on each group, then makes it.
template <class Make>
OptFunc with_hypers(double mom, double sqr_mom, double eps, double wd, bool decouple_wd, Make make) {
  return [=](std::vector<ParamGroup> groups) -> std::unique_ptr<Optimizer> {
    for (auto& group : groups) {
      group.hypers.mom = mom;
      group.hypers.sqr_mom = sqr_mom;
      group.hypers.eps = eps;
      group.hypers.wd = wd;
    }
    std::unique_ptr<Optimizer> made = make(std::move(groups));
    made->set_decouple_wd(decouple_wd);
    return made;
  };
}

}  // namespace

OptFunc sgd(SGDOptions o) {
  return with_hypers(o.mom, Hypers().sqr_mom, Hypers().eps, o.wd, o.decouple_wd,
                     [momentum = o.mom != 0](std::vector<ParamGroup> g) { return std::make_unique<SGD>(std::move(g), momentum); });
}

OptFunc adam(AdamOptions o) {
  return with_hypers(o.mom, o.sqr_mom, o.eps, o.wd, o.decouple_wd,
                     [](std::vector<ParamGroup> g) { return std::make_unique<Adam>(std::move(g)); });
}

OptFunc radam(RAdamOptions o) {
  return with_hypers(o.mom, o.sqr_mom, o.eps, o.wd, o.decouple_wd,
                     [beta = o.beta](std::vector<ParamGroup> g) { return std::make_unique<RAdam>(std::move(g), beta); });
}

OptFunc qhadam(QHAdamOptions o) {
  return with_hypers(o.mom, o.sqr_mom, o.eps, o.wd, o.decouple_wd, [o](std::vector<ParamGroup> g) {
    return std::make_unique<QHAdam>(std::move(g), o.nu_1, o.nu_2);
  });
}

OptFunc larc(LarcOptions o) {
  return with_hypers(o.mom, Hypers().sqr_mom, o.eps, o.wd, o.decouple_wd, [o](std::vector<ParamGroup> g) {
    return std::make_unique<Larc>(std::move(g), o.trust_coeff, /*clip=*/true, o.mom != 0);
  });
}

OptFunc lars(LarcOptions o) {
  return with_hypers(o.mom, Hypers().sqr_mom, o.eps, o.wd, o.decouple_wd, [o](std::vector<ParamGroup> g) {
    return std::make_unique<Larc>(std::move(g), o.trust_coeff, /*clip=*/false, o.mom != 0);
  });
}

OptFunc lamb(LambOptions o) {
  return with_hypers(o.mom, o.sqr_mom, o.eps, o.wd, o.decouple_wd,
                     [](std::vector<ParamGroup> g) { return std::make_unique<Lamb>(std::move(g)); });
}

OptFunc lookahead(OptFunc inner, LookaheadOptions o) {
  return [inner = std::move(inner), o](std::vector<ParamGroup> groups) -> std::unique_ptr<Optimizer> {
    return std::make_unique<Lookahead>(inner(std::move(groups)), o.k, o.alpha);
  };
}

OptFunc ranger(RangerOptions o) {
  return lookahead(radam({.mom = o.mom, .sqr_mom = o.sqr_mom, .eps = o.eps, .wd = o.wd, .decouple_wd = o.decouple_wd}),
                   {.k = o.k, .alpha = o.alpha});
}

}  // namespace fastcpp
