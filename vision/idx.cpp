#include "vision/idx.h"

#include <torch/torch.h>
#include <zlib.h>

#include <filesystem>

#include "core/error.h"

namespace fastcpp::vision {
namespace {

std::vector<uint8_t> read_gz_or_raw(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");  // reads plain files transparently too
  if (!file) throw Error("cannot open idx file '" + path + "'");
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 16];
  int n = 0;
  while ((n = gzread(file, chunk, sizeof chunk)) > 0) bytes.insert(bytes.end(), chunk, chunk + n);
  int err = Z_OK;
  const char* message = gzerror(file, &err);
  const std::string reason = message ? message : "";
  gzclose(file);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END))
    throw Error("cannot read idx file '" + path + "': " + (reason.empty() ? "corrupt gzip data" : reason));
  return bytes;
}

std::string existing(const std::string& dir, const std::string& name) {
  for (const auto& candidate : {name + ".gz", name}) {
    const auto path = (std::filesystem::path(dir) / candidate).string();
    if (std::filesystem::exists(path)) return path;
  }
  throw Error("idx file '" + (std::filesystem::path(dir) / name).string() + "[.gz]' not found");
}

}  // namespace

torch::Tensor read_idx(const std::string& path) {
  const auto bytes = read_gz_or_raw(path);
  if (bytes.size() < 4 || bytes[0] != 0 || bytes[1] != 0)
    throw Error("'" + path + "' is not an idx file (bad magic number)");
  c10::ScalarType dtype;
  int64_t element_size = 1;
  switch (bytes[2]) {
    case 0x08: dtype = torch::kUInt8; break;
    case 0x09: dtype = torch::kInt8; break;
    case 0x0B: dtype = torch::kInt16, element_size = 2; break;
    case 0x0C: dtype = torch::kInt32, element_size = 4; break;
    case 0x0D: dtype = torch::kFloat, element_size = 4; break;
    case 0x0E: dtype = torch::kDouble, element_size = 8; break;
    default: throw Error("'" + path + "': unknown idx element type " + std::to_string(bytes[2]));
  }
  const size_t rank = bytes[3];
  const size_t header = 4 + 4 * rank;
  if (bytes.size() < header) throw Error("'" + path + "' is truncated (incomplete header)");
  std::vector<int64_t> dims;
  int64_t count = 1;
  for (size_t d = 0; d < rank; ++d) {
    const uint8_t* p = &bytes[4 + 4 * d];
    dims.push_back((int64_t(p[0]) << 24) | (int64_t(p[1]) << 16) | (int64_t(p[2]) << 8) | int64_t(p[3]));
    count *= dims.back();
  }
  const auto expected = header + static_cast<size_t>(count * element_size);
  if (bytes.size() != expected)
    throw Error("'" + path + "' has " + std::to_string(bytes.size()) + " bytes, its header promises " +
                std::to_string(expected) + " (truncated or corrupt)");
  auto tensor = torch::empty(dims, dtype);
  std::memcpy(tensor.data_ptr(), &bytes[header], static_cast<size_t>(count * element_size));
  if (element_size > 1) {  // idx is big-endian
    auto* data = static_cast<uint8_t*>(tensor.data_ptr());
    for (int64_t i = 0; i < count; ++i) std::reverse(data + i * element_size, data + (i + 1) * element_size);
  }
  return tensor;
}

std::shared_ptr<TensorDataset> idx_image_dataset(const std::string& dir, const std::string& prefix) {
  const auto images_path = existing(dir, prefix + "-images-idx3-ubyte");
  const auto labels_path = existing(dir, prefix + "-labels-idx1-ubyte");
  auto images = read_idx(images_path);
  auto labels = read_idx(labels_path);
  if (images.dim() != 3) throw Error("'" + images_path + "' should hold [N, H, W] images, has " + c10::str(images.sizes()));
  if (labels.dim() != 1 || labels.size(0) != images.size(0))
    throw Error("'" + labels_path + "' has " + c10::str(labels.sizes()) + " labels for " +
                std::to_string(images.size(0)) + " images in '" + images_path + "'");
  return std::make_shared<TensorDataset>(images.unsqueeze(1), labels.to(torch::kLong));
}

}  // namespace fastcpp::vision
