#pragma once
// fastai's DynamicUnet: an encoder (a ResNet or XResNet body) whose activations at each
// change of resolution feed a decoder of UnetBlocks (PixelShuffle upsampling with ICNR
// initialisation, the skip through a BatchNorm, two convs), then a cross connection
// with the input (last_cross) and a 1x1 conv to n_out channels per pixel. Same layers,
// order, defaults, initialisation and state-dict keys as fastai 2.8's
// DynamicUnet(create_body(arch(), n_in, False, -2), n_out, img_size), so state dicts
// move between the two (layers.0.4.0.conv1.weight, layers.4.shuf.0.0.weight, ...).
//
//   auto unet = vision::DynamicUnet(vision::unet_encoder(vision::resnet34), {.n_out = 5, .img_size = {128, 128}});
//
// Unlike fastai's, which keeps the skip activations in forward hooks stored on the
// module, the skips pass through forward: replicas, threads and clones never share
// them, so to_parallel and the pipeline work as for any model. Any input size: where
// an upsampled map and its skip differ (odd sizes), the upsampled one is resized to the
// skip's by nearest neighbour, and the output to the input's, as fastai does.
// Norm layers are SyncBatchNorm (plain BatchNorm in one process, synchronized under
// to_distributed); the decoder's convs keep their bias and have no norm (fastai's
// norm_type None).
//
// A clone (to_parallel's replicas) copies every layer without drawing initial weights
// again: reset() leaves empty containers that torch's clone fills with copies, and the
// global random generator is as it was before (torch's own layers draw theirs while
// cloning), so a run makes the same draws with any number of replicas.
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distributed/sync_batchnorm.h"
#include "vision/arch.h"

namespace fastcpp::vision {

struct UnetOptions {
  int64_t n_out = 2;                  // channels of the output: classes per pixel
  std::vector<int64_t> img_size;      // {height, width} the decoder is laid out for (required)
  bool blur = false;                  // blur after each PixelShuffle (fastai's blur)
  bool blur_final = true;             // ... including the last block's, when blur is on
  bool self_attention = false;        // SelfAttention after the third block from the end's convs
  bool last_cross = true;             // concatenate the input before a final ResBlock
  bool bottle = false;                // that ResBlock halves the channels
  std::optional<std::pair<double, double>> y_range;  // sigmoid scaled into [low, high]
};

// The encoder fastai's create_body(arch, n_in, pretrained, -2) makes: the architecture's
// body (everything before the pooling; with `weights`, pretrained_body's) with its
// layers numbered 0, 1, ... (the DynamicUnet's layers.0.* keys).
torch::nn::Sequential unet_encoder(const Arch& arch, const BodyOptions& options = {}, const std::string& weights = {});
torch::nn::Sequential unet_encoder(const Body& body);

// One decoder step: upsample `up_in` (PixelShuffle_ICNR to half its channels), resize
// to the skip's size if they differ, concatenate with BatchNorm(skip), ReLU, two convs
// (the second followed by SelfAttention with self_attention).
struct UnetBlockImpl : torch::nn::Cloneable<UnetBlockImpl> {
  UnetBlockImpl(int64_t up_in_c, int64_t x_in_c, bool final_div, bool blur, bool self_attention = false);
  void reset() override;  // empty layers, for a clone to fill
  torch::Tensor forward(const torch::Tensor& up_in, const torch::Tensor& skip);

  int64_t up_in_c, x_in_c;
  bool final_div, blur, self_attention;
  Stage shuf{nullptr};
  distributed::SyncBatchNorm bn{nullptr};
  Stage conv1{nullptr}, conv2{nullptr};
};
TORCH_MODULE(UnetBlock);

// fastai's ResBlock with norm_type None, the one after the cross connection: two 3x3
// convs with bias (the first with a ReLU) plus the input, or its 1x1 conv + BatchNorm
// where the width changes (bottle), then a ReLU.
struct UnetResBlockImpl : torch::nn::Cloneable<UnetResBlockImpl> {
  UnetResBlockImpl(int64_t ni, int64_t nf);
  void reset() override;  // empty layers, for a clone to fill
  torch::Tensor forward(const torch::Tensor& x);

  int64_t ni, nf;
  Stage convpath{nullptr}, idpath{nullptr};  // idpath empty: the identity
};
TORCH_MODULE(UnetResBlock);

struct DynamicUnetImpl : torch::nn::Cloneable<DynamicUnetImpl> {
  // Throws fastcpp::Error for a missing img_size or an encoder that never reduces the
  // resolution. (With fewer than 3 blocks, self_attention adds nothing, as fastai's.)
  DynamicUnetImpl(torch::nn::Sequential encoder, UnetOptions options);
  void reset() override;  // an empty list of layers, for a clone to fill
  // A copy of every layer; the global random generator left as it was.
  std::shared_ptr<torch::nn::Module> clone(const std::optional<torch::Device>& device = std::nullopt) const override;
  torch::Tensor forward(const torch::Tensor& x);

  const UnetOptions& options() const { return options_; }
  torch::nn::Sequential encoder() const;

  // fastai's indices: 0 encoder, 1 BatchNorm, 2 ReLU, 3 middle convs, then the
  // UnetBlocks, [a last PixelShuffle_ICNR], ResizeToOrig, [MergeLayer, ResBlock], the
  // final conv, [SigmoidRange], ToTensorBase. The layers without parameters are kept as
  // placeholders, so that the indices (and so the state-dict keys) match; forward
  // reaches every layer through this list (a clone replaces its contents).
  torch::nn::ModuleList layers{nullptr};

 private:
  void build(torch::nn::Sequential encoder);

  UnetOptions options_;
  std::vector<int64_t> skip_layers_;  // encoder layers whose outputs feed the blocks, deepest first
  int64_t first_block_ = 4, final_shuffle_ = -1, cross_block_ = -1, final_conv_ = -1;
};
// The module holder, as TORCH_MODULE makes, plus a constructor that takes the options
// as a braced list: DynamicUnet(encoder, {.n_out = 5, .img_size = {128, 128}}).
class DynamicUnet : public torch::nn::ModuleHolder<DynamicUnetImpl> {
 public:
  using torch::nn::ModuleHolder<DynamicUnetImpl>::ModuleHolder;
  DynamicUnet(torch::nn::Sequential encoder, UnetOptions options)
      : ModuleHolder(std::make_shared<DynamicUnetImpl>(std::move(encoder), std::move(options))) {}
};

}  // namespace fastcpp::vision
