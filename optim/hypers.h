#pragma once
// Optimizer hyper-parameters, one set per parameter group, in the vocabulary every
// optimizer shares so that schedules can write any of them by name:
//   lr       learning rate
//   mom      SGD momentum, or Adam's beta1
//   sqr_mom  Adam's beta2
//   wd       weight decay (decoupled, p *= 1 - lr*wd, or L2: Optimizer::set_decouple_wd)
//   eps      Adam's epsilon
#include <string>
#include <vector>

namespace fastcpp {

struct Hypers {
  double lr = 1e-3;
  double mom = 0.9;
  double sqr_mom = 0.99;
  double wd = 0.0;
  double eps = 1e-5;

  // The hyper-parameter called `name`; throws fastcpp::Error naming the valid names.
  double& at(const std::string& name);
  double at(const std::string& name) const;

  static const std::vector<std::string>& names();
};

}  // namespace fastcpp
