#pragma once
// The text of any exception, for the message of an Error that adds where it happened:
// libtorch's without the backtrace that its what() carries.
#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace fastcpp {

inline std::string exception_text(const std::exception& e) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&e)) return torch_error->what_without_backtrace();
  return e.what();
}

}  // namespace fastcpp
