#include "core/device_check.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <utility>

#include "core/device.h"
#include "core/error.h"

namespace fastcpp {
namespace {

// Beyond this many unread checks the oldest is waited for: the host is then far ahead
// of the device anyway.
constexpr size_t kMaxPending = 256;

std::vector<int64_t> values_of(const at::Tensor& host) {
  const auto longs = host.to(at::kLong).contiguous();
  return {longs.data_ptr<int64_t>(), longs.data_ptr<int64_t>() + longs.numel()};
}

void throw_if_failed(const std::vector<int64_t>& values, const DeviceCheck::Message& message) {
  if (!values.empty() && values[0] != 0) throw Error(message(values));
}

}  // namespace

struct DeviceCheck::Pending {
  Pending(at::Tensor host_, c10::DeviceType type, Message message_)
      : host(std::move(host_)), event(type), message(std::move(message_)) {}
  at::Tensor host;
  c10::Event event;
  Message message;
};

void DeviceCheck::post(const at::Tensor& values, Message message) {
  const auto flat = values.detach().flatten();
  if (flat.is_cpu()) return throw_if_failed(values_of(flat), message);
  if (recording_cuda_graph(flat.device())) {
    std::lock_guard<std::mutex> lock(mutex_);
    recorded_.push_back({flat, std::move(message)});
    return;
  }
  auto host = at::empty(flat.sizes(), flat.options().device(at::kCPU).pinned_memory(true));
  host.copy_(flat, /*non_blocking=*/true);
  auto pending = std::make_shared<Pending>(std::move(host), flat.device().type(), std::move(message));
  const c10::impl::VirtualGuardImpl guard(flat.device().type());
  pending->event.record(guard.getStream(flat.device()));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(std::move(pending));
  }
  poll();
}

std::vector<DeviceCheck::Recorded> DeviceCheck::take_recorded() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(recorded_, {});
}

void DeviceCheck::poll() { drain(/*wait=*/false); }

void DeviceCheck::finish() { drain(/*wait=*/true); }

void DeviceCheck::drain(bool wait) {
  while (true) {
    std::shared_ptr<Pending> oldest;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (pending_.empty()) return;
      oldest = pending_.front();
      const bool must_wait = wait || pending_.size() > kMaxPending;
      if (!must_wait && !oldest->event.query()) return;
      pending_.pop_front();
    }
    oldest->event.synchronize();  // passed already unless waiting was asked for
    try {
      throw_if_failed(values_of(oldest->host), oldest->message);
    } catch (...) {
      // The phase ends here: later checks of it must not surface in the next fit.
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.clear();
      throw;
    }
  }
}

}  // namespace fastcpp
