// Our SGD and Adam against PyTorch's SGD and AdamW on the same gradient sequence
// (fixtures written by fixtures/make_fixtures.py with Debian's python3-torch).
#include <fstream>
#include <map>
#include <sstream>

#include "helpers.h"
#include "operator_count.h"
#include "optim/fused_updates.h"
#include "optim/param_groups.h"

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

torch::Tensor tensor_of(const std::vector<double>& values) { return torch::tensor(values, torch::kDouble); }

// Runs `opt_func` on the fixture's gradient sequence and compares with `expected_key`.<step>.
void check_trajectory(const OptFunc& opt_func, const std::string& expected_key, bool schedule_mom, double lr,
                      double wd) {
  auto fx = read_fixture("optimizers.txt");
  auto param = tensor_of(fx["init"]).requires_grad_(true);
  auto opt = opt_func({ParamGroup{{param}, {}, {}}});
  opt->set_hyper("lr", lr);
  opt->set_hyper("wd", wd);
  for (int k = 0; k < 6; ++k) {
    if (schedule_mom) opt->set_hyper("mom", fx["mom." + std::to_string(k)][0]);
    param.mutable_grad() = tensor_of(fx["grad." + std::to_string(k)]);
    opt->step();
    const auto expected = tensor_of(fx[expected_key + "." + std::to_string(k)]);
    INFO("step " << k);
    CHECK(torch::allclose(param.detach(), expected, /*rtol=*/1e-12, /*atol=*/1e-14));
  }
}

// Three steps of `opt_func`'s per-param update and of `fused` on copies of the same
// params (a conv weight in channels-last, a bias without decay, and a one-channel
// channels-last weight whose gradient is laid out contiguously: strides that differ only
// on the size-1 dimension, as cuDNN may hand back), with the same gradients and a
// scheduled momentum: every param and state buffer agree.
void check_fused_equals_per_param(const OptFunc& opt_func, void (*fused)(GroupTensors&, const Hypers&)) {
  torch::manual_seed(0);
  const std::vector<torch::Tensor> init{torch::randn({4, 3, 3, 3}).contiguous(at::MemoryFormat::ChannelsLast),
                                        torch::randn({4}),
                                        torch::empty_strided({4, 1, 3, 3}, {9, 1, 3, 1}).normal_()};
  std::vector<torch::Tensor> looped, fused_params;
  for (const auto& t : init) {
    looped.push_back(t.clone().requires_grad_(true));
    fused_params.push_back(t.clone().requires_grad_(true));
  }
  auto opt = opt_func({ParamGroup{looped, {true, false, true}, {}}});
  opt->set_hyper("lr", 0.05);
  opt->set_hyper("wd", 0.1);
  std::vector<ParamState> states(init.size());
  for (int k = 0; k < 3; ++k) {
    opt->set_hyper("mom", 0.9 - 0.05 * k);
    GroupTensors group{fused_params, {}, {&states[0], &states[1], &states[2]}, {true, false, true}};
    for (size_t i = 0; i < init.size(); ++i) {
      const auto grad = i == 2 ? torch::randn(init[i].sizes()) : torch::randn_like(init[i]);
      looped[i].mutable_grad() = grad.clone();
      fused_params[i].mutable_grad() = grad.clone();
      group.grads.push_back(fused_params[i].grad());
    }
    REQUIRE(group.grads[2].strides() != fused_params[2].strides());
    opt->step();
    REQUIRE(fusable(group));
    torch::NoGradGuard no_grad;
    OperatorCount count;
    count.start();
    fused(group, opt->param_groups()[0].hypers);
    // The channels-last weight's gradient is not made contiguous first (a copy).
    CHECK(count.stop().count("aten::clone") == 0);
  }
  const auto expected_state = opt->state_dict();
  for (size_t i = 0; i < init.size(); ++i) {
    CAPTURE(i);
    CHECK(torch::allclose(fused_params[i], looped[i], 1e-6, 1e-7));
    CHECK(states[i].step == 3);
    for (const auto& [name, buffer] : states[i].buffers) {
      CAPTURE(name);
      const auto key = "0." + std::to_string(i) + "." + name;
      REQUIRE(expected_state.contains(key));
      CHECK(torch::allclose(buffer, expected_state.at(key).toTensor(), 1e-6, 1e-7));
    }
  }
}

}  // namespace

struct TiedLinearImpl : torch::nn::Module {  // a linear layer over another's weight
  explicit TiedLinearImpl(torch::Tensor shared) { weight = register_parameter("weight", std::move(shared)); }
  torch::Tensor forward(const torch::Tensor& x) { return torch::nn::functional::linear(x, weight); }
  torch::Tensor weight;
};

TEST_SUITE("optimizers") {
  TEST_CASE("a weight two layers share is one parameter to the optimizer: stepped once, as PyTorch's") {
    torch::manual_seed(0);
    torch::nn::Linear hidden(4, 4);
    torch::nn::Sequential model(hidden, torch::nn::ReLU(), torch::nn::ModuleHolder<TiedLinearImpl>(hidden->weight),
                                torch::nn::ReLU(), torch::nn::Linear(4, 2));
    REQUIRE(model->parameters().size() == 5);  // libtorch lists the shared weight twice
    auto data = std::make_shared<TensorDataset>(torch::randn({8, 4}), torch::randint(2, {8}, torch::kLong));
    // The gradient of one step, both uses of the weight summed into it
    const auto x = data->get_batch({0, 1, 2, 3, 4, 5, 6, 7});
    torch::nn::functional::cross_entropy(model->forward(x.x), x.y).backward();
    const auto expected = (hidden->weight - 0.1 * hidden->weight.grad()).detach().clone();
    model->zero_grad();
    Learner learn({DataLoader(data, {.bs = 8}), DataLoader(data, {.bs = 8})}, model, CrossEntropyLoss(), {},
                  quiet({.opt_func = sgd(), .wd = 0.0}));
    silence(learn);
    CHECK(learn.n_param_groups() == 1);
    learn.fit(1, 0.1);
    CHECK(learn.opt->param_groups()[0].params.size() == 4);
    CHECK(torch::allclose(hidden->weight, expected, 1e-6, 1e-7));
  }

  TEST_CASE("a weight shared across parameter groups is in the first group that lists it, once") {
    torch::manual_seed(0);
    torch::nn::Linear hidden(4, 4), out(4, 2);
    torch::nn::Sequential model(hidden, torch::nn::ModuleHolder<TiedLinearImpl>(hidden->weight), out);
    Learner learn(synthetic_dls(), model, CrossEntropyLoss(), {}, quiet({.splitter = two_groups}));
    learn.create_opt();
    const auto& groups = learn.opt->param_groups();
    REQUIRE(groups.size() == 2);
    REQUIRE(groups[0].params.size() == 2);  // the hidden layer's weight and bias
    CHECK(groups[0].params[0].is_same(hidden->weight));
    REQUIRE(groups[1].params.size() == 2);  // the shared weight again left out
    CHECK(groups[1].params[0].is_same(out->weight));
    CHECK(groups[1].params[1].is_same(out->bias));
    CHECK(groups[1].do_wd == std::vector<bool>{true, false});  // a bias without weight decay
  }

  TEST_CASE("the fused group updates (ATen's kernels) equal SGD's and Adam's per-param updates") {
    check_fused_equals_per_param(sgd({.mom = 0.9}), [](GroupTensors& g, const Hypers& h) { fused_sgd_update(g, h, true); });
    check_fused_equals_per_param(sgd(), [](GroupTensors& g, const Hypers& h) { fused_sgd_update(g, h, false); });
    check_fused_equals_per_param(adam({.sqr_mom = 0.99, .eps = 1e-5}), fused_adam_update);
  }

  TEST_CASE("SGD and LARS made with mom 0 take plain steps under a scheduled mom, as fastai's sgd_step and larc_step") {
    // fastai: SGD([p], lr=0.1) and Larc([p], 0.1, mom=0, clip=False); set_hyper('mom', 0.95); grads [1, -2], [0.5, 1]
    const std::vector<std::tuple<std::string, OptFunc, std::vector<double>>> cases{
        {"SGD", sgd(), {0.85, 1.1}}, {"LARS", lars({.mom = 0}), {0.9974693756134478, 0.9999983954605378}}};
    for (const auto& [name, opt_func, expected] : cases) {
      CAPTURE(name);
      auto p = torch::ones({2}, torch::kDouble).requires_grad_(true);
      auto opt = opt_func({ParamGroup{{p}, {true}, {}}});
      opt->set_hyper("lr", 0.1);
      opt->set_hyper("mom", 0.95);
      for (const auto& grad : {torch::tensor({1.0, -2.0}, torch::kDouble), torch::tensor({0.5, 1.0}, torch::kDouble)}) {
        p.mutable_grad() = grad;
        opt->step();
      }
      CHECK(torch::allclose(p, torch::tensor(expected, torch::kDouble), 0, 1e-12));
    }
  }

  TEST_CASE("SGD with momentum scheduled to mom 0 steps there as fastai's: grad_avg = grad, then averages on") {
    auto p = torch::ones({2}).requires_grad_(true);  // float: the group is fused
    auto opt = sgd({.mom = 0.9})({ParamGroup{{p}, {true}, {}}});
    opt->set_hyper("lr", 0.1);
    const auto g1 = torch::tensor({1.0f, -2.0f}), g2 = torch::tensor({0.5f, 1.0f});
    opt->set_hyper("mom", 0.0);
    p.mutable_grad() = g1.clone();
    opt->step();
    CHECK(torch::allclose(p.detach(), 1 - 0.1 * g1));
    opt->set_hyper("mom", 0.9);
    p.mutable_grad() = g2.clone();
    opt->step();
    CHECK(torch::allclose(p.detach(), 1 - 0.1 * g1 - 0.1 * (0.9 * g1 + g2)));
  }

  TEST_CASE("Lookahead needs an optimizer and k >= 1; a step on the host reads skip_next_step_if's verdict") {
    auto p = torch::ones({2}).requires_grad_(true);
    CHECK(error_of([&] { lookahead(sgd(), {.k = 0})({ParamGroup{{p}, {true}, {}}}); }) ==
          "Lookahead: k must be >= 1 (steps between syncs of the slow weights), got 0");
    auto opt = sgd()({ParamGroup{{p}, {true}, {}}});
    opt->set_hyper("lr", 0.1);
    p.mutable_grad() = torch::ones({2});
    opt->skip_next_step_if(torch::ones({1}));  // an overflow: no step
    opt->step();
    CHECK(torch::equal(p.detach(), torch::ones({2})));
    opt->skip_next_step_if(torch::zeros({1}));
    opt->step();
    CHECK(torch::allclose(p.detach(), torch::full({2}, 0.9)));
  }

  TEST_CASE("a group is fused only on one device and dtype, with gradients laid out as the params, at one step") {
    auto a = torch::randn({2, 3}), b = torch::randn({3});
    ParamState s0, s1;
    GroupTensors group{{a, b}, {torch::randn({2, 3}), torch::randn({3})}, {&s0, &s1}, {true, true}};
    CHECK(fusable(group));
    s1.step = 1;
    CHECK(!fusable(group));
    s1.step = 0;
    group.grads[0] = torch::randn({3, 2}).t();  // other strides
    CHECK(!fusable(group));
    group.grads[0] = torch::randn({2, 3});
    group.params[1] = torch::randn({3}, torch::kDouble);
    group.grads[1] = torch::randn({3}, torch::kDouble);
    CHECK(!fusable(group));
  }

  TEST_CASE("a group whose state buffers are laid out otherwise than their params is not fused") {
    // Momentum made before to_channels_last turned the weights channels-last: the kernels
    // need the buffers' strides to be the params'.
    const auto weight = torch::randn({4, 3, 2, 2}).contiguous(torch::MemoryFormat::ChannelsLast);
    ParamState state;
    GroupTensors group{{weight}, {torch::randn_like(weight)}, {&state}, {true}};
    state.buffers["grad_avg"] = torch::zeros_like(weight);
    CHECK(fusable(group));
    state.buffers["grad_avg"] = torch::zeros(weight.sizes());  // contiguous
    CHECK(!fusable(group));
    state.buffers["grad_avg"] = torch::zeros_like(weight, torch::kDouble);
    CHECK(!fusable(group));
  }

  TEST_CASE("Adam equals torch.optim.AdamW, with a scheduled beta1 and decoupled weight decay") {
    check_trajectory(adam({.sqr_mom = 0.99, .eps = 1e-5}), "adamw", /*schedule_mom=*/true, 1e-2, 0.1);
  }

  TEST_CASE("SGD with momentum equals torch.optim.SGD") {
    check_trajectory(sgd({.mom = 0.9}), "sgd", /*schedule_mom=*/false, 1e-2, 0.0);
  }

  TEST_CASE("with decouple_wd false, Adam and SGD equal torch.optim.Adam's and SGD's weight_decay (L2)") {
    check_trajectory(adam({.sqr_mom = 0.99, .eps = 1e-5, .decouple_wd = false}), "adam_l2", /*schedule_mom=*/true,
                     1e-2, 0.1);
    check_trajectory(sgd({.mom = 0.9, .decouple_wd = false}), "sgd_l2", /*schedule_mom=*/false, 1e-2, 0.1);
  }

  TEST_CASE("L2 regularization adds wd*p to the gradient in place, only where do_wd is set, and not at wd 0") {
    auto decayed = torch::ones({2}).requires_grad_(true), kept = torch::ones({2}).requires_grad_(true);
    auto opt = sgd({.wd = 0.5, .decouple_wd = false})({ParamGroup{{decayed, kept}, {true, false}, {}}});
    opt->set_hyper("lr", 0.1);
    decayed.mutable_grad() = torch::zeros({2});
    kept.mutable_grad() = torch::zeros({2});
    opt->step();
    CHECK(torch::allclose(decayed.grad(), torch::full({2}, 0.5)));  // fastai's l2_reg changes p.grad
    CHECK(torch::allclose(decayed.detach(), torch::full({2}, 0.95)));
    CHECK(torch::equal(kept.grad(), torch::zeros({2})));
    CHECK(torch::equal(kept.detach(), torch::ones({2})));
    opt->set_hyper("wd", 0.0);
    opt->step();
    CHECK(torch::allclose(decayed.grad(), torch::full({2}, 0.5)));
    CHECK(torch::allclose(decayed.detach(), torch::full({2}, 0.9)));
    CHECK(!opt->decouple_wd());
    CHECK(!lookahead(sgd({.decouple_wd = false}))({ParamGroup{{kept}, {true}, {}}})->decouple_wd());
    // A sparse gradient (an Embedding's with sparse on) cannot take wd*p: an Error, not ATen's.
    auto table = torch::ones({3, 2}).requires_grad_();
    auto sparse = sgd({.wd = 0.5, .decouple_wd = false})({ParamGroup{{table}, {true}, {}}});
    table.mutable_grad() = torch::ones({3, 2}).to_sparse();
    CHECK(error_of([&] { sparse->step(); }) ==
          "L2 weight decay (decouple_wd false) adds wd * param to each gradient, which a sparse one cannot take: decay "
          "it decoupled (decouple_wd true), or give its parameter no weight decay");
  }

  TEST_CASE("decoupled weight decay: p *= 1 - lr*wd when the gradient is zero") {
    auto param = torch::ones({3}, torch::kDouble).requires_grad_(true);
    auto opt = sgd({.wd = 0.5})({ParamGroup{{param}, {}, {}}});
    opt->set_hyper("lr", 0.1);
    param.mutable_grad() = torch::zeros({3}, torch::kDouble);
    opt->step();
    CHECK(param[0].item<double>() == doctest::Approx(0.95).epsilon(1e-15));
  }

  TEST_CASE("no weight decay on BatchNorm and bias parameters by default") {
    torch::nn::Sequential model(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4), torch::nn::Linear(4, 2));
    Learner learn(synthetic_dls(), model, CrossEntropyLoss(), {}, quiet());
    learn.create_opt();
    const auto& group = learn.opt->param_groups().at(0);
    const auto named = model->named_parameters();
    REQUIRE(group.params.size() == named.size());
    for (size_t i = 0; i < named.size(); ++i) {
      const bool expect_wd = named[i].key() == "0.weight" || named[i].key() == "2.weight";
      CHECK_MESSAGE(group.do_wd[i] == expect_wd, named[i].key());
    }
    Learner with_wd(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet({.wd_bn_bias = true}));
    with_wd.create_opt();
    for (bool do_wd : with_wd.opt->param_groups()[0].do_wd) CHECK(do_wd);
  }

  TEST_CASE("unknown hyper-parameter names are rejected") {
    auto param = torch::ones({1}).requires_grad_(true);
    auto opt = adam()({ParamGroup{{param}, {}, {}}});
    CHECK(error_of([&] { opt->set_hyper("momentum", 0.9); }) ==
          "unknown hyper-parameter 'momentum': use one of lr, mom, sqr_mom, wd, eps");
  }
}
