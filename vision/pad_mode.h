#pragma once
// What an image shows beyond its edges where a transform reaches past them: its mirror
// image (the edge pixel not repeated), its edge pixels repeated, or zeros. fastai's PadMode;
// both Resize's pad method and aug_transforms take one.
#include <optional>
#include <string>

namespace fastcpp::vision {

enum class PadMode { Reflection, Border, Zeros };

inline const char* pad_mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::Reflection: return "reflection";
    case PadMode::Border: return "border";
    case PadMode::Zeros: return "zeros";
  }
  return "";
}

inline std::optional<PadMode> pad_mode_named(const std::string& name) {
  for (auto mode : {PadMode::Reflection, PadMode::Border, PadMode::Zeros})
    if (name == pad_mode_name(mode)) return mode;
  return std::nullopt;
}

}  // namespace fastcpp::vision
