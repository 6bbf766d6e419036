// Trains a ResNet (or XResNet) classifier on any image folder tree:
//   ROOT/train/<class>/*.png|jpg   and   ROOT/valid/<class>/*
// or ROOT/<class>/* (then a random 20% is the validation set).
//
//   image_folder ROOT [--arch resnet18|resnet34|resnet50|resnet101|xresnet18|...|xresnet101]
//                [--epochs 5] [--bs 64] [--lr 1e-3] [--size 224] [--aug rrc|pad-crop] [--channels 3]
//                [--stem imagenet|cifar] [--width 64] [--weights FILE.pth]
//                [--precision fp32|bf16|fp16] [--memory-format contiguous|channels-last]
//                [--label-smoothing 0.1] [--tta 4] [--load MODEL.pt] [--threads N]
//
// With --weights (a torchvision state dict of the same architecture, e.g. saved in
// Python with torch.save(torchvision.models.resnet34(weights=...).state_dict(), path))
// it fine-tunes: the head first with the body frozen, then everything with
// discriminative lrs. Without, it trains from scratch with the one-cycle policy.
// Prints the model summary, the epoch table and the confusion matrix, and writes
// image_folder.pt (the trained model), image_folder_export.pt (the model with its
// classes and transforms, for examples/predict), confusion_matrix.png and top_losses.png.
// --tta N adds the accuracy with test-time augmentation (N augmented passes);
// --load MODEL.pt --epochs 0 evaluates a saved model without training.
// bf16 with channels-last halves the time of an epoch on CPUs with AVX512-BF16.
//
// For small images (Fashion-MNIST exported by export_image_folder, CIFAR) use
// --size 28 or 32 --aug pad-crop --stem cifar; add --channels 1 for grey images.
#include <fastcpp.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <thread>

using namespace fastcpp;

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]).rfind("--", 0) == 0) {
    std::cerr << "usage: image_folder ROOT [--arch resnet34] [--epochs 5] [--weights FILE.pth] ... (see the source)\n";
    return 2;
  }
  const std::string root = argv[1];
  std::map<std::string, std::string> flags{{"--arch", "resnet34"}, {"--epochs", "5"},  {"--bs", "64"},
                                           {"--lr", "1e-3"},       {"--size", "224"},  {"--aug", "rrc"},
                                           {"--channels", "3"},    {"--stem", "imagenet"}, {"--width", "64"},
                                           {"--weights", ""},      {"--precision", "fp32"}, {"--memory-format", "contiguous"},
                                           {"--label-smoothing", "0"}, {"--tta", "0"}, {"--load", ""},
                                           {"--threads", std::to_string(std::thread::hardware_concurrency())}};
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!flags.count(argv[i])) {
      std::cerr << "unknown flag " << argv[i] << "\n";
      return 2;
    }
    flags[argv[i]] = argv[i + 1];
  }
  torch::set_num_threads(std::stoi(flags["--threads"]));
  torch::manual_seed(42);

  try {
    const int size = std::stoi(flags["--size"]), channels = std::stoi(flags["--channels"]);
    // Training items are augmented: a random crop of the padded image (small images) or
    // torchvision's RandomResizedCrop (photos), and a horizontal flip. Validation items get
    // the deterministic version of the same transforms (a centre crop, no flip).
    std::vector<vision::ItemTransform> tfms;
    if (flags["--aug"] == "pad-crop") tfms = {vision::RandomCrop(size, size / 8), vision::FlipItem()};
    else tfms = {vision::RandomResizedCrop(size), vision::FlipItem()};
    const bool has_split = std::filesystem::exists(root + "/train");
    // Per-channel mean and standard deviation from (up to 2048) training images, resized alike.
    const auto normalize = Normalize::from_data(
        vision::ImageFolder::scan(has_split ? root + "/train" : root, {.channels = channels, .item_tfms = {vision::Resize(size)}}));
    auto dls = vision::ImageDataLoaders::from_folder(root, {.valid_pct = has_split ? 0.0 : 0.2,
                                                            .bs = std::stoll(flags["--bs"]), .channels = channels,
                                                            .item_tfms = tfms, .batch_tfms = {normalize}});

    const auto stem = flags["--stem"] == "cifar" ? vision::Stem::cifar : vision::Stem::imagenet;
    auto learn = vision::vision_learner(dls, vision::Arch::named(flags["--arch"]), {metrics::accuracy()},
                                        {.pretrained_weights = flags["--weights"], .in_channels = channels,
                                         .stem = stem, .width = std::stoll(flags["--width"]),
                                         .loss_func = CrossEntropyLoss({.label_smoothing = std::stod(flags["--label-smoothing"])})});
    if (!flags["--load"].empty()) learn.load(flags["--load"], /*with_opt=*/false);
    std::cout << learn.summary() << "\n";
    if (flags["--precision"] == "fp16") learn.to_fp16();
    if (flags["--precision"] == "bf16") learn.to_bf16();
    if (flags["--memory-format"] == "channels-last") learn.to_channels_last();

    const int epochs = std::stoi(flags["--epochs"]);
    const double lr = std::stod(flags["--lr"]);
    if (epochs > 0) {
      if (flags["--weights"].empty()) learn.fit_one_cycle(epochs, lr);
      else learn.fine_tune(epochs, {.base_lr = lr});
      learn.save("image_folder.pt", /*with_opt=*/false);
    }
    // For inference without the data: build/examples/predict image_folder_export.pt IMAGE...
    learn.export_learner("image_folder_export.pt");

    auto interp = vision::ClassificationInterpretation::from_learner(learn);
    std::cout << interp.confusion_matrix_text() << "\n" << interp.top_losses_text(5);
    interp.plot_confusion_matrix("confusion_matrix.png");
    interp.plot_top_losses(9, "top_losses.png");
    std::printf("final valid accuracy: %.4f\n", learn.validate()[1]);
    if (const int passes = std::stoi(flags["--tta"]); passes > 0) {
      // The valid items with the training transforms, `passes` times, blended with the plain pass.
      const auto tta = learn.tta({.n = passes});
      std::printf("valid accuracy with test-time augmentation (%d passes): %.4f\n", passes,
                  metrics::accuracy_fn(tta.preds, tta.targets).item<double>());
    }
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
