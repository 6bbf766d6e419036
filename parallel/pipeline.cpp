#include "parallel/pipeline.h"

#include <torch/torch.h>

#include <numeric>

#include "core/error.h"
#include "core/sequential.h"

namespace fastcpp::distributed {

std::vector<size_t> balance_by_parameters(const torch::nn::Sequential& model, size_t n_stages) {
  const size_t n_layers = model->size();
  if (n_stages == 0 || n_stages > n_layers)
    throw Error("Pipeline: cannot split " + std::to_string(n_layers) + " layers into " + std::to_string(n_stages) + " stages");
  std::vector<int64_t> sizes;
  for (const auto& layer : model->children()) {
    int64_t n = 0;
    for (const auto& p : layer->parameters()) n += p.numel();
    sizes.push_back(n);
  }
  const double total = static_cast<double>(std::accumulate(sizes.begin(), sizes.end(), int64_t{0}));
  std::vector<size_t> balance;
  size_t start = 0;
  double done = 0;
  for (size_t stage = 0; stage < n_stages; ++stage) {
    const size_t stages_after = n_stages - stage - 1;
    size_t end = start + 1;  // at least one layer each
    done += static_cast<double>(sizes[start]);
    // Take layers while this stage is below its share and the later stages keep one layer each.
    while (end + stages_after < n_layers && (stages_after == 0 || done + sizes[end] / 2.0 <= total * (stage + 1) / n_stages))
      done += static_cast<double>(sizes[end++]);
    balance.push_back(end - start);
    start = end;
  }
  return balance;
}

PipelineImpl::PipelineImpl(const torch::nn::Sequential& model, PipelineOptions o)
    : devices_(std::move(o.devices)), balance_(std::move(o.balance)), chunks_(o.chunks) {
  if (devices_.empty()) throw Error("Pipeline: no devices given");
  if (chunks_ < 1) throw Error("Pipeline: chunks must be at least 1, got " + std::to_string(chunks_));
  if (balance_.empty()) balance_ = balance_by_parameters(model, devices_.size());
  if (balance_.size() != devices_.size())
    throw Error("Pipeline: " + std::to_string(balance_.size()) + " stages in balance but " +
                std::to_string(devices_.size()) + " devices");
  const size_t placed = std::accumulate(balance_.begin(), balance_.end(), size_t{0});
  if (placed != model->size() || std::count(balance_.begin(), balance_.end(), size_t{0}) > 0)
    throw Error("Pipeline: balance puts " + std::to_string(placed) + " layers in stages (each at least one), the model has " +
                std::to_string(model->size()));

  const auto layers = named_layers(*model);
  size_t index = 0;
  for (size_t stage = 0; stage < balance_.size(); ++stage) {
    torch::nn::Sequential seq;
    for (size_t i = 0; i < balance_[stage]; ++i, ++index) {
      // Registered here under the Sequential's own names: the state dict stays the model's.
      register_module(layers[index].name, layers[index].module);
      seq->push_back(layers[index].name, layers[index].any);
    }
    seq->to(devices_[stage]);
    stages_.push_back(seq);
  }
}

torch::Tensor PipelineImpl::forward(const torch::Tensor& x) {
  const int64_t chunks = std::min<int64_t>(chunks_, std::max<int64_t>(x.size(0), 1));
  std::vector<torch::Tensor> micro = chunks > 1 ? x.chunk(chunks) : std::vector<torch::Tensor>{x};
  const int64_t n_micro = static_cast<int64_t>(micro.size()), n_stages = static_cast<int64_t>(stages_.size());
  // Tick t: stage s works on micro-batch t - s. Work is only queued here; on GPUs the
  // stages then run at the same time.
  for (int64_t tick = 0; tick < n_micro + n_stages - 1; ++tick)
    for (int64_t s = std::min(tick, n_stages - 1); s >= 0 && tick - s < n_micro; --s) {
      auto& m = micro[tick - s];
      // Asynchronous only into a GPU: a GPU's tensor copied to the CPU so would be read
      // before its copy has landed (nothing on the CPU waits for the GPU's stream).
      m = stages_[s]->forward(m.to(devices_[s], /*non_blocking=*/devices_[s].is_cuda()));
    }
  return n_micro > 1 ? torch::cat(micro) : micro[0];
}

void PipelineImpl::to(torch::Device, torch::Dtype dtype, bool non_blocking) { to(dtype, non_blocking); }
void PipelineImpl::to(torch::Dtype dtype, bool non_blocking) {
  for (auto& stage : stages_) stage->to(dtype, non_blocking);
}
void PipelineImpl::to(torch::Device, bool) {}

}  // namespace fastcpp::distributed
