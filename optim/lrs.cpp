#include "optim/lrs.h"

#include <cmath>

#include "core/error.h"
#include "core/spec_text.h"

namespace fastcpp {

std::vector<double> even_mults(double start, double stop, size_t n) {
  if (n == 1) return {stop};
  std::vector<double> values;
  const double step = std::pow(stop / start, 1.0 / static_cast<double>(n - 1));
  for (size_t i = 0; i < n; ++i) values.push_back(start * std::pow(step, static_cast<double>(i)));
  return values;
}

std::vector<double> Lrs::for_groups(size_t n_groups) const {
  if (per_group_) {
    if (per_group_->size() == 1) return std::vector<double>(n_groups, per_group_->front());
    if (per_group_->size() != n_groups)
      throw Error("Lrs: " + std::to_string(per_group_->size()) + " learning rates for " + std::to_string(n_groups) +
                  " parameter groups (one for each, or one for all)");
    return *per_group_;
  }
  if (!stop_) throw Error("Lrs: no learning rate given");
  if (!slice_) return std::vector<double>(n_groups, *stop_);
  if (start_ && *start_ < 0) throw Error("slice(start, stop): start must be >= 0, got " + spec_text::number(*start_));
  if (start_ && *start_ > 0) return even_mults(*start_, *stop_, n_groups);  // 0: as no start, as fastai
  std::vector<double> values(n_groups, *stop_ / 10);
  values.back() = *stop_;
  return values;
}

}  // namespace fastcpp
