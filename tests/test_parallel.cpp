// to_parallel on the CPU: replicas on {cpu, cpu} and {cpu, cpu, cpu} train exactly as
// one device (weights and BatchNorm statistics), with uneven and tiny batches, gradient
// accumulation, bf16 autocast in the replica threads, checkpoints of the plain model,
// and clear errors. The same on CUDA devices is in the gpu suite.
#include <atomic>

#include "channels_last_batchnorm_check.h"
#include "freeze_mid_fit.h"
#include "helpers.h"
#include "operator_count.h"
#include "parallel/replica_grads.h"
#include "trained_state.h"

#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

using namespace fastcpp;
using namespace fastcpp::testing;

struct NotCloneableImpl : torch::nn::Module {
  NotCloneableImpl() { linear = register_module("linear", torch::nn::Linear(4, 3)); }
  torch::Tensor forward(const torch::Tensor& x) { return linear(x); }
  torch::nn::Linear linear{nullptr};
};
TORCH_MODULE(NotCloneable);

// Records which OS thread runs each copy's forward; its clones (the replicas) share the record.
struct ThreadProbeImpl : torch::nn::Cloneable<ThreadProbeImpl> {
  struct Seen {
    std::mutex mutex;
    int copies = 0;
    std::map<int, std::vector<std::thread::id>> threads;  // per copy, one entry per forward
  };
  ThreadProbeImpl() : seen(std::make_shared<Seen>()) { reset(); }
  // clone() calls it on each copy: a number of its own (a later copy may reuse a freed
  // copy's address).
  void reset() override {
    std::lock_guard<std::mutex> lock(seen->mutex);
    copy = seen->copies++;
  }
  torch::Tensor forward(const torch::Tensor& x) {
    std::lock_guard<std::mutex> lock(seen->mutex);
    seen->threads[copy].push_back(std::this_thread::get_id());
    return x;
  }
  std::shared_ptr<Seen> seen;
  int copy = 0;
};
TORCH_MODULE(ThreadProbe);

// Passes its input through, but its copies (the replicas beyond the first) throw.
struct BrokenCopiesImpl : torch::nn::Cloneable<BrokenCopiesImpl> {
  BrokenCopiesImpl() : copies(std::make_shared<std::atomic<int>>(0)) { reset(); }
  void reset() override { copy = (*copies)++; }
  torch::Tensor forward(const torch::Tensor& x) {
    if (copy != 0) throw Error("replica broke");
    return x;
  }
  std::shared_ptr<std::atomic<int>> copies;
  int copy = 0;
};
TORCH_MODULE(BrokenCopies);

// Two linear layers and a third over the first one's weight (tied, as a language model's
// embedding and output). Its copies come out untied: clone() gives the copy's encoder a
// weight of its own after reset() tied it.
struct TiedNetImpl : torch::nn::Cloneable<TiedNetImpl> {
  TiedNetImpl() { reset(); }
  void reset() override {
    encoder = register_module("encoder", torch::nn::Linear(6, 6));
    middle = register_module("middle", torch::nn::Linear(6, 6));
    decoder_weight = register_parameter("decoder_weight", encoder->weight);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::nn::functional::linear(torch::tanh(middle(torch::tanh(encoder(x)))), decoder_weight);
  }
  torch::nn::Linear encoder{nullptr}, middle{nullptr};
  torch::Tensor decoder_weight;
};
TORCH_MODULE(TiedNet);

namespace {

const std::vector<torch::Device> kTwoCpus{torch::kCPU, torch::kCPU}, kThreeCpus{torch::kCPU, torch::kCPU, torch::kCPU};

torch::nn::Sequential bn_model() {
  torch::manual_seed(0);
  // No conv bias before BatchNorm: its true gradient is zero, and Adam would blow the
  // rounding noise left in it up to full steps of either sign.
  auto conv = [](int64_t in, int64_t out, int64_t stride) {
    return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
  };
  return torch::nn::Sequential(conv(3, 8, 1), torch::nn::BatchNorm2d(8), torch::nn::ReLU(), conv(8, 8, 2),
                               torch::nn::BatchNorm2d(8), torch::nn::ReLU(), torch::nn::AdaptiveAvgPool2d(1),
                               torch::nn::Flatten(), torch::nn::Linear(8, 3));
}

// n_train images of 3x8x8 in batches of 8: 41 leaves a last batch of one item.
DataLoaders image_dls(int64_t n_train = 41) {
  auto make = [](int64_t n, uint64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    return std::make_shared<TensorDataset>(torch::randn({n, 3, 8, 8}, gen), torch::randint(3, {n}, gen, torch::kLong));
  };
  return {DataLoader(make(n_train, 1), {.bs = 8, .shuffle = true, .seed = 3}), DataLoader(make(13, 2), {.bs = 8})};
}

struct Run {
  std::vector<torch::Tensor> params, buffers;
  std::vector<double> valid;
  std::vector<int> replicas_per_batch;
};

// Records how many replicas each training forward used.
struct ReplicaProbe : Callback {
  void after_pred() override {
    if (!learn().training) return;
    auto parallel = learn().get_cb<distributed::DataParallel>();
    replicas.push_back(parallel ? parallel->last_replicas() : 1);
  }
  std::vector<int> replicas;
};

// 3 epochs on `device`, or on `devices` with to_parallel when there are any; `setup`
// picks precision and memory format before to_parallel.
Run train(const std::vector<torch::Device>& devices, OptFunc opt_func, std::vector<CallbackPtr> cbs = {},
          torch::Device device = torch::kCPU, const std::function<void(Learner&)>& setup = {}) {
  auto options = quiet({.opt_func = std::move(opt_func), .cbs = std::move(cbs)});
  options.device = device;
  Learner learn(image_dls(), bn_model(), CrossEntropyLoss(), {metrics::accuracy()}, options);
  silence(learn);
  if (setup) setup(learn);
  auto probe = learn.add_cb(ReplicaProbe());
  if (!devices.empty()) learn.to_parallel(devices);
  learn.fit(3, 0.05);
  Run run;
  for (const auto& p : learn.model.module().parameters()) run.params.push_back(p.detach().cpu().clone());
  for (const auto& b : learn.model.module().buffers()) run.buffers.push_back(b.detach().cpu().clone());
  run.valid = learn.validate();
  run.replicas_per_batch = probe->replicas;
  return run;
}

void check_equal(const Run& parallel, const Run& single, double tolerance = 1e-5) {
  REQUIRE(parallel.params.size() == single.params.size());
  for (size_t i = 0; i < single.params.size(); ++i) {
    INFO("parameter " << i << ", largest difference " << (parallel.params[i] - single.params[i]).abs().max().item<double>());
    CHECK(torch::allclose(parallel.params[i], single.params[i], tolerance, tolerance));
  }
  REQUIRE(parallel.buffers.size() == single.buffers.size());
  for (size_t i = 0; i < single.buffers.size(); ++i) {  // running mean and var, batches tracked
    INFO("buffer " << i << ": " << parallel.buffers[i].sum().item<double>() << " against "
                   << single.buffers[i].sum().item<double>());
    if (single.buffers[i].is_floating_point())
      CHECK(torch::allclose(parallel.buffers[i], single.buffers[i], tolerance, tolerance));
    else
      CHECK(torch::equal(parallel.buffers[i], single.buffers[i]));  // one global batch counted once
  }
  CHECK(parallel.valid[0] == doctest::Approx(single.valid[0]).epsilon(tolerance));
  // In half precision an item on the decision boundary may go either way; the loss is still checked.
  if (tolerance <= 1e-4) CHECK(parallel.valid[1] == single.valid[1]);
}

// A small U-Net (ResNet-18 encoder of width 8) on 3x32x32 images with masks of 3
// classes: 21 training images in batches of 8 leave a last batch of 5.
DataLoaders unet_dls() {
  auto make = [](int64_t n, uint64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    return std::make_shared<TensorDataset>(torch::randn({n, 3, 32, 32}, gen),
                                           torch::randint(3, {n, 32, 32}, gen, torch::kLong));
  };
  return {DataLoader(make(21, 1), {.bs = 8, .shuffle = true, .seed = 3}), DataLoader(make(6, 2), {.bs = 4})};
}

TrainedState train_unet(const std::vector<torch::Device>& devices, const OptFunc& opt_func, torch::Device device = torch::kCPU,
                        const std::function<void(Learner&)>& setup = {}) {
  const auto dls = unet_dls();
  torch::manual_seed(0);
  auto unet = vision::DynamicUnet(vision::unet_encoder(vision::resnet18, {.width = 8}), {.n_out = 3, .img_size = {32, 32}});
  Loss pixel_ce([](const torch::Tensor& pred, const torch::Tensor& target) {
    return torch::nn::functional::cross_entropy(pred, target);
  });
  auto options = quiet({.opt_func = opt_func});
  options.device = device;
  Learner learn(dls, unet, pixel_ce, {}, options);
  silence(learn);
  if (setup) setup(learn);
  if (!devices.empty()) learn.to_parallel(devices);
  learn.fit_one_cycle(2, 1e-3);
  return trained_state_of(learn);
}

// unet_learner's fine_tune: an epoch with the encoder frozen, then one with everything.
TrainedState fine_tune_unet(const std::vector<torch::Device>& devices) {
  torch::manual_seed(0);
  auto learn = vision::unet_learner(unet_dls(), vision::resnet18, {}, {.n_out = 3, .width = 8},
                                    quiet({.opt_func = sgd({.mom = 0.9})}));
  silence(learn);
  if (!devices.empty()) learn.to_parallel(devices);
  learn.fine_tune(1, {.base_lr = 1e-3});
  return trained_state_of(learn);
}

// The operators of the first training forward under to_parallel on `devices`, by thread,
// for a model with one BatchNorm layer, batches of 8; `setup` as train's.
OperatorCountByThread::Counts first_forward_operators(const std::vector<torch::Device>& devices,
                                                      const std::function<void(Learner&)>& setup = {}) {
  struct FirstForward : Callback {
    void before_batch() override {
      if (learn().training && seen.empty()) count.start();
    }
    void after_pred() override {
      if (learn().training && seen.empty()) seen = count.stop();
    }
    OperatorCountByThread count;
    OperatorCountByThread::Counts seen;
  };
  torch::manual_seed(0);
  auto model = torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3).padding(1).bias(false)),
                                     torch::nn::BatchNorm2d(4), torch::nn::ReLU(), torch::nn::AdaptiveAvgPool2d(1),
                                     torch::nn::Flatten(), torch::nn::Linear(4, 3));
  auto options = quiet();
  options.device = devices.front();
  Learner learn(image_dls(48), model, CrossEntropyLoss(), {}, options);
  silence(learn);
  if (setup) setup(learn);
  auto first = std::make_shared<FirstForward>();
  learn.add_cb(first);
  learn.to_parallel(devices);
  learn.fit(1, 0.05);
  return first->seen;
}

}  // namespace

TEST_SUITE("parallel") {
  TEST_CASE("a U-Net trains on 2 and 3 CPU replicas as on one device: every weight and BatchNorm buffer, the loss") {
    // fastai's DynamicUnet keeps its skips in hooks on the module, which replicas overwrite;
    // ours passes them through forward. The replicas add up BatchNorm's sums in another
    // order than one device does: with SGD the weights agree to 1e-5; Adam divides each
    // step by the gradient's own size, so that rounding becomes steps of up to ~4e-4
    // (1e-3 here). The running statistics sum the differences of every layer below them
    // (the variance after the encoder: relatively 2-5e-3 with Adam on 16 cores, whose
    // sums split otherwise than on 2): they get ten times the weights' tolerance.
    const std::vector<std::tuple<std::string, OptFunc, double>> optimizers{{"sgd", sgd({.mom = 0.9}), 1e-5},
                                                                            {"adam", adam(), 1e-3}};
    for (const auto& [name, opt_func, tolerance] : optimizers) {
      const auto single = train_unet({}, opt_func);
      for (const auto& devices : {kTwoCpus, kThreeCpus}) {
        CAPTURE(name);
        CAPTURE(devices.size());
        const auto parallel = train_unet(devices, opt_func);
        check_trained_alike(parallel, single, tolerance);
      }
    }
  }

  TEST_CASE("a channels-last U-Net (its 2x2 convolutions one matrix product each) trains with Adam on 2 and 3 CPU "
            "replicas as on one device") {
    // A matrix product rounds a row otherwise for another number of rows (MKL's GEMM), where
    // oneDNN's convolution does not: the replicas' half batches then differ from the whole one
    // in more than the order of BatchNorm's sums. Adam's tolerance still holds.
    const auto setup = [](Learner& l) { l.to_channels_last(); };
    const auto single = train_unet({}, adam(), torch::kCPU, setup);
    for (const auto& devices : {kTwoCpus, kThreeCpus}) {
      CAPTURE(devices.size());
      check_trained_alike(train_unet(devices, adam(), torch::kCPU, setup), single, 1e-3);
    }
  }

  TEST_CASE("unet_learner's fine_tune (frozen, then unfrozen) on 2 CPU replicas ends as on one device") {
    const auto single = fine_tune_unet({}), parallel = fine_tune_unet(kTwoCpus);
    check_trained_alike(parallel, single, 1e-5);
  }

  TEST_CASE("a U-Net in bf16 autocast and channels-last on 2 CPU replicas ends as on one CPU in the same setting") {
    const auto setup = [](Learner& l) {
      l.to_bf16();
      l.to_channels_last();
    };
    const double tolerance = 2e-2;  // bf16 rounds half a batch otherwise than a whole one
    const auto single = train_unet({}, sgd({.mom = 0.9}), torch::kCPU, setup);
    const auto parallel = train_unet(kTwoCpus, sgd({.mom = 0.9}), torch::kCPU, setup);
    check_trained_alike(parallel, single, tolerance);
    CHECK(std::isfinite(single.valid_loss));
  }

  TEST_CASE("2 and 3 CPU replicas end with the weights and BatchNorm statistics of one device, SGD and Adam") {
    for (const auto& [name, opt_func] : std::vector<std::pair<std::string, OptFunc>>{{"sgd", sgd({.mom = 0.9})}, {"adam", adam()}}) {
      const auto single = train({}, opt_func);
      for (const auto& devices : {kTwoCpus, kThreeCpus}) {
        CAPTURE(name);
        CAPTURE(devices.size());
        const auto parallel = train(devices, opt_func);
        check_equal(parallel, single);
        // 41 items in batches of 8: five full batches over every replica, then one item on one
        const std::vector<int> per_epoch{static_cast<int>(devices.size()), static_cast<int>(devices.size()),
                                         static_cast<int>(devices.size()), static_cast<int>(devices.size()),
                                         static_cast<int>(devices.size()), 1};
        std::vector<int> expected;
        for (int epoch = 0; epoch < 3; ++epoch) expected.insert(expected.end(), per_epoch.begin(), per_epoch.end());
        CHECK(parallel.replicas_per_batch == expected);
      }
    }
  }

  TEST_CASE("each replica runs on one thread of its own from batch to batch and fit to fit; replica 0 on the caller's") {
    torch::manual_seed(0);
    ThreadProbe probe;
    auto model = torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3).padding(1).bias(false)),
                                       torch::nn::BatchNorm2d(4), probe, torch::nn::AdaptiveAvgPool2d(1),
                                       torch::nn::Flatten(), torch::nn::Linear(4, 3));
    Learner learn(image_dls(48), model, CrossEntropyLoss(), {}, quiet());
    silence(learn);
    learn.to_parallel(kThreeCpus);
    learn.fit(2, 0.05);
    learn.fit(1, 0.05);
    // The model's own probe, and the two copies each fit makes of it.
    const auto& threads = probe->seen->threads;
    REQUIRE(threads.size() == 5);
    std::set<std::thread::id> distinct;
    for (const auto& [copy, ids] : threads) {
      CAPTURE(ids.size());
      CHECK(std::set<std::thread::id>(ids.begin(), ids.end()).size() == 1);  // one thread per copy
      distinct.insert(ids.front());
    }
    CHECK(distinct.size() == 3);  // the caller's and two workers, the same in both fits
    const auto& own = threads.at(probe->copy);
    CHECK(own.size() == 3 * (6 + 2));  // 3 epochs of 6 training and 2 validation batches
    CHECK(own.front() == std::this_thread::get_id());
  }

  TEST_CASE("a replica's own error is the one reported, not the synced BatchNorm's 'another replica failed' it causes") {
    // Replica 0 waits at the BatchNorm for the others, which throw before they get there.
    auto model = torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3).padding(1).bias(false)),
                                       BrokenCopies(), torch::nn::BatchNorm2d(4), torch::nn::AdaptiveAvgPool2d(1),
                                       torch::nn::Flatten(), torch::nn::Linear(4, 3));
    Learner learn(image_dls(48), model, CrossEntropyLoss(), {}, quiet());
    silence(learn);
    learn.to_parallel(kThreeCpus);
    const auto message = error_of([&] { learn.fit(1, 0.05); });
    CHECK(message.rfind("replica broke", 0) == 0);
  }

  TEST_CASE("each replica computes its BatchNorm statistics and normalizes on its own thread; the meeting only combines") {
    const auto counts = first_forward_operators(kTwoCpus);
    using Count = OperatorCountByThread;
    // The statistics (their count beside the sums) and the normalization, once on each
    // replica's thread; the combining once, on one of them.
    CHECK(Count::per_thread(counts, "aten::full") == std::vector<int>{1, 1});
    CHECK(Count::per_thread(counts, "aten::addcmul") == std::vector<int>{1, 1});  // x_hat * weight + bias
    CHECK(Count::per_thread(counts, "aten::rsqrt") == std::vector<int>{1});  // the whole batch's 1/std
  }

  TEST_CASE("by the channels-last kernels' path (their CPU twin), each replica's thread computes its statistics and "
            "normalizes, replica 0's updating the running ones; the meeting only stacks the statistics") {
    const KernelChoiceFor twin(distributed::channels_last::KernelChoice::cpu_twin);
    const auto counts = first_forward_operators(kTwoCpus, [](Learner& l) { l.to_channels_last(); });
    using Count = OperatorCountByThread;
    CHECK(Count::per_thread(counts, "fastcpp::sync_batch_norm_statistics") == std::vector<int>{1, 1});
    CHECK(Count::per_thread(counts, "fastcpp::sync_batch_norm_normalize") == std::vector<int>{1, 1});
    CHECK(Count::per_thread(counts, "aten::stack") == std::vector<int>{1});
    CHECK(Count::per_thread(counts, "aten::rsqrt").empty());  // nothing combined at the meeting
  }

  TEST_CASE("by the channels-last kernels' path (their CPU twin), 2 and 3 CPU replicas end as one device") {
    // What the replicas run on a GPU for channels-last activations (the statistics gathered,
    // combined in each replica's normalization, summed in one backward node), checked here
    // against plain BatchNorm on one device.
    const auto channels_last = [](Learner& l) { l.to_channels_last(); };
    const auto single = train({}, sgd({.mom = 0.9}), {}, torch::kCPU, channels_last);
    const KernelChoiceFor twin(distributed::channels_last::KernelChoice::cpu_twin);
    for (const auto& devices : {kTwoCpus, kThreeCpus}) {
      CAPTURE(devices.size());
      check_equal(train(devices, sgd({.mom = 0.9}), {}, torch::kCPU, channels_last), single, 1e-5);
    }
  }

  TEST_CASE("the replicas' gradients reach replica 0's in one multi-tensor add per replica, not one per parameter") {
    // Four replicas of four parameters; replica 0 has no gradient for the last one, and
    // replica 3 sat the batch out (a short batch), so its gradients stay out of the sum.
    torch::manual_seed(0);
    std::vector<std::vector<torch::Tensor>> params(4);
    for (auto& replica : params)
      for (int64_t size : {3, 5, 7, 2}) {
        replica.push_back(torch::zeros({size}).requires_grad_());
        replica.back().mutable_grad() = torch::randn({size});
      }
    params[0][3].mutable_grad() = torch::Tensor();
    std::vector<torch::Tensor> expected;
    for (size_t i = 0; i < 4; ++i)
      expected.push_back((i < 3 ? params[0][i].grad() : torch::zeros({2})) + params[1][i].grad() + params[2][i].grad());
    const auto idle = params[3][0].grad().clone();

    OperatorCount count;
    count.start();
    distributed::reduce_into_first(params, /*replicas=*/3, /*nccl=*/false);
    const auto counts = count.stop();
    // (On the CPU the multi-tensor add itself goes tensor by tensor; on a GPU it is a kernel.)
    CHECK(counts.at("aten::_foreach_add_") == 2);
    for (size_t i = 0; i < 4; ++i) {
      CAPTURE(i);
      CHECK(torch::equal(params[0][i].grad(), expected[i]));
      CHECK_FALSE(params[1][i].grad().defined());  // the replicas' own are cleared
      CHECK_FALSE(params[2][i].grad().defined());
    }
    CHECK(torch::equal(params[3][0].grad(), idle));
  }

  TEST_CASE("with gradient accumulation the replicas still equal one device") {
    const auto single = train({}, sgd({.mom = 0.9}), {std::make_shared<GradientAccumulation>(16)});
    const auto parallel = train(kThreeCpus, sgd({.mom = 0.9}), {std::make_shared<GradientAccumulation>(16)});
    check_equal(parallel, single);
  }

  TEST_CASE("frozen groups, gradient clipping and lr_find under to_parallel, as on one device") {
    // The frozen group is the first convolution and BatchNorm: with train_bn off the
    // BatchNorm's weight and bias are frozen too, and its synced layer makes no gradient for them.
    auto frozen_clipped = [](bool parallel, bool train_bn) {
      auto model = bn_model();
      auto options = quiet({.cbs = {std::make_shared<GradientClip>(0.05)}, .splitter = split_after(2)});
      options.train_bn = train_bn;
      Learner learn(image_dls(), model, CrossEntropyLoss(), {}, options);
      silence(learn);
      if (parallel) learn.to_parallel(kTwoCpus);
      learn.freeze();
      const auto first_conv = model[0]->as<torch::nn::Conv2d>()->weight.detach().clone();
      const auto first_norm = model[1]->as<torch::nn::BatchNorm2d>()->weight.detach().clone();
      learn.fit(2, 0.05);
      CHECK(torch::equal(model[0]->as<torch::nn::Conv2d>()->weight, first_conv));
      CAPTURE(parallel);
      CHECK(torch::equal(model[1]->as<torch::nn::BatchNorm2d>()->weight, first_norm) == !train_bn);
      const auto trained = snapshot(learn.model.module());
      learn.unfreeze();
      const auto found = learn.lr_find({.num_it = 12, .plot = ""});
      CHECK(!learn.recorder->losses.empty());
      CHECK(found.valley > 0);
      CHECK(learn.model.ptr().get() == model.ptr().get());
      return trained;
    };
    for (const bool train_bn : {true, false}) {
      CAPTURE(train_bn);
      const auto single = frozen_clipped(false, train_bn), parallel = frozen_clipped(true, train_bn);
      REQUIRE(parallel.size() == single.size());
      for (size_t i = 0; i < single.size(); ++i) CHECK(torch::allclose(parallel[i], single[i], 1e-5, 1e-5));
    }
  }

  TEST_CASE("parameters frozen and unfrozen between batches: the replicas follow, as on one device") {
    const auto single = train({}, sgd({.mom = 0.9}), {std::make_shared<FreezeMidFit>()});
    const auto plain = train({}, sgd({.mom = 0.9}));
    CHECK(!torch::equal(single.params[0], plain.params[0]));  // the freezing changed the run
    check_equal(train(kTwoCpus, sgd({.mom = 0.9}), {std::make_shared<FreezeMidFit>()}), single);
  }

  TEST_CASE("a parameter frozen between the forward and the backward gets no gradient from the replicas either") {
    const auto freeze = [] {
      return std::make_shared<FreezeMidFit>(FreezeMidFit::At{1, 2}, FreezeMidFit::At{2, 1}, 2, /*between_passes=*/true);
    };
    const auto single = train({}, sgd({.mom = 0.9}), {freeze()});
    CHECK(!torch::equal(single.params.back(), train({}, sgd({.mom = 0.9})).params.back()));  // the freezing took
    check_equal(train(kTwoCpus, sgd({.mom = 0.9}), {freeze()}), single);
  }

  TEST_CASE("a weight tied between two layers trains on 2 and 3 CPU replicas as on one device") {
    auto train_tied = [](const std::vector<torch::Device>& devices) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(4);
      auto data = std::make_shared<TensorDataset>(torch::randn({21, 6}, gen), torch::randint(6, {21}, gen, torch::kLong));
      torch::manual_seed(0);
      TiedNet model;
      REQUIRE(model->decoder_weight.is_same(model->encoder->weight));
      Learner learn({DataLoader(data, {.bs = 8, .shuffle = true}), DataLoader(data, {.bs = 8})}, model,
                    CrossEntropyLoss(), {}, quiet({.opt_func = sgd({.mom = 0.9})}));
      silence(learn);
      if (!devices.empty()) learn.to_parallel(devices);
      learn.fit(2, 0.1);
      CHECK(model->decoder_weight.is_same(model->encoder->weight));
      std::vector<torch::Tensor> params;
      for (const auto& p : model->parameters()) params.push_back(p.detach().clone());
      return params;
    };
    const auto single = train_tied({});
    for (const auto& devices : {kTwoCpus, kThreeCpus}) {
      CAPTURE(devices.size());
      const auto parallel = train_tied(devices);
      REQUIRE(parallel.size() == single.size());
      for (size_t i = 0; i < single.size(); ++i) {
        CAPTURE(i);
        CHECK(torch::allclose(parallel[i], single[i], 1e-5, 1e-6));
      }
    }
  }

  TEST_CASE("a tied weight's parts in the replicas are summed into one place before the reduction, once") {
    auto with_grad = [](double value) {
      auto t = torch::zeros({2}).requires_grad_();
      t.mutable_grad() = torch::full({2}, value);
      return t;
    };
    const auto w = with_grad(1);  // replica 0's tied weight, listed twice
    // Copies that hold it as two tensors: the second's part joins the first's.
    const auto a = with_grad(2), b = with_grad(3);
    CHECK(distributed::merge_tied_parts({{w, w}, {a, b}}, 2) == std::vector<bool>{false, true});
    CHECK(torch::equal(a.grad(), torch::full({2}, 5.0)));
    CHECK_FALSE(b.grad().defined());
    // Copies still tied: one gradient already, left as it is.
    const auto c = with_grad(4);
    CHECK(distributed::merge_tied_parts({{w, w}, {c, c}}, 2) == std::vector<bool>{false, true});
    CHECK(torch::equal(c.grad(), torch::full({2}, 4.0)));
    // A replica that sat the batch out is not touched; nothing tied, nothing repeated.
    const auto d = with_grad(6), e = with_grad(7);
    CHECK(distributed::merge_tied_parts({{w, w}, {d, e}}, 1) == std::vector<bool>{false, true});
    CHECK(e.grad().defined());
    CHECK(distributed::merge_tied_parts({{w, a}, {d, e}}, 2) == std::vector<bool>{false, false});
    // The reduction then adds replica 0's gradient once and each copy's whole part once.
    const auto f = with_grad(2), g = with_grad(3);
    distributed::reduce_into_first({{w, w}, {f, g}}, 2, /*nccl=*/false);
    CHECK(torch::equal(w.grad(), torch::full({2}, 6.0)));
  }

  TEST_CASE("autocast reaches the replica threads: bf16 forwards, a float loss that falls") {
    Learner learn(image_dls(), bn_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    struct DtypeProbe : Callback {
      DtypeProbe() { order = 5; }  // before MixedPrecision casts pred back to float
      void after_pred() override { seen.push_back(learn().pred.scalar_type()); }
      std::vector<c10::ScalarType> seen;
    };
    auto probe = learn.add_cb(DtypeProbe());
    learn.to_parallel(kTwoCpus);
    learn.to_bf16();
    learn.fit(3, 0.05);
    CHECK((probe->seen.front() == torch::kBFloat16));
    CHECK(learn.recorder->losses.back() < learn.recorder->losses.front());
  }

  TEST_CASE("after the fit the model is the plain one, and its checkpoint loads into a plain Learner") {
    auto model = bn_model();
    Learner learn(image_dls(), model, CrossEntropyLoss(), {}, quiet());
    silence(learn);
    learn.to_parallel(kTwoCpus);
    learn.fit(1, 0.05);
    CHECK(learn.model.ptr().get() == model.ptr().get());
    CHECK(learn.get_cb<distributed::DataParallel>()->last_replicas() == 2);
    const auto preds = learn.get_preds();  // outside a fit: the plain model, no replicas
    CHECK(learn.get_cb<distributed::DataParallel>()->last_replicas() == 2);
    const auto path = temp_path("parallel.pt");
    learn.save(path);
    Learner plain(image_dls(), bn_model(), CrossEntropyLoss(), {}, quiet());
    plain.load(path);
    CHECK(all_equal(snapshot(plain.model.module()), snapshot(learn.model.module())));
    CHECK(torch::allclose(plain.get_preds().preds, preds.preds));
    std::filesystem::remove(path);
  }

  TEST_CASE("the vision models copy themselves for the replicas: same names and outputs, separate tensors") {
    auto check = [](Model model, const torch::Tensor& x) {
      CAPTURE(model.module().name());
      model.module().eval();
      auto copy = model.replicate(torch::kCPU);
      copy.module().eval();
      std::vector<std::string> names, copy_names;
      for (const auto& p : model.module().named_parameters()) names.push_back(p.key());
      for (const auto& p : copy.module().named_parameters()) copy_names.push_back(p.key());
      CHECK(copy_names == names);
      CHECK(torch::equal(copy(x), model(x)));
      torch::NoGradGuard no_grad;
      copy.module().parameters()[0].add_(1);
      CHECK(!torch::equal(copy.module().parameters()[0], model.module().parameters()[0]));
    };
    torch::manual_seed(0);
    check(vision::resnet18({.num_classes = 3, .stem = vision::Stem::cifar, .width = 8}), torch::randn({2, 3, 16, 16}));
    check(vision::resnet50({.num_classes = 3, .stem = vision::Stem::cifar, .width = 8}), torch::randn({2, 3, 16, 16}));
    check(vision::xresnet18({.n_out = 3, .widen = 0.25}), torch::randn({2, 3, 32, 32}));
    check(vision::create_head(16, 3), torch::randn({2, 16, 4, 4}));
  }

  TEST_CASE("one device is a note and a plain fit") {
    std::vector<std::string> lines;
    Learner learn(image_dls(), bn_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn, &lines);
    learn.to_parallel({torch::kCPU});
    learn.fit(1, 0.05);
    CHECK(lines.front() == "to_parallel: one device (cpu), training as usual");
  }

  TEST_CASE("errors: with to_distributed, a model that cannot be copied, a device that is not there, CPU beside CUDA") {
    Learner learn(image_dls(), bn_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    learn.to_parallel(kTwoCpus);
    CHECK(error_of([&] { learn.to_distributed(); }) ==
          "to_distributed: this Learner is already to_parallel; pick one (to_parallel: one process driving several "
          "devices; to_distributed: one process per device)");
    Learner other(image_dls(), bn_model(), CrossEntropyLoss(), {}, quiet());
    other.to_distributed();
    CHECK(error_of([&] { other.to_parallel(kTwoCpus); }) ==
          "to_parallel: this Learner is already to_distributed; pick one (to_parallel: one process driving several "
          "devices; to_distributed: one process per device)");

    Learner odd(synthetic_dls(), NotCloneable(), CrossEntropyLoss(), {}, quiet());
    silence(odd);
    odd.to_parallel(kTwoCpus);
    const auto message = error_of([&] { odd.fit(1); });
    CHECK(message.rfind("Exception occurred in `DataParallel` when calling event `before_fit`:\n\tto_parallel: cannot "
                        "copy the model (NotCloneableImpl) onto cpu: clone() has not been implemented for "
                        "NotCloneableImpl. Subclass torch::nn::Cloneable<NotCloneableImpl>", 0) == 0);
    CHECK(message.find('\n', message.find('\t')) == std::string::npos);  // one line, no backtrace

    if (torch::cuda::device_count() == 0) {
      Learner far(image_dls(), bn_model(), CrossEntropyLoss(), {}, quiet());
      silence(far);
      far.to_parallel({torch::Device("cuda:0"), torch::Device("cuda:0")});
      CHECK(error_of([&] { far.fit(1); }) ==
            "Exception occurred in `DataParallel` when calling event `before_fit`:\n\tto_parallel: device cuda:0 is "
            "not on this machine, which has no CUDA device; train on the CPU (the default when no GPU is there)");
    }
    // The synced BatchNorm's kernels, streams and parameter broadcast are those of one kind of device.
    CHECK(error_of([&] { learn.to_parallel({torch::kCPU, torch::Device("cuda:0")}); }) ==
          "to_parallel: cpu and cuda:0 are different kinds of device; the replicas run on one kind (CUDA GPUs, or "
          "the CPU)");
  }
}

TEST_SUITE("gpu" * doctest::skip(!torch::cuda::is_available())) {
  TEST_CASE("to_parallel on {cuda:0, cuda:0}, {cuda:0 x3}, every GPU and {cuda:0, cuda:1, cuda:1} ends with the weights and buffers of one GPU") {
    const FullFp32Convolutions full_fp32;
    const torch::Device cuda0("cuda:0");
    std::vector<std::vector<torch::Device>> device_sets{{cuda0, cuda0}, {cuda0, cuda0, cuda0}};
    std::vector<torch::Device> every_gpu;
    for (c10::DeviceIndex i = 0; i < torch::cuda::device_count(); ++i) every_gpu.emplace_back(torch::kCUDA, i);
    if (every_gpu.size() > 1) {
      device_sets.push_back(every_gpu);
      // Two replicas sharing a GPU other than the first: the synced BatchNorm's backward
      // orders that GPU's streams against its own.
      device_sets.push_back({cuda0, every_gpu[1], every_gpu[1]});
    }
    const auto single = train({}, sgd({.mom = 0.9}), {}, cuda0);
    for (const auto& devices : device_sets) {
      CAPTURE(devices.size());
      check_equal(train(devices, sgd({.mom = 0.9}), {}, cuda0), single, 1e-4);
    }
  }

  TEST_CASE("on {cuda:0, cuda:0} each replica's thread queues its BatchNorm statistics and normalization") {
    const torch::Device cuda0("cuda:0");
    const auto counts = first_forward_operators({cuda0, cuda0});
    using Count = OperatorCountByThread;
    CHECK(Count::per_thread(counts, "aten::batch_norm_stats") == std::vector<int>{1, 1});
    CHECK(Count::per_thread(counts, "aten::batch_norm_elemt") == std::vector<int>{1, 1});
    CHECK(Count::per_thread(counts, "aten::batch_norm_gather_stats_with_counts") == std::vector<int>{1});
  }

  TEST_CASE("on {cuda:0, cuda:0} channels-last, each replica's thread queues the library's statistics and "
            "normalization kernels; the meeting only stacks") {
    const torch::Device cuda0("cuda:0");
    const auto counts = first_forward_operators({cuda0, cuda0}, [](Learner& l) { l.to_channels_last(); });
    using Count = OperatorCountByThread;
    CHECK(Count::per_thread(counts, "fastcpp::sync_batch_norm_statistics") == std::vector<int>{1, 1});
    CHECK(Count::per_thread(counts, "fastcpp::sync_batch_norm_normalize") == std::vector<int>{1, 1});
    CHECK(Count::per_thread(counts, "aten::stack") == std::vector<int>{1});
    CHECK(Count::per_thread(counts, "aten::batch_norm_stats").empty());
  }

  TEST_CASE("a U-Net on {cuda:0, cuda:0} in fp32 and fp16 ends as on one GPU") {
    const FullFp32Convolutions full_fp32;
    const torch::Device cuda0("cuda:0");
    for (const auto& [name, setup, tolerance] : std::vector<std::tuple<std::string, std::function<void(Learner&)>, double>>{
             {"fp32", {}, 1e-4}, {"fp16", [](Learner& l) { l.to_fp16({.init_scale = 1024}); }, 2e-2}}) {
      CAPTURE(name);
      const auto single = train_unet({}, sgd({.mom = 0.9}), cuda0, setup);
      const auto parallel = train_unet({cuda0, cuda0}, sgd({.mom = 0.9}), cuda0, setup);
      check_trained_alike(parallel, single, tolerance);
    }
  }

  TEST_CASE("to_parallel on {cuda:0, cuda:0} in fp16, bf16 and channels-last ends as one GPU in the same setting") {
    const FullFp32Convolutions full_fp32;
    const torch::Device cuda0("cuda:0");
    // Half precision rounds differently on half a batch (other kernels, other sums): the
    // tolerance is the precision's, and the integer buffers (batches tracked) stay exact.
    // fp16 starts from a scale that does not overflow (so does the U-Net's): a step the
    // scaler skips on one side only is not what this compares.
    const std::vector<std::tuple<std::string, std::function<void(Learner&)>, double>> settings{
        {"fp16", [](Learner& l) { l.to_fp16({.init_scale = 1024}); }, 2e-2},
        {"bf16", [](Learner& l) { l.to_bf16(); }, 5e-2},
        {"fp32 channels-last", [](Learner& l) { l.to_channels_last(); }, 1e-4},
        {"fp16 channels-last", [](Learner& l) {
           l.to_fp16({.init_scale = 1024});
           l.to_channels_last();
         }, 2e-2}};
    for (const auto& [name, setup, tolerance] : settings) {
      CAPTURE(name);
      const auto single = train({}, sgd({.mom = 0.9}), {}, cuda0, setup);
      check_equal(train({cuda0, cuda0}, sgd({.mom = 0.9}), {}, cuda0, setup), single, tolerance);
    }
  }
}
