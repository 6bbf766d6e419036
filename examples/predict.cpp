// Classifies image files, segments them or finds objects in them, with an exported model
// (Learner::export_learner), without the training data:
//
//   predict MODEL IMAGE|FOLDER... [--top 3] [--bs 64] [--workers 2] [--masks DIR] [--min-score 0.5]
//
// e.g. with the model the image_folder example exports:
//   build/examples/predict image_folder/export.pt photo.jpg more_photos/
// prints a line per image: its path, then the top classes with their probabilities. With
// a segmentation model (the segmentation example's segmentation/export.pt): each image's
// share of pixels per class, and with --masks DIR the class masks as PNGs
// (DIR/<image name>.png, a colour per class). With a detector (the detection example's
// detection/export.pt): each detection scoring --min-score or more, as its class, score
// and box (x1 y1 x2 y2 in the image's pixels).
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

// A detector's line: its path, then each detection scoring min_score or more.
void print_detections(const vision::Prediction& p, const vision::Predictor& predictor, double min_score) {
  const auto& found = p.detections;
  std::cout << p.path << ":";
  int shown = 0;
  for (int64_t i = 0; i < found.scores.size(0); ++i) {
    if (found.scores[i].item<double>() < min_score) continue;
    const auto box = found.boxes[i];
    std::cout << (shown++ ? ", " : " ") << predictor.label(found.labels[i].item<int64_t>()) << " " << std::fixed
              << std::setprecision(4) << found.scores[i].item<double>() << std::setprecision(1) << " ["
              << box[0].item<double>() << " " << box[1].item<double>() << " " << box[2].item<double>() << " "
              << box[3].item<double>() << "]";
  }
  std::cout << (shown ? "" : " nothing") << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, masks;
  std::vector<std::string> inputs;
  int64_t top = 3, bs = 64;
  int workers = 2;
  double min_score = 0.5;
  CommandLine cli("predict", "Classifies, segments or finds objects in image files with an exported model (Learner::export_learner), "
                             "without the training data: a line per image with its top classes, with a "
                             "segmentation model each class's share of the pixels, with a detector its "
                             "detections.");
  cli.argument("MODEL", model, "the exported model (.pt)").required();
  cli.arguments("IMAGES", inputs, "image files or folders").required();
  cli.flag("--top", top, "classes printed per image").range(1, 1 << 20);
  cli.flag("--bs", bs, "images per batch").range(1, 1 << 20);
  cli.flag("--workers", workers, "threads decoding images").range(0, 4096);
  cli.flag("--masks", masks, "a segmentation model's masks as PNGs into this folder (a colour per class)");
  cli.flag("--min-score", min_score, "a detector's detections printed: those scoring this or more").range(0.0, 1.0);
  cli.example("predict image_folder/export.pt photo.jpg more_photos/");
  cli.example("predict segmentation/export.pt segmentation_data/images --masks masks");
  cli.example("predict detection/export.pt photo.jpg --min-score 0.3");
  cli.parse(argc, argv);
  try {
    const auto predictor = vision::load_learner(model, {.workers = workers});
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto predictions = std::filesystem::is_directory(inputs[i]) ? predictor.predict_folder(inputs[i], bs)
                                                                         : std::vector{predictor.predict(inputs[i])};
      for (const auto& p : predictions) {
        if (p.detections.boxes.defined()) {
          print_detections(p, predictor, min_score);
          continue;
        }
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
