#include "vision/datasets/cifar.h"

#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "formats/file_io.h"

namespace fastcpp::vision {
namespace {

constexpr int64_t kPixels = 3 * 32 * 32;

struct LabelField {
  int64_t classes;
  const char* name;
};

// The label bytes of a record and the classes each counts: CIFAR-100 has a coarse
// label (20 classes) before the fine one (100).
std::vector<LabelField> label_fields(Cifar kind) {
  if (kind == Cifar::ten) return {{10, ""}};
  return {{20, " coarse"}, {100, " fine"}};
}

}  // namespace

std::shared_ptr<TensorDataset> read_cifar_file(const std::string& path, Cifar kind) {
  const auto data = read_file(path, "CIFAR batch");  // a directory or a failed read: an Error, not short data
  const auto bytes = static_cast<int64_t>(data.size());
  const auto fields = label_fields(kind);
  const auto label_bytes = static_cast<int64_t>(fields.size());
  const int64_t record = label_bytes + kPixels;
  if (bytes == 0 || bytes % record != 0)
    throw Error("'" + path + "' is not a CIFAR-" + (kind == Cifar::ten ? "10" : "100") + " binary batch: " +
                std::to_string(bytes) + " bytes is not a multiple of " + std::to_string(record));
  const int64_t n = bytes / record;
  auto raw = torch::empty({n, record}, torch::kUInt8);
  std::memcpy(raw.data_ptr<uint8_t>(), data.data(), data.size());
  // A label outside the classes would only surface later, as a loss error or a device assert.
  for (size_t field = 0; field < fields.size(); ++field) {
    const auto& [classes, name] = fields[field];
    const auto outside = (raw.select(1, static_cast<int64_t>(field)) >= classes).nonzero();
    if (outside.size(0) == 0) continue;
    const auto image = outside[0][0].item<int64_t>();
    throw Error("'" + path + "': image " + std::to_string(image) + " has" + std::string(name) + " label " +
                std::to_string(raw[image][static_cast<int64_t>(field)].item<int>()) + ", outside the " +
                std::to_string(classes) + " classes of CIFAR-" + (kind == Cifar::ten ? "10" : "100") +
                " (not a CIFAR batch, or corrupt)");
  }
  auto labels = raw.select(1, label_bytes - 1).to(torch::kLong);
  auto images = raw.narrow(1, label_bytes, kPixels).reshape({n, 3, 32, 32}).contiguous();
  return std::make_shared<TensorDataset>(images, labels);
}

std::shared_ptr<TensorDataset> cifar_dataset(const std::string& dir, bool train, Cifar kind) {
  std::vector<std::string> files;
  if (kind == Cifar::ten) {
    if (train)
      for (int i = 1; i <= 5; ++i) files.push_back("data_batch_" + std::to_string(i) + ".bin");
    else
      files.push_back("test_batch.bin");
  } else {
    files.push_back(train ? "train.bin" : "test.bin");
  }
  std::vector<torch::Tensor> xs, ys;
  for (const auto& file : files) {
    auto part = read_cifar_file((std::filesystem::path(dir) / file).string(), kind);
    xs.push_back(part->x());
    ys.push_back(part->y());
  }
  return std::make_shared<TensorDataset>(torch::cat(xs), torch::cat(ys));
}

std::vector<std::string> cifar_vocab(const std::string& dir, Cifar kind) {
  const auto path = std::filesystem::path(dir) / (kind == Cifar::ten ? "batches.meta.txt" : "fine_label_names.txt");
  std::vector<std::string> names;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) names.push_back(line);
  if (names.empty())
    for (int i = 0; i < (kind == Cifar::ten ? 10 : 100); ++i) names.push_back(std::to_string(i));
  return names;
}

}  // namespace fastcpp::vision
