#pragma once
// Reads what Python's torch.save writes (a zip archive: data.pkl, a pickle, and
// data/<key> records holding the tensors' storages) into IValues: dicts (including
// collections.OrderedDict, which libtorch's own unpickler turns into None, so a
// Python state dict cannot be read with torch::pickle_load), lists, tuples, strings,
// numbers and tensors. Objects of other classes (an argparse.Namespace in a training
// checkpoint, say) become None, so the tensors around them still load.
#include <torch/types.h>

#include <vector>

namespace fastcpp {

// Throws fastcpp::Error for a file that is not a torch.save archive or is cut short.
c10::IValue read_torch_file(const std::vector<char>& bytes);

}  // namespace fastcpp
