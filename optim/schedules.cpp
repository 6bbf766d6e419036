#include "optim/schedules.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace fastcpp {

double sched_lin(double start, double end, double pos) { return start + pos * (end - start); }
double sched_cos(double start, double end, double pos) {
  return start + (1 + std::cos(M_PI * (1 - pos))) * (end - start) / 2;
}
double sched_exp(double start, double end, double pos) { return start * std::pow(end / start, pos); }
double sched_no(double start, double /*end*/, double /*pos*/) { return start; }
double sched_poly(double start, double end, double pos, double power) {
  return start + (end - start) * std::pow(pos, power);
}

Schedule SchedLin(double start, double end) { return [=](double pos) { return sched_lin(start, end, pos); }; }
Schedule SchedCos(double start, double end) { return [=](double pos) { return sched_cos(start, end, pos); }; }
Schedule SchedExp(double start, double end) { return [=](double pos) { return sched_exp(start, end, pos); }; }
Schedule SchedNo(double start, double end) { return [=](double pos) { return sched_no(start, end, pos); }; }
Schedule SchedPoly(double start, double end, double power) {
  return [=](double pos) { return sched_poly(start, end, pos, power); };
}

Schedule combine_scheds(const std::vector<double>& pcts, const std::vector<Schedule>& scheds) {
  if (pcts.size() != scheds.size() || pcts.empty())
    throw Error("combine_scheds: " + std::to_string(pcts.size()) + " fractions for " +
                std::to_string(scheds.size()) + " schedules");
  std::vector<double> bounds{0.0};
  for (double pct : pcts) {
    if (pct < 0) throw Error("combine_scheds: negative fraction " + std::to_string(pct));
    bounds.push_back(bounds.back() + pct);
  }
  if (std::abs(bounds.back() - 1) > 1e-9)
    throw Error("combine_scheds: fractions sum to " + std::to_string(bounds.back()) + ", not 1");
  return [bounds, scheds](double pos) {
    size_t idx = 0;
    while (idx + 1 < scheds.size() && pos >= bounds[idx + 1]) ++idx;
    const double width = bounds[idx + 1] - bounds[idx];
    return scheds[idx](width > 0 ? (pos - bounds[idx]) / width : 0.0);
  };
}

Schedule combined_cos(double pct, double start, double middle, double end) {
  return combine_scheds({pct, 1 - pct}, {SchedCos(start, middle), SchedCos(middle, end)});
}

}  // namespace fastcpp
