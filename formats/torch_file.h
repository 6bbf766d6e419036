#pragma once
// Reads what Python's torch.save writes (a zip archive: data.pkl, a pickle, and
// data/<key> records holding the tensors' storages) into IValues: dicts (including
// collections.OrderedDict, which libtorch's own unpickler turns into None, so a
// Python state dict cannot be read with torch::pickle_load), lists, tuples, strings,
// numbers and tensors, in pickle protocols 2 to 5; tensors of every dtype torch.save
// writes but the quantized ones, of subclasses (fastai's TensorImage) as plain tensors.
// Objects of other classes (an argparse.Namespace in a training checkpoint, say), sets
// and integers past 64 bits become None, and dict entries under keys other than strings,
// numbers and bools are left out, so the tensors around them still load. A file
// in another format (torch.save's legacy one, safetensors) is named as such.
#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

namespace caffe2::serialize {
class PyTorchStreamReader;
}

namespace fastcpp {

// The zip archive in `bytes` (which must outlive it), read with reads that stop at the
// end of the bytes: libtorch's own in-memory readers copy from past the end when a
// damaged archive points there, and crash (found by fuzzing). Every archive fastcpp
// reads goes through here. Throws fastcpp::Error for records larger than the archive can
// hold (formats/zip_directory.h), c10::Error for other damage.
std::unique_ptr<caffe2::serialize::PyTorchStreamReader> open_archive(const std::vector<char>& bytes);

// Throws fastcpp::Error for a file that is not a torch.save archive or is cut short.
c10::IValue read_torch_file(const std::vector<char>& bytes);

// The integers of a list or tuple, whether read_torch_file made it (a generic list) or
// libtorch did (an int list); c10::Error for anything else.
std::vector<int64_t> int64s_of(const c10::IValue& value);

// The value pickled in a file's bytes; "cannot read <source>: the file is truncated or
// not <kind> (...)" when it holds none, "cannot read <source>: it uses <what>, which
// fastcpp does not read[; remedy]" for a valid file this reader cannot take.
c10::IValue unpickle(const std::vector<char>& bytes, const std::string& source, const std::string& kind);

}  // namespace fastcpp
