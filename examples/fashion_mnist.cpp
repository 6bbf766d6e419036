// Trains a small residual convolutional network on Fashion-MNIST with the one-cycle policy
// (fashion_mnist --help lists the flags). Channels-last by default: oneDNN's CPU
// convolutions, like cuDNN's tensor-core ones, are fastest in NHWC (an epoch on 2 cores is
// ~15% shorter).
//
// The data are the idx files that Debian's dataset-fashion-mnist package installs.
// Prints the epoch table (with a live progress bar on a terminal) and the final test
// accuracy; writes its files in fashion_mnist/ (--out): the model (model.pt), the loss
// curve (loss.png) and pictures of a batch and of the predictions.
#include <fastcpp.h>

#include "fashion_model.h"
#include "output_folder.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <iostream>
#include <string>

using namespace fastcpp;

// Where each epoch's time goes, printed after its row: waiting for the data loader
// (from one training batch's end to the next one's start), the training steps (and the
// first one's share: on a GPU it pays for loading the kernels and cuDNN's plans), and
// validation. On a GPU the step time is the host's share: it grows when the host
// waits for the GPU, and shrinks to the launch cost when the GPU keeps up.
class TimeSplit : public Callback {
 public:
  TimeSplit() { order = 70; }  // after the progress callback's row
  void before_train() override {
    data_ = step_ = first_step_ = 0;
    mark_ = Clock::now();
  }
  void before_batch() override {
    if (!learn().training) return;
    const auto now = Clock::now();
    data_ += seconds(mark_, now);
    mark_ = now;
  }
  void after_batch() override {
    if (!learn().training) return;
    const auto now = Clock::now();
    step_ += seconds(mark_, now);
    if (learn().iter == 0) first_step_ = step_;
    mark_ = now;
  }
  void before_validate() override { mark_ = Clock::now(); }
  void after_validate() override { validate_ = seconds(mark_, Clock::now()); }
  void after_epoch() override {
    std::printf("epoch %d time: data wait %.2f s, training steps %.2f s (the first %.3f s), validation %.2f s\n",
                learn().epoch, data_, step_, first_step_, validate_);
  }

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
  Clock::time_point mark_;
  double data_ = 0, step_ = 0, first_step_ = 0, validate_ = 0;
};

int main(int argc, char** argv) {
  int epochs = 5, seed = 42, threads = usable_cores();
  int64_t bs = 128;
  double lr = 1e-2;
  std::string data = vision::fashion_mnist_dir(), precision = "fp32", parallel, memory_format = "channels-last";
  std::string resident = "auto", time_split = "off", graphs = "off", profile = "off", out = "fashion_mnist";
  bool deterministic = false;
  CommandLine cli("fashion_mnist", "Trains a small residual net on Fashion-MNIST with the one-cycle policy; prints "
                                   "the epoch table and the test accuracy, writes model.pt, loss.png, "
                                   "show_batch.png and show_results.png in --out.");
  cli.flag("--epochs", epochs, "epochs to train").range(0, 100000);
  cli.flag("--bs", bs, "batch size").range(1, 1 << 20);
  cli.flag("--lr", lr, "peak learning rate of the one-cycle schedule").range(0, 1e3);
  cli.flag("--threads", threads, "CPU threads").range(1, 4096);
  cli.flag("--seed", seed, "seed of the weights and the shuffle");
  cli.flag("--data", data, "the folder of Fashion-MNIST's idx files");
  cli.flag("--precision", precision, "fp16 needs a GPU; bf16 runs on the CPU too").choices({"fp32", "bf16", "fp16"});
  cli.flag("--parallel", parallel, "to_parallel over these devices: all, or e.g. cuda:0,cuda:1 or cpu,cpu");
  cli.flag("--memory-format", memory_format, "channels-last: oneDNN's and cuDNN's fastest convolutions")
      .choices({"channels-last", "contiguous"});
  cli.flag("--resident", resident, "on a GPU, the images there once (auto: when they fit in a quarter of its memory)")
      .choices({"auto", "on", "off"});
  cli.flag("--graphs", graphs, "on a GPU, each training step replayed as a CUDA graph (learn.to_graphs())")
      .choices({"on", "off"});
  cli.flag("--time-split", time_split, "per epoch: data wait, training steps, validation").choices({"on", "off"});
  cli.flag("--profile", profile, "PyTorch's profiler over training steps 20-29: their kernels (or operators) "
                                  "summed, and profile.json in --out")
      .choices({"on", "off"});
  cli.flag("--out", out, "the folder it writes its files in");
  cli.option("--deterministic", deterministic, "cuDNN's deterministic algorithms: a GPU run repeats bitwise");
  cli.example("fashion_mnist --epochs 1");
  cli.example("fashion_mnist --epochs 5 --precision bf16 --bs 512 --lr 2e-2   # on a GPU");
  cli.parse(argc, argv);
  if (!std::filesystem::exists(data)) {
    std::cerr << "Fashion-MNIST not found in " << data << ".\n"
              << "Install it with: sudo apt-get install dataset-fashion-mnist (or pass --data DIR)\n";
    return 1;
  }
  torch::set_num_threads(threads);
  torch::manual_seed(seed);  // the initial weights
  if (deterministic) {  // fastai's set_seed(reproducible=True); the CPU's kernels repeat already
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
  }

  try {
    const OutputFolder output(out);
    // Images stay uint8 in memory; each batch becomes float and is normalized on its device.
    const std::vector<BatchTransform> tfms{Normalize{{0.2860}, {0.3530}}};
    // On a GPU the 55 MB of images go there once (unless --resident off).
    const auto on_device = resident == "auto" ? std::nullopt : std::optional<bool>(resident == "on");
    DataLoaders dls{DataLoader(vision::idx_image_dataset(data, "train"), {.bs = bs, .shuffle = true, .resident = on_device, .seed = static_cast<uint64_t>(seed), .batch_tfms = tfms}),
                    DataLoader(vision::idx_image_dataset(data, "t10k"), {.bs = 2 * bs, .resident = on_device, .batch_tfms = tfms})};

    dls.vocab = vision::fashion_mnist_vocab();
    vision::show_batch(dls, output("show_batch.png"));  // what the model will see
    Learner learn(dls, make_model(), CrossEntropyLoss(), {metrics::accuracy()});
    if (precision == "bf16") learn.to_bf16();
    if (precision == "fp16") learn.to_fp16();
    if (memory_format == "channels-last") learn.to_channels_last();
    if (!parallel.empty()) learn.to_parallel(parse_devices(parallel));
    if (graphs == "on") learn.to_graphs();
    if (time_split == "on") learn.add_cb(std::make_shared<TimeSplit>());
    if (profile == "on") learn.add_cb(ProfileSteps({.skip = 20, .steps = 10, .trace = output("profile.json")}));
    const auto fit_start = std::chrono::steady_clock::now();
    learn.fit_one_cycle(epochs, lr);
    // The training loop's own time, validation included: what a peer's loop times.
    std::printf("training time: %.2f s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - fit_start).count());

    // [valid_loss, accuracy] of the fit's last validation: no second pass over the test set.
    auto results = learn.recorder->valid_values();
    if (results.size() < 2) results = learn.validate();  // no epoch trained
    std::printf("final test accuracy: %.4f\n", results[1]);
    learn.save(output("model.pt"));
    learn.recorder->plot_loss(output("loss.png"));
    vision::show_results(learn, output("show_results.png"));  // target/prediction, red where wrong
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
