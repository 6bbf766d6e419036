#include "vision/segmentation.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "core/error.h"
#include "learner/class_indices.h"
#include "learner/learner.h"

namespace fastcpp::vision {
namespace {

namespace F = torch::nn::functional;

void check_masks(const std::string& who, const torch::Tensor& pred, const torch::Tensor& target) {
  if (pred.dim() < 3 || target.dim() != pred.dim() - 1 || target.size(0) != pred.size(0) ||
      target.sizes().slice(1) != pred.sizes().slice(2))
    throw Error(who + ": expected outputs [N, C, H, W] and masks [N, H, W], got " + c10::str(pred.sizes()) + " and " +
                c10::str(target.sizes()));
}

// The masks as class indices the kernel may read: a value that is neither a class of the
// output nor ignore_index is an Error naming it.
torch::Tensor checked_classes(const std::string& who, const torch::Tensor& pred, const torch::Tensor& target,
                              int64_t ignore_index, DeviceCheck& checks) {
  check_masks(who, pred, target);
  const int64_t classes = pred.size(1);
  const int64_t pixels = std::max<int64_t>(target.numel() / std::max<int64_t>(target.size(0), 1), 1);  // an image's
  return checked_class_indices(
      target, classes, ignore_index, checks, [=](int64_t value, int64_t position, const char*) {
        return who + ": mask value " + std::to_string(value) + " (image " + std::to_string(position / pixels) +
               " of the batch) is not a class of the model's " + std::to_string(classes) +
               " outputs nor the ignore_index (" + std::to_string(ignore_index) +
               "): a void value is the loaders' void_index, or the loss's ignore_index";
      });
}

Loss::Activation softmax_over_classes() {
  return [](const torch::Tensor& pred) { return torch::softmax(pred, 1); };
}

// The void index a metric leaves out: its own, else the data's (DataLoaders::void_index).
std::optional<int64_t> void_of(const SegmentationMetricOptions& options, const Learner& learn) {
  return options.void_index ? options.void_index : learn.dls.void_index;
}

// The argmax predictions and the masks, flattened, and 1 where a pixel counts (0 where
// its mask is void): a weight rather than a selection, which would read its size back.
struct Pixels {
  torch::Tensor pred, target, counts;
};

Pixels decided_pixels(const torch::Tensor& output, const torch::Tensor& mask, const std::string& who,
                      std::optional<int64_t> void_index) {
  check_masks(who, output, mask);
  Pixels pixels{output.detach().argmax(1).reshape(-1), mask.detach().reshape(-1).to(torch::kLong), {}};
  pixels.counts = void_index ? (pixels.target != *void_index).to(torch::kDouble)
                             : torch::ones_like(pixels.target, torch::kDouble);
  return pixels;
}

// The confusion matrix of the decided pixels, [C + 1, C] (row: the mask's class,
// column: the prediction), void pixels left out: one count per pixel into bins, O(pixels)
// memory, and no read back to size it as bincount's would on a GPU. Row C holds the
// pixels whose mask value is no class (nor the void index): their predictions count in
// the union, as fastai's metrics count them.
torch::Tensor confusion(const torch::Tensor& output, const torch::Tensor& mask, const std::string& who,
                        std::optional<int64_t> void_index) {
  check_masks(who, output, mask);
  const int64_t n = output.size(1);
  const auto pred = output.detach().argmax(1).reshape(-1);
  const auto target = mask.detach().reshape(-1).to(torch::kLong);
  auto bins = target.clamp(-1, n).masked_fill_(target < 0, n).mul_(n).add_(pred);
  if (void_index) bins.masked_fill_(target == *void_index, (n + 1) * n);  // a last bin, dropped
  auto counts = torch::zeros({(n + 1) * n + 1}, bins.options());
  counts.index_add_(0, bins, torch::ones({1}, bins.options()).expand_as(bins));
  return counts.narrow(0, 0, (n + 1) * n).view({n + 1, n});
}

// Each class's intersection and union (in pixels) of a confusion matrix: [C] each. A void
// index that is a class's code (CamVid's 'Void') is no class: 0 and 0, so its score is NaN
// and left out of the mean (its pixels are not in the matrix; a prediction of it elsewhere
// counts against the pixel's own class).
std::pair<torch::Tensor, torch::Tensor> class_overlaps(const torch::Tensor& confusion,
                                                       std::optional<int64_t> void_index) {
  const auto cm = confusion.to(torch::kDouble);
  const auto classes = cm.narrow(0, 0, cm.size(1));
  auto inter = classes.diagonal().clone(), uni = cm.sum(0) + classes.sum(1);
  if (void_index && *void_index >= 0 && *void_index < cm.size(1)) {
    inter[*void_index].zero_();
    uni[*void_index].zero_();
  }
  return {inter, uni};
}

// Sums of intersections and unions over the epoch, kept on the device (no sync per batch).
class OverlapMetric : public Metric {
 public:
  enum class Score { dice, jaccard };
  OverlapMetric(std::string name, Score score, bool per_class, SegmentationMetricOptions options)
      : name_(std::move(name)), score_(score), per_class_(per_class), options_(options) {}
  std::string name() const override { return name_; }
  void reset() override { inter_ = union_ = torch::Tensor(); }
  void accumulate(const Learner& learn) override {
    torch::Tensor inter, uni;
    if (per_class_) {
      const auto void_index = void_of(options_, learn);
      std::tie(inter, uni) = class_overlaps(confusion(learn.pred, learn.yb, name_, void_index), void_index);
    } else {  // fastai's binary Dice multiplies and adds the class indices themselves
      const auto pixels = decided_pixels(learn.pred, learn.yb, name_, void_of(options_, learn));
      inter = ((pixels.pred * pixels.target).to(torch::kDouble) * pixels.counts).sum().reshape({1});
      uni = ((pixels.pred + pixels.target).to(torch::kDouble) * pixels.counts).sum().reshape({1});
    }
    inter_ = inter_.defined() ? inter_ + inter : inter;
    union_ = union_.defined() ? union_ + uni : uni;
  }
  // The mean over the classes present in predictions or masks (the others are NaN).
  double value() const override {
    if (!inter_.defined()) return std::nan("");
    return scores().nanmean().item<double>();
  }
  bool per_class() const { return per_class_; }
  std::vector<double> class_scores() const {
    if (!inter_.defined()) throw Error("per_class_scores: " + name_ + " has seen no batch");
    const auto all = scores().cpu();
    return {all.data_ptr<double>(), all.data_ptr<double>() + all.numel()};
  }

 private:
  // Each class's score; 0 / 0 (a class absent from predictions and masks) is NaN.
  torch::Tensor scores() const {
    return score_ == Score::dice ? 2 * inter_ / union_ : inter_ / (union_ - inter_);
  }

  std::string name_;
  Score score_;
  bool per_class_;
  SegmentationMetricOptions options_;
  torch::Tensor inter_, union_;
};

// A summed loss over the pixels not ignored, as torch's mean, but 0 where every pixel is
// (torch's 0 / 0 is NaN, which mixed precision takes for a diverged model): a crop wholly
// in void has nothing to learn, not an error.
torch::Tensor mean_over_counted(const torch::Tensor& sum, const torch::Tensor& classes,
                                const FlatLossOptions& options) {
  return sum / classes.ne(options.ignore_index).sum().clamp_min(1);
}

}  // namespace

Loss CrossEntropyLossFlat(FlatLossOptions options) {
  auto checks = std::make_shared<DeviceCheck>();
  // The loss reduced as asked (ignored pixels add 0), and the checked class indices.
  const auto ce = [options, checks](const torch::Tensor& pred, const torch::Tensor& target,
                                    F::CrossEntropyFuncOptions::reduction_t reduction) {
    const auto classes = checked_classes("CrossEntropyLossFlat", pred, target, options.ignore_index, *checks);
    const auto how = F::CrossEntropyFuncOptions().ignore_index(options.ignore_index).reduction(reduction);
    return std::pair{F::cross_entropy(pred, classes, how), classes};
  };
  return Loss(
      [ce, options](const torch::Tensor& pred, const torch::Tensor& target) {
        const auto [sum, classes] = ce(pred, target, torch::kSum);
        return mean_over_counted(sum, classes, options);
      },
      softmax_over_classes(),
      // Each pixel's: Loss::per_item averages each image's, as fastai's get_preds(with_loss=True),
      // the ignored pixels counting 0.
      [ce](const torch::Tensor& pred, const torch::Tensor& target) { return ce(pred, target, torch::kNone).first; },
      "softmax_classes")
      .share_checks(checks);
}

Loss FocalLossFlat(double gamma, FlatLossOptions options) {
  auto checks = std::make_shared<DeviceCheck>();
  return Loss(
      [gamma, options, checks](const torch::Tensor& pred, const torch::Tensor& target) {
        const auto classes = checked_classes("FocalLossFlat", pred, target, options.ignore_index, *checks);
        const auto ce = F::cross_entropy(
            pred, classes, F::CrossEntropyFuncOptions().ignore_index(options.ignore_index).reduction(torch::kNone));
        // An ignored pixel's ce is 0: it adds nothing, and is not counted.
        return mean_over_counted(((1 - torch::exp(-ce)).pow(gamma) * ce).sum(), classes, options);
      },
      softmax_over_classes(), nullptr, "softmax_classes")
      .share_checks(checks);
}

Loss DiceLoss(DiceLossOptions options) {
  // 1 - dice of each item and class, [N, C]. A mask value outside the classes (void) is no
  // class: its pixel's one-hot row is all zeros, as fastai's.
  auto per_class = [options](const torch::Tensor& pred, const torch::Tensor& target) {
    check_masks("DiceLoss", pred, target);
    const auto probs = torch::softmax(pred, 1);
    std::vector<int64_t> class_shape(static_cast<size_t>(pred.dim()), 1);
    class_shape[1] = pred.size(1);
    const auto classes = torch::arange(pred.size(1), target.options().dtype(torch::kLong)).view(class_shape);
    const auto one_hot = target.to(torch::kLong).unsqueeze(1).eq(classes).to(probs.dtype());
    std::vector<int64_t> pixel_dims;
    for (int64_t d = 2; d < pred.dim(); ++d) pixel_dims.push_back(d);
    const auto inter = (probs * one_hot).sum(pixel_dims);
    const auto uni = ((options.square_in_union ? probs.pow(2) : probs) + one_hot).sum(pixel_dims);
    return 1 - (2 * inter + options.smooth) / (uni + options.smooth);
  };
  return Loss(
      [options, per_class](const torch::Tensor& pred, const torch::Tensor& target) {
        const auto loss = per_class(pred, target);
        return options.mean ? loss.mean() : loss.sum();
      },
      softmax_over_classes(),
      // fastai's get_preds(with_loss=True): the unreduced loss averaged over each item's classes
      [per_class](const torch::Tensor& pred, const torch::Tensor& target) { return per_class(pred, target).mean(1); },
      "softmax_classes");
}

MetricPtr dice(SegmentationMetricOptions options) {
  return std::make_shared<OverlapMetric>("dice", OverlapMetric::Score::dice, false, options);
}

MetricPtr jaccard_coeff(SegmentationMetricOptions options) {
  return std::make_shared<OverlapMetric>("jaccard_coeff", OverlapMetric::Score::jaccard, false, options);
}

MetricPtr dice_multi(SegmentationMetricOptions options) {
  return std::make_shared<OverlapMetric>("dice_multi", OverlapMetric::Score::dice, true, options);
}

MetricPtr jaccard_coeff_multi(SegmentationMetricOptions options) {
  return std::make_shared<OverlapMetric>("jaccard_coeff_multi", OverlapMetric::Score::jaccard, true, options);
}

std::vector<double> per_class_iou(const torch::Tensor& output, const torch::Tensor& masks,
                                  SegmentationMetricOptions options) {
  const auto [inter, uni] =
      class_overlaps(confusion(output, masks, "per_class_iou", options.void_index), options.void_index);
  const auto iou = (inter / (uni - inter)).cpu();  // 0 / 0: NaN for an absent class
  return {iou.data_ptr<double>(), iou.data_ptr<double>() + iou.numel()};
}

std::vector<double> per_class_scores(const Metric& metric) {
  const auto* overlap = dynamic_cast<const OverlapMetric*>(&metric);
  if (!overlap || !overlap->per_class())
    throw Error("per_class_scores: " + metric.name() +
                " is not a per-class Dice or IoU metric (dice_multi, jaccard_coeff_multi)");
  return overlap->class_scores();
}

MetricPtr foreground_acc(int64_t background, SegmentationMetricOptions options) {
  // fastai's per-batch accuracy weighted by batch size, but a batch without foreground
  // pixels (0 / 0 there) weighs nothing, where in fastai it makes the epoch's value NaN.
  // Summed on the device, read once at the epoch's end.
  class ForegroundAccuracy : public Metric {
   public:
    ForegroundAccuracy(int64_t background, SegmentationMetricOptions options)
        : background_(background), options_(options) {}
    std::string name() const override { return "foreground_acc"; }
    void reset() override { total_ = weight_ = torch::Tensor(); }
    void accumulate(const Learner& learn) override {
      const auto [decided, mask, counts] = decided_pixels(learn.pred, learn.yb, name(), void_of(options_, learn));
      const auto kept = counts * (mask != background_).to(torch::kDouble);
      const auto n_kept = kept.sum();
      const auto batch_weight = n_kept.gt(0).to(torch::kDouble) * static_cast<double>(learn.yb.size(0));
      const auto accuracy = ((decided == mask).to(torch::kDouble) * kept).sum() / n_kept.clamp_min(1);
      if (!total_.defined()) total_ = weight_ = torch::zeros({}, n_kept.options());
      total_ = total_ + accuracy * batch_weight;
      weight_ = weight_ + batch_weight;
    }
    double value() const override {
      const double weight = weight_.defined() ? weight_.item<double>() : 0;
      return weight == 0 ? std::nan("") : total_.item<double>() / weight;
    }

   private:
    int64_t background_;
    SegmentationMetricOptions options_;
    torch::Tensor total_, weight_;
  };
  return std::make_shared<ForegroundAccuracy>(background, options);
}

}  // namespace fastcpp::vision
