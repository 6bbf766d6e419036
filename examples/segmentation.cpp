// Semantic segmentation: a U-Net on a ResNet-18 encoder trained on a set made from
// Fashion-MNIST. Each 72x56 canvas (sides that are not multiples of 32) holds three
// items at random places; its mask is the item's class (1-10) where the item's pixels
// are on, 0 for the background, and 255 (void) on a one-pixel rim around each item.
// The set is written once from the seed as two PNG folders (images/, masks/) under
// --set, so any tool can read it (bench/segmentation_vs_fastai.sh gives fastai the
// same files). The defaults are fastai's unet_learner on SegmentationDataLoaders: the
// grey images read as RGB, no item transforms, pixels divided by 255.
//
//   segmentation [--epochs 8] [--width 16] ...  (segmentation --help lists the flags)
//
// Prints the epoch table with Dice and mean IoU (void pixels left out), then each
// class's IoU; writes in segmentation/ (--out): show_batch.png (images and masks before
// training), show_results.png (image, true mask, predicted mask for 4 validation images,
// as fastai's show_results), top_losses.png (the same for the 4 with the highest loss,
// SegmentationInterpretation's), loss.png, and export.pt, the model for examples/predict
// (--export '' writes none).
#include <fastcpp.h>

#include <opencv2/imgproc.hpp>

#include "output_folder.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

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
    vision::write_png((fs::path(out) / "images" / name).string(), image);
    vision::write_png((fs::path(out) / "masks" / name).string(), mask);
  }
  std::ofstream(fs::path(out) / "codes.txt") << [] {
    std::string text;
    for (const auto& code : kCodes) text += code + "\n";
    return text;
  }();
  std::ofstream(fs::path(out) / "done") << "complete\n";
}

}  // namespace

int main(int argc, char** argv) {
  int epochs = 8, items = 1200, seed = 42, threads = usable_cores();
  int workers = -1;  // the loader's threads: one per core
  int top_losses = 4;
  int64_t bs = 16, width = 16;  // 64: torchvision's ResNet-18 (about 3 min an epoch on 2 cores)
  double lr = 1e-2;
  std::string data = vision::fashion_mnist_dir(), set = "segmentation_data", stem = "imagenet", batch_aug = "none",
              out = "segmentation", export_path = "export.pt", valid_list, parallel, memory_format = "channels-last";
  CommandLine cli("segmentation",
                  "Semantic segmentation: writes a set made from Fashion-MNIST once (72x56 canvases of three items, "
                  "masks of 11 classes with a void rim, as PNG folders under --set), trains a U-Net on a ResNet-18 "
                  "encoder with fit_one_cycle, prints the epoch table with Dice and mean IoU and each class's IoU, "
                  "writes show_batch.png, show_results.png, top_losses.png, loss.png and the exported model in --out.");
  cli.flag("--epochs", epochs, "epochs to train").range(0, 100000);
  cli.flag("--bs", bs, "batch size").range(1, 1 << 20);
  cli.flag("--lr", lr, "peak learning rate").range(0, 1e3);
  cli.flag("--items", items, "canvases in the set").range(10, 1 << 24);
  cli.flag("--width", width, "the encoder's width (64: torchvision's ResNet-18)").range(1, 4096);
  cli.flag("--stem", stem, "the encoder's stem").choices({"imagenet", "cifar"});
  cli.flag("--batch-aug", batch_aug,
           "fastai: fastai's aug_transforms on each training batch (flip, rotate, zoom, warp, lighting), the masks "
           "moved with their images")
      .choices({"none", "fastai"});
  cli.flag("--memory-format", memory_format,
           "channels-last: oneDNN's and cuDNN's fastest convolutions, and the CPU's Winograd convolutions")
      .choices({"channels-last", "contiguous"});
  cli.flag("--threads", threads, "CPU threads").range(1, 4096);
  cli.flag("--workers", workers, "the loader's threads (-1: one per core)").range(-1, 4096);
  cli.flag("--seed", seed, "seed of the set, the split and the weights");
  cli.flag("--data", data, "the folder of Fashion-MNIST's idx files");
  cli.flag("--set", set, "where the set's folders are written");
  cli.flag("--out", out, "the folder it writes its files in");
  cli.flag("--export", export_path, "the exported model's file in --out, for predict ('' for none)");
  cli.flag("--parallel", parallel, "to_parallel over these devices: all, or e.g. cuda:0,cuda:1 or cpu,cpu");
  cli.flag("--top-losses", top_losses, "validation images with the highest loss drawn in top_losses.png (0: none)")
      .range(0, 1000);
  cli.flag("--valid-list", valid_list,
           "a file naming the validation images, one per line (fastai's FileSplitter; default: a random 20%)");
  cli.example("segmentation --epochs 8");
  cli.parse(argc, argv);
  torch::set_num_threads(threads);
  try {
    write_set(data, set, items, static_cast<uint64_t>(seed));
    const OutputFolder output(out);
    torch::manual_seed(seed);
    auto dls = vision::SegmentationDataLoaders::from_folders(
        (fs::path(set) / "images").string(), (fs::path(set) / "masks").string(), kCodes,
        {.seed = static_cast<uint64_t>(seed), .bs = bs, .workers = workers, .void_index = kVoid, .mask_fill = kVoid,
         .aug_tfms = batch_aug == "fastai" ? std::vector<BatchAugmentPtr>{vision::aug_transforms()} : std::vector<BatchAugmentPtr>{},
         .splitter = valid_list.empty() ? DataSplitter<std::string>{} : FileSplitter(valid_list)});
    vision::show_batch(dls, output("show_batch.png"), {.max_n = 4});  // images and masks, the void rims white
    // The loss (CrossEntropyLossFlat), the metrics and the pictures leave the data's void pixels out.
    const auto iou = vision::jaccard_coeff_multi();
    auto learn = vision::unet_learner(dls, vision::resnet18, {vision::dice_multi(), iou},
                                      {.stem = stem == "cifar" ? vision::Stem::cifar : vision::Stem::imagenet,
                                       .width = width});
    if (memory_format == "channels-last") learn.to_channels_last();
    if (!parallel.empty()) learn.to_parallel(parse_devices(parallel));
    const auto start = std::chrono::steady_clock::now();
    learn.fit_one_cycle(epochs, lr);
    std::printf("training loop %.1f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());

    // [valid_loss, dice_multi, jaccard_coeff_multi] of the fit's last validation, and each
    // class's IoU from that same pass: no other pass over the validation set.
    auto results = learn.recorder->valid_values();
    if (results.size() < 3) results = learn.validate();  // no epoch trained
    const auto class_iou = vision::per_class_scores(*iou);
    std::printf("IoU per class:");
    for (size_t c = 0; c < class_iou.size(); ++c)
      std::printf(" %s %.3f%s", kCodes[c].c_str(), class_iou[c], c + 1 < class_iou.size() ? "," : "\n");
    std::printf("final valid Dice %.4f, mean IoU %.4f\n", results[1], results[2]);

    vision::show_results(learn, output("show_results.png"), {.max_n = 4});  // image, target, prediction
    if (top_losses > 0) {  // the images it does worst on: one more pass over the validation set
      const auto interp = vision::SegmentationInterpretation::from_learner(learn);
      std::printf("highest losses:\n%s", interp.top_losses_text(static_cast<size_t>(top_losses)).c_str());
      interp.plot_top_losses(static_cast<size_t>(top_losses), output("top_losses.png"));
    }
    learn.recorder->plot_loss(output("loss.png"));
    if (!export_path.empty()) learn.export_learner(output(export_path));  // for examples/predict --masks
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
