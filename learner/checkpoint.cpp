#include "learner/checkpoint.h"

#include <fcntl.h>
#include <torch/serialize.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
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
  auto root = value.toGenericDict();
  auto entry = [&](const std::string& key, bool (c10::IValue::*is)() const, bool required) -> std::optional<c10::IValue> {
    auto it = root.find(c10::IValue(key));
    if (it == root.end() && !required) return std::nullopt;
    if (it == root.end() || !(it->value().*is)())
      throw Error("cannot read " + source + ": its '" + key + "' entry is missing or of the wrong type");
    return it->value();
  };
  auto format = root.find(c10::IValue(std::string("format")));
  if (format == root.end() || !format->value().isString() || format->value().toStringRef() != kFormat)
    throw Error("cannot read " + source + ": not a fastcpp checkpoint (no '" + kFormat + "' marker)");

  // Check every entry first, so that a bad file changes nothing.
  const auto entries = named_state(learn.model.module());
  const auto loaded = match_state(entries, entry("model", &c10::IValue::isGenericDict, true)->toGenericDict(), source);
  const auto epoch = entry("epoch", &c10::IValue::isInt, true)->toInt();
  const auto opt = with_opt ? entry("opt", &c10::IValue::isGenericDict, false) : std::nullopt;
  const auto scaler = with_opt ? entry("scaler", &c10::IValue::isGenericDict, false) : std::nullopt;
  if (scaler) GradScaler().load_state_dict(scaler->toGenericDict(), source);  // only to check it
  if (opt && !learn.opt) learn.create_opt();

  torch::NoGradGuard no_grad;
  if (opt) learn.opt->load_state_dict(opt->toGenericDict(), source);  // checks everything before writing
  if (scaler) {
    if (!learn.scaler) learn.scaler = std::make_shared<GradScaler>();
    learn.scaler->load_state_dict(scaler->toGenericDict(), source);
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
