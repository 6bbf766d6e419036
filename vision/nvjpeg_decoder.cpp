// nvJPEG on a CUDA device (vision/nvjpeg_decoder.h).
#include "vision/nvjpeg_decoder.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <nvjpeg.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <mutex>

#include "core/error.h"
#include "vision/image.h"

namespace fastcpp::vision {
namespace {

bool ok(nvjpegStatus_t status) { return status == NVJPEG_STATUS_SUCCESS; }

void check(nvjpegStatus_t status, const std::string& what) {
  if (!ok(status)) throw Error("nvJPEG: " + what + " failed (status " + std::to_string(int(status)) + ")");
}

// One device's decoders and their state; used under its mutex (nvJPEG states are not
// for several threads at once).
class Decoders {
 public:
  explicit Decoders(c10::DeviceIndex device) {
    c10::cuda::CUDAGuard guard(device);
    hardware_ = ok(nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, 0, &hardware_handle_));
    if (hardware_) {
      check(nvjpegJpegStateCreate(hardware_handle_, &hardware_state_), "the hardware decoder's state");
      check(nvjpegJpegStreamCreate(hardware_handle_, &parsed_), "a stream parser");
    }
    check(nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT, nullptr, nullptr, 0, &cuda_handle_), "starting the CUDA decoder");
    check(nvjpegJpegStateCreate(cuda_handle_, &cuda_state_), "the CUDA decoder's state");
  }
  ~Decoders() {
    if (parsed_) nvjpegJpegStreamDestroy(parsed_);
    if (hardware_state_) nvjpegJpegStateDestroy(hardware_state_);
    if (hardware_handle_) nvjpegDestroy(hardware_handle_);
    if (cuda_state_) nvjpegJpegStateDestroy(cuda_state_);
    if (cuda_handle_) nvjpegDestroy(cuda_handle_);
  }
  Decoders(const Decoders&) = delete;
  Decoders& operator=(const Decoders&) = delete;

  bool hardware() const { return hardware_; }

  void decode(torch::Tensor& canvas, const std::vector<JpegToDecode>& jpegs) {
    const auto stream = c10::cuda::getCurrentCUDAStream(canvas.device().index()).stream();
    const int64_t height = canvas.size(2), width = canvas.size(3);
    auto destination = [&](int64_t slot) {
      nvjpegImage_t image{};
      for (int64_t c = 0; c < 3; ++c) {
        image.channel[c] = canvas.data_ptr<uint8_t>() + ((slot * 3 + c) * height) * width;
        image.pitch[c] = static_cast<size_t>(width);
      }
      return image;
    };
    std::vector<const JpegToDecode*> batched, one_by_one;
    for (const auto& jpeg : jpegs) {
      int unsupported = 1;  // nvJPEG answers 0 for "supported"
      if (hardware_ && ok(nvjpegJpegStreamParse(hardware_handle_, jpeg.bytes->data(), jpeg.bytes->size(), 0, 0, parsed_)) &&
          ok(nvjpegDecodeBatchedSupported(hardware_handle_, parsed_, &unsupported)) && unsupported == 0)
        batched.push_back(&jpeg);
      else
        one_by_one.push_back(&jpeg);
    }
    if (!batched.empty() && !decode_batch(batched, destination, stream))
      one_by_one.insert(one_by_one.end(), batched.begin(), batched.end());  // the hardware refused the batch
    for (const auto* jpeg : one_by_one) {
      auto image = destination(jpeg->slot);
      if (ok(nvjpegDecode(cuda_handle_, cuda_state_, jpeg->bytes->data(), jpeg->bytes->size(), NVJPEG_OUTPUT_RGB, &image,
                          stream)))
        continue;
      // What nvJPEG refuses, the CPU decodes, with its errors for a damaged file.
      const auto decoded = image_to_tensor(decode_image(*jpeg->bytes, *jpeg->path, {.channels = 3}));
      canvas[jpeg->slot].narrow(1, 0, decoded.size(1)).narrow(2, 0, decoded.size(2)).copy_(decoded);
    }
  }

 private:
  template <class Destination>
  bool decode_batch(const std::vector<const JpegToDecode*>& jpegs, Destination destination, cudaStream_t stream) {
    std::vector<const unsigned char*> data;
    std::vector<size_t> lengths;
    std::vector<nvjpegImage_t> images;
    for (const auto* jpeg : jpegs) {
      data.push_back(jpeg->bytes->data());
      lengths.push_back(jpeg->bytes->size());
      images.push_back(destination(jpeg->slot));
    }
    return ok(nvjpegDecodeBatchedInitialize(hardware_handle_, hardware_state_, static_cast<int>(jpegs.size()), 1,
                                            NVJPEG_OUTPUT_RGB)) &&
           ok(nvjpegDecodeBatched(hardware_handle_, hardware_state_, data.data(), lengths.data(), images.data(), stream));
  }

  bool hardware_ = false;
  nvjpegHandle_t hardware_handle_ = nullptr, cuda_handle_ = nullptr;
  nvjpegJpegState_t hardware_state_ = nullptr, cuda_state_ = nullptr;
  nvjpegJpegStream_t parsed_ = nullptr;
};

std::mutex decoders_mutex;

// The device's decoders, made at first use; call under decoders_mutex.
Decoders& decoders_of(c10::DeviceIndex device) {
  static std::map<c10::DeviceIndex, std::unique_ptr<Decoders>> all;
  auto& decoders = all[device];
  if (!decoders) decoders = std::make_unique<Decoders>(device);
  return *decoders;
}

}  // namespace

void nvjpeg_decode(torch::Tensor& canvas, const std::vector<JpegToDecode>& jpegs) {
  std::lock_guard<std::mutex> lock(decoders_mutex);
  c10::cuda::CUDAGuard guard(canvas.device());
  decoders_of(canvas.device().index()).decode(canvas, jpegs);
}

std::string nvjpeg_backend(torch::Device device) {
  std::lock_guard<std::mutex> lock(decoders_mutex);
  return decoders_of(device.index()).hardware() ? "nvJPEG, hardware decoder" : "nvJPEG, CUDA decoder";
}

}  // namespace fastcpp::vision
