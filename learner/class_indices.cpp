#include "learner/class_indices.h"

#include <torch/torch.h>

#include "core/error.h"

namespace fastcpp {

torch::Tensor checked_class_indices(const torch::Tensor& indices, int64_t n_classes, std::optional<int64_t> ignore,
                                    DeviceCheck& checks, const ClassIndexMessage& message) {
  const auto labels = indices.to(torch::kLong).contiguous();
  if (labels.numel() == 0) return labels;  // nothing to check (argmax below needs an element)
  const auto ignored = [&](int64_t value) { return ignore && value == *ignore; };
  if (labels.is_cpu()) {  // read in place: no operator dispatched per batch
    const auto* label = labels.data_ptr<int64_t>();
    for (int64_t position = 0; position < labels.numel(); ++position)
      if ((label[position] < 0 || label[position] >= n_classes) && !ignored(label[position]))
        throw Error(message(label[position], position, "the batch"));
    return labels;  // the kernels read them so: copied once, if at all
  }
  torch::NoGradGuard no_grad;
  auto bad = (labels < 0).logical_or_(labels >= n_classes);
  if (ignore) bad.logical_and_(labels != *ignore);
  const auto flat = bad.reshape(-1);
  const auto position = flat.to(torch::kByte).argmax().reshape({1});
  const auto found = torch::cat(
      {flat.any().to(torch::kLong).reshape({1}), position, labels.reshape(-1).index_select(0, position)});
  checks.post(found, [message](const std::vector<int64_t>& values) { return message(values[2], values[1], "a batch"); });
  return labels.masked_fill(bad, ignore.value_or(0));
}

}  // namespace fastcpp
