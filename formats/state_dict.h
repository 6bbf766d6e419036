#pragma once
// State dicts: a module's parameters and buffers by dotted name, read from and
// written to the files PyTorch's torch.save / torch.load use (a pickled dict in a
// zip archive), so weights move between Python and C++ in both directions.
//
//   save_state_dict(*model, "resnet18.pth");        // Python: model.load_state_dict(torch.load(...))
//   load_state_dict(*model, "from_python.pth");     // Python: torch.save(model.state_dict(), ...)
//
// Loading checks the whole file against the module before copying anything: a
// mismatch changes nothing and lists every missing, unexpected and mis-shaped key.
#include <torch/nn/module.h>
#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

namespace fastcpp {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Parameters then buffers, by their dotted names (torch's state_dict keys).
NamedTensors named_state(const torch::nn::Module& module);

struct LoadStateOptions {
  bool strict = true;               // false: missing and unexpected keys are allowed (shapes still must match)
  // Keys starting with one of these are ignored, in the file and the model, which keeps its
  // own values there (e.g. "fc.": a new head).
  std::vector<std::string> skip;
};

// The tensors of `saved` for each entry of `entries`, in order (undefined where
// missing and not strict). Throws fastcpp::Error naming `source` and every problem.
std::vector<torch::Tensor> match_state(const NamedTensors& entries, const c10::impl::GenericDict& saved,
                                       const std::string& source, const LoadStateOptions& options = {});

// A state dict from `path`: a plain torch.save(model.state_dict()) file, or a dict
// holding one under "model" (a fastcpp checkpoint, fastai's save), "model_state_dict"
// (PyTorch's checkpoint recipe) or "state_dict" (Lightning's).
c10::impl::GenericDict read_state_dict(const std::string& path);
// The same in a file's unpickled `value`; `source` names it in errors.
c10::impl::GenericDict state_dict_in(const c10::IValue& value, const std::string& source);

void load_state_dict(torch::nn::Module& module, const std::string& path, const LoadStateOptions& options = {});
// The same from a dict already read; `source` names it in errors.
void load_state_dict(torch::nn::Module& module, const c10::impl::GenericDict& state, const std::string& source,
                     const LoadStateOptions& options = {});
// Written atomically, tensors on the CPU.
void save_state_dict(const torch::nn::Module& module, const std::string& path);

// The `key` entry of a dict read from a file, when `(entry.*is)()`; otherwise throws
// "cannot read WHAT: its 'KEY' entry is missing or of the wrong type".
c10::IValue typed_entry(const c10::impl::GenericDict& dict, const std::string& key, bool (c10::IValue::*is)() const,
                        const std::string& what);

}  // namespace fastcpp
