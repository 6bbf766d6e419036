#pragma once
// Class indices checked before a loss kernel reads them: on a GPU an index outside the
// classes is a device-side assert, the end of the CUDA context.
#include <torch/types.h>

#include <functional>
#include <optional>
#include <string>

#include "core/device_check.h"

namespace fastcpp {

// `indices` as int64, each in [0, n_classes) or equal to `ignore`; another value is an
// Error saying message(value, position in the flattened indices, batch): at once on the
// CPU (batch "the batch"), read later through `checks` on a device (batch "a batch"), the
// kernel meanwhile reading it as `ignore`, or 0 without one.
using ClassIndexMessage = std::function<std::string(int64_t value, int64_t position, const char* batch)>;
torch::Tensor checked_class_indices(const torch::Tensor& indices, int64_t n_classes, std::optional<int64_t> ignore,
                                    DeviceCheck& checks, const ClassIndexMessage& message);

}  // namespace fastcpp
