// Semantic segmentation: a U-Net on a ResNet-18 encoder trained on a set made from
// Fashion-MNIST. Each 72x56 canvas (sides that are not multiples of 32) holds three
// items at random places; its mask is the item's class (1-10) where the item's pixels
// are on, 0 for the background, and 255 (void) on a one-pixel rim around each item.
// The set is written once from the seed as two PNG folders (images/, masks/) under
// --out, so any tool can read it (bench/segmentation_vs_fastai.sh gives fastai the
// same files). The defaults are fastai's unet_learner on SegmentationDataLoaders: the
// grey images read as RGB, no item transforms, pixels divided by 255.
//
//   segmentation [--epochs 8] [--bs 16] [--lr 1e-2] [--items 1200] [--width 16]
//                [--stem imagenet|cifar] [--threads N] [--workers N] [--data DIR] [--out segmentation_data]
//                [--seed 42] [--export segmentation_export.pt]
//
// Prints the epoch table with Dice and mean IoU (void pixels left out), then each
// class's IoU; writes segmentation_results.png (image, true mask, predicted mask for
// 4 validation images, as fastai's show_results), segmentation_loss.png, and the model
// for examples/predict (--export '' writes none).
#include <fastcpp.h>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

using namespace fastcpp;
namespace fs = std::filesystem;

namespace {

constexpr int kWidth = 72, kHeight = 56, kItemsPerImage = 3, kVoid = 255;
const std::vector<std::string> kCodes{"background", "t-shirt", "trouser", "pullover", "dress", "coat",
                                      "sandal",     "shirt",   "sneaker", "bag",      "ankle boot"};

// Writes `n` canvases and their masks under out/images and out/masks (once: a complete
// set is kept, marked by out/done).
void write_set(const std::string& fashion_mnist, const std::string& out, int n, uint64_t seed) {
  if (fs::exists(fs::path(out) / "done")) return;
  std::printf("writing %d images and masks to %s\n", n, out.c_str());
  fs::create_directories(fs::path(out) / "images");
  fs::create_directories(fs::path(out) / "masks");
  const auto items = vision::idx_image_dataset(fashion_mnist, "train");
  const auto pixels = items->x().contiguous(), labels = items->y();
  Rng rng(seed);
  const cv::Mat rim_kernel = cv::getStructuringElement(cv::MORPH_RECT, {3, 3});
  for (int i = 0; i < n; ++i) {
    cv::Mat image = cv::Mat::zeros(kHeight, kWidth, CV_8UC1), mask = cv::Mat::zeros(kHeight, kWidth, CV_8UC1);
    for (int k = 0; k < kItemsPerImage; ++k) {
      const auto index = rng.integer(0, pixels.size(0) - 1);
      const cv::Mat item(28, 28, CV_8UC1, pixels[index].data_ptr<uint8_t>());
      const int x = static_cast<int>(rng.integer(0, kWidth - 28)), y = static_cast<int>(rng.integer(0, kHeight - 28));
      const cv::Rect place(x, y, 28, 28);
      const cv::Mat on = item > 40;
      cv::Mat rim, off;
      cv::dilate(on, rim, rim_kernel);
      cv::bitwise_not(on, off);
      cv::bitwise_and(rim, off, rim);
      item.copyTo(image(place), on);  // a later item covers an earlier one
      mask(place).setTo(kVoid, rim);
      mask(place).setTo(labels[index].item<int64_t>() + 1, on);
    }
    char name[16];
    std::snprintf(name, sizeof(name), "%05d.png", i);
    cv::imwrite((fs::path(out) / "images" / name).string(), image);
    cv::imwrite((fs::path(out) / "masks" / name).string(), mask);
  }
  std::ofstream(fs::path(out) / "codes.txt") << [] {
    std::string text;
    for (const auto& code : kCodes) text += code + "\n";
    return text;
  }();
  std::ofstream(fs::path(out) / "done") << "complete\n";
}

// The library's colours per class, as an OpenCV image (BGR).
cv::Mat colour_mask(const torch::Tensor& mask) {
  const auto rgb = vision::colour_mask(mask, kVoid).contiguous();
  cv::Mat out;
  cv::cvtColor(cv::Mat(static_cast<int>(rgb.size(0)), static_cast<int>(rgb.size(1)), CV_8UC3, rgb.data_ptr<uint8_t>()), out,
               cv::COLOR_RGB2BGR);
  return out;
}

// fastai's show_results: image, true mask, predicted mask, a row per item, 3x enlarged.
void write_results(const std::string& path, const torch::Tensor& images, const torch::Tensor& masks,
                   const torch::Tensor& predicted, int rows) {
  std::vector<cv::Mat> lines;
  for (int i = 0; i < rows; ++i) {
    const auto grey = images[i][0].cpu().contiguous();  // the grey image's R (= G = B)
    cv::Mat image(static_cast<int>(grey.size(0)), static_cast<int>(grey.size(1)), CV_8UC1, grey.data_ptr<uint8_t>());
    cv::Mat image_bgr;
    cv::cvtColor(image, image_bgr, cv::COLOR_GRAY2BGR);
    cv::Mat line;
    cv::hconcat(std::vector<cv::Mat>{image_bgr, colour_mask(masks[i]), colour_mask(predicted[i])}, line);
    lines.push_back(line);
  }
  cv::Mat grid, big;
  cv::vconcat(lines, grid);
  cv::resize(grid, big, {}, 3, 3, cv::INTER_NEAREST);
  cv::imwrite(path, big);
}

}  // namespace

int main(int argc, char** argv) {
  int epochs = 8, items = 1200, seed = 42, threads = static_cast<int>(std::thread::hardware_concurrency());
  int workers = -1;  // the loader's threads: one per core
  int64_t bs = 16, width = 16;  // 64: torchvision's ResNet-18 (about 3 min an epoch on 2 cores)
  double lr = 1e-2;
  std::string data = vision::fashion_mnist_dir(), out = "segmentation_data", stem = "imagenet",
              export_path = "segmentation_export.pt";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--epochs") epochs = std::stoi(value);
    else if (flag == "--bs") bs = std::stoll(value);
    else if (flag == "--lr") lr = std::stod(value);
    else if (flag == "--items") items = std::stoi(value);
    else if (flag == "--width") width = std::stoll(value);
    else if (flag == "--threads") threads = std::stoi(value);
    else if (flag == "--workers") workers = std::stoi(value);
    else if (flag == "--seed") seed = std::stoi(value);
    else if (flag == "--data") data = value;
    else if (flag == "--out") out = value;
    else if (flag == "--stem") stem = value;
    else if (flag == "--export") export_path = value;
    else {
      std::cerr << "unknown flag " << flag << "\n";
      return 2;
    }
  }
  torch::set_num_threads(threads);
  try {
    write_set(data, out, items, static_cast<uint64_t>(seed));
    torch::manual_seed(seed);
    const vision::SegmentationMetricOptions no_void{.void_index = kVoid};
    auto dls = vision::SegmentationDataLoaders::from_folders(
        (fs::path(out) / "images").string(), (fs::path(out) / "masks").string(), kCodes,
        {.seed = static_cast<uint64_t>(seed), .bs = bs, .workers = workers, .void_index = kVoid, .mask_fill = kVoid});
    auto learn = vision::unet_learner(dls, vision::resnet18,
                                      {vision::dice_multi(no_void), vision::jaccard_coeff_multi(no_void)},
                                      {.stem = stem == "cifar" ? vision::Stem::cifar : vision::Stem::imagenet,
                                       .width = width,
                                       .loss_func = vision::CrossEntropyLossFlat({.ignore_index = kVoid})});
    learn.fit_one_cycle(epochs, lr);

    const auto preds = learn.get_preds();
    const auto iou = vision::per_class_iou(preds.preds, preds.targets, no_void);
    std::printf("IoU per class:");
    for (size_t c = 0; c < iou.size(); ++c) std::printf(" %s %.3f%s", kCodes[c].c_str(), iou[c], c + 1 < iou.size() ? "," : "\n");
    // [valid_loss, dice_multi, jaccard_coeff_multi] of the pass get_preds just made: no
    // second pass over the validation set.
    auto results = learn.recorder->valid_values();
    if (results.size() < 3) results = learn.validate();
    std::printf("final valid Dice %.4f, mean IoU %.4f\n", results[1], results[2]);

    const auto batch = dls.valid.dataset().get_batch({0, 1, 2, 3});
    write_results("segmentation_results.png", batch.x, batch.y, preds.preds.narrow(0, 0, 4).argmax(1), 4);
    learn.recorder->plot_loss("segmentation_loss.png");
    if (!export_path.empty()) learn.export_learner(export_path);  // for examples/predict --masks
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
