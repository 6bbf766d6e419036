// Training from an image folder on a GPU: images/s of the full Learner fed by the CPU
// pipeline (every core decoding and cropping), by decoding on the device
// (ImageFolderOptions::decode = Decode::Device: nvJPEG), and by batches already resident
// there (the ceiling: the same model step with no loading at all). RandomResizedCrop 224
// + flip, ImageNet's Normalize, SGD with momentum. bench/image_folder_peer.py is the
// PyTorch side; bench/gpu_image_folder.sh runs both and prints the ratios.
//
//   bench_image_folder FOLDER [--source cpu|device|resident] [--arch resnet18|resnet50]
//                      [--precision fp32|fp16|bf16] [--memory-format contiguous|channels-last]
//                      [--bs 256] [--workers N] [--warmup 5] [--steps 30] [--decode-rate]
//
// One line: "fastcpp <source> <arch> <precision> <layout> <images/s> img/s"; with
// --decode-rate, the decode + crop rate alone: on one CPU thread ("per CPU core") and,
// for --source device, on the device ("per GPU").
#include <fastcpp.h>

#include <torch/cuda.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "vision/device_decode.h"

using namespace fastcpp;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

void sync(torch::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

// Times the training batches after `warmup`, over `steps`, then ends the fit.
class StepTimer : public Callback {
 public:
  StepTimer(int warmup, int steps) : warmup_(warmup), steps_(steps) { order = 200; }
  void before_batch() override {
    if (!learn().training || seen_ != warmup_) return;
    sync(learn().device);
    start_ = Clock::now();
  }
  void after_batch() override {
    if (!learn().training || ++seen_ < warmup_ + steps_) return;
    sync(learn().device);
    seconds = seconds_since(start_);
    throw CancelFitException();
  }
  double seconds = 0;

 private:
  int warmup_, steps_, seen_ = 0;
  Clock::time_point start_;
};

// Decode + RandomResizedCrop + flip of `n` files on this thread alone: a CPU core's rate.
double cpu_decode_rate(const vision::ImageFolder& folder, int n) {
  const auto start = Clock::now();
  for (int i = 0; i < n; ++i) folder.get(static_cast<size_t>(i) % folder.size());
  return n / seconds_since(start);
}

// Batches decoded and cropped on the device alone (the workers' reading and drawing done first).
double device_decode_rate(const vision::ImageFolder& folder, torch::Device device, int64_t bs, int batches) {
  std::vector<Batch> pending;
  for (int b = 0; b < batches; ++b) {
    std::vector<int64_t> indices;
    for (int64_t i = 0; i < bs; ++i) indices.push_back((b * bs + i) % static_cast<int64_t>(folder.size()));
    pending.push_back(folder.get_batch(indices, static_cast<uint64_t>(b)));
  }
  pending.front().x_stage->run(device);  // warm-up: the decoder's state, the allocator
  sync(device);
  const auto start = Clock::now();
  for (const auto& batch : pending) batch.x_stage->run(device);
  sync(device);
  return static_cast<double>(bs * batches) / seconds_since(start);
}

}  // namespace

int main(int argc, char** argv) {
  std::string folder, source = "cpu", arch = "resnet18", precision = "bf16", layout = "channels-last";
  int64_t bs = 256;
  int workers = usable_cores(), warmup = 5, steps = 30;
  bool decode_rate = false;
  CommandLine cli("bench_image_folder",
                  "Training throughput of the full Learner from a JPEG folder (RandomResizedCrop 224 + flip): the CPU "
                  "pipeline, decoding on the device, or resident batches (the ceiling).");
  cli.argument("FOLDER", folder, "class-per-folder JPEGs").required();
  cli.flag("--source", source, "cpu: decoded by the workers; device: on the device; resident: no loading")
      .choices({"cpu", "device", "resident"});
  cli.flag("--arch", arch, "the model").choices({"resnet18", "resnet50"});
  cli.flag("--precision", precision, "training precision").choices({"fp32", "fp16", "bf16"});
  cli.flag("--memory-format", layout, "memory layout").choices({"contiguous", "channels-last"});
  cli.flag("--bs", bs, "batch size").range(1, 1 << 16);
  cli.flag("--workers", workers, "the loader's threads").range(0, 4096);
  cli.flag("--warmup", warmup, "steps before the timed ones").range(0, 100000);
  cli.flag("--steps", steps, "timed steps").range(1, 100000);
  cli.option("--decode-rate", decode_rate, "also the decode + crop rate alone, per CPU core (and per GPU with --source device)");
  cli.example("bench_image_folder /tmp/folders/photos --source device --arch resnet50 --precision fp16");
  cli.parse(argc, argv);
  try {
    const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
    at::globalContext().setBenchmarkCuDNN(true);
    torch::manual_seed(0);
    const std::vector<vision::ItemTransform> tfms{vision::RandomResizedCrop(224), vision::FlipItem()};
    const auto decode = source == "device" ? vision::Decode::Device : vision::Decode::Cpu;
    auto images = std::make_shared<vision::ImageFolder>(vision::ImageFolder::scan(folder, {.item_tfms = tfms, .decode = decode}));
    const auto classes = static_cast<int64_t>(images->vocab().size());
    DatasetPtr data = images;
    if (source == "resident") {  // two batches of the folder's own items, cut on the device over and over
      std::vector<int64_t> first(static_cast<size_t>(2 * bs));
      for (size_t i = 0; i < first.size(); ++i) first[i] = static_cast<int64_t>(i % images->size());
      const auto batch = images->get_batch(first, 0);
      data = std::make_shared<TensorDataset>(batch.x, batch.y);
    }
    // Enough items for the warm-up and the timed steps, whatever the folder's size.
    const int64_t n = bs * (warmup + steps + 1), real = static_cast<int64_t>(data->size());
    auto order = std::make_shared<RandomSampler>(static_cast<size_t>(n), 1);
    class Repeat : public Sampler {
     public:
      Repeat(SamplerPtr inner, int64_t real) : inner_(std::move(inner)), real_(real) {}
      std::vector<int64_t> indices(int64_t epoch) const override {
        auto order = inner_->indices(epoch);
        for (auto& i : order) i %= real_;
        return order;
      }
      size_t size() const override { return inner_->size(); }

     private:
      SamplerPtr inner_;
      int64_t real_;
    };
    DataLoaders dls{DataLoader(data, {.bs = bs, .workers = source == "resident" ? 0 : workers,
                                      .resident = source == "resident", .sampler = std::make_shared<Repeat>(order, real),
                                      .batch_tfms = {Normalize::imagenet()}}),
                    DataLoader(data, {.bs = bs, .batch_tfms = {Normalize::imagenet()}})};
    auto model = arch == "resnet18" ? vision::resnet18({.num_classes = classes}) : vision::resnet50({.num_classes = classes});
    Learner learn(dls, model, CrossEntropyLoss(), {}, {.opt_func = sgd({.mom = 0.9}), .device = device, .progress = false});
    learn.logger = [](const std::string&) {};
    if (precision == "fp16") learn.to_fp16();
    if (precision == "bf16") learn.to_bf16();
    if (layout == "channels-last") learn.to_channels_last();
    auto timer = learn.add_cb(StepTimer(warmup, steps));
    learn.fit(1, 0.01);
    if (timer->seconds <= 0) throw Error("the epoch ended before the warm-up and the timed steps");
    std::printf("fastcpp %s %s %s %s %.1f img/s", source.c_str(), arch.c_str(), precision.c_str(), layout.c_str(),
                static_cast<double>(bs * steps) / timer->seconds);
    if (source == "device") std::printf(" (decoder: %s)", vision::device_decoder_name(device).c_str());
    std::printf("\n");
    if (decode_rate) {
      const auto cpu = images->with_options({.item_tfms = tfms, .decode = vision::Decode::Cpu});
      std::printf("fastcpp decode + RandomResizedCrop + flip, one CPU thread: %.1f img/s per CPU core\n",
                  cpu_decode_rate(cpu, 200));
      if (source == "device")
        std::printf("fastcpp decode + crop on %s (%s): %.1f img/s %s\n", device.str().c_str(),
                    vision::device_decoder_name(device).c_str(), device_decode_rate(*images, device, bs, 8),
                    device.is_cuda() ? "per GPU" : "(no GPU here)");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_image_folder: %s\n", e.what());
    return 1;
  }
}
