#pragma once
// Annealing functions of the training position pos in [0, 1], as fastai's:
//   sched_lin(a, b, pos) = a + pos*(b-a)
//   sched_cos(a, b, pos) = a + (1 + cos(pi*(1-pos))) * (b-a)/2
//   sched_exp(a, b, pos) = a * (b/a)^pos
//   sched_no(a, b, pos)  = a
// combine_scheds runs several schedules one after the other over fractions of training.
#include <functional>
#include <vector>

namespace fastcpp {

using Schedule = std::function<double(double pos)>;

double sched_lin(double start, double end, double pos);
double sched_cos(double start, double end, double pos);
double sched_exp(double start, double end, double pos);
double sched_no(double start, double end, double pos);
double sched_poly(double start, double end, double pos, double power);

Schedule SchedLin(double start, double end);
Schedule SchedCos(double start, double end);
Schedule SchedExp(double start, double end);
Schedule SchedNo(double start, double end);
Schedule SchedPoly(double start, double end, double power);

// scheds[i] runs over a fraction pcts[i] of training (the fractions sum to 1), each
// seeing its own position rescaled to [0, 1].
Schedule combine_scheds(const std::vector<double>& pcts, const std::vector<Schedule>& scheds);

// cos from start to middle over the first pct, then cos from middle to end.
Schedule combined_cos(double pct, double start, double middle, double end);

}  // namespace fastcpp
