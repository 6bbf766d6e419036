#include "parallel/replica_streams.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>

namespace fastcpp::distributed {
namespace {

c10::Stream current_stream(const torch::Device& device) {
  return c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
}

}  // namespace

StreamMark::StreamMark(const torch::Device& device) : device_(device) {
  if (!device.is_cuda()) return;
  event_.emplace(device.type());
  event_->record(current_stream(device));
}

void StreamMark::wait() const { wait_on(device_); }

void StreamMark::wait_on(const torch::Device& other) const {
  if (event_) event_->block(current_stream(other));
}

void keep_for_current_stream(const torch::Tensor& tensor) {
  if (!tensor.defined() || !tensor.is_cuda()) return;
  c10::impl::getDeviceGuardImpl(tensor.device().type())
      ->recordDataPtrOnStream(tensor.storage().data_ptr(), current_stream(tensor.device()));
}

std::vector<std::optional<c10::Stream>> side_streams(const std::vector<torch::Device>& devices) {
  std::vector<std::optional<c10::Stream>> streams;
  for (auto it = devices.begin(); it != devices.end(); ++it)
    if (it->is_cuda() && std::find(devices.begin(), it, *it) != it)
      streams.emplace_back(c10::impl::getDeviceGuardImpl(it->type())->getStreamFromGlobalPool(*it));
    else
      streams.emplace_back(std::nullopt);
  return streams;
}

}  // namespace fastcpp::distributed
