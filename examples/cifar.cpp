// Trains a ResNet-18 (CIFAR stem) on CIFAR-10 with pad-crop-flip augmentation.
//
//   cifar [--data DIR] [--folder DIR] [--epochs 10] [--bs 128] [--lr 1e-2] [--width 64] [--threads N]
//
// --data: the binary version of CIFAR-10 (data_batch_1.bin ... test_batch.bin, from
//   cifar-10-binary.tar.gz at https://www.cs.toronto.edu/~kriz/cifar.html; nothing is
//   downloaded here). Its images are exported once to an image folder beside it
//   (DIR-folder) and read from there, so augmentation runs on the loader's workers.
// --folder: train on an ImageFolder tree instead (train/ and valid/), e.g. one made by
//   export_image_folder. Images are resized to 32 px.
#include <fastcpp.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <thread>

using namespace fastcpp;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags{{"--data", "cifar-10-batches-bin"}, {"--folder", ""}, {"--epochs", "10"},
                                           {"--bs", "128"}, {"--lr", "1e-2"}, {"--width", "64"},
                                           {"--threads", std::to_string(std::thread::hardware_concurrency())}};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!flags.count(argv[i])) {
      std::cerr << "unknown flag " << argv[i] << "\n";
      return 2;
    }
    flags[argv[i]] = argv[i + 1];
  }
  torch::set_num_threads(std::stoi(flags["--threads"]));
  torch::manual_seed(42);

  try {
    std::string folder = flags["--folder"];
    if (folder.empty()) {
      const auto data = flags["--data"];
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

    // Pad by 4, crop 32 at random, flip: the classic CIFAR augmentation.
    const std::vector<vision::ItemTransform> tfms{vision::Resize(32), vision::RandomCrop(32, 4), vision::FlipItem()};
    const auto normalize = Normalize::from_data(vision::ImageFolder::scan(folder + "/train", {.item_tfms = {vision::Resize(32)}}));
    auto dls = vision::ImageDataLoaders::from_folder(folder, {.bs = std::stoll(flags["--bs"]), .item_tfms = tfms,
                                                              .batch_tfms = {normalize}});

    auto learn = vision::vision_learner(dls, vision::resnet18, {metrics::accuracy()},
                                        {.stem = vision::Stem::cifar, .width = std::stoll(flags["--width"])});
    learn.fit_one_cycle(std::stoi(flags["--epochs"]), std::stod(flags["--lr"]));
    std::printf("final test accuracy: %.4f\n", learn.validate()[1]);
    learn.save("cifar_resnet18.pt");
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
