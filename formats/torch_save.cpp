#include "formats/torch_save.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

namespace fastcpp {
namespace {

// The value with every list generic: libtorch pickles a list of ints, floats, bools or
// tensors through torch.jit._pickle's build_* functions, which weights_only refuses too.
c10::IValue with_plain_lists(const c10::IValue& value) {
  if (value.isList()) {
    c10::impl::GenericList list(c10::AnyType::get());
    for (const auto& element : value.toListRef()) list.push_back(with_plain_lists(element));
    return list;
  }
  if (value.isGenericDict()) {
    const auto dict = value.toGenericDict();
    c10::impl::GenericDict plain(dict.keyType(), c10::AnyType::get());
    for (const auto& entry : dict) plain.insert(entry.key(), with_plain_lists(entry.value()));
    return plain;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const auto& element : value.toTupleRef().elements()) elements.push_back(with_plain_lists(element));
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  return value;
}

}  // namespace

void torch_save(const c10::IValue& value, const ByteSink& sink) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* bytes, size_t size) { pickle.insert(pickle.end(), bytes, bytes + size); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
                              /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(with_plain_lists(value));
  pickler.stop();
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t size) {
    sink(static_cast<const char*>(bytes), size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
}

std::vector<char> torch_save_bytes(const c10::IValue& value) {
  std::vector<char> archive;
  torch_save(value, [&](const char* bytes, size_t size) { archive.insert(archive.end(), bytes, bytes + size); });
  return archive;
}

void save_torch_file(const std::string& path, const c10::IValue& value, const std::string& what) {
  write_atomically(path, [&](const ByteSink& sink) { torch_save(value, sink); }, what);
}

}  // namespace fastcpp
