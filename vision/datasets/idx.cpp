#include "vision/datasets/idx.h"

#include <torch/torch.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"


namespace fastcpp::vision {
namespace {

// An idx file, gzipped or plain, read as a stream: the header first, then no more data
// than the header promises, so a hostile .gz cannot make it inflate without bound.
class IdxStream {
 public:
  explicit IdxStream(const std::string& path) : path_(path), file_(gzopen(path.c_str(), "rb")) {
    if (!file_) throw Error("cannot open idx file '" + path + "'");
  }
  ~IdxStream() { gzclose(file_); }
  IdxStream(const IdxStream&) = delete;
  IdxStream& operator=(const IdxStream&) = delete;

  // Appends up to `n` bytes to `into` (growing it as they come); returns how many.
  size_t read(size_t n, std::vector<uint8_t>& into) {
    size_t total = 0;
    while (total < n) {
      const auto want = static_cast<unsigned>(std::min<size_t>(n - total, size_t(1) << 20));
      const size_t old = into.size();
      into.resize(old + want);
      const int got = gzread(file_, into.data() + old, want);
      into.resize(old + static_cast<size_t>(std::max(got, 0)));
      if (got < 0) fail();
      if (got == 0) break;
      total += static_cast<size_t>(got);
    }
    int err = Z_OK;
    gzerror(file_, &err);
    if (err != Z_OK && err != Z_STREAM_END) fail();
    return total;
  }

 private:
  [[noreturn]] void fail() {
    int err = Z_OK;
    const char* message = gzerror(file_, &err);
    const std::string reason = message && *message ? message : "corrupt gzip data";
    throw Error("cannot read idx file '" + path_ + "': " + reason);
  }

  std::string path_;
  gzFile file_;
};

std::string existing(const std::string& dir, const std::string& name) {
  for (const auto& candidate : {name + ".gz", name}) {
    const auto path = (std::filesystem::path(dir) / candidate).string();
    if (std::filesystem::exists(path)) return path;
  }
  const bool fashion = dir == fashion_mnist_dir();  // where the examples and the template look
  throw Error("idx file '" + (std::filesystem::path(dir) / name).string() + "[.gz]' not found" +
              (fashion ? " (Fashion-MNIST: sudo apt-get install dataset-fashion-mnist, or FASTCPP_FASHION_MNIST=DIR "
                         "names a folder of its idx files)"
                       : ""));
}

}  // namespace

torch::Tensor read_idx(const std::string& path) {
  IdxStream file(path);
  std::vector<uint8_t> header;
  file.read(4, header);
  if (header.size() < 4 || header[0] != 0 || header[1] != 0)
    throw Error("'" + path + "' is not an idx file (bad magic number)");
  c10::ScalarType dtype;
  size_t element_size = 1;
  switch (header[2]) {
    case 0x08: dtype = torch::kUInt8; break;
    case 0x09: dtype = torch::kInt8; break;
    case 0x0B: dtype = torch::kInt16, element_size = 2; break;
    case 0x0C: dtype = torch::kInt32, element_size = 4; break;
    case 0x0D: dtype = torch::kFloat, element_size = 4; break;
    case 0x0E: dtype = torch::kDouble, element_size = 8; break;
    default: throw Error("'" + path + "': unknown idx element type " + std::to_string(header[2]));
  }
  const size_t rank = header[3];
  if (file.read(4 * rank, header) < 4 * rank) throw Error("'" + path + "' is truncated (incomplete header)");
  std::vector<int64_t> dims;
  // Beyond 1 TiB a header is corrupt, and products of its dimensions could overflow. The
  // extent counts a zero dimension as 1: the strides of the others must fit too.
  constexpr size_t kMaxBytes = size_t(1) << 40;
  size_t count = 1, extent = 1;
  for (size_t d = 0; d < rank; ++d) {
    const uint8_t* p = &header[4 + 4 * d];
    const auto dim = (size_t(p[0]) << 24) | (size_t(p[1]) << 16) | (size_t(p[2]) << 8) | size_t(p[3]);
    if (extent > kMaxBytes / element_size / std::max<size_t>(dim, 1))
      throw Error("'" + path + "': its header's dimensions span more than 1 TiB (corrupt)");
    dims.push_back(static_cast<int64_t>(dim));
    extent *= std::max<size_t>(dim, 1);
    count *= dim;
  }
  const size_t promised = count * element_size;
  std::vector<uint8_t> data;
  const size_t found = file.read(promised + 1, data);  // one more byte than promised tells a longer file
  if (found != promised)
    throw Error("'" + path + "' has " + (found > promised ? "more than " : "") +
                std::to_string(header.size() + std::min(found, promised)) + " bytes, its header promises " +
                std::to_string(header.size() + promised) + " (truncated or corrupt)");
  auto tensor = torch::empty(dims, dtype);
  if (promised > 0) std::memcpy(tensor.data_ptr(), data.data(), promised);
  if (element_size > 1) {  // idx is big-endian
    auto* values = static_cast<uint8_t*>(tensor.data_ptr());
    for (size_t i = 0; i < count; ++i) std::reverse(values + i * element_size, values + (i + 1) * element_size);
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

std::string fashion_mnist_dir() {
  const char* dir = std::getenv("FASTCPP_FASHION_MNIST");
  return dir && *dir ? dir : "/usr/share/datasets/fashion-mnist";
}

const std::vector<std::string>& fashion_mnist_vocab() {
  static const std::vector<std::string> vocab{"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                              "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return vocab;
}

}  // namespace fastcpp::vision
