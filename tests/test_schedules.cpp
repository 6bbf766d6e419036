// Schedules: the annealing functions, combine_scheds, and the lr/mom values that
// fit_one_cycle, fit_flat_cos and discriminative lrs produce at every iteration.
#include "helpers.h"

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

// Records every group's lr and mom before each training step.
class HyperProbe : public Callback {
 public:
  HyperProbe() { order = 100; }
  void before_step() override {
    lrs.push_back(learn().opt->hyper("lr"));
    moms.push_back(learn().opt->hyper("mom"));
  }
  std::vector<std::vector<double>> lrs, moms;
};

double one_cycle_lr(double pos, double lr_max) {
  const double pct = 0.25;
  return pos < pct ? sched_cos(lr_max / 25, lr_max, pos / pct) : sched_cos(lr_max, lr_max / 1e5, (pos - pct) / (1 - pct));
}

double one_cycle_mom(double pos) {
  const double pct = 0.25;
  return pos < pct ? sched_cos(0.95, 0.85, pos / pct) : sched_cos(0.85, 0.95, (pos - pct) / (1 - pct));
}

}  // namespace

TEST_SUITE("schedules") {
  TEST_CASE("annealing functions") {
    CHECK(sched_lin(1, 3, 0.25) == doctest::Approx(1.5).epsilon(1e-15));
    CHECK(sched_cos(1e-2, 1e-7, 1.0 / 3) == doctest::Approx(7.500025e-3).epsilon(1e-12));
    CHECK(sched_cos(2, 4, 0) == doctest::Approx(2).epsilon(1e-15));
    CHECK(sched_cos(2, 4, 1) == doctest::Approx(4).epsilon(1e-15));
    CHECK(sched_exp(1e-7, 10, 0.5) == doctest::Approx(std::sqrt(1e-7 * 10)).epsilon(1e-12));
    CHECK(sched_no(3, 9, 0.7) == 3);
    // fastai's SchedPoly: start + (end - start) * pos ** power
    CHECK(sched_poly(0, 1, 0.5, 2) == doctest::Approx(0.25).epsilon(1e-15));
    CHECK(SchedPoly(1e-2, 1e-4, 0.5)(0.3) == doctest::Approx(0.004577546680698856).epsilon(1e-14));
    CHECK(SchedPoly(2, 1, 3)(0.25) == doctest::Approx(1.984375).epsilon(1e-15));
  }

  TEST_CASE("combine_scheds switches at the cumulative fractions") {
    auto sched = combine_scheds({0.3, 0.7}, {SchedLin(0, 1), SchedLin(1, 0)});
    CHECK(sched(0.0) == doctest::Approx(0.0));
    CHECK(sched(0.15) == doctest::Approx(0.5));
    CHECK(sched(0.3) == doctest::Approx(1.0));
    CHECK(sched(0.65) == doctest::Approx(0.5));
    CHECK(sched(1.0) == doctest::Approx(0.0));
    CHECK(error_of([] { combine_scheds({0.5, 0.6}, {SchedNo(1, 1), SchedNo(1, 1)}); }) ==
          "combine_scheds: fractions sum to 1.100000, not 1");
  }

  TEST_CASE("fit_one_cycle gives fastai's lrs and moms at every iteration") {
    Learner learn(synthetic_dls(8, 4, 2), tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    auto probe = learn.add_cb(HyperProbe());
    learn.fit_one_cycle(2, 1e-2);  // 2 epochs x 4 batches
    const std::vector<double> anchors{4e-4, 5.2e-3, 1e-2, 9.33013e-3, 7.50003e-3, 5.00005e-3, 2.50007e-3, 6.69966e-4};
    REQUIRE(probe->lrs.size() == 8);
    for (size_t i = 0; i < 8; ++i) {
      const double pos = i / 8.0;
      CHECK(probe->lrs[i][0] == doctest::Approx(anchors[i]).epsilon(1e-5));
      CHECK(probe->lrs[i][0] == doctest::Approx(one_cycle_lr(pos, 1e-2)).epsilon(1e-12));
      CHECK(probe->moms[i][0] == doctest::Approx(one_cycle_mom(pos)).epsilon(1e-12));
    }
    CHECK(learn.recorder->lrs.size() == 8);
    CHECK(learn.recorder->lrs[2] == doctest::Approx(1e-2).epsilon(1e-12));
  }

  TEST_CASE("fit_flat_cos keeps the lr flat for 75% then anneals") {
    Learner learn(synthetic_dls(8, 4, 2), tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    auto probe = learn.add_cb(HyperProbe());
    learn.fit_flat_cos(2, 1e-3);
    REQUIRE(probe->lrs.size() == 8);
    for (size_t i = 0; i < 6; ++i) CHECK(probe->lrs[i][0] == doctest::Approx(1e-3).epsilon(1e-12));
    CHECK(probe->lrs[6][0] == doctest::Approx(sched_cos(1e-3, 1e-8, 0.0)).epsilon(1e-12));
    CHECK(probe->lrs[7][0] == doctest::Approx(sched_cos(1e-3, 1e-8, 0.5)).epsilon(1e-12));
  }

  TEST_CASE("a slice spreads lrs over parameter groups") {
    CHECK(Lrs::slice(1e-3).for_groups(3) == std::vector<double>{1e-4, 1e-4, 1e-3});
    const auto spread = slice(1e-5, 1e-3).for_groups(3);
    CHECK(spread[0] == doctest::Approx(1e-5));
    CHECK(spread[1] == doctest::Approx(1e-4));
    CHECK(spread[2] == doctest::Approx(1e-3));
    // fastai's `if v.start:` reads a start of 0 as none
    CHECK(slice(0, 1e-3).for_groups(3) == std::vector<double>{1e-4, 1e-4, 1e-3});
    CHECK(error_of([] { slice(-1e-5, 1e-3).for_groups(3); }) == "slice(start, stop): start must be >= 0, got -1e-05");
    // A list, as fastai's: one per group, or one for all.
    CHECK(Lrs({1e-5, 2e-4, 1e-3}).for_groups(3) == std::vector<double>{1e-5, 2e-4, 1e-3});
    CHECK(Lrs(std::vector<double>{3e-3}).for_groups(2) == std::vector<double>{3e-3, 3e-3});
    CHECK(error_of([] { Lrs({1e-4, 1e-3}).for_groups(3); }) ==
          "Lrs: 2 learning rates for 3 parameter groups (one for each, or one for all)");

    Learner learn(synthetic_dls(8, 4, 2), tiny_model(), CrossEntropyLoss(), {}, quiet({.splitter = two_groups}));
    silence(learn);
    auto probe = learn.add_cb(HyperProbe());
    learn.fit_one_cycle(1, slice(1e-4, 1e-2));
    REQUIRE(probe->lrs.size() == 4);
    for (size_t i = 0; i < 4; ++i) {
      CHECK(probe->lrs[i][0] == doctest::Approx(one_cycle_lr(i / 4.0, 1e-4)).epsilon(1e-12));
      CHECK(probe->lrs[i][1] == doctest::Approx(one_cycle_lr(i / 4.0, 1e-2)).epsilon(1e-12));
    }
    probe->lrs.clear();
    learn.fit_one_cycle(1, {3e-4, 5e-3});
    REQUIRE(probe->lrs.size() == 4);
    for (size_t i = 0; i < 4; ++i) {
      CHECK(probe->lrs[i][0] == doctest::Approx(one_cycle_lr(i / 4.0, 3e-4)).epsilon(1e-12));
      CHECK(probe->lrs[i][1] == doctest::Approx(one_cycle_lr(i / 4.0, 5e-3)).epsilon(1e-12));
    }
  }

  TEST_CASE("pct_train runs from 0 to 1 - 1/N over the training batches") {
    Learner learn(synthetic_dls(8, 4, 2), tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    struct PctProbe : Callback {
      std::vector<double> seen;
      void before_batch() override {
        if (learn().training) seen.push_back(learn().pct_train);
      }
    };
    auto probe = learn.add_cb(PctProbe());
    learn.fit(2);
    REQUIRE(probe->seen.size() == 8);
    for (size_t i = 0; i < 8; ++i) CHECK(probe->seen[i] == doctest::Approx(i / 8.0).epsilon(1e-12));
  }
}
