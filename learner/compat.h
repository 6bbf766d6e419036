#pragma once
// The one place where libtorch versions differ for us: Debian's 1.13 (CPU) and the
// 2.x of our CUDA machines.
#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace fastcpp::compat {

#define FASTCPP_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// Turns autocast on (with dtype) or off for one device type; off also drops its cast cache.
inline void set_autocast(c10::DeviceType device, bool enabled, at::ScalarType dtype) {
#if FASTCPP_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(device, dtype);
  at::autocast::set_autocast_enabled(device, enabled);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(enabled);
  }
#endif
  if (!enabled) at::autocast::clear_cache();
}

}  // namespace fastcpp::compat
