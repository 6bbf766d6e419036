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
  std::string kind;
  std::vector<std::string> paths;
  CommandLine cli("export_image_folder",
                  "Exports Fashion-MNIST (idx files) or CIFAR-10 (binary batches) as an image folder tree for "
                  "ImageDataLoaders::from_folder: OUT/train/<class>/*.png and OUT/valid/<class>/*.png.");
  cli.argument("DATASET", kind, "fashion-mnist or cifar10").choices({"fashion-mnist", "cifar10"}).required();
  cli.arguments("PATHS", paths, "[DIR] OUT: the dataset's folder (optional for fashion-mnist), then the tree's")
      .required();
  cli.example("export_image_folder fashion-mnist fashion_folder");
  cli.example("export_image_folder cifar10 cifar-10-batches-bin cifar_folder");
  cli.parse(argc, argv);
  if (paths.size() > 2 || (kind == "cifar10" && paths.size() != 2)) {
    std::cerr << "export_image_folder: " << kind << " takes " << (kind == "cifar10" ? "DIR OUT" : "[DIR] OUT")
              << ", got " << paths.size() << " paths\n";
    return 2;
  }
  const std::string out = paths.back();
  try {
    if (kind == "fashion-mnist") {
      const std::string dir = paths.size() == 2 ? paths[0] : vision::fashion_mnist_dir();
      const auto& vocab = vision::fashion_mnist_vocab();
      vision::export_image_folder(*vision::idx_image_dataset(dir, "train"), vocab, out + "/train");
      vision::export_image_folder(*vision::idx_image_dataset(dir, "t10k"), vocab, out + "/valid");
    } else {
      const std::string dir = paths[0];
      const auto vocab = vision::cifar_vocab(dir);
      vision::export_image_folder(*vision::cifar_dataset(dir, true), vocab, out + "/train");
      vision::export_image_folder(*vision::cifar_dataset(dir, false), vocab, out + "/valid");
    }
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  std::cout << "wrote " << out << "/train and " << out << "/valid\n";
}
