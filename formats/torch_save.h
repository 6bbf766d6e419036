#pragma once
// What torch.save writes, for an IValue of dicts, lists, strings, numbers and tensors: a
// zip archive of data.pkl and the tensors' storages. Unlike torch::pickle_save it writes
// no TorchScript type tags around dicts and lists nor typed lists (torch.jit._pickle's
// restore_type_tag and build_intlist ...), which Python's torch.load refuses under its
// default weights_only=True (torch >= 2.6): fastcpp's weights, checkpoints and exports
// load with plain torch.load(path).
#include <ATen/core/ivalue.h>

#include <vector>

namespace fastcpp {

std::vector<char> torch_save_bytes(const c10::IValue& value);

}  // namespace fastcpp
