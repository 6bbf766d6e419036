// Classifies image files, or segments them, with an exported model
// (Learner::export_learner), without the training data:
//
//   predict MODEL IMAGE|FOLDER... [--top 3] [--bs 64] [--workers 2] [--masks DIR]
//
// e.g. with the model the image_folder example exports:
//   build/examples/predict image_folder/export.pt photo.jpg more_photos/
// prints a line per image: its path, then the top classes with their probabilities. With
// a segmentation model (the segmentation example's segmentation/export.pt): each image's
// share of pixels per class, and with --masks DIR the class masks as PNGs
// (DIR/<image name>.png, a colour per class).
#include <fastcpp.h>

#include <filesystem>
#include <iomanip>
#include <iostream>

using namespace fastcpp;

namespace {

// A segmented image's line: its path, then each class present with its share of pixels.
void print_mask_shares(const vision::Prediction& p, const vision::Predictor& predictor) {
  const auto counts = torch::bincount(p.mask.flatten());
  std::cout << p.path << ":";
  for (int64_t c = 0; c < counts.numel(); ++c)
    if (const auto n = counts[c].item<int64_t>(); n > 0)
      std::cout << " " << predictor.label(c) << " " << std::fixed << std::setprecision(4)
                << static_cast<double>(n) / static_cast<double>(p.mask.numel());
  std::cout << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, masks;
  std::vector<std::string> inputs;
  int64_t top = 3, bs = 64;
  int workers = 2;
  CommandLine cli("predict", "Classifies or segments image files with an exported model (Learner::export_learner), "
                             "without the training data: a line per image with its top classes, or with a "
                             "segmentation model each class's share of the pixels.");
  cli.argument("MODEL", model, "the exported model (.pt)").required();
  cli.arguments("IMAGES", inputs, "image files or folders").required();
  cli.flag("--top", top, "classes printed per image").range(1, 1 << 20);
  cli.flag("--bs", bs, "images per batch").range(1, 1 << 20);
  cli.flag("--workers", workers, "threads decoding images").range(0, 4096);
  cli.flag("--masks", masks, "a segmentation model's masks as PNGs into this folder (a colour per class)");
  cli.example("predict image_folder/export.pt photo.jpg more_photos/");
  cli.example("predict segmentation/export.pt segmentation_data/images --masks masks");
  cli.parse(argc, argv);
  try {
    const auto predictor = vision::load_learner(model, {.workers = workers});
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto predictions = std::filesystem::is_directory(inputs[i]) ? predictor.predict_folder(inputs[i], bs)
                                                                         : std::vector{predictor.predict(inputs[i])};
      for (const auto& p : predictions) {
        if (p.mask.defined()) {
          print_mask_shares(p, predictor);
          if (!masks.empty()) {
            std::filesystem::create_directories(masks);
            vision::write_mask_png((std::filesystem::path(masks) / std::filesystem::path(p.path).filename()).replace_extension(".png").string(), p.mask);
          }
          continue;
        }
        const auto [probs, indices] = p.probs.topk(std::min<int64_t>(top, p.probs.numel()));
        std::cout << p.path << ":";
        for (int64_t j = 0; j < probs.numel(); ++j) {
          std::cout << (j ? ", " : " ") << predictor.label(indices[j].item<int64_t>()) << " " << std::fixed << std::setprecision(4) << probs[j].item<double>();
        }
        std::cout << "\n";
      }
    }
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
