#pragma once
// Lrs: the learning rate argument of fit and friends. A single value applies to
// every parameter group; a slice spreads values over the groups as fastai does:
//   slice(stop)         -> stop/10 for every group but the last, stop for the last
//   slice(start, stop)  -> geometric progression from start to stop (start 0: as slice(stop))
//   {1e-5, 1e-4, 1e-3}  -> one value per group (one value: every group's), as fastai's list
#include <initializer_list>
#include <optional>
#include <utility>
#include <vector>

namespace fastcpp {

class Lrs {
 public:
  Lrs() = default;  // "not given": the learner's default lr
  Lrs(double lr) : stop_(lr) {}  // NOLINT: implicit on purpose, fit(1, 1e-3)
  Lrs(std::initializer_list<double> per_group)  // NOLINT: implicit, fit(1, {1e-4, 1e-3})
      : per_group_(std::vector<double>(per_group)) {}
  Lrs(std::vector<double> per_group) : per_group_(std::move(per_group)) {}  // NOLINT: so is a vector

  static Lrs slice(double stop) { return Lrs(std::nullopt, stop, true); }
  static Lrs slice(double start, double stop) { return Lrs(start, stop, true); }

  bool given() const { return stop_.has_value() || per_group_.has_value(); }
  // One lr per parameter group.
  std::vector<double> for_groups(size_t n_groups) const;

 private:
  Lrs(std::optional<double> start, double stop, bool is_slice) : start_(start), stop_(stop), slice_(is_slice) {}
  std::optional<double> start_;
  std::optional<double> stop_;
  bool slice_ = false;
  std::optional<std::vector<double>> per_group_;
};

inline Lrs slice(double stop) { return Lrs::slice(stop); }
inline Lrs slice(double start, double stop) { return Lrs::slice(start, stop); }

// n values from start to stop, evenly spaced on a log scale.
std::vector<double> even_mults(double start, double stop, size_t n);

}  // namespace fastcpp
