// Model parallelism: a Sequential split into stages (here all on the CPU, which checks
// the splitting, the schedule and the gradients; a GPU run puts them on devices).
#include "helpers.h"

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

torch::nn::Sequential mlp(uint64_t seed = 0) {
  torch::manual_seed(seed);
  return torch::nn::Sequential(torch::nn::Linear(4, 100), torch::nn::ReLU(), torch::nn::Linear(100, 100), torch::nn::ReLU(),
                               torch::nn::Linear(100, 3));
}

const std::vector<torch::Device> kTwoCpus{torch::kCPU, torch::kCPU};

}  // namespace

TEST_SUITE("model_parallel") {
  TEST_CASE("stages by parameter count, keeping the model's parameter names") {
    CHECK(distributed::balance_by_parameters(mlp(), 2) == std::vector<size_t>{2, 3});
    CHECK(distributed::balance_by_parameters(mlp(), 5) == std::vector<size_t>{1, 1, 1, 1, 1});
    auto net = distributed::pipeline(mlp(), {.devices = kTwoCpus});
    REQUIRE(net->stages().size() == 2);
    CHECK(net->stages()[0]->size() == 2);
    std::vector<std::string> names, expected;
    for (const auto& p : net->named_parameters()) names.push_back(p.key());
    for (const auto& p : mlp()->named_parameters()) expected.push_back(p.key());
    CHECK(names == expected);
  }

  TEST_CASE("outputs and gradients equal the unsplit model's, with and without micro-batches") {
    for (int64_t chunks : {1, 3}) {
      CAPTURE(chunks);
      auto plain = mlp(), copy = mlp();
      auto net = distributed::pipeline(copy, {.devices = kTwoCpus, .balance = {3, 2}, .chunks = chunks});
      auto x = torch::randn({7, 4});
      auto y_plain = plain->forward(x), y_net = net->forward(x);
      CHECK(torch::allclose(y_plain, y_net, 1e-6, 1e-7));
      y_plain.pow(2).sum().backward();
      y_net.pow(2).sum().backward();
      auto a = plain->parameters(), b = net->parameters();
      for (size_t i = 0; i < a.size(); ++i) CHECK(torch::allclose(a[i].grad(), b[i].grad(), 1e-5, 1e-6));
    }
  }

  TEST_CASE("a Learner trains a pipelined model as the plain one, and their checkpoints are interchangeable") {
    Learner plain(synthetic_dls(16, 8, 4), mlp(), CrossEntropyLoss(), {}, quiet());
    auto net = distributed::pipeline(mlp(), {.devices = kTwoCpus, .chunks = 2});
    Learner piped(synthetic_dls(16, 8, 4), net, CrossEntropyLoss(), {}, quiet({.device = net->output_device()}));
    silence(plain);
    silence(piped);
    plain.fit(2, 1e-2);
    piped.fit(2, 1e-2);
    auto a = plain.model.module().parameters(), b = piped.model.module().parameters();
    // Micro-batches round the products differently (MKL by row count), and Adam's normalization
    // magnifies the last bits of a gradient near zero: a few 1e-6 after eight steps.
    for (size_t i = 0; i < a.size(); ++i) CHECK(torch::allclose(a[i], b[i], 1e-5, 5e-6));
    const auto path = temp_path("piped.pt");
    piped.save(path);
    CHECK_NOTHROW(plain.load(path));
    std::filesystem::remove(path);
  }

  TEST_CASE("a Learner without a device refuses a model split across devices, naming them") {
    auto net = split_over_cpu_and_meta();
    auto no_device = quiet();
    no_device.device.reset();
    CHECK(error_of([&] { Learner(synthetic_dls(16, 8, 4), net, CrossEntropyLoss(), {}, no_device); }) ==
          "Learner: the model is on cpu and meta (split across devices): give .device, where its outputs land and "
          "the targets go (a Pipeline's output_device())");
    CHECK_NOTHROW(Learner(synthetic_dls(16, 8, 4), net, CrossEntropyLoss(), {}, quiet()));
    CHECK(devices_text({torch::kCPU, torch::kMeta, torch::Device("cuda:1")}) == "cpu, meta and cuda:1");
  }

  TEST_CASE("bad splits are named") {
    CHECK(error_of([] { distributed::pipeline(mlp(), {}); }) == "Pipeline: no devices given");
    CHECK(error_of([] { distributed::pipeline(mlp(), {.devices = kTwoCpus, .balance = {2, 2}}); }) ==
          "Pipeline: balance puts 4 layers in stages (each at least one), the model has 5");
    CHECK(error_of([] { distributed::pipeline(mlp(), {.devices = kTwoCpus, .balance = {5}}); }) ==
          "Pipeline: 1 stages in balance but 2 devices");
    CHECK(error_of([] { distributed::balance_by_parameters(mlp(), 6); }) == "Pipeline: cannot split 5 layers into 6 stages");
    CHECK(error_of([] { distributed::pipeline(mlp(), {.devices = kTwoCpus, .chunks = 0}); }) ==
          "Pipeline: chunks must be at least 1, got 0");
  }
}
