#pragma once
// Autocast on or off for one device type, in the calling thread only (autocast state is
// thread-local in ATen, so every thread that runs a forward sets its own).
#include <ATen/autocast_mode.h>

namespace fastcpp {

// Turns autocast on (with dtype) or off for `device`; off also drops its cast cache.
inline void set_autocast(c10::DeviceType device, bool enabled, at::ScalarType dtype) {
  at::autocast::set_autocast_dtype(device, dtype);
  at::autocast::set_autocast_enabled(device, enabled);
  if (!enabled) at::autocast::clear_cache();
}

}  // namespace fastcpp
