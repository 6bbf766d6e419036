#include "distributed/replica_grads.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>

#include "core/error.h"

#if FASTCPP_HAS_NCCL
#include <torch/csrc/cuda/nccl.h>
#endif

namespace fastcpp::distributed {

bool nccl_reduces(const std::vector<torch::Device>& devices) {
#if FASTCPP_HAS_NCCL
  for (auto it = devices.begin(); it != devices.end(); ++it)
    if (!it->is_cuda() || std::find(devices.begin(), it, *it) != it) return false;
  return devices.size() > 1;
#else
  return false;
#endif
}

void reduce_into_first(const std::vector<std::vector<torch::Tensor>>& params, int replicas, bool nccl) {
  torch::NoGradGuard no_grad;
  auto any_grad = [&](size_t i) {
    for (int r = 0; r < replicas; ++r)
      if (params[static_cast<size_t>(r)][i].grad().defined()) return true;
    return false;
  };
  std::map<c10::ScalarType, std::vector<size_t>> by_dtype;
  for (size_t i = 0; i < params[0].size(); ++i)
    if (any_grad(i)) by_dtype[params[0][i].scalar_type()].push_back(i);

  for (const auto& [dtype, indices] : by_dtype) {
    std::vector<torch::Tensor> flat;
    for (int r = 0; r < replicas; ++r) {
      std::vector<torch::Tensor> grads;
      for (auto i : indices) {
        const auto& p = params[static_cast<size_t>(r)][i];
        grads.push_back(p.grad().defined() ? p.grad().reshape(-1) : torch::zeros({p.numel()}, p.options()));
      }
      flat.push_back(torch::cat(grads));
    }
    if (nccl) {
#if FASTCPP_HAS_NCCL
      torch::cuda::nccl::reduce(flat, /*root=*/0);  // into flat[0]
#endif
    } else {
      for (size_t r = 1; r < flat.size(); ++r) flat[0].add_(flat[r].to(flat[0].device(), /*non_blocking=*/true));
    }
    int64_t offset = 0;
    for (auto i : indices) {
      const auto& p = params[0][i];
      auto sum = flat[0].narrow(0, offset, p.numel()).view_as(p);
      offset += p.numel();
      auto& grad = p.mutable_grad();
      if (grad.defined()) grad.copy_(sum);
      else grad = sum.clone();
      for (int r = 1; r < replicas; ++r) params[static_cast<size_t>(r)][i].mutable_grad() = torch::Tensor();
    }
  }
}

}  // namespace fastcpp::distributed
