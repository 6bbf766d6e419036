// Classifies image files, segments them or finds objects in them, with an exported model
// (Learner::export_learner), without the training data:
//
//   predict MODEL IMAGE|FOLDER... [--top 3] [--bs 64] [--workers 2] [--masks DIR] [--min-score 0.5]
//
// e.g. with the model the image_folder example exports:
//   build/examples/predict image_folder/export.pt photo.jpg more_photos/
// prints a line per image: its path, then the top classes with their probabilities. With
// a segmentation model (the segmentation example's segmentation/export.pt): each image's
// share of pixels per class, and with --masks DIR the class masks as PNGs, a colour per
// class (DIR/<the image's path in the folder given, or its name>.png; two images that
// would write one file, a.jpg and a.png, are an error, not an overwrite). With a
// detector (the detection example's detection/export.pt): each detection scoring
// --min-score or more, as its class, score and box (x1 y1 x2 y2 in the image's pixels).
#include <fastcpp.h>

#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>

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

// Where an image's mask goes: under `dir` at the image's path within the folder given
// (its file name for a file given), as a PNG.
std::string mask_file(const std::string& dir, const std::string& input, const std::string& image) {
  namespace fs = std::filesystem;
  const auto within = fs::is_directory(input) ? fs::path(image).lexically_relative(input) : fs::path(image).filename();
  return (fs::path(dir) / within).replace_extension(".png").string();
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
    std::map<std::string, std::string> mask_sources;  // each mask file written, and its image
    const auto show = [&](const vision::Prediction& p, const std::string& input) {
      if (p.detections.boxes.defined()) return print_detections(p, predictor, min_score);
      if (p.mask.defined()) {
        print_mask_shares(p, predictor);
        if (masks.empty()) return;
        const auto file = mask_file(masks, input, p.path);
        if (const auto [it, added] = mask_sources.emplace(file, p.path); !added)
          throw Error("--masks: " + it->second + " and " + p.path + " would both write " + file);
        std::filesystem::create_directories(std::filesystem::path(file).parent_path());
        return vision::write_mask_png(file, p.mask);
      }
      if (p.index < 0) {  // a regression model's values
        std::cout << p.path << ": " << p.label << "\n";
        return;
      }
      const auto [probs, indices] = p.probs.topk(std::min<int64_t>(top, p.probs.numel()));
      std::cout << p.path << ":";
      for (int64_t j = 0; j < probs.numel(); ++j)
        std::cout << (j ? ", " : " ") << predictor.label(indices[j].item<int64_t>()) << " " << std::fixed
                  << std::setprecision(4) << probs[j].item<double>();
      std::cout << "\n";
    };
    for (const auto& input : inputs) {
      // A folder's predictions are shown as they come: none is kept (a mask's probabilities are large).
      if (std::filesystem::is_directory(input))
        predictor.predict_folder(input, bs, [&](vision::Prediction p) { show(p, input); });
      else
        show(predictor.predict(input), input);
    }
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
