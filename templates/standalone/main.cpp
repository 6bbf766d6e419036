// A complete training program: a small CNN on Fashion-MNIST with the one-cycle policy.
//   train [--epochs 3] [--data DIR]   (train --help; the data default: $FASTCPP_FASHION_MNIST or
//                                      /usr/share/datasets/fashion-mnist)
#include <fastcpp.h>

#include <cstdio>
#include <string>

using namespace fastcpp;

int main(int argc, char** argv) try {
  int epochs = 3;
  std::string data = vision::fashion_mnist_dir();
  CommandLine cli("train", "A small CNN on Fashion-MNIST with the one-cycle policy.");
  cli.flag("--epochs", epochs, "epochs to train").range(0, 100000);
  cli.flag("--data", data, "the folder of Fashion-MNIST's idx files");
  cli.parse(argc, argv);
  const std::vector<BatchTransform> tfms{Normalize{{0.2860}, {0.3530}}};
  DataLoaders dls{DataLoader(vision::idx_image_dataset(data, "train"), {.bs = 128, .shuffle = true, .batch_tfms = tfms}),
                  DataLoader(vision::idx_image_dataset(data, "t10k"), {.bs = 256, .batch_tfms = tfms})};
  auto conv = [](int64_t in, int64_t out) {
    return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(2).padding(1).bias(false));
  };
  torch::nn::Sequential model(conv(1, 16), torch::nn::BatchNorm2d(16), torch::nn::ReLU(), conv(16, 32),
                              torch::nn::BatchNorm2d(32), torch::nn::ReLU(), conv(32, 64), torch::nn::BatchNorm2d(64),
                              torch::nn::ReLU(), torch::nn::AdaptiveAvgPool2d(1), torch::nn::Flatten(),
                              torch::nn::Linear(64, 10));
  Learner learn(dls, model, CrossEntropyLoss(), {metrics::accuracy()});
  learn.fit_one_cycle(epochs, 1e-2);
  std::printf("final accuracy: %.4f\n", learn.validate()[1]);
} catch (const Error& e) {  // bad input (a missing data folder, say): the message names what and where
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
