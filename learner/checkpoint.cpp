#include "learner/checkpoint.h"

#include <torch/serialize.h>
#include <torch/torch.h>

#include <limits>
#include <optional>

#include "core/error.h"
#include "formats/file_io.h"
#include "learner/learner.h"
#include "formats/state_dict.h"
#include "formats/torch_file.h"
#include "formats/torch_save.h"

namespace fastcpp::checkpoint {

constexpr const char* kFormat = "fastcpp.checkpoint.v1";

c10::IValue contents(const Learner& learn, bool with_opt, const Extras& extras) {
  c10::Dict<std::string, torch::Tensor> model;
  for (const auto& [name, tensor] : named_state(learn.model.module()))
    model.insert(name, tensor.detach().to(torch::kCPU));
  auto root = string_dict();
  root.insert("format", std::string(kFormat));
  root.insert("model", model);
  root.insert("epoch", static_cast<int64_t>(learn.epoch));
  root.insert("epochs_before", learn.epochs_before);
  if (with_opt && learn.opt) root.insert("opt", learn.opt->state_dict());
  if (with_opt && learn.scaler) root.insert("scaler", learn.scaler->state_dict());
  if (!extras.empty()) {
    auto entries = string_dict();
    for (const auto& [key, value] : extras) {
      if (!value.isInt() && !value.isDouble()) throw Error("checkpoint extra '" + key + "' is not a number");
      entries.insert(key, value);
    }
    root.insert("extras", entries);
  }
  return root;
}

namespace {

c10::impl::GenericDict checkpoint_root(const c10::IValue& file, const std::string& source) {
  if (!is_checkpoint(file))
    throw Error("cannot read " + source + ": not a fastcpp checkpoint (no '" + kFormat + "' marker)");
  return file.toGenericDict();
}

}  // namespace

bool is_checkpoint(const c10::IValue& file) {
  if (!file.isGenericDict()) return false;
  const auto root = file.toGenericDict();
  const auto format = root.find(c10::IValue(std::string("format")));
  return format != root.end() && format->value().isString() && format->value().toStringRef() == kFormat;
}

Extras extras_of(const c10::IValue& file, const std::string& source) {
  const auto root = checkpoint_root(file, source);
  Extras extras;
  if (root.find(c10::IValue(std::string("extras"))) == root.end()) return extras;
  for (const auto& entry : typed_entry(root, "extras", &c10::IValue::isGenericDict, source).toGenericDict()) {
    if (!entry.key().isString() || !(entry.value().isInt() || entry.value().isDouble()))
      throw Error("cannot read " + source + ": its 'extras' entry holds something other than named numbers");
    extras[entry.key().toStringRef()] = entry.value();
  }
  return extras;
}

void decode_into(Learner& learn, const std::vector<char>& bytes, bool with_opt, const std::string& source,
                 bool strict) {
  decode_into(learn, unpickle(bytes, source, "a checkpoint"), with_opt, source, strict);
}

void decode_into(Learner& learn, const c10::IValue& file, bool with_opt, const std::string& source, bool strict) {
  const auto root = checkpoint_root(file, source);
  auto optional_entry = [&](const std::string& key) -> std::optional<c10::impl::GenericDict> {
    if (!with_opt || root.find(c10::IValue(key)) == root.end()) return std::nullopt;
    return typed_entry(root, key, &c10::IValue::isGenericDict, source).toGenericDict();
  };

  // Check every entry first, so that a bad file changes nothing.
  const auto entries = named_state(learn.model.module());
  const auto loaded = match_state(entries, typed_entry(root, "model", &c10::IValue::isGenericDict, source).toGenericDict(),
                                  source, {.strict = strict});
  const auto epoch = typed_entry(root, "epoch", &c10::IValue::isInt, source).toInt();
  if (epoch < 0 || epoch > std::numeric_limits<int>::max())
    throw Error("cannot read " + source + ": its 'epoch' entry " + std::to_string(epoch) + " is out of range");
  // Not in checkpoints of older versions: their data orders did not count earlier fits.
  const bool has_epochs_before = root.find(c10::IValue("epochs_before")) != root.end();
  const auto epochs_before =
      has_epochs_before ? typed_entry(root, "epochs_before", &c10::IValue::isInt, source).toInt() : int64_t{0};
  if (epochs_before < 0)
    throw Error("cannot read " + source + ": its 'epochs_before' entry " + std::to_string(epochs_before) +
                " is out of range");
  const auto opt = optional_entry("opt");
  const auto scaler = optional_entry("scaler");
  const auto scaler_state = scaler ? std::optional(GradScaler::parse(*scaler, source)) : std::nullopt;

  torch::NoGradGuard no_grad;
  if (opt) {  // the optimizer checks everything before it writes
    const bool created = !learn.opt;
    if (created) learn.create_opt();
    try {
      learn.opt->load_state_dict(*opt, source);
    } catch (const Error& e) {
      if (created) learn.opt.reset();
      if (strict) throw;
      learn.logger("could not load the optimizer state of " + source + ", which keeps its own (" + e.what() + ")");
    }
  }
  // Nothing below can fail.
  if (scaler_state) {
    if (!learn.scaler) learn.scaler = std::make_shared<GradScaler>();
    learn.scaler->restore(*scaler_state);
  }
  for (size_t i = 0; i < entries.size(); ++i)
    if (loaded[i].defined()) entries[i].second.copy_(loaded[i]);
  learn.epoch = static_cast<int>(epoch);
  learn.epochs_before = epochs_before;
}

}  // namespace fastcpp::checkpoint
