// Trains a small convolutional network on Fashion-MNIST with the one-cycle policy.
//
//   fashion_mnist [--epochs 5] [--bs 128] [--lr 1e-2] [--threads N] [--data DIR]
//
// The data are the idx files that Debian's dataset-fashion-mnist package installs.
// Prints the epoch table (with a live progress bar on a terminal) and the final test
// accuracy; saves the model to fashion_mnist.pt and the loss curve to
// fashion_mnist_loss.png.
#include <fastcpp.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <thread>

using namespace fastcpp;

// conv 3x3 -> BatchNorm -> ReLU; stride 2 halves the resolution.
void conv_bn(torch::nn::Sequential& net, int64_t in, int64_t out, int64_t stride) {
  net->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)));
  net->push_back(torch::nn::BatchNorm2d(out));
  net->push_back(torch::nn::ReLU());
}

torch::nn::Sequential make_model() {
  torch::nn::Sequential net;
  conv_bn(net, 1, 32, 1);    // 28x28
  conv_bn(net, 32, 32, 1);
  conv_bn(net, 32, 64, 2);   // 14x14
  conv_bn(net, 64, 64, 1);
  conv_bn(net, 64, 128, 2);  // 7x7
  net->push_back(torch::nn::AdaptiveAvgPool2d(1));
  net->push_back(torch::nn::Flatten());
  net->push_back(torch::nn::Linear(128, 10));
  return net;
}

int main(int argc, char** argv) {
  int epochs = 5, threads = static_cast<int>(std::thread::hardware_concurrency());
  int64_t bs = 128;
  double lr = 1e-2;
  std::string data = "/usr/share/datasets/fashion-mnist";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--epochs") epochs = std::stoi(value);
    else if (flag == "--bs") bs = std::stoll(value);
    else if (flag == "--lr") lr = std::stod(value);
    else if (flag == "--threads") threads = std::stoi(value);
    else if (flag == "--data") data = value;
    else {
      std::cerr << "unknown flag " << flag << "\n";
      return 2;
    }
  }
  if (!std::filesystem::exists(data)) {
    std::cerr << "Fashion-MNIST not found in " << data << ".\n"
              << "Install it with: sudo apt-get install dataset-fashion-mnist (or pass --data DIR)\n";
    return 1;
  }
  torch::set_num_threads(threads);
  torch::manual_seed(42);

  try {
    // Images stay uint8 in memory; each batch becomes float and is normalized on its device.
    const std::vector<BatchTransform> tfms{Normalize{{0.2860}, {0.3530}}};
    DataLoaders dls{DataLoader(vision::idx_image_dataset(data, "train"), {.bs = bs, .shuffle = true, .seed = 42, .batch_tfms = tfms}),
                    DataLoader(vision::idx_image_dataset(data, "t10k"), {.bs = 2 * bs, .batch_tfms = tfms})};

    Learner learn(dls, make_model(), CrossEntropyLoss(), {metrics::accuracy()});
    learn.fit_one_cycle(epochs, lr);

    const auto results = learn.validate();  // [valid_loss, accuracy]
    std::printf("final test accuracy: %.4f\n", results[1]);
    learn.save("fashion_mnist.pt");
    learn.recorder->plot_loss("fashion_mnist_loss.png");
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
