#include "callbacks/lr_finder.h"

#include <cmath>
#include <limits>

#include "learner/checkpoint.h"
#include "core/error.h"
#include "core/spec_text.h"
#include "formats/torch_save.h"
#include "learner/learner.h"
#include "learner/recorder.h"

namespace fastcpp {

LRFinder::LRFinder(double start_lr, double end_lr, int num_it, bool stop_div)
    : ParamScheduler({{"lr", {SchedExp(start_lr, end_lr)}}}), num_it_(num_it), stop_div_(stop_div) {
  // An exponential schedule from start_lr up to end_lr, num_it steps: anything else gives NaN lrs.
  if (!(start_lr > 0 && end_lr > start_lr && std::isfinite(end_lr)))
    throw Error("LRFinder: need 0 < start_lr < end_lr, got start_lr " + spec_text::number(start_lr) + " and end_lr " +
                spec_text::number(end_lr));
  if (num_it < 1) throw Error("LRFinder: num_it must be positive, got " + std::to_string(num_it));
}

void LRFinder::before_fit() {
  ParamScheduler::before_fit();
  // Epochs enough for num_it batches, counted here: after to_distributed's sharding, which shortens them.
  auto& l = learn();
  l.n_epoch = num_it_ / static_cast<int>(std::max<size_t>(l.dls.train.size(), 1)) + 1;
  // Bytes, not the contents: those share the tensors training changes.
  saved_state_ = torch_save_bytes(checkpoint::contents(learn(), /*with_opt=*/true));
  best_loss_ = std::numeric_limits<double>::infinity();
}

void LRFinder::before_batch() { set_hypers(static_cast<double>(learn().train_iter) / num_it_); }

void LRFinder::after_batch() {
  ParamScheduler::after_batch();
  auto& l = learn();
  const double smooth = l.recorder->smooth_loss();
  if (smooth < best_loss_) best_loss_ = smooth;
  if (stop_div_ && (smooth > 4 * best_loss_ || std::isnan(smooth))) throw CancelFitException();
  if (l.train_iter >= num_it_) throw CancelFitException();
}

void LRFinder::before_validate() { throw CancelValidException(); }

void LRFinder::after_fit() {
  auto& l = learn();
  l.opt->zero_grad();
  if (!saved_state_.empty()) checkpoint::decode_into(l, saved_state_, /*with_opt=*/true, "lr_find's saved state");
  saved_state_.clear();
}

LrFindResult suggest_lrs(const std::vector<double>& all_lrs, const std::vector<double>& all_losses, int num_it) {
  LrFindResult result;
  result.lrs = all_lrs;
  result.losses = all_losses;
  const size_t n_all = std::min(all_lrs.size(), all_losses.size());
  const size_t first = static_cast<size_t>(num_it / 10);
  // fastai's: the record less its first num_it/10 and last 5 points, cut at its first NaN.
  // A NaN loss stops lr_find here, where fastai's runs on to num_it (NaN is never above 4x
  // the best): its record is then num_it long, and every point before the NaN counts.
  size_t first_nan = n_all;
  for (size_t i = 0; i < n_all && first_nan == n_all; ++i)
    if (std::isnan(all_losses[i])) first_nan = i;
  const size_t recorded = first_nan + 1 == n_all ? std::max<size_t>(n_all, static_cast<size_t>(num_it)) : n_all;
  const size_t last = std::min(recorded > 5 ? recorded - 5 : 0, first_nan);
  if (last <= first + 1 && first_nan < n_all && first_nan <= first + 1)
    throw Error("lr_find: the loss is NaN from training batch " + std::to_string(first_nan + 1) + " (lr " +
                spec_text::number(all_lrs[first_nan]) +
                "), too early to suggest a learning rate: lower start_lr, or find what makes the loss NaN");
  if (last <= first + 1)
    throw Error("lr_find: too few batches recorded (" + std::to_string(n_all) +
                ") to suggest a learning rate; use a larger dataset or num_it");
  const std::vector<double> lrs(all_lrs.begin() + first, all_lrs.begin() + last);
  const std::vector<double> losses(all_losses.begin() + first, all_losses.begin() + last);
  const size_t n = losses.size();

  size_t min_at = 0;
  for (size_t i = 1; i < n; ++i)
    if (losses[i] < losses[min_at]) min_at = i;
  result.minimum = lrs[min_at] / 10;

  size_t steep_at = 0;
  double steepest = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i + 1 < n; ++i) {
    const double slope = (losses[i + 1] - losses[i]) / (std::log(lrs[i + 1]) - std::log(lrs[i]));
    if (slope < steepest) steepest = slope, steep_at = i;
  }
  result.steep = lrs[steep_at];

  // The longest decreasing run of losses (a longest-decreasing-subsequence search),
  // then a point a little past its middle. As in fastai, the run's start is taken when
  // it first becomes the longest, inside the inner loop.
  std::vector<size_t> run(n, 1);
  size_t max_start = 0, max_end = 0;
  for (size_t i = 1; i < n; ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (losses[i] < losses[j] && run[i] < run[j] + 1) run[i] = run[j] + 1;
      if (run[max_end] < run[i]) {
        max_end = i;
        max_start = max_end - run[max_end];
      }
    }
  }
  const double sections = static_cast<double>(max_end - max_start) / 3;
  const size_t idx = max_start + static_cast<size_t>(sections) + static_cast<size_t>(sections / 2);
  result.valley = lrs[std::min(idx, n - 1)];

  // Slide: windows of 15 points moved left from the end until the slope (numpy's
  // gradient) at both ends differs by at most 0.005; the lr at the window's left end.
  constexpr size_t window = 15;
  constexpr double thresh = 0.005;
  std::vector<double> slope(n);
  for (size_t i = 0; i < n; ++i)
    slope[i] = i == 0 ? losses[1] - losses[0]
               : i + 1 == n ? losses[i] - losses[i - 1]
                            : (losses[i + 1] - losses[i - 1]) / 2;
  result.slide = std::nan("");  // a window needs more points (fastai's fails there)
  if (n > window) {
    size_t right = n - 1, left = right - window;
    result.slide = lrs[left];
    while (std::abs(slope[right] - slope[left]) > thresh) {
      result.slide = lrs[left];
      if (left == 0) break;
      --right, --left;
    }
  }
  return result;
}

}  // namespace fastcpp
