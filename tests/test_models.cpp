// Vision models: torchvision interop (fixtures from tests/fixtures/torchvision_models.py,
// made by the models_fixtures ctest entry), vision_learner, summary, interpretation.
#include <cstdlib>
#include <filesystem>
#include <map>

#include "core/block_gemm.h"
#include "distributed/batchnorm_relu.h"
#include "helpers.h"
#include "operator_count.h"

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

// fastai's own XResNet-18 (widen 0.25, n_out 10), written by fastai_reference.py.
std::string fastai_xresnet18() { return std::string(FASTCPP_FASTAI_FIXTURES) + "/xresnet18.pth"; }

std::string model_fixture(const std::string& name) {
  const auto path = std::string(FASTCPP_MODEL_FIXTURES) + "/" + name;
  REQUIRE_MESSAGE(std::filesystem::exists(path), "missing " << path << ": run tests/fixtures/torchvision_models.py make "
                                                              << FASTCPP_MODEL_FIXTURES);
  return path;
}

c10::impl::GenericDict read_dict(const std::string& path) {
  return read_torch_file(read_file(path)).toGenericDict();
}

torch::Tensor entry(const c10::impl::GenericDict& dict, const std::string& key) {
  return dict.at(c10::IValue(key)).toTensor();
}

// |a - b| <= 1e-5 * (1 + |b|), element-wise.
bool close(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && ((a - b).abs() <= 1e-5 * (1 + b.abs())).all().item<bool>();
}

// Calibrates the norm layers on random images (so eval outputs stay O(1)), then eval mode.
void calibrate(vision::ResNet& model) {
  torch::NoGradGuard no_grad;
  model->train();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  for (int i = 0; i < 3; ++i) model->forward(torch::randn({8, 3, 64, 64}, gen));
  model->eval();
}

// Images [n, 3, size, size] with labels in [0, 3) and a vocab.
DataLoaders image_dls(int64_t n = 16, int64_t size = 32) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  auto make = [&](int64_t count) {
    return std::make_shared<TensorDataset>(torch::randn({count, 3, size, size}, gen), torch::randint(3, {count}, gen, torch::kLong));
  };
  return {DataLoader(make(n), {.bs = 8}), DataLoader(make(n / 2), {.bs = 8}), {"cat", "dog", "fox"}};
}

// Four 32 px images and their masks of two classes, for training and for validation.
DataLoaders mask_dls() {
  auto masks = [] {
    return std::make_shared<TensorDataset>(torch::randn({4, 3, 32, 32}), torch::randint(2, {4, 32, 32}, torch::kLong));
  };
  return {DataLoader(masks(), {.bs = 4}), DataLoader(masks(), {.bs = 4}), {"a", "b"}};
}

// A classifier block holding its pooling layer, as torchvision's and timm's heads do.
struct PoolFlattenImpl : torch::nn::Module {
  PoolFlattenImpl() : pool(register_module("pool", torch::nn::AdaptiveAvgPool2d(1))) {}
  torch::Tensor forward(const torch::Tensor& x) { return pool(x).flatten(1); }
  torch::nn::AdaptiveAvgPool2d pool;
};
TORCH_MODULE(PoolFlatten);

}  // namespace

TEST_SUITE("models") {
  TEST_CASE("ResNet-18 and ResNet-50 load torchvision's state dicts by name and compute the same outputs") {
    torch::set_num_threads(2);
    for (const std::string arch : {"resnet18", "resnet50"}) {
      CAPTURE(arch);
      auto model = arch == "resnet18" ? vision::resnet18() : vision::resnet50();
      load_state_dict(*model, model_fixture(arch + ".pth"));  // strict: every key, no extras, same shapes
      model->eval();
      const auto io = read_dict(model_fixture(arch + "_io.pt"));
      torch::NoGradGuard no_grad;
      const auto output = model->forward(entry(io, "input"));
      CHECK(close(output, entry(io, "output")));
      CHECK((output - entry(io, "output")).abs().max().item<double>() < 1e-5);
    }
  }

  TEST_CASE("XResNet: fastai's names and shapes, blocks starting as the identity, c_in, widen, bad options") {
    auto model = vision::xresnet18({.n_out = 10, .c_in = 1});
    std::map<std::string, torch::Tensor> params;
    for (const auto& p : model->named_parameters()) params[p.key()] = p.value();
    CHECK((params.at("0.0.weight").sizes() == torch::IntArrayRef{32, 1, 3, 3}));
    CHECK((params.at("2.0.weight").sizes() == torch::IntArrayRef{64, 32, 3, 3}));
    CHECK((params.at("4.0.convpath.0.0.weight").sizes() == torch::IntArrayRef{64, 64, 3, 3}));
    CHECK((params.at("5.0.idpath.1.0.weight").sizes() == torch::IntArrayRef{128, 64, 1, 1}));  // after the pool
    CHECK((params.at("11.weight").sizes() == torch::IntArrayRef{10, 512}));
    CHECK(params.count("4.0.idpath.0.0.weight") == 0);  // same width, stride 1: the identity
    CHECK(params.at("4.1.convpath.1.1.weight").abs().sum().item<double>() == 0);  // the block's last norm starts at 0
    CHECK(params.at("4.1.convpath.0.1.weight").min().item<double>() == 1);
    int64_t count = 0;
    for (const auto& p : model->parameters()) count += p.numel();
    CHECK(count == 11'200'298);  // as fastai's xresnet18(n_out=10, c_in=1)
    CHECK((model->forward(torch::randn({2, 1, 28, 28})).sizes() == torch::IntArrayRef{2, 10}));

    auto narrow = vision::xresnet50({.n_out = 3, .widen = 0.5});
    CHECK((narrow->named_parameters()["11.weight"].sizes() == torch::IntArrayRef{3, 1024}));
    CHECK_THROWS_WITH_AS(vision::xresnet(2, {2, 2, 2, 2}), "xresnet: expansion must be 1 or 4, got 2", Error);
    CHECK_THROWS_WITH_AS(vision::xresnet(1, {2, 2}), "xresnet: expected at least 4 stages of blocks, got 2", Error);
  }

  TEST_CASE("a state dict goes C++ -> Python -> C++: torchvision computes our outputs and its edits come back") {
    torch::set_num_threads(2);
    torch::manual_seed(5);
    auto model = vision::resnet18();
    calibrate(model);
    const auto ours = temp_path("ours.pth"), back = temp_path("back.pt");
    save_state_dict(*model, ours);
    const std::string command = std::string(FASTCPP_PYTHON) + " " + FASTCPP_TORCHVISION_SCRIPT + " roundtrip resnet18 " +
                                ours + " " + back;
    REQUIRE(std::system(command.c_str()) == 0);

    const auto input = entry(read_dict(model_fixture("resnet18_io.pt")), "input");
    torch::NoGradGuard no_grad;
    CHECK(close(model->forward(input), entry(read_dict(back), "output")));

    auto reloaded = vision::resnet18();
    load_state_dict(*reloaded, back);  // the dict under "state_dict"
    CHECK(torch::equal(reloaded->named_parameters()["conv1.weight"], -model->named_parameters()["conv1.weight"]));
    CHECK(torch::equal(reloaded->named_buffers()["layer4.1.bn2.running_var"], model->named_buffers()["layer4.1.bn2.running_var"]));
    CHECK(torch::equal(reloaded->fc->weight, model->fc->weight));

    // A Learner's checkpoint (optimizer state, extras) and its export load with torch.load's
    // defaults too (weights_only): no TorchScript type tags in them.
    torch::AutoGradMode training(true);  // past the no_grad above
    Learner learn(image_dls(), vision::resnet18({.num_classes = 3, .width = 8}), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    learn.fit(1, 1e-3);
    const auto checkpoint = temp_path("checkpoint.pt"), exported = temp_path("export.pt");
    learn.save(checkpoint);
    learn.export_learner(exported);
    const std::string load = std::string(FASTCPP_PYTHON) +
                             " -c \"import sys, torch; [torch.load(p) for p in sys.argv[1:]]\" " + checkpoint + " " +
                             exported;
    CHECK(std::system(load.c_str()) == 0);
    std::filesystem::remove(ours);
    std::filesystem::remove(back);
  }

  TEST_CASE("bad weight files name the file and the keys, and change nothing") {
    auto model = vision::resnet18({.num_classes = 10});
    const auto before = snapshot(*model);
    const auto r50 = model_fixture("resnet50.pth");
    const auto message = error_of([&] { load_state_dict(*model, r50); });
    CHECK(message.rfind("weights '" + r50 + "' does not fit the model: not in the model: 'layer1.0.conv3.weight', "
                        "'layer1.0.bn3.weight', ", 0) == 0);
    CHECK(message.find("'layer1.0.downsample.1.weight' and 190 more; shape differs: ") != std::string::npos);
    CHECK(message.find("'layer3.0.conv1.weight' is [256, 512, 1, 1] in the file but [256, 128, 3, 3] in the model and 17 more") !=
          std::string::npos);
    CHECK(error_of([&] { load_state_dict(*vision::resnet50(), model_fixture("resnet18.pth")); })
              .find("missing from the file: 'layer1.0.conv3.weight', ") != std::string::npos);
    CHECK(message.find("shape differs: 'layer1.0.conv1.weight' is [64, 64, 1, 1] in the file but [64, 64, 3, 3] in the model") !=
          std::string::npos);
    CHECK(all_equal(before, snapshot(*model)));

    // Non-strict still refuses shapes; skipping the classifier makes a fine-tuning start.
    const auto r18 = model_fixture("resnet18.pth");
    CHECK(error_of([&] { load_state_dict(*model, r18, {.strict = false}); }) ==
          "weights '" + r18 + "' does not fit the model: shape differs: 'fc.weight' is [1000, 512] in the file but [10, 512] "
          "in the model, 'fc.bias' is [1000] in the file but [10] in the model");
    CHECK_NOTHROW(load_state_dict(*model, r18, {.strict = false, .skip = {"fc."}}));
    const auto head = model->fc->weight.detach().clone();
    CHECK_NOTHROW(load_state_dict(*model, r18, {.skip = {"fc."}}));  // strict: the skipped keys are not missing
    CHECK(torch::equal(model->fc->weight, head));

    const auto truncated = temp_path("truncated.pth");
    std::filesystem::copy_file(r18, truncated, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(truncated, std::filesystem::file_size(truncated) / 3);
    CHECK(error_of([&] { load_state_dict(*model, truncated); })
              .rfind("cannot read weights '" + truncated + "': the file is truncated or not written by torch.save", 0) == 0);
    std::filesystem::remove(truncated);
    CHECK(error_of([&] { load_state_dict(*model, "/nonexistent/r18.pth"); }) ==
          "weights '/nonexistent/r18.pth' not found or unreadable");
    const auto list = temp_path("list.pt");
    write_atomically(list, torch::pickle_save(c10::List<int64_t>({1, 2})));
    CHECK(error_of([&] { load_state_dict(*model, list); }) == "cannot read weights '" + list + "': it holds a GenericList, not a state dict");
    std::filesystem::remove(list);
  }

  TEST_CASE("torch.save's other forms: pickle protocols 4 and 5, complex, uint16 and float8 tensors, subclasses") {
    const auto dir = temp_path("torch_save_forms");
    REQUIRE(std::system((std::string(FASTCPP_PYTHON) + " " + FASTCPP_FIXTURES + "/torch_save_forms.py " + dir).c_str()) == 0);
    const auto read = [&](const std::string& name) { return read_torch_file(read_file(dir + "/" + name)).toGenericDict(); };
    const auto at = [](const c10::impl::GenericDict& dict, const char* key) { return dict.at(c10::IValue(std::string(key))); };
    const auto base = torch::arange(6, torch::kFloat).view({2, 3});
    for (int protocol : {2, 4, 5}) {
      CAPTURE(protocol);
      const auto dict = read("protocol" + std::to_string(protocol) + ".pt");
      CHECK(torch::equal(at(dict, "w").toTensor(), base));
      CHECK(torch::equal(at(dict, "t").toTensor(), base.t()));
      CHECK(at(dict, "t").toTensor().data_ptr() == at(dict, "w").toTensor().data_ptr());  // one storage, as saved
      CHECK(at(dict, "n").toInt() == 3);
      CHECK(at(dict, "s").toStringRef() == "text");
      CHECK(at(dict, "set").isNone());  // sets are not modelled
      CHECK(at(dict, "frozen").isNone());
      if (protocol > 2) CHECK(at(dict, "b").toStringRef() == "bytes");  // protocol 2 pickles bytes as a call
    }
    const auto dtypes = read("dtypes.pt");
    CHECK(torch::equal(at(dtypes, "complex").toTensor(), torch::complex(torch::tensor({1.f, 3.f}), torch::tensor({2.f, -4.f}))));
    CHECK((at(dtypes, "uint16").toTensor().scalar_type() == torch::kUInt16));
    CHECK(torch::equal(at(dtypes, "uint16").toTensor().to(torch::kLong), torch::tensor({1, 65535}, torch::kLong)));
    CHECK(torch::equal(at(dtypes, "float8").toTensor().to(torch::kFloat), torch::tensor({0.5f, -2.f})));
    CHECK(torch::equal(at(dtypes, "parameter").toTensor(), base));
    CHECK(at(dtypes, "seed").isNone());  // past 64 bits: left out, the rest loads
    CHECK(torch::equal(at(read("subclass.pt"), "sub").toTensor(), base));
    const auto odd_keys = read("odd_keys.pt");  // a tuple, None and an object as keys: left out
    CHECK(odd_keys.size() == 1);
    CHECK(torch::equal(at(odd_keys, "w").toTensor(), base));
    torch::nn::Linear linear(3, 2);  // PyTorch's checkpoint recipe holds its weights under model_state_dict
    load_state_dict(*linear, dir + "/tutorial.pt");
    const auto recipe = at(read("tutorial.pt"), "model_state_dict").toGenericDict();
    CHECK(torch::equal(linear->weight, at(recipe, "weight").toTensor()));
    CHECK(torch::equal(linear->bias, at(recipe, "bias").toTensor()));
    const auto whole = dir + "/whole_model.pt";
    CHECK(error_of([&] { read_state_dict(whole); }) ==
          "cannot read weights '" + whole + "': it holds a pickled Python object (torch.save(model), a TorchScript "
          "module or fastai's export.pkl), not a state dict; in Python, torch.save(model.state_dict(), path) writes one");
    const auto legacy = dir + "/legacy.pt";
    CHECK(error_of([&] { read_state_dict(legacy); }) ==
          "cannot read weights '" + legacy + "': it uses torch.save's legacy format (PyTorch before 1.6, or "
          "_use_new_zipfile_serialization=False), which fastcpp does not read; in Python, torch.save(torch.load(f), f) "
          "rewrites it in the current one");
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("ResNet stems and widths") {
    auto cifar = vision::resnet18({.num_classes = 10, .in_channels = 1, .stem = vision::Stem::cifar, .width = 16});
    CHECK(cifar->named_parameters()["conv1.weight"].sizes() == torch::IntArrayRef{16, 1, 3, 3});
    CHECK(cifar->named_parameters()["layer4.0.downsample.0.weight"].sizes() == torch::IntArrayRef{128, 64, 1, 1});
    CHECK(cifar->num_features() == 128);
    cifar->eval();
    CHECK(cifar->body()->forward(torch::zeros({2, 1, 28, 28})).sizes() == torch::IntArrayRef{2, 128, 4, 4});
    CHECK(cifar->forward(torch::zeros({2, 1, 28, 28})).sizes() == torch::IntArrayRef{2, 10});
    CHECK(vision::resnet101()->parameters().size() == 314);
    CHECK(vision::resnet34({.stem = vision::Stem::imagenet})->body()->forward(torch::zeros({1, 3, 64, 64})).sizes() ==
          torch::IntArrayRef{1, 512, 2, 2});
  }

  TEST_CASE("DynamicUnet: any input size, fastai's initialisation, deep clones, clear errors") {
    torch::manual_seed(0);
    auto unet = vision::DynamicUnet(vision::unet_encoder(vision::resnet18, {.width = 8}), {.n_out = 3, .img_size = {32, 32}});
    unet->eval();
    torch::NoGradGuard no_grad;
    CHECK(unet->forward(torch::randn({2, 3, 32, 32})).sizes() == torch::IntArrayRef({2, 3, 32, 32}));
    CHECK(unet->forward(torch::randn({1, 3, 37, 45})).sizes() == torch::IntArrayRef({1, 3, 37, 45}));

    std::map<std::string, torch::Tensor> state;
    for (const auto& [name, tensor] : named_state(*unet)) state[name] = tensor;
    CHECK(torch::all(state.at("layers.1.bias") == 1e-3f).item<bool>());     // fastai's BatchNorm
    CHECK(torch::all(state.at("layers.4.bn.bias") == 1e-3f).item<bool>());
    CHECK(torch::all(state.at("layers.4.shuf.0.0.bias") == 0).item<bool>());  // PixelShuffle_ICNR: bias_std 0
    CHECK(torch::all(state.at("layers.4.conv1.0.bias") == 0).item<bool>());   // apply_init
    CHECK(torch::all(state.at("layers.3.0.0.bias") == 0).item<bool>());
    const auto icnr = state.at("layers.4.shuf.0.0.weight");  // the 4 channels of each shuffled one equal
    const auto groups = icnr.view({-1, 4, icnr.size(1)});
    CHECK(torch::equal(groups, groups.narrow(1, 0, 1).expand_as(groups)));
    CHECK_FALSE(torch::equal(icnr[0], icnr[4]));

    const auto x = torch::randn({1, 3, 32, 32});
    auto encoder = [] { return vision::unet_encoder(vision::resnet18, {.width = 8}); };
    CHECK(error_of([&] { vision::DynamicUnet(encoder(), {.n_out = 3}); }) ==
          "DynamicUnet: img_size must be {height, width}, got 0 values");
  }

  TEST_CASE("DynamicUnet clones: every tensor copied, its own storage, and the global random generator untouched") {
    torch::manual_seed(0);
    auto unet = vision::DynamicUnet(vision::unet_encoder(vision::resnet18, {.width = 8}),
                                    {.n_out = 3, .img_size = {32, 32}, .self_attention = true});
    unet->eval();
    torch::NoGradGuard no_grad;
    torch::manual_seed(7);
    const auto expected_draw = torch::rand({4});
    torch::manual_seed(7);
    auto copy = std::dynamic_pointer_cast<vision::DynamicUnetImpl>(unet->clone());
    CHECK(torch::equal(torch::rand({4}), expected_draw));  // to_parallel's replicas change no later draw

    const auto ours = named_state(*unet), theirs = named_state(*copy);
    REQUIRE(ours.size() == theirs.size());
    for (size_t i = 0; i < ours.size(); ++i) {
      CAPTURE(ours[i].first);
      CHECK(ours[i].first == theirs[i].first);
      CHECK(torch::equal(ours[i].second, theirs[i].second));
      CHECK(ours[i].second.data_ptr() != theirs[i].second.data_ptr());
    }
    CHECK(copy->options().self_attention);
    const auto x = torch::randn({1, 3, 32, 32});
    CHECK(torch::equal(copy->forward(x), unet->forward(x)));
    copy->layers->ptr<vision::UnetBlockImpl>(4)->conv1[0]->as<torch::nn::Conv2dImpl>()->weight.add_(1);
    CHECK_FALSE(torch::equal(copy->forward(x), unet->forward(x)));  // its own tensors
  }

  TEST_CASE("unet_learner: fastai's three groups, a frozen encoder with weights, n_out from the codes, img_size from the data") {
    auto make = [](int64_t n, uint64_t seed) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
      return std::make_shared<TensorDataset>(torch::randn({n, 3, 32, 40}, gen), torch::randint(3, {n, 32, 40}, gen, torch::kLong));
    };
    DataLoaders dls{DataLoader(make(8, 1), {.bs = 4}), DataLoader(make(4, 2), {.bs = 4}), {"background", "item", "rim"}};
    torch::manual_seed(0);
    auto pretrained = vision::resnet18({.width = 8});
    const auto weights = temp_path("unet_encoder.pth");
    save_state_dict(*pretrained, weights);
    auto learn = vision::unet_learner(dls, vision::resnet18, {vision::dice_multi()},
                                      {.pretrained_weights = weights, .width = 8}, quiet());
    silence(learn);
    std::filesystem::remove(weights);
    auto* unet = dynamic_cast<vision::DynamicUnetImpl*>(&learn.model.module());
    REQUIRE(unet != nullptr);
    CHECK(unet->options().n_out == 3);
    CHECK(unet->options().img_size == std::vector<int64_t>{32, 40});
    auto params = unet->named_parameters();
    CHECK(torch::equal(params["layers.0.6.1.conv2.weight"], pretrained->named_parameters()["layer3.1.conv2.weight"]));

    const auto conv_before = params["layers.0.5.0.conv1.weight"].clone();
    const auto bn_before = params["layers.0.5.0.bn1.weight"].clone();
    const auto decoder_before = params["layers.4.conv1.0.weight"].clone();
    learn.fit(1, 1e-2);
    CHECK(torch::equal(params["layers.0.5.0.conv1.weight"], conv_before));  // frozen
    CHECK(!torch::equal(params["layers.0.5.0.bn1.weight"], bn_before));     // norm layers train
    CHECK(!torch::equal(params["layers.4.conv1.0.weight"], decoder_before));

    // The groups: stem to layer2 (encoder layers 0-5), layer3 and layer4, the decoder.
    const auto& groups = learn.opt->param_groups();
    REQUIRE(groups.size() == 3);
    size_t stem_to_layer2 = 0, encoder = unet->encoder()->parameters().size();
    for (size_t i = 0; i < 6; ++i) stem_to_layer2 += unet->encoder()->ptr(i)->parameters().size();
    CHECK(groups[0].params.size() == stem_to_layer2);
    CHECK(groups[1].params.size() == encoder - stem_to_layer2);
    CHECK(groups[2].params.size() == unet->parameters().size() - encoder);

    CHECK(error_of([&] { vision::unet_learner(DataLoaders{dls.train, dls.valid}, vision::resnet18, {}, {}, quiet()); }) ==
          "unet_learner: the data have no codes; give n_out");

    // Presized batches (aug_transforms' size): the U-Net is laid out for the batches, as fastai's.
    DataLoaders presized{DataLoader(make(8, 1), {.bs = 4, .aug_tfms = {vision::aug_transforms({.size = std::pair<int64_t, int64_t>{24, 28}})}}),
                         dls.valid, dls.vocab};
    auto batch_sized = vision::unet_learner(presized, vision::resnet18, {}, {.width = 8}, quiet());
    CHECK(dynamic_cast<vision::DynamicUnetImpl&>(batch_sized.model.module()).options().img_size ==
          std::vector<int64_t>{24, 28});

    auto own_split = quiet();  // a splitter the user gives is kept
    own_split.splitter = [](torch::nn::Module& model) { return std::vector<std::vector<torch::Tensor>>{model.parameters()}; };
    auto one_group = vision::unet_learner(dls, vision::resnet18, {}, {.width = 8}, own_split);
    one_group.create_opt();
    CHECK(one_group.opt->param_groups().size() == 1);
  }

  TEST_CASE("GroupNorm equals torch's group_norm, its own channels-last CPU path included, forward and backward") {
    struct Case {
      std::vector<int64_t> shape;
      int64_t groups;
      bool affine;
    };
    for (const auto& [shape, groups, affine] : std::vector<Case>{{{4, 64, 5, 7}, 32, true},
                                                               {{1, 6, 3, 3}, 3, true},
                                                               {{3, 8, 1, 9}, 1, false},
                                                               {{2, 12, 4, 4}, 12, true}}) {
      for (const bool channels_last : {true, false}) {
        CAPTURE(shape);
        CAPTURE(groups);
        CAPTURE(channels_last);
        torch::manual_seed(0);
        vision::GroupNorm norm(groups, shape[1], 1e-5, affine);
        if (affine) {
          torch::NoGradGuard no_grad;
          norm->weight.normal_();
          norm->bias.normal_();
        }
        // An offset mean, as after a convolution, and a gradient of its own shape.
        const auto input = (torch::randn(shape) * 3 + 5).contiguous(
            channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous);
        const auto dy = torch::randn(shape).contiguous(torch::MemoryFormat::ChannelsLast);
        auto x = input.clone().requires_grad_(true), reference_x = input.contiguous().requires_grad_(true);
        OperatorCount count;
        count.start();
        const auto y = norm(x);
        y.backward(dy);
        // Channels-last takes its own path: ATen's GroupNorm kernels are not called.
        CHECK((count.stop().count("aten::native_group_norm") == 0) == channels_last);
        const auto weight = affine ? norm->weight.detach().clone().requires_grad_(true) : torch::Tensor();
        const auto bias = affine ? norm->bias.detach().clone().requires_grad_(true) : torch::Tensor();
        const auto expected = torch::group_norm(reference_x, groups, weight, bias, 1e-5);
        expected.backward(dy);
        CHECK(y.is_contiguous(x.suggest_memory_format()));
        CHECK(torch::allclose(y, expected, 1e-5, 1e-5));
        CHECK(torch::allclose(x.grad(), reference_x.grad(), 1e-4, 1e-5));
        if (affine) {
          CHECK(torch::allclose(norm->weight.grad(), weight.grad(), 1e-4, 1e-4));
          CHECK(torch::allclose(norm->bias.grad(), bias.grad(), 1e-4, 1e-4));
        }
      }
    }
    CHECK(error_of([] { vision::GroupNorm(32, 48); }) == "GroupNorm: 48 channels do not split into 32 groups");
  }

  TEST_CASE("AvgPool equals torch's avg_pool2d (stride = kernel), its own channels-last CPU path included") {
    struct Case {
      std::vector<int64_t> shape;
      int64_t kernel;
      bool ceil_mode;
    };
    // Whole windows; a last, partial window (7x7 -> 4x4); an edge that floor mode drops; a
    // kernel of 3 on uneven sides.
    for (const auto& [shape, kernel, ceil_mode] : std::vector<Case>{{{4, 16, 28, 28}, 2, true},
                                                                   {{2, 8, 7, 7}, 2, true},
                                                                   {{2, 8, 7, 7}, 2, false},
                                                                   {{3, 5, 9, 7}, 3, true},
                                                                   {{3, 5, 9, 7}, 3, false}}) {
      for (const bool channels_last : {true, false}) {
        CAPTURE(shape);
        CAPTURE(kernel);
        CAPTURE(ceil_mode);
        CAPTURE(channels_last);
        torch::manual_seed(0);
        const auto input = torch::randn(shape).contiguous(
            channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous);
        auto x = input.clone().requires_grad_(true), reference_x = input.clone().requires_grad_(true);
        vision::AvgPool pool(kernel, ceil_mode);
        OperatorCount count;
        count.start();
        const auto y = pool(x);
        const auto dy = torch::randn_like(y);
        y.backward(dy);
        CHECK((count.stop().count("aten::avg_pool2d") == 0) == channels_last);
        const auto expected = torch::avg_pool2d(reference_x, kernel, kernel, 0, ceil_mode);
        expected.backward(dy);
        // The same sums in the same order: equal to the bit.
        CHECK(y.sizes() == expected.sizes());
        CHECK(y.is_contiguous(x.suggest_memory_format()));
        CHECK(torch::equal(y, expected));
        CHECK(torch::equal(x.grad(), reference_x.grad()));
      }
    }
    CHECK(error_of([] { vision::AvgPool(0); }) == "AvgPool: the kernel must be at least 1, got 0");
  }

  TEST_CASE("A convolution over a map smaller than its kernel's reach equals torch's, as one matrix product on the CPU") {
    struct Case {
      std::string what;
      int64_t in, out, kernel, stride, padding, h, w;
      bool bias = false, channels_last_weight = true, contiguous_input = false, input_grad = true;
      int64_t groups = 1, dilation = 1;
      bool own_path = true;
    };
    const std::vector<Case> cases{
        {"3x3 over 2x2", 16, 24, 3, 1, 1, 2, 2},
        {"with a bias, a contiguous weight", 16, 24, 3, 1, 1, 2, 2, true, false},
        {"stride 2: 2x2 to 1x1", 8, 12, 3, 2, 1, 2, 2, true},
        {"5x5 at stride 2 over 3x3, a contiguous weight", 8, 12, 5, 2, 2, 3, 3, true, false},
        {"2x1, the input without gradient", 8, 12, 3, 1, 1, 2, 1, false, true, false, false},
        {"5x5 over 3x3", 4, 6, 5, 1, 2, 3, 3, true},
        // torch's own convolution: too many pixels, one pixel, a contiguous map, groups, dilation.
        {"3x3 over 3x3", 8, 8, 3, 1, 1, 3, 3, false, true, false, true, 1, 1, false},
        {"3x3 over 1x1", 8, 8, 3, 1, 1, 1, 1, false, true, false, true, 1, 1, false},
        {"contiguous 2x2", 8, 8, 3, 1, 1, 2, 2, false, true, true, true, 1, 1, false},
        {"groups", 8, 8, 3, 1, 1, 2, 2, false, true, false, true, 2, 1, false},
        {"dilation", 8, 8, 3, 1, 2, 2, 2, false, true, false, true, 1, 2, false}};
    for (const auto& c : cases) {
      CAPTURE(c.what);
      torch::manual_seed(0);
      torch::nn::Conv2d conv(torch::nn::Conv2dOptions(c.in, c.out, c.kernel)
                                 .stride(c.stride)
                                 .padding(c.padding)
                                 .bias(c.bias)
                                 .groups(c.groups)
                                 .dilation(c.dilation));
      if (c.channels_last_weight) conv->weight.set_data(conv->weight.contiguous(torch::MemoryFormat::ChannelsLast));
      const auto input = torch::randn({5, c.in, c.h, c.w})
                             .contiguous(c.contiguous_input ? torch::MemoryFormat::Contiguous
                                                            : torch::MemoryFormat::ChannelsLast);
      auto x = input.clone().requires_grad_(c.input_grad), reference_x = input.clone().requires_grad_(c.input_grad);
      OperatorCount count;
      count.start();
      const auto y = vision::conv2d(*conv, x);
      const auto dy = torch::randn_like(y);
      y.backward(dy);
      CHECK((count.stop().count("aten::convolution") == 0) == c.own_path);
      const auto weight_grad = conv->weight.grad().clone();
      const auto bias_grad = c.bias ? conv->bias.grad().clone() : torch::Tensor();
      conv->zero_grad();
      const auto expected = conv->forward(reference_x);  // torch's
      expected.backward(dy);
      CHECK(y.sizes() == expected.sizes());
      CHECK(y.is_contiguous(expected.suggest_memory_format()));
      CHECK(close(y, expected));
      CHECK(x.grad().defined() == c.input_grad);
      if (c.input_grad) CHECK(close(x.grad(), reference_x.grad()));
      CHECK(close(weight_grad, conv->weight.grad()));
      if (c.bias) CHECK(close(bias_grad, conv->bias.grad()));
      torch::NoGradGuard no_grad;  // evaluation: the same output
      CHECK(close(vision::conv2d(*conv, x), expected));
    }
  }

  TEST_CASE("block_gemm equals torch's matrix product: odd sizes, a strided left matrix, row strides, accumulating") {
    if (!block_gemm_available()) {
      MESSAGE("skipped: this CPU has no AVX-512 (neither block_gemm nor the Winograd convolutions run)");
      return;
    }
    torch::manual_seed(0);
    for (const auto& [m, k, n] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {14, 7, 32}, {29, 33, 47}, {64, 128, 128}}) {
      CAPTURE(m);
      CAPTURE(k);
      CAPTURE(n);
      const auto a = torch::randn({k, m}).t();         // columns contiguous: the transposed view
      const auto b = torch::randn({k, n + 3}).narrow(1, 0, n);  // rows n + 3 floats apart
      auto c = torch::full({m, n + 5}, 7.0f);
      block_gemm({a.const_data_ptr<float>(), a.stride(0), a.stride(1)}, b.const_data_ptr<float>(), b.stride(0),
                 c.data_ptr<float>(), c.stride(0), m, k, n);
      const auto expected = torch::mm(a, b);
      CHECK(((c.narrow(1, 0, n) - expected).abs() <= 1e-5 * (1 + expected.abs())).all().item<bool>());
      CHECK(torch::equal(c.narrow(1, n, 5), torch::full({m, 5}, 7.0f)));  // nothing past n written
      block_gemm({a.const_data_ptr<float>(), a.stride(0), a.stride(1)}, b.const_data_ptr<float>(), b.stride(0),
                 c.data_ptr<float>(), c.stride(0), m, k, n, /*accumulate=*/true);  // c += a b
      CHECK(((c.narrow(1, 0, n) - 2 * expected).abs() <= 2e-5 * (1 + expected.abs())).all().item<bool>());
      CHECK(torch::equal(c.narrow(1, n, 5), torch::full({m, 5}, 7.0f)));
    }
  }

  TEST_CASE("A 3x3 convolution by Winograd's F(4x4, 3x3) equals torch's: output and gradients, odd maps included") {
    if (!block_gemm_available()) {
      MESSAGE("skipped: this CPU has no AVX-512");
      CHECK_THROWS_WITH_AS(vision::winograd_conv2d(torch::randn({1, 8, 4, 4}), torch::randn({8, 8, 3, 3}), {}),
                           "winograd_conv2d: this CPU has no AVX-512, which its kernels need", Error);
      return;
    }
    // Rounding apart: within 2e-5 of each tensor's largest element (torch's differ by ~5e-6).
    const auto near = [](const torch::Tensor& a, const torch::Tensor& b) {
      return a.sizes() == b.sizes() && (a - b).abs().max().item<double>() <= 2e-5 * b.abs().max().item<double>();
    };
    struct Case {
      std::string what;
      int64_t batch, in, out, h, w;
      bool bias, input_grad;
    };
    for (const auto& c : std::vector<Case>{{"4x4, one tile", 2, 8, 8, 4, 4, false, true},
                                           {"7x10: overhanging tiles, a bias", 3, 5, 7, 7, 10, true, true},
                                           {"16x16, 40 to 24 channels (a chunk and a part)", 2, 40, 24, 16, 16, true, true},
                                           {"9x5, the input without gradient", 1, 6, 3, 9, 5, true, false},
                                           {"16x16, batch 8, 64 channels: blocks of tiles", 8, 64, 64, 16, 16, true, true}}) {
      CAPTURE(c.what);
      torch::manual_seed(0);
      torch::nn::Conv2d conv(torch::nn::Conv2dOptions(c.in, c.out, 3).padding(1).bias(c.bias));
      const auto input = torch::randn({c.batch, c.in, c.h, c.w}).contiguous(torch::MemoryFormat::ChannelsLast);
      auto x = input.clone().requires_grad_(c.input_grad), reference_x = input.clone().requires_grad_(c.input_grad);
      const auto y = vision::winograd_conv2d(x, conv->weight, conv->bias);
      const auto dy = torch::randn_like(y);
      y.backward(dy);
      const auto weight_grad = conv->weight.grad().clone();
      const auto bias_grad = c.bias ? conv->bias.grad().clone() : torch::Tensor();
      conv->zero_grad();
      const auto expected = conv->forward(reference_x);
      expected.backward(dy);
      CHECK(y.is_contiguous(torch::MemoryFormat::ChannelsLast));
      CHECK(near(y, expected));
      CHECK(x.grad().defined() == c.input_grad);
      if (c.input_grad) CHECK(near(x.grad(), reference_x.grad()));
      CHECK(near(weight_grad, conv->weight.grad()));
      if (c.bias) CHECK(near(bias_grad, conv->bias.grad()));
    }
    // A second derivative (a gradient penalty) equals torch's.
    torch::manual_seed(0);
    torch::nn::Conv2d conv(torch::nn::Conv2dOptions(4, 6, 3).padding(1));
    const auto input = torch::randn({2, 4, 8, 8}).contiguous(torch::MemoryFormat::ChannelsLast);
    std::vector<torch::Tensor> penalty_grads;
    for (const bool winograd : {true, false}) {
      const auto x = input.clone().requires_grad_(true);
      const auto y = winograd ? vision::winograd_conv2d(x, conv->weight, conv->bias) : conv->forward(x);
      const auto dx = torch::autograd::grad({y.pow(2).sum()}, {x}, {}, true, true)[0];
      dx.pow(2).sum().backward();
      penalty_grads.push_back(conv->weight.grad().clone());
      conv->zero_grad();
    }
    CHECK(near(penalty_grads[0], penalty_grads[1]));
    // vision::conv2d takes this path where its products are large enough, torch's elsewhere.
    torch::nn::Conv2d wide(torch::nn::Conv2dOptions(128, 128, 3).padding(1));
    const auto map = torch::randn({16, 128, 16, 16}).contiguous(torch::MemoryFormat::ChannelsLast);
    CHECK(vision::winograd_applies(*wide, map));
    OperatorCount count;
    count.start();
    const auto y = vision::conv2d(*wide, map);
    CHECK(count.stop().count("aten::convolution") == 0);
    CHECK(near(y, wide->forward(map)));
    CHECK(vision::winograd_applies(*wide, map.narrow(0, 0, 4)));                 // 64 tiles
    CHECK_FALSE(vision::winograd_applies(*wide, map.narrow(0, 0, 3)));           // 48 tiles
    CHECK_FALSE(vision::winograd_applies(*wide, map.contiguous()));              // not channels-last
    const auto narrow = map.narrow(1, 0, 64).narrow(0, 0, 3).contiguous(torch::MemoryFormat::ChannelsLast);
    torch::nn::Conv2d to_32(torch::nn::Conv2dOptions(64, 32, 3).padding(1));
    torch::nn::Conv2d to_16(torch::nn::Conv2dOptions(64, 16, 3).padding(1));
    CHECK_FALSE(vision::winograd_applies(*to_32, narrow));                       // 48 tiles
    CHECK(vision::winograd_applies(*to_32, map.narrow(1, 0, 64).contiguous(torch::MemoryFormat::ChannelsLast)));
    CHECK_FALSE(vision::winograd_applies(*to_16, map.narrow(1, 0, 64).contiguous(torch::MemoryFormat::ChannelsLast)));
    torch::nn::Conv2d from_32(torch::nn::Conv2dOptions(32, 64, 3).padding(1));
    CHECK_FALSE(vision::winograd_applies(*from_32, map.narrow(1, 0, 32).contiguous(torch::MemoryFormat::ChannelsLast)));
    torch::nn::Conv2d widest(torch::nn::Conv2dOptions(128, 1024, 3).padding(1));
    CHECK_FALSE(vision::winograd_applies(*widest, map));                         // 256 tiles for 1024 channels
    CHECK(vision::winograd_applies(*widest, torch::cat({map, map}).contiguous(torch::MemoryFormat::ChannelsLast)));
    torch::nn::Conv2d strided(torch::nn::Conv2dOptions(128, 128, 3).padding(1).stride(2));
    CHECK_FALSE(vision::winograd_applies(*strided, map));
  }

  TEST_CASE("ResNets and XResNets in channels-last (BatchNorm+ReLU fused, own pooling) train as in contiguous") {
    struct Case {
      std::string name;
      std::function<torch::nn::Sequential()> make;
      std::vector<int64_t> input;
      int64_t unfused;  // BatchNorms with no ReLU after them: they stay ATen's
      int64_t products;  // 3x3 convolutions over 2x2 maps: one matrix product each (vision::conv2d)
    };
    // Small inputs and shallow nets: a deep net from random weights on a small batch turns
    // rounding into gradients apart by 10% (ResNet-50 does, contiguous against channels-last,
    // with ATen's kernels alone), so the Bottleneck is checked as a block.
    const std::vector<Case> cases{
        {"resnet18", [] { return torch::nn::Sequential(vision::resnet18({.num_classes = 5})); }, {4, 3, 40, 40}, 4, 3},
        {"bottleneck", [] { return torch::nn::Sequential(vision::Bottleneck(128, 64, 2)); }, {4, 128, 9, 9}, 1, 0},
        {"xresnet18", [] { return vision::xresnet18({.n_out = 5}); }, {4, 3, 40, 40}, 3, 3},
        {"xresnet50", [] { return vision::xresnet50({.n_out = 5}); }, {4, 3, 40, 40}, 4, 2}};
    // At 40 px the last stage's maps are 2x2: its 3x3 convolutions but the first (stride 2,
    // from 3x3) are matrix products in channels-last.
    for (const auto& [name, make, shape, unfused, products] : cases) {
      CAPTURE(name);
      torch::manual_seed(0);
      auto model = make();
      {
        torch::NoGradGuard no_grad;  // ResNet's BatchNorms start at weight 1, bias 0: other values
        for (const auto& p : model->named_parameters())
          if (p.key().find("bn") != std::string::npos) p.value().uniform_(0.5, 1.5);
      }
      const auto twin = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->clone());
      const auto input = torch::randn(shape);
      // One training step's forward and backward; the dispatched BatchNorm and convolution
      // kernels counted.
      const auto run = [&](torch::nn::SequentialImpl& m, const torch::Tensor& x) {
        OperatorCount count;
        count.start();
        const auto out = m.forward(x);
        (out * torch::randn_like(out, torch::MemoryFormat::Contiguous)).sum().backward();
        auto counts = count.stop();
        return std::pair{counts["aten::native_batch_norm"], counts["aten::convolution"]};
      };
      torch::manual_seed(1);
      const auto [contiguous_norms, contiguous_convs] = run(*model, input);
      torch::manual_seed(1);
      const auto [channels_last_norms, channels_last_convs] =
          run(*twin, input.contiguous(torch::MemoryFormat::ChannelsLast));
      CHECK(channels_last_norms == unfused);
      CHECK(contiguous_norms > unfused);
      CHECK(contiguous_convs - channels_last_convs == products);
      const auto expected = model->named_parameters();
      for (const auto& p : twin->named_parameters()) {
        CAPTURE(p.key());
        const auto& reference = expected[p.key()].grad();
        CHECK(torch::allclose(p.value().grad(), reference, 1e-4, 1e-4 * reference.abs().max().item<double>()));
      }
      const auto expected_buffers = model->named_buffers();
      for (const auto& b : twin->named_buffers()) {
        CAPTURE(b.key());
        CHECK(torch::allclose(b.value(), expected_buffers[b.key()], 1e-4, 1e-5));
      }
    }
  }

  TEST_CASE("create_head is fastai's: concat pool, BatchNorm, dropout, bias-free linears") {
    auto head = vision::create_head(512, 10);
    std::vector<std::string> names;
    for (const auto& child : head->named_children()) names.push_back(child.key());
    CHECK(names == std::vector<std::string>{"head_pool", "head_flatten", "head_bn1", "head_drop1", "head_linear1", "head_relu1",
                                            "head_bn2", "head_drop2", "head_linear2"});
    auto params = head->named_parameters();
    CHECK(params["head_bn1.weight"].size(0) == 1024);
    CHECK(params["head_linear1.weight"].sizes() == torch::IntArrayRef{512, 1024});
    CHECK(params["head_linear2.weight"].sizes() == torch::IntArrayRef{10, 512});
    CHECK(!params.contains("head_linear1.bias"));
    CHECK(torch::equal(params["head_bn2.bias"], torch::full({512}, 1e-3)));  // fastai's BatchNorm; bn_final's is 0
    CHECK(torch::equal(vision::create_head(8, 2, {.bn_final = true})->named_parameters()["head_bn_final.bias"],
                       torch::zeros({2})));
    CHECK(head->named_children()[3].value()->as<torch::nn::Dropout>()->options.p() == 0.25);
    CHECK(head->named_children()[7].value()->as<torch::nn::Dropout>()->options.p() == 0.5);
    // [max, avg]
    auto x = torch::arange(8, torch::kFloat).view({1, 2, 2, 2});
    CHECK(torch::equal(vision::AdaptiveConcatPool2d()->forward(x).flatten(), torch::tensor({3.f, 7.f, 1.5f, 5.5f})));
  }

  TEST_CASE("create_head's lin_first, first_bn and pool: the biases fastai gives, and an export rebuilds the same head") {
    auto params = vision::create_head(8, 3, {.lin_first = true})->named_parameters();
    CHECK(!params.contains("head_linear1.bias"));        // a BatchNorm follows it
    CHECK(torch::equal(params["head_linear2.bias"], torch::zeros({3})));  // the last stands alone: He weights, zero bias
    CHECK(params["head_bn1.weight"].size(0) == 512);     // after the linear: its outputs
    params = vision::create_head(8, 3, {.first_bn = false})->named_parameters();
    CHECK(!params.contains("head_bn1.weight"));
    CHECK(torch::equal(params["head_linear1.bias"], torch::zeros({512})));
    auto flat = vision::create_head(8, 3, {.pool = false});
    CHECK(flat->named_children().keys().front() == "head_bn1");
    flat->eval();
    CHECK((flat->forward(torch::randn({2, 8})).sizes() == torch::IntArrayRef{2, 3}));

    const vision::VisionLearnerOptions options{.width = 8, .lin_ftrs = {16}, .ps = 0.2, .pool = true, .first_bn = false,
                                               .lin_first = true};
    const auto spec = vision::vision_model_spec(vision::resnet18, 3, options);
    const auto names = [](const torch::nn::Sequential& model) { return model->named_parameters().keys(); };
    CHECK(names(vision::create_vision_model(spec, "model.pt")) == names(vision::create_vision_model(vision::resnet18, 3, options)));
    auto before = spec;  // an export from before these options: fastai's defaults
    before.erase("pool");
    before.erase("first_bn");
    before.erase("lin_first");
    CHECK(names(vision::create_vision_model(before, "model.pt")) == names(vision::create_vision_model(vision::resnet18, 3, {.width = 8, .lin_ftrs = {16}})));
  }

  TEST_CASE("vision_learner with a custom head: its layers last as head_*, initialized as fastai's, last group") {
    torch::manual_seed(0);
    torch::nn::Sequential head(torch::nn::AdaptiveAvgPool2d(1), torch::nn::Flatten(), torch::nn::Linear(512, 7),
                               torch::nn::BatchNorm1d(7));
    {
      torch::NoGradGuard no_grad;
      head[2]->named_parameters()["bias"].fill_(5);
      head[3]->named_parameters()["weight"].fill_(3);
    }
    auto learn = vision::vision_learner(image_dls(), vision::resnet18, {}, {.custom_head = head}, quiet());
    auto& model = learn.model.module();
    const auto names = model.named_children().keys();
    CHECK(std::vector<std::string>(names.end() - 4, names.end()) ==
          std::vector<std::string>{"head_0", "head_1", "head_2", "head_3"});
    auto params = model.named_parameters();
    CHECK(torch::equal(params["head_2.bias"], torch::zeros({7})));
    CHECK(torch::equal(params["head_3.weight"], torch::full({7}, 3.f)));  // norm layers as they are
    // He-normal: a standard deviation of sqrt(2 / fan_in), 1/16 for 512 inputs.
    CHECK(params["head_2.weight"].std().item<double>() == doctest::Approx(1.0 / 16).epsilon(0.1));
    learn.model.module().eval();
    CHECK((learn.model(torch::randn({2, 3, 32, 32})).sizes() == torch::IntArrayRef{2, 7}));
    const auto groups = vision::resnet_split(model);
    REQUIRE(groups.size() == 3);
    CHECK(groups.back().size() == 4);  // the linear's weight and bias, the BatchNorm's
    CHECK(vision::vision_model_spec(vision::resnet18, 7, {.custom_head = head}).empty());  // no record to build it from
  }

  TEST_CASE("vision_learner: three parameter groups with the slice's lrs, frozen body with weights") {
    torch::set_num_threads(2);
    auto learn = vision::vision_learner(image_dls(), vision::resnet18, {metrics::accuracy()},
                                        {.pretrained_weights = model_fixture("resnet18.pth")}, quiet());
    silence(learn);
    REQUIRE(learn.n_param_groups() == 3);
    const auto one_group = [](torch::nn::Module& m) { return std::vector<std::vector<torch::Tensor>>{m.parameters()}; };
    CHECK(vision::vision_learner(image_dls(), vision::resnet18, {}, {}, quiet({.splitter = one_group})).n_param_groups() ==
          1);  // a splitter given is kept, as fastai's
    auto& model = learn.model.module();
    // The body holds torchvision's weights.
    const auto file = read_state_dict(model_fixture("resnet18.pth"));
    CHECK(torch::equal(model.named_parameters()["layer3.1.conv2.weight"], entry(file, "layer3.1.conv2.weight")));

    const auto conv_before = model.named_parameters()["layer2.0.conv1.weight"].clone();
    const auto bn_before = model.named_parameters()["layer2.0.bn1.weight"].clone();
    const auto head_before = model.named_parameters()["head_linear2.weight"].clone();
    learn.fit(1, 1e-2);
    CHECK(torch::equal(model.named_parameters()["layer2.0.conv1.weight"], conv_before));   // frozen
    CHECK(!torch::equal(model.named_parameters()["layer2.0.bn1.weight"], bn_before));      // norm layers train
    CHECK(!torch::equal(model.named_parameters()["head_linear2.weight"], head_before));

    learn.unfreeze();
    learn.fit(1, slice(1e-4, 1e-2));
    const auto lrs = learn.opt->hyper("lr");
    REQUIRE(lrs.size() == 3);
    CHECK(lrs[0] == doctest::Approx(1e-4));
    CHECK(lrs[1] == doctest::Approx(1e-3));
    CHECK(lrs[2] == doctest::Approx(1e-2));
    CHECK(!torch::equal(model.named_parameters()["layer2.0.conv1.weight"], conv_before));

    // The groups: stem to layer2, layer3 and layer4, the head.
    auto groups = vision::resnet_split(model);
    auto children = model.named_children();
    CHECK(groups[0].size() == 3 + children["layer1"]->parameters().size() + children["layer2"]->parameters().size());
    CHECK(groups[1].size() == children["layer3"]->parameters().size() + children["layer4"]->parameters().size());
    CHECK(groups[2].size() == 6);  // two BatchNorms (weight, bias) and two linears

    // Grey images from RGB weights: the first conv holds the sum of the three channels.
    auto grey = vision::vision_learner(image_dls(), vision::resnet18, {},
                                       {.pretrained_weights = model_fixture("resnet18.pth"), .in_channels = 1}, quiet());
    CHECK(torch::allclose(grey.model.module().named_parameters()["conv1.weight"], entry(file, "conv1.weight").sum(1, true)));

    auto random = vision::vision_learner(image_dls(), vision::resnet18, {}, {}, quiet());
    CHECK(random.model.module().named_parameters()["layer1.0.conv1.weight"].requires_grad());
  }

  TEST_CASE("vision_learner and unet_learner add ImageNet's Normalize with pretrained weights, as fastai's") {
    torch::set_num_threads(2);
    const auto weights = model_fixture("resnet18.pth");
    auto specs = [](const DataLoader& loader) {
      std::vector<std::string> out;
      for (const auto& tfm : loader.options().batch_tfms) out.push_back(batch_transform_spec(tfm));
      return out;
    };
    const std::vector<std::string> imagenet{"Normalize 0.485,0.456,0.406 0.229,0.224,0.225"};
    auto pretrained = vision::vision_learner(image_dls(), vision::resnet18, {}, {.pretrained_weights = weights}, quiet());
    CHECK(specs(pretrained.dls.train) == imagenet);
    CHECK(specs(pretrained.dls.valid) == imagenet);
    // Not without weights, nor for grey images, nor when told not to, nor over the data's own.
    CHECK(specs(vision::vision_learner(image_dls(), vision::resnet18, {}, {}, quiet()).dls.train).empty());
    auto grey = vision::vision_learner(image_dls(), vision::resnet18, {}, {.pretrained_weights = weights, .in_channels = 1}, quiet());
    CHECK(specs(grey.dls.train).empty());
    auto told = vision::vision_learner(image_dls(), vision::resnet18, {}, {.pretrained_weights = weights, .normalize = false}, quiet());
    CHECK(specs(told.dls.train).empty());
    auto own = image_dls();
    own.add_batch_tfms({Normalize{{0.5, 0.5, 0.5}, {0.25, 0.25, 0.25}}});
    auto kept = vision::vision_learner(own, vision::resnet18, {}, {.pretrained_weights = weights}, quiet());
    CHECK(specs(kept.dls.valid) == std::vector<std::string>{"Normalize 0.5,0.5,0.5 0.25,0.25,0.25"});

    auto unet = vision::unet_learner(mask_dls(), vision::resnet18, {}, {.pretrained_weights = weights}, quiet());
    CHECK(specs(unet.dls.valid) == imagenet);
  }

  TEST_CASE("vision_learner with an xresnet: fastai's cut and split, its weights, grey input, widen") {
    torch::set_num_threads(2);
    const auto file = read_state_dict(fastai_xresnet18());
    auto learn = vision::vision_learner(image_dls(), vision::xresnet18, {},
                                        {.pretrained_weights = fastai_xresnet18(), .width = 16}, quiet());
    auto& model = learn.model.module();
    std::vector<std::string> names;
    for (const auto& child : model.named_children()) names.push_back(child.key());
    CHECK(std::vector<std::string>(names.begin(), names.begin() + 9) ==
          std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7", "head_pool"});
    auto params = model.named_parameters();
    CHECK(torch::equal(params["5.0.idpath.1.0.weight"], entry(file, "5.0.idpath.1.0.weight")));
    CHECK(torch::equal(params["0.0.weight"], entry(file, "0.0.weight")));
    CHECK(params["head_bn1.weight"].size(0) == 256);  // 512 * 0.25 features, concat pooled

    auto groups = vision::xresnet_split(model);
    auto children = model.named_children();
    size_t stem = 0, stages = 0;
    for (const char* name : {"0", "1", "2"}) stem += children[name]->parameters().size();
    for (const char* name : {"4", "5", "6", "7"}) stages += children[name]->parameters().size();
    CHECK(groups[0].size() == stem);
    CHECK(groups[1].size() == stages);
    CHECK(groups[2].size() == 6);
    CHECK(!params["4.0.convpath.0.0.weight"].requires_grad());  // frozen body: weights were given

    learn.unfreeze();
    learn.fit(1, slice(1e-4, 1e-2));
    CHECK(learn.opt->hyper("lr").size() == 3);
    CHECK(!torch::equal(params["4.0.convpath.0.0.weight"], entry(file, "4.0.convpath.0.0.weight")));

    auto grey = vision::create_vision_model(vision::xresnet18, 3,
                                            {.pretrained_weights = fastai_xresnet18(), .in_channels = 1, .width = 16});
    CHECK(torch::allclose(grey->named_parameters()["0.0.weight"], entry(file, "0.0.weight").sum(1, true)));
    CHECK((vision::create_vision_model(vision::xresnet50, 3, {.width = 32})->named_parameters()["head_bn1.weight"].size(0) ==
           2 * 256 * 4));
    torch::nn::Sequential plain(torch::nn::Linear(2, 2));
    CHECK_THROWS_WITH_AS(vision::xresnet_split(*plain),
                         "xresnet_split: the model has no layer named '3' or no head_ layers; is it from create_vision_model?",
                         Error);
    CHECK_THROWS_WITH_AS(vision::create_vision_model(vision::xresnet18, 3, {.stem = vision::Stem::cifar}),
                         "vision_learner: an xresnet has fastai's stem of three convs; Stem::cifar is for the ResNets",
                         Error);
  }

  TEST_CASE("vision_learner with a model of the program's own: fastai's cut before the last pooling layer, its "
            "weights, default_split") {
    torch::set_num_threads(2);
    torch::manual_seed(0);
    using namespace torch::nn;
    // Two stages with a max pool between them; the last pooling layer sits inside a block.
    const auto make = [](const vision::BodyOptions& o) {
      Sequential net;
      net->push_back("conv1", Conv2d(Conv2dOptions(o.in_channels, 8, 3).padding(1)));
      net->push_back("bn1", BatchNorm2d(8));
      net->push_back("relu", ReLU());
      net->push_back("pool", MaxPool2d(2));
      net->push_back("conv2", Conv2d(Conv2dOptions(8, 16, 3).padding(1)));
      net->push_back("classifier", PoolFlatten());
      net->push_back("fc", Linear(16, 10));
      return net;
    };
    const auto arch = vision::Arch::from_model(make);
    const auto names = [](const Sequential& model) {
      std::vector<std::string> out;
      for (const auto& child : model->named_children()) out.push_back(child.key());
      return out;
    };
    auto model = vision::create_vision_model(arch, 3);
    const auto layers = names(model);
    CHECK(std::vector<std::string>(layers.begin(), layers.begin() + 6) ==
          std::vector<std::string>{"conv1", "bn1", "relu", "pool", "conv2", "head_pool"});
    CHECK(model->named_parameters()["head_bn1.weight"].size(0) == 2 * 16);  // conv2's 16 features, concat pooled
    CHECK(vision::vision_model_spec(arch, 3, {}).empty());  // no name to rebuild it by
    const auto bn_in_eval = [&](const vision::BodyOptions& o) {  // counting the features keeps each layer's mode
      auto net = make(o);
      net->ptr(1)->eval();
      return net;
    };
    const auto kept_modes = vision::create_vision_model(vision::Arch::from_model(bn_in_eval), 3)->named_children();
    CHECK_FALSE(kept_modes["bn1"]->is_training());
    CHECK(kept_modes["conv1"]->is_training());
    const auto two_layers = vision::create_vision_model(vision::Arch::from_model(make, 2), 3);
    CHECK(names(two_layers)[2] == "head_pool");
    CHECK(two_layers->named_parameters()["head_bn1.weight"].size(0) == 2 * 8);
    const auto from_the_end = vision::create_vision_model(vision::Arch::from_model(make, -2), 3);  // fastai's cut=-2
    CHECK(names(from_the_end)[5] == "head_pool");

    // Weights of the whole model: the body takes its layers' (the classifier and fc left
    // out), grey input the first conv's RGB filters summed; frozen, then two groups' lrs.
    const auto path = temp_path("own_model.pth");
    auto saved = make({});
    save_state_dict(*saved, path);
    auto learn = vision::vision_learner(image_dls(), arch, {}, {.pretrained_weights = path}, quiet());
    silence(learn);
    const auto normalizes = [](const DataLoader& loader) {
      const auto& tfms = loader.options().batch_tfms;
      const auto is_normalize = [](const BatchTransform& t) { return t.target<Normalize>() != nullptr; };
      return std::any_of(tfms.begin(), tfms.end(), is_normalize);
    };
    // No statistics known for its weights: its batches as the loaders make them, as fastai's
    // (ImageNet's for ours, or those given).
    CHECK_FALSE(normalizes(learn.dls.train));
    const auto with_stats = vision::Arch::from_model(make, std::nullopt, Normalize{{0.1, 0.2, 0.3}, {1, 1, 1}});
    const auto given = vision::vision_learner(image_dls(), with_stats, {}, {.pretrained_weights = path}, quiet());
    REQUIRE(normalizes(given.dls.valid));
    CHECK(given.dls.valid.options().batch_tfms.back().target<Normalize>()->mean == std::vector<double>{0.1, 0.2, 0.3});
    CHECK(normalizes(vision::vision_learner(image_dls(), vision::resnet18, {},
                                            {.pretrained_weights = model_fixture("resnet18.pth")}, quiet())
                         .dls.train));
    auto params = learn.model.module().named_parameters();
    CHECK(torch::equal(params["conv2.weight"], saved->named_parameters()["conv2.weight"]));
    REQUIRE(learn.n_param_groups() == 2);
    const auto groups = vision::body_head_split(learn.model.module());
    CHECK(groups[0].size() == 6);  // two convs' weights and biases, the BatchNorm's
    CHECK(groups[1].size() == params.size() - 6);
    learn.fit(1, 1e-2);
    CHECK(torch::equal(params["conv2.weight"], saved->named_parameters()["conv2.weight"]));  // frozen
    learn.unfreeze();
    learn.fit(1, slice(1e-4, 1e-2));
    const auto lrs = learn.opt->hyper("lr");
    REQUIRE(lrs.size() == 2);
    CHECK(lrs[0] == doctest::Approx(1e-4));
    CHECK(lrs[1] == doctest::Approx(1e-2));
    CHECK(!torch::equal(params["conv2.weight"], saved->named_parameters()["conv2.weight"]));
    auto grey = vision::create_vision_model(arch, 3, {.pretrained_weights = path, .in_channels = 1});
    CHECK(torch::allclose(grey->named_parameters()["conv1.weight"],
                          saved->named_parameters()["conv1.weight"].sum(1, true)));
    std::filesystem::remove(path);

    // A U-Net on the same body: fastai's default_split, the encoder and the rest.
    auto unet = vision::unet_learner(mask_dls(), arch, {}, {}, quiet());
    silence(unet);
    CHECK(unet.n_param_groups() == 2);
    unet.fit(1, 1e-3);
    CHECK(std::isfinite(unet.validate()[0]));

    CHECK(vision::has_pool_type(*vision::AdaptiveConcatPool2d()));
    CHECK(!vision::has_pool_type(*Linear(2, 2)));
    const auto no_pool = [](const vision::BodyOptions&) {
      return Sequential(Conv2d(3, 4, 3), Flatten(), Linear(4, 2));
    };
    CHECK(error_of([&] { vision::create_vision_model(vision::Arch::from_model(no_pool), 2); }) ==
          "vision_learner: the model has no pooling layer to cut its body before; give Arch::from_model a cut (the "
          "number of layers in the body)");
    const auto pool_first = [](const vision::BodyOptions&) {
      return Sequential(AdaptiveAvgPool2d(1), Flatten(), Linear(3, 2));
    };
    CHECK(error_of([&] { vision::create_vision_model(vision::Arch::from_model(pool_first), 2); }) ==
          "vision_learner: the model's last pooling layer is its first, which leaves no body; give Arch::from_model a "
          "cut (the number of layers in the body)");
    CHECK(error_of([&] { vision::create_vision_model(vision::Arch::from_model(make, 9), 2); }) ==
          "vision_learner: a cut of 9 layers, but the model has 7 (the body needs at least one)");
    CHECK(error_of([&] { vision::create_vision_model(vision::Arch::from_model(make, -7), 2); }) ==
          "vision_learner: a cut of -7 layers, but the model has 7 (the body needs at least one)");
    const auto rgb_only = [&](const vision::BodyOptions&) { return make({}); };
    const auto refused =
        error_of([&] { vision::create_vision_model(vision::Arch::from_model(rgb_only), 2, {.in_channels = 1}); });
    CHECK(refused.rfind("vision_learner: the model's body fails on zeros of shape [1, 1, 2048, 2048] (", 0) == 0);
    CHECK(refused.find("); does its model function build it for in_channels?") != std::string::npos);
    CHECK(error_of([] { vision::Arch::from_model(nullptr); }) == "Arch::from_model: no model function given");
  }

  TEST_CASE("summary lists each layer with its output shape and parameter counts") {
    auto learn = vision::vision_learner(image_dls(), vision::resnet18, {},
                                        {.pretrained_weights = model_fixture("resnet18.pth")}, quiet());
    const auto text = learn.summary();
    CHECK(text.find("conv1 (Conv2d)                       [8, 64, 16, 16]                9408  False") != std::string::npos);
    CHECK(text.find("bn1 (SyncBatchNorm)                  [8, 64, 16, 16]                 128  True") != std::string::npos);
    CHECK(text.find("layer4 (Stage)                       [8, 512, 1, 1]              8393728  Partly") != std::string::npos);
    CHECK(text.find("head_linear2 (Linear)                [8, 3]                         1536  True") != std::string::npos);
    int64_t total = 0, trainable = 0;
    for (const auto& p : learn.model.module().parameters()) {
      total += p.numel();
      if (p.requires_grad()) trainable += p.numel();
    }
    CHECK(text.find("Total params: " + std::to_string(total) + "\n") != std::string::npos);
    CHECK(text.find("Total trainable params: " + std::to_string(trainable) + "\n") != std::string::npos);
    CHECK(text.find("Frozen: the first 2 of 3 parameter groups") != std::string::npos);
    CHECK(learn.model.module().is_training());  // summary leaves the mode as it was

    Learner wrong(image_dls(16, 16), torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(5, 3)),
                  CrossEntropyLoss(), {}, quiet());
    const auto refused = error_of([&] { wrong.summary(); });
    CHECK(refused.rfind("summary: '1' fails on an input of shape [8, 768]: mat1 and mat2 shapes cannot be", 0) == 0);
    CHECK(wrong.model.module().is_training());
  }

  TEST_CASE("get_preds with losses: each item's loss, averaging to the validation loss") {
    Learner learn(synthetic_dls(8, 8, 4), tiny_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    const auto preds = learn.get_preds(nullptr, /*with_loss=*/true);
    REQUIRE(preds.losses.sizes() == torch::IntArrayRef{8});
    CHECK(preds.losses.mean().item<double>() == doctest::Approx(learn.validate()[0]).epsilon(1e-6));
    CHECK(preds.losses[2].item<double>() ==
          doctest::Approx(-std::log(preds.preds[2][preds.targets[2].item<int64_t>()].item<double>())).epsilon(1e-5));

    // A loss without an unreduced form gets each item's loss as a batch of one.
    const Loss l1 = [](const torch::Tensor& p, const torch::Tensor& t) { return (p - t).abs().mean(); };
    const auto p = torch::tensor({1.f, 2.f, 3.f, 5.f}).view({2, 2}), t = torch::zeros({2, 2});
    CHECK(torch::allclose(l1.per_item(p, t), torch::tensor({1.5f, 4.f})));
    CHECK(torch::allclose(MSELoss().per_item(p, t), torch::tensor({2.5f, 17.f})));
    // A user loss whose unreduced form keeps each item's positions ([batch, 2]): each item's mean.
    const Loss squares([](const torch::Tensor& p, const torch::Tensor& t) { return (p - t).square().mean(); }, nullptr,
                       [](const torch::Tensor& p, const torch::Tensor& t) { return (p - t).square(); });
    CHECK(torch::allclose(squares.per_item(p, t), torch::tensor({2.5f, 17.f})));
  }

  TEST_CASE("interpretation: confusion matrix, most confused, top losses") {
    // 5 items, 3 classes: predicted 0 0 2 1 2 for actual 0 1 2 1 1.
    auto probs = torch::tensor({0.8f, 0.1f, 0.1f, 0.6f, 0.3f, 0.1f, 0.1f, 0.1f, 0.8f, 0.2f, 0.7f, 0.1f, 0.1f, 0.2f, 0.7f}).view({5, 3});
    auto targets = torch::tensor({0, 1, 2, 1, 1}, torch::kLong);
    auto losses = -probs.gather(1, targets.unsqueeze(1)).squeeze(1).log();
    vision::ClassificationInterpretation interp(DataLoader(std::make_shared<TensorDataset>(torch::zeros({5, 1, 4, 4}), targets)),
                                               {"cat", "dog", "fox"}, {probs, targets, losses});
    CHECK(torch::equal(interp.confusion_matrix(), torch::tensor({1, 0, 0, 1, 1, 1, 0, 0, 1}, torch::kLong).view({3, 3})));
    const auto confused = interp.most_confused();
    REQUIRE(confused.size() == 2);
    CHECK(confused[0].actual == "dog");
    CHECK(confused[0].predicted == "cat");
    CHECK(confused[1].predicted == "fox");
    const auto top = interp.top_losses(2);
    CHECK(top[0].index == 4);  // p(dog) = 0.2
    CHECK(top[0].predicted == 2);
    CHECK(top[0].probability == doctest::Approx(0.7));
    CHECK(top[1].index == 1);  // p(dog) = 0.3
    CHECK(interp.confusion_matrix_text() ==
          "confusion matrix (rows: actual, columns: predicted)\n"
          "           0     1     2\n"
          "cat        1     0     0   (0)\n"
          "dog        1     1     1   (1)\n"
          "fox        0     0     1   (2)\n");
    CHECK(interp.top_losses_text(1) == "item      loss  predicted / actual (probability)\n"
                                       "4        1.609  fox / dog (0.70)\n");
    const auto multi_hot = torch::nn::functional::one_hot(targets, 3).to(torch::kFloat);
    CHECK(error_of([&] {
            vision::ClassificationInterpretation(DataLoader(std::make_shared<TensorDataset>(torch::zeros({5, 1}), multi_hot)),
                                                 {"cat", "dog", "fox"}, {probs, multi_hot, losses});
          }) == "ClassificationInterpretation: expected one class an item, got targets [5, 3] (several classes an item "
                "have no confusion matrix)");
    const auto interpret = [&](const torch::Tensor& y) {
      vision::ClassificationInterpretation(DataLoader(std::make_shared<TensorDataset>(torch::zeros({5, 1}), y)),
                                           {"cat", "dog", "fox"}, {probs, y, losses});
    };
    CHECK(error_of([&] { interpret(targets.to(torch::kFloat)); }) ==
          "ClassificationInterpretation: targets must be class indices, got Float ones (a regression or single-logit "
          "target has no confusion matrix)");
    CHECK(error_of([&] { interpret(targets.index_put({torch::tensor({3})}, torch::tensor(3))); }) ==
          "ClassificationInterpretation: the target of item 3 is 3, not a class index in [0, 3)");
#if FASTCPP_HAS_OPENCV
    const auto cm = temp_path("cm.png"), tl = temp_path("tl.png");
    interp.plot_confusion_matrix(cm);
    interp.plot_top_losses(4, tl);
    CHECK(std::filesystem::file_size(cm) > 500);
    CHECK(std::filesystem::file_size(tl) > 500);
    std::filesystem::remove(cm);
    std::filesystem::remove(tl);
#endif
  }
}

TEST_SUITE("models") {
  TEST_CASE("a second derivative (a gradient penalty) through the library's own CPU kernels equals torch's") {
    // The penalty |d(f(x) . v)/dx|^2 differentiated again: its gradient reaches x, v and the
    // layer's parameters only through a backward pass that records a graph.
    const auto channels_last = torch::MemoryFormat::ChannelsLast;
    const auto penalty_grads = [](const std::function<torch::Tensor(const torch::Tensor&)>& f, const torch::Tensor& input,
                                  const std::vector<torch::Tensor>& params, const char* own_function) {
      const auto x = input.clone().requires_grad_(true);
      const auto y = f(x);
      if (own_function) CHECK(y.grad_fn()->name().find(own_function) != std::string::npos);
      torch::manual_seed(3);
      const auto v = torch::randn(y.sizes()).requires_grad_(true);
      const auto dx = torch::autograd::grad({(y * v).sum()}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
      for (const auto& p : params) p.mutable_grad() = torch::Tensor();
      dx.pow(2).sum().backward();
      const auto or_zeros = [](const torch::Tensor& grad, const torch::Tensor& like) {
        return grad.defined() ? grad.clone() : torch::zeros_like(like);  // a linear layer's x gets none
      };
      std::vector<torch::Tensor> grads{or_zeros(x.grad(), x), or_zeros(v.grad(), v)};
      for (const auto& p : params) grads.push_back(or_zeros(p.grad(), p));
      return grads;
    };
    const auto equal = [](const std::vector<torch::Tensor>& ours, const std::vector<torch::Tensor>& theirs) {
      REQUIRE(ours.size() == theirs.size());
      for (size_t i = 0; i < ours.size(); ++i) {
        CAPTURE(i);
        CHECK(torch::allclose(ours[i], theirs[i], 1e-4, 1e-5));
      }
    };
    torch::manual_seed(0);
    // The small-map convolution (a 2x2 map, a 3x3 kernel).
    torch::nn::Conv2d conv(torch::nn::Conv2dOptions(4, 6, 3).padding(1));
    const auto map = torch::randn({3, 4, 2, 2}).contiguous(channels_last);
    const std::vector<torch::Tensor> conv_params{conv->weight, conv->bias};
    equal(penalty_grads([&](const torch::Tensor& x) { return vision::conv2d(*conv, x); }, map, conv_params, "SmallMapConv"),
          penalty_grads([&](const torch::Tensor& x) { return conv->forward(x); }, map, conv_params, nullptr));
    // GroupNorm with weights apart from 1.
    vision::GroupNorm norm(2, 8);
    {
      torch::NoGradGuard no_grad;
      norm->weight.uniform_(0.5, 1.5);
      norm->bias.normal_();
    }
    const auto features = torch::randn({2, 8, 3, 5}).contiguous(channels_last);
    const std::vector<torch::Tensor> norm_params{norm->weight, norm->bias};
    equal(penalty_grads([&](const torch::Tensor& x) { return vision::group_norm(x, 2, norm->weight, norm->bias, 1e-5); },
                        features, norm_params, "ChannelsLastGroupNorm"),
          penalty_grads([&](const torch::Tensor& x) { return torch::group_norm(x, 2, norm->weight, norm->bias, 1e-5); },
                        features, norm_params, nullptr));
    // AvgPool, squared after (a pool is linear: its own second derivative is 0).
    const auto pooled = torch::randn({2, 8, 5, 5}).contiguous(channels_last);
    equal(penalty_grads([](const torch::Tensor& x) { return vision::avg_pool(x, 2, true).pow(2); }, pooled, {},
                        nullptr),
          penalty_grads([](const torch::Tensor& x) { return torch::avg_pool2d(x, 2, 2, 0, true).pow(2); }, pooled, {},
                        nullptr));
    // BatchNorm + residual + ReLU in one kernel, training.
    distributed::SyncBatchNorm bn(8);
    {
      torch::NoGradGuard no_grad;
      bn->weight.uniform_(0.5, 1.5);
      bn->bias.normal_();
    }
    const auto residual = torch::randn({4, 8, 3, 3}).contiguous(channels_last);
    const auto before = torch::randn({4, 8, 3, 3}).contiguous(channels_last);
    REQUIRE(distributed::fused_batchnorm_relu_applies(*bn, before, residual));
    const std::vector<torch::Tensor> bn_params{bn->weight, bn->bias};
    // Through the input's gradient, then through the residual's.
    for (const bool by_residual : {false, true}) {
      CAPTURE(by_residual);
      const auto ours = [&](const torch::Tensor& v) {
        return by_residual ? bn->forward_relu(before, v) : bn->forward_relu(v, residual);
      };
      const auto reference = [&](const torch::Tensor& v) {
        const auto& x = by_residual ? before : v;
        return torch::relu(torch::batch_norm(x, bn->weight, bn->bias, {}, {}, true, 0.1, bn->eps, false) +
                           (by_residual ? v : residual));
      };
      const auto& variable = by_residual ? residual : before;
      equal(penalty_grads(ours, variable, bn_params, "BatchNormReLU"),
            penalty_grads(reference, variable, bn_params, nullptr));
    }
  }
}

TEST_SUITE("models") {
  TEST_CASE("the own CPU kernels leave to torch what torch refuses: a GroupNorm weight of another length, a kernel "
            "larger than the padded map") {
    const auto channels_last = torch::MemoryFormat::ChannelsLast;
    vision::GroupNorm norm(32, 64);
    const auto wider = torch::randn({2, 128, 4, 4}).contiguous(channels_last);
    CHECK_THROWS_AS(vision::group_norm(wider, 32, norm->weight, norm->bias, 1e-5), c10::Error);
    // 3x3 at stride 2 without padding over a 2x2 map: no output pixel has its whole window.
    torch::nn::Conv2d strided(torch::nn::Conv2dOptions(8, 8, 3).stride(2));
    CHECK_THROWS_AS(vision::conv2d(*strided, torch::randn({1, 8, 2, 2}).contiguous(channels_last)), c10::Error);
  }
}
