#pragma once
// The mark of a normalization layer that torch does not define (SyncBatchNorm, or a
// program's own): the optimizer treats its parameters as fastai treats BatchNorm's
// (trainable while the body is frozen, no weight decay). Torch's own norm layers are
// known by their types.
namespace fastcpp {

struct NormLayer {
  virtual ~NormLayer() = default;
};

}  // namespace fastcpp
