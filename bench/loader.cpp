// The image pipeline's throughput against PyTorch's DataLoader with torchvision's
// ImageFolder (bench/loader_peer.py), same folder, transforms, batch size and
// worker count, in the same run.
//
//   bench_loader FOLDER [--workers 2] [--size 224] [--epochs 2] [--bs 64] [--no-peer]
//
// size > 64: RandomResizedCrop(size) + flip; size <= 64: pad-4 RandomCrop + flip;
// then a float batch normalized with ImageNet statistics. Prints images/s of both
// and their ratio, resident memory after each epoch (it must not grow) against the
// peer's (main + worker processes), and the fraction of the items' ceiling (items made
// alone on one thread, decode and item transforms, images/s x workers) the whole
// pipeline reaches.
#include <fastcpp.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

using namespace fastcpp;

namespace {

double rss_mb(const char* field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind(field, 0) == 0) return std::stod(line.substr(std::string(field).size())) / 1024;
  return 0;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string run_peer(const std::string& command) {
  std::string output;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[512];
    while (fgets(buffer, sizeof buffer, pipe)) output += buffer;
    pclose(pipe);
  }
  return output;
}

double field(const std::string& text, const std::string& key) {
  const auto at = text.find(key + "=");
  return at == std::string::npos ? 0 : std::stod(text.substr(at + key.size() + 1));
}

}  // namespace

int main(int argc, char** argv) {
  std::string folder;
  int workers = 2, size = 224, epochs = 2;
  int64_t bs = 64;
  bool no_peer = false;
  CommandLine cli("bench_loader", "The image pipeline's throughput against PyTorch's DataLoader with torchvision's "
                                  "ImageFolder on the same folder, transforms, batch size and workers; resident "
                                  "memory per epoch; the share of the items' ceiling reached.");
  cli.argument("FOLDER", folder, "an image folder tree (class folders of images)").required();
  cli.flag("--workers", workers, "loader threads (the peer: processes)").range(0, 4096);
  cli.flag("--size", size, "> 64: RandomResizedCrop + flip; <= 64: pad-4 RandomCrop + flip").range(1, 1 << 16);
  cli.flag("--epochs", epochs, "timed epochs").range(1, 1000);
  cli.flag("--bs", bs, "batch size").range(1, 1 << 20);
  cli.option("--no-peer", no_peer, "leave PyTorch's loader out");
  cli.example("bench_loader fashion_folder/train --workers 2 --size 28");
  cli.parse(argc, argv);
  const bool peer = !no_peer;
  torch::set_num_threads(1);
  try {
    std::vector<vision::ItemTransform> tfms;
    if (size > 64) tfms = {vision::RandomResizedCrop(size), vision::FlipItem()};
    else tfms = {vision::RandomCrop(size, 4), vision::FlipItem()};
    auto dataset = std::make_shared<vision::ImageFolder>(vision::ImageFolder::scan(folder, {.item_tfms = tfms}));
    DataLoader loader(dataset, {.bs = bs, .shuffle = true, .workers = workers, .seed = 1,
                                .batch_tfms = {Normalize::imagenet()}});

    for (const auto& batch : loader) (void)batch;  // warm-up: files in the page cache
    std::vector<double> rss;
    size_t n = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int e = 0; e < epochs; ++e) {
      for (const auto& batch : loader) n += static_cast<size_t>(batch.x.size(0));
      rss.push_back(rss_mb("VmRSS:"));
    }
    const double ours = static_cast<double>(n) / seconds_since(start);

    // The items' ceiling: each item made alone (its decode and item transforms) on one
    // thread; the loader adds batching, the batch transforms and the hand-over.
    const size_t probe = std::min<size_t>(dataset->size(), 400);
    const auto decode_start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < probe; ++i) {
      Rng rng(i);
      dataset->get(i, rng);
    }
    const double decode_rate = static_cast<double>(probe) / seconds_since(decode_start);

    std::printf("fastcpp: %.1f images/s  (%d workers, %zu images, %dpx, bs %ld)\n", ours, workers, dataset->size(),
                size, static_cast<long>(bs));
    std::printf("fastcpp resident memory after each epoch (MB):");
    for (double r : rss) std::printf(" %.1f", r);
    std::printf("  peak %.1f\n", rss_mb("VmHWM:"));
    std::printf("items alone (decode + item transforms), one thread: %.1f images/s; pipeline reaches %.0f%% of %d x that\n", decode_rate,
                100 * ours / (decode_rate * std::max(workers, 1)), std::max(workers, 1));
    if (peer) {
      const std::string command = FASTCPP_PYTHON " " FASTCPP_BENCH_DIR "/loader_peer.py '" + folder + "' --workers " +
                                  std::to_string(workers) + " --size " + std::to_string(size) + " --epochs " +
                                  std::to_string(epochs) + " --bs " + std::to_string(bs);
      const auto output = run_peer(command);
      const double theirs = field(output, "images_per_s");
      if (theirs <= 0) {
        std::cerr << "the Python peer failed:\n" << output;
        return 1;
      }
      std::printf("PyTorch DataLoader + torchvision: %.1f images/s, peak memory (main + workers) %.1f MB\n", theirs,
                  field(output, "peak_rss_mb"));
      std::printf("ratio fastcpp/PyTorch: %.2fx\n", ours / theirs);
    }
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
