#include "optim/hypers.h"

#include "core/error.h"

namespace fastcpp {

const std::vector<std::string>& Hypers::names() {
  static const std::vector<std::string> all{"lr", "mom", "sqr_mom", "wd", "eps"};
  return all;
}

double& Hypers::at(const std::string& name) {
  if (name == "lr") return lr;
  if (name == "mom") return mom;
  if (name == "sqr_mom") return sqr_mom;
  if (name == "wd") return wd;
  if (name == "eps") return eps;
  throw Error("unknown hyper-parameter '" + name + "': use one of lr, mom, sqr_mom, wd, eps");
}

double Hypers::at(const std::string& name) const { return const_cast<Hypers*>(this)->at(name); }

}  // namespace fastcpp
