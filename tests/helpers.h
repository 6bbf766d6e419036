#pragma once
// Small deterministic learners and probes shared by the tests.
#include <doctest/doctest.h>

#include <fastcpp.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace fastcpp::testing {

// n items of `features` floats with labels in [0, classes), the same for a given seed.
inline std::shared_ptr<TensorDataset> synthetic_dataset(int64_t n, int64_t features = 4, int64_t classes = 3,
                                                        uint64_t seed = 0) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto x = torch::randn({n, features}, gen);
  auto y = torch::randint(classes, {n}, gen, torch::kLong);
  return std::make_shared<TensorDataset>(x, y);
}

inline DataLoaders synthetic_dls(int64_t n_train = 8, int64_t n_valid = 4, int64_t bs = 2) {
  return {DataLoader(synthetic_dataset(n_train, 4, 3, 1), {.bs = bs}),
          DataLoader(synthetic_dataset(n_valid, 4, 3, 2), {.bs = bs})};
}

inline torch::nn::Sequential tiny_model(int64_t features = 4, int64_t classes = 3, uint64_t seed = 0) {
  torch::manual_seed(seed);
  return torch::nn::Sequential(torch::nn::Linear(features, 8), torch::nn::ReLU(), torch::nn::Linear(8, classes));
}

// Two parameter groups: the first `n` layers, then the rest.
inline Splitter split_after(size_t n) {
  return [n](torch::nn::Module& model) {
    auto children = model.children();
    std::vector<std::vector<torch::Tensor>> groups(2);
    for (size_t i = 0; i < children.size(); ++i)
      for (const auto& p : children[i]->parameters()) groups[i < n ? 0 : 1].push_back(p);
    return groups;
  };
}

// Two parameter groups: the first layer, then the rest.
inline std::vector<std::vector<torch::Tensor>> two_groups(torch::nn::Module& model) { return split_after(1)(model); }

// A layer whose parameter is on the meta device: with a CPU layer, a model split across
// two devices where there is no GPU (never run).
struct OnMetaImpl : torch::nn::Module {
  OnMetaImpl() { register_parameter("weight", torch::empty({3}, torch::kMeta)); }
  torch::Tensor forward(const torch::Tensor& x) { return x; }
};
TORCH_MODULE(OnMeta);

inline distributed::Pipeline split_over_cpu_and_meta() {
  return distributed::pipeline(torch::nn::Sequential(torch::nn::Linear(4, 3), OnMeta()),
                               {.devices = {torch::kCPU, torch::kMeta}, .balance = {1, 1}});
}

inline LearnerOptions quiet(LearnerOptions options = {}) {
  options.device = torch::kCPU;
  options.progress = false;
  return options;
}

inline void silence(Learner& learn, std::vector<std::string>* lines = nullptr) {
  learn.logger = [lines](const std::string& line) {
    if (lines) lines->push_back(line);
  };
}

// Records every event it sees, by name.
class EventProbe : public Callback {
 public:
  std::vector<std::string> events;
#define FASTCPP_PROBE(name) \
  void name() override { events.push_back(#name); }
  FASTCPP_PROBE(after_create)
  FASTCPP_PROBE(before_fit)
  FASTCPP_PROBE(before_epoch)
  FASTCPP_PROBE(before_train)
  FASTCPP_PROBE(before_batch)
  FASTCPP_PROBE(after_pred)
  FASTCPP_PROBE(after_loss)
  FASTCPP_PROBE(before_backward)
  FASTCPP_PROBE(after_cancel_backward)
  FASTCPP_PROBE(after_backward)
  FASTCPP_PROBE(before_step)
  FASTCPP_PROBE(after_cancel_step)
  FASTCPP_PROBE(after_step)
  FASTCPP_PROBE(after_cancel_batch)
  FASTCPP_PROBE(after_batch)
  FASTCPP_PROBE(after_cancel_train)
  FASTCPP_PROBE(after_train)
  FASTCPP_PROBE(before_validate)
  FASTCPP_PROBE(after_cancel_validate)
  FASTCPP_PROBE(after_validate)
  FASTCPP_PROBE(after_cancel_epoch)
  FASTCPP_PROBE(after_epoch)
  FASTCPP_PROBE(after_cancel_fit)
  FASTCPP_PROBE(after_fit)
#undef FASTCPP_PROBE
};

// Copies of every parameter, to compare before and after.
inline std::vector<torch::Tensor> snapshot(const torch::nn::Module& module) {
  std::vector<torch::Tensor> copies;
  for (const auto& p : module.parameters()) copies.push_back(p.detach().clone());
  return copies;
}

inline bool all_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

// A fixture of tests/fixtures (written by make_fixtures.py), or of another folder of
// generated ones: lines "key: v1 v2 ...".
inline std::map<std::string, std::vector<double>> read_fixture(const std::string& name,
                                                               const std::string& dir = FASTCPP_FIXTURES) {
  std::ifstream in(dir + "/" + name);
  REQUIRE_MESSAGE(in.good(), "missing fixture " << dir << "/" << name << ": run its generator in tests/fixtures");
  std::map<std::string, std::vector<double>> values;
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    std::istringstream numbers(line.substr(colon + 1));
    auto& row = values[line.substr(0, colon)];
    for (std::string token; numbers >> token;) row.push_back(std::stod(token));  // stod reads inf and nan
  }
  return values;
}

// A path in the temporary directory, unique to this process.
inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("fastcpp_" + std::to_string(::getpid()) + "_" + name)).string();
}

// What a shell command printed on stdout; fails the test if it exits with an error.
inline std::string output_of(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe);
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
  CHECK(::pclose(pipe) == 0);
  return out;
}

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no fastcpp::Error thrown)";
}

}  // namespace fastcpp::testing
