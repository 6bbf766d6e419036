// Trains a ResNet-18 (CIFAR stem) on CIFAR-10 with pad-crop-flip augmentation.
//
//   cifar [--data DIR] [--folder DIR] [--epochs 10] [--bs 128] [--lr 1e-2] [--width 64] [--threads N]
//         [--out cifar]
//   (cifar --help says more)
//
// --data: the binary version of CIFAR-10 (data_batch_1.bin ... test_batch.bin, from
//   cifar-10-binary.tar.gz at https://www.cs.toronto.edu/~kriz/cifar.html; nothing is
//   downloaded here). Its images are exported once to an image folder beside it
//   (DIR-folder) and read from there, so augmentation runs on the loader's workers.
// --folder: train on an ImageFolder tree instead (train/ and valid/), e.g. one made by
//   export_image_folder. Images are resized to 32 px.
// Writes model.pt, show_batch.png and show_results.png in --out.
#include <fastcpp.h>

#include "output_folder.h"

#include <filesystem>
#include <iostream>

using namespace fastcpp;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::string data = "cifar-10-batches-bin", folder, out = "cifar";
  int epochs = 10, threads = usable_cores();
  int64_t bs = 128, width = 64;
  double lr = 1e-2;
  CommandLine cli("cifar", "Trains a ResNet-18 (CIFAR stem) on CIFAR-10 with pad-crop-flip augmentation. --data: "
                           "CIFAR-10's binary batches (cifar-10-binary.tar.gz, extracted; nothing is downloaded), "
                           "exported once to an image folder beside them; --folder: an ImageFolder tree (train/, "
                           "valid/) instead, resized to 32 px.");
  cli.flag("--data", data, "the folder of data_batch_1.bin ... test_batch.bin");
  cli.flag("--folder", folder, "an image folder tree to train on instead");
  cli.flag("--epochs", epochs, "epochs to train").range(0, 100000);
  cli.flag("--bs", bs, "batch size").range(1, 1 << 20);
  cli.flag("--lr", lr, "peak learning rate").range(0, 1e3);
  cli.flag("--width", width, "the ResNet's width (64: ResNet-18)").range(1, 4096);
  cli.flag("--threads", threads, "CPU threads").range(1, 4096);
  cli.flag("--out", out, "the folder it writes its files in");
  cli.example("cifar --data cifar-10-batches-bin --epochs 1");
  cli.parse(argc, argv);
  torch::set_num_threads(threads);
  torch::manual_seed(42);

  try {
    if (folder.empty()) {
      if (!fs::exists(fs::path(data) / "data_batch_1.bin")) {
        std::cerr << "CIFAR-10 binary batches not found in '" << data << "' (data_batch_1.bin ... test_batch.bin).\n"
                  << "Extract cifar-10-binary.tar.gz (https://www.cs.toronto.edu/~kriz/cifar.html) and pass --data DIR,\n"
                  << "or pass --folder with an image folder tree (e.g. export_image_folder fashion-mnist OUT).\n";
        return 1;
      }
      folder = data + "-folder";
      if (!fs::exists(folder + "/valid")) {
        std::cout << "exporting CIFAR-10 to " << folder << " (once)\n";
        const auto vocab = vision::cifar_vocab(data);
        vision::export_image_folder(*vision::cifar_dataset(data, true), vocab, folder + "/train");
        vision::export_image_folder(*vision::cifar_dataset(data, false), vocab, folder + "/valid");
      }
    }

    const OutputFolder output(out);
    // Pad by 4, crop 32 at random, flip: the classic CIFAR augmentation.
    const std::vector<vision::ItemTransform> tfms{vision::Resize(32), vision::RandomCrop(32, 4), vision::FlipItem()};
    const auto normalize = Normalize::from_data(vision::ImageFolder::scan(folder + "/train", {.item_tfms = {vision::Resize(32)}}));
    auto dls = vision::ImageDataLoaders::from_folder(folder, {.bs = bs, .item_tfms = tfms,
                                                              .batch_tfms = {normalize}});

    vision::show_batch(dls, output("show_batch.png"));  // what the model will see
    auto learn = vision::vision_learner(dls, vision::resnet18, {metrics::accuracy()},
                                        {.stem = vision::Stem::cifar, .width = width});
    learn.fit_one_cycle(epochs, lr);
    auto results = learn.recorder->valid_values();  // the fit's last validation
    if (results.size() < 2) results = learn.validate();  // no epoch trained
    std::printf("final test accuracy: %.4f\n", results[1]);
    learn.save(output("model.pt"));
    vision::show_results(learn, output("show_results.png"));  // target/prediction, red where wrong
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
