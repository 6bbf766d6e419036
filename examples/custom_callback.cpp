// Writing your own callbacks: two examples, trained on Fashion-MNIST.
//
//   custom_callback [--epochs 2] [--data DIR] [--threads N]
//
// A callback overrides the events it needs (fastai's names: before_fit, before_batch,
// after_backward, after_step, before_validate, ...) and reads or changes the Learner
// through learn(): the batch (xb, yb), the prediction and loss, the model, the
// optimizer, the position in training (epoch, iter, pct_train), `training`.
#include <fastcpp.h>

#include "fashion_model.h"

#include <iostream>

using namespace fastcpp;

// Logs the global L2 norm of the gradients: read after backward (before the optimizer
// step and any clipping), averaged over each epoch and added as a column of the table.
class GradNormLogger : public Callback {
 public:
  // The recorder reads the column when it writes the epoch's row.
  void after_create() override {
    learn().recorder->add_column(*this, "grad norm", [this] { return count_ ? sum_ / count_ : std::nan(""); });
  }
  void before_epoch() override { sum_ = 0, count_ = 0; }
  void after_backward() override {
    if (!learn().training) return;
    double squares = 0;
    for (const auto& p : learn().model.module().parameters())
      if (p.grad().defined()) squares += p.grad().pow(2).sum().item<double>();
    sum_ += std::sqrt(squares);
    ++count_;
  }

 private:
  double sum_ = 0;
  int count_ = 0;
};

// Keeps an exponential moving average of the weights (parameters and the norm layers'
// running statistics, updated after every optimizer step) and validates with it: the
// averaged weights are swapped in before validation and the trained ones back after.
// The decay warms up as (1 + steps) / (10 + steps), so early averages do not lean on
// the random initialization. It changes the model's state, so it runs late (order 60)
// and restores the weights even if validation is cancelled.
class WeightEMA : public Callback {
 public:
  explicit WeightEMA(double decay = 0.99) : decay_(decay) { order = 60; }
  void before_fit() override {
    ema_.clear();
    steps_ = 0;
    for (const auto& t : averaged()) ema_.push_back(t.detach().clone());
  }
  void after_step() override {
    torch::NoGradGuard no_grad;
    const double decay = std::min(decay_, (1.0 + steps_) / (10.0 + steps_));
    ++steps_;
    const auto tensors = averaged();
    for (size_t i = 0; i < tensors.size(); ++i) ema_[i].lerp_(tensors[i], 1 - decay);
  }
  void before_validate() override { swap(); }
  void after_validate() override { swap(); }
  void after_cancel_validate() override { swap(); }

 private:
  // The floating-point state of the model (a step counter buffer is left as it is).
  std::vector<torch::Tensor> averaged() const {
    auto tensors = learn().model.module().parameters();
    for (const auto& b : learn().model.module().buffers())
      if (b.is_floating_point()) tensors.push_back(b);
    return tensors;
  }
  void swap() {
    torch::NoGradGuard no_grad;
    const auto tensors = averaged();
    for (size_t i = 0; i < tensors.size(); ++i) {
      auto trained = tensors[i].clone();
      tensors[i].copy_(ema_[i]);
      ema_[i].copy_(trained);
    }
  }
  double decay_;
  int64_t steps_ = 0;
  std::vector<torch::Tensor> ema_;
};

int main(int argc, char** argv) {
  int epochs = 2, threads = usable_cores();
  std::string data = vision::fashion_mnist_dir();
  CommandLine cli("custom_callback", "Fashion-MNIST with two callbacks of the program's own: a gradient-norm "
                                     "logger and an exponential moving average of the weights used for validation.");
  cli.flag("--epochs", epochs, "epochs to train").range(0, 100000);
  cli.flag("--data", data, "the folder of Fashion-MNIST's idx files");
  cli.flag("--threads", threads, "CPU threads").range(1, 4096);
  cli.example("custom_callback --epochs 1");
  cli.parse(argc, argv);
  torch::set_num_threads(threads);
  torch::manual_seed(42);
  try {
    const std::vector<BatchTransform> tfms{Normalize{{0.2860}, {0.3530}}};
    DataLoaders dls{DataLoader(vision::idx_image_dataset(data, "train"), {.bs = 128, .shuffle = true, .batch_tfms = tfms}),
                    DataLoader(vision::idx_image_dataset(data, "t10k"), {.bs = 256, .batch_tfms = tfms})};
    Learner learn(dls, make_model(), CrossEntropyLoss(), {metrics::accuracy()},
                  {.cbs = {std::make_shared<GradNormLogger>(), std::make_shared<WeightEMA>()}});
    learn.fit_one_cycle(epochs, 1e-2);
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
