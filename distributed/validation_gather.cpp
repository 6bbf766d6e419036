#include "distributed/validation_gather.h"

#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/padding.h"
#include "distributed/process_group.h"

namespace fastcpp::distributed {
namespace {

// "[4, 3]" of a row of sizes.
std::string shape_text(const torch::Tensor& sizes_row) {
  const auto row = sizes_row.contiguous();
  return c10::str(c10::IntArrayRef(row.data_ptr<int64_t>(), static_cast<size_t>(row.numel())));
}

// The sizes of each rank's tensor, [world, dim], in one gather of fixed-length records
// (its number of dimensions, then up to kMaxDims sizes): a gather of unequal lengths would
// read past the shorter. Every rank throws the same Error where the ranks' `what` differ
// in their number of dimensions, or have too many.
constexpr int64_t kMaxDims = 8;

torch::Tensor gathered_sizes(Communicator& comm, const torch::Tensor& tensor, const std::string& what) {
  auto record = torch::zeros({1 + kMaxDims}, torch::kLong);
  const int64_t dim = tensor.dim(), kept = std::min(dim, kMaxDims);
  record[0] = dim;
  record.narrow(0, 1, kept).copy_(torch::tensor(tensor.sizes().vec(), torch::kLong).narrow(0, 0, kept));
  const auto records = comm.all_gather(record.to(tensor.device())).cpu();
  const auto dims = records.select(1, 0).contiguous();
  if (!dims.eq(dims[0]).all().item<bool>())
    throw Error("to_distributed: the ranks' validation " + what + " differ in their number of dimensions (" +
                shape_text(dims) + ", rank by rank)");
  if (dim > kMaxDims)
    throw Error("to_distributed: validation " + what + " of " + std::to_string(dim) + " dimensions; at most " +
                std::to_string(kMaxDims) + " are gathered");
  return records.narrow(1, 1, dim);
}

}  // namespace

torch::Tensor gather_padded(Communicator& comm, const torch::Tensor& tensor) {
  const auto sizes = gathered_sizes(comm, tensor, "targets");
  if (tensor.dim() < 2) return comm.all_gather(tensor);  // [batch]: the same on every rank
  const auto most = std::get<0>(sizes.max(0)).contiguous();
  return comm.all_gather(padded_to(tensor, std::vector<int64_t>(most.data_ptr<int64_t>(),
                                                                most.data_ptr<int64_t>() + most.numel()), -1));
}

torch::Tensor gather_same_shape(Communicator& comm, const torch::Tensor& pred) {
  const auto sizes = gathered_sizes(comm, pred, "predictions");
  for (int64_t r = 1; r < sizes.size(0); ++r)
    if (!torch::equal(sizes[r], sizes[0]))
      throw Error("to_distributed: the ranks' validation predictions differ in shape (" + shape_text(sizes[0]) +
                  " on rank 0, " + shape_text(sizes[r]) + " on rank " + std::to_string(r) +
                  "); give the validation items one size (a Resize) to gather them");
  return comm.all_gather(pred);
}

}  // namespace fastcpp::distributed
