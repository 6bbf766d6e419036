#pragma once
// JPEGs decoded on a CUDA device by nvJPEG (built where nvjpeg.h is found: the pinned
// nvidia-nvjpeg wheel, or the bundle on a GPU machine): those the GPU's hardware JPEG
// decoder takes (A100, H100: baseline JPEGs) in one batch there, the rest one by one
// with nvJPEG's CUDA decoder, and any file nvJPEG refuses on the CPU (decode_image).
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fastcpp::vision {

struct JpegToDecode {
  const std::vector<uint8_t>* bytes;
  const std::string* path;
  int64_t slot;  // into canvas[slot], at its top left
};

// Decodes into `canvas` ([n, 3, H, W] uint8 on a CUDA device, planar RGB) on the current
// stream. Throws fastcpp::Error naming the file that no decoder could read.
void nvjpeg_decode(torch::Tensor& canvas, const std::vector<JpegToDecode>& jpegs);
// "nvJPEG, hardware decoder" or "nvJPEG, CUDA decoder" on `device`.
std::string nvjpeg_backend(torch::Device device);

}  // namespace fastcpp::vision
