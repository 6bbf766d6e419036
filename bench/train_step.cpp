// Training-step throughput on a GPU: ResNet-18 (batch 256) and ResNet-50 (batch 128) on
// synthetic 224 px images resident on the device, in fp32, tf32, fp16 (autocast +
// GradScaler) and bf16, contiguous and channels-last, trained by a full Learner
// (callbacks, recorder, metrics on; SGD with momentum). bench/train_step_peer.py is the
// same step in PyTorch eager; bench/gpu_train_step.sh runs both and prints the ratios.
//
//   bench_train_step [--arch resnet18|resnet50|all] [--precision fp32|tf32|fp16|bf16|all]
//                    [--memory-format contiguous|channels-last|all] [--warmup 5] [--steps 20]
//                    [--graphs]        (learn.to_graphs(): the step recorded as a CUDA graph and replayed)
//                    [--distributed]   (to_distributed: run it under a launcher, e.g. world 1 on NCCL)
//                    [--parallel all|DEVICE,DEVICE...]  (to_parallel over these devices)
//                    [--sync-bn on|off]  (to_parallel's BatchNorm synchronized over the replicas, or each its own)
//                    [--bs N]   (the batch, instead of the arch's: 256 for ResNet-18, 128 for ResNet-50)
//                    [--profile TRACE.json]  (PyTorch's profiler over the timed steps: the
//                                             trace, and the kernels that took the most time)
//                    [--list]   (the cells chosen, one "<arch> <precision> <layout>" a line)
//                    [--serve]  (reads cells, one a line, from standard input and answers each)
//
// One line per cell: "<arch> <bs> <precision> <layout> <images/s> img/s peak <MiB> MiB"
// (peak: the caching allocator's max allocated bytes over the timed steps, as
// torch.cuda.max_memory_allocated after reset_peak_memory_stats; with --graphs, what stays
// reserved after emptying the cache where that is more: the graphs' pools). --serve keeps one
// process, and so cuDNN's plans, over many cells: bench/gpu_train_step.sh alternates two
// such servers, this one and the eager peer's, cell by cell.
#include <fastcpp.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

using namespace fastcpp;

namespace {

// Serves the `n_real` items over and over, `n_total` per epoch: a long epoch of few images.
class RepeatSampler : public Sampler {
 public:
  RepeatSampler(int64_t n_real, int64_t n_total) : n_real_(n_real), n_total_(n_total) {}
  std::vector<int64_t> indices(int64_t) const override {
    std::vector<int64_t> order(static_cast<size_t>(n_total_));
    for (int64_t i = 0; i < n_total_; ++i) order[static_cast<size_t>(i)] = i % n_real_;
    return order;
  }
  size_t size() const override { return static_cast<size_t>(n_total_); }

 private:
  int64_t n_real_, n_total_;
};

// Times the training batches after `warmup`, over `steps`, then ends the fit.
class StepTimer : public Callback {
 public:
  StepTimer(int warmup, int steps, bool graphs, std::string trace)
      : warmup_(warmup), steps_(steps), graphs_(graphs), trace_(std::move(trace)) {
    order = 200;
  }
  void before_batch() override {
    if (!learn().training || seen_ != warmup_) return;
    torch::cuda::synchronize();
    c10::cuda::CUDACachingAllocator::resetPeakStats(learn().device.index());
    if (!trace_.empty()) profile_.start();
    start_ = std::chrono::steady_clock::now();
  }
  void after_batch() override {
    if (!learn().training || ++seen_ < warmup_ + steps_) return;
    torch::cuda::synchronize();
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (!trace_.empty()) std::printf("%s\n", profile_.stop(trace_, steps_).text().c_str());
    const auto device = learn().device.index();
    auto peak = c10::cuda::CUDACachingAllocator::getDeviceStats(device).allocated_bytes[0].peak;
    if (graphs_) {
      // A graph's activations live in its private pool, reserved since the recording and
      // not counted as allocated by its replays: count what stays reserved once the
      // cache has given back every block not in use, the pools included.
      c10::cuda::CUDACachingAllocator::emptyCache();
      peak = std::max(peak, c10::cuda::CUDACachingAllocator::getDeviceStats(device).reserved_bytes[0].current);
    }
    peak_mib = static_cast<double>(peak) / (1024.0 * 1024.0);
    throw CancelFitException();
  }
  double seconds = 0, peak_mib = 0;

 private:
  int warmup_, steps_, seen_ = 0;
  bool graphs_;
  std::string trace_;
  ProfileWindow profile_{/*gpu=*/true};
  std::chrono::steady_clock::time_point start_;
};

struct Cell {
  std::string arch, precision, layout;
  int64_t bs;
};

const std::vector<std::string> kArchs{"resnet18", "resnet50"}, kPrecisions{"fp32", "tf32", "fp16", "bf16"},
    kLayouts{"contiguous", "channels-last"};

struct RunOptions {
  int warmup = 5, steps = 20;
  bool graphs = false, distributed = false;
  std::string parallel, trace;
  bool sync_bn = true;
};

std::string run(const Cell& cell, const RunOptions& options) {
  const auto& [warmup, steps, graphs, distributed, parallel, trace, sync_bn] = options;
  const torch::Device device(torch::kCUDA, 0);
  const bool tf32 = cell.precision == "tf32";
  at::globalContext().setAllowTF32CuBLAS(tf32);
  at::globalContext().setAllowTF32CuDNN(tf32);
  torch::manual_seed(0);
  const int64_t n_real = cell.bs * 2;
  // Stored in the layout trained in, as the eager peer stores them: a batch is then a view.
  auto images = torch::randn({n_real, 3, 224, 224}, torch::TensorOptions().device(device))
                    .contiguous(cell.layout == "channels-last" ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
  auto labels = torch::randint(1000, {n_real}, torch::TensorOptions().dtype(torch::kLong).device(device));
  auto data = std::make_shared<TensorDataset>(images, labels);
  const int64_t n_batches = warmup + steps + 1;
  DataLoaders dls{DataLoader(data, {.bs = cell.bs, .sampler = std::make_shared<RepeatSampler>(n_real, cell.bs * n_batches)}),
                  DataLoader(data, {.bs = cell.bs})};
  auto model = cell.arch == "resnet18" ? vision::resnet18() : vision::resnet50();
  Learner learn(dls, model, CrossEntropyLoss(), {metrics::accuracy()},
                {.opt_func = sgd({.mom = 0.9}), .device = device, .progress = false});
  learn.logger = [](const std::string&) {};
  if (cell.precision == "fp16") learn.to_fp16();
  if (cell.precision == "bf16") learn.to_bf16();
  if (cell.layout == "channels-last") learn.to_channels_last();
  if (graphs) learn.to_graphs();
  if (distributed) learn.to_distributed();
  if (!parallel.empty()) learn.to_parallel(parse_devices(parallel), sync_bn);
  auto timer = learn.add_cb(StepTimer(warmup, steps, graphs, trace));
  learn.fit(1, 0.01);
  if (timer->seconds <= 0)
    throw Error("the training epoch (" + std::to_string(learn.dls.train.size()) + " batches) ended before " +
                std::to_string(warmup) + " warm-up and " + std::to_string(steps) + " timed steps");
  const double images_per_s = static_cast<double>(cell.bs * steps) / timer->seconds;
  char line[256];
  std::snprintf(line, sizeof line, "%s %lld %s %s %.1f img/s peak %.1f MiB", cell.arch.c_str(),
                static_cast<long long>(cell.bs), cell.precision.c_str(), cell.layout.c_str(), images_per_s,
                timer->peak_mib);
  std::string result = line + (parallel.empty() ? "" : " parallel " + parallel + (sync_bn ? "" : " BatchNorm unsynced"));
  // Under to_distributed, how many training batches all-reduced their gradients: the
  // overhead timed is DDP's only if all of them did.
  if (const auto trainer = learn.get_cb<distributed::DistributedTrainer>())
    result += " synchronized backward passes " + std::to_string(trainer->reductions()) + " of " +
              std::to_string(warmup + steps);  // the timer ends the fit after them
  return result;
}

Cell make_cell(const std::string& arch, const std::string& precision, const std::string& layout) {
  return {arch, precision, layout, arch == "resnet18" ? 256 : 128};
}

// A served cell: "<arch> <precision> <layout>", each one of the choices above.
Cell parse_cell(const std::string& text) {
  std::istringstream words(text);
  std::string arch, precision, layout, extra;
  words >> arch >> precision >> layout;
  const auto is_one_of = [](const std::string& word, const std::vector<std::string>& all) {
    return std::find(all.begin(), all.end(), word) != all.end();
  };
  if (words >> extra || !is_one_of(arch, kArchs) || !is_one_of(precision, kPrecisions) || !is_one_of(layout, kLayouts))
    throw Error("bench_train_step --serve: the cell '" + text +
                "' is not '<resnet18|resnet50> <fp32|tf32|fp16|bf16> <contiguous|channels-last>'");
  return make_cell(arch, precision, layout);
}

std::vector<std::string> choices(const std::string& value, std::vector<std::string> all) {
  return value == "all" ? all : std::vector<std::string>{value};
}

}  // namespace

int main(int argc, char** argv) {
  std::string arch = "all", precision = "all", layout = "all", sync_bn = "on";
  RunOptions options;
  int64_t bs = 0;
  bool list = false, serve = false;
  CommandLine cli("bench_train_step", "Training-step throughput of the full Learner on a GPU: ResNet-18 (batch 256) "
                                      "and ResNet-50 (batch 128) on synthetic 224 px images resident there. One line "
                                      "per cell: arch, batch, precision, layout, img/s, peak MiB.");
  cli.flag("--arch", arch, "one architecture, or all").choices({"resnet18", "resnet50", "all"});
  cli.flag("--precision", precision, "one precision, or all").choices({"fp32", "tf32", "fp16", "bf16", "all"});
  cli.flag("--memory-format", layout, "one memory layout, or all").choices({"contiguous", "channels-last", "all"});
  cli.flag("--warmup", options.warmup, "steps before the timed ones").range(0, 100000);
  cli.flag("--steps", options.steps, "timed steps").range(1, 100000);
  cli.option("--graphs", options.graphs, "learn.to_graphs(): each step after the first warm-up ones replayed as a CUDA graph");
  cli.option("--distributed", options.distributed, "to_distributed (run it under a launcher, e.g. world 1 on NCCL)");
  cli.flag("--parallel", options.parallel, "to_parallel over these devices: all, or DEVICE,DEVICE...");
  cli.flag("--sync-bn", sync_bn, "with --parallel: BatchNorm synchronized over the replicas (on), or each its own (off)")
      .choices({"on", "off"});
  cli.flag("--bs", bs, "the batch (0: the arch's, 256 for ResNet-18 and 128 for ResNet-50)").range(0, 1 << 20);
  cli.flag("--profile", options.trace, "PyTorch's profiler over the timed steps: the trace here, the top kernels printed");
  cli.option("--list", list, "print the cells chosen, one '<arch> <precision> <layout>' a line, and exit");
  cli.option("--serve", serve, "read cells, one '<arch> <precision> <layout>' a line, from standard input and answer "
                               "each with its line (one process, and cuDNN's plans, over many cells)");
  cli.example("bench_train_step --arch resnet50 --precision fp16 --memory-format channels-last");
  cli.parse(argc, argv);
  options.sync_bn = sync_bn == "on";
  std::vector<Cell> cells;
  for (const auto& a : choices(arch, kArchs))
    for (const auto& p : choices(precision, kPrecisions))
      for (const auto& l : choices(layout, kLayouts)) cells.push_back(make_cell(a, p, l));
  if (list) {
    for (const auto& cell : cells) std::cout << cell.arch << " " << cell.precision << " " << cell.layout << "\n";
    return 0;
  }
  if (!torch::cuda::is_available()) {
    std::cout << "bench_train_step: skipped: no CUDA device\n";
    return 0;
  }
  at::globalContext().setBenchmarkCuDNN(true);
  // Each cell gives its cached GPU memory back before it answers, so that a server
  // alternating with the eager peer's leaves the GPU to it.
  const auto answer = [&](Cell cell) {
    if (bs > 0) cell.bs = bs;
    const auto line = run(cell, options);
    c10::cuda::CUDACachingAllocator::emptyCache();
    std::cout << line << std::endl;
  };
  try {
    if (serve) {
      // A failed cell is answered too, so that the reader waiting on this line goes on.
      for (std::string line; std::getline(std::cin, line);) {
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        try {
          answer(parse_cell(line));
        } catch (const std::exception& e) {
          // One line: the reader takes the next line as the next cell's answer. ATen's
          // errors carry a backtrace over many lines.
          const auto* aten = dynamic_cast<const c10::Error*>(&e);
          std::string text = aten ? aten->what_without_backtrace() : e.what();
          std::replace(text.begin(), text.end(), '\n', ' ');
          c10::cuda::CUDACachingAllocator::emptyCache();
          std::cout << "error: " << text << std::endl;
        }
      }
      return 0;
    }
    for (const auto& cell : cells) answer(cell);
  } catch (const std::exception& e) {
    std::cerr << "bench_train_step: " << e.what() << "\n";
    return 1;
  }
}
