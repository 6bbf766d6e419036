// The multi-worker loader: bitwise-equal batches whatever the worker count, every
// index once per epoch, errors that reach the consumer, no hang on early exit.
#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <set>
#include <thread>

#include "data/batch_pipeline.h"
#include "helpers.h"

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

// Items whose x depends on the item's random stream, like an augmenting dataset;
// optionally throws at one index, optionally slow.
class NoisyDataset : public Dataset {
 public:
  explicit NoisyDataset(size_t n, int64_t bad_index = -1, int delay_us = 0)
      : n_(n), bad_index_(bad_index), delay_us_(delay_us) {}
  size_t size() const override { return n_; }
  Example get(size_t index) const override {
    Rng rng(0);
    return get(index, rng);
  }
  Example get(size_t index, Rng& rng) const override {
    if (static_cast<int64_t>(index) == bad_index_) throw Error("cannot decode image '/data/cat/" + std::to_string(index) + ".jpg'");
    if (delay_us_) std::this_thread::sleep_for(std::chrono::microseconds(delay_us_));
    auto x = torch::empty({3}, torch::kDouble);
    for (int i = 0; i < 3; ++i) x[i] = rng.uniform();
    return {x, torch::tensor(static_cast<int64_t>(index))};
  }

 private:
  size_t n_;
  int64_t bad_index_;
  int delay_us_;
};

std::vector<Batch> epoch_batches(DataLoader& loader, int64_t epoch) {
  loader.set_epoch(epoch);
  std::vector<Batch> batches;
  for (const auto& b : loader) batches.push_back(b);
  return batches;
}

}  // namespace

TEST_SUITE("pipeline") {
  TEST_CASE("the same seed gives bitwise the same batches with 0, 1 or 8 workers") {
    auto ds = std::make_shared<NoisyDataset>(203);
    std::vector<std::vector<Batch>> runs;
    for (int workers : {0, 1, 8}) {
      DataLoader loader(ds, {.bs = 16, .shuffle = true, .workers = workers, .seed = 11});
      runs.push_back(epoch_batches(loader, 3));
    }
    REQUIRE(runs[0].size() == 13);
    for (size_t r = 1; r < runs.size(); ++r)
      for (size_t b = 0; b < runs[0].size(); ++b) {
        CHECK(torch::equal(runs[0][b].x, runs[r][b].x));
        CHECK(torch::equal(runs[0][b].y, runs[r][b].y));
      }
    DataLoader other_epoch(ds, {.bs = 16, .shuffle = true, .workers = 2, .seed = 11});
    CHECK(!torch::equal(epoch_batches(other_epoch, 4)[0].x, runs[0][0].x));
  }

  TEST_CASE("every index exactly once per epoch with several workers") {
    auto ds = std::make_shared<NoisyDataset>(100);
    DataLoader loader(ds, {.bs = 7, .shuffle = true, .workers = 3, .seed = 5});
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      std::multiset<int64_t> seen;
      for (const auto& b : epoch_batches(loader, epoch))
        for (int64_t i = 0; i < b.y.size(0); ++i) seen.insert(b.y[i].item<int64_t>());
      CHECK(seen.size() == 100);
      CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == 100);
    }
  }

  TEST_CASE("a worker's exception reaches the consumer with the item and the file") {
    auto ds = std::make_shared<NoisyDataset>(64, /*bad_index=*/37);
    DataLoader loader(ds, {.bs = 8, .workers = 4});
    CHECK(error_of([&] {
            for (const auto& b : loader) (void)b;
          }) == "item 37: cannot decode image '/data/cat/37.jpg' (batch 4 of epoch 0)");
    // The loader is usable again after the failed epoch.
    DataLoader good(std::make_shared<NoisyDataset>(64), {.bs = 8, .workers = 4});
    CHECK(epoch_batches(good, 0).size() == 8);
  }

  TEST_CASE("a worker that cannot start is an error naming it, the workers started joined") {
    // In a child process whose address space has room for two more threads' stacks beyond
    // what it holds (stacks of ended threads are reused too): 1000 workers do not fit.
    int out[2];
    REQUIRE(::pipe(out) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::string message = "(no exception)";
      char statm[128] = {};  // read without streams: another thread may have held their locks at the fork
      const int fd = ::open("/proc/self/statm", O_RDONLY);
      (void)!::read(fd, statm, sizeof statm - 1);
      size_t stack = 8 << 20;
      pthread_attr_t attr;
      if (::pthread_getattr_default_np(&attr) == 0) {
        ::pthread_attr_getstacksize(&attr, &stack);
        ::pthread_attr_destroy(&attr);
      }
      rlimit limit{};
      ::getrlimit(RLIMIT_AS, &limit);
      limit.rlim_cur = std::strtoull(statm, nullptr, 10) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + 5 * stack / 2;
      ::setrlimit(RLIMIT_AS, &limit);
      try {
        BatchPipeline pipeline(1 << 20, 1000, 1, [](size_t) { return Batch{}; });
      } catch (const Error& e) {
        message = e.what();
      } catch (const std::exception& e) {
        message = std::string("not a fastcpp::Error: ") + e.what();
      }
      (void)!::write(out[1], message.data(), message.size());
      ::_exit(0);
    }
    ::close(out[1]);
    std::string message;
    char buffer[256];
    for (ssize_t n; (n = ::read(out[0], buffer, sizeof buffer)) > 0;) message.append(buffer, static_cast<size_t>(n));
    ::close(out[0]);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    // Not std::terminate (a started worker left unjoined), which the test runner turns into exit(1).
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
    const std::string head = "DataLoader: cannot start worker ";
    const std::string tail = " of 1000: Resource temporarily unavailable; try fewer workers";
    REQUIRE_MESSAGE(message.size() > head.size() + tail.size(), message);
    CHECK(message.substr(0, head.size()) == head);
    CHECK(message.substr(message.size() - tail.size()) == tail);
    const auto worker = message.substr(head.size(), message.size() - head.size() - tail.size());
    REQUIRE(worker.find_first_not_of("0123456789") == std::string::npos);
    CHECK(std::stoi(worker) > 2);  // two workers at least were started, then stopped
  }

  TEST_CASE("breaking out mid-epoch or destroying the loader does not hang") {
    auto ds = std::make_shared<NoisyDataset>(400, -1, /*delay_us=*/200);
    const auto start = std::chrono::steady_clock::now();
    for (int round = 0; round < 5; ++round) {
      DataLoader loader(ds, {.bs = 4, .workers = 4, .prefetch = 3});
      int seen = 0;
      for (const auto& b : loader) {
        (void)b;
        if (++seen == 2) break;
      }
      auto it = loader.begin();  // an epoch left running when the loader goes
      (void)it;
    }
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  }

  TEST_CASE("workers stay at most workers*prefetch batches ahead") {
    struct Counting : NoisyDataset {
      Counting() : NoisyDataset(1000) {}
      Example get(size_t index, Rng& rng) const override {
        ++built;
        return NoisyDataset::get(index, rng);
      }
      mutable std::atomic<int> built{0};
    };
    auto ds = std::make_shared<Counting>();
    DataLoader loader(ds, {.bs = 10, .workers = 2, .prefetch = 2});
    auto it = loader.begin();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    // the consumer holds batch 0; at most 2*2 more batches may be built
    CHECK(ds->built.load() <= 10 * (1 + 4));
  }
}
