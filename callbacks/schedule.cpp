#include "callbacks/schedule.h"

#include "core/error.h"
#include "learner/learner.h"

namespace fastcpp {

ParamScheduler::ParamScheduler(Scheds scheds) : scheds_(std::move(scheds)) {
  order = 60;
  run_valid = false;
  for (const auto& [name, per_group] : scheds_) {
    Hypers().at(name);  // throws on an unknown name
    if (per_group.empty()) throw Error("ParamScheduler: no schedule for '" + name + "'");
  }
}

void ParamScheduler::before_fit() { hps.clear(); }

void ParamScheduler::before_batch() { set_hypers(learn().pct_train); }

void ParamScheduler::set_hypers(double pos) {
  auto& opt = *learn().opt;
  for (const auto& [name, per_group] : scheds_) {
    if (per_group.size() == 1) {
      opt.set_hyper(name, per_group[0](pos));
      continue;
    }
    std::vector<double> values;
    for (const auto& schedule : per_group) values.push_back(schedule(pos));
    opt.set_hyper(name, values);
  }
}

void ParamScheduler::after_batch() {
  const auto& hypers = learn().opt->param_groups().back().hypers;
  for (const auto& entry : scheds_) hps[entry.first].push_back(hypers.at(entry.first));
}

}  // namespace fastcpp
