// A training run for the multi-process tests: the same data and model (with a
// BatchNorm) trained in one process with batch 8, or in two processes
// (to_distributed, BatchNorm made SyncBatchNorm) with batch 4 each.
//
//   dist_worker single|single_bs4|ddp|ddp_local_bn|unused|single_unused|unused_acc|single_unused_acc|
//               unfreeze|single_unfreeze|unfreeze_acc|single_unfreeze_acc|unused_unfreeze_acc|
//               single_unused_unfreeze_acc|unfreeze_between|single_unfreeze_between|
//               unfreeze_between_acc|single_unfreeze_between_acc|resume|checkpointed|single_acc|ddp_acc|
//               syncbn_single|syncbn|rank0_first|seed_by_rank|failed_save OUT
//
// On the CPU unless FASTCPP_WORKER_DEVICE names a device (cuda:0); FASTCPP_WORKER_BACKEND
// (gloo, nccl; default auto) picks the process group's backend, and with gloo every rank
// shares that one device (two ranks on one GPU). single_bs4 is one process with batch 4 in
// the order a world of 1 gives (the peer of `ddp` with WORLD_SIZE=1).
//
// Writes OUT (OUT.<rank> when distributed): the final parameters (on the CPU), then
// [valid_loss, accuracy], the epoch the run resumed from, the number of gradient
// all-reduces and the final buffers, pickled. ddp_local_bn is ddp without sync_bn;
// unused and single_unused train a model with a parameter it never uses, with Adam. *_acc
// accumulate gradients over 2 batches (unused_acc and single_unused_acc: that model so).
// *unfreeze* start with the first layer (with the unused layer: the first weight) frozen,
// unfreeze it in epoch 1 and freeze the last layer in epoch 2, each between two batches
// (*_acc: inside accumulation windows; *between*: after the batch's loss instead, between its
// forward and its backward).
// `resume` is ddp with a ResumeFromCheckpoint at OUT.ckpt, and rank 1 of the first attempt
// kills itself after epoch 0; `checkpointed` is the same without the kill
// (tests/multinode.sh kills whole hosts). FASTCPP_WORKER_STEP_MS
// adds a pause after each training batch, so that a test can act mid-epoch;
// FASTCPP_WORKER_NCCL_TIMEOUT_S shortens NCCL's watchdog timeout; FASTCPP_WORKER_MODEL=unet
// trains a U-Net on masks instead (its metric: mean IoU), FASTCPP_WORKER_MODEL=retinanet a
// RetinaNet on painted boxes (its metric: COCO's AP50 of
// the detections at any score), FASTCPP_WORKER_MODEL=tied an MLP with a weight tied
// between two layers. syncbn and syncbn_single take a channels-last input where
// FASTCPP_WORKER_CHANNELS_LAST=1.
#include <fastcpp.h>

#include "distributed/channels_last_batchnorm.h"
#include "freeze_mid_fit.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <thread>

using namespace fastcpp;

namespace {

constexpr int64_t kTrain = 40, kValid = 13, kLocalBs = 4;

bool worker_model_is(const char* name) {
  const char* model = std::getenv("FASTCPP_WORKER_MODEL");
  return model && std::string(model) == name;
}
// FASTCPP_WORKER_MODEL=unet: segmentation, a U-Net on 16 px images with masks of 3 classes.
bool unet_worker() { return worker_model_is("unet"); }
// FASTCPP_WORKER_MODEL=retinanet: detection, a RetinaNet on 32 px images with a box of one
// of 3 classes each.
bool retinanet_worker() { return worker_model_is("retinanet"); }

// A linear layer over another's weight (tied weights): the model's parameters() lists that
// tensor twice.
struct TiedLinearImpl : torch::nn::Module {
  explicit TiedLinearImpl(torch::Tensor shared) { weight = register_parameter("weight", std::move(shared)); }
  torch::Tensor forward(const torch::Tensor& x) { return torch::nn::functional::linear(x, weight); }
  torch::Tensor weight;
};
TORCH_MODULE(TiedLinear);

// FASTCPP_WORKER_MODEL=tied: an MLP whose third layer reuses the second one's weight.
Model tied_model() {
  torch::nn::Linear hidden(8, 8);
  return Model(torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(192, 8), torch::nn::ReLU(), hidden,
                                     torch::nn::ReLU(), TiedLinear(hidden->weight), torch::nn::ReLU(),
                                     torch::nn::Linear(8, 3)));
}

// RetinaNet's detections at any score: after 3 short epochs none scores 0.05 yet, and an
// AP50 of 0 on both sides would not show a gathered validation going wrong.
std::vector<vision::Detections> every_detection(const torch::Tensor& output) {
  return vision::retinanet_detections(output, {.score_threshold = 0.0});
}

std::shared_ptr<TensorDataset> data(int64_t n, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  if (unet_worker())
    return std::make_shared<TensorDataset>(torch::randn({n, 3, 16, 16}, gen), torch::randint(3, {n, 16, 16}, gen, torch::kLong));
  if (retinanet_worker()) {
    // whole-pixel boxes, painted bright in their class's channel, so that AP50 rises above 0
    const auto corner = torch::randint(0, 16, {n, 1, 2}, gen), size = torch::randint(8, 17, {n, 1, 2}, gen);
    const auto label = torch::randint(3, {n, 1, 1}, gen);
    auto images = torch::randn({n, 3, 32, 32}, gen);
    for (int64_t i = 0; i < n; ++i) {
      const auto x1 = corner[i][0][0].item<int64_t>(), y1 = corner[i][0][1].item<int64_t>();
      images[i][label[i][0][0].item<int64_t>()].narrow(0, y1, size[i][0][1].item<int64_t>())
          .narrow(1, x1, size[i][0][0].item<int64_t>()).fill_(3.0);
    }
    return std::make_shared<TensorDataset>(images, torch::cat({corner, corner + size, label}, 2).to(torch::kFloat));
  }
  return std::make_shared<TensorDataset>(torch::randn({n, 3, 8, 8}, gen), torch::randint(3, {n}, gen, torch::kLong));
}

// The RetinaNet's validation images, of which image 4 has a second box (its first, a pixel
// further): the batches, and the two ranks' batches, differ in their most boxes.
class OneWithTwoBoxes : public Dataset {
 public:
  explicit OneWithTwoBoxes(std::shared_ptr<TensorDataset> items) : items_(std::move(items)) {}
  using Dataset::get;
  size_t size() const override { return items_->size(); }
  Example get(size_t i) const override {
    auto item = items_->get(i);
    if (i == 4) item.y = torch::cat({item.y, item.y + torch::tensor({1.0f, 1.0f, 1.0f, 1.0f, 0.0f})});
    return item;
  }
  Batch collate_items(const std::vector<Example>& items) const override {
    std::vector<torch::Tensor> images;
    std::vector<vision::ImageBoxes> boxes;
    for (const auto& item : items) {
      images.push_back(item.x);
      boxes.push_back({item.y.narrow(1, 0, 4), item.y.select(1, 4).to(torch::kLong)});
    }
    return {torch::stack(images), vision::box_targets(boxes)};
  }

 private:
  std::shared_ptr<TensorDataset> items_;
};

// The single-process order that matches two ranks: each batch of 8 is rank 0's
// batch of 4 followed by rank 1's.
class TwoRankOrder : public Sampler {
 public:
  std::vector<int64_t> indices(int64_t epoch) const override {
    const auto r0 = DistributedSampler(kTrain, 0, 2, true, 3).indices(epoch);
    const auto r1 = DistributedSampler(kTrain, 1, 2, true, 3).indices(epoch);
    std::vector<int64_t> order;
    for (size_t b = 0; b * kLocalBs < r0.size(); ++b)
      for (const auto* rank : {&r0, &r1})
        for (size_t j = b * kLocalBs; j < std::min(rank->size(), (b + 1) * kLocalBs); ++j) order.push_back((*rank)[j]);
    return order;
  }
  size_t size() const override { return kTrain; }
};

struct WithUnusedImpl : torch::nn::Module {
  WithUnusedImpl() {
    body = register_module("body", torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(192, 3)));
    unused = register_module("unused", torch::nn::Linear(3, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return body->forward(x); }
  torch::nn::Sequential body;
  torch::nn::Linear unused{nullptr};
};
TORCH_MODULE(WithUnused);

// Kills this process after epoch 0 (rank 1, first attempt): a worker dying mid-run.
struct CrashOnce : Callback {
  CrashOnce() { order = 100; }
  void after_epoch() override {
    const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
    if (learn().epoch == 0 && learn().rank == 1 && restart && std::string(restart) == "0") std::raise(SIGKILL);
  }
};

// A test set: another dataset's items without their targets.
struct WithoutTargets : Dataset {
  explicit WithoutTargets(std::shared_ptr<const Dataset> items) : items(std::move(items)) {}
  size_t size() const override { return items->size(); }
  Example get(size_t i) const override { return {items->get(i).x, torch::Tensor()}; }
  Batch get_batch(const std::vector<int64_t>& indices, uint64_t seed) const override {
    auto batch = items->get_batch(indices, seed);
    batch.y = torch::Tensor();
    return batch;
  }
  std::shared_ptr<const Dataset> items;
};

// In the fit's last epoch: validates a loader of the caller's (not shared out: every item on
// every rank), whose batches must not be gathered as if they were a rank's share, and takes
// the predictions of a test set shared out over the ranks (no targets to gather).
struct OtherLoaders : Callback {
  OtherLoaders() { order = 100; }
  void after_epoch() override {
    auto& l = learn();
    if (l.epoch != l.n_epoch - 1) return;
    DataLoader own(l.dls.valid.dataset_ptr(), {.bs = 5});
    own.to(l.device);
    values = l.validate(&own);
    DataLoader test_set(std::make_shared<WithoutTargets>(l.dls.valid.dataset_ptr()), {.bs = 4});
    if (const auto* shard = dynamic_cast<const DistributedSampler*>(&l.dls.valid.sampler()))
      test_set.set_sampler(std::make_shared<DistributedSampler>(test_set.sampler_ptr(), shard->rank(), shard->world_size()));
    test_set.to(l.device);
    test_preds = l.get_preds(&test_set).preds;
  }
  std::vector<double> values;
  torch::Tensor test_preds;
};

// Sleeps after each training batch.
struct SlowSteps : Callback {
  explicit SlowSteps(int ms) : ms(ms) {}
  void after_batch() override {
    if (learn().training) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
  int ms;
};

torch::Device worker_device() {
  const char* device = std::getenv("FASTCPP_WORKER_DEVICE");
  return device ? torch::Device(device) : torch::Device(torch::kCPU);
}

std::string worker_backend() {
  const char* backend = std::getenv("FASTCPP_WORKER_BACKEND");
  return backend ? backend : "auto";
}

}  // namespace

// SyncBatchNorm on shards of 3 and 5 samples against BatchNorm on all 8: writes
// [y, x.grad, weight.grad (summed over ranks), bias.grad (summed), running_mean, running_var].
int batchnorm_run(bool distributed, const std::string& out) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto device = worker_device();
  const char* channels_last = std::getenv("FASTCPP_WORKER_CHANNELS_LAST");
  const auto format = channels_last && std::string(channels_last) == "1" ? at::MemoryFormat::ChannelsLast
                                                                         : at::MemoryFormat::Contiguous;
  auto x_all = (torch::randn({8, 4, 3, 3}, gen) * 2 + 1).to(device).contiguous(format);
  auto w_out = torch::randn({8, 4, 3, 3}, gen).to(device);
  int64_t first = 0, count = 8;
  std::shared_ptr<distributed::Communicator> comm;
  torch::Tensor y, weight, bias, running_mean, running_var;
  if (distributed) {
    const auto env = distributed::read_env();
    comm = std::make_shared<distributed::Communicator>(env, distributed::ProcessGroupOptions{.backend = worker_backend(), .device = device});
    first = env.rank == 0 ? 0 : 3;
    count = env.rank == 0 ? 3 : 5;
  }
  auto x = x_all.narrow(0, first, count).clone().requires_grad_(true);
  bool kernels = false;  // whether the synced layer took the channels-last kernels' path
  if (distributed) {
    distributed::SyncBatchNorm bn(4);
    bn->to(device);
    bn->set_communicator(comm);
    bn->weight.data().copy_(torch::linspace(0.5, 2, 4));
    kernels = distributed::channels_last::kernels_apply(*bn, x);
    y = bn(x);
    (y * w_out.narrow(0, first, count)).sum().backward();
    weight = bn->weight.grad().clone(), bias = bn->bias.grad().clone();
    comm->all_reduce_sum(weight);
    comm->all_reduce_sum(bias);
    running_mean = bn->running_mean, running_var = bn->running_var;
  } else {
    torch::nn::BatchNorm2d bn(4);
    bn->to(device);
    bn->weight.data().copy_(torch::linspace(0.5, 2, 4));
    y = bn(x);
    (y * w_out).sum().backward();
    weight = bn->weight.grad(), bias = bn->bias.grad();
    running_mean = bn->running_mean, running_var = bn->running_var;
  }
  c10::List<torch::Tensor> result;
  for (const auto& t : {y.detach(), x.grad(), weight, bias, running_mean, running_var}) result.push_back(t.cpu());
  result.push_back(torch::tensor({kernels ? 1 : 0, y.is_contiguous(format) ? 1 : 0}));
  const auto bytes = torch::pickle_save(result);
  std::ofstream(out, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::string mode = argv[1];
  const char* rank = std::getenv("RANK");
  const std::string out = std::string(argv[2]) + (rank ? std::string(".") + rank : "");
  torch::set_num_threads(1);
  torch::manual_seed(0);
  // TF32 convolutions (cuDNN's default) round differently once the synced BatchNorm's
  // last bits differ from BatchNorm's: full fp32, so 2 ranks can equal 1 process.
  if (worker_device().is_cuda()) at::globalContext().setAllowTF32CuDNN(false);
  try {
    if (mode == "syncbn" || mode == "syncbn_single") return batchnorm_run(mode == "syncbn", out);
    if (mode == "rank0_first") {  // rank 0 (slow on purpose) appends its rank before the others do
      // Rank 0 takes longer than the collectives may: the barrier has a timeout of its own.
      distributed::rank0_first(
          [&] {
            if (std::string(rank) == "0") std::this_thread::sleep_for(std::chrono::milliseconds(3500));
            std::ofstream(argv[2], std::ios::app) << rank << "\n";
          },
          {.timeout = std::chrono::seconds(2)});
      return 0;
    }
    const auto has = [&](const char* part) { return mode.find(part) != std::string::npos; };
    const bool single = mode.rfind("single", 0) == 0, with_unused = has("unused"), accumulate = has("_acc");
    const bool two_rank_batches = single && mode != "single_bs4";
    SamplerPtr order;  // none: the loader's own shuffle, which to_distributed replaces
    if (mode == "single_bs4") order = std::make_shared<DistributedSampler>(kTrain, 0, 1, true, 3);
    if (two_rank_batches) order = std::make_shared<TwoRankOrder>();
    // seed_by_rank: each rank shuffles with a seed of its own, which to_distributed refuses.
    const uint64_t seed = mode == "seed_by_rank" ? 3 + std::strtoull(rank, nullptr, 10) : 3;
    DataLoaders dls{DataLoader(data(kTrain, 1), {.bs = two_rank_batches ? 2 * kLocalBs : kLocalBs, .shuffle = true,
                                                 .seed = seed, .sampler = order}),
                    DataLoader(retinanet_worker() ? DatasetPtr(std::make_shared<OneWithTwoBoxes>(data(kValid, 2)))
                                                  : data(kValid, 2),
                               {.bs = 4})};
    auto conv = [](int64_t in, int64_t out, int64_t stride) {
      return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1));
    };
    Model model = unet_worker() ? Model(vision::DynamicUnet(vision::unet_encoder(vision::resnet18, {.width = 8}),
                                                            {.n_out = 3, .img_size = {16, 16}}))
                  : retinanet_worker()
                      ? Model(vision::retinanet({.num_classes = 3, .arch = vision::resnet18, .backbone = {.width = 8},
                                                 .fpn_channels = 16}))
                  : worker_model_is("tied") ? tied_model()
                  : with_unused ? Model(WithUnused())
                                   : Model(torch::nn::Sequential(conv(3, 8, 1), torch::nn::BatchNorm2d(8),
                                                                 torch::nn::ReLU(), conv(8, 8, 2),
                                                                 torch::nn::ReLU(), torch::nn::AdaptiveAvgPool2d(1),
                                                                 torch::nn::Flatten(), torch::nn::Linear(8, 3)));
    const auto loss = unet_worker() ? vision::CrossEntropyLossFlat() : retinanet_worker() ? vision::retinanet_loss() : CrossEntropyLoss();
    const auto metric = unet_worker()        ? vision::jaccard_coeff_multi()
                        : retinanet_worker() ? vision::metrics::coco_map50(every_detection)
                                             : metrics::accuracy();
    // The validation loader's order set on it (its own order): to_distributed shares out that one, then puts it back.
    const SamplerPtr valid_order = std::make_shared<SequentialSampler>(dls.valid.n_items());
    dls.valid.set_sampler(valid_order);
    Learner learn(dls, model, loss, {metric},
                  {.opt_func = with_unused ? adam() : sgd({.mom = 0.9}), .device = worker_device(), .progress = false});
    learn.logger = [](const std::string&) {};
    if (!single) {
      distributed::DistributedOptions options;
      options.process_group.backend = worker_backend();
      if (const char* seconds = std::getenv("FASTCPP_WORKER_NCCL_TIMEOUT_S"))
        options.process_group.nccl_timeout = std::chrono::seconds(std::atoi(seconds));
      if (worker_backend() == "gloo" && learn.device.is_cuda()) options.device = learn.device;  // ranks share it
      options.sync_bn = mode != "ddp_local_bn";
      // A bucket per parameter: the tied weight's gradient reduced while backward goes on.
      if (worker_model_is("tied")) options.reducer = {.bucket_bytes = 1, .first_bucket_bytes = 1};
      learn.to_distributed(options);
    }
    if (accumulate) learn.add_cb(GradientAccumulation(2 * (two_rank_batches ? 2 : 1) * kLocalBs));
    std::shared_ptr<ResumeFromCheckpoint> resume;
    // With the unused layer, the used layer's bias keeps training: the loss needs a gradient.
    if (has("unfreeze")) learn.add_cb(testing::FreezeMidFit({1, 2}, {2, 1}, with_unused ? 1 : 2, has("between")));
    if (mode == "resume" || mode == "checkpointed")
      resume = learn.add_cb(ResumeFromCheckpoint(std::string(argv[2]) + ".ckpt"));
    if (mode == "resume") learn.add_cb(CrashOnce());
    // failed_save: a SaveModel into OUT.file/, where a file stands: rank 0's first save fails.
    if (mode == "failed_save")
      learn.add_cb(SaveModel({.model_dir = std::string(argv[2]) + ".file", .every_epoch = 1}));
    if (const char* ms = std::getenv("FASTCPP_WORKER_STEP_MS")) learn.add_cb(SlowSteps(std::atoi(ms)));
    // The U-Net at 0.05 on random masks turns the two sides' rounding (BatchNorm's sums in
    // another order) into weight differences of 4e-4; at 0.005 they stay within 1e-5.
    const auto other_loaders = learn.add_cb(OtherLoaders());
    learn.fit(3, unet_worker() || retinanet_worker() ? 0.005 : 0.05);
    if (learn.dls.valid.sampler_ptr() != valid_order) throw Error("the validation loader's sampler was not put back");
    const auto last_epoch = learn.recorder->values.back();  // validated within the fit: gathered from the ranks
    const auto valid = learn.validate();

    c10::List<torch::Tensor> params;
    for (const auto& p : learn.model.module().parameters()) params.push_back(p.detach().cpu().clone());
    c10::impl::GenericList result(c10::AnyType::get());
    result.push_back(params);
    result.push_back(c10::List<double>(valid));
    result.push_back(static_cast<int64_t>(resume ? resume->resumed_from() : 0));
    const auto trainer = learn.get_cb<distributed::DistributedTrainer>();
    result.push_back(static_cast<int64_t>(trainer ? trainer->reductions() : 0));
    c10::List<torch::Tensor> buffers;
    for (const auto& b : learn.model.module().buffers()) buffers.push_back(b.detach().cpu().clone());
    result.push_back(buffers);
    result.push_back(c10::List<double>(last_epoch));
    result.push_back(c10::List<double>(other_loaders->values));
    result.push_back(other_loaders->test_preds.cpu());
    const auto bytes = torch::pickle_save(result);
    std::ofstream(out, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  } catch (const std::exception& e) {
    const auto line = "dist_worker " + mode + ": " + e.what() + "\n";
    std::fputs(line.c_str(), stderr);  // one write: ranks share the log
    return 1;
  }
}
