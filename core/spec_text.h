#pragma once
// The text forms of transforms, which an exported model carries ("Resize 224 crop",
// "Normalize 0.485,0.456,0.406 0.229,0.224,0.225"): words separated by spaces, numbers
// written in the shortest form that reads back to the same double, lists of numbers
// joined by commas. Reading is strict (no locale, no trailing characters).
#include <charconv>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace fastcpp::spec_text {

inline std::string number(double value) {
  char buffer[32];
  const auto end = std::to_chars(buffer, buffer + sizeof buffer, value).ptr;
  return {buffer, end};
}

inline std::string numbers(const std::vector<double>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) out.append(i ? "," : "").append(number(values[i]));
  return out;
}

inline std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

inline std::optional<double> to_number(const std::string& word) {
  double value = 0;
  const auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), value);
  if (error != std::errc() || end != word.data() + word.size()) return std::nullopt;
  return value;
}

inline std::optional<std::vector<double>> to_numbers(const std::string& word) {
  std::vector<double> out;
  std::istringstream in(word);
  for (std::string item; std::getline(in, item, ',');) {
    const auto value = to_number(item);
    if (!value) return std::nullopt;
    out.push_back(*value);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

}  // namespace fastcpp::spec_text
