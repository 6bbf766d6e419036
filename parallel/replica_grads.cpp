#include "parallel/replica_grads.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <unordered_map>

#include "parallel/replica_streams.h"

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

namespace {

#if FASTCPP_HAS_NCCL
// One flat buffer per replica and dtype, summed into replica 0's by one NCCL reduce
// across the GPUs, then split back into replica 0's gradients. Every replica takes part,
// those that sat out a short batch with zeros: NCCL's communicators are cached per device
// list, and a list of its own for the last batch would build new ones.
void reduce_with_nccl(const std::vector<std::vector<torch::Tensor>>& params, const std::vector<bool>& repeat) {
  const size_t replicas = params.size();
  auto any_grad = [&](size_t i) {
    if (!params[0][i].requires_grad()) return false;
    for (size_t r = 0; r < replicas; ++r)
      if (params[r][i].grad().defined()) return true;
    return false;
  };
  std::map<c10::ScalarType, std::vector<size_t>> by_dtype;
  for (size_t i = 0; i < params[0].size(); ++i)
    if (!repeat[i] && any_grad(i)) by_dtype[params[0][i].scalar_type()].push_back(i);
  for (const auto& [dtype, indices] : by_dtype) {
    std::vector<torch::Tensor> flat;
    for (size_t r = 0; r < replicas; ++r) {
      std::vector<torch::Tensor> grads;
      for (auto i : indices) {
        const auto& p = params[r][i];
        grads.push_back(p.grad().defined() ? p.grad().reshape(-1) : torch::zeros({p.numel()}, p.options()));
      }
      flat.push_back(torch::cat(grads));
    }
    torch::cuda::nccl::reduce(flat, /*root=*/0);
    int64_t offset = 0;
    for (auto i : indices) {
      const auto& p = params[0][i];
      auto sum = flat[0].narrow(0, offset, p.numel()).view_as(p);
      offset += p.numel();
      auto& grad = p.mutable_grad();
      if (grad.defined()) grad.copy_(sum);
      else grad = sum.clone();
    }
  }
}
#endif

}  // namespace

std::vector<bool> merge_tied_parts(const std::vector<std::vector<torch::Tensor>>& params, int replicas) {
  std::vector<bool> repeat(params[0].size(), false);
  std::unordered_map<const c10::TensorImpl*, size_t> first;
  for (size_t i = 0; i < params[0].size(); ++i) {
    const auto [at, inserted] = first.emplace(params[0][i].unsafeGetTensorImpl(), i);
    if (inserted) continue;
    repeat[i] = true;
    for (int r = 1; r < replicas; ++r) {
      const auto& copy = params[static_cast<size_t>(r)];
      auto& part = copy[i].mutable_grad();
      if (!part.defined() || copy[i].is_same(copy[at->second])) continue;  // still tied: one gradient
      auto& into = copy[at->second].mutable_grad();
      if (into.defined()) into.add_(part);
      else into = part;
      keep_for_current_stream(part);
      part = torch::Tensor();
    }
  }
  return repeat;
}

void reduce_into_first(const std::vector<std::vector<torch::Tensor>>& params, int replicas, bool nccl) {
  torch::NoGradGuard no_grad;
  const auto repeat = merge_tied_parts(params, replicas);
#if FASTCPP_HAS_NCCL
  if (nccl) reduce_with_nccl(params, repeat);
#endif
  for (int r = 1; r < replicas; ++r) {
    // Each gradient added where replica 0's lies, no flat copies: one multi-tensor add
    // for the replica (a few kernels on a shared GPU, not one per parameter).
    std::vector<torch::Tensor> totals, addends;
    for (size_t i = 0; i < params[0].size(); ++i) {
      auto& grad = params[static_cast<size_t>(r)][i].mutable_grad();
      if (!grad.defined()) continue;
      if (!nccl && !repeat[i] && params[0][i].requires_grad()) {
        auto& total = params[0][i].mutable_grad();
        if (total.defined()) {
          totals.push_back(total);
          addends.push_back(grad.to(total.device(), /*non_blocking=*/true));
        } else {
          total = grad.to(params[0][i].device(), /*non_blocking=*/false, /*copy=*/true);
        }
      }
      // Made on the replica's stream, read on this one: not reused before that read is done.
      keep_for_current_stream(grad);
      grad = torch::Tensor();
    }
    if (!totals.empty()) at::_foreach_add_(totals, addends);
  }
}

}  // namespace fastcpp::distributed
