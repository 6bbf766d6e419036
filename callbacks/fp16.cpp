#include "callbacks/fp16.h"

#include <torch/torch.h>

#include <sstream>
#include <utility>

#include "core/autocast.h"
#include "core/device.h"
#include "core/error.h"
#include "callbacks/lr_finder.h"
#include "learner/learner.h"

namespace fastcpp {

MixedPrecision::MixedPrecision(MixedPrecisionOptions options) : options_(options) {
  order = 10;
  capturable = true;
  if (options.dtype != torch::kHalf && options.dtype != torch::kBFloat16)
    throw Error(std::string("MixedPrecision: dtype must be Half or BFloat16, got ") + c10::toString(options.dtype));
}

void MixedPrecision::before_fit() {
  auto& l = learn();
  device_type_ = l.device.type();
  if (options_.dtype == torch::kHalf && !l.device.is_cuda())
    throw Error("fp16 training needs a CUDA device, and this learner runs on " + l.device.str() +
                ": use learn.to_bf16() on the CPU (or learn.to_fp32())");
  if (scaling() && !l.scaler) l.scaler = std::make_shared<GradScaler>(options_.scaler);
  if (l.scaler) {
    l.scaler->place_on(l.device);  // now, not by a blocking copy inside the first batch
    l.scaler->forget_step();
  }
  skipped_in_row_ = 0;
  diverged_.clear();
  finding_lr_ = l.get_cb<LRFinder>() != nullptr;
}

void MixedPrecision::autocast(bool enabled) { set_autocast(device_type_, enabled, options_.dtype); }

void MixedPrecision::before_batch() {
  // The last batch's loss was nan/inf and no callback stopped the fit at its end.
  if (!diverged_.empty()) throw Error(std::exchange(diverged_, ""));
  autocast(true);
}

void MixedPrecision::after_pred() {
  auto& pred = learn().pred;
  if (pred.is_floating_point() && pred.scalar_type() != torch::kFloat) pred = pred.to(torch::kFloat);
}

void MixedPrecision::after_loss() { autocast(false); }

void MixedPrecision::before_backward() {
  auto& l = learn();
  if (scaling()) l.loss_grad = l.scaler->scale(l.loss_grad);
}

std::string MixedPrecision::scale_history() const {
  const auto history = learn().scaler->history();
  std::ostringstream text;
  text << "loss scale " << learn().scaler->get_scale() << "; last updates:";
  const size_t first = history.size() > 12 ? history.size() - 12 : 0;
  for (size_t i = first; i < history.size(); ++i) text << " " << history[i];
  return text.str();
}

void MixedPrecision::before_step() {
  auto& l = learn();
  if (!scaling()) return;
  if (recording_cuda_graph(l.device)) {  // each replay skips on the device, without a host read
    l.opt->skip_next_step_if(l.scaler->unscale_on_device(*l.opt));
    return;
  }
  if (!l.scaler->unscale_(*l.opt)) {
    skipped_in_row_ = 0;
    return;
  }
  ++skipped_in_row_;
  // A loss that is itself nan/inf: the step is skipped, and the fit stops at the next batch unless
  // a callback ends it first (TerminateOnNaN) or lr_find runs, which goes on past it as without
  // loss scaling (fastai's: it stops there only with stop_div) and then restores the weights.
  if (!torch::isfinite(l.loss).all().item<bool>()) {
    if (!finding_lr_)
      diverged_ = "fp16: the loss is nan/inf at " + l.position() +
                ": the model diverged (this is not a loss-scale overflow); " + scale_history();
  } else if (skipped_in_row_ >= options_.max_skipped_in_row)
    throw Error("fp16: gradients overflowed " + std::to_string(skipped_in_row_) + " steps in a row, up to " +
                l.position() + "; " + scale_history());
  throw CancelStepException();
}

void MixedPrecision::after_step() {
  auto& l = learn();
  // Not after a step another callback cancelled before this one unscaled it.
  if (scaling() && l.scaler->unscaled()) l.scaler->update();
}

namespace {

// NHWC strides even where the layout is ambiguous: contiguous(ChannelsLast) keeps a
// one-channel tensor (a grey image batch, a stem conv's weight) in NCHW strides, as
// both layouts describe it, and the kernels then pick NCHW from those strides for
// the stem and everything fed from it. to() copies whenever the suggested layout differs.
torch::Tensor channels_last(const torch::Tensor& t) {
  return t.to(t.options(), /*non_blocking=*/false, /*copy=*/false, torch::MemoryFormat::ChannelsLast);
}

}  // namespace

void ChannelsLast::before_fit() {
  torch::NoGradGuard no_grad;
  for (auto& param : learn().model.module().parameters())
    if (param.dim() == 4) param.set_data(channels_last(param));
}

void ChannelsLast::before_batch() {
  auto& xb = learn().xb;
  if (xb.dim() == 4) xb = channels_last(xb);
}

// ---- the Learner's one-line conversions

void Learner::to_fp16(GradScalerOptions options) {
  // A scaler there already (a checkpoint's, loaded before this call, or an earlier fit's)
  // goes on from its scale; the options make one where there is none.
  auto kept = scaler;
  to_fp32();
  scaler = std::move(kept);
  add_cb(std::make_shared<MixedPrecision>(MixedPrecisionOptions{torch::kHalf, options}));
}

void Learner::to_bf16() {
  to_fp32();
  add_cb(std::make_shared<MixedPrecision>(MixedPrecisionOptions{torch::kBFloat16}));
}

void Learner::to_fp32() {
  while (auto cb = get_cb<MixedPrecision>()) remove_cb(cb);
  scaler.reset();
}

void Learner::to_channels_last() {
  if (!get_cb<ChannelsLast>()) add_cb(std::make_shared<ChannelsLast>());
}

}  // namespace fastcpp
