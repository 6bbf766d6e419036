#pragma once
// fastcpp::Error: a mistake the user can fix (bad path, bad data, mismatched
// checkpoint, wrong option). Its message says what was wrong, where, and what to do.
#include <stdexcept>
#include <string>

namespace fastcpp {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace fastcpp
