// The soak run (scripts/soak.sh): the same training cycle over and over for MINUTES,
// watching this process for leaks. Each cycle, from a fixed seed:
//   1. a vision_learner (ResNet-18, width 8, on synthetic 1x16x16 images, loaders with
//      2 worker threads) fits a one-cycle schedule with ResumeFromCheckpoint and a
//      CSVLogger, and is cancelled after its first epoch (a crash, as far as it knows);
//   2. a fresh learner resumes from that checkpoint and finishes the fit;
//   3. it saves itself; a third learner loads that file and must predict the same;
//   4. it exports itself; load_learner's Predictor predicts a few items.
// After each cycle: the resident memory (VmRSS), open file descriptors and threads of
// this process, and the final validation loss, which must be bit-identical in every
// cycle. Ends with a summary; exits 1 if memory grew (beyond 16 MiB and 10% of what it
// was after the warm-up cycles), descriptors or threads grew, or a cycle differed.
//
//   soak MINUTES WORK_DIR
#include <fastcpp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

using namespace fastcpp;
namespace fs = std::filesystem;

namespace {

struct Usage {
  double rss_mib = 0;
  int64_t fds = 0;
  int64_t threads = 0;
};

int64_t entries(const char* dir) {
  return std::distance(fs::directory_iterator(dir), fs::directory_iterator{});
}

Usage usage() {
  Usage u;
  u.rss_mib = resident_mb();
  u.fds = entries("/proc/self/fd") - 1;  // less the directory iterator's own
  u.threads = entries("/proc/self/task");
  return u;
}

DataLoaders data() {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  auto make = [&](int64_t n) {
    auto y = torch::randint(4, {n}, gen, torch::kLong);
    auto x = torch::randn({n, 1, 16, 16}, gen) + y.view({n, 1, 1, 1}).to(torch::kFloat) * 0.5;
    return std::make_shared<TensorDataset>(x, y);
  };
  return {DataLoader(make(512), {.bs = 32, .shuffle = true, .workers = 2, .seed = 3}),
          DataLoader(make(128), {.bs = 64, .workers = 2})};
}

Learner make_learner() {
  torch::manual_seed(1);
  return vision::vision_learner(data(), vision::resnet18, {metrics::accuracy()},
                                {.n_out = 4, .in_channels = 1, .stem = vision::Stem::cifar, .width = 8},
                                {.progress = false});
}

struct CancelAfterFirstEpoch : Callback {
  CancelAfterFirstEpoch() { order = 100; }  // after ResumeFromCheckpoint's save
  void after_epoch() override {
    if (learn().epoch == 0) throw CancelFitException();
  }
};

// One cycle; returns the final validation loss.
double cycle(const fs::path& dir) {
  const auto resume = (dir / "resume.pt").string();
  {
    auto first = make_learner();
    first.logging = false;
    first.logger = [](const std::string&) {};
    first.add_cb(ResumeFromCheckpoint(resume));
    first.add_cb(CSVLogger((dir / "history.csv").string()));
    first.add_cb(CancelAfterFirstEpoch());
    first.fit_one_cycle(2, 1e-2);
  }
  auto learn = make_learner();
  learn.logging = false;
  learn.logger = [](const std::string&) {};
  auto resumed = learn.add_cb(ResumeFromCheckpoint(resume));
  learn.add_cb(CSVLogger((dir / "history.csv").string(), /*append=*/true));
  learn.fit_one_cycle(2, 1e-2);
  if (resumed->resumed_from() != 1) throw Error("the second learner did not resume from epoch 1");

  learn.save((dir / "final.pt").string());
  auto loaded = make_learner();
  loaded.load((dir / "final.pt").string());
  const auto preds = learn.get_preds().preds;
  if (!torch::equal(preds, loaded.get_preds().preds)) throw Error("the loaded learner predicts differently");

  learn.export_learner((dir / "export.pt").string());
  const auto predictor = vision::load_learner((dir / "export.pt").string());
  const auto& valid = dynamic_cast<const TensorDataset&>(learn.dls.valid.dataset());
  for (int64_t i = 0; i < 4; ++i) predictor.predict(valid.x()[i]);
  return learn.validate()[0];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: soak MINUTES WORK_DIR\n";
    return 2;
  }
  const double minutes = std::stod(argv[1]);
  const fs::path dir = argv[2];
  fs::create_directories(dir);
  torch::set_num_threads(1);
  constexpr int kWarmup = 3;  // caches, allocator pools and thread pools settle
  const auto start = std::chrono::steady_clock::now();
  auto elapsed_min = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 60;
  };
  double reference = 0;
  Usage warm, last;
  int cycles = 0, differing = 0;
  double next_report = 1;
  std::printf("cycle  minutes  valid_loss            rss_MiB  fds  threads\n");
  while (cycles < kWarmup + 2 || elapsed_min() < minutes) {
    const double loss = cycle(dir);
    ++cycles;
    if (cycles == 1) reference = loss;
    if (loss != reference) ++differing;
    last = usage();
    if (cycles == kWarmup) warm = last;
    if (cycles <= kWarmup + 2 || elapsed_min() >= next_report) {  // the first cycles, then once a minute
      std::printf("%5d  %7.1f  %.17g  %7.1f  %3lld  %7lld\n", cycles, elapsed_min(), loss, last.rss_mib,
                  static_cast<long long>(last.fds), static_cast<long long>(last.threads));
      std::fflush(stdout);
      next_report = std::floor(elapsed_min()) + 1;
    }
  }
  const double growth_mib = last.rss_mib - warm.rss_mib;
  const bool memory_flat = growth_mib <= std::max(16.0, 0.1 * warm.rss_mib);
  const bool fds_flat = last.fds <= warm.fds, threads_flat = last.threads <= warm.threads;
  std::printf(
      "soak: %d cycles in %.1f min; RSS %.1f MiB after cycle %d, %.1f MiB at the end (%+.1f MiB, peak %.1f MiB); "
      "file descriptors %lld -> %lld; threads %lld -> %lld; %d cycles differed from the first\n",
      cycles, elapsed_min(), warm.rss_mib, kWarmup, last.rss_mib, growth_mib, resident_peak_mb(),
      static_cast<long long>(warm.fds), static_cast<long long>(last.fds), static_cast<long long>(warm.threads),
      static_cast<long long>(last.threads), differing);
  const bool ok = memory_flat && fds_flat && threads_flat && differing == 0;
  std::printf("soak: %s\n", ok ? "PASSED (memory flat, nothing leaked, every cycle identical)" : "FAILED");
  return ok ? 0 : 1;
}
