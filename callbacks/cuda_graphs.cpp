#include "callbacks/cuda_graphs.h"

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <mutex>
#include <sstream>

#if FASTCPP_HAS_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "callbacks/mixup.h"
#include "callbacks/training.h"
#include "core/error.h"
#include "learner/learner.h"

namespace fastcpp {
namespace {

// The events every training step dispatches (the cancel ones run only when eager).
constexpr Event kStepEvents[] = {Event::after_pred,  Event::after_loss, Event::before_backward,
                                 Event::after_backward, Event::before_step, Event::after_step};

// What a recorded step is specialised to: the batch's sizes, strides and dtypes.
std::string shape_key(const torch::Tensor& x, const torch::Tensor& y) {
  std::ostringstream key;
  for (const auto* t : {&x, &y}) key << t->sizes() << t->strides() << t->scalar_type() << ';';
  return key.str();
}

// Which parameters train (FNV-1a over their requires_grad bits): a callback that freezes
// or unfreezes some between batches changes which gradients and updates a step makes.
uint64_t trainable_fingerprint(const Optimizer& opt) {
  uint64_t hash = 14695981039346656037ull;
  for (const auto& group : opt.param_groups())
    for (const auto& param : group.params) hash = (hash ^ (param.requires_grad() ? 1 : 2)) * 1099511628211ull;
  return hash;
}

// What the recorded graphs depend on beyond the batch's shape: the optimizer's and the
// scaler's tensors, and which parameters train.
std::array<uint64_t, 4> state_of(const Learner& learn) {
  return {learn.opt->state_generation(), reinterpret_cast<uintptr_t>(learn.scaler.get()),
          learn.scaler ? learn.scaler->generation() : 0, trainable_fingerprint(*learn.opt)};
}

}  // namespace

struct CudaGraphs::Graph {
#if FASTCPP_HAS_CUDA
  at::cuda::CUDAGraph graph;
#endif
  torch::Tensor x, y, pred, loss;
  std::vector<DeviceCheck::Recorded> checks;  // the loss's checks of its input, posted after each replay
};

CudaGraphs::CudaGraphs(CudaGraphsOptions options) : options_(options) {
  order = 1000;  // last in before_batch: the batch as every other callback left it
  run_valid = false;
  capturable = true;
  if (options.warmup < 1) throw Error("CudaGraphs: warmup must be at least 1, got " + std::to_string(options.warmup));
}

CudaGraphs::~CudaGraphs() = default;

std::string CudaGraphs::fallback_reason(const Learner& learn) {
  if (auto placement = learn.get_cb<DevicePlacement>())
    return placement->method() + " runs its own step across devices, which is not recorded";
  if (learn.get_cb<GradientAccumulation>()) return "GradientAccumulation steps when a count kept on the host says so";
  if (auto mix = learn.get_cb<MixHandler>()) return mix->name() + " draws its mixing weights on the host at each batch";
  if (learn.opt && !learn.opt->has_device_step())
    return learn.opt->name() + " has no step on the device (SGD and Adam have)";
  if (!learn.device.is_cuda()) return "CUDA graphs need a CUDA device, and this learner trains on " + learn.device.str();
  return "";
}

std::optional<std::string> CudaGraphs::host_step_callbacks(const Learner& learn) {
  std::string found;
  for (const auto& cb : learn.cbs()) {
    if (cb->capturable || !cb->run_train || !cb->run) continue;  // the last two: no step events this fit
    std::string events;
    for (const Event event : kStepEvents) {
      const auto own = cb->overrides(event);
      if (!own) return std::nullopt;
      if (*own) events += std::string(events.empty() ? "" : ", ") + event_name(event);
    }
    if (!events.empty()) found += std::string(found.empty() ? "" : "; ") + cb->name() + " (" + events + ")";
  }
  return found;
}

void CudaGraphs::train_eagerly(std::string reason) {
  eager_reason_ = std::move(reason);
  if (said_.insert(eager_reason_).second) learn().logger("to_graphs: training eagerly, as " + eager_reason_);
}

void CudaGraphs::before_fit() {
  seen_.clear();
  graphs_.clear();
  replays_ = 0;
  eager_reason_.clear();
  if (auto reason = fallback_reason(learn()); !reason.empty()) return train_eagerly(reason);
  learn().opt->set_device_step(true);
}

void CudaGraphs::after_fit() {
  graphs_.clear();
  if (learn().opt) learn().opt->set_device_step(false);
}

void CudaGraphs::before_batch() {
  auto& l = learn();
  if (!eager_reason_.empty() || !l.yb.defined()) return;
  // A callback that froze groups or parameters, or loaded a state, changed what the graphs hold.
  const auto state = state_of(l);
  if (state != recorded_state_) {
    graphs_.clear();
    seen_.clear();
    recorded_state_ = state;
  }
  const auto shape = shape_key(l.xb, l.yb);
  if (auto graph = graphs_.find(shape); graph != graphs_.end()) {
    replay(*graph->second);
    throw CancelBatchException();  // the step ran in the graph
  }
  if (++seen_[shape] <= options_.warmup) return;
  const auto on_host = host_step_callbacks(l);
  if (!on_host) return;  // a callback has not seen a whole step yet: another eager one
  if (!on_host->empty())
    return train_eagerly("these callbacks' step events would run only once, when the step is recorded: " + *on_host +
                         " (mark a callback `capturable` if they only queue device work)");
  record(shape);
  throw CancelBatchException();
}

#if FASTCPP_HAS_CUDA

namespace {

// The stream every recording on a device uses, one for the process, as torch.cuda.graph's
// default capture stream: libraries keep state per stream (cuBLAS's workspace), which a
// new stream at each recording would allocate again inside the recording, and keep.
c10::cuda::CUDAStream recording_stream(c10::DeviceIndex device) {
  static std::mutex mutex;
  static std::map<c10::DeviceIndex, c10::cuda::CUDAStream> streams;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = streams.find(device);
  if (it == streams.end())
    it = streams.emplace(device, c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)).first;
  return it->second;
}

}  // namespace

void CudaGraphs::record(const std::string& shape) {
  auto& l = learn();
  auto graph = std::make_unique<Graph>();
  // The graph reads its batch from these and writes its outputs to fixed addresses.
  graph->x = l.xb.clone(at::MemoryFormat::Preserve);
  graph->y = l.yb.clone(at::MemoryFormat::Preserve);
  l.xb = graph->x;
  l.yb = graph->y;
  // Recording needs a stream of its own; it starts after the work queued so far.
  const auto main = c10::cuda::getCurrentCUDAStream(l.device.index());
  const auto side = recording_stream(l.device.index());
  at::cuda::CUDAEvent queued;
  queued.record(main);
  queued.block(side);
  {
    c10::cuda::CUDAStreamGuard on_side(side);
    // Thread-local: the loader's workers may call CUDA meanwhile (pinned memory, copies).
    graph->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    try {
      l.do_one_batch();
    } catch (...) {
      l.opt->skip_next_step_if({});  // a verdict of the abandoned recording
      try {
        graph->graph.capture_end();
      } catch (const c10::Error&) {
      }
      throw;
    }
    graph->graph.capture_end();
  }
  graph->pred = l.pred.detach();  // not its autograd graph, whose nodes name the recording's stream
  graph->loss = l.loss;
  if (const auto& checks = l.loss_func.checks()) graph->checks = checks->take_recorded();
  run(*(graphs_[shape] = std::move(graph)));
}

void CudaGraphs::replay(Graph& graph) {
  auto& l = learn();
  graph.x.copy_(l.xb, /*non_blocking=*/true);
  graph.y.copy_(l.yb, /*non_blocking=*/true);
  run(graph);
}

void CudaGraphs::run(Graph& graph) {
  auto& l = learn();
  l.opt->refresh_device_hypers();
  graph.graph.replay();
  ++replays_;
  for (const auto& check : graph.checks) l.loss_func.checks()->post(check.values, check.message);
  l.pred = graph.pred;
  l.loss = graph.loss.clone();  // the graph's own tensor changes at the next replay
}

#else

void CudaGraphs::record(const std::string&) { throw Error("CudaGraphs: this build of fastcpp has no CUDA"); }
void CudaGraphs::replay(Graph&) { throw Error("CudaGraphs: this build of fastcpp has no CUDA"); }
void CudaGraphs::run(Graph&) { throw Error("CudaGraphs: this build of fastcpp has no CUDA"); }

#endif

void Learner::to_graphs() {
  if (!get_cb<CudaGraphs>()) add_cb(std::make_shared<CudaGraphs>());
}

}  // namespace fastcpp
