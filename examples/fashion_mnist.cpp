// Trains a small residual convolutional network on Fashion-MNIST with the one-cycle policy.
//
//   fashion_mnist [--epochs 5] [--bs 128] [--lr 1e-2] [--threads N] [--data DIR]
//                 [--precision fp32|bf16|fp16]   (fp16 needs a GPU; bf16 runs on the CPU too)
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

torch::nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

// A residual block: two 3x3 convs with BatchNorm, plus a shortcut pooled and widened to match.
struct ResBlockImpl : torch::nn::Module {
  ResBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1(register_module("conv1", conv3x3(in, out, stride))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(out))),
        conv2(register_module("conv2", conv3x3(out, out, 1))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(out))) {
    if (stride != 1) pool = register_module("pool", torch::nn::AvgPool2d(torch::nn::AvgPool2dOptions(2).ceil_mode(true)));
    if (in != out) idconv = register_module("idconv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).bias(false)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto residual = bn2(conv2(torch::relu(bn1(conv1(x)))));
    auto shortcut = pool ? pool(x) : x;
    return torch::relu(residual + (idconv ? idconv(shortcut) : shortcut));
  }
  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::AvgPool2d pool{nullptr};
  torch::nn::Conv2d idconv{nullptr};
};
TORCH_MODULE(ResBlock);

torch::nn::Sequential make_model() {
  return torch::nn::Sequential(conv3x3(1, 16, 1), torch::nn::BatchNorm2d(16), torch::nn::ReLU(),  // 28x28
                               ResBlock(16, 32, 2),                                                 // 14x14
                               ResBlock(32, 64, 2),                                                 // 7x7
                               ResBlock(64, 128, 2),                                                // 4x4
                               ResBlock(128, 256, 2),                                               // 2x2
                               torch::nn::AdaptiveAvgPool2d(1), torch::nn::Flatten(), torch::nn::Linear(256, 10));
}

int main(int argc, char** argv) {
  int epochs = 5, threads = static_cast<int>(std::thread::hardware_concurrency());
  int64_t bs = 128;
  double lr = 1e-2;
  std::string data = "/usr/share/datasets/fashion-mnist", precision = "fp32";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--epochs") epochs = std::stoi(value);
    else if (flag == "--bs") bs = std::stoll(value);
    else if (flag == "--lr") lr = std::stod(value);
    else if (flag == "--threads") threads = std::stoi(value);
    else if (flag == "--data") data = value;
    else if (flag == "--precision") precision = value;
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
    if (precision == "bf16") learn.to_bf16();
    if (precision == "fp16") learn.to_fp16();
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
