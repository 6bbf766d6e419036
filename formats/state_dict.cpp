#include "formats/state_dict.h"

#include <torch/serialize.h>
#include <torch/torch.h>

#include <algorithm>
#include <set>

#include "formats/file_io.h"
#include "core/error.h"
#include "formats/torch_file.h"
#include "formats/torch_save.h"

namespace fastcpp {
namespace {

std::string shape(const torch::Tensor& t) { return c10::str(t.sizes()); }

std::string quoted(const std::string& key) { return "'" + key + "'"; }

bool skipped(const std::string& key, const std::vector<std::string>& prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(), [&](const auto& p) { return key.rfind(p, 0) == 0; });
}

}  // namespace

NamedTensors named_state(const torch::nn::Module& module) {
  NamedTensors entries;
  for (const auto& item : module.named_parameters()) entries.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers()) entries.emplace_back(item.key(), item.value());
  return entries;
}

std::vector<torch::Tensor> match_state(const NamedTensors& entries, const c10::impl::GenericDict& saved,
                                       const std::string& source, const LoadStateOptions& options) {
  std::vector<std::string> missing, unexpected, misshaped;
  std::vector<torch::Tensor> matched;
  std::set<std::string> names;
  for (const auto& [name, tensor] : entries) {
    names.insert(name);
    auto it = saved.find(c10::IValue(name));
    if (it == saved.end() || skipped(name, options.skip)) {
      if (!skipped(name, options.skip)) missing.push_back(quoted(name));  // a skipped one keeps the model's values
      matched.emplace_back();
      continue;
    }
    if (!it->value().isTensor()) {
      misshaped.push_back("'" + name + "' is not a tensor in the file");
      matched.emplace_back();
      continue;
    }
    auto stored = it->value().toTensor();
    if (stored.sizes() != tensor.sizes())
      misshaped.push_back("'" + name + "' is " + shape(stored) + " in the file but " + shape(tensor) + " in the model");
    matched.push_back(stored);
  }
  for (const auto& entry : saved) {
    if (!entry.key().isString()) continue;
    const auto& key = entry.key().toStringRef();
    if (!names.count(key) && !skipped(key, options.skip) && key != "_metadata") unexpected.push_back(quoted(key));
  }

  std::vector<std::string> problems;
  if (options.strict && !missing.empty()) problems.push_back("missing from the file: " + joined(missing));
  if (options.strict && !unexpected.empty()) problems.push_back("not in the model: " + joined(unexpected));
  if (!misshaped.empty()) problems.push_back("shape differs: " + joined(misshaped));
  if (!problems.empty()) {
    std::string message = source + " does not fit the model: ";
    for (size_t i = 0; i < problems.size(); ++i) message += (i ? "; " : "") + problems[i];
    throw Error(message);
  }
  return matched;
}

c10::impl::GenericDict read_state_dict(const std::string& path) {
  const auto source = "weights '" + path + "'";
  const auto bytes = read_file(path, "weights");
  return state_dict_in(unpickle(bytes, source, "written by torch.save"), source);
}

c10::impl::GenericDict state_dict_in(const c10::IValue& value, const std::string& source) {
  if (value.isNone())  // an object of a class the reader does not model
    throw Error("cannot read " + source + ": it holds a pickled Python object (torch.save(model), a TorchScript "
                "module or fastai's export.pkl), not a state dict; in Python, torch.save(model.state_dict(), path) "
                "writes one");
  if (!value.isGenericDict()) throw Error("cannot read " + source + ": it holds a " + value.tagKind() + ", not a state dict");
  auto dict = value.toGenericDict();
  // fastai's and fastcpp's checkpoints, PyTorch's checkpoint recipe, Lightning's
  for (const char* key : {"model", "model_state_dict", "state_dict"}) {
    auto inner = dict.find(c10::IValue(std::string(key)));
    if (inner != dict.end() && inner->value().isGenericDict()) return inner->value().toGenericDict();
  }
  return dict;
}

void load_state_dict(torch::nn::Module& module, const std::string& path, const LoadStateOptions& options) {
  load_state_dict(module, read_state_dict(path), "weights '" + path + "'", options);
}

void load_state_dict(torch::nn::Module& module, const c10::impl::GenericDict& state, const std::string& source,
                     const LoadStateOptions& options) {
  const auto entries = named_state(module);
  const auto tensors = match_state(entries, state, source, options);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < entries.size(); ++i)
    if (tensors[i].defined()) entries[i].second.copy_(tensors[i]);
}

void save_state_dict(const torch::nn::Module& module, const std::string& path) {
  c10::Dict<std::string, torch::Tensor> dict;
  for (const auto& [name, tensor] : named_state(module)) dict.insert(name, tensor.detach().to(torch::kCPU));
  save_torch_file(path, dict, "weights");
}

c10::IValue typed_entry(const c10::impl::GenericDict& dict, const std::string& key, bool (c10::IValue::*is)() const,
                        const std::string& what) {
  const auto it = dict.find(c10::IValue(key));
  if (it == dict.end() || !(it->value().*is)())
    throw Error("cannot read " + what + ": its '" + key + "' entry is missing or of the wrong type");
  return it->value();
}

}  // namespace fastcpp
