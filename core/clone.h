#pragma once
// Deep copies of modules that leave the global CPU generator as it was. libtorch's
// Cloneable::clone builds each layer of the copy anew (its constructor draws initial
// weights) before copying the weights over, so every replica to_parallel makes would
// otherwise move what the program draws next (augmentation, dropout, shuffling) and a
// multi-device run would stop drawing what the one-device run draws.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <mutex>
#include <utility>

namespace fastcpp {

template <class Clone>
auto without_drawing(Clone&& clone) {
  auto generator = at::detail::getDefaultCPUGenerator();
  const auto state = [&] {
    std::lock_guard<std::mutex> lock(generator.mutex());
    return generator.get_state();
  }();
  auto copy = std::forward<Clone>(clone)();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
  return copy;
}

}  // namespace fastcpp
