// Learner::summary: one batch through the model in eval mode, a row per layer.
#include <torch/torch.h>

#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "core/exception_text.h"
#include "learner/learner.h"
#include "core/sequential.h"

namespace fastcpp {
namespace {

// "torch::nn::Conv2dImpl" -> "Conv2d"
std::string type_name(const torch::nn::Module& module) {
  std::string name = module.name();
  if (const auto colon = name.rfind("::"); colon != std::string::npos) name = name.substr(colon + 2);
  if (name.size() > 4 && name.compare(name.size() - 4, 4, "Impl") == 0) name.resize(name.size() - 4);
  return name;
}

struct Row {
  std::string layer, shape;
  int64_t params = 0, trainable = 0;
};

Row row_for(const std::string& name, const torch::nn::Module& module, const torch::Tensor& out) {
  Row row{name + " (" + type_name(module) + ")", c10::str(out.sizes())};
  for (const auto& p : module.parameters()) {
    row.params += p.numel();
    if (p.requires_grad()) row.trainable += p.numel();
  }
  return row;
}

}  // namespace

std::string Learner::summary() {
  torch::Tensor input;
  for (const auto& batch : dls.valid) {
    input = batch.x;
    break;
  }
  if (!input.defined()) throw Error("summary: the validation set is empty; a batch is needed to trace the shapes");

  auto& module = model.module();
  struct KeepMode {  // also when a layer fails
    torch::nn::Module& module;
    bool training;
    ~KeepMode() { module.train(training); }
  } keep_mode{module, module.is_training()};
  module.eval();
  std::vector<Row> rows;
  {
    torch::NoGradGuard no_grad;
    auto x = input;
    const auto traced = [&](const std::string& name, const auto& forward) {
      try {
        x = forward(x);
      } catch (const c10::Error& e) {
        const auto text = exception_text(e);
        throw Error("summary: '" + name + "' fails on an input of shape " + c10::str(x.sizes()) + ": " +
                    text.substr(0, text.find('\n')));
      }
    };
    if (auto* seq = dynamic_cast<torch::nn::SequentialImpl*>(&module)) {
      for (auto& layer : named_layers(*seq)) {
        traced(layer.name, [&](const torch::Tensor& in) { return layer.any.forward(in); });
        rows.push_back(row_for(layer.name, *layer.module, x));
      }
    } else {
      traced("model", [&](const torch::Tensor& in) { return model(in); });
      rows.push_back(row_for("model", module, x));
    }
  }

  std::ostringstream out;
  char line[256];
  out << type_name(module) << " (input " << input.sizes() << ")\n";
  std::snprintf(line, sizeof line, "%-36s %-22s %12s  %s\n", "Layer (type)", "Output Shape", "Param #", "Trainable");
  out << line << std::string(84, '=') << "\n";
  int64_t total = 0, trainable = 0;
  for (const auto& row : rows) {
    const char* flag = row.params == 0 ? "" : row.trainable == row.params ? "True" : row.trainable == 0 ? "False" : "Partly";
    std::snprintf(line, sizeof line, "%-36s %-22s %12lld  %s\n", row.layer.c_str(), row.shape.c_str(),
                  static_cast<long long>(row.params), flag);
    out << line;
    total += row.params;
    trainable += row.trainable;
  }
  out << std::string(84, '=') << "\n"
      << "Total params: " << total << "\nTotal trainable params: " << trainable
      << "\nTotal non-trainable params: " << total - trainable << "\n";
  if (frozen_groups_ > 0)
    out << "Frozen: the first " << frozen_groups_ << " of " << n_param_groups() << " parameter groups (norm layers "
        << (options_.train_bn ? "trainable" : "frozen") << ")\n";
  out << "Callbacks:";
  for (const auto& cb : *cbs_) out << " " << cb->name();
  out << "\n";
  return out.str();
}

}  // namespace fastcpp
