#include "vision/detection/coco_eval.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "learner/learner.h"

namespace fastcpp::vision {
namespace {

constexpr int kThresholds = 10, kRecallPoints = 101;

// numpy's linspace(start, stop, n): i * step + start, the last exactly stop.
std::vector<double> linspace(double start, double stop, int n) {
  std::vector<double> values(n);
  const double step = (stop - start) / (n - 1);
  for (int i = 0; i < n; ++i) values[i] = i * step + start;
  values[n - 1] = stop;
  return values;
}

// x, y, width, height in double from x1 y1 x2 y2 (pycocotools' boxes, as a COCO result
// file would give them).
std::vector<std::array<double, 4>> coco_boxes(const torch::Tensor& xyxy) {
  const auto boxes = xyxy.detach().to(torch::kCPU, torch::kDouble).contiguous();
  std::vector<std::array<double, 4>> out(boxes.size(0));
  const auto* p = boxes.data_ptr<double>();
  for (size_t i = 0; i < out.size(); ++i, p += 4) out[i] = {p[0], p[1], p[2] - p[0], p[3] - p[1]};
  return out;
}

std::string shape(const torch::Tensor& t) { return t.defined() ? c10::str(t.sizes()) : "none"; }

template <class T>
std::vector<T> values_of(const torch::Tensor& t, torch::ScalarType type) {
  const auto c = t.detach().to(torch::kCPU, type).contiguous();
  return std::vector<T>(c.data_ptr<T>(), c.data_ptr<T>() + c.numel());
}

// pycocotools' bbIou: for a crowd region, the part of the detection inside it.
double iou(const std::array<double, 4>& d, const std::array<double, 4>& g, bool crowd) {
  const double w = std::min(d[0] + d[2], g[0] + g[2]) - std::max(d[0], g[0]);
  if (w <= 0) return 0;
  const double h = std::min(d[1] + d[3], g[1] + g[3]) - std::max(d[1], g[1]);
  if (h <= 0) return 0;
  const double inter = w * h;
  return inter / (crowd ? d[2] * d[3] : d[2] * d[3] + g[2] * g[3] - inter);
}

// What a detection is at one IoU threshold; one inside a crowd region counts as neither
// right nor wrong.
enum class Outcome : uint8_t { wrong, right, in_crowd };

// The mean of the entries above -1 (pycocotools' summarize); -1 where there are none.
double mean_counted(const std::vector<double>& values) {
  double sum = 0;
  int64_t n = 0;
  for (const auto v : values)
    if (v > -1) {
      sum += v;
      ++n;
    }
  return n ? sum / n : -1;
}

}  // namespace

CocoEvaluator::CocoEvaluator(int64_t num_classes, int64_t max_detections)
    : num_classes_(num_classes), max_detections_(max_detections) {
  if (num_classes < 1) throw Error("CocoEvaluator: num_classes must be positive");
  if (max_detections < 1)
    throw Error("CocoEvaluator: max_detections must be positive, got " + std::to_string(max_detections));
}

void CocoEvaluator::add(const Detections& found, const ImageBoxes& truth) {
  const auto image_number = std::to_string(images_.size());
  auto check = [&](const char* what, const torch::Tensor& boxes, const torch::Tensor& labels,
                   const torch::Tensor* scores) {
    const bool ok = boxes.defined() && labels.defined() && boxes.dim() == 2 && boxes.size(1) == 4 &&
                    labels.dim() == 1 && labels.size(0) == boxes.size(0) &&
                    (!scores || (scores->defined() && scores->dim() == 1 && scores->size(0) == boxes.size(0)));
    if (!ok)
      throw Error("CocoEvaluator::add: image " + image_number + "'s " + what + " are not boxes [n, 4]" +
                  (scores ? ", scores [n]" : "") + " and labels [n]: got " + shape(boxes) +
                  (scores ? ", " + shape(*scores) : "") + " and " + shape(labels));
  };
  check("detections", found.boxes, found.labels, &found.scores);
  check("ground truth", truth.boxes, truth.labels, nullptr);
  const bool crowds = truth.crowd_boxes.defined() || truth.crowd_labels.defined();
  if (crowds) check("crowd regions", truth.crowd_boxes, truth.crowd_labels, nullptr);
  Image image{coco_boxes(found.boxes), coco_boxes(truth.boxes), {}, values_of<double>(found.scores, torch::kDouble),
              values_of<int64_t>(found.labels, torch::kLong), values_of<int64_t>(truth.labels, torch::kLong), {}};
  if (crowds) {
    image.crowds = coco_boxes(truth.crowd_boxes);
    image.crowd_labels = values_of<int64_t>(truth.crowd_labels, torch::kLong);
  }
  for (const auto labels : {&image.found_labels, &image.truth_labels, &image.crowd_labels})
    for (const auto label : *labels)
      if (label < 0 || label >= num_classes_)
        throw Error("CocoEvaluator: label " + std::to_string(label) + " outside [0, " + std::to_string(num_classes_) + ")");
  images_.push_back(std::move(image));
}

CocoAP CocoEvaluator::evaluate() const {
  const auto thresholds = linspace(0.5, 0.95, kThresholds), recall_points = linspace(0.0, 1.0, kRecallPoints);
  // precision[t][r] of each class; -1 for a class without ground truth
  std::vector<std::vector<double>> precision(num_classes_, std::vector<double>(kThresholds * kRecallPoints, -1));
  // the recall of every class with ground truth at every threshold, each image's detections
  // cut to its best 1, 10 and max_detections
  const std::array<int64_t, 3> most_detections{1, 10, max_detections_};
  std::array<std::vector<double>, 3> recalls;
  for (int64_t k = 0; k < num_classes_; ++k) {
    struct Scored {
      double score;
      size_t rank;  // in its image's detections of the class
      std::array<Outcome, kThresholds> outcome;
    };
    std::vector<Scored> detections;  // image by image, each image's by decreasing score
    int64_t truths = 0;
    for (const auto& image : images_) {
      std::vector<size_t> found;
      std::vector<const std::array<double, 4>*> truth;  // the objects, then the crowd regions
      for (size_t i = 0; i < image.found_labels.size(); ++i)
        if (image.found_labels[i] == k) found.push_back(i);
      for (size_t i = 0; i < image.truth_labels.size(); ++i)
        if (image.truth_labels[i] == k) truth.push_back(&image.truth[i]);
      const auto objects = truth.size();
      for (size_t i = 0; i < image.crowd_labels.size(); ++i)
        if (image.crowd_labels[i] == k) truth.push_back(&image.crowds[i]);
      std::stable_sort(found.begin(), found.end(), [&](size_t a, size_t b) { return image.scores[a] > image.scores[b]; });
      if (static_cast<int64_t>(found.size()) > max_detections_) found.resize(max_detections_);
      truths += static_cast<int64_t>(objects);
      std::vector<std::array<Outcome, kThresholds>> outcomes(found.size());
      for (int t = 0; t < kThresholds; ++t) {
        std::vector<bool> taken(objects, false);
        for (size_t d = 0; d < found.size(); ++d) {
          // The best IoU at or above the threshold among the untaken objects (on ties the
          // later); a crowd region only when no object matches, and any number of times.
          double best = std::min(thresholds[t], 1 - 1e-10);
          int64_t match = -1;
          for (size_t g = 0; g < truth.size(); ++g) {
            const bool crowd = g >= objects;
            if (crowd && match >= 0 && size_t(match) < objects) break;
            if (!crowd && taken[g]) continue;
            const double overlap = iou(image.found[found[d]], *truth[g], crowd);
            if (overlap < best) continue;
            best = overlap;
            match = static_cast<int64_t>(g);
          }
          outcomes[d][t] = match < 0 ? Outcome::wrong : size_t(match) >= objects ? Outcome::in_crowd : Outcome::right;
          if (outcomes[d][t] == Outcome::right) taken[match] = true;
        }
      }
      for (size_t d = 0; d < found.size(); ++d) detections.push_back({image.scores[found[d]], d, outcomes[d]});
    }
    if (truths == 0) continue;
    for (size_t m = 0; m < most_detections.size(); ++m)
      for (int t = 0; t < kThresholds; ++t) {
        const auto found = std::count_if(detections.begin(), detections.end(), [&](const Scored& d) {
          return static_cast<int64_t>(d.rank) < most_detections[m] && d.outcome[t] == Outcome::right;
        });
        recalls[m].push_back(static_cast<double>(found) / truths);
      }
    std::stable_sort(detections.begin(), detections.end(), [](const Scored& a, const Scored& b) { return a.score > b.score; });
    const auto n = detections.size();
    for (int t = 0; t < kThresholds; ++t) {
      std::vector<double> recall(n), prec(n);
      double tp = 0, fp = 0;
      for (size_t i = 0; i < n; ++i) {
        // one in a crowd region keeps its row (as pycocotools): the same precision as the row before
        const auto outcome = detections[i].outcome[t];
        if (outcome != Outcome::in_crowd) (outcome == Outcome::right ? tp : fp) += 1;
        recall[i] = tp / truths;
        prec[i] = tp / (fp + tp + 2.220446049250313e-16);  // numpy's spacing(1)
      }
      for (size_t i = n; i-- > 1;) prec[i - 1] = std::max(prec[i - 1], prec[i]);
      auto* row = &precision[k][t * kRecallPoints];
      for (int r = 0; r < kRecallPoints; ++r) {
        const auto at = std::lower_bound(recall.begin(), recall.end(), recall_points[r]) - recall.begin();
        row[r] = static_cast<size_t>(at) < n ? prec[at] : 0;
      }
    }
  }
  CocoAP result;
  std::vector<double> all, at50, at75;
  for (int64_t k = 0; k < num_classes_; ++k) {
    result.per_class.push_back(mean_counted(precision[k]));
    all.insert(all.end(), precision[k].begin(), precision[k].end());
    at50.insert(at50.end(), precision[k].begin(), precision[k].begin() + kRecallPoints);
    at75.insert(at75.end(), precision[k].begin() + 5 * kRecallPoints, precision[k].begin() + 6 * kRecallPoints);
  }
  result.ap = mean_counted(all);
  result.ap50 = mean_counted(at50);
  result.ap75 = mean_counted(at75);
  result.ar1 = mean_counted(recalls[0]);
  result.ar10 = mean_counted(recalls[1]);
  result.ar100 = mean_counted(recalls[2]);
  return result;
}

namespace {

// Detections and ground truth of every validation image, decoded once a batch and
// evaluated once a validation for all the metrics that share it.
struct SharedEvaluation {
  DecodeDetections decode;
  std::optional<CocoEvaluator> evaluator;
  std::optional<std::pair<int64_t, size_t>> last_batch;  // (epoch, iter) of the batch added last
  mutable std::optional<CocoAP> result;                  // the evaluation of what was added

  void reset() {
    evaluator.reset();
    last_batch.reset();
    result.reset();
  }
  void accumulate(const Learner& learn, const std::string& who) {
    const std::pair<int64_t, size_t> batch{learn.epoch, learn.iter};
    if (last_batch == batch) return;  // another metric of this evaluation added it
    last_batch = batch;
    result.reset();
    const auto output = learn.pred.detach();
    if (!evaluator) evaluator.emplace(DetectorOutput(output, who.c_str()).num_classes());
    const auto found = decode(output);
    for (size_t i = 0; i < found.size(); ++i) evaluator->add(found[i], image_boxes(learn.yb.detach(), int64_t(i)));
  }
  const std::optional<CocoAP>& evaluate() const {
    if (!result && evaluator) result = evaluator->evaluate();
    return result;
  }
};

class CocoMetric : public Metric {
 public:
  CocoMetric(std::string name, bool at50, std::shared_ptr<SharedEvaluation> shared)
      : name_(std::move(name)), at50_(at50), shared_(std::move(shared)) {}
  std::string name() const override { return name_; }
  void reset() override { shared_->reset(); }
  void accumulate(const Learner& learn) override { shared_->accumulate(learn, name_); }
  double value() const override {
    const auto& ap = shared_->evaluate();
    if (!ap) return std::nan("");
    return at50_ ? ap->ap50 : ap->ap;
  }
  const std::optional<CocoAP>& last() const { return shared_->evaluate(); }

 private:
  std::string name_;
  bool at50_;
  std::shared_ptr<SharedEvaluation> shared_;
};

std::shared_ptr<SharedEvaluation> shared_evaluation(DecodeDetections decode) {
  auto shared = std::make_shared<SharedEvaluation>();
  shared->decode = decode ? std::move(decode) : [](const torch::Tensor& output) { return detections(output); };
  return shared;
}

}  // namespace

CocoAP coco_ap(const Metric& metric) {
  const auto* coco = dynamic_cast<const CocoMetric*>(&metric);
  if (!coco) throw Error("coco_ap: metric '" + metric.name() + "' is not coco_map or coco_map50");
  if (!coco->last()) throw Error("coco_ap: " + metric.name() + " has no value yet (no validation)");
  return *coco->last();
}

namespace metrics {
MetricPtr coco_map(DecodeDetections decode) {
  return std::make_shared<CocoMetric>("coco_map", false, shared_evaluation(std::move(decode)));
}
MetricPtr coco_map50(DecodeDetections decode) {
  return std::make_shared<CocoMetric>("coco_map50", true, shared_evaluation(std::move(decode)));
}
std::vector<MetricPtr> coco_maps(DecodeDetections decode) {
  const auto shared = shared_evaluation(std::move(decode));
  return {std::make_shared<CocoMetric>("coco_map", false, shared), std::make_shared<CocoMetric>("coco_map50", true, shared)};
}
}  // namespace metrics

}  // namespace fastcpp::vision
