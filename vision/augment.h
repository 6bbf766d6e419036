#pragma once
// aug_transforms: fastai's batch augmentation, on the batch's device (the GPU when the
// loader's device is one, else the loader's workers). Flip (or the 8 dihedral
// orientations), rotate, zoom and a perspective warp compose into one projective map
// per item and one grid_sample for the batch; brightness and contrast compose in logit
// space, sigmoid((logit(x) + logit(brightness)) * contrast). A mask batch (y of shape
// [B, H, W] with x's height and width) moves with its images, resampled by nearest
// neighbour, never interpolated; a box batch (y [B, boxes, 5]: x1 y1 x2 y2 label, label -1
// padding, detection_data.h; integer boxes come out as float) as the boxes bounding their
// moved corners, clipped, those left without area dropped (for detection, PadMode::Zeros:
// reflection shows objects that have no box). Images come out as float in [0, 1] (uint8
// read as x/255), so Normalize follows as usual.
//
//   auto dls = vision::ImageDataLoaders::from_folder(root, {.item_tfms = {vision::Resize(224)},
//       .batch_tfms = {Normalize::imagenet()}, .aug_tfms = {vision::aug_transforms()}});
//
// Each item's draws come from the batch's seed (data/batch_augment.h) with fastai's
// probabilities: the flip with 0.5, rotation, zoom and each warp axis with p_affine,
// brightness and contrast each with p_lighting; the values fastai's would draw. Given
// the same draws (fastai's `draw` arguments), the output is fastai's.
#include <optional>
#include <utility>
#include <vector>

#include "data/batch_augment.h"
#include "vision/pad_mode.h"

namespace fastcpp::vision {

struct AugOptions {
  double mult = 1.0;            // scales max_rotate, max_lighting and max_warp
  bool do_flip = true;
  bool flip_vert = false;       // the 8 dihedral orientations instead of a left-right flip
  double max_rotate = 10.0;     // degrees
  double min_zoom = 1.0;
  double max_zoom = 1.1;
  double max_lighting = 0.2;
  double max_warp = 0.2;
  double p_affine = 0.75;
  double p_lighting = 0.75;
  std::optional<std::pair<int64_t, int64_t>> size;  // output height and width; default: the input's
  PadMode pad_mode = PadMode::Reflection;
  int mask_fill = 0;            // masks' value where PadMode::Zeros pads (the segmentation loaders set theirs)
  bool align_corners = true;
  bool batch = false;           // one draw for the whole batch
  // Below 1, fastai's presizing recipe (aug_transforms(size=224, min_scale=0.75)): after the
  // moves above, a square crop of at least min_scale of the image's area at a random place
  // (as fastai's RandomResizedCropGPU with ratio 1, in the same grid_sample), resized to
  // `size`, which it needs. Where the square would not fit (a wide image) it is the shorter
  // side's, at a random place (fastai draws again up to 10 times, then takes the centre).
  // Each item draws its own (fastai's one for the batch), unless `batch`.
  double min_scale = 1.0;
  // min_scale's validation form: the centre square, as fastai's on the validation set.
  bool centre_square = false;
};

// One item's draws; the defaults change nothing.
struct AugDraw {
  int dihedral = 0;             // 0: as is; 1: flipped left-right; 2..7: the other dihedral orientations
  double rotate = 0;            // degrees
  double zoom = 1, zoom_col = 0.5, zoom_row = 0.5;  // scale, and its centre as fractions of width and height
  double warp_x = 0, warp_y = 0;
  double brightness = 0.5, contrast = 1;
  // With min_scale: the crop's share of the image's area, and where it lies as fractions
  // of the room left above it and left of it.
  double crop_area = 1, crop_row = 0.5, crop_col = 0.5;
};

class AugTransforms : public BatchAugment {
 public:
  explicit AugTransforms(AugOptions options = {});
  Batch apply(Batch batch, uint64_t seed) const override;
  // On validation data: the resize to `size` alone (after the centre square with
  // min_scale), or nothing.
  BatchAugmentPtr validation() const override;
  // That resize alone has one: "AugResize HEIGHT WIDTH reflection|border|zeros ALIGN_CORNERS(0|1)",
  // then " centre_square" where it crops it.
  std::string spec() const override;

  // The draws of a batch of n items.
  std::vector<AugDraw> draw(size_t n, uint64_t seed) const;
  // The batch with these draws (one per item).
  Batch apply_draws(Batch batch, const std::vector<AugDraw>& draws) const;
  const AugOptions& options() const { return options_; }
  // Boxes [n, 4] (x1 y1 x2 y2) in the pixels of this resize's output back to those of its
  // input, `height` x `width`, clipped to it: a detector's boxes after an exported model's
  // resize. Only for a resize alone (spec() not empty), the form an export carries.
  torch::Tensor boxes_to_input(const torch::Tensor& boxes, int64_t height, int64_t width) const;

 private:
  AugOptions options_;
};

// An Error, naming `who`, unless each of `resizes` is an AugTransforms resize alone (a
// validation form): what boxes_before_resizes can undo, checked before a model runs.
void check_boxes_can_go_back(const std::vector<BatchAugmentPtr>& resizes, const std::string& who);
// Boxes [n, 4] in the pixels of a batch made by `resizes` (validation forms: each an
// AugTransforms resize alone, or none) back in those of its items, `height` x `width`:
// fastai's presizing undone, from the last resize to the first. An Error for another kind.
torch::Tensor boxes_before_resizes(const std::vector<BatchAugmentPtr>& resizes, torch::Tensor boxes, int64_t height,
                                   int64_t width);

BatchAugmentPtr aug_transforms(AugOptions options = {});
// The batch augmentation of a text form (AugTransforms::spec); an Error naming it otherwise.
BatchAugmentPtr batch_augment_from_spec(const std::string& spec);

}  // namespace fastcpp::vision
