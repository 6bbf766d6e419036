// Metrics on hand-made predictions.
#include "helpers.h"

using namespace fastcpp;
using namespace fastcpp::testing;

TEST_SUITE("metrics") {
  const auto pred = torch::tensor({{0.1, 0.7, 0.2}, {0.8, 0.05, 0.15}, {0.3, 0.3, 0.4}, {0.2, 0.5, 0.3}});
  const auto target = torch::tensor({1, 2, 2, 0}, torch::kLong);

  TEST_CASE("accuracy, error_rate and top-k accuracy") {
    CHECK(metrics::accuracy_fn(pred, target).item<double>() == doctest::Approx(0.5));
    CHECK(metrics::top_k_accuracy_fn(pred, target, 2).item<double>() == doctest::Approx(0.75));
    CHECK(metrics::top_k_accuracy_fn(pred, target, 3).item<double>() == doctest::Approx(1.0));
    CHECK(error_of([&] { metrics::top_k_accuracy_fn(pred, target, 4); }) ==
          "top_k_accuracy: k=4 but the model has 3 outputs");
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
}
