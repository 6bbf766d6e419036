// Trains a ResNet (or XResNet) classifier on any image folder tree:
//   ROOT/train/<class>/*.png|jpg   and   ROOT/valid/<class>/*
// or ROOT/<class>/* (then a random 20% is the validation set).
//
//   image_folder ROOT [--arch resnet34] [--epochs 5] [--weights FILE.pth] ...  (image_folder --help)
//
// With --weights (a torchvision state dict of the same architecture, e.g. saved in
// Python with torch.save(torchvision.models.resnet34(weights=...).state_dict(), path))
// it fine-tunes: the head first with the body frozen, then everything with
// discriminative lrs. Without, it trains from scratch with the one-cycle policy.
// Prints the model summary, the epoch table and the confusion matrix, and writes in
// image_folder/ (--out): model.pt (the trained model), export.pt (the model with its
// classes and transforms, for examples/predict), confusion_matrix.png, top_losses.png,
// show_batch.png and show_results.png.
// --decode device decodes the JPEGs on the training device (nvJPEG on a GPU) and crops
// them there, and says which decoder ran; --batch-aug fastai adds fastai's aug_transforms
// on each training batch, --random-erasing P fastai's RandomErasing.
// --tta N adds the accuracy with test-time augmentation (N augmented passes);
// --load MODEL.pt --epochs 0 evaluates a saved model without training.
// bf16 with channels-last halves the time of an epoch on CPUs with AVX512-BF16.
//
// For small images (Fashion-MNIST exported by export_image_folder, CIFAR) use
// --size 28 or 32 --aug pad-crop --stem cifar; add --channels 1 for grey images.
#include <fastcpp.h>

#include "output_folder.h"

#include <filesystem>
#include <iostream>

using namespace fastcpp;

int main(int argc, char** argv) {
  std::string root, arch = "resnet34", aug = "rrc", batch_aug = "none", decode = "cpu", stem = "imagenet", weights, precision = "fp32",
                    memory_format = "contiguous", load, out = "image_folder";
  int epochs = 5, size = 224, channels = 3, tta = 0, threads = usable_cores();
  int64_t bs = 64, width = 64;
  double lr = 1e-3, label_smoothing = 0, erasing = 0;
  CommandLine cli("image_folder",
                  "Trains a ResNet or XResNet classifier on an image folder tree (ROOT/train/<class>/*, "
                  "ROOT/valid/<class>/*, or ROOT/<class>/* with a random 20% for validation): from scratch with the "
                  "one-cycle policy, or fine-tuned from --weights. Prints the summary, the epoch table and the "
                  "confusion matrix; writes show_batch.png, model.pt, export.pt (for predict), confusion_matrix.png, "
                  "top_losses.png and show_results.png in --out.");
  cli.argument("ROOT", root, "the image folder tree").required();
  cli.flag("--arch", arch, "resnet18|34|50|101, xresnet18|34|50|101");
  cli.flag("--epochs", epochs, "epochs to train (0 with --load: evaluate only)").range(0, 100000);
  cli.flag("--bs", bs, "batch size").range(1, 1 << 20);
  cli.flag("--lr", lr, "learning rate (peak, or fine_tune's base)").range(0, 1e3);
  cli.flag("--size", size, "image side after the crop").range(1, 1 << 16);
  cli.flag("--aug", aug, "rrc: RandomResizedCrop (photos); pad-crop: padded random crop (small images)")
      .choices({"rrc", "pad-crop"});
  cli.flag("--batch-aug", batch_aug,
           "fastai: fastai's aug_transforms on each training batch, on its device (flip, rotate, zoom, warp, "
           "lighting; in place of the item flip)")
      .choices({"none", "fastai"});
  cli.flag("--random-erasing", erasing, "the chance of each training image getting a rectangle of noise (fastai's "
                                        "RandomErasing, after Normalize); 0: none")
      .range(0.0, 1.0);
  cli.flag("--decode", decode,
           "device: JPEGs decoded, cropped and resized on the training device (nvJPEG on a GPU), the crops drawn "
           "as on the CPU")
      .choices({"cpu", "device"});
  cli.flag("--channels", channels, "1 for grey images").range(1, 3);
  cli.flag("--stem", stem, "cifar: no stride in the stem (small images)").choices({"imagenet", "cifar"});
  cli.flag("--width", width, "the ResNet's width").range(1, 4096);
  cli.flag("--weights", weights, "a torchvision state dict of --arch: fine-tune from it");
  cli.flag("--precision", precision, "fp16 needs a GPU").choices({"fp32", "bf16", "fp16"});
  cli.flag("--memory-format", memory_format, "memory layout").choices({"contiguous", "channels-last"});
  cli.flag("--label-smoothing", label_smoothing, "CrossEntropyLoss's label smoothing").range(0, 1);
  cli.flag("--tta", tta, "also the accuracy with N test-time-augmented passes").range(0, 1000);
  cli.flag("--load", load, "a saved model (image_folder/model.pt) to start from");
  cli.flag("--out", out, "the folder it writes its files in");
  cli.flag("--threads", threads, "CPU threads").range(1, 4096);
  cli.example("image_folder fashion_folder --size 28 --aug pad-crop --stem cifar --channels 1 --epochs 1");
  cli.parse(argc, argv);
  torch::set_num_threads(threads);
  torch::manual_seed(42);

  try {
    const OutputFolder output(out);
    // Training items are augmented: a random crop of the padded image (small images) or
    // torchvision's RandomResizedCrop (photos), and a horizontal flip. Validation items get
    // the deterministic version of the same transforms (a centre crop, no flip).
    // With --batch-aug fastai, the batch is flipped, rotated, zoomed, warped and lit on
    // its device instead (fastai's aug_transforms), after the crop.
    std::vector<vision::ItemTransform> tfms;
    if (aug == "pad-crop") tfms = {vision::RandomCrop(size, size / 8)};
    else tfms = {vision::RandomResizedCrop(size)};
    std::vector<BatchAugmentPtr> batch_augs;
    if (batch_aug == "fastai") batch_augs = {vision::aug_transforms()};
    else tfms.push_back(vision::FlipItem());
    if (erasing > 0) batch_augs.push_back(vision::random_erasing({.p = erasing}));
    const bool has_split = std::filesystem::exists(root + "/train");
    // Pretrained weights on RGB images take ImageNet's statistics, which vision_learner adds
    // (fastai's normalize); otherwise each channel's mean and standard deviation from (up
    // to 2048) training images, resized alike.
    std::vector<BatchTransform> normalize;
    if (weights.empty() || channels != 3)
      normalize = {Normalize::from_data(vision::ImageFolder::scan(
          has_split ? root + "/train" : root, {.channels = channels, .item_tfms = {vision::Resize(size)}}))};
    auto dls = vision::ImageDataLoaders::from_folder(root, {.valid_pct = has_split ? 0.0 : 0.2,
                                                            .bs = bs, .channels = channels,
                                                            .item_tfms = tfms, .batch_tfms = normalize,
                                                            .aug_tfms = batch_augs,
                                                            .decode = decode == "device" ? vision::Decode::Device
                                                                                         : vision::Decode::Cpu});

    const auto stem_kind = stem == "cifar" ? vision::Stem::cifar : vision::Stem::imagenet;
    vision::show_batch(dls, output("show_batch.png"));  // what the model will see
    auto learn = vision::vision_learner(dls, vision::Arch::named(arch), {metrics::accuracy()},
                                        {.pretrained_weights = weights, .in_channels = channels,
                                         .stem = stem_kind, .width = width,
                                         .loss_func = CrossEntropyLoss({.label_smoothing = label_smoothing})});
    if (!load.empty()) learn.load(load, /*with_opt=*/false);
    std::cout << learn.summary() << "\n";
    if (decode == "device")  // JPEGs the device cannot take still go the CPU path, file by file
      std::printf("JPEG decoding on %s: %s\n", learn.dls.train.device().str().c_str(),
                  vision::device_decoder_name(learn.dls.train.device()).c_str());
    if (precision == "fp16") learn.to_fp16();
    if (precision == "bf16") learn.to_bf16();
    if (memory_format == "channels-last") learn.to_channels_last();

    if (epochs > 0) {
      if (weights.empty()) learn.fit_one_cycle(epochs, lr);
      else learn.fine_tune(epochs, {.base_lr = lr});
      learn.save(output("model.pt"), /*with_opt=*/false);
    }
    auto results = learn.recorder->valid_values();  // the fit's last validation
    if (results.size() < 2) results = learn.validate();  // --epochs 0: evaluate the loaded model
    // For inference without the data: build/examples/predict image_folder/export.pt IMAGE...
    learn.export_learner(output("export.pt"));

    auto interp = vision::ClassificationInterpretation::from_learner(learn);
    std::cout << interp.confusion_matrix_text() << "\n" << interp.top_losses_text(5);
    interp.plot_confusion_matrix(output("confusion_matrix.png"));
    interp.plot_top_losses(9, output("top_losses.png"));
    vision::show_results(learn, output("show_results.png"));  // target/prediction, red where wrong
    std::printf("final valid accuracy: %.4f\n", results[1]);
    if (const int passes = tta; passes > 0) {
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
