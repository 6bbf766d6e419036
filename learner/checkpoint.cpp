#include "learner/checkpoint.h"

#include <fcntl.h>
#include <torch/serialize.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>

#include "core/error.h"
#include "learner/learner.h"
#include "learner/state_dict.h"
#include "learner/torch_file.h"

namespace fastcpp::checkpoint {

constexpr const char* kFormat = "fastcpp.checkpoint.v1";

std::vector<char> encode(const Learner& learn, bool with_opt) {
  c10::Dict<std::string, torch::Tensor> model;
  for (const auto& [name, tensor] : named_state(learn.model.module()))
    model.insert(name, tensor.detach().to(torch::kCPU));
  auto root = string_dict();
  root.insert("format", std::string(kFormat));
  root.insert("model", model);
  root.insert("epoch", static_cast<int64_t>(learn.epoch));
  if (with_opt && learn.opt) root.insert("opt", learn.opt->state_dict());
  if (with_opt && learn.scaler) root.insert("scaler", learn.scaler->state_dict());
  return torch::pickle_save(root);
}

void decode_into(Learner& learn, const std::vector<char>& bytes, bool with_opt, const std::string& source) {
  const auto value = unpickle(bytes, source, "a checkpoint");
  if (!value.isGenericDict()) throw Error("cannot read " + source + ": not a fastcpp checkpoint");
  const auto root = value.toGenericDict();
  auto format = root.find(c10::IValue(std::string("format")));
  if (format == root.end() || !format->value().isString() || format->value().toStringRef() != kFormat)
    throw Error("cannot read " + source + ": not a fastcpp checkpoint (no '" + kFormat + "' marker)");
  auto optional_entry = [&](const std::string& key) -> std::optional<c10::impl::GenericDict> {
    if (!with_opt || root.find(c10::IValue(key)) == root.end()) return std::nullopt;
    return typed_entry(root, key, &c10::IValue::isGenericDict, source).toGenericDict();
  };

  // Check every entry first, so that a bad file changes nothing.
  const auto entries = named_state(learn.model.module());
  const auto loaded =
      match_state(entries, typed_entry(root, "model", &c10::IValue::isGenericDict, source).toGenericDict(), source);
  const auto epoch = typed_entry(root, "epoch", &c10::IValue::isInt, source).toInt();
  if (epoch < 0 || epoch > std::numeric_limits<int>::max())
    throw Error("cannot read " + source + ": its 'epoch' entry " + std::to_string(epoch) + " is out of range");
  const auto opt = optional_entry("opt");
  const auto scaler = optional_entry("scaler");
  const auto scaler_state = scaler ? std::optional(GradScaler::parse(*scaler, source)) : std::nullopt;

  torch::NoGradGuard no_grad;
  if (opt) {  // the optimizer checks everything before it writes
    const bool created = !learn.opt;
    if (created) learn.create_opt();
    try {
      learn.opt->load_state_dict(*opt, source);
    } catch (const Error&) {
      if (created) learn.opt.reset();
      throw;
    }
  }
  // Nothing below can fail.
  if (scaler_state) {
    if (!learn.scaler) learn.scaler = std::make_shared<GradScaler>();
    learn.scaler->restore(*scaler_state);
  }
  for (size_t i = 0; i < entries.size(); ++i) entries[i].second.copy_(loaded[i]);
  learn.epoch = static_cast<int>(epoch);
}

void write_atomically(const std::string& path, const std::vector<char>& bytes) {
  const std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw Error("cannot write checkpoint '" + path + "': " + std::strerror(errno));
  size_t written = 0;
  while (written < bytes.size()) {
    const auto n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      const std::string reason = std::strerror(errno);
      ::close(fd);
      ::unlink(temp.c_str());
      throw Error("cannot write checkpoint '" + path + "': " + reason);
    }
    written += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || std::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(temp.c_str());
    throw Error("cannot write checkpoint '" + path + "': " + reason);
  }
}

std::vector<char> read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(what + " '" + path + "' not found or unreadable");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

c10::IValue unpickle(const std::vector<char>& bytes, const std::string& source, const std::string& kind) {
  // fastcpp's own reader, not torch::pickle_load: libtorch's unpickler sizes its memo
  // from the file and so allocates whatever a damaged file claims (found by fuzzing).
  try {
    return read_torch_file(bytes);
  } catch (const Error& e) {
    throw Error("cannot read " + source + ": the file is truncated or not " + kind + " (" +
                std::string(e.what()).substr(0, 200) + ")");
  }
}

}  // namespace fastcpp::checkpoint
