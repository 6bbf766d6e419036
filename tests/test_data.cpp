// Datasets, the DataLoader's order and batches, batch transforms, and the idx reader.
#include <sched.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

#include "core/cpus.h"
#include "helpers.h"
#include "operator_count.h"

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

std::vector<uint8_t> idx_bytes(const std::vector<int>& dims, uint8_t fill_start) {
  std::vector<uint8_t> bytes{0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  size_t count = 1;
  for (int d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<uint8_t>(d >> shift));
    count *= static_cast<size_t>(d);
  }
  for (size_t i = 0; i < count; ++i) bytes.push_back(static_cast<uint8_t>(fill_start + i));
  return bytes;
}

void write_raw(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

std::string temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("fastcpp_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// Items x = zeros(lengths[i]) and y = zeros(target_lengths[i]) (the index where none is
// given). Item `torch_bad` fails in libtorch, item `bad` as a transform's std::exception.
class UnevenDataset : public Dataset {
 public:
  UnevenDataset(std::vector<int64_t> lengths, std::vector<int64_t> target_lengths = {}, int64_t torch_bad = -1,
                int64_t bad = -1)
      : lengths_(std::move(lengths)), target_lengths_(std::move(target_lengths)), torch_bad_(torch_bad), bad_(bad) {}
  size_t size() const override { return lengths_.size(); }
  Example get(size_t index) const override {
    const auto i = static_cast<int64_t>(index);
    if (i == torch_bad_) return {torch::zeros({2}).view({3}), torch::tensor(i)};
    if (i == bad_) throw std::invalid_argument("no pixel at (9, 9)");
    const auto y = target_lengths_.empty() ? torch::tensor(i) : torch::zeros({target_lengths_.at(index)});
    return {torch::zeros({lengths_.at(index)}), y};
  }

 private:
  std::vector<int64_t> lengths_, target_lengths_;
  int64_t torch_bad_, bad_;
};

// Its own collate_items, as a dataset padding its targets has: libtorch's stack fails on uneven items.
class OwnCollate : public UnevenDataset {
 public:
  using UnevenDataset::UnevenDataset;
  Batch collate_items(const std::vector<Example>& examples) const override {
    std::vector<torch::Tensor> xs;
    for (const auto& example : examples) xs.push_back(example.x);
    return {torch::stack(xs), torch::zeros({static_cast<int64_t>(examples.size())})};
  }
};

// A dataset whose own get_batch fails with an error that is not fastcpp's.
class FailingBatches : public Dataset {
 public:
  size_t size() const override { return 4; }
  Example get(size_t) const override { return {}; }
  Batch get_batch(const std::vector<int64_t>&, uint64_t) const override { throw std::runtime_error("disk on fire"); }
};

}  // namespace

TEST_SUITE("data") {
  TEST_CASE("usable_cores: this thread's affinity, as fastai's num_cpus; processes share it unless pinned") {
    cpu_set_t all;
    REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
    CHECK(usable_cores() == CPU_COUNT(&all));
    int first = 0;
    while (!CPU_ISSET(first, &all)) ++first;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);  // this thread only
    const int pinned = usable_cores();
    // Pinned, a process keeps its core whatever the number of processes; unpinned, they share.
    const int pinned_share = cores_per_process(4);
    REQUIRE(sched_setaffinity(0, sizeof all, &all) == 0);
    CHECK(pinned == 1);
    CHECK(pinned_share == 1);
    const int online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
    if (CPU_COUNT(&all) == online) {
      CHECK(cores_per_process(1) == online);
      CHECK(cores_per_process(2) == std::max(1, online / 2));
      CHECK(cores_per_process(online + 1) == 1);
    }
  }

  TEST_CASE("DataLoader batches: sizes, drop_last, and every index once per epoch") {
    auto ds = std::make_shared<TensorDataset>(torch::arange(10).view({10, 1}), torch::arange(10));
    DataLoader loader(ds, {.bs = 4, .shuffle = true, .seed = 7});
    CHECK(loader.size() == 3);
    std::multiset<int64_t> seen;
    std::vector<int64_t> sizes;
    for (const auto& batch : loader) {
      sizes.push_back(batch.x.size(0));
      for (int64_t i = 0; i < batch.y.size(0); ++i) seen.insert(batch.y[i].item<int64_t>());
      CHECK(torch::equal(batch.x.view(-1), batch.y));  // x and y stay paired
    }
    CHECK(sizes == std::vector<int64_t>{4, 4, 2});
    CHECK(seen == std::multiset<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    DataLoader dropping(ds, {.bs = 4, .drop_last = true});
    CHECK(dropping.size() == 2);
  }

  TEST_CASE("an iteration reads the loader as it began: changed, replaced or destroyed mid-epoch, the epoch goes on") {
    // 10 batches: with 1 worker and 1 batch ahead, most are built after the changes.
    auto ds = std::make_shared<TensorDataset>(torch::arange(40).view({40, 1}).to(torch::kFloat), torch::arange(40));
    for (int workers : {0, 1}) {
      CAPTURE(workers);
      auto loader = std::make_optional<DataLoader>(ds, DataLoaderOptions{.bs = 4, .workers = workers, .prefetch = 1});
      auto it = loader->begin();
      CHECK(torch::equal(it->x.view(-1), torch::arange(4).to(torch::kFloat)));
      loader->add_batch_tfms({[](const torch::Tensor& x) { return x * 0; }});
      loader->set_sampler(std::make_shared<RandomSampler>(40, 99));
      ++it;
      CHECK(torch::equal(it->x.view(-1), torch::arange(4, 8).to(torch::kFloat)));
      loader.reset();  // the iteration keeps the copy it read
      for (int64_t b = 2; b < 10; ++b) {
        ++it;
        CHECK(torch::equal(it->x.view(-1), torch::arange(4 * b, 4 * b + 4).to(torch::kFloat)));
      }
      ++it;
      CHECK(it == DataLoader::Iterator());
    }
    DataLoader changed(ds, {.bs = 4});
    changed.add_batch_tfms({[](const torch::Tensor& x) { return x + 100; }});
    CHECK(changed.begin()->x[0].item<float>() == 100);  // the next iteration sees the change
  }

  TEST_CASE("the order is a function of (seed, epoch) alone") {
    auto ds = synthetic_dataset(50);
    DataLoader a(ds, {.bs = 8, .shuffle = true, .seed = 3});
    DataLoader b(ds, {.bs = 8, .shuffle = true, .seed = 3});
    DataLoader c(ds, {.bs = 8, .shuffle = true, .seed = 4});
    CHECK(a.order(2) == b.order(2));
    CHECK(a.order(2) != a.order(3));
    CHECK(a.order(2) != c.order(2));
    b.set_epoch(5);
    auto first = *b.begin();
    CHECK(torch::equal(first.x, a.make_batch(a.order(5), 5, 0).x));
    DataLoader sequential(ds, {.bs = 8});
    CHECK(sequential.order(9)[0] == 0);
    CHECK(sequential.order(9)[49] == 49);
  }

  TEST_CASE("Normalize against hand-computed values") {
    auto x = torch::tensor({0, 51, 255, 102}, torch::kUInt8).view({1, 2, 2, 1});  // channels 0 and 1
    auto y = Normalize{{0.1, 0.2}, {0.5, 0.25}}(x);
    CHECK((y.scalar_type() == torch::kFloat));
    CHECK(y[0][0][0][0].item<double>() == doctest::Approx((0.0 - 0.1) / 0.5));
    CHECK(y[0][0][1][0].item<double>() == doctest::Approx((0.2 - 0.1) / 0.5));
    CHECK(y[0][1][0][0].item<double>() == doctest::Approx((1.0 - 0.2) / 0.25));
    CHECK(y[0][1][1][0].item<double>() == doctest::Approx((0.4 - 0.2) / 0.25));
    CHECK(error_of([&] { Normalize{{0.1, 0.2, 0.3}, {1, 1, 1}}(x); }) ==
          "Normalize: 3 channel statistics for a batch of shape [1, 2, 2, 1]");
  }

  TEST_CASE("Normalize's ATen path (GPU batches) equals its CPU byte loop bitwise and copies nothing per batch") {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(6);
    const auto bytes = torch::randint(0, 256, {4, 3, 5, 7}, gen, torch::kLong).to(torch::kByte);
    for (const auto& normalize : {Normalize::imagenet(), Normalize{{0.2860}, {0.3530}}, Normalize{{0.5, 0.5, 0.5}, {0.25, 0.25, 0.25}}}) {
      CAPTURE(normalize.mean.size());
      CHECK(torch::equal(normalize.normalize_tensor(bytes), normalize.normalize_bytes(bytes)));
      const auto channels_last = bytes.contiguous(at::MemoryFormat::ChannelsLast);
      CHECK(torch::equal(normalize.normalize_tensor(channels_last), normalize.normalize_bytes(bytes)));
    }
    // Float input (already in [0, 1]) keeps its dtype and is (x - mean) / std.
    const auto x = bytes.to(torch::kDouble) / 255;
    const auto mean = torch::tensor({0.485, 0.456, 0.406}, torch::kDouble).view({1, 3, 1, 1});
    const auto std = torch::tensor({0.229, 0.224, 0.225}, torch::kDouble).view({1, 3, 1, 1});
    const auto y = Normalize::imagenet()(x);
    CHECK((y.scalar_type() == torch::kDouble));
    CHECK(torch::allclose(y, (x - mean) / std, 1e-12, 1e-12));
    // The same statistics for every channel: scalars, no tensor made from host values
    // per batch (on a GPU each would be a copy from the host): the cost of the
    // conversion, product and sum written by hand.
    testing::OperatorCount count;
    const Normalize same{{0.2860}, {0.3530}};
    count.start();
    same.normalize_tensor(bytes);
    const auto normalize_ops = count.stop();
    count.start();
    bytes.to(torch::kFloat).mul_(1.0 / (255 * 0.3530)).add_(-0.2860 / 0.3530);
    CHECK(normalize_ops == count.stop());
  }

  TEST_CASE("Normalize::from_data: per-channel statistics (a constant channel gives 0s); a std <= 0 is refused") {
    auto x = torch::zeros({4, 2, 1, 1}, torch::kUInt8);
    x.select(1, 0).copy_(torch::tensor({51, 51, 102, 102}, torch::kUInt8).view({4, 1, 1}));  // channel 0: 0.2 or 0.4
    x.select(1, 1).copy_(torch::tensor({0, 255, 0, 255}, torch::kUInt8).view({4, 1, 1}));    // channel 1: 0 or 1
    TensorDataset ds(x, torch::zeros({4}, torch::kLong));
    auto stats = Normalize::from_data(ds);
    CHECK(stats.mean[0] == doctest::Approx(0.3));
    CHECK(stats.std[0] == doctest::Approx(std::sqrt(0.04 / 3)));
    CHECK(stats.mean[1] == doctest::Approx(0.5));
    CHECK(stats.std[1] == doctest::Approx(std::sqrt(1.0 / 3)));  // unbiased, as torch.std
    x.select(1, 1).fill_(255);  // an opaque alpha channel: as fastai, std 1e-7 and every value 0
    const auto opaque = Normalize::from_data(TensorDataset(x, torch::zeros({4}, torch::kLong)));
    CHECK(opaque.std[1] == 1e-7);
    CHECK(torch::equal(opaque(x).select(1, 1), torch::zeros({4, 1, 1})));
    CHECK(error_of([&] { Normalize{{0.1, 0.2}, {0.5, 0}}(x); }) ==
          "Normalize: std 0 of channel 1 is not a positive number");
    CHECK(error_of([&] { Normalize{{0.1}, {NAN}}(x); }) == "Normalize: std nan of channel 0 is not a positive number");
  }

  TEST_CASE("Normalize::from_data: items spread over the whole dataset, chunk by chunk as one pass would") {
    // Sorted by class, as a folder's items: item i is all i/1000, so the first half alone would say 0.0495.
    const auto values = torch::arange(200, torch::kDouble).div(1000);
    const auto x = values.view({200, 1, 1, 1}).expand({200, 2, 3, 3}).contiguous().to(torch::kFloat);
    TensorDataset sorted(x, torch::zeros({200}, torch::kLong));
    const auto half = Normalize::from_data(sorted, 100);  // items 0, 2, ..., 198
    const auto even = values.index({torch::indexing::Slice(0, 200, 2)});
    CHECK(half.mean[0] == doctest::Approx(even.mean().item<double>()).epsilon(1e-6));
    // 300 random items in chunks equal the statistics of all of them at once.
    torch::manual_seed(0);
    const auto many = torch::rand({300, 3, 4, 5});
    const auto stats = Normalize::from_data(TensorDataset(many, torch::zeros({300}, torch::kLong)));
    const auto per_channel = many.to(torch::kDouble).transpose(0, 1).reshape({3, -1});
    for (int64_t c = 0; c < 3; ++c) {
      CHECK(stats.mean[size_t(c)] == doctest::Approx(per_channel[c].mean().item<double>()).epsilon(1e-12));
      CHECK(stats.std[size_t(c)] == doctest::Approx(per_channel[c].std().item<double>() + 1e-7).epsilon(1e-12));
    }
  }

  TEST_CASE("read_idx reads raw and gzipped idx files, and names the file when corrupt") {
    const auto dir = temp_dir("idx");
    const auto images = idx_bytes({3, 2, 2}, 10), labels = idx_bytes({3}, 1);
    write_gz(dir + "/train-images-idx3-ubyte.gz", images);
    write_raw(dir + "/train-labels-idx1-ubyte", labels);
    auto ds = vision::idx_image_dataset(dir, "train");
    CHECK(ds->size() == 3);
    CHECK((ds->x().sizes() == torch::IntArrayRef{3, 1, 2, 2}));
    CHECK((ds->x().scalar_type() == torch::kUInt8));
    CHECK(ds->x()[1][0][0][1].item<int>() == 10 + 5);
    CHECK((ds->y().scalar_type() == torch::kLong));
    CHECK(ds->y()[2].item<int64_t>() == 3);

    auto truncated = images;
    truncated.resize(truncated.size() - 3);
    write_raw(dir + "/short-images-idx3-ubyte", truncated);
    CHECK(error_of([&] { vision::read_idx(dir + "/short-images-idx3-ubyte"); }) ==
          "'" + dir + "/short-images-idx3-ubyte' has 25 bytes, its header promises 28 (truncated or corrupt)");
    write_raw(dir + "/bad", {1, 2, 3, 4, 5});
    CHECK(error_of([&] { vision::read_idx(dir + "/bad"); }) == "'" + dir + "/bad' is not an idx file (bad magic number)");
    auto longer = images;
    longer.push_back(7);
    write_raw(dir + "/long", longer);
    CHECK(error_of([&] { vision::read_idx(dir + "/long"); }) ==
          "'" + dir + "/long' has more than 28 bytes, its header promises 28 (truncated or corrupt)");
    // Found by fuzzing: dimensions whose product overflowed 64 bits, and a zero dimension
    // beside ones whose strides overflow (torch::empty threw its own error).
    for (const auto* name : {"overflowing_dims.idx", "zero_dim_huge_strides.idx", "zero_dim_empty.idx"}) {
      const auto path = std::string(FASTCPP_FIXTURES) + "/../fuzz/corpus/idx/" + name;
      CHECK(error_of([&] { vision::read_idx(path); }) == "'" + path + "': its header's dimensions span more than 1 TiB (corrupt)");
    }
    write_raw(dir + "/empty", {0, 0, 8, 2, 0, 0, 0, 0, 0, 0, 0, 5});
    CHECK((vision::read_idx(dir + "/empty").sizes() == torch::IntArrayRef{0, 5}));
    CHECK(error_of([&] { vision::idx_image_dataset(dir, "t10k"); }) ==
          "idx file '" + dir + "/t10k-images-idx3-ubyte[.gz]' not found");
    const auto* set = std::getenv("FASTCPP_FASHION_MNIST");
    const std::string before = set ? set : "";
    setenv("FASTCPP_FASHION_MNIST", dir.c_str(), 1);  // where the examples look: how to get it is said
    CHECK(error_of([&] { vision::idx_image_dataset(vision::fashion_mnist_dir(), "t10k"); }) ==
          "idx file '" + dir + "/t10k-images-idx3-ubyte[.gz]' not found (Fashion-MNIST: sudo apt-get install "
          "dataset-fashion-mnist, or FASTCPP_FASHION_MNIST=DIR names a folder of its idx files)");
    if (set) setenv("FASTCPP_FASHION_MNIST", before.c_str(), 1);
    else unsetenv("FASTCPP_FASHION_MNIST");
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("TensorDataset checks its inputs") {
    CHECK(error_of([] { TensorDataset(torch::zeros({3, 2}), torch::zeros({4})); }) ==
          "TensorDataset: x and y need the same first dimension, got x [3, 2] and y [4]");
    auto ds = synthetic_dataset(4);
    CHECK(error_of([&] { ds->get(4); }) == "TensorDataset: index 4 out of range for 4 items");
    auto batch = ds->Dataset::get_batch({3, 1});  // the generic path: get + collate
    CHECK(torch::equal(batch.x, ds->get_batch({3, 1}).x));
    CHECK(error_of([&] { ds->get_batch({0, 4}); }) == "TensorDataset: index 4 out of range for 4 items");
    CHECK(error_of([&] { ds->get_batch({-1, 2}); }) == "TensorDataset: index -1 out of range for 4 items");
  }

  TEST_CASE("items that do not stack and errors not fastcpp's name their items and batch") {
    const auto first_error = [](DatasetPtr dataset, DataLoaderOptions options) {
      return error_of([&] {
        for (const auto& b : DataLoader(dataset, options)) (void)b;
      });
    };
    const std::vector<int64_t> threes(6, 3), none;
    // Items 2 and 3 make batch 1: named by their positions in the dataset.
    CHECK(first_error(std::make_shared<UnevenDataset>(std::vector<int64_t>{3, 3, 4, 3}), {.bs = 2}) ==
          "items of one batch differ in shape: item 3 is [3], item 2 [4]: add a Resize or crop to the item "
          "transforms (batch 1 of epoch 0)");
    const std::vector<int64_t> uneven_targets{1, 1, 2};
    CHECK(first_error(std::make_shared<UnevenDataset>(std::vector<int64_t>(3, 3), uneven_targets), {.bs = 3}) ==
          "targets of one batch differ in shape: item 2's is [2], item 0's [1]: a dataset of such targets pads them "
          "in its collate_items (batch 0 of epoch 0)");
    CHECK(first_error(std::make_shared<OwnCollate>(std::vector<int64_t>{3, 3, 4, 3}), {.bs = 4, .workers = 2}) ==
          "items of one batch differ in shape: item 2 is [4], item 0 [3]: add a Resize or crop to the item "
          "transforms (batch 0 of epoch 0)");
    CHECK(error_of([] { collate({{torch::zeros({3}), torch::tensor(0)}, {torch::zeros({4}), torch::tensor(1)}}); }) ==
          "items of one batch differ in shape: item 1 is [4], item 0 [3]: add a Resize or crop to the item transforms");
    CHECK(first_error(std::make_shared<UnevenDataset>(threes, none, 5), {.bs = 2}) ==
          "item 5: shape '[3]' is invalid for input of size 2 (batch 2 of epoch 0)");
    CHECK(first_error(std::make_shared<UnevenDataset>(threes, none, -1, 1), {.bs = 2, .workers = 2}) ==
          "item 1: no pixel at (9, 9) (batch 0 of epoch 0)");
    CHECK(first_error(std::make_shared<FailingBatches>(), {.bs = 2}) == "disk on fire (batch 0 of epoch 0)");
    // A batch transform's libtorch error, on the consumer's thread or a worker's.
    const BatchTransform bad_view = [](const torch::Tensor& x) { return x.view({-1, 7}); };
    for (int workers : {0, 2}) {
      const auto message = first_error(synthetic_dataset(8), {.bs = 4, .workers = workers, .batch_tfms = {bad_view}});
      CHECK(message == "shape '[-1, 7]' is invalid for input of size 16 (batch 0 of epoch 0)");
    }
    // A sampler whose indices() disagree with its size(): the batches are cut by size().
    struct ShortSampler : Sampler {
      std::vector<int64_t> indices(int64_t) const override { return {0, 1, 2, 3}; }
      size_t size() const override { return 10; }
    };
    DataLoader short_loader(synthetic_dataset(10), {.bs = 2});
    short_loader.set_sampler(std::make_shared<ShortSampler>());
    CHECK(error_of([&] { short_loader.begin(); }) ==
          "DataLoader: the sampler's indices() gave 4 indices where its size() says 10");
  }

  TEST_CASE("TensorDataset::on: one copy per device, shared while held, let go with its last holder") {
    auto ds = synthetic_dataset(6);
    auto first = ds->on(torch::kCPU), second = ds->on(torch::kCPU);
    CHECK(first == second);
    CHECK(first->x().data_ptr() == ds->x().data_ptr());  // on its own device: the same tensors
    const TensorDataset copy_of_ds = *ds;                // a copy of the dataset shares its copies
    CHECK(copy_of_ds.on(torch::kCPU) == first);
    const std::weak_ptr<const TensorDataset> watch = first;
    first.reset();
    CHECK_FALSE(watch.expired());
    second.reset();
    CHECK(watch.expired());  // the dataset itself does not keep it
  }

  TEST_CASE("TensorDataset: consecutive items are a view of the data, others a copy, with the same values") {
    auto ds = synthetic_dataset(6);
    const auto view = ds->get_batch({2, 3, 4});
    CHECK(view.x.data_ptr() == ds->x()[2].data_ptr());  // no copy
    CHECK(torch::equal(view.x, ds->Dataset::get_batch({2, 3, 4}).x));
    for (const std::vector<int64_t>& scattered : {std::vector<int64_t>{2, 4, 3}, {1, 1, 2}, {3, 5}}) {
      const auto copy = ds->get_batch(scattered);
      CHECK(copy.x.data_ptr() != ds->x()[scattered.front()].data_ptr());
      CHECK(torch::equal(copy.x, ds->Dataset::get_batch(scattered).x));
      CHECK(torch::equal(copy.y, ds->Dataset::get_batch(scattered).y));
    }
  }
  TEST_CASE("read_csv: quotes, line breaks in quotes, CRLF, columns by name or position; errors name the file and line") {
    const auto table = parse_csv("name,label\r\n\"a, b.png\",\"say \"\"hi\"\"\"\nc.png,\"two\nlines\"\n\n", "t.csv");
    CHECK(table.header == std::vector<std::string>{"name", "label"});
    REQUIRE(table.rows.size() == 2);
    CHECK(table.rows[0] == CsvRow{"a, b.png", "say \"hi\""});
    CHECK(table.rows[1] == CsvRow{"c.png", "two\nlines"});
    CHECK(table.lines == std::vector<size_t>{2, 3});
    CHECK(table.column("label") == 1);
    CHECK(table.column(0) == 0);
    // Lines of spaces and tabs are blank, as pandas reads them; quoted spaces are a value.
    const auto spaced = parse_csv("name,label\n \na.png,b\n\t \n", "spaced.csv");
    CHECK(spaced.rows == std::vector<CsvRow>{{"a.png", "b"}});
    CHECK(spaced.lines == std::vector<size_t>{3});
    CHECK(error_of([] { parse_csv("name,label\na.png,b\n\" \"\n", "q.csv"); }) == "'q.csv' line 3 has 1 fields, the header 2");
    CHECK(parse_csv("x;1\ny;2", "s.csv", {.delimiter = ';', .header = false}).header == std::vector<std::string>{"0", "1"});
    CHECK(parse_csv("\xEF\xBB\xBFname,label\na.png,b\n", "excel.csv").column("name") == 0);  // a spreadsheet's byte order mark
    // A quote inside a field is itself, as Python's csv reads it; only a field's first character opens quotes.
    const auto inner = parse_csv("name,label\na\"b.jpg,cat\nc\"d.jpg,dog\n", "inner.csv");
    REQUIRE(inner.rows.size() == 2);
    CHECK(inner.rows[0] == CsvRow{"a\"b.jpg", "cat"});
    CHECK(inner.rows[1] == CsvRow{"c\"d.jpg", "dog"});
    CHECK(error_of([&] { table.column("is_valid"); }) == "'t.csv' has no column 'is_valid' (its columns: name, label)");
    CHECK(error_of([&] { table.column(2); }) == "'t.csv' has no column 2 (its columns: name, label)");
    CHECK(error_of([&] { table.column(-1); }) == "Column: a position counts from 0, got -1");
    CHECK(error_of([] { parse_csv("a,b\n1,2\n3\n", "r.csv"); }) == "'r.csv' line 3 has 1 fields, the header 2");
    CHECK(error_of([] { parse_csv("a,b\n\"1,2\n", "q.csv"); }) == "'q.csv' line 2: a quoted field is never closed");
    CHECK(error_of([] { read_csv("/nonexistent/labels.csv"); }) == "CSV file '/nonexistent/labels.csv' not found or unreadable");
  }

  TEST_CASE("splitters: fastai's RandomSplitter permutation and cut, grandparent folders, a function, indices, a column") {
    // torch.manual_seed(42); torch.randperm(10) in PyTorch: [2, 6, 1, 8, 4, 5, 0, 9, 3, 7]; int(0.25 * 10) = 2 validate.
    const auto random = RandomSplitter{.valid_pct = 0.25, .seed = 42}.split(10);
    CHECK(random.valid == std::vector<int64_t>{2, 6});
    CHECK(random.train == std::vector<int64_t>{1, 8, 4, 5, 0, 9, 3, 7});
    CHECK(RandomSplitter{.valid_pct = 0.0}.split(3).valid.empty());
    CHECK(error_of([] { RandomSplitter{.valid_pct = 1.0}.split(3); }) == "RandomSplitter: valid_pct must be in [0, 1), got 1.000000");
    const std::vector<std::string> paths{"d/train/a/1.png", "d/valid/a/2.png", "d/test/b/3.png", "d/train/b/4.png"};
    const auto by_folder = GrandparentSplitter{}(paths);
    CHECK(by_folder.train == std::vector<int64_t>{0, 3});
    CHECK(by_folder.valid == std::vector<int64_t>{1});
    const auto by_name = FuncSplitter{[](const std::string& path) { return path.back() == 'g' && path[path.size() - 5] == '2'; }}(paths);
    CHECK(by_name.valid == std::vector<int64_t>{1});
    CHECK(by_name.train == std::vector<int64_t>{0, 2, 3});
    CHECK(IndexSplitter{{3, 0}}.split(4).train == std::vector<int64_t>{1, 2});
    CHECK(error_of([] { IndexSplitter{{4}}.split(4); }) == "IndexSplitter: index 4 is outside the 4 items");
    const auto table = parse_csv("name,is_valid\na,True\nb,False\nc,1\nd,0\n", "v.csv");
    const auto by_column = ColSplitter(table)(table.rows);
    CHECK(by_column.valid == std::vector<int64_t>{0, 2});
    CHECK(by_column.train == std::vector<int64_t>{1, 3});
    const auto spreadsheet = parse_csv("name,is_valid\na,FALSE\nb,TRUE\nc,1.0\nd,0.0\n", "v.csv");
    CHECK(ColSplitter(spreadsheet)(spreadsheet.rows).valid == std::vector<int64_t>{1, 2});
    const auto folds = parse_csv("name,fold\na,2\nb,0\nc,1\nd,2\n", "f.csv");
    const auto on_fold = ColSplitter(folds, "fold", {"2"})(folds.rows);  // fastai's ColSplitter('fold', on=2)
    CHECK(on_fold.valid == std::vector<int64_t>{0, 3});
    CHECK(on_fold.train == std::vector<int64_t>{1, 2});
    const auto bad = parse_csv("name,is_valid\n\"a\nb\",0\nc,yes\n", "v.csv");
    CHECK(error_of([&] { ColSplitter{bad}(bad.rows); }) ==
          "ColSplitter: row 1 (line 4) of 'v.csv' has 'yes' in column 'is_valid' (expected True or False, 1 or 0)");
  }
}
