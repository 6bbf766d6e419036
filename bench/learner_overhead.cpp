// The Learner's own overhead (callbacks, recorder, progress, metrics, schedule)
// against a bare libtorch loop doing the same steps: the same loader, model,
// loss, optimizer, one-cycle schedule and validation accuracy.
//
//   bench_learner_overhead [--threads N] [--repeats R] [--account]
//
// Prints the median time of each and the ratio learner/bare (target <= 1.03); --account
// prints instead what each part of the Learner costs per batch of the MLP, in microseconds of
// CPU time on one thread.
#include <fastcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

using namespace fastcpp;

namespace {

struct Workload {
  const char* name;
  std::function<torch::nn::Sequential()> make_model;
  int rounds_per_repeat;  // the MLP's runs take a seventh of the CNN's, and its ratio moves more with the machine
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

// Wall time; the accounting counts the process's CPU time instead, on one thread: the
// machine's neighbours move a wall clock by more than the microseconds it looks for.
bool cpu_clock = false;

double now() {
  if (!cpu_clock) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double seconds_since(double start) { return now() - start; }

// What a run does besides the steps themselves; the bare loop does the same by hand.
struct Extras {
  bool schedule = true;  // one-cycle lr and momentum (otherwise a constant lr)
  bool metric = true;    // validation accuracy
  bool progress = true;  // the progress callback, silent (the Learner only)
};

double time_learner(const Workload& w, int epochs, Extras extras = {}) {
  torch::manual_seed(0);
  std::vector<CallbackPtr> cbs;
  if (extras.progress) cbs.push_back(std::make_shared<ProgressCallback>(false));
  std::vector<MetricPtr> metrics;
  if (extras.metric) metrics.push_back(metrics::accuracy());
  Learner learn(make_dls(128), w.make_model(), CrossEntropyLoss(), metrics,
                {.cbs = cbs, .device = torch::kCPU, .progress = false});
  learn.logger = [](const std::string&) {};
  const double start = now();
  if (extras.schedule) learn.fit_one_cycle(epochs, 1e-2);
  else learn.fit(epochs, 1e-3);
  return seconds_since(start);
}

double time_bare(const Workload& w, int epochs, Extras extras = {}) {
  torch::manual_seed(0);
  auto dls = make_dls(128);
  auto model = w.make_model();
  const auto loss_func = CrossEntropyLoss();  // the Learner's: its kernels are not the Learner's cost
  Adam opt({ParamGroup{model->parameters(), {}, {}}});
  opt.set_hyper("wd", 0.01);
  opt.set_hyper("lr", 1e-3);
  const double total = static_cast<double>(epochs * dls.train.size());
  const double start = now();
  int64_t step = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    model->train();
    dls.train.set_epoch(epoch);
    for (const auto& batch : dls.train) {
      const double pos = step++ / total;
      if (extras.schedule) {
        opt.set_hyper("lr", combined_cos(0.25, 1e-2 / 25, 1e-2, 1e-7)(pos));
        opt.set_hyper("mom", combined_cos(0.25, 0.95, 0.85, 0.95)(pos));
      }
      auto loss = loss_func(model->forward(batch.x), batch.y);
      loss.backward();
      opt.step();
      opt.zero_grad();
    }
    model->eval();
    torch::NoGradGuard no_grad;
    auto correct = torch::zeros({}, torch::kLong);
    for (const auto& batch : dls.valid) {
      const auto out = model->forward(batch.x);
      if (extras.metric) correct += (out.argmax(-1) == batch.y).sum();
    }
    (void)correct.item<int64_t>();
  }
  return seconds_since(start);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The Learner's cost per batch (training and validation batches alike), step by step:
// each rung adds one thing to both loops, and its line is what the Learner pays for it
// beyond what the bare loop pays. Each loop's fastest run counts (noise only adds time),
// the rounds run every rung in turn so that a drift in the machine reaches them all.
void account(const Workload& w, int repeats, int epochs) {
  struct Rung {
    const char* what;
    Extras extras;
    std::vector<double> bare, learner;
  };
  std::vector<Rung> rungs{{"the loop: events, recorder, loss, checks", {false, false, false}},
                          {"+ one-cycle schedule", {true, false, false}},
                          {"+ accuracy metric", {true, true, false}},
                          {"+ progress callback (silent)", {true, true, true}}};
  auto dls = make_dls(128);
  const double batches = static_cast<double>(epochs * (dls.train.size() + dls.valid.size()));
  for (int r = 0; r < repeats; ++r)
    for (auto& rung : rungs) {
      rung.bare.push_back(time_bare(w, epochs, rung.extras) / batches * 1e6);
      rung.learner.push_back(time_learner(w, epochs, rung.extras) / batches * 1e6);
    }
  std::printf("%s: the Learner's CPU time per batch over the bare loop's (the fastest of %d rounds)\n", w.name, repeats);
  double before = 0;
  for (const auto& rung : rungs) {
    const double bare = *std::min_element(rung.bare.begin(), rung.bare.end());
    const double total = *std::min_element(rung.learner.begin(), rung.learner.end()) - bare;
    std::printf("  %-42s %6.1f us  (in all %6.1f us over a bare batch of %6.1f us)\n", rung.what, total - before, total,
                bare);
    before = total;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, repeats = 5, epochs = 6;
  bool account_mlp = false;
  CommandLine cli("bench_learner_overhead", "The Learner's cost over a bare libtorch loop on the same data and "
                                            "model (a small CNN, and an MLP as the worst case), interleaved runs, "
                                            "medians.");
  cli.flag("--threads", threads, "CPU threads").range(1, 4096);
  cli.flag("--repeats", repeats, "interleaved runs of each (of the MLP three times as many)").range(1, 1000);
  cli.option("--account", account_mlp, "instead: the MLP's per-batch cost, part by part, in microseconds of CPU "
                                       "time on one thread");
  cli.flag("--epochs", epochs, "epochs a run (60 training and 15 validation batches each)").range(1, 1000);
  cli.example("bench_learner_overhead --threads 2 --repeats 5");
  cli.example("bench_learner_overhead --account --repeats 40");
  cli.parse(argc, argv);
  torch::set_num_threads(threads);
  const Workload cnn{"small CNN, bs 128", small_cnn, 1}, worst{"MLP, bs 128 (worst case)", mlp, 3};
  if (account_mlp) {
    torch::set_num_threads(1);
    cpu_clock = true;
    time_bare(worst, 1);  // warm-up
    account(worst, repeats, epochs);
    return 0;
  }
  for (const auto& w : {cnn, worst}) {
    time_bare(w, 1);  // warm-up
    std::vector<double> learner, bare, ratios;
    for (int r = 0; r < repeats * w.rounds_per_repeat; ++r) {  // interleaved: drifts in machine load hit both
      bare.push_back(time_bare(w, epochs));
      learner.push_back(time_learner(w, epochs));
      ratios.push_back(learner.back() / bare.back());
    }
    // The ratio is the median of each round's: a round's two runs share the machine's mood.
    std::printf("%-26s bare %.3fs  learner %.3fs  ratio learner/bare %.3f\n", w.name, median(bare), median(learner),
                median(ratios));
  }
}
