// Metrics on hand-made predictions.
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>

#include "helpers.h"
#include "learner/few_class_cross_entropy.h"

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

// While it lives, CPU tensors are allocated through it: it counts the bytes they hold at
// once and the peak (the default allocator does the work).
class CountingCpuAllocator final : public c10::Allocator {
 public:
  CountingCpuAllocator() : base_(c10::GetCPUAllocator()) { c10::SetCPUAllocator(this, kPriority); }
  ~CountingCpuAllocator() override { c10::SetCPUAllocator(base_, kPriority); }
  c10::DataPtr allocate(size_t n) override {
    auto inner = base_->allocate(n);
    void* data = inner.get();
    const auto device = inner.device();
    peak_ = std::max(peak_, *held_ += static_cast<int64_t>(n));
    return {data, new Held{std::move(inner), static_cast<int64_t>(n), held_}, &release, device};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
  int64_t peak() const { return peak_; }  // bytes held at once, of those allocated while it lived

 private:
  static constexpr uint8_t kPriority = 100;
  struct Held {
    c10::DataPtr inner;
    int64_t bytes;
    std::shared_ptr<int64_t> count;  // outlives the allocator: a tensor may
  };
  static void release(void* context) {
    auto* held = static_cast<Held*>(context);
    *held->count -= held->bytes;
    delete held;
  }
  c10::Allocator* base_;
  std::shared_ptr<int64_t> held_ = std::make_shared<int64_t>(0);
  int64_t peak_ = 0;
};

}  // namespace

TEST_SUITE("metrics") {
  const auto pred = torch::tensor({{0.1, 0.7, 0.2}, {0.8, 0.05, 0.15}, {0.3, 0.3, 0.4}, {0.2, 0.5, 0.3}});
  const auto target = torch::tensor({1, 2, 2, 0}, torch::kLong);

  TEST_CASE("accuracy, error_rate and top-k accuracy") {
    CHECK(metrics::accuracy_fn(pred, target).item<double>() == doctest::Approx(0.5));
    CHECK(metrics::top_k_accuracy_fn(pred, target, 2).item<double>() == doctest::Approx(0.75));
    CHECK(metrics::top_k_accuracy_fn(pred, target, 3).item<double>() == doctest::Approx(1.0));
    CHECK(error_of([&] { metrics::top_k_accuracy_fn(pred, target, 4); }) ==
          "top_k_accuracy: k=4 but the model has 3 outputs");
    // [N, 1] targets read as N targets, as fastai's flatten_check (not broadcast to N x N)
    CHECK(metrics::accuracy_fn(pred, target.unsqueeze(1)).item<double>() == doctest::Approx(0.5));
    CHECK(metrics::top_k_accuracy_fn(pred, target.unsqueeze(1), 2).item<double>() == doctest::Approx(0.75));
    CHECK(error_of([&] { metrics::accuracy_fn(pred, target.narrow(0, 0, 3)); }) ==
          "accuracy: predictions [4, 3] and targets [3] differ in their number of items (one class index an item)");
  }

  TEST_CASE("metrics over a validation set are weighted by batch size") {
    // 5 valid items in batches of 2, 2, 1: the average must weigh the last batch by 1.
    auto valid = std::make_shared<TensorDataset>(torch::eye(5, 3), torch::tensor({0, 1, 2, 2, 0}, torch::kLong));
    DataLoaders dls{DataLoader(valid, {.bs = 2}), DataLoader(valid, {.bs = 2})};
    auto identity = std::make_shared<torch::nn::IdentityImpl>();
    Learner learn(dls, Model(identity, [](const torch::Tensor& x) { return x * 1.0; }), CrossEntropyLoss(),
                  {metrics::accuracy(), metrics::error_rate(),
                   metrics::from_fn("mean_target", [](const torch::Tensor&, const torch::Tensor& y) {
                     return y.to(torch::kFloat).mean();
                   }),
                   std::make_shared<AccumMetric>("max_prob",
                                                 [](const torch::Tensor& p, const torch::Tensor&) { return p.max(); },
                                                 /*activation=*/true)},
                  quiet());
    // rows: eye(5,3) -> argmax 0,1,2,0,0 (rows 3,4 are all zero: argmax 0) vs targets 0,1,2,2,0
    const auto values = learn.validate();
    REQUIRE(values.size() == 5);
    CHECK(values[1] == doctest::Approx(0.8));
    CHECK(values[2] == doctest::Approx(0.2));
    CHECK(values[3] == doctest::Approx(1.0));  // (0+1+2+2+0)/5
    CHECK(values[4] == doctest::Approx(std::exp(1.0) / (std::exp(1.0) + 2)).epsilon(1e-6));
  }
  TEST_CASE("multi-label: BCEWithLogitsLoss is PyTorch's mean binary cross-entropy, accuracy_multi counts (item, class) pairs") {
    // Logits and one-hot targets of 3 items, 2 classes: sigmoid > 0.5 is logit > 0.
    const auto logits = torch::tensor({{2.0, -1.0}, {-0.5, 0.5}, {1.0, 3.0}});
    const auto one_hot = torch::tensor({{1.0, 0.0}, {1.0, 1.0}, {0.0, 1.0}});
    const auto loss = BCEWithLogitsLoss();
    const auto p = torch::sigmoid(logits);
    const auto expected = -(one_hot * p.log() + (1 - one_hot) * (1 - p).log());
    CHECK(loss(logits, one_hot).item<double>() == doctest::Approx(expected.mean().item<double>()).epsilon(1e-6));
    CHECK(torch::allclose(loss.per_item(logits, one_hot), expected.mean(1)));
    CHECK(error_of([&] { loss(logits, one_hot.narrow(1, 0, 1)); }) ==
          "BCEWithLogitsLoss: prediction shape [3, 2] differs from target shape [3, 1]");
    auto data = std::make_shared<TensorDataset>(logits, one_hot);
    DataLoaders dls{DataLoader(data, {.bs = 2}), DataLoader(data, {.bs = 2})};
    auto identity = std::make_shared<torch::nn::IdentityImpl>();
    Learner learn(dls, Model(identity, [](const torch::Tensor& x) { return x * 1.0; }), loss,
                  {metrics::accuracy_multi(), metrics::accuracy_multi(0.9)}, quiet());
    const auto values = learn.validate();
    // At 0.5 (logit > 0): 2 + 1 + 1 of 6 pairs right; at 0.9 (logit > 2.197) only 3.0 passes: 1 + 0 + 2.
    CHECK(values[1] == doctest::Approx(4.0 / 6));
    CHECK(values[2] == doctest::Approx(3.0 / 6));
  }

  TEST_CASE("CrossEntropyLoss over fewer classes than a vector holds equals torch's, values and gradients") {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
    namespace F = torch::nn::functional;
    for (const int64_t classes : {1, 2, 7}) {  // below the vector width of every CPU: the own path
      for (const double smoothing : {0.0, 0.1}) {
        CAPTURE(classes);
        CAPTURE(smoothing);
        const auto logits = torch::randn({33, classes}, gen) * 3;
        REQUIRE(takes_few_class_path(logits));
        const auto labels = torch::randint(classes, {33}, gen, torch::kLong);
        const auto loss = CrossEntropyLoss({.label_smoothing = smoothing});
        const auto ours = logits.clone().requires_grad_(), theirs = logits.clone().requires_grad_();
        const auto mean = loss(ours, labels);
        const auto expected = F::cross_entropy(theirs, labels, F::CrossEntropyFuncOptions().label_smoothing(smoothing));
        CHECK(mean.dim() == 0);
        CHECK(mean.grad_fn()->name().find("FewClassCrossEntropy") != std::string::npos);
        {
          torch::NoGradGuard validating;  // no graph and no softmax kept, the same loss
          CHECK(loss(ours, labels).item<float>() == mean.item<float>());
        }
        CHECK(mean.item<double>() == doctest::Approx(expected.item<double>()).epsilon(1e-6));
        mean.backward();
        expected.backward();
        CHECK(torch::allclose(ours.grad(), theirs.grad(), 1e-5, 1e-7));
        // Each item's loss, weighted unevenly by what follows it.
        const auto weights = torch::rand({33}, gen);
        ours.mutable_grad().zero_();
        theirs.mutable_grad().zero_();
        const auto items = loss.per_item(ours, labels);
        const auto expected_items = F::cross_entropy(
            theirs, labels, F::CrossEntropyFuncOptions().label_smoothing(smoothing).reduction(torch::kNone));
        CHECK(torch::allclose(items, expected_items, 1e-5, 1e-6));
        (items * weights).sum().backward();
        (expected_items * weights).sum().backward();
        CHECK(torch::allclose(ours.grad(), theirs.grad(), 1e-5, 1e-7));
        // A second derivative (a gradient penalty) takes differentiable operators.
        const auto penalty = [&](const torch::Tensor& x, const torch::Tensor& value) {
          const auto grad = torch::autograd::grad({value}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
          return torch::autograd::grad({grad.pow(2).sum()}, {x})[0];
        };
        const auto torch_loss = F::cross_entropy(theirs, labels, F::CrossEntropyFuncOptions().label_smoothing(smoothing));
        CHECK(torch::allclose(penalty(ours, loss(ours, labels)), penalty(theirs, torch_loss), 1e-4, 1e-7));
      }
    }
    // Many rows are shared among threads; the mean is summed in one order whatever their number.
    const auto logits = torch::randn({20000, 5}, gen);
    const auto labels = torch::randint(5, {20000}, gen, torch::kLong);
    const int threads = torch::get_num_threads();
    torch::set_num_threads(1);
    const auto one = CrossEntropyLoss()(logits, labels);
    torch::set_num_threads(2);
    const auto two = CrossEntropyLoss()(logits, labels);
    torch::set_num_threads(threads);
    CHECK(one.item<float>() == two.item<float>());
    CHECK(one.item<double>() == doctest::Approx(F::cross_entropy(logits, labels).item<double>()).epsilon(1e-6));
    // Anything else is torch's: many classes, another type, a strided view.
    CHECK_FALSE(takes_few_class_path(torch::zeros({4, 16})));
    CHECK_FALSE(takes_few_class_path(torch::zeros({4, 3}, torch::kDouble)));
    CHECK_FALSE(takes_few_class_path(torch::zeros({3, 4}).t()));
    // A smoothing outside [0, 1] would give targets below 0 on the own path: refused for every class count.
    CHECK(error_of([] { CrossEntropyLoss({.label_smoothing = 1.5}); }) ==
          "CrossEntropyLoss: label_smoothing must be in [0, 1], got 1.5");
    CHECK(error_of([] { CrossEntropyLoss({.label_smoothing = -0.1}); }) ==
          "CrossEntropyLoss: label_smoothing must be in [0, 1], got -0.1");
  }

  TEST_CASE("segmentation metrics hold O(pixels) memory: one confusion matrix, no [classes x pixels] table") {
    // CamVid's shape: 32 classes at 360x480, a batch of 2.
    const int64_t pixels = 2 * 360 * 480;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(8);
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    learn.pred = torch::randn({2, 32, 360, 480}, gen);
    learn.yb = torch::randint(0, 32, {2, 360, 480}, gen, torch::kLong);
    learn.yb.index_put_({0, 0}, 255);
    learn.dls.void_index = 255;
    for (const auto& metric : {vision::dice_multi(), vision::jaccard_coeff_multi()}) {
      CAPTURE(metric->name());
      metric->reset();
      CountingCpuAllocator counting;
      metric->accumulate(learn);
      // The argmax, the mask's bins and a void flag: 17 bytes a pixel. A table of doubles
      // for each class takes 32 x 8 bytes a pixel, and the old way held three.
      CHECK(counting.peak() < 32 * pixels);
      CHECK(metric->value() > 0);
    }
    CountingCpuAllocator counting;
    const auto iou = vision::per_class_iou(learn.pred, learn.yb, {.void_index = 255});
    CHECK(counting.peak() < 32 * pixels);
    CHECK(iou.size() == 32);
  }
}
