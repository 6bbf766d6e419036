#include "vision/datasets/export_image_folder.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <opencv2/core.hpp>

#include "core/error.h"
#include "vision/image.h"

namespace fastcpp::vision {

void export_image_folder(const TensorDataset& dataset, const std::vector<std::string>& vocab, const std::string& dir) {
  const auto& x = dataset.x();
  if (x.dim() != 4 || x.scalar_type() != torch::kUInt8 || (x.size(1) != 1 && x.size(1) != 3))
    throw Error("export_image_folder: expected uint8 images [N, 1 or 3, H, W], got " + c10::str(x.sizes()));
  std::vector<std::string> folders;
  for (auto name : vocab) {
    std::replace(name.begin(), name.end(), '/', '_');
    folders.push_back((std::filesystem::path(dir) / name).string());
  }
  std::vector<bool> created(folders.size(), false);  // only classes with items get a folder
  auto hwc = x.permute({0, 2, 3, 1}).contiguous();
  const int h = static_cast<int>(x.size(2)), w = static_cast<int>(x.size(3)), c = static_cast<int>(x.size(1));
  for (int64_t i = 0; i < x.size(0); ++i) {
    const auto label = dataset.y()[i].item<int64_t>();
    if (label < 0 || label >= static_cast<int64_t>(folders.size()))
      throw Error("export_image_folder: item " + std::to_string(i) + " has label " + std::to_string(label) + ", outside the " +
                  std::to_string(folders.size()) + " class names");
    if (!created[static_cast<size_t>(label)]) {
      std::filesystem::create_directories(folders[static_cast<size_t>(label)]);
      created[static_cast<size_t>(label)] = true;
    }
    const cv::Mat image(h, w, c == 3 ? CV_8UC3 : CV_8UC1, hwc[i].data_ptr<uint8_t>());
    write_png(folders[static_cast<size_t>(label)] + "/" + std::to_string(i) + ".png", image);
  }
}

}  // namespace fastcpp::vision
