#include "learner/learner.h"

#include <torch/torch.h>

#include <exception>
#include <iostream>
#include <optional>

#include "callbacks/lr_finder.h"
#include "callbacks/progress.h"
#include "callbacks/schedule.h"
#include "formats/file_io.h"
#include "formats/state_dict.h"
#include "formats/torch_file.h"
#include "formats/torch_save.h"
#include "learner/checkpoint.h"
#include "core/device.h"
#include "core/error.h"
#include "core/exception_text.h"
#include "core/host_memory.h"
#include "core/padding.h"
#include "core/spec_text.h"
#include "optim/param_groups.h"
#include "learner/recorder.h"
#include "learner/train_eval.h"

namespace fastcpp {
namespace {

// Skips the epochs before start_epoch, so a resumed fit keeps its schedule. After the
// Recorder's before_epoch, so that a skipped epoch's row holds no earlier values.
class SkipToEpoch : public Callback {
 public:
  explicit SkipToEpoch(int start_epoch) : start_epoch_(start_epoch) { order = 51; }
  void before_epoch() override {
    if (learn().epoch < start_epoch_) throw CancelEpochException();
  }

 private:
  int start_epoch_;
};

// Collects activated predictions and targets while validating (get_preds).
class GatherPreds : public Callback {
 public:
  explicit GatherPreds(bool with_loss) : with_loss(with_loss) {
    order = 100;
    run_train = false;
  }
  // Kept on the CPU, as fastai's to_detach: a whole set's predictions (a segmentation
  // model's are [N, classes, H, W]) would otherwise fill the GPU.
  void after_batch() override {
    const auto pred = learn().pred.detach();
    preds.push_back(learn().loss_func.activation(pred).cpu());
    if (!learn().yb.defined()) return;  // a test set's batches: predictions only, as fastai's targs None
    targets.push_back(learn().yb.cpu());
    if (!with_loss) return;
    torch::NoGradGuard no_grad;
    losses.push_back(learn().loss_func.per_item(pred, learn().yb).to(torch::kFloat).cpu());
  }
  bool with_loss;
  std::vector<torch::Tensor> preds, targets, losses;
};

// The batches' targets as one tensor. Targets whose size past the first dimension differs
// from batch to batch (box targets are padded to each batch's most boxes) are padded with
// -1, box_targets' padding, to the largest.
torch::Tensor cat_targets(const std::vector<torch::Tensor>& targets) {
  auto sizes = targets.front().sizes().vec();
  bool same = true;
  for (const auto& t : targets) {
    if (t.dim() != static_cast<int64_t>(sizes.size())) return torch::cat(targets);  // cat names the mismatch
    for (int64_t d = 1; d < t.dim(); ++d) {
      same = same && t.size(d) == sizes[d];
      sizes[d] = std::max(sizes[d], t.size(d));
    }
  }
  if (same) return torch::cat(targets);
  std::vector<torch::Tensor> padded;
  for (const auto& t : targets) {
    sizes[0] = t.size(0);
    padded.push_back(padded_to(t, sizes, -1));
  }
  return torch::cat(padded);
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// Runs `part` of a step; libtorch's error in it becomes an Error that says which part
// failed, `failed()` (one_batch adds the batch's position), instead of a backtrace.
template <class Part, class Failed>
void naming_failure(Part&& part, Failed&& failed) {
  try {
    part();
  } catch (const c10::Error& e) {
    throw Error(failed() + ": " + first_line(e.what_without_backtrace()));
  }
}

}  // namespace

class Learner::AddedCallbacks {
 public:
  // All or none: a callback refused leaves none of those before it behind.
  AddedCallbacks(Learner& learn, std::vector<CallbackPtr> cbs) : learn_(learn) {
    try {
      for (auto& cb : cbs) {
        learn_.add_cb(cb);
        added_.push_back(std::move(cb));
      }
    } catch (...) {
      remove_all();
      throw;
    }
  }
  ~AddedCallbacks() { remove_all(); }

 private:
  void remove_all() {
    for (auto& cb : added_) learn_.remove_cb(cb);
  }
  Learner& learn_;
  std::vector<CallbackPtr> added_;
};

Learner::Learner(DataLoaders dls_, Model model_, Loss loss_func_, std::vector<MetricPtr> metrics_,
                 LearnerOptions options)
    : dls(std::move(dls_)),
      model(std::move(model_)),
      loss_func(std::move(loss_func_)),
      metrics(std::move(metrics_)),
      device(options.device.value_or(default_device())),
      logger([](const std::string& line) { std::cout << line << std::endl; }),
      options_(std::move(options)) {
  if (!loss_func) throw Error("Learner: no loss function");
  if (!options_.opt_func) throw Error("Learner: no optimizer function (opt_func)");
  if (!options_.lr.given()) throw Error("Learner: the default lr must be a value");
  for (const auto& metric : metrics)
    if (!metric) throw Error("Learner: a metric is null");
  if (const auto on = devices_of(model.module()); on.size() > 1 && !options_.device)
    throw Error("Learner: the model is on " + devices_text(on) + " (split across devices): give .device, where "
                "its outputs land and the targets go (a Pipeline's output_device())");
  device = check_device(device, "Learner");
  keep_freed_host_memory();  // each step's buffers reused, not faulted in afresh (core/host_memory.h)
  model.module().to(device);
  dls.to(device);
  recorder = std::make_shared<Recorder>();
  add_cb(std::make_shared<TrainEvalCallback>());
  add_cb(recorder);
  if (options_.progress) add_cb(std::make_shared<ProgressCallback>());
  for (auto& cb : options_.cbs) add_cb(cb);
  if (options_.frozen) freeze();
  created_ = true;  // from here a callback added, in after_create too, announces itself
  const auto cbs = cbs_;  // announcing may add callbacks, which announce themselves
  for (const auto& cb : *cbs) announce_creation(*cb);
}

// ---------------------------------------------------------------- callbacks

void Learner::add_cb(CallbackPtr cb) {
  if (!cb) throw Error("add_cb: null callback");
  if (cb->learn_ && cb->learn_ != this) throw Error("add_cb: " + cb->name() + " already belongs to another Learner");
  if (std::find(cbs_->begin(), cbs_->end(), cb) != cbs_->end())
    throw Error("add_cb: this " + cb->name() + " is already added (each event would run it twice)");
  cb->learn_ = this;
  auto cbs = std::make_shared<std::vector<CallbackPtr>>(*cbs_);
  auto position = std::upper_bound(cbs->begin(), cbs->end(), cb,
                                   [](const CallbackPtr& a, const CallbackPtr& b) { return a->order < b->order; });
  cbs->insert(position, cb);
  cbs_ = std::move(cbs);
  if (!created_) return;
  try {
    announce_creation(*cb);
  } catch (...) {
    remove_cb(cb);  // a callback that failed to set itself up does not stay
    cb->created_for_ = nullptr;
    throw;
  }
}

void Learner::announce_creation(Callback& cb) {
  if (cb.created_for_ == this) return;
  cb.created_for_ = this;
  call(cb, Event::after_create);
}

void Learner::remove_cb(const CallbackPtr& cb) {
  auto cbs = std::make_shared<std::vector<CallbackPtr>>(*cbs_);
  auto it = std::find(cbs->begin(), cbs->end(), cb);
  if (it == cbs->end()) return;
  (*it)->learn_ = nullptr;
  if (recorder) recorder->remove_columns_of(**it);  // they read the callback
  cbs->erase(it);
  cbs_ = std::move(cbs);
}

void Learner::event(Event e) {
  const auto cbs = cbs_;  // a callback may add or remove callbacks: they replace cbs_, not this list
  for (const auto& cb : *cbs) call(*cb, e);
}

void Learner::call(Callback& cb, Event e) {
  try {
    cb.handle(e);
  } catch (const CancelException&) {
    throw;
  } catch (const std::exception& ex) {
    throw Error("Exception occurred in `" + cb.name() + "` when calling event `" + event_name(e) + "`:\n\t" +
                exception_text(ex));
  }
}

std::string Learner::position() const {
  return std::string(training ? "training" : "validation") + " batch " + std::to_string(iter) + " of epoch " +
         std::to_string(epoch);
}

// ---------------------------------------------------------------- the loop

template <class Cancel, class Body>
void Learner::with_events(Body&& body, Event before, Event after_cancel, Event after) {
  try {
    event(before);
    body();
  } catch (const Cancel&) {
    event(after_cancel);
  }
  event(after);
}

void Learner::fit(int n_epoch_, Lrs lr, FitOptions options) {
  if (n_epoch_ < 0) throw Error("fit: n_epoch must be >= 0, got " + std::to_string(n_epoch_));
  auto cbs = options.cbs;
  if (options.start_epoch > 0) cbs.push_back(std::make_shared<SkipToEpoch>(options.start_epoch));
  AddedCallbacks added(*this, std::move(cbs));
  if (options.reset_opt || !opt) create_opt();
  opt->zero_grad();  // gradients a failed fit left are not added to this one's first step
  if (auto wd = options.wd ? options.wd : options_.wd) opt->set_hyper("wd", *wd);
  opt->set_hyper("lr", (lr.given() ? lr : options_.lr).for_groups(opt->n_groups()));
  n_epoch = n_epoch_;
  struct Cleanup {  // the loop's tensors are not kept alive after a fit
    Learner& l;
    int epochs;
    ~Cleanup() {
      l.fitting_ = false;
      l.dl = nullptr;
      l.xb = l.yb = l.pred = l.loss = l.loss_grad = torch::Tensor();
      l.epochs_before += epochs;  // planned, not run: the count does not hang on where a fit stopped
    }
  } cleanup{*this, n_epoch_};
  fitting_ = true;
  // A fit that fails gets no after_fit: the loss function is put back here, not left as a
  // callback swapped it for the fit (MixUp's), each callback's after_fit_failed runs, and
  // every callback runs again.
  const Loss loss_before = loss_func;
  try {
    with_events<CancelFitException>([&] { do_fit(); }, Event::before_fit, Event::after_cancel_fit, Event::after_fit);
  } catch (...) {
    loss_func = loss_before;
    for (const auto& cb : *cbs_) {
      try {
        cb->after_fit_failed();
      } catch (...) {  // the fit's own error is the one to report
      }
    }
    for (const auto& cb : *cbs_) cb->run = true;  // as after_fit would: lr_find's sit-outs (run false) end with it
    try {
      throw;
    } catch (const CancelException& e) {  // e.g. CancelBatchException from after_batch, outside the batch it names
      throw uncaught(e);
    }
  }
}

void Learner::do_fit() {
  if (const auto items = dls.train.n_items(); items > 0 && dls.train.size() == 0)  // after before_fit: shards too
    throw Error("fit: the training loader makes no batch: its " + std::to_string(items) +
                " items are fewer than its batch size " + std::to_string(dls.train.bs()) +
                " and it drops its last, short batch (a smaller bs, or more items)");
  for (epoch = 0; epoch < n_epoch; ++epoch)
    with_events<CancelEpochException>(
        [&] {
          do_epoch_train();
          do_epoch_validate(dls.valid);
        },
        Event::before_epoch, Event::after_cancel_epoch, Event::after_epoch);
}

void Learner::do_epoch_train() {
  dl = &dls.train;
  dl->set_epoch(epochs_before + epoch);
  with_events<CancelTrainException>([&] { all_batches(); }, Event::before_train, Event::after_cancel_train,
                                    Event::after_train);
}

void Learner::do_epoch_validate(DataLoader& loader) {
  dl = &loader;
  dl->set_epoch(epochs_before + epoch);
  torch::NoGradGuard no_grad;
  with_events<CancelValidException>([&] { all_batches(); }, Event::before_validate, Event::after_cancel_validate,
                                    Event::after_validate);
}

void Learner::all_batches() {
  n_iter = dl->size();
  size_t i = 0;
  for (const Batch& batch : *dl) one_batch(i++, batch);
  loss_func.finish_checks();  // the checks made on the device without waiting, read at last
}

void Learner::one_batch(size_t i, const Batch& batch) {
  iter = i;
  xb = batch.x;
  yb = batch.y;
  try {
    with_events<CancelBatchException>([&] { do_one_batch(); }, Event::before_batch, Event::after_cancel_batch,
                                      Event::after_batch);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + "\n\t(in " + position() + ")");
  }
  // The batch, the prediction and its autograd graph go now, not when the next batch
  // replaces them: the next batch's forward would find this step's AccumulateGrad nodes
  // still alive, and the device would hold two batches at once. The detached loss stays.
  xb = yb = pred = loss_grad = torch::Tensor();
}

void Learner::do_one_batch() {
  naming_failure([&] { pred = model(xb); }, [&] {
    // Bytes straight from the images: the loader's batch_tfms lack the float conversion.
    const bool bytes = xb.defined() && !xb.is_floating_point() && !xb.is_complex();
    return "the model's forward failed on input of shape " + c10::str(xb.sizes()) +
           (bytes ? " and type " + std::string(c10::toString(xb.scalar_type())) +
                        " (put a Normalize, or IntToFloat, in the loaders' batch_tfms)"
                  : std::string());
  });
  event(Event::after_pred);
  if (yb.defined()) {
    naming_failure([&] { loss_grad = loss_func(pred, yb); }, [&] {
      return "the loss failed on a prediction of shape " + c10::str(pred.sizes()) + " and a target of shape " +
             c10::str(yb.sizes());
    });
    loss = loss_grad.detach().clone();
  } else {
    loss = torch::Tensor();  // no target, no loss: the last batch's is not this one's
  }
  event(Event::after_loss);
  if (!training || !yb.defined()) return;
  do_grad_opt();
}

void Learner::do_grad_opt() {
  with_events<CancelBackwardException>(
      [&] { naming_failure([&] { loss_grad.backward(); }, [] { return std::string("the backward pass failed"); }); },
      Event::before_backward, Event::after_cancel_backward, Event::after_backward);
  with_events<CancelStepException>(
      [&] { naming_failure([&] { opt->step(); }, [] { return std::string("the optimizer's step failed"); }); },
      Event::before_step, Event::after_cancel_step, Event::after_step);
  opt->zero_grad();
}

// ---------------------------------------------------------------- schedules

std::vector<double> Learner::group_lrs(const Lrs& lr) {
  if (!opt) create_opt();
  return (lr.given() ? lr : options_.lr).for_groups(opt->n_groups());
}

void Learner::fit_scheduled(int n_epoch_, ParamScheduler::Scheds scheds, FitOptions options) {
  options.cbs.push_back(std::make_shared<ParamScheduler>(std::move(scheds)));
  fit(n_epoch_, {}, std::move(options));
}

namespace {

// The options every scheduled fit shares, checked before anything changes.
void check_schedule(const char* who, double pct_start, std::initializer_list<std::pair<const char*, double>> divisors) {
  if (!(pct_start >= 0 && pct_start <= 1))
    throw Error(std::string(who) + ": pct_start must be between 0 and 1, got " + spec_text::number(pct_start));
  for (const auto& [name, value] : divisors)
    if (!(value > 0)) throw Error(std::string(who) + ": " + name + " must be > 0, got " + spec_text::number(value));
}

}  // namespace

void Learner::fit_one_cycle(int n_epoch_, Lrs lr_max, OneCycleOptions o) {
  check_schedule("fit_one_cycle", o.pct_start, {{"div", o.div}, {"div_final", o.div_final}});
  ParamScheduler::Scheds scheds;
  for (double lr : group_lrs(lr_max)) scheds["lr"].push_back(combined_cos(o.pct_start, lr / o.div, lr, lr / o.div_final));
  scheds["mom"] = {combined_cos(o.pct_start, o.moms[0], o.moms[1], o.moms[2])};
  fit_scheduled(n_epoch_, std::move(scheds), {.wd = o.wd, .cbs = o.cbs, .reset_opt = o.reset_opt, .start_epoch = o.start_epoch});
}

void Learner::fit_flat_cos(int n_epoch_, Lrs lr, FlatCosOptions o) {
  check_schedule("fit_flat_cos", o.pct_start, {{"div_final", o.div_final}});
  ParamScheduler::Scheds scheds;
  for (double value : group_lrs(lr)) scheds["lr"].push_back(combined_cos(o.pct_start, value, value, value / o.div_final));
  fit_scheduled(n_epoch_, std::move(scheds), {.wd = o.wd, .cbs = o.cbs, .reset_opt = o.reset_opt, .start_epoch = o.start_epoch});
}

void Learner::fit_sgdr(int n_cycles, int cycle_len, Lrs lr_max, SgdrOptions o) {
  if (n_cycles < 1 || cycle_len < 1 || o.cycle_mult < 1)
    throw Error("fit_sgdr: n_cycles, cycle_len and cycle_mult must be at least 1, got " + std::to_string(n_cycles) +
                ", " + std::to_string(cycle_len) + " and " + std::to_string(o.cycle_mult));
  std::vector<double> pcts;  // each cycle's share of the epochs
  int n_epoch_ = 0;
  for (int i = 0, len = cycle_len; i < n_cycles; ++i, len *= o.cycle_mult) {
    pcts.push_back(len);
    n_epoch_ += len;
  }
  for (auto& pct : pcts) pct /= n_epoch_;
  ParamScheduler::Scheds scheds;
  for (double lr : group_lrs(lr_max))
    scheds["lr"].push_back(combine_scheds(pcts, std::vector<Schedule>(static_cast<size_t>(n_cycles), SchedCos(lr, 0))));
  fit_scheduled(n_epoch_, std::move(scheds), {.wd = o.wd, .cbs = o.cbs, .reset_opt = o.reset_opt, .start_epoch = o.start_epoch});
}

void Learner::fine_tune(int epochs, FineTuneOptions o) {
  // Checked before the frozen phase trains (or freezes anything).
  if (epochs < 0 || o.freeze_epochs < 0)
    throw Error("fine_tune: epochs and freeze_epochs must be >= 0, got " + std::to_string(epochs) + " and " +
                std::to_string(o.freeze_epochs));
  check_schedule("fine_tune", o.pct_start, {{"div", o.div}, {"div_final", o.div_final}, {"lr_mult", o.lr_mult}});
  freeze();
  fit_one_cycle(o.freeze_epochs, slice(o.base_lr),
                {.div_final = o.div_final, .pct_start = 0.99, .moms = o.moms, .wd = o.wd, .cbs = o.cbs,
                 .reset_opt = o.reset_opt, .start_epoch = o.start_epoch});
  const double base_lr = o.base_lr / 2;
  unfreeze();
  fit_one_cycle(epochs, slice(base_lr / o.lr_mult, base_lr),
                {.div = o.div, .div_final = o.div_final, .pct_start = o.pct_start, .moms = o.moms, .wd = o.wd,
                 .cbs = o.cbs, .reset_opt = o.reset_opt, .start_epoch = o.start_epoch});
}

LrFindResult Learner::lr_find(LrFindOptions o) {
  if (o.num_it < 10) throw Error("lr_find: num_it must be at least 10, got " + std::to_string(o.num_it));
  struct Quiet {  // no epoch table while searching
    bool& flag;
    bool saved;
    ~Quiet() { flag = saved; }
  } quiet{logging, logging};
  logging = false;
  // One epoch planned: LRFinder sets as many as num_it batches take once the loaders are final (sharded).
  fit(1, {}, {.cbs = {std::make_shared<LRFinder>(o.start_lr, o.end_lr, o.num_it, o.stop_div)}});
  auto result = suggest_lrs(recorder->lrs, recorder->losses, o.num_it);
  if (!o.plot.empty()) recorder->plot_lr_find(o.plot);
  return result;
}

// ---------------------------------------------------------------- inference

Error Learner::uncaught(const CancelException& e) const {
  return Error(std::string(e.what()) + " was raised where nothing it cancels was running (" + position() +
               "); each is caught only inside what it names, as in fastai");
}

std::vector<double> Learner::validate(DataLoader* loader) {
  struct ForgetLoader {  // which may be a caller's temporary, also when a batch throws
    Learner& learn;
    ~ForgetLoader() { learn.dl = nullptr; }
  } forget{*this};
  try {
    do_epoch_validate(loader ? *loader : dls.valid);
  } catch (const CancelException& e) {  // TerminateOnNaN's CancelFitException, say, with no fit to cancel
    if (fitting_) throw;
    throw uncaught(e);
  }
  return recorder->valid_values();
}

Preds Learner::get_preds(DataLoader* loader, bool with_loss) {
  // Every item once and in the dataset's order, also from a loader that shuffles, drops its
  // last batch (the training one) or has a sampler of its own: a copy without, as fastai's dl.new(...).
  if (!loader) loader = &dls.valid;
  auto in_order = loader->in_order();
  if (in_order) loader = &*in_order;
  auto gather = std::make_shared<GatherPreds>(with_loss);
  AddedCallbacks added(*this, {gather});
  validate(loader);
  if (gather->preds.empty()) return {};
  if (gather->targets.empty() && with_loss)
    throw Error("get_preds: with_loss needs targets, and the loader's batches have none");
  if (!gather->targets.empty() && gather->targets.size() != gather->preds.size())
    throw Error("get_preds: some of the loader's batches have targets and some do not");
  return {torch::cat(gather->preds), gather->targets.empty() ? torch::Tensor() : cat_targets(gather->targets),
          with_loss ? torch::cat(gather->losses) : torch::Tensor()};
}

torch::Tensor Learner::predict(const torch::Tensor& item) {
  torch::NoGradGuard no_grad;
  model.module().eval();
  torch::Tensor prediction;
  naming_failure(
      [&] {
        // As the valid loader makes its batches: a resize of aug_transforms' too, not the batch transforms alone.
        const auto x = dls.valid.apply_batch_tfms({.x = item.unsqueeze(0).to(device)}, /*seed=*/0).x;
        prediction = loss_func.activation(model(x)).squeeze(0);
      },
      [&] { return "predict: the item " + c10::str(item.sizes()) + " does not go through the model"; });
  return prediction;
}

// ---------------------------------------------------------------- state

void Learner::write_on_rank_0(const std::function<void()>& write) const {
  std::exception_ptr failed;
  if (rank == 0) {
    try {
      write();
    } catch (...) {
      failed = std::current_exception();
    }
  }
  const bool all_written = barrier ? barrier(!failed) : !failed;  // nobody loads before rank 0 has written
  if (failed) std::rethrow_exception(failed);
  if (!all_written) throw Error("rank 0 could not write its file (its own error says why): rank " +
                                std::to_string(rank) + " stops with it");
}

void Learner::save(const std::string& path, bool with_opt, const checkpoint::Extras& extras) const {
  write_on_rank_0([&] { save_torch_file(path, checkpoint::contents(*this, with_opt, extras), "checkpoint"); });
}

void Learner::load(const std::string& path, bool with_opt, bool strict) {
  const auto source = "checkpoint '" + path + "'";
  const auto file = unpickle(read_file(path), source, "a checkpoint");
  if (!checkpoint::is_checkpoint(file)) {  // torch.save(model.state_dict()), fastai's learn.save
    load_state_dict(model.module(), state_dict_in(file, source), source, {.strict = strict});
    logger(source + " is a state dict, not a fastcpp checkpoint: the model's weights were loaded, nothing else");
    return;
  }
  checkpoint::decode_into(*this, file, with_opt, source, strict);
  if (with_opt && !file.toGenericDict().contains(c10::IValue(std::string("opt"))))
    logger(source + " holds no optimizer state (saved with with_opt = false): the optimizer keeps its own");
}

void Learner::to(torch::Device requested) {
  const auto device_ = check_device(requested, "Learner::to");
  model.module().to(device_);
  dls.to(device_);
  device = device_;
  if (opt) opt->load_state_dict(opt->state_dict(), "Learner::to");  // the buffers follow their parameters
}

void Learner::create_opt() {
  const auto param_lists = (options_.splitter ? options_.splitter : single_group)(model.module());
  ParamSet no_wd;
  if (!options_.wd_bn_bias) {
    no_wd = norm_params(model.module());
    for (auto* bias : bias_params(model.module())) no_wd.insert(bias);
  }
  std::vector<ParamGroup> groups;
  for (auto& params : unique_parameters(param_lists)) {  // a tied weight stepped once
    ParamGroup group;
    for (const auto& param : params) group.do_wd.push_back(!contains(no_wd, param));
    group.params = std::move(params);
    groups.push_back(std::move(group));
  }
  if (groups.empty()) throw Error("create_opt: the splitter returned no parameter groups");
  opt = options_.opt_func(std::move(groups));
  if (options_.wd) opt->set_hyper("wd", *options_.wd);
  opt->set_hyper("lr", options_.lr.for_groups(opt->n_groups()));
  apply_freeze(/*thaw_the_rest=*/false);
}

size_t Learner::n_param_groups() const {
  if (opt) return opt->n_groups();
  return (options_.splitter ? options_.splitter : single_group)(model.module()).size();
}

void Learner::freeze_to(int n) {
  if (!opt) create_opt();
  const int n_groups = static_cast<int>(opt->n_groups());
  frozen_groups_ = n >= 0 ? std::min(n, n_groups) : std::max(n_groups + n, 0);
  if (n < 0 && n_groups == 1)  // fastai freezes nothing then, silently
    logger("freeze: the model's parameters are one group, which stays trainable (LearnerOptions::splitter "
           "makes a body and a head)");
  if (n >= n_groups)  // as fastai's warning
    logger("freeze_to(" + std::to_string(n) + "): the model has " + std::to_string(n_groups) +
           " parameter groups; the whole model is frozen (but for its norm layers with train_bn)");
  apply_freeze(/*thaw_the_rest=*/true);
  opt->clear_state();
}

void Learner::apply_freeze(bool thaw_the_rest) {
  const auto norms = options_.train_bn ? norm_params(model.module()) : ParamSet{};
  auto& groups = opt->param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const bool frozen = static_cast<int>(g) < frozen_groups_;
    for (auto& param : groups[g].params)
      if (frozen || thaw_the_rest) param.set_requires_grad(!frozen || contains(norms, param));
  }
}

}  // namespace fastcpp
