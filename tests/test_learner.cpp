// The Learner's own behaviour: training lowers the loss on real data, lr_find,
// checkpoints, label errors, gradient accumulation, freezing, predictions.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "helpers.h"
#include "operator_count.h"

#include <caffe2/serialize/inline_container.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <set>
#include <thread>

#include "core/host_memory.h"
#include "core/spec_text.h"
#include "formats/torch_save.h"

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

const std::string kFashionMnist = vision::fashion_mnist_dir();

bool dicts_equal(const c10::impl::GenericDict& a, const c10::impl::GenericDict& b) {
  if (a.size() != b.size()) return false;
  for (const auto& entry : a) {
    auto it = b.find(entry.key());
    if (it == b.end()) return false;
    const auto& x = entry.value();
    const auto& y = it->value();
    const bool same = x.isTensor() ? torch::equal(x.toTensor(), y.toTensor())
                      : x.isDouble() ? x.toDouble() == y.toDouble()
                      : x.isString() ? x.toStringRef() == y.toStringRef()
                                     : x.toInt() == y.toInt();
    if (!same) {
      MESSAGE("differs: " << entry.key().toStringRef());
      return false;
    }
  }
  return true;
}

}  // namespace

namespace {

long minor_page_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Page faults taken to fill a fresh 64 MB block (16384 pages of 4 KB).
long faults_to_fill_64_mb() {
  constexpr size_t kBytes = 64 << 20;
  const long before = minor_page_faults();
  auto* block = static_cast<char*>(std::malloc(kBytes));
  REQUIRE(block != nullptr);
  std::memset(block, 1, kBytes);
  const long faults = minor_page_faults() - before;
  std::free(block);
  return faults;
}

}  // namespace

TEST_SUITE("learner") {
#if defined(__GLIBC__)
  TEST_CASE("once a Learner is built, a freed block serves the next request without page faults") {
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    REQUIRE(keep_freed_host_memory());
    faults_to_fill_64_mb();  // the first time the heap grows: faults
    // The second: the same memory, already mapped (glibc's default munmaps a block this
    // large on free, and the next one takes a fault on each of its 16384 pages).
    CHECK(faults_to_fill_64_mb() < 1000);
  }
#endif

  TEST_CASE("a batch, its prediction and its autograd graph are gone before the next batch is made") {
    // Weak references taken at the end of each training batch, checked while the loader
    // makes the next one (in a batch transform, on this thread: no workers). Anything
    // still alive then would mean two batches and the last step's graph on the device.
    struct Watch {
      std::weak_ptr<torch::autograd::Node> graph;
      c10::weak_intrusive_ptr<c10::StorageImpl> batch{c10::intrusive_ptr<c10::StorageImpl>()};
      int ended = 0, checked = 0;
    };
    auto watch = std::make_shared<Watch>();
    struct Watcher : Callback {
      explicit Watcher(std::shared_ptr<Watch> w) : watch(std::move(w)) { order = 100; }
      void after_batch() override {
        if (!learn().training) return;
        watch->graph = learn().pred.grad_fn();
        watch->batch = learn().xb.storage().getWeakStorageImpl();
        REQUIRE(!watch->graph.expired());
        ++watch->ended;
      }
      void after_train() override { watch->ended = 0; }  // validation batches are not watched
      std::shared_ptr<Watch> watch;
    };
    const BatchTransform check_released = [watch](const torch::Tensor& x) {
      if (watch->ended > 0) {
        ++watch->checked;
        CHECK(watch->graph.expired());
        CHECK(watch->batch.expired());
      }
      return x * 1;  // a batch of its own, as Normalize makes
    };
    // Shuffled: each batch is a copy, not a view of the dataset (which lives on anyway).
    DataLoaders dls{DataLoader(synthetic_dataset(16, 4, 3, 1), {.bs = 4, .shuffle = true, .batch_tfms = {check_released}}),
                    DataLoader(synthetic_dataset(4, 4, 3, 2), {.bs = 4})};
    Learner learn(dls, tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    learn.add_cb(std::make_shared<Watcher>(watch));
    learn.fit(1);
    CHECK(watch->checked == 3);  // while making batches 2..4 of 4
  }

  TEST_CASE("the Recorder's smoothed loss is fastai's debiased running average of the batch losses") {
    // Each training batch's loss, and the smoothed loss asked for there (as lr_find does).
    struct Losses : Callback {
      Losses() { order = 100; }
      void after_batch() override {
        if (!learn().training) return;
        batch.push_back(learn().loss.item<double>());
        smoothed.push_back(learn().recorder->smooth_loss());
      }
      std::vector<double> batch, smoothed;
    };
    Learner learn(synthetic_dls(16, 4, 4), tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    auto seen = learn.add_cb(Losses());
    learn.fit(2, 1e-2);
    const auto& losses = learn.recorder->losses;
    REQUIRE(seen->batch.size() == 8);
    REQUIRE(losses.size() == 8);
    double average = 0;
    for (size_t i = 0; i < 8; ++i) {
      CAPTURE(i);
      average = 0.98 * average + 0.02 * static_cast<float>(seen->batch[i]);
      const double expected = average / (1 - std::pow(0.98, static_cast<double>(i + 1)));
      CHECK(losses[i] == doctest::Approx(expected).epsilon(1e-12));
      CHECK(seen->smoothed[i] == losses[i]);
    }
    CHECK(learn.recorder->values[1][0] == losses.back());  // the second epoch's train_loss
  }

  TEST_CASE("a CUDA device that is not there is an error naming it and what the machine has") {
    if (torch::cuda::device_count() > 0) return;  // the message below is the one of a machine without a GPU
    LearnerOptions options = quiet();
    options.device = torch::Device("cuda:0");
    CHECK(error_of([&] { Learner(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, options); }) ==
          "Learner: device cuda:0 is not on this machine, which has no CUDA device; "
          "train on the CPU (the default when no GPU is there)");
  }

  TEST_CASE("a short run on a real Fashion-MNIST subset lowers the loss") {
    REQUIRE_MESSAGE(std::filesystem::exists(kFashionMnist), "apt-get install dataset-fashion-mnist");
    auto train = vision::idx_image_dataset(kFashionMnist, "train");
    auto test = vision::idx_image_dataset(kFashionMnist, "t10k");
    auto small = [](const TensorDataset& ds, int64_t n) {
      return std::make_shared<TensorDataset>(ds.x().slice(0, 0, n), ds.y().slice(0, 0, n));
    };
    const std::vector<BatchTransform> tfms{Normalize{{0.2860}, {0.3530}}};
    DataLoaders dls{DataLoader(small(*train, 2048), {.bs = 64, .shuffle = true, .batch_tfms = tfms}),
                    DataLoader(small(*test, 512), {.bs = 256, .batch_tfms = tfms})};
    torch::manual_seed(0);
    torch::nn::Sequential model(torch::nn::Flatten(), torch::nn::Linear(784, 64), torch::nn::ReLU(),
                                torch::nn::Linear(64, 10));
    Learner learn(dls, model, CrossEntropyLoss(), {metrics::accuracy()}, quiet());
    silence(learn);
    const auto before = learn.validate();
    learn.fit_one_cycle(2, 1e-2);
    const auto after = learn.validate();
    CHECK(after[0] < 0.5 * before[0]);
    CHECK(after[1] > 0.7);
    CHECK(learn.recorder->losses.back() < learn.recorder->losses.front());
  }

  TEST_CASE("lr_find restores the weights and optimizer state, and suggests an lr in range") {
    Learner learn(synthetic_dls(64, 8, 8), tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    learn.fit(1, 1e-3);  // some optimizer state to restore
    const auto weights = snapshot(learn.model.module());
    const auto opt_state = learn.opt->state_dict();
    const auto plot = temp_path("lr_find.png");
    const auto result = learn.lr_find({.num_it = 30, .plot = plot});
    CHECK(all_equal(weights, snapshot(learn.model.module())));
    CHECK(dicts_equal(opt_state, learn.opt->state_dict()));
    CHECK(result.lrs.size() >= 10);
    CHECK(result.valley > 1e-7);
    CHECK(result.valley < 10);
    CHECK(std::filesystem::file_size(plot) > 100);
    std::filesystem::remove(plot);
  }

  TEST_CASE("lr_find runs num_it batches also where a callback shards the training loader first (to_distributed's)") {
    struct HalfOfTheData : Callback {  // rank 0 of 2, as DistributedTrainer's before_fit leaves the loader
      HalfOfTheData() { order = 11; }
      void before_fit() override {
        auto& train = learn().dls.train;
        train.set_sampler(std::make_shared<DistributedSampler>(train.own_sampler(), 0, 2));
      }
      void after_fit() override { learn().dls.train.set_sampler(nullptr); }
    };
    Learner learn(synthetic_dls(64, 8, 8), tiny_model(), CrossEntropyLoss(), {},
                  quiet({.cbs = {std::make_shared<HalfOfTheData>()}}));
    silence(learn);
    const auto found = learn.lr_find({.num_it = 20, .stop_div = false, .plot = ""});
    CHECK(found.lrs.size() == 20);  // 4 batches an epoch: 6 epochs, not the 3 that 8 a batch would need
    CHECK(learn.recorder->losses.size() == 20);
  }

  TEST_CASE("validate() after a fit whose validation was cancelled gives the loss and metrics, not nan") {
    struct SkipValidation : Callback {
      void before_validate() override { throw CancelValidException(); }
    };
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {metrics::accuracy()}, quiet());
    silence(learn);
    learn.fit(1, 1e-2, {.cbs = {std::make_shared<SkipValidation>()}});
    CHECK(std::isnan(learn.recorder->values.back()[1]));
    const auto valid = learn.validate();
    REQUIRE(valid.size() == 2);
    CHECK(std::isfinite(valid[0]));
    CHECK(std::isfinite(valid[1]));
  }

  TEST_CASE("lr_find with trackers and a resume checkpoint in the Learner: they sit out its batches, as in fastai") {
    const auto dir = temp_path("lr_find_trackers"), resume = temp_path("lr_find_resume.pt");
    auto early = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.patience = 1});
    Learner learn(synthetic_dls(64, 8, 8), tiny_model(), CrossEntropyLoss(), {},
                  quiet({.cbs = {early, std::make_shared<SaveModel>(SaveModelOptions{.model_dir = dir}),
                                 std::make_shared<ResumeFromCheckpoint>(resume)}}));
    silence(learn);
    const auto weights = snapshot(learn.model.module());
    learn.lr_find({.num_it = 20, .stop_div = false, .plot = ""});
    CHECK(learn.recorder->losses.size() == 20);  // 3 epochs of 8 batches; EarlyStopping did not end it after one
    CHECK(all_equal(weights, snapshot(learn.model.module())));
    CHECK(!std::filesystem::exists(dir));
    CHECK(!std::filesystem::exists(resume));
    learn.fit(1, 1e-2);  // and they are back for the next fit
    CHECK(std::filesystem::exists(dir + "/model.pt"));
    CHECK(early->best() == learn.recorder->values.back()[1]);
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("lr_find under loss scaling ends at a nan/inf loss and restores the weights, as in fastai") {
    auto calls = std::make_shared<int>(0);
    Loss loss([calls](const torch::Tensor& pred, const torch::Tensor& target) {
      auto l = torch::nn::functional::cross_entropy(pred, target);
      return ++*calls >= 20 ? l * std::numeric_limits<float>::infinity() : l;
    });
    Learner learn(synthetic_dls(64, 8, 8), tiny_model(), loss, {},
                  quiet({.cbs = {std::make_shared<MixedPrecision>(
                      MixedPrecisionOptions{.dtype = torch::kBFloat16, .loss_scale = true})}}));
    silence(learn);
    const auto weights = snapshot(learn.model.module());
    const auto found = learn.lr_find({.num_it = 50, .plot = ""});
    CHECK(learn.recorder->losses.size() == 20);  // stopped at the first infinite loss
    CHECK(all_equal(weights, snapshot(learn.model.module())));
    CHECK(found.valley > 1e-7);
  }

  TEST_CASE("lr_find stopped by a NaN loss suggests from every point before it, as fastai's, which runs on to num_it") {
    std::vector<double> lrs, losses;
    for (int i = 0; i < 100; ++i) {
      lrs.push_back(1e-7 * std::pow(1e8, i / 100.0));
      losses.push_back(i < 14 ? 2 - 0.01 * i + 0.005 * (i % 3) : std::nan(""));
    }
    // fastai's whole record: points 10 to 13 (from num_it / 10 to the NaN); the record lr_find keeps ends at the NaN.
    const auto whole = suggest_lrs(lrs, losses, 100);
    const auto cut = suggest_lrs({lrs.begin(), lrs.begin() + 15}, {losses.begin(), losses.begin() + 15}, 100);
    CHECK(whole.minimum == lrs[13] / 10);
    CHECK(cut.minimum == whole.minimum);
    CHECK(cut.steep == whole.steep);
    CHECK(cut.valley == whole.valley);
    CHECK(std::isnan(cut.slide));  // 4 points: no window of 15 to slide

    const auto nan_from = [](int call) {
      auto calls = std::make_shared<int>(0);
      return Loss([calls, call](const torch::Tensor& pred, const torch::Tensor& target) {
        const auto loss = torch::nn::functional::cross_entropy(pred, target);
        return ++*calls >= call ? loss * std::nan("") : loss;
      });
    };
    Learner learn(synthetic_dls(64, 8, 8), tiny_model(), nan_from(15), {}, quiet());
    silence(learn);
    const auto found = learn.lr_find({.plot = ""});
    CHECK(found.losses.size() == 15);
    CHECK(found.minimum >= found.lrs[10] / 10);  // from points 10 to 13 (before: too few points, an Error)
    CHECK(found.minimum <= found.lrs[13] / 10);
    Learner at_once(synthetic_dls(64, 8, 8), tiny_model(), nan_from(1), {}, quiet());
    silence(at_once);
    CHECK(error_of([&] { at_once.lr_find({.plot = ""}); }) ==
          "lr_find: the loss is NaN from training batch 1 (lr " + spec_text::number(1e-7) +
              "), too early to suggest a learning rate: lower start_lr, or find what makes the loss NaN");
  }

  TEST_CASE("a checkpoint whose folder cannot be made is an Error naming the folder, after the barrier") {
    const auto file = temp_path("not_a_folder");
    std::ofstream(file) << "x";
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    CHECK(error_of([&] { learn.save(file + "/models/model.pt"); }) ==
          "cannot write checkpoint '" + file + "/models/model.pt': cannot make its folder '" + file +
              "/models': Not a directory");
    // Distributed, rank 0 reaches the barrier before it throws, so that no rank waits for it in vain,
    // and says there that it failed; the other ranks write nothing and stop with it.
    std::vector<bool> outcomes;
    bool rank_0_wrote = false;
    learn.barrier = [&](bool ok) {
      outcomes.push_back(ok);
      return ok && rank_0_wrote;
    };
    const auto written = error_of([&] { learn.save(file + "/model.pt"); });
    CHECK(written.rfind("cannot write checkpoint '" + file + "/model.pt'", 0) == 0);
    CHECK(outcomes == std::vector<bool>{false});
    learn.rank = 1;
    CHECK(error_of([&] { learn.save(file + "/models/model.pt"); }) ==
          "rank 0 could not write its file (its own error says why): rank 1 stops with it");
    rank_0_wrote = true;
    learn.save(file + "/models/model.pt");
    CHECK(outcomes == std::vector<bool>{false, true, true});
    CHECK(!std::filesystem::exists(file + "/models"));
    std::filesystem::remove(file);
  }

  TEST_CASE("write_atomically names what it writes, takes no file there for its temporary, and leaves none behind") {
    const auto dir = temp_path("atomic");
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir + "/taken.png");  // a folder where the file would go: the rename fails
    // A file of the name another writer's temporary might have: neither written over nor renamed.
    const auto other = dir + "/a.png.tmp." + std::to_string(::getpid());
    std::ofstream(other) << "another writer's";
    write_atomically(dir + "/a.png", {'p', 'n', 'g'}, "image");
    const auto text = [](const std::string& path) {
      const auto bytes = read_file(path);
      return std::string(bytes.begin(), bytes.end());
    };
    CHECK(text(dir + "/a.png") == "png");
    CHECK(text(other) == "another writer's");
    CHECK(error_of([&] { write_atomically(dir + "/taken.png", {'x'}, "image"); }) ==
          "cannot write image '" + dir + "/taken.png': Is a directory");
    CHECK(error_of([&] { write_atomically(dir + "/a.png/b.pt", {'x'}); }) ==
          "cannot write checkpoint '" + dir + "/a.png/b.pt': cannot make its folder '" + dir +
              "/a.png': Not a directory");
    // Writers of one file on four threads: each writes its own temporary; the file is one of theirs, whole.
    std::vector<std::string> errors(4);
    std::vector<std::thread> writers;
    for (size_t w = 0; w < 4; ++w)
      writers.emplace_back([&, w] {
        const std::vector<char> bytes(1 << 20, static_cast<char>('a' + w));
        errors[w] = error_of([&] { write_atomically(dir + "/shared.pt", bytes); });
      });
    for (auto& writer : writers) writer.join();
    CHECK(errors == std::vector<std::string>(4, "(no fastcpp::Error thrown)"));
    const auto shared = read_file(dir + "/shared.pt");
    REQUIRE(shared.size() == 1 << 20);
    CHECK(std::count(shared.begin(), shared.end(), shared[0]) == 1 << 20);
    std::set<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) names.insert(entry.path().filename().string());
    CHECK(names == std::set<std::string>{"a.png", "a.png.tmp." + std::to_string(::getpid()), "shared.pt", "taken.png"});
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("a checkpoint is streamed to its file: the same bytes, and a write or a producer that fails leaves nothing") {
    const auto dir = temp_path("streamed");
    std::filesystem::remove_all(dir);
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    learn.create_opt();
    learn.save(dir + "/model.pt");
    CHECK(read_file(dir + "/model.pt") == torch_save_bytes(checkpoint::contents(learn, /*with_opt=*/true)));
    CHECK(error_of([&] {
            write_atomically(dir + "/failed.pt", [](const ByteSink& sink) {
              sink("half", 4);
              throw Error("the producer failed");
            });
          }) == "the producer failed");
    // A write the file system refuses midway (a file size limit: EFBIG), inside torch.save's zip
    // writer, which must not see it (its destructor would end the process).
    struct SizeLimit {
      rlimit before{};
      void (*handler)(int) = ::signal(SIGXFSZ, SIG_IGN);
      explicit SizeLimit(rlim_t bytes) {
        ::getrlimit(RLIMIT_FSIZE, &before);
        const rlimit limit{bytes, before.rlim_max};
        ::setrlimit(RLIMIT_FSIZE, &limit);
      }
      ~SizeLimit() {
        ::setrlimit(RLIMIT_FSIZE, &before);
        ::signal(SIGXFSZ, handler);
      }
    };
    std::string refused;
    {
      const SizeLimit limit(512);
      refused = error_of([&] { learn.save(dir + "/limited.pt"); });
    }
    CHECK(refused == "cannot write checkpoint '" + dir + "/limited.pt': File too large");
    std::set<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) names.insert(entry.path().filename().string());
    CHECK(names == std::set<std::string>{"model.pt"});
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("read_file: a directory or a failed read is an Error naming the file, not an empty or short file") {
    const auto dir = temp_path("read_dir");
    std::filesystem::create_directories(dir);
    CHECK(error_of([&] { read_file(dir, "CSV file"); }) == "CSV file '" + dir + "' is a directory");
    std::filesystem::remove(dir);
    // The kernel refuses a read at address 0 of a process's memory.
    CHECK(error_of([] { read_file("/proc/self/mem"); }) ==
          "checkpoint '/proc/self/mem' cannot be read: Input/output error");
    // A file whose size is not known beforehand (0 here) is read to its end.
    std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
    const std::vector<char> expected{std::istreambuf_iterator<char>(cmdline), std::istreambuf_iterator<char>()};
    CHECK(!expected.empty());
    CHECK(read_file("/proc/self/cmdline") == expected);
  }

  TEST_CASE("a save removes what killed writes of the file left: temporaries nobody holds locked, an hour old") {
    namespace fs = std::filesystem;
    const auto folder = temp_path("stale_temporaries");
    fs::remove_all(folder);
    fs::create_directories(folder);
    const auto path = folder + "/model.pt";
    const auto temporary = [&](const std::string& name, bool old) {
      std::ofstream(folder + "/" + name) << "half a checkpoint";
      if (old) fs::last_write_time(folder + "/" + name, fs::file_time_type::clock::now() - std::chrono::hours(2));
      return folder + "/" + name;
    };
    const auto killed = temporary("model.pt.tmp.4242.0", true), fresh = temporary("model.pt.tmp.4243.0", false),
               writing = temporary("model.pt.tmp.4244.0", true), other = temporary("other.pt.tmp.4242.0", true);
    const int held = ::open(writing.c_str(), O_RDONLY);  // a writer still at it: holds its lock
    REQUIRE(held >= 0);
    REQUIRE(::flock(held, LOCK_EX) == 0);
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    learn.save(path);
    ::close(held);
    CHECK_FALSE(fs::exists(killed));
    CHECK(fs::exists(fresh));    // perhaps created a moment ago, not yet locked
    CHECK(fs::exists(writing));
    CHECK(fs::exists(other));    // another file's
    CHECK(fs::exists(path));
    fs::remove_all(folder);
  }

  TEST_CASE("save -> load gives identical predictions and optimizer state") {
    const auto path = temp_path("roundtrip.pt");
    Learner a(synthetic_dls(), tiny_model(4, 3, 1), CrossEntropyLoss(), {}, quiet());
    silence(a);
    a.fit(2, 1e-2);
    a.save(path);
    for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
      CHECK(entry.path().filename().string().find("roundtrip.pt.tmp.") == std::string::npos);  // no temporary left
    Learner b(synthetic_dls(), tiny_model(4, 3, 2), CrossEntropyLoss(), {}, quiet());
    b.load(path);
    CHECK(torch::equal(a.get_preds().preds, b.get_preds().preds));
    CHECK(dicts_equal(a.opt->state_dict(), b.opt->state_dict()));
    CHECK(b.epoch == a.epoch);
    std::filesystem::remove(path);
  }

  TEST_CASE("an optimizer state of another kind is refused; a file without one is said when it was asked for") {
    const auto path = temp_path("kind.pt");
    Learner with_momentum(synthetic_dls(), tiny_model(4, 3, 1), CrossEntropyLoss(), {},
                          quiet({.opt_func = sgd({.mom = 0.9})}));
    silence(with_momentum);
    with_momentum.fit(1, 1e-2);
    with_momentum.save(path);
    Learner adam(synthetic_dls(), tiny_model(4, 3, 2), CrossEntropyLoss(), {}, quiet());
    std::vector<std::string> said;
    adam.logger = [&](const std::string& line) { said.push_back(line); };
    adam.create_opt();
    const auto weights = snapshot(adam.model.module());
    CHECK(error_of([&] { adam.load(path); }) ==
          "cannot read checkpoint '" + path + "' (optimizer state): it is SGD's, the learner's optimizer is Adam");
    CHECK(all_equal(snapshot(adam.model.module()), weights));
    adam.load(path, /*with_opt=*/false);
    CHECK(said.empty());
    with_momentum.save(path, /*with_opt=*/false);
    adam.load(path);
    CHECK(said == std::vector<std::string>{"checkpoint '" + path + "' holds no optimizer state (saved with with_opt = "
                                           "false): the optimizer keeps its own"});
    // A wrapper's state names what it wraps.
    Learner slow_sgd(synthetic_dls(), tiny_model(4, 3, 1), CrossEntropyLoss(), {},
                     quiet({.opt_func = lookahead(sgd())}));
    silence(slow_sgd);
    slow_sgd.fit(1, 1e-2);
    slow_sgd.save(path);
    Learner ranged(synthetic_dls(), tiny_model(4, 3, 2), CrossEntropyLoss(), {}, quiet({.opt_func = ranger()}));
    ranged.create_opt();
    CHECK(error_of([&] { ranged.load(path); }) == "cannot read checkpoint '" + path +
                                                      "' (optimizer state): it is Lookahead<SGD>'s, the learner's "
                                                      "optimizer is Lookahead<RAdam>");
    std::filesystem::remove(path);
  }

  TEST_CASE("load with strict false (fastai's strict=False): a new head keeps its weights, the body is loaded") {
    const auto path = temp_path("body.pt");
    Learner a(synthetic_dls(), tiny_model(4, 3, 1), CrossEntropyLoss(), {}, quiet());
    silence(a);
    a.fit(1, 1e-2);
    a.save(path);
    torch::nn::Sequential longer(torch::nn::Linear(4, 8), torch::nn::ReLU(), torch::nn::Linear(8, 3), torch::nn::ReLU(),
                                 torch::nn::Linear(3, 3));
    Learner b(synthetic_dls(), longer, CrossEntropyLoss(), {}, quiet());
    std::vector<std::string> said;
    b.logger = [&](const std::string& line) { said.push_back(line); };
    b.create_opt();
    const auto before = snapshot(b.model.module());
    CHECK(error_of([&] { b.load(path); }).rfind("checkpoint '" + path + "' does not fit the model", 0) == 0);
    CHECK(all_equal(snapshot(b.model.module()), before));
    b.load(path, /*with_opt=*/true, /*strict=*/false);
    const auto loaded = snapshot(b.model.module()), saved = snapshot(a.model.module());
    for (size_t k = 0; k < 4; ++k) CHECK(torch::equal(loaded[k], saved[k]));  // 0.weight ... 2.bias
    for (size_t k = 4; k < 6; ++k) CHECK(torch::equal(loaded[k], before[k]));  // the new layer's own
    // The saved optimizer state is for 4 parameters, the model has 6: it keeps its own, and says so.
    REQUIRE(said.size() == 1);
    CHECK(said[0].rfind("could not load the optimizer state of checkpoint '" + path + "', which keeps its own (", 0) == 0);
    std::filesystem::remove(path);
  }

  TEST_CASE("a corrupt or mismatched checkpoint names the file and the entry, and changes nothing") {
    const auto path = temp_path("model.pt");
    Learner a(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    a.save(path);

    Learner wider(synthetic_dls(), torch::nn::Sequential(torch::nn::Linear(4, 16), torch::nn::ReLU(), torch::nn::Linear(16, 3)),
                  CrossEntropyLoss(), {}, quiet());
    const auto weights = snapshot(wider.model.module());
    CHECK(error_of([&] { wider.load(path); }) == "checkpoint '" + path +
                                                     "' does not fit the model: shape differs: '0.weight' is [8, 4] in the file but "
                                                     "[16, 4] in the model, '0.bias' is [8] in the file but [16] in the model, "
                                                     "'2.weight' is [3, 8] in the file but [3, 16] in the model");
    CHECK(all_equal(weights, snapshot(wider.model.module())));

    Learner deeper(synthetic_dls(), torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::ReLU(), torch::nn::Linear(8, 3), torch::nn::Linear(3, 3)),
                   CrossEntropyLoss(), {}, quiet());
    CHECK(error_of([&] { deeper.load(path); }) ==
          "checkpoint '" + path + "' does not fit the model: missing from the file: '3.weight', '3.bias'");

    std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
    const auto message = error_of([&] { a.load(path); });
    CHECK(message.rfind("cannot read checkpoint '" + path + "': the file is truncated or not a checkpoint", 0) == 0);
    std::ofstream(path) << "not a checkpoint";
    CHECK(error_of([&] { a.load(path); }).rfind("cannot read checkpoint '" + path + "'", 0) == 0);
    std::filesystem::remove(path);
    CHECK(error_of([&] { a.load(path); }) == "checkpoint '" + path + "' not found or unreadable");
  }

  TEST_CASE("an archive whose directory points past its end is an error, not a crash (found by fuzzing)") {
    // tests/fixtures/damaged_archive.zip: a torch.save file damaged by libFuzzer so that
    // libtorch's own in-memory readers copied from past the end of the bytes.
    const auto damaged = std::string(FASTCPP_FIXTURES) + "/damaged_archive.zip";
    const auto bytes = read_file(damaged);
    CHECK_THROWS_AS(read_torch_file(bytes), Error);
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    CHECK(error_of([&] { learn.load(damaged); }).rfind("cannot read checkpoint '" + damaged + "': the file is truncated or not a checkpoint (", 0) == 0);
    CHECK_THROWS_AS(load_state_dict(*tiny_model(), damaged), Error);
  }

  TEST_CASE("an archive whose record claims more bytes than the file holds is refused before allocating (found by fuzzing)") {
    // tests/fixtures/oversized_record.zip: 2703 bytes whose directory gives a stored record
    // 4 GB; libtorch's reader allocated that twice (8 GB) before reading a byte.
    const auto path = std::string(FASTCPP_FIXTURES) + "/oversized_record.zip";
    CHECK(error_of([&] { read_torch_file(read_file(path)); }) ==
          "the archive's record lr_find_init/.data/serialization_id claims 4294967295 bytes from 0 in a file of 2703");
    // The same with a damaged classic directory record: the zip64 one is what the reader follows.
    CHECK(error_of([&] { read_torch_file(read_file(std::string(FASTCPP_FIXTURES) + "/oversized_record_zip64.zip")); }) ==
          "the archive's record lr_find_init/.data/serialization_id claims 4294967295 bytes from 0 in a file of 2704");
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    CHECK(error_of([&] { learn.load(path); }).rfind("cannot read checkpoint '" + path + "': the file is truncated or not a checkpoint (the archive's record", 0) == 0);
  }

  TEST_CASE("a pickle of values nested too deep is an error, not a stack overflow when they are destroyed") {
    const auto archive = [](const std::string& pickle) {
      std::vector<char> bytes;
      caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) {
        bytes.insert(bytes.end(), static_cast<const char*>(data), static_cast<const char*>(data) + n);
        return n;
      });
      writer.writeRecord("data.pkl", pickle.data(), pickle.size());
      writer.writeEndOfFile();
      return bytes;
    };
    // n empty lists, each appended to the one below it: n - 1 levels of lists around the innermost.
    const auto nested = [](size_t n) { return std::string(n, ']') + std::string(n - 1, 'a') + "."; };
    CHECK(error_of([&] { read_torch_file(archive(nested(200000))); }) ==
          "the pickle holds values nested deeper than 1000 levels");
    CHECK(error_of([&] { read_torch_file(archive(nested(1002))); }) ==
          "the pickle holds values nested deeper than 1000 levels");
    CHECK(read_torch_file(archive(nested(1001))).toListRef().size() == 1);
    // The same from the outside in: list k, given back by the memo after it was placed,
    // takes list k + 1, which the memo then gives back in turn; no depth shows as they are made.
    std::string outside_in{']', 'q', '\0', 'N'};  // list 0 (memo 0); a None that drops what is appended to it
    for (int k = 0; k + 1 < 200000; ++k)  // list k from memo 0 takes list k + 1, the next memo 0
      outside_in += std::string{'(', 'h', '\0', ']', 'q', '\1', 'a', 'h', '\1', 'q', '\0', 'e'};
    CHECK(error_of([&] { read_torch_file(archive(outside_in + "a.")); }) ==  // the None into list 0, returned
          "malformed pickle (a list or dict grows after it was placed in a container)");
    const std::string itself{']', '\x94', 'h', '\0', 'a', '.'};  // a list appended to itself
    CHECK(error_of([&] { read_torch_file(archive(itself)); }) ==
          "malformed pickle (a list or dict grows after it was placed in a container)");
  }

  TEST_CASE("a checkpoint with a missing, mistyped or out-of-range entry is an error naming it, and changes nothing (found by fuzzing)") {
    const auto path = temp_path("entries.pt");
    Learner a(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    a.fit(1, 0.01);
    a.save(path);
    const auto saved = read_torch_file(read_file(path)).toGenericDict();
    Learner b(synthetic_dls(), tiny_model(4, 3, 1), CrossEntropyLoss(), {}, quiet());
    b.fit(2, 0.02);  // other weights, lr, steps and buffers than the file's
    const auto weights = snapshot(b.model.module());
    const auto state = b.opt->state_dict();
    const auto epoch = b.epoch;
    auto load_edited = [&](Learner& into, const std::function<void(c10::impl::GenericDict&)>& edit) {
      auto root = saved.copy();
      edit(root);
      const auto bytes = torch::pickle_save(root);
      std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      return error_of([&] { into.load(path); });
    };
    auto edit_entry = [&](const char* part, const std::string& key, const c10::IValue& value) {
      return [=](c10::impl::GenericDict& root) {
        const auto part_key = c10::IValue(std::string(part));
        auto dict = root.contains(part_key) ? root.at(part_key).toGenericDict().copy() : GradScaler().state_dict();
        dict.insert_or_assign(c10::IValue(key), value);
        root.insert_or_assign(part_key, dict);
      };
    };
    const auto cannot = "cannot read checkpoint '" + path + "'";
    CHECK(load_edited(b, [](auto& root) { (void)root.erase(c10::IValue(std::string("epoch"))); }) ==
          cannot + ": its 'epoch' entry is missing or of the wrong type");
    CHECK(load_edited(b, [](auto& root) { root.insert_or_assign(c10::IValue(std::string("epoch")), c10::IValue(-1)); }) ==
          cannot + ": its 'epoch' entry -1 is out of range");
    CHECK(load_edited(b, [](auto& root) { root.insert_or_assign(c10::IValue(std::string("model")), c10::IValue(3)); }) ==
          cannot + ": its 'model' entry is missing or of the wrong type");
    CHECK(load_edited(b, edit_entry("opt", "0.lr", c10::IValue(std::string("fast")))) ==
          cannot + " (optimizer state): its '0.lr' entry is missing or of the wrong type");
    // The last parameter's: a load that wrote the earlier parameters first would show below.
    CHECK(load_edited(b, edit_entry("opt", "0.3.grad_avg", c10::IValue(torch::zeros({3}, torch::kLong)))) ==
          cannot + " (optimizer state): its '0.3.grad_avg' entry is not a floating-point tensor of its parameter's shape [3]");
    CHECK(load_edited(b, edit_entry("scaler", "growth_tracker", c10::IValue(std::string("x")))) ==
          cannot + " (GradScaler state): its 'growth_tracker' entry is missing or of the wrong type");
    CHECK(load_edited(b, edit_entry("scaler", "scale", c10::IValue(1e39))) ==
          cannot + " (GradScaler state): need 0 < scale <= 3.4e38, growth_factor > 1, 0 < backoff_factor < 1, "
                   "0 <= growth_tracker < growth_interval < 2^31");
    CHECK(all_equal(weights, snapshot(b.model.module())));
    const auto after = b.opt->state_dict();
    CHECK(after.size() == state.size());
    for (const auto& entry : state) {
      const auto& now = after.at(entry.key());
      CHECK((entry.value().isTensor() ? torch::equal(now.toTensor(), entry.value().toTensor()) : now == entry.value()));
    }
    CHECK(b.scaler == nullptr);
    CHECK(b.epoch == epoch);
    // A learner without an optimizer keeps none when the file's is bad.
    Learner fresh(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    CHECK(load_edited(fresh, edit_entry("opt", "0.lr", c10::IValue(std::string("fast")))) ==
          cannot + " (optimizer state): its '0.lr' entry is missing or of the wrong type");
    CHECK(fresh.opt == nullptr);
    // And the unedited file loads.
    CHECK(load_edited(b, [](auto&) {}) == "(no fastcpp::Error thrown)");
    CHECK(all_equal(snapshot(a.model.module()), snapshot(b.model.module())));
    CHECK(b.opt->param_groups()[0].hypers.at("lr") == doctest::Approx(0.01));
    std::filesystem::remove(path);
  }

  TEST_CASE("a checkpoint whose pickle claims a huge memo is an error, not a 27 GB allocation (found by fuzzing)") {
    // tests/fixtures/checkpoint_huge_memo.zip: a checkpoint of tests/fuzz/checkpoint_fuzz.cpp's
    // learner with libFuzzer's data.pkl (tests/fuzz/corpus/checkpoint/huge_memo_pickle.bin),
    // whose memo index made libtorch's unpickler size its memo table to 1.7e9 entries.
    const auto damaged = std::string(FASTCPP_FIXTURES) + "/checkpoint_huge_memo.zip";
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    CHECK(error_of([&] { learn.load(damaged); }) ==
          "cannot read checkpoint '" + damaged + "': the file is truncated or not a checkpoint (unsupported pickle opcode 110)");
  }

  TEST_CASE("labels outside [0, n_classes) are an error naming the batch, not an abort") {
    auto x = torch::randn({6, 4});
    auto y = torch::tensor({0, 1, 2, 1, 12, 0}, torch::kLong);
    auto ds = std::make_shared<TensorDataset>(x, y);
    Learner learn({DataLoader(ds, {.bs = 2}), DataLoader(ds, {.bs = 2})}, tiny_model(), CrossEntropyLoss(), {},
                  quiet());
    silence(learn);
    CHECK(error_of([&] { learn.fit(1); }) ==
          "label 12 at position 0 of the batch is outside [0, 3): the model has 3 outputs; check the dataset's "
          "labels or the model's output size\n\t(in training batch 2 of epoch 0)");
    // int32 labels in a strided view, {0, 2, -1}: the check reads them where they are
    const auto labels = torch::tensor({0, 9, 2, 9, -1, 9}, torch::kInt).slice(0, 0, 6, 2);
    CHECK(error_of([&] { CrossEntropyLoss()(torch::zeros({3, 3}), labels); }) ==
          "label -1 at position 2 of the batch is outside [0, 3): the model has 3 outputs; check the dataset's "
          "labels or the model's output size");
    CHECK(CrossEntropyLoss()(torch::zeros({2, 3}), labels.narrow(0, 0, 2)).item<double>() == doctest::Approx(std::log(3.0)));
  }

  TEST_CASE("a forward shape mismatch is an error with the input shape") {
    Learner learn(synthetic_dls(), tiny_model(5, 3), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    const auto message = error_of([&] { learn.fit(1); });
    CHECK(message.rfind("the model's forward failed on input of shape [2, 4]: ", 0) == 0);
    CHECK(message.find("(in training batch 0 of epoch 0)") != std::string::npos);
    // Image bytes that reach a model (no Normalize in the batch_tfms): the message says what is missing.
    auto bytes = std::make_shared<TensorDataset>(torch::zeros({4, 4}, torch::kUInt8), torch::zeros({4}, torch::kLong));
    DataLoaders byte_dls{DataLoader(bytes, {.bs = 2}), DataLoader(bytes, {.bs = 2})};
    Learner raw(byte_dls, tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(raw);
    const auto raw_message = error_of([&] { raw.fit(1); });
    CHECK(raw_message.rfind("the model's forward failed on input of shape [2, 4] and type Byte (put a Normalize, or "
                            "IntToFloat, in the loaders' batch_tfms): ",
                            0) == 0);
  }

  TEST_CASE("libtorch's errors in the loss and the backward pass name the part and the batch") {
    Loss failing([](const torch::Tensor&, const torch::Tensor&) -> torch::Tensor {
      TORCH_CHECK(false, "no loss for these");
    });
    Learner learn(synthetic_dls(), tiny_model(), failing, {}, quiet());
    silence(learn);
    CHECK(error_of([&] { learn.fit(1); }) ==
          "the loss failed on a prediction of shape [2, 3] and a target of shape [2]: no loss for these\n\t(in training "
          "batch 0 of epoch 0)");
    Loss constant([](const torch::Tensor& pred, const torch::Tensor&) { return torch::zeros({}, pred.options()); });
    Learner no_graph(synthetic_dls(), tiny_model(), constant, {}, quiet());
    silence(no_graph);
    CHECK(error_of([&] { no_graph.fit(1); }).rfind("the backward pass failed: element 0 of tensors does not require grad",
                                                   0) == 0);
  }

  TEST_CASE("GradientAccumulation over k batches equals one batch k times larger") {
    auto run = [](int64_t bs, std::vector<CallbackPtr> cbs) {
      Learner learn(synthetic_dls(16, 4, bs), tiny_model(4, 3, 5), CrossEntropyLoss(), {},
                    quiet({.opt_func = sgd({.mom = 0.9}), .cbs = std::move(cbs)}));
      silence(learn);
      learn.fit(2, 0.1);
      return snapshot(learn.model.module());
    };
    const auto big_batches = run(8, {});
    const auto accumulated = run(2, {std::make_shared<GradientAccumulation>(8)});
    const auto plain_small = run(2, {});
    REQUIRE(big_batches.size() == accumulated.size());
    for (size_t i = 0; i < big_batches.size(); ++i)
      CHECK(torch::allclose(big_batches[i], accumulated[i], 1e-5, 1e-6));
    CHECK(!torch::allclose(big_batches[0], plain_small[0], 1e-5, 1e-6));
  }

  TEST_CASE("freeze keeps the first groups' weights through training; unfreeze releases them") {
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet({.splitter = two_groups}));
    silence(learn);
    CHECK(learn.n_param_groups() == 2);
    learn.freeze();
    auto body = learn.model.module().children()[0]->parameters();
    auto head = learn.model.module().children()[2]->parameters();
    const auto body_before = body[0].detach().clone(), head_before = head[0].detach().clone();
    learn.fit(1, 1e-2);
    CHECK(torch::equal(body[0], body_before));
    CHECK(!torch::equal(head[0], head_before));
    learn.unfreeze();
    learn.fit(1, 1e-2);
    CHECK(!torch::equal(body[0], body_before));
    // Past the last group: everything frozen, and said, as fastai's warning.
    std::vector<std::string> whole;
    learn.logger = [&](const std::string& message) { whole.push_back(message); };
    learn.freeze_to(2);
    CHECK(whole == std::vector<std::string>{"freeze_to(2): the model has 2 parameter groups; the whole model is frozen "
                                            "(but for its norm layers with train_bn)"});
    for (const auto& param : head) CHECK_FALSE(param.requires_grad());
    learn.unfreeze();
    // One group (no splitter): nothing to freeze, as in fastai, but said.
    Learner one_group(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    std::vector<std::string> said;
    one_group.logger = [&](const std::string& message) { said.push_back(message); };
    one_group.freeze();
    CHECK(said == std::vector<std::string>{"freeze: the model's parameters are one group, which stays trainable "
                                           "(LearnerOptions::splitter makes a body and a head)"});
    for (const auto& param : one_group.model.module().parameters()) CHECK(param.requires_grad());
    // A parameter the program froze itself stays frozen through a new optimizer (as fastai:
    // only freeze_to and unfreeze set requires_grad).
    Learner own(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(own);
    auto weight = own.model.module().parameters()[0];
    weight.set_requires_grad(false);
    const auto weight_before = weight.detach().clone();
    own.fit(1, 1e-2);
    own.fit(1, 1e-2, {.reset_opt = true});
    CHECK_FALSE(weight.requires_grad());
    CHECK(torch::equal(weight.detach(), weight_before));
  }

  TEST_CASE("get_preds on a loader that shuffles and drops its last batch: every item, in the dataset's order") {
    const auto dls = synthetic_dls(10, 4, 4);
    DataLoader shuffled(dls.train.dataset_ptr(), {.bs = 4, .shuffle = true, .drop_last = true, .seed = 5});
    Learner learn(dls, tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    const auto all = shuffled.dataset().get_batch({0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    const auto preds = learn.get_preds(&shuffled);
    REQUIRE(preds.preds.size(0) == 10);
    CHECK(torch::equal(preds.targets, all.y));
    CHECK(torch::allclose(preds.preds, torch::softmax(learn.model(all.x), 1), 1e-6, 1e-7));
    CHECK(shuffled.options().shuffle);  // the loader itself is as it was
  }

  TEST_CASE("get_preds on a loader with a sampler of its own (weighted draws, a set one): every item once, in order") {
    const auto dls = synthetic_dls(10, 4, 4);
    const auto all = dls.train.dataset().get_batch({0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    Learner learn(dls, tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    const std::vector<double> weights{1, 0, 0, 0, 0, 0, 0, 0, 0, 5};  // draws only items 0 and 9
    DataLoader weighted(dls.train.dataset_ptr(), {.bs = 4, .sampler = std::make_shared<WeightedSampler>(weights, 3)});
    DataLoader set_later(dls.train.dataset_ptr(), {.bs = 4});
    set_later.set_sampler(std::make_shared<RandomSampler>(10, 7));
    for (auto* loader : {&weighted, &set_later}) {
      const auto preds = learn.get_preds(loader);
      REQUIRE(preds.preds.size(0) == 10);
      CHECK(torch::equal(preds.targets, all.y));
    }
    CHECK(weighted.options().sampler);  // the loaders themselves are as they were
  }

  TEST_CASE("a training loader that makes no batch (fewer items than bs, the short batch dropped) is an error") {
    auto dls = synthetic_dls(3, 4, 2);
    dls.train = DataLoader(dls.train.dataset_ptr(), {.bs = 4, .shuffle = true, .drop_last = true});
    Learner learn(dls, tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    CHECK(error_of([&] { learn.fit(1); }) ==
          "fit: the training loader makes no batch: its 3 items are fewer than its batch size 4 and it drops its last, "
          "short batch (a smaller bs, or more items)");
  }

  TEST_CASE("get_preds without a loader: every item of the valid one, also where it drops its last batch") {
    auto dls = synthetic_dls(10, 6, 4);
    dls.valid = DataLoader(dls.valid.dataset_ptr(), {.bs = 4, .drop_last = true});
    Learner learn(dls, tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    CHECK(learn.get_preds().preds.size(0) == 6);
    CHECK(learn.dl == nullptr);  // not left pointing at the in-order copy
  }

  TEST_CASE("batches without targets: validation ones count in no loss, training ones take no step") {
    struct Unlabelled : Dataset {  // the items of a test set: images, no labels
      size_t size() const override { return 4; }
      Example get(size_t i) const override { return {torch::full({4}, double(i)), torch::Tensor()}; }
      Batch get_batch(const std::vector<int64_t>& indices, uint64_t) const override {
        return {torch::stack({get(size_t(indices.front())).x, get(size_t(indices.back())).x}), torch::Tensor()};
      }
    };
    auto dls = synthetic_dls(8, 4, 4);
    dls.valid = DataLoader(std::make_shared<Unlabelled>(), {.bs = 2});
    Learner learn(dls, tiny_model(), CrossEntropyLoss(), {metrics::accuracy()}, quiet());
    silence(learn);
    learn.fit(1, 1e-2);
    const auto& row = learn.recorder->values.back();
    REQUIRE(row.size() == 3);
    CHECK(std::isfinite(row[0]));  // train_loss
    CHECK(std::isnan(row[1]));     // valid_loss: no batch had a target
    CHECK(std::isnan(row[2]));     // accuracy
    const auto test_preds = learn.get_preds();  // a test set's predictions, as fastai's targs None
    CHECK(test_preds.preds.size(0) == 4);
    CHECK_FALSE(test_preds.targets.defined());
    CHECK(error_of([&] { learn.get_preds(nullptr, /*with_loss=*/true); }) ==
          "get_preds: with_loss needs targets, and the loader's batches have none");

    auto unlabelled = dls;
    unlabelled.train = DataLoader(std::make_shared<Unlabelled>(), {.bs = 2});
    Learner idle(unlabelled, tiny_model(), CrossEntropyLoss(), {},
                 quiet({.cbs = {std::make_shared<GradientAccumulation>(4)}}));
    silence(idle);
    const auto weights = snapshot(idle.model.module());
    idle.fit(1, 1e-2);
    CHECK(all_equal(weights, snapshot(idle.model.module())));
  }

  TEST_CASE("get_preds returns activated predictions and targets; predict one item") {
    Learner learn(synthetic_dls(8, 6, 4), tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    const auto preds = learn.get_preds();
    CHECK((preds.preds.sizes() == torch::IntArrayRef{6, 3}));
    CHECK(torch::allclose(preds.preds.sum(1), torch::ones({6})));
    CHECK(torch::equal(preds.targets, learn.dls.valid.dataset().get_batch({0, 1, 2, 3, 4, 5}).y));
    const auto item = learn.dls.valid.dataset().get(4).x;
    CHECK(torch::allclose(learn.predict(item), preds.preds[4], 1e-6, 1e-7));
    const auto refused = error_of([&] { learn.predict(torch::zeros({5})); });
    CHECK(refused.rfind("predict: the item [5] does not go through the model: mat1 and mat2 shapes cannot be", 0) == 0);
  }

  TEST_CASE("get_preds: targets padded to each batch's longest (box lists) come back padded with -1 to the longest") {
    struct Boxes : Dataset {  // item i has i + 1 boxes; a batch pads to its longest with -1, as box_targets
      size_t size() const override { return 4; }
      Example get(size_t i) const override {
        return {torch::full({4}, double(i)), torch::full({int64_t(i) + 1, 5}, double(i))};
      }
      Batch collate_items(const std::vector<Example>& items) const override {
        auto y = torch::full({int64_t(items.size()), items.back().y.size(0), 5}, -1.0);
        std::vector<torch::Tensor> xs;
        for (size_t k = 0; k < items.size(); ++k) {
          xs.push_back(items[k].x);
          y[int64_t(k)].narrow(0, 0, items[k].y.size(0)).copy_(items[k].y);
        }
        return {torch::stack(xs), y};
      }
    };
    auto boxes = std::make_shared<Boxes>();
    DataLoaders dls{DataLoader(boxes, {.bs = 2}), DataLoader(boxes, {.bs = 2})};
    Learner learn(dls, tiny_model(), [](const torch::Tensor& pred, const torch::Tensor&) { return pred.mean(); }, {},
                  quiet());
    silence(learn);
    const auto targets = learn.get_preds().targets;  // batches [2, 2, 5] and [2, 4, 5]
    REQUIRE((targets.sizes() == torch::IntArrayRef{4, 4, 5}));
    for (int64_t i = 0; i < 4; ++i) {
      CAPTURE(i);
      CHECK(torch::equal(targets[i].narrow(0, 0, i + 1), torch::full({i + 1, 5}, double(i))));
      CHECK(torch::equal(targets[i].narrow(0, i + 1, 3 - i), torch::full({3 - i, 5}, -1.0)));
    }
  }
}

namespace {
// A valid set whose augmented twin adds noise drawn from each item's stream.
class NoisyTwin : public fastcpp::Dataset {
 public:
  explicit NoisyTwin(std::shared_ptr<fastcpp::TensorDataset> items, bool noisy = false)
      : items_(std::move(items)), noisy_(noisy) {}
  using Dataset::get;
  size_t size() const override { return items_->size(); }
  fastcpp::Example get(size_t index) const override { return items_->get(index); }
  fastcpp::Example get(size_t index, fastcpp::Rng& rng) const override {
    auto item = items_->get(index);
    if (noisy_) item.x = item.x + rng.uniform(-1, 1);
    return item;
  }
  fastcpp::DatasetPtr augmented() const override { return std::make_shared<NoisyTwin>(items_, true); }

 private:
  std::shared_ptr<fastcpp::TensorDataset> items_;
  bool noisy_;
};
}  // namespace

TEST_SUITE("learner") {
  TEST_CASE("tta blends the mean of n augmented passes with the plain predictions (fastai's lerp)") {
    auto dls = synthetic_dls(8, 6, 4);
    auto valid_items = synthetic_dataset(6, 4, 3, 2);
    dls.valid = DataLoader(std::make_shared<NoisyTwin>(valid_items), {.bs = 4});
    Learner learn(dls, tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);

    DataLoader augmented(learn.dls.valid.dataset().augmented(), {.bs = 4});
    std::vector<torch::Tensor> passes;
    for (learn.epoch = 0; learn.epoch < 3; ++learn.epoch) passes.push_back(learn.get_preds(&augmented).preds);
    learn.epoch = 0;
    const auto plain = learn.get_preds();
    REQUIRE(!torch::allclose(passes[0], plain.preds));  // the passes do see other inputs
    REQUIRE(!torch::allclose(passes[0], passes[1]));

    const auto blended = learn.tta({.n = 3, .beta = 0.25});
    const auto expected = 0.75 * (passes[0] + passes[1] + passes[2]) / 3 + 0.25 * plain.preds;
    CHECK(torch::allclose(blended.preds, expected, 1e-6, 1e-7));
    CHECK(torch::equal(blended.targets, plain.targets));
    CHECK(torch::equal(learn.tta({.n = 3, .beta = 0.25}).preds, blended.preds));  // the same draws every call
    CHECK(learn.epoch == 0);

    const auto maxed = learn.tta({.n = 3, .use_max = true});
    CHECK(torch::equal(maxed.preds, torch::max(torch::max(passes[0], passes[1]), torch::max(passes[2], plain.preds))));
  }

  TEST_CASE("tta applies the training loader's batch augmentation in its passes, as fastai's (training mode)") {
    struct Noise : BatchAugment {  // a training-only batch augmentation
      Batch apply(Batch batch, uint64_t seed) const override {
        Rng rng(seed);
        batch.x = batch.x + rng.uniform(-1, 1);
        return batch;
      }
    };
    const auto noise = std::make_shared<Noise>();
    DataLoaders dls{DataLoader(synthetic_dataset(8, 4, 3, 1), {.bs = 4, .aug_tfms = {noise}}),
                    DataLoader(synthetic_dataset(6, 4, 3, 2), {.bs = 4})};
    Learner learn(dls, tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    DataLoader augmented(learn.dls.valid.dataset_ptr(), {.bs = 4, .aug_tfms = {noise}});
    std::vector<torch::Tensor> passes;
    for (learn.epoch = 0; learn.epoch < 2; ++learn.epoch) passes.push_back(learn.get_preds(&augmented).preds);
    learn.epoch = 0;
    const auto plain = learn.get_preds().preds;
    REQUIRE(!torch::allclose(passes[0], plain));
    const auto expected = 0.75 * (passes[0] + passes[1]) / 2 + 0.25 * plain;
    CHECK(torch::allclose(learn.tta({.n = 2, .beta = 0.25}).preds, expected, 1e-6, 1e-7));
  }

  TEST_CASE("fine_tune and the one-cycle fits refuse bad options before changing anything, naming them") {
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet({.splitter = split_after(1)}));
    silence(learn);
    const auto before = snapshot(learn.model.module());
    CHECK(error_of([&] { learn.fine_tune(1, {.freeze_epochs = -1}); }) ==
          "fine_tune: epochs and freeze_epochs must be >= 0, got 1 and -1");
    CHECK(error_of([&] { learn.fine_tune(-1); }) == "fine_tune: epochs and freeze_epochs must be >= 0, got -1 and 1");
    CHECK(error_of([&] { learn.fine_tune(1, {.pct_start = 1.5}); }) ==
          "fine_tune: pct_start must be between 0 and 1, got 1.5");
    CHECK(error_of([&] { learn.fit_one_cycle(1, 1e-2, {.pct_start = -0.1}); }) ==
          "fit_one_cycle: pct_start must be between 0 and 1, got -0.1");
    CHECK(error_of([&] { learn.fit_one_cycle(1, 1e-2, {.div = 0}); }) == "fit_one_cycle: div must be > 0, got 0");
    CHECK(error_of([&] { learn.fit_flat_cos(1, 1e-2, {.div_final = -1}); }) ==
          "fit_flat_cos: div_final must be > 0, got -1");
    CHECK(learn.train_iter == 0);
    CHECK(all_equal(snapshot(learn.model.module()), before));
    for (const auto& p : learn.model.module().parameters()) CHECK(p.requires_grad());  // nothing was frozen
  }

  TEST_CASE("tta refuses a dataset without random transforms and bad options") {
    Learner learn(synthetic_dls(8, 6, 4), tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    CHECK_THROWS_WITH_AS(learn.tta(),
                         "tta: there are no random transforms to apply (the loader's dataset has no augmented() form and "
                         "the training loader no aug_tfms); give the items training-time transforms (ImageFolder's "
                         "item_tfms) or the loaders batch augmentation (vision::aug_transforms)",
                         Error);
    CHECK_THROWS_WITH_AS(learn.tta({.n = 0}), "tta: n must be at least 1, got 0", Error);
    DataLoader empty(std::make_shared<TensorDataset>(torch::zeros({0, 4}), torch::zeros({0}, torch::kLong)), {.bs = 2});
    CHECK_THROWS_WITH_AS(learn.tta({.dl = &empty}), "tta: the loader has no items", Error);
    // Targets laid out over the image: predictions of flipped copies would be out of place.
    auto masks = std::make_shared<TensorDataset>(torch::randn({4, 1, 4, 4}), torch::zeros({4, 4, 4}, torch::kLong));
    Learner segmenter({DataLoader(masks, {.bs = 2}), DataLoader(masks, {.bs = 2})},
                      torch::nn::Sequential(torch::nn::Conv2d(1, 2, 1)), CrossEntropyLoss(), {}, quiet());
    CHECK_THROWS_WITH_AS(segmenter.tta(),
                         "tta: the targets have a place in the image (an item's is [4, 4]): averaged predictions of "
                         "flipped or cropped copies would be out of place; use get_preds",
                         Error);
  }

  TEST_CASE("fine_tune passes reset_opt and start_epoch on to both fits, as fastai's") {
    struct Seen : Callback {  // each fit's optimizer and the epochs that trained a batch
      void before_fit() override { optimizers.push_back(learn().opt.get()); }
      void after_batch() override {
        if (learn().training && learn().iter == 0) epochs.push_back(learn().epoch);
      }
      std::vector<const Optimizer*> optimizers;
      std::vector<int> epochs;
    };
    auto tuned = [](FineTuneOptions options) {
      Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet({.splitter = two_groups}));
      silence(learn);
      learn.fit(1);  // an optimizer with moments before fine_tune
      auto seen = std::make_shared<Seen>();
      options.cbs = {seen};
      const Optimizer* before = learn.opt.get();
      learn.fine_tune(3, options);
      seen->optimizers.insert(seen->optimizers.begin(), before);
      return *seen;
    };
    const auto kept = tuned({.freeze_epochs = 2});
    CHECK(kept.optimizers == std::vector<const Optimizer*>(3, kept.optimizers[0]));
    CHECK(kept.epochs == std::vector<int>{0, 1, 0, 1, 2});
    const auto reset = tuned({.freeze_epochs = 2, .reset_opt = true, .start_epoch = 1});
    CHECK(reset.optimizers[1] != reset.optimizers[0]);  // a new one (a later one may reuse a freed address)
    CHECK(reset.epochs == std::vector<int>{1, 1, 2});   // each fit from its epoch 1
  }

  TEST_CASE("each fit draws a new data order, as fastai's: fit(1) twice, fine_tune's two phases; the same calls the same") {
    // The first training batch's targets of every epoch, over the fits of `calls`.
    auto first_batches = [](const std::function<void(Learner&)>& calls) {
      struct FirstBatch : Callback {
        void before_batch() override {
          if (learn().training && learn().iter == 0) seen.push_back(learn().yb.clone());
        }
        std::vector<torch::Tensor> seen;
      };
      auto dataset = std::make_shared<TensorDataset>(torch::randn({64, 4}), torch::arange(64));
      Loss loss([](const torch::Tensor& pred, const torch::Tensor&) { return pred.square().mean(); });
      auto record = std::make_shared<FirstBatch>();
      Learner learn({DataLoader(dataset, {.bs = 8, .shuffle = true}), DataLoader(dataset, {.bs = 8})}, tiny_model(),
                    loss, {}, quiet({.cbs = {record}, .splitter = two_groups}));
      silence(learn);
      calls(learn);
      return record->seen;
    };
    const auto twice = first_batches([](Learner& learn) {
      learn.fit(1);
      learn.fit(1);
    });
    REQUIRE(twice.size() == 2);
    CHECK_FALSE(torch::equal(twice[0], twice[1]));
    // The order of fit(2)'s epochs, one fit after the other: epoch 1 of the loader is epoch 1.
    const auto once = first_batches([](Learner& learn) { learn.fit(2); });
    CHECK(torch::equal(once[0], twice[0]));
    CHECK(torch::equal(once[1], twice[1]));
    const auto tuned = first_batches([](Learner& learn) { learn.fine_tune(1, {.freeze_epochs = 1}); });
    REQUIRE(tuned.size() == 2);
    CHECK_FALSE(torch::equal(tuned[0], tuned[1]));
    CHECK(torch::equal(first_batches([](Learner& learn) { learn.fine_tune(1, {.freeze_epochs = 1}); })[1], tuned[1]));
    // Saved with checkpoints: the second fit resumed in a new Learner draws what it drew.
    const auto path = temp_path("epochs_before.pt");
    struct SaveAfterFirstEpoch : Callback {
      explicit SaveAfterFirstEpoch(std::string path) : path(std::move(path)) {}
      void after_epoch() override {
        if (learn().epoch == 0) learn().save(path);
      }
      std::string path;
    };
    const auto original = first_batches([&](Learner& learn) {
      learn.fit(1);
      learn.fit(2, {}, {.cbs = {std::make_shared<SaveAfterFirstEpoch>(path)}});
    });
    const auto resumed = first_batches([&](Learner& learn) {
      learn.load(path);
      CHECK(learn.epochs_before == 1);
      learn.fit(2, {}, {.start_epoch = 1});
    });
    REQUIRE(original.size() == 3);
    REQUIRE(resumed.size() == 1);
    CHECK(torch::equal(resumed[0], original[2]));
    std::filesystem::remove(path);
  }
}

namespace {

int total(const std::map<std::string, int>& counts) {
  int sum = 0;
  for (const auto& [name, n] : counts) sum += n;
  return sum;
}

// Counts one whole training batch: from this callback's after_batch (the last) of batch
// 2 to that of batch 3, every callback's events and the loader's work included.
class CountOneBatch : public Callback {
 public:
  explicit CountOneBatch(OperatorCount& count) : count_(count) { order = 1000; }
  void after_batch() override {
    if (!learn().training) return;
    if (learn().iter == 2) count_.start();
    if (learn().iter == 3) counts = count_.stop();
  }
  std::map<std::string, int> counts;

 private:
  OperatorCount& count_;
};

// `blocks` stride-1 conv + BatchNorm + ReLU blocks after a strided stem, then a linear head.
torch::nn::Sequential small_cnn(int blocks) {
  torch::manual_seed(0);
  auto conv = [](int64_t in, int64_t out, int64_t stride) {
    return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
  };
  torch::nn::Sequential model(conv(1, 16, 2));
  for (int i = 0; i < blocks; ++i) {
    model->push_back(conv(16, 16, 1));
    model->push_back(torch::nn::BatchNorm2d(16));
    model->push_back(torch::nn::ReLU());
  }
  model->push_back(torch::nn::AdaptiveAvgPool2d(1));
  model->push_back(torch::nn::Flatten());
  model->push_back(torch::nn::Linear(16, 10));
  return model;
}

// Operators of one Learner training batch over those of the same step by hand (the same
// model, optimizer state and hyper-parameters, its batch sliced as the loader does),
// and what differs, by name.
std::pair<int, std::string> learner_extra_operators(int blocks) {
  OperatorCount count;
  auto x = torch::randn({256, 1, 28, 28});
  auto y = torch::randint(10, {256});
  auto data = std::make_shared<TensorDataset>(x, y);
  Learner learn(DataLoaders{DataLoader(data, {.bs = 32}), DataLoader(data, {.bs = 64})}, small_cnn(blocks),
                CrossEntropyLoss(), {metrics::accuracy()}, {.device = torch::kCPU});
  silence(learn);
  auto window = learn.add_cb(CountOneBatch(count));
  learn.fit_one_cycle(1, 1e-2);
  REQUIRE(total(window->counts) > 0);

  learn.model.module().train();
  count.start();
  const auto xb = x.narrow(0, 0, 32), yb = y.narrow(0, 0, 32);
  auto loss = learn.loss_func(learn.model(xb), yb);
  loss.backward();
  learn.opt->step();
  learn.opt->zero_grad();
  const auto by_hand = count.stop();

  std::ostringstream differing;
  for (const auto& [name, n] : window->counts)
    if (auto it = by_hand.find(name); it == by_hand.end() || it->second != n)
      differing << " " << name << " " << (it == by_hand.end() ? 0 : it->second) << "->" << n;
  return {total(window->counts) - total(by_hand), differing.str()};
}

}  // namespace

TEST_SUITE("learner") {
  // The Learner's host work per batch, which bounds a launch-bound GPU step and a small
  // model's CPU step: the progress bar, the one-cycle schedule and a metric add no operator
  // to the step by hand (with the same loss), nor does the Recorder (it averages the batch
  // losses when it reads them); the loss kept apart from the graph (detach, clone: 5
  // dispatches) adds 5, none per layer or per parameter.
  TEST_CASE("a training batch dispatches a fixed few ATen operators more than the same step by hand") {
    const auto [shallow, shallow_ops] = learner_extra_operators(1);
    const auto [deep, deep_ops] = learner_extra_operators(4);
    INFO("1 block: +" << shallow << ":" << shallow_ops);
    INFO("4 blocks: +" << deep << ":" << deep_ops);
    CHECK(deep == shallow);
    CHECK(shallow <= 5);
  }

  // On a GPU a value read back to the host (aten::_local_scalar_dense: item(), a bool of
  // a tensor) stops the host until the GPU catches up. Nothing in a training batch may:
  // the label check (on a GPU it reads behind an event, on the CPU the labels in place),
  // the Recorder's smoothed loss, a metric, the progress table, GradientClip and MixUp
  // keep their values on the device. (With SGD: ATen's fused Adam reads its step count
  // on the host on the CPU only; its CUDA kernel reads it on the device.)
  TEST_CASE("a training batch reads nothing back to the host, GradientClip and MixUp included") {
    auto reads = [](std::vector<CallbackPtr> cbs) {
      OperatorCount count;
      auto gen = at::make_generator<at::CPUGeneratorImpl>(6);
      auto data = std::make_shared<TensorDataset>(torch::randn({256, 1, 28, 28}, gen), torch::randint(10, {256}, gen));
      cbs.push_back(std::make_shared<ProgressCallback>(false));
      Learner learn(DataLoaders{DataLoader(data, {.bs = 32, .shuffle = true}), DataLoader(data, {.bs = 64})}, small_cnn(1),
                    CrossEntropyLoss(), {metrics::accuracy()},
                    {.opt_func = sgd({.mom = 0.9}), .cbs = std::move(cbs), .device = torch::kCPU, .progress = false});
      silence(learn);
      auto window = learn.add_cb(CountOneBatch(count));
      learn.fit_one_cycle(1, 1e-2);
      REQUIRE(total(window->counts) > 0);
      return window->counts["aten::_local_scalar_dense"];
    };
    CHECK(reads({}) == 0);
    CHECK(reads({std::make_shared<GradientClip>(1.0)}) == 0);
    CHECK(reads({std::make_shared<MixUp>()}) == 0);  // its loss is two cross-entropies, each checked
  }
}
