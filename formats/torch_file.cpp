#include "formats/torch_file.h"

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "formats/zip_directory.h"

namespace fastcpp {
namespace {

// Values nested deeper are refused: destroying one recurses once per level, and a
// pickle of a few hundred thousand nested lists would overflow the stack. torch.save's
// state dicts nest about 5 deep.
constexpr size_t kMaxDepth = 1000;

// How deep a value nests ([[1]] is 2 deep), and whether a container holds it. A list or
// dict already placed in a container must not grow: those above it would deepen unseen.
struct Nesting {
  size_t depth = 0;
  bool placed = false;
};

// A pickle stack entry: a value or a MARK. A class or function named by GLOBAL is a
// value holding its "module.name" (so that a storage class inside a tuple keeps it).
struct Item {
  bool mark = false;
  c10::IValue data;
  std::shared_ptr<Nesting> nesting = std::make_shared<Nesting>();  // shared with the item's memo copies
};

const std::map<std::string, torch::Dtype>& storage_dtypes() {
  static const std::map<std::string, torch::Dtype> dtypes{
      {"torch.FloatStorage", torch::kFloat},   {"torch.DoubleStorage", torch::kDouble}, {"torch.HalfStorage", torch::kHalf},
      {"torch.BFloat16Storage", torch::kBFloat16}, {"torch.LongStorage", torch::kLong}, {"torch.IntStorage", torch::kInt},
      {"torch.ShortStorage", torch::kShort},   {"torch.CharStorage", torch::kChar},     {"torch.ByteStorage", torch::kByte},
      {"torch.BoolStorage", torch::kBool},     {"torch.ComplexFloatStorage", torch::kComplexFloat},
      {"torch.ComplexDoubleStorage", torch::kComplexDouble},
      // Bytes, viewed as the dtype _rebuild_tensor_v3 names (the dtypes without a storage class).
      {"torch.storage.UntypedStorage", torch::kByte}};
  return dtypes;
}

// The dtypes _rebuild_tensor_v3 names: torch.save writes it for those without a storage
// class, and may for every dtype later.
const std::map<std::string, torch::Dtype>& rebuilt_dtypes() {
  static const std::map<std::string, torch::Dtype> dtypes{
      {"torch.uint16", torch::kUInt16},           {"torch.uint32", torch::kUInt32},
      {"torch.uint64", torch::kUInt64},           {"torch.float8_e4m3fn", torch::kFloat8_e4m3fn},
      {"torch.float8_e5m2", torch::kFloat8_e5m2}, {"torch.float8_e4m3fnuz", torch::kFloat8_e4m3fnuz},
      {"torch.float8_e5m2fnuz", torch::kFloat8_e5m2fnuz},
      {"torch.float32", torch::kFloat},           {"torch.float64", torch::kDouble},
      {"torch.float16", torch::kHalf},            {"torch.bfloat16", torch::kBFloat16},
      {"torch.int64", torch::kLong},              {"torch.int32", torch::kInt},
      {"torch.int16", torch::kShort},             {"torch.int8", torch::kChar},
      {"torch.uint8", torch::kByte},              {"torch.bool", torch::kBool},
      {"torch.complex32", torch::kComplexHalf},   {"torch.complex64", torch::kComplexFloat},
      {"torch.complex128", torch::kComplexDouble}};
  return dtypes;
}

// A name read from the file, cut short for a message (a damaged file may hold megabytes).
std::string quoted_name(const std::string& name) { return name.size() > 100 ? name.substr(0, 100) + "..." : name; }

// What a valid file uses that this reader does not (where Error alone means damage), and
// what to do about it.
class Unsupported : public Error {
 public:
  explicit Unsupported(const std::string& what, const std::string& remedy = "")
      : Error("it uses " + what + ", which fastcpp does not read" + (remedy.empty() ? "" : "; " + remedy)) {}
};

class Unpickler {
 public:
  Unpickler(const char* data, size_t size, caffe2::serialize::PyTorchStreamReader& archive)
      : p_(data), end_(data + size), archive_(archive) {}

  c10::IValue run() {
    while (true) {
      const auto op = static_cast<uint8_t>(byte());
      switch (op) {
        case 0x80: byte(); break;                                  // PROTO
        case 0x95: take(8); break;                                 // FRAME
        case '.': return pop().data;                               // STOP
        case '(': stack_.push_back({true}); break;                 // MARK
        case 'N': push(c10::IValue()); break;
        case 0x88: push(true); break;
        case 0x89: push(false); break;
        case 'K': push(static_cast<int64_t>(static_cast<uint8_t>(byte()))); break;
        case 'M': push(static_cast<int64_t>(little<uint16_t>())); break;
        case 'J': push(static_cast<int64_t>(little<int32_t>())); break;
        case 0x8a: push(long_or_none(static_cast<uint8_t>(byte()))); break;  // LONG1
        case 'G': push(binfloat()); break;
        case 'X': push(text(little<uint32_t>())); break;
        case 0x8c: push(text(static_cast<uint8_t>(byte()))); break;              // SHORT_BINUNICODE
        case 0x8d: push(text(little<uint64_t>())); break;                        // BINUNICODE8
        case 'U': case 'C': push(text(static_cast<uint8_t>(byte()))); break;     // SHORT_BINSTRING, _BINBYTES
        case 'T': case 'B': push(text(little<uint32_t>())); break;               // BINSTRING, BINBYTES
        case 0x8e: push(text(little<uint64_t>())); break;                        // BINBYTES8
        case 0x8b: push(long_or_none(little<uint32_t>())); break;                // LONG4
        case 'c': global(); break;
        case 0x93: {  // STACK_GLOBAL (protocol 4 and 5)
          const auto name = pop().data, module = pop().data;
          if (!name.isString() || !module.isString()) throw Error("malformed pickle (STACK_GLOBAL of a non-string)");
          push(module.toStringRef() + "." + name.toStringRef());
          break;
        }
        case '0': pop(); break;                                    // POP
        case '1': values_since_mark(); break;                      // POP_MARK
        case '2': stack_.push_back(top()); break;                  // DUP
        case 0x8f: push(c10::IValue()); break;                     // EMPTY_SET: sets are not modelled
        case 0x90: values_since_mark(); break;                     // ADDITEMS
        case 0x91: {  // FROZENSET
          values_since_mark();
          push(c10::IValue());
          break;
        }
        case 'q': memo_[static_cast<uint8_t>(byte())] = top(); break;
        case 'r': memo_[little<uint32_t>()] = top(); break;
        case 0x94: {  // MEMOIZE
          const auto index = static_cast<uint32_t>(memo_.size());
          memo_[index] = top();
          break;
        }
        case 'h': stack_.push_back(memo(static_cast<uint8_t>(byte()))); break;
        case 'j': stack_.push_back(memo(little<uint32_t>())); break;
        case ')': push(c10::ivalue::Tuple::create({})); break;
        case 0x85: tuple(1); break;
        case 0x86: tuple(2); break;
        case 0x87: tuple(3); break;
        case 't': stack_.push_back(tuple_of(values_since_mark())); break;
        case '}': push(c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get())); break;
        case ']': push(c10::impl::GenericList(c10::AnyType::get())); break;
        case 'a': {
          std::vector<Item> values(1, pop());
          append(top(), values);
          break;
        }
        case 'e': {
          auto values = values_since_mark();
          append(top(), values);
          break;
        }
        case 's': {
          std::vector<Item> kv(2);
          kv[1] = pop();
          kv[0] = pop();
          set_items(top(), kv);
          break;
        }
        case 'u': {
          auto kvs = values_since_mark();
          set_items(top(), kvs);
          break;
        }
        case 'Q': push(persistent_load(pop().data)); break;         // BINPERSID
        case 'R':                                                 // REDUCE
        case 0x81: {                                              // NEWOBJ
          auto args = pop();
          auto callable = pop().data;
          stack_.push_back(call(callable, args));
          break;
        }
        case 0x92: {  // NEWOBJ_EX: its keyword arguments are not needed
          pop();
          auto args = pop();
          auto callable = pop().data;
          stack_.push_back(call(callable, args));
          break;
        }
        case 'b': pop(); break;  // BUILD: the state of an object (an OrderedDict's _metadata): not needed
        default:
          throw Error("unsupported pickle opcode " + std::to_string(op));
      }
    }
  }

 private:
  char byte() {
    if (p_ >= end_) throw Error("the pickle ends early");
    return *p_++;
  }
  const char* take(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) throw Error("the pickle ends early");
    const char* at = p_;
    p_ += n;
    return at;
  }
  template <class T>
  T little() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));  // pickles are little-endian, as are our machines
    return v;
  }
  // An integer of n bytes; None where it does not fit 64 bits (a seed of 2^64 - 1, say),
  // so that the rest of the file still loads.
  c10::IValue long_or_none(uint64_t n) {
    const char* bytes = take(n);
    if (n > 8) return {};
    uint64_t v = 0;
    for (int i = static_cast<int>(n) - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(bytes[i]);
    if (n > 0 && n < 8 && (bytes[n - 1] & 0x80)) v |= ~uint64_t{0} << (8 * n);  // sign-extend
    return static_cast<int64_t>(v);
  }
  double binfloat() {
    const char* bytes = take(8);
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<uint8_t>(bytes[i]);  // big-endian
    double v;
    std::memcpy(&v, &bits, 8);
    return v;
  }
  std::string text(size_t n) { return std::string(take(n), n); }
  std::string line() {
    std::string s;
    for (char c = byte(); c != '\n'; c = byte()) s += c;
    return s;
  }
  void global() {
    auto module = line();
    auto name = line();
    push(module + "." + name);
  }

  void push(c10::IValue v) { stack_.push_back({false, std::move(v)}); }
  Item& top() {
    if (stack_.empty()) throw Error("malformed pickle (stack underflow)");
    return stack_.back();
  }
  const Item& memo(uint32_t key) const {
    const auto it = memo_.find(key);
    if (it == memo_.end()) throw Error("malformed pickle (memo entry " + std::to_string(key) + " was never stored)");
    return it->second;
  }
  Item pop() {
    if (stack_.empty()) throw Error("malformed pickle (stack underflow)");
    auto item = std::move(stack_.back());
    stack_.pop_back();
    return item;
  }
  std::vector<Item> values_since_mark() {
    std::vector<Item> values;
    while (true) {
      auto item = pop();
      if (item.mark) break;
      values.push_back(std::move(item));
    }
    std::reverse(values.begin(), values.end());
    return values;
  }
  void tuple(size_t n) {
    std::vector<Item> values(n);
    for (size_t i = n; i-- > 0;) values[i] = pop();
    stack_.push_back(tuple_of(std::move(values)));
  }
  static Item tuple_of(std::vector<Item> values) {
    std::vector<c10::IValue> elements;
    for (const auto& v : values) elements.push_back(v.data);
    Item tuple{false, c10::ivalue::Tuple::create(std::move(elements))};
    nest(tuple, values);
    return tuple;
  }
  static void append(Item& list, std::vector<Item>& values) {
    if (!list.data.isList()) return;  // items of an object we do not model
    nest(list, values);
    auto l = list.data.toList();
    for (const auto& v : values) l.push_back(v.data);
  }
  static void set_items(Item& dict, std::vector<Item>& kvs) {
    if (!dict.data.isGenericDict()) return;
    nest(dict, kvs);
    auto d = dict.data.toGenericDict();
    for (size_t i = 0; i + 1 < kvs.size(); i += 2) {
      // Keys libtorch's dicts cannot hash (a tuple, None, an object read as None) leave
      // their entry out; the others still load.
      const auto& key = kvs[i].data;
      if (key.isString() || key.isInt() || key.isDouble() || key.isBool()) d.insert_or_assign(key, kvs[i + 1].data);
    }
  }
  // `container` takes `children`: one level deeper than the deepest of them.
  static void nest(Item& container, std::vector<Item>& children) {
    for (auto& child : children) {
      container.nesting->depth = std::max(container.nesting->depth, child.nesting->depth + 1);
      child.nesting->placed = true;
    }
    // Checked after placing the children: a list appended to itself is placed too.
    if (container.nesting->placed)
      throw Error("malformed pickle (a list or dict grows after it was placed in a container)");
    if (container.nesting->depth > kMaxDepth)
      throw Error("the pickle holds values nested deeper than " + std::to_string(kMaxDepth) + " levels");
  }

  // What REDUCE makes of a GLOBAL called with `args`.
  Item call(const c10::IValue& callable, const Item& args) {
    const std::string name = callable.isString() ? callable.toStringRef() : "";
    if (name == "collections.OrderedDict")
      return {false, c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get())};
    if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor") {
      const auto& a = args.data.toTupleRef().elements();
      return {false, a.at(0).toTensor().as_strided(int64s_of(a.at(2)), int64s_of(a.at(3)), a.at(1).toInt())};
    }
    if (name == "torch._utils._rebuild_tensor_v3") {  // (bytes, offset, size, stride, _, _, dtype, ...)
      const auto& a = args.data.toTupleRef().elements();
      if (!a.at(6).isString()) throw Error("_rebuild_tensor_v3 without a dtype");
      const auto& dtype_name = a.at(6).toStringRef();
      const auto dtype = rebuilt_dtypes().find(dtype_name);
      if (dtype == rebuilt_dtypes().end()) {
        if (dtype_name.rfind("torch.", 0) != 0)
          throw Error("_rebuild_tensor_v3 of no dtype: " + quoted_name(dtype_name));
        throw Unsupported("a tensor of dtype " + quoted_name(dtype_name));
      }
      const auto bytes = a.at(0).toTensor();
      if (bytes.nbytes() % c10::elementSize(dtype->second) != 0)
        throw Error("a storage of " + dtype_name + " is cut short");
      return {false, bytes.view(dtype->second).as_strided(int64s_of(a.at(2)), int64s_of(a.at(3)), a.at(1).toInt())};
    }
    // A tensor subclass's (fastai's TensorImage, say): the function and arguments that make
    // the plain tensor, then its class and state, which are not needed.
    if (name == "torch._tensor._rebuild_from_type_v2" || name == "fastai.torch_core._rebuild_from_type") {
      const auto& a = args.data.toTupleRef().elements();
      return call(a.at(0), Item{false, a.at(2), args.nesting});
    }
    // These return their first argument, already placed in the arguments' tuple (whose depth
    // bounds it). libtorch's own pickler wraps typed containers in torch.jit._pickle's functions.
    if (name == "torch._utils._rebuild_parameter" || name == "torch._utils._rebuild_parameter_with_state" ||
        name.rfind("torch.jit._pickle.", 0) == 0) {
      auto nesting = std::make_shared<Nesting>(Nesting{args.nesting->depth, /*placed=*/true});
      return {false, args.data.toTupleRef().elements().at(0), std::move(nesting)};
    }
    return {};  // an object of a class we do not model
  }

  // ('storage', <dtype's storage class>, key, location, numel): the record data/<key>.
  c10::IValue persistent_load(const c10::IValue& pid) {
    const auto id = pid.toTupleRef().elements().vec();
    if (id.size() < 5 || !id[0].isString() || id[0].toStringRef() != "storage") throw Error("unsupported persistent id");
    const auto key = id[2].toStringRef();
    if (auto cached = storages_.find(key); cached != storages_.end()) return cached->second;
    const auto& type = id[1].toStringRef();  // the storage class, a GLOBAL kept as its name
    const auto dtype = storage_dtypes().find(type);
    if (dtype == storage_dtypes().end()) {
      if (type.rfind("torch.", 0) != 0) throw Error("a storage of no type: " + quoted_name(type));
      throw Unsupported("a storage of type " + quoted_name(type));
    }
    const int64_t numel = id[4].toInt();
    const auto [data, size] = archive_.getRecord("data/" + key);
    // Checked before allocating: a damaged file may claim any number of elements.
    if (numel < 0 || static_cast<uint64_t>(numel) > size / c10::elementSize(dtype->second))
      throw Error("the record data/" + key + " is cut short (" + std::to_string(size) + " bytes for " +
                  std::to_string(numel) + " elements)");
    auto storage = torch::empty({numel}, dtype->second);
    if (numel > 0) std::memcpy(storage.data_ptr(), data.get(), storage.nbytes());
    storages_[key] = storage;
    return storage;
  }

  const char* p_;
  const char* end_;
  caffe2::serialize::PyTorchStreamReader& archive_;
  std::vector<Item> stack_;
  std::unordered_map<uint32_t, Item> memo_;
  std::unordered_map<std::string, torch::Tensor> storages_;
};

// Bytes in memory, read no further than their end.
class BoundedReader final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BoundedReader(const std::vector<char>& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size() || n == 0) return 0;  // n == 0: miniz may pass a null buffer
    n = std::min<size_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::vector<char>& bytes_;
};

}  // namespace

std::unique_ptr<caffe2::serialize::PyTorchStreamReader> open_archive(const std::vector<char>& bytes) {
  check_zip_record_sizes(bytes);  // before libtorch allocates what the records claim
  return std::make_unique<caffe2::serialize::PyTorchStreamReader>(std::make_shared<BoundedReader>(bytes));
}

std::vector<int64_t> int64s_of(const c10::IValue& value) {
  std::vector<int64_t> values;
  for (const auto& v : value.isTuple() ? value.toTupleRef().elements() : value.toListRef()) values.push_back(v.toInt());
  return values;
}

// The formats a file may be in that are not torch.save's zip archive, by their first bytes.
void refuse_other_formats(const std::vector<char>& bytes) {
  const auto starts_with = [&](std::string_view prefix) {
    return bytes.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), bytes.begin());
  };
  // torch.save's format before PyTorch 1.6 (and with _use_new_zipfile_serialization=False):
  // a pickled magic number first.
  if (starts_with(std::string_view("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 14)))
    throw Unsupported("torch.save's legacy format (PyTorch before 1.6, or _use_new_zipfile_serialization=False)",
                      "in Python, torch.save(torch.load(f), f) rewrites it in the current one");
  // safetensors: an 8-byte header length, then the JSON header.
  if (bytes.size() > 9 && bytes[8] == '{' && bytes[9] == '"')
    throw Unsupported("the safetensors format",
                      "in Python, torch.save(safetensors.torch.load_file(f), out) converts it");
}

c10::IValue read_torch_file(const std::vector<char>& bytes) {
  try {
    refuse_other_formats(bytes);
    const auto archive = open_archive(bytes);
    const auto [pickle, size] = archive->getRecord("data.pkl");
    return Unpickler(static_cast<const char*>(pickle.get()), size, *archive).run();
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    throw Error(std::string(e.what_without_backtrace()).substr(0, 200));
  } catch (const std::exception& e) {  // e.g. an argument tuple too short for its function
    throw Error(std::string("malformed pickle (") + e.what() + ")");
  }
}

c10::IValue unpickle(const std::vector<char>& bytes, const std::string& source, const std::string& kind) {
  // fastcpp's own reader, not torch::pickle_load: libtorch's unpickler sizes its memo
  // from the file and so allocates whatever a damaged file claims (found by fuzzing).
  try {
    return read_torch_file(bytes);
  } catch (const Unsupported& e) {
    throw Error("cannot read " + source + ": " + e.what());
  } catch (const Error& e) {
    throw Error("cannot read " + source + ": the file is truncated or not " + kind + " (" +
                std::string(e.what()).substr(0, 200) + ")");
  }
}

}  // namespace fastcpp
