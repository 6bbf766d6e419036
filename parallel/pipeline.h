#pragma once
// Model parallelism for models that do not fit one device: a Sequential split into
// stages, stage i on devices[i], activations moved from one to the next, optionally
// with micro-batch pipelining (GPipe's fill-and-drain schedule: the batch is cut into
// `chunks`, and at each tick every stage works on a different micro-batch, so that
// devices, which run asynchronously, overlap; backward overlaps likewise).
//
//   auto net = distributed::pipeline(model, {.devices = {torch::Device("cuda:0"), torch::Device("cuda:1")}, .chunks = 4});
//   Learner learn(dls, net, CrossEntropyLoss(), {}, {.device = net->output_device()});
//
// Parameters keep the Sequential's names, so checkpoints move between a pipelined and
// a plain model. The Learner's device is where the outputs land (the last stage's):
// the targets go there, and the pipeline moves inputs to the first stage itself. The
// stages stay where they are put: to(device) leaves them (to(dtype) converts them).
// BatchNorm in a pipelined model sees micro-batches, as in GPipe. A Learner given no
// device refuses a model split across devices, naming them; so does to_distributed
// (its reducer holds one device's gradients: one process per pipeline is not there yet).
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>

#include <vector>

namespace fastcpp::distributed {

struct PipelineOptions {
  std::vector<torch::Device> devices;  // one per stage
  std::vector<size_t> balance;         // layers per stage; default: about equal parameter counts
  int64_t chunks = 1;                  // micro-batches per batch (1: no pipelining)
};

class PipelineImpl : public torch::nn::Module {
 public:
  PipelineImpl(const torch::nn::Sequential& model, PipelineOptions options);
  torch::Tensor forward(const torch::Tensor& x);

  // Stages stay on their devices.
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Device device, bool non_blocking = false) override;

  const std::vector<torch::nn::Sequential>& stages() const { return stages_; }
  const std::vector<size_t>& balance() const { return balance_; }
  torch::Device output_device() const { return devices_.back(); }

 private:
  std::vector<torch::nn::Sequential> stages_;
  std::vector<torch::Device> devices_;
  std::vector<size_t> balance_;
  int64_t chunks_;
};
TORCH_MODULE(Pipeline);

// Pipeline(model, options), taking the options as a braced list.
inline Pipeline pipeline(const torch::nn::Sequential& model, PipelineOptions options) {
  return Pipeline(model, std::move(options));
}

// Layers per stage so that each of `n_stages` holds about the same number of parameters.
std::vector<size_t> balance_by_parameters(const torch::nn::Sequential& model, size_t n_stages);

}  // namespace fastcpp::distributed
