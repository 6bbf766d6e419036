#pragma once
// fastcpp::Error: a mistake the user can fix (bad path, bad data, mismatched
// checkpoint, wrong option). Its message says what was wrong, where, and what to do.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace fastcpp {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "a, b, c and 4 more", for messages: long lists are cut so that they stay readable.
inline std::string joined(const std::vector<std::string>& items, size_t shown = 8) {
  std::string out;
  for (size_t i = 0; i < std::min(items.size(), shown); ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > shown) out += " and " + std::to_string(items.size() - shown) + " more";
  return out;
}

}  // namespace fastcpp
