// Exports Fashion-MNIST (idx files) or CIFAR-10 (binary batches) as an image folder
// tree that ImageDataLoaders::from_folder reads: OUT/train/<class>/*.png and
// OUT/valid/<class>/*.png.
//
//   export_image_folder fashion-mnist [/usr/share/datasets/fashion-mnist] OUT
//   export_image_folder cifar10 CIFAR_DIR OUT
#include <fastcpp.h>

#include <iostream>

using namespace fastcpp;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: export_image_folder fashion-mnist [DIR] OUT | cifar10 DIR OUT\n";
    return 2;
  }
  const std::string kind = argv[1];
  const std::string out = argv[argc - 1];
  try {
    if (kind == "fashion-mnist") {
      const std::string dir = argc > 3 ? argv[2] : vision::fashion_mnist_dir();
      const std::vector<std::string> vocab{"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                           "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
      vision::export_image_folder(*vision::idx_image_dataset(dir, "train"), vocab, out + "/train");
      vision::export_image_folder(*vision::idx_image_dataset(dir, "t10k"), vocab, out + "/valid");
    } else if (kind == "cifar10" && argc > 3) {
      const std::string dir = argv[2];
      const auto vocab = vision::cifar_vocab(dir);
      vision::export_image_folder(*vision::cifar_dataset(dir, true), vocab, out + "/train");
      vision::export_image_folder(*vision::cifar_dataset(dir, false), vocab, out + "/valid");
    } else {
      std::cerr << "unknown dataset '" << kind << "'\n";
      return 2;
    }
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  std::cout << "wrote " << out << "/train and " << out << "/valid\n";
}
