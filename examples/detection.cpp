// Object detection: a RetinaNet (ResNet-18 + FPN) trained on views of photographs with
// shapes pasted at known boxes (circle, square, triangle, cross). The set comes from
// bench/make_detection_set.py (run once, when --set has no instances.json): 128x128 JPEGs
// and their boxes in COCO's instances format, every fifth image for validation (valid.txt),
// so that any tool can read the same files (bench/detection_vs_torchvision.sh gives
// torchvision's training loop the same set).
//
//   detection [--epochs 20] [--fpn 128] ...  (detection --help lists the flags)
//
// Prints the epoch table with COCO's AP and AP50 on the validation set, each class's AP,
// the training loop's time and `final valid AP, AP50`; writes in detection/ (--out)
// show_batch.png (images and their boxes), show_results.png (true and found boxes) and
// export.pt (the trained model, for the predict program: predict detection/export.pt IMAGE).
#include <fastcpp.h>

#include "output_folder.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

using namespace fastcpp;
namespace fs = std::filesystem;

namespace {

// Makes the set with bench/make_detection_set.py unless `set` has one.
void make_set(const std::string& set, int images) {
  if (fs::exists(fs::path(set) / "instances.json")) return;
  const auto command = std::string("\"") + FASTCPP_PYTHON + "\" \"" + FASTCPP_DETECTION_SET_SCRIPT + "\" \"" + set +
                       "\" --images " + std::to_string(images);
  std::printf("making the set: %s\n", command.c_str());
  std::fflush(stdout);
  if (std::system(command.c_str()) != 0) throw Error("making the detection set failed: " + command);
}

}  // namespace

int main(int argc, char** argv) {
  int epochs = 20, images = 800, seed = 42, threads = usable_cores();
  int workers = -1;
  int64_t bs = 16, width = 64, fpn = 128;
  double lr = 2e-3;
  std::string set = "detection_data", out = "detection", parallel, head = "group-norm", batch_aug = "none",
              memory_format = "channels-last";
  CommandLine cli("detection",
                  "Object detection: makes a set of photographs with shapes pasted at known boxes once (COCO's "
                  "format, under --set), trains a RetinaNet on ResNet-18 + FPN with fit_one_cycle, prints the epoch "
                  "table with COCO's AP and AP50 and each class's AP, writes show_batch.png and show_results.png in --out.");
  cli.flag("--epochs", epochs, "epochs to train").range(0, 100000);
  cli.flag("--bs", bs, "batch size").range(1, 1 << 20);
  cli.flag("--lr", lr, "peak learning rate").range(0, 1e3);
  cli.flag("--images", images, "images in the set (when it is made)").range(10, 1 << 24);
  cli.flag("--width", width, "the ResNet's first-stage channels (64: torchvision's ResNet-18)").range(1, 4096);
  cli.flag("--fpn", fpn, "channels of the feature pyramid and the head (torchvision's: 256)").range(1, 4096);
  cli.flag("--head", head, "the head's convs: group-norm (torchvision's v2) or plain (its v1)")
      .choices({"group-norm", "plain"});
  cli.flag("--batch-aug", batch_aug, "fastai: fastai's aug_transforms on each training batch, the boxes moved with "
                                     "their images (zeros outside the image)").choices({"none", "fastai"});
  cli.flag("--memory-format", memory_format, "channels-last: oneDNN's and cuDNN's fastest convolutions")
      .choices({"channels-last", "contiguous"});
  cli.flag("--threads", threads, "CPU threads").range(1, 4096);
  cli.flag("--workers", workers, "the loader's threads (-1: one per core)").range(-1, 4096);
  cli.flag("--seed", seed, "seed of the weights and the shuffle");
  cli.flag("--set", set, "the set's folder (made there when it has no instances.json)");
  cli.flag("--out", out, "the folder it writes its files in");
  cli.flag("--parallel", parallel, "to_parallel over these devices: all, or e.g. cuda:0,cuda:1 or cpu,cpu");
  cli.example("detection --epochs 20");
  cli.parse(argc, argv);
  torch::set_num_threads(threads);
  try {
    make_set(set, images);
    const OutputFolder output(out);
    torch::manual_seed(seed);
    auto dls = vision::DetectionDataLoaders::from_coco(
        (fs::path(set) / "instances.json").string(), (fs::path(set) / "images").string(),
        {.seed = static_cast<uint64_t>(seed), .bs = bs, .workers = workers,
         .aug_tfms = batch_aug == "fastai" ? std::vector{vision::aug_transforms({.pad_mode = vision::PadMode::Zeros})}
                                           : std::vector<BatchAugmentPtr>{},
         .splitter = FileSplitter((fs::path(set) / "valid.txt").string())});
    vision::show_batch(dls, output("show_batch.png"), {.max_n = 8});
    const auto coco = vision::metrics::coco_maps();  // AP and AP50 from one evaluation
    const auto& ap = coco[0];
    auto learn = vision::detection_learner(dls, vision::resnet18, coco, {.width = width, .fpn_channels = fpn, .head_group_norm = head == "group-norm"});
    if (memory_format == "channels-last") learn.to_channels_last();
    if (!parallel.empty()) learn.to_parallel(parse_devices(parallel));
    const auto start = std::chrono::steady_clock::now();
    learn.fit_one_cycle(epochs, lr);
    std::printf("training loop %.1f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());

    auto results = learn.recorder->valid_values();  // [valid_loss, coco_map, coco_map50] of the last epoch
    if (results.size() < 3) results = learn.validate();
    const auto per_class = vision::coco_ap(*ap).per_class;
    std::printf("AP per class:");
    for (size_t c = 0; c < per_class.size(); ++c)
      std::printf(" %s %.3f%s", dls.vocab[c].c_str(), per_class[c], c + 1 < per_class.size() ? "," : "\n");
    std::printf("final valid AP %.4f, AP50 %.4f\n", results[1], results[2]);
    vision::show_results(learn, output("show_results.png"), {.max_n = 8});
    learn.export_learner(output("export.pt"));
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
