#include "learner/recorder.h"

#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <optional>

#include "learner/learner.h"
#include "learner/plot.h"

namespace fastcpp {
namespace {

std::string format_value(double value) {
  if (std::isnan(value)) return "";
  char text[32];
  std::snprintf(text, sizeof text, "%.6f", value);
  return text;
}

// A batch's loss as a float scalar. The Learner's is one already, detached: used as it
// is, no operator per batch (on a small model each costs about as much as its kernels).
torch::Tensor scalar_loss(const torch::Tensor& loss) {
  if (loss.dim() == 0 && loss.scalar_type() == torch::kFloat && !loss.requires_grad()) return loss;
  return loss.detach().mean().to(torch::kFloat);
}

// A running average over `count` batches without its bias towards 0 (fastai's smoothing).
double debiased(double smooth, int64_t count, double beta) {
  return smooth / (1 - std::pow(beta, static_cast<double>(count)));
}

// Batch losses [n] (float, on the host) folded into the running average, as fastai's lerp:
// beta of the average, 1 - beta of the loss. `each` sees the debiased value after each.
template <class Each>
void fold(const torch::Tensor& batch_losses, double beta, double& smooth, int64_t& count, Each&& each) {
  const float* loss = batch_losses.const_data_ptr<float>();
  for (int64_t i = 0; i < batch_losses.numel(); ++i) {
    smooth = beta * smooth + (1 - beta) * loss[i];
    each(debiased(smooth, ++count, beta));
  }
}

}  // namespace

std::string format_time(double seconds) {
  const auto total = static_cast<long>(std::lround(seconds));
  char text[32];
  if (total >= 3600)
    std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", total / 3600, total / 60 % 60, total % 60);
  else
    std::snprintf(text, sizeof text, "%02ld:%02ld", total / 60, total % 60);
  return text;
}

std::vector<std::string> Recorder::metric_names() const {
  std::vector<std::string> names{"epoch", "train_loss", "valid_loss"};
  for (const auto& metric : learn().metrics) names.push_back(metric->name());
  for (const auto& column : columns_) names.push_back(column.name);
  names.push_back("time");
  return names;
}

void Recorder::add_column(const Callback& owner, const std::string& name, std::function<double()> value) {
  for (auto& column : columns_)
    if (column.name == name) {
      column = {name, &owner, std::move(value)};
      return;
    }
  columns_.push_back({name, &owner, std::move(value)});
}

std::map<std::string, double> Recorder::smoothing_state() {
  flush_losses();
  return {{"smooth", smooth_}, {"smooth_count", static_cast<double>(smooth_count_)}};
}

void Recorder::load_smoothing_state(const std::map<std::string, double>& state) {
  if (const auto smooth = state.find("smooth"); smooth != state.end()) smooth_ = smooth->second;
  if (const auto count = state.find("smooth_count"); count != state.end())
    smooth_count_ = static_cast<int64_t>(count->second);
  lagged_.reset();
}

void Recorder::remove_columns_of(const Callback& owner) {
  std::erase_if(columns_, [&](const Column& column) { return column.owner == &owner; });
}

void Recorder::before_fit() {
  lrs.clear();
  moms.clear();
  losses.clear();
  iters.clear();
  values.clear();
  log.clear();
  smooth_ = 0;
  smooth_count_ = 0;
  lagged_.reset();
  pending_losses_.clear();
}

void Recorder::before_epoch() {
  cancel_train_ = cancel_valid_ = false;
  valid_values_.clear();
  epoch_start_ = std::chrono::steady_clock::now();
}

void Recorder::after_batch() {
  auto& l = learn();
  if (!l.loss.defined()) return;
  if (l.training) {
    pending_losses_.push_back(scalar_loss(l.loss));  // averaged when read: no operator a batch
    const auto& hypers = l.opt->param_groups().back().hypers;
    lrs.push_back(hypers.lr);
    moms.push_back(hypers.mom);
    return;
  }
  const int64_t bs = l.yb.defined() ? l.yb.size(0) : l.xb.size(0);
  const auto batch_loss = scalar_loss(l.loss);
  if (!valid_loss_sum_.defined()) valid_loss_sum_ = torch::zeros({}, batch_loss.options().dtype(torch::kDouble));
  valid_loss_sum_.add_(batch_loss, static_cast<double>(bs));  // summed in double
  valid_count_ += bs;
  for (const auto& metric : l.metrics) metric->accumulate(l);
}

void Recorder::flush_losses() {
  if (pending_losses_.empty()) return;
  fold(torch::stack(pending_losses_).cpu(), beta_, smooth_, smooth_count_,
       [this](double value) { losses.push_back(value); });
  pending_losses_.clear();
  lagged_.reset();  // its copies index the losses just cleared
}

void Recorder::after_train() { flush_losses(); }

struct Recorder::LaggedRead {
  size_t copied = 0;  // pending_losses_[0, copied) are folded, or in `host` on their way
  torch::Tensor host;  // pinned
  std::optional<c10::Event> arrived;
  double smooth = 0;  // the running average through the losses folded, and its count
  int64_t count = 0;
  double value = std::nan("");
};

double Recorder::smooth_loss_lagged() {
  if (pending_losses_.empty() || !pending_losses_.front().is_cuda()) return smooth_loss();
  if (!lagged_)
    lagged_ = std::make_shared<LaggedRead>(LaggedRead{
        .smooth = smooth_,
        .count = smooth_count_,
        .value = smooth_count_ == 0 ? std::nan("") : debiased(smooth_, smooth_count_, beta_)});
  auto& read = *lagged_;
  if (read.arrived) {
    if (!read.arrived->query()) return read.value;  // the last copy is still on its way
    fold(read.host, beta_, read.smooth, read.count, [&read](double value) { read.value = value; });
    read.arrived.reset();
  }
  if (read.copied == pending_losses_.size()) return read.value;
  // Only the losses since the last copy: an epoch of many batches is not stacked at every draw.
  const auto fresh = torch::stack(c10::ArrayRef<torch::Tensor>(pending_losses_).slice(read.copied));
  read.copied = pending_losses_.size();
  read.host = torch::empty(fresh.sizes(), fresh.options().device(torch::kCPU).pinned_memory(true));
  read.host.copy_(fresh, /*non_blocking=*/true);
  read.arrived.emplace(fresh.device().type());
  read.arrived->record(c10::impl::getDeviceGuardImpl(fresh.device().type())->getStream(fresh.device()));
  return read.value;
}

double Recorder::smooth_loss() {
  flush_losses();
  return smooth_count_ == 0 ? std::nan("") : debiased(smooth_, smooth_count_, beta_);
}

void Recorder::before_validate() {
  cancel_valid_ = false;  // also for a validate() of its own after a fit that cancelled one
  valid_loss_sum_ = torch::Tensor();
  valid_count_ = 0;
  for (const auto& metric : learn().metrics) metric->reset();
}

void Recorder::after_validate() {
  valid_values_.clear();
  const double nan = std::nan("");
  valid_values_.push_back(cancel_valid_ || valid_count_ == 0 ? nan
                                                             : valid_loss_sum_.item<double>() / valid_count_);
  for (const auto& metric : learn().metrics) valid_values_.push_back(cancel_valid_ ? nan : metric->value());
}

void Recorder::after_epoch() {
  flush_losses();
  auto& l = learn();
  std::vector<double> row{cancel_train_ ? std::nan("") : smooth_loss()};
  const auto n_valid = 1 + l.metrics.size();
  for (size_t i = 0; i < n_valid; ++i) row.push_back(i < valid_values_.size() ? valid_values_[i] : std::nan(""));
  log = {std::to_string(l.epoch)};
  for (double value : row) log.push_back(format_value(value));
  for (const auto& column : columns_) {
    row.push_back(column.value());
    log.push_back(std::isnan(row.back()) ? "n/a" : format_value(row.back()));
  }
  values.push_back(row);
  iters.push_back(losses.size());
  log.push_back(format_time(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start_).count()));
}

void Recorder::after_fit() { flush_losses(); }

void Recorder::plot_loss(const std::string& path, size_t skip_start, bool with_valid) const {
  PlotSeries train{{}, {}, kPlotBlue};
  for (size_t i = skip_start; i < losses.size(); ++i) {
    train.x.push_back(static_cast<double>(i));
    train.y.push_back(losses[i]);
  }
  std::vector<PlotSeries> series{train};
  if (with_valid) {
    PlotSeries valid{{}, {}, kPlotOrange};
    for (size_t e = 0; e < values.size() && e < iters.size(); ++e)
      if (iters[e] > skip_start && values[e].size() > 1 && !std::isnan(values[e][1])) {
        valid.x.push_back(static_cast<double>(iters[e] - 1));
        valid.y.push_back(values[e][1]);
      }
    series.push_back(valid);
  }
  write_line_plot(path, series, {});
}

void Recorder::plot_lr_find(const std::string& path, size_t skip_end) const {
  PlotSeries series{{}, {}, kPlotBlue};
  const size_t n = std::min(lrs.size(), losses.size());
  for (size_t i = 0; i + skip_end < n; ++i) {
    series.x.push_back(lrs[i]);
    series.y.push_back(losses[i]);
  }
  write_line_plot(path, {series}, {.log_x = true});
}

}  // namespace fastcpp
