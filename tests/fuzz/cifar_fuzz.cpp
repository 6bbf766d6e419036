// libFuzzer target: read_cifar_file on arbitrary bytes, as CIFAR-10 and as CIFAR-100,
// must return a dataset whose labels are in range or throw fastcpp::Error. Built and
// run by tests/fuzz/run.sh.
#include "core/error.h"
#include "memory_file.h"
#include "vision/datasets/cifar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static MemoryFile file;
  using fastcpp::vision::Cifar;
  for (const auto kind : {Cifar::ten, Cifar::hundred}) {
    try {
      const auto dataset = fastcpp::vision::read_cifar_file(file.write(data, size), kind);
      const auto y = dataset->y();
      if (y.numel() > 0 && y.max().item<int64_t>() >= (kind == Cifar::ten ? 10 : 100))  // read from bytes: never < 0
        __builtin_trap();  // a label outside the classes would be a device assert later
    } catch (const fastcpp::Error&) {
    }
  }
  return 0;
}
