#pragma once
// What torch.save writes, for an IValue of dicts, lists, strings, numbers and tensors: a
// zip archive of data.pkl and the tensors' storages. Unlike torch::pickle_save it writes
// no TorchScript type tags around dicts and lists nor typed lists (torch.jit._pickle's
// restore_type_tag and build_intlist ...), which Python's torch.load refuses under its
// default weights_only=True (torch >= 2.6): fastcpp's weights, checkpoints and exports
// load with plain torch.load(path).
#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

#include "formats/file_io.h"

namespace fastcpp {

// The archive handed to `sink` as it is made: the pickle whole (it holds no tensor
// data), each storage as it is written. Tensors should be on the CPU already.
void torch_save(const c10::IValue& value, const ByteSink& sink);
std::vector<char> torch_save_bytes(const c10::IValue& value);
// torch.save(value, path), written atomically and streamed (formats/file_io.h).
void save_torch_file(const std::string& path, const c10::IValue& value, const std::string& what);

}  // namespace fastcpp
