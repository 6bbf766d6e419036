#include "data/dataloader.h"

#include <torch/torch.h>

#include "core/device.h"
#include "core/error.h"
#include "core/exception_text.h"
#include "data/device_stage.h"

namespace fastcpp {
namespace {

// What fn makes of batch b, an error naming the batch where it fails (a dataset's get_batch
// or a batch transform may throw libtorch's or OpenCV's own errors, without a position).
template <class MakeBatch>
Batch naming_batch(size_t b, int64_t epoch, MakeBatch&& make) {
  try {
    return make();
  } catch (const std::exception& e) {
    throw Error(exception_text(e) + " (batch " + std::to_string(b) + " of epoch " + std::to_string(epoch) + ")");
  }
}

}  // namespace

DataLoader::DataLoader(DatasetPtr dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  if (!dataset_) throw Error("DataLoader: no dataset");
  if (options_.bs <= 0) throw Error("DataLoader: batch size must be positive, got " + std::to_string(options_.bs));
  if (options_.workers < 0) throw Error("DataLoader: workers must be >= 0, got " + std::to_string(options_.workers));
  set_sampler(options_.sampler);
}

SamplerPtr DataLoader::own_sampler() const {
  if (options_.sampler) return options_.sampler;
  if (options_.shuffle) return std::make_shared<RandomSampler>(dataset_->size(), options_.seed);
  return std::make_shared<SequentialSampler>(dataset_->size());
}

std::optional<DataLoader> DataLoader::in_order() const {
  // A rank's share (to_distributed) stays its share: the ranks' predictions are gathered by shard.
  const auto* shard = dynamic_cast<const DistributedSampler*>(sampler_.get());
  const auto* sequential = dynamic_cast<const SequentialSampler*>(shard ? shard->base().get() : sampler_.get());
  if (sequential && sequential->size() == dataset_->size() && !options_.drop_last) return std::nullopt;
  auto options = options_;
  options.shuffle = options.drop_last = false;
  options.sampler = nullptr;  // a WeightedSampler's draws too: fastai's WeightedDL without shuffle
  DataLoader copy(dataset_, std::move(options));
  if (shard)
    copy.set_sampler(std::make_shared<DistributedSampler>(copy.sampler_ptr(), shard->rank(), shard->world_size()));
  copy.to(device_);
  return copy;
}

void DataLoader::set_sampler(SamplerPtr sampler) { sampler_ = sampler ? std::move(sampler) : own_sampler(); }

size_t DataLoader::size() const {
  const auto n = n_items();
  const auto bs = static_cast<size_t>(options_.bs);
  return options_.drop_last ? n / bs : (n + bs - 1) / bs;
}

Batch DataLoader::make_batch(const std::vector<int64_t>& order, int64_t epoch, size_t b) const {
  const auto bs = static_cast<size_t>(options_.bs);
  const auto first = order.begin() + static_cast<std::ptrdiff_t>(b * bs);
  const auto last = order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), (b + 1) * bs));
  const uint64_t seed = batch_seed(epoch, b);
  return naming_batch(b, epoch, [&] {
    Batch batch = source().get_batch(std::vector<int64_t>(first, last), seed);
    if (device_.is_cpu()) {  // on the worker: the consumer stays free
      if (batch.x_stage) batch.x = batch.x_stage->run(device_);
      return apply_batch_tfms(std::move(batch), seed);
    }
    if (device_.is_cuda() && options_.pin_memory) {
      if (batch.x.defined() && batch.x.is_cpu()) batch.x = batch.x.pin_memory();
      if (batch.y.defined() && batch.y.is_cpu()) batch.y = batch.y.pin_memory();
    }
    return batch;
  });
}

uint64_t DataLoader::batch_seed(int64_t epoch, size_t b) const {
  const uint64_t seed = mix_seed(mix_seed(options_.seed, static_cast<uint64_t>(epoch)), b);
  // Rank r's batch b holds other items than rank 0's: it draws apart (shard 0 as one process does).
  const uint64_t shard = sampler_->shard();
  return shard ? mix_seed(seed, shard) : seed;
}

void DataLoader::add_batch_tfms(const std::vector<BatchTransform>& tfms) {
  options_.batch_tfms.insert(options_.batch_tfms.end(), tfms.begin(), tfms.end());
}

Batch DataLoader::apply_batch_tfms(Batch batch, uint64_t seed) const {
  // Each augmentation draws its own stream (two flips on one would flip the same items back);
  // the first keeps the batch's, the others' are mixed from streams no item index reaches.
  constexpr uint64_t kAugmentStreams = uint64_t{1} << 62;
  const auto augment = [&](bool after_batch_tfms) {
    for (size_t k = 0; k < options_.aug_tfms.size(); ++k)
      if (options_.aug_tfms[k]->after_batch_tfms() == after_batch_tfms)
        batch = options_.aug_tfms[k]->apply(std::move(batch), k == 0 ? seed : mix_seed(seed, kAugmentStreams + k));
  };
  augment(false);
  for (const auto& tfm : options_.batch_tfms) batch.x = tfm(batch.x);
  augment(true);
  return batch;
}

Batch DataLoader::finish(Batch batch, int64_t epoch, size_t b) const {
  if (device_.is_cpu()) return batch;  // the worker transformed it
  return naming_batch(b, epoch, [&] {
    // The batch keeps its stage (and the bytes it decodes) until the next batch replaces it.
    batch.x = batch.x_stage ? batch.x_stage->run(device_) : batch.x.to(device_, /*non_blocking=*/true);
    if (batch.y.defined()) batch.y = batch.y.to(device_, /*non_blocking=*/true);  // a test set's batches have none
    return apply_batch_tfms(std::move(batch), batch_seed(epoch, b));
  });
}

const Dataset& DataLoader::source() const { return resident_ ? *resident_ : *dataset_; }

void DataLoader::place_resident() {
  if (resident_ && resident_->x().device() == device_) return;
  resident_.reset();
  const auto tensors = std::dynamic_pointer_cast<const TensorDataset>(dataset_);
  if (!device_.is_cuda() || !tensors || options_.resident == false || !tensors->x().is_cpu()) return;
  const int64_t bytes = tensors->x().nbytes() + tensors->y().nbytes();
  if (!options_.resident && bytes > device_memory_bytes(device_) / 4) return;
  resident_ = tensors->on(device_);
}

DataLoader::Iterator DataLoader::begin() {
  place_resident();
  return Iterator(std::make_shared<const DataLoader>(*this), epoch_++);
}

DataLoader::Iterator DataLoader::end() { return Iterator(); }

DataLoader::Iterator::Iterator(std::shared_ptr<const DataLoader> loader, int64_t epoch)
    : loader_(loader), epoch_(epoch), done_(false) {
  auto order = std::make_shared<const std::vector<int64_t>>(loader->order(epoch));
  if (order->size() != loader->n_items())  // the batches are cut by size(), from indices()
    throw Error("DataLoader: the sampler's indices() gave " + std::to_string(order->size()) +
                " indices where its size() says " + std::to_string(loader->n_items()));
  // Batches cut from resident data are a kernel launch each: the consumer's thread does it.
  const int workers = loader->resident() ? 0 : loader->options().workers;
  const size_t depth = static_cast<size_t>(std::max(workers, 1) * std::max(loader->options().prefetch, 1));
  pipeline_ = std::make_shared<BatchPipeline>(
      loader->size(), workers, depth,
      [loader, order, epoch](size_t b) { return loader->make_batch(*order, epoch, b); });
  fetch();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  fetch();
  return *this;
}

void DataLoader::Iterator::fetch() {
  if (pipeline_->exhausted()) {
    done_ = true;
    batch_ = {};
    pipeline_.reset();  // joins the workers now, not when the iterator goes
    return;
  }
  batch_ = {};  // the last batch goes before the next one reaches the device
  const size_t b = next_batch_++;  // the pipeline goes past this batch also where it throws
  batch_ = loader_->finish(pipeline_->next(), epoch_, b);
}

}  // namespace fastcpp
