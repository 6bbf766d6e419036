#include "data/buffer_pool.h"

#include <torch/torch.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace fastcpp {
namespace {

class BufferPool {
 public:
  void* acquire(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& free = free_[bytes];
      if (!free.empty()) {
        void* block = free.back();
        free.pop_back();
        cached_ -= bytes;
        return block;
      }
    }
    void* block = nullptr;
    if (posix_memalign(&block, 64, bytes) != 0) throw std::bad_alloc();
    return block;
  }

  void release(void* block, size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + bytes <= kMaxCachedBytes && free_[bytes].size() < kMaxPerSize) {
        free_[bytes].push_back(block);
        cached_ += bytes;
        return;
      }
    }
    std::free(block);
  }

 private:
  static constexpr size_t kMaxCachedBytes = size_t(1) << 30;
  static constexpr size_t kMaxPerSize = 16;
  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
};

// Never destroyed: tensors may outlive static destruction order.
BufferPool& pool() {
  static auto* instance = new BufferPool();
  return *instance;
}

}  // namespace

torch::Tensor pooled_empty(at::IntArrayRef sizes, at::ScalarType dtype) {
  int64_t numel = 1;
  for (auto s : sizes) numel *= s;
  const size_t bytes = std::max<size_t>(static_cast<size_t>(numel) * c10::elementSize(dtype), 1);
  void* block = pool().acquire(bytes);
  return torch::from_blob(block, sizes, [bytes](void* p) { pool().release(p, bytes); },
                          torch::TensorOptions().dtype(dtype));
}

}  // namespace fastcpp
