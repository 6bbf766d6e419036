// libFuzzer target: a checkpoint of a small learner (conv, BatchNorm, linear; Adam
// state; a gradient scaler) loaded from arbitrary bytes must load or throw
// fastcpp::Error. An input whose first byte is even is the checkpoint's pickle (data.pkl)
// alone, put into an archive with the learner's own tensor records, so that mutations
// reach the checks on keys, shapes and optimizer state; otherwise it is a whole archive.
// With FASTCPP_FUZZ_WRITE_SEED=DIR it writes both kinds of seed for that learner and
// exits; FASTCPP_FUZZ_SHOW_ERRORS prints each input's error. Built and run by
// tests/fuzz/run.sh.
#include <caffe2/serialize/inline_container.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "fastcpp.h"
#include "learner/checkpoint.h"
#include "formats/torch_file.h"
#include "formats/torch_save.h"

namespace {

fastcpp::Learner& learner() {
  static fastcpp::Learner* learn = [] {
    using namespace fastcpp;
    torch::manual_seed(0);
    auto data = std::make_shared<TensorDataset>(torch::randn({8, 2, 4, 4}), torch::randint(3, {8}));
    DataLoaders dls{DataLoader(data, {.bs = 4}), DataLoader(data, {.bs = 4})};
    Model model(torch::nn::Sequential(torch::nn::Conv2d(2, 3, 3), torch::nn::BatchNorm2d(3), torch::nn::Flatten(),
                                      torch::nn::Linear(12, 3)));
    auto* made = new Learner(dls, model, CrossEntropyLoss(), {}, {.opt_func = adam(), .progress = false});
    made->logger = [](const std::string&) {};
    made->fit(1, 1e-3);  // Adam's state exists
    made->scaler = std::make_shared<GradScaler>();
    return made;
  }();
  return *learn;
}

// The learner's own checkpoint, as an archive and as its records by name.
struct Seed {
  std::vector<char> archive;
  std::vector<std::pair<std::string, std::vector<char>>> records;
  std::vector<char> pickle;
};

const Seed& seed() {
  static const Seed made = [] {
    Seed s;
    s.archive = fastcpp::torch_save_bytes(fastcpp::checkpoint::contents(learner(), true));
    auto reader = fastcpp::open_archive(s.archive);
    for (const auto& name : reader->getAllRecords()) {
      auto [data, size] = reader->getRecord(name);
      std::vector<char> bytes(static_cast<char*>(data.get()), static_cast<char*>(data.get()) + size);
      if (name == "data.pkl") s.pickle = bytes;
      else s.records.emplace_back(name, bytes);
    }
    return s;
  }();
  return made;
}

// An archive of the seed's records with `pickle` as its data.pkl.
std::vector<char> with_pickle(const uint8_t* pickle, size_t size) {
  std::vector<char> out;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) {
    out.insert(out.end(), static_cast<const char*>(data), static_cast<const char*>(data) + n);
    return n;
  });
  writer.writeRecord("data.pkl", pickle, size);
  for (const auto& [name, bytes] : seed().records)
    if (name != "version" && name != ".data/version" && name != "byteorder" && name != ".data/serialization_id")
      writer.writeRecord(name, bytes.data(), bytes.size());
  writer.writeEndOfFile();
  return out;
}

void write(const std::string& path, char kind, const std::vector<char>& bytes) {
  std::ofstream file(path, std::ios::binary);
  file.put(kind);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("FASTCPP_FUZZ_WRITE_SEED")) {
    write(std::string(dir) + "/adam_learner_pickle.bin", 0, seed().pickle);
    write(std::string(dir) + "/adam_learner_archive.bin", 1, seed().archive);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto bytes = data[0] % 2 == 0 ? with_pickle(data + 1, size - 1) : std::vector<char>(data + 1, data + size);
  try {
    fastcpp::checkpoint::decode_into(learner(), bytes, true, "fuzz input");
  } catch (const fastcpp::Error& e) {
    if (std::getenv("FASTCPP_FUZZ_SHOW_ERRORS")) std::fprintf(stderr, "%s\n", e.what());
  }
  return 0;
}
