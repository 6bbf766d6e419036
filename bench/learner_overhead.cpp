// The Learner's own overhead (callbacks, recorder, progress, metrics, schedule)
// against a bare libtorch loop doing the same steps: the same loader, model,
// loss, optimizer, one-cycle schedule and validation accuracy.
//
//   bench_learner_overhead [--threads N] [--repeats R]
//
// Prints the median time of each and the ratio learner/bare (target <= 1.03).
#include <fastcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

using namespace fastcpp;

namespace {

struct Workload {
  const char* name;
  std::function<torch::nn::Sequential()> make_model;
};

torch::nn::Sequential small_cnn() {
  auto conv = [](int64_t in, int64_t out) {
    return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(2).padding(1).bias(false));
  };
  return torch::nn::Sequential(conv(1, 16), torch::nn::BatchNorm2d(16), torch::nn::ReLU(), conv(16, 32),
                               torch::nn::BatchNorm2d(32), torch::nn::ReLU(), conv(32, 64), torch::nn::BatchNorm2d(64),
                               torch::nn::ReLU(), torch::nn::AdaptiveAvgPool2d(1), torch::nn::Flatten(),
                               torch::nn::Linear(64, 10));
}

torch::nn::Sequential mlp() {
  return torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(784, 64), torch::nn::ReLU(),
                               torch::nn::Linear(64, 10));
}

DataLoaders make_dls(int64_t bs) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(0);
  auto make = [&](int64_t n) {
    return std::make_shared<TensorDataset>(torch::randint(256, {n, 1, 28, 28}, gen, torch::kUInt8),
                                           torch::randint(10, {n}, gen, torch::kLong));
  };
  const std::vector<BatchTransform> tfms{Normalize{{0.5}, {0.25}}};
  return {DataLoader(make(bs * 60), {.bs = bs, .shuffle = true, .batch_tfms = tfms}),
          DataLoader(make(bs * 15), {.bs = bs, .batch_tfms = tfms})};
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double time_learner(const Workload& w, int epochs) {
  torch::manual_seed(0);
  Learner learn(make_dls(128), w.make_model(), CrossEntropyLoss(), {metrics::accuracy()},
                {.cbs = {std::make_shared<ProgressCallback>(false)}, .device = torch::kCPU, .progress = false});
  learn.logger = [](const std::string&) {};
  const auto start = std::chrono::steady_clock::now();
  learn.fit_one_cycle(epochs, 1e-2);
  return seconds_since(start);
}

double time_bare(const Workload& w, int epochs) {
  torch::manual_seed(0);
  auto dls = make_dls(128);
  auto model = w.make_model();
  Adam opt({ParamGroup{model->parameters(), {}, {}}});
  opt.set_hyper("wd", 0.01);
  const double total = static_cast<double>(epochs * dls.train.size());
  const auto start = std::chrono::steady_clock::now();
  int64_t step = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    model->train();
    dls.train.set_epoch(epoch);
    for (const auto& batch : dls.train) {
      const double pos = step++ / total;
      opt.set_hyper("lr", combined_cos(0.25, 1e-2 / 25, 1e-2, 1e-7)(pos));
      opt.set_hyper("mom", combined_cos(0.25, 0.95, 0.85, 0.95)(pos));
      auto loss = torch::nn::functional::cross_entropy(model->forward(batch.x), batch.y);
      loss.backward();
      opt.step();
      opt.zero_grad();
    }
    model->eval();
    torch::NoGradGuard no_grad;
    auto correct = torch::zeros({}, torch::kLong);
    for (const auto& batch : dls.valid) correct += (model->forward(batch.x).argmax(-1) == batch.y).sum();
    (void)correct.item<int64_t>();
  }
  return seconds_since(start);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, repeats = 5, epochs = 2;
  CommandLine cli("bench_learner_overhead", "The Learner's cost over a bare libtorch loop on the same data and "
                                            "model (a small CNN, and an MLP as the worst case), interleaved runs, "
                                            "medians.");
  cli.flag("--threads", threads, "CPU threads").range(1, 4096);
  cli.flag("--repeats", repeats, "interleaved runs of each").range(1, 1000);
  cli.example("bench_learner_overhead --threads 2 --repeats 5");
  cli.parse(argc, argv);
  torch::set_num_threads(threads);
  for (const auto& w : {Workload{"small CNN, bs 128", small_cnn}, Workload{"MLP, bs 128 (worst case)", mlp}}) {
    time_bare(w, 1);  // warm-up
    std::vector<double> learner, bare;
    for (int r = 0; r < repeats; ++r) {  // interleaved, so drifts in machine load hit both
      bare.push_back(time_bare(w, epochs));
      learner.push_back(time_learner(w, epochs));
    }
    std::printf("%-26s bare %.3fs  learner %.3fs  ratio learner/bare %.3f\n", w.name, median(bare), median(learner),
                median(learner) / median(bare));
  }
}
