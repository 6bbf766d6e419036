// Trains a small residual convolutional network on Fashion-MNIST with the one-cycle policy.
//
//   fashion_mnist [--epochs 5] [--bs 128] [--lr 1e-2] [--threads N] [--data DIR] [--seed 42]
//                 [--precision fp32|bf16|fp16]   (fp16 needs a GPU; bf16 runs on the CPU too)
//                 [--parallel all|DEVICE,DEVICE...]  (to_parallel: every GPU, or e.g. cuda:0,cuda:1 or cpu,cpu)
//                 [--memory-format channels-last|contiguous]  (channels-last by default: oneDNN's CPU
//                  convolutions, like cuDNN's tensor-core ones, are fastest in NHWC; an epoch on
//                  2 cores is ~15% shorter)
//
// The data are the idx files that Debian's dataset-fashion-mnist package installs.
// Prints the epoch table (with a live progress bar on a terminal) and the final test
// accuracy; saves the model to fashion_mnist.pt and the loss curve to
// fashion_mnist_loss.png.
#include <fastcpp.h>

#include "fashion_model.h"

#include <filesystem>
#include <iostream>
#include <string>
#include <thread>

using namespace fastcpp;

int main(int argc, char** argv) {
  int epochs = 5, seed = 42, threads = static_cast<int>(std::thread::hardware_concurrency());
  int64_t bs = 128;
  double lr = 1e-2;
  std::string data = "/usr/share/datasets/fashion-mnist", precision = "fp32", parallel, memory_format = "channels-last";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--epochs") epochs = std::stoi(value);
    else if (flag == "--bs") bs = std::stoll(value);
    else if (flag == "--lr") lr = std::stod(value);
    else if (flag == "--threads") threads = std::stoi(value);
    else if (flag == "--seed") seed = std::stoi(value);
    else if (flag == "--data") data = value;
    else if (flag == "--precision") precision = value;
    else if (flag == "--parallel") parallel = value;
    else if (flag == "--memory-format") memory_format = value;
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
  torch::manual_seed(seed);  // the initial weights

  try {
    // Images stay uint8 in memory; each batch becomes float and is normalized on its device.
    const std::vector<BatchTransform> tfms{Normalize{{0.2860}, {0.3530}}};
    DataLoaders dls{DataLoader(vision::idx_image_dataset(data, "train"), {.bs = bs, .shuffle = true, .seed = static_cast<uint64_t>(seed), .batch_tfms = tfms}),
                    DataLoader(vision::idx_image_dataset(data, "t10k"), {.bs = 2 * bs, .batch_tfms = tfms})};

    Learner learn(dls, make_model(), CrossEntropyLoss(), {metrics::accuracy()});
    if (precision == "bf16") learn.to_bf16();
    if (precision == "fp16") learn.to_fp16();
    if (memory_format == "channels-last") learn.to_channels_last();
    else if (memory_format != "contiguous") {
      std::cerr << "unknown --memory-format " << memory_format << " (channels-last or contiguous)\n";
      return 2;
    }
    if (!parallel.empty()) learn.to_parallel(parse_devices(parallel));
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
