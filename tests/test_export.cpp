// Exported models: Learner::export_learner, vision::load_learner and the Predictor, the
// text forms of the transforms they carry, and the errors for files that do not fit.
#include <torch/serialize.h>

#include <filesystem>
#include <fstream>
#include <opencv2/imgcodecs.hpp>

#include "core/spec_text.h"
#include "helpers.h"
#include "learner/export.h"
#include "vision/predictor.h"

using namespace fastcpp;
using namespace fastcpp::testing;
namespace fs = std::filesystem;

namespace {

// root/{train,valid}/{cat,dog}/<i>.png: noisy images of varying sizes, a colour per class.
std::string make_split_folder(const std::string& name) {
  const auto root = temp_path(name);
  fs::remove_all(root);
  cv::RNG rng(7);
  for (const char* split : {"train", "valid"})
    for (const char* cls : {"cat", "dog"}) {
      const auto dir = fs::path(root) / split / cls;
      fs::create_directories(dir);
      for (int i = 0; i < 5; ++i) {
        cv::Mat image(30 + 3 * i, 36 + 2 * i, CV_8UC3);
        rng.fill(image, cv::RNG::UNIFORM, 0, 255);
        image += std::string(cls) == "cat" ? cv::Scalar(60, 0, 0) : cv::Scalar(0, 0, 60);
        REQUIRE(cv::imwrite((dir / (std::to_string(i) + ".png")).string(), image));
      }
    }
  return root;
}

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The exported file at `from` with `key` set to `value`, written to `to`.
void edit_export(const std::string& from, const std::string& to, const std::string& key, const c10::IValue& value) {
  auto root = torch::pickle_load(file_bytes(from)).toGenericDict();
  root.insert_or_assign(c10::IValue(key), value);
  write_bytes(to, torch::pickle_save(root));
}

// Grey 8x8 uint8 images in 3 classes, normalized per batch, and a model of the test's own.
DataLoaders grey_dls() {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  auto images = [&](int64_t n) {
    return std::make_shared<TensorDataset>(torch::randint(256, {n, 1, 8, 8}, gen, torch::kLong).to(torch::kByte),
                                           torch::randint(3, {n}, gen, torch::kLong));
  };
  const std::vector<BatchTransform> tfms{Normalize{{0.5}, {0.25}}};
  return {DataLoader(images(12), {.bs = 4, .batch_tfms = tfms}), DataLoader(images(6), {.bs = 4, .batch_tfms = tfms}),
          {"a", "b", "c"}};
}

torch::nn::Sequential grey_model(int64_t classes = 3) {
  torch::manual_seed(1);
  return torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(64, classes));
}

}  // namespace

TEST_SUITE("export") {
  TEST_CASE("a vision_learner's export predicts on image files as get_preds does on its valid set") {
    const auto root = make_split_folder("export_folder");
    auto dls = vision::ImageDataLoaders::from_folder(
        root, {.bs = 4, .workers = 0,
               .item_tfms = {vision::RandomResizedCrop(24, {0.5, 1.0}), vision::FlipItem()},
               .batch_tfms = {Normalize{{0.5, 0.4, 0.3}, {0.2, 0.25, 1.0 / 3}}}});
    auto learn = vision::vision_learner(dls, vision::resnet18, {}, {.stem = vision::Stem::cifar, .width = 8}, quiet());
    silence(learn);
    learn.fit(1, 1e-3);  // weights and BatchNorm statistics away from their start
    const auto path = temp_path("export.pt");
    learn.export_learner(path);

    const auto expected = learn.get_preds();
    const auto& valid = dynamic_cast<const vision::ImageFolder&>(learn.dls.valid.dataset());
    const auto predictor = vision::load_learner(path, {.device = torch::kCPU});
    CHECK(predictor.vocab() == std::vector<std::string>{"cat", "dog"});
    CHECK(named_state(predictor.model().module()).size() == named_state(learn.model.module()).size());

    const auto predictions = predictor.predict(valid.paths(), /*bs=*/3);  // batches of 3, 3, 3, 1
    REQUIRE(predictions.size() == valid.size());
    std::vector<torch::Tensor> probs;
    for (size_t i = 0; i < predictions.size(); ++i) {
      probs.push_back(predictions[i].probs);
      CHECK(predictions[i].path == valid.paths()[i]);
      CHECK(predictions[i].index == expected.preds[static_cast<int64_t>(i)].argmax().item<int64_t>());
      CHECK(predictions[i].label == predictor.vocab()[static_cast<size_t>(predictions[i].index)]);
    }
    CHECK(torch::allclose(torch::stack(probs), expected.preds, 1e-5, 1e-6));
    // The same item as the validation set's (centre crop, no flip), bit for bit.
    CHECK(torch::equal(predictor.item(valid.paths()[3]), valid.get(3).x));

    const auto one = predictor.predict(valid.paths()[3]);
    CHECK(torch::allclose(one.probs, predictions[3].probs, 1e-5, 1e-6));
    CHECK(torch::allclose(predictor.predict(valid.get(3).x).probs, learn.predict(valid.get(3).x), 1e-5, 1e-6));
    const auto shape = c10::str(valid.get(3).x.sizes());
    CHECK(error_of([&] { predictor.predict(valid.get(3).x.narrow(0, 0, 1)); }) ==
          "Predictor::predict: exported model '" + path + "' takes items like " + shape + " of Byte, got [1" +
              shape.substr(shape.find(',')) + " of Byte");
    CHECK(error_of([&] { predictor.predict(valid.get(3).x.to(torch::kFloat)); }) ==
          "Predictor::predict: exported model '" + path + "' takes items like " + shape + " of Byte, got " + shape +
              " of Float");

    // A folder: every image under it, sorted by path; hidden files and folders left out, as
    // fastai's get_files (macOS's "._" files would not decode).
    std::filesystem::create_directories(root + "/valid/.hidden");
    std::filesystem::copy_file(valid.paths()[0], root + "/valid/.hidden/copy.png");
    std::ofstream(root + "/valid/._resource.jpg") << "not an image";
    const auto folder = predictor.predict_folder(root + "/valid", 4);
    REQUIRE(folder.size() == valid.size());
    for (size_t i = 0; i < folder.size(); ++i) {
      CHECK(folder[i].path == valid.paths()[i]);
      CHECK(torch::allclose(folder[i].probs, predictions[i].probs, 1e-5, 1e-6));
    }
    // Handed over one at a time, in order, each as soon as its batch is done; a failing use stops there.
    std::vector<std::string> handed;
    predictor.predict_folder(root + "/valid", 4, [&](vision::Prediction p) {
      CHECK(torch::equal(p.probs, folder[handed.size()].probs));
      handed.push_back(p.path);
    });
    CHECK(handed == valid.paths());
    size_t used = 0;
    CHECK(error_of([&] {
            predictor.predict(valid.paths(), 2, [&](vision::Prediction) {
              if (++used == 3) throw Error("enough");
            });
          }) == "enough");
    CHECK(used == 3);
  }

  TEST_CASE("a regression head's y_range: its outputs inside the range, and the export keeps it") {
    const auto root = make_split_folder("export_range");
    torch::manual_seed(0);
    auto dls = vision::ImageDataLoaders::from_folder(root, {.bs = 4, .workers = 0, .item_tfms = {vision::Resize(16)}});
    auto learn = vision::vision_learner(dls, vision::resnet18, {},
                                        {.n_out = 2, .stem = vision::Stem::cifar, .width = 8,
                                         .y_range = std::pair{-1.0, 3.0}, .loss_func = MSELoss()},
                                        quiet());
    const auto children = learn.model.module().named_children();
    CHECK(children.keys().back() == "head_sigmoid_range");
    {
      torch::NoGradGuard no_grad;
      for (auto& p : learn.model.module().named_parameters())
        if (p.key() == "head_linear2.weight") p.value().mul_(1000);  // raw outputs far outside the range
    }
    const auto& valid = dynamic_cast<const vision::ImageFolder&>(learn.dls.valid.dataset());
    const auto output = learn.predict(valid.get(0).x);
    CHECK(output.min().item<double>() >= -1);
    CHECK(output.max().item<double>() <= 3);
    CHECK(((output + 1).abs() < 1e-3 | (output - 3).abs() < 1e-3).all().item<bool>());  // saturated at its ends
    const auto path = temp_path("export_range.pt");
    learn.dls.vocab.clear();  // values, no classes (the folders only hold the items)
    learn.export_learner(path);
    const auto spec = read_exported(path).spec;
    CHECK(range_of(spec, "y_range") == std::pair{-1.0, 3.0});
    const auto predictor = vision::load_learner(path, {.device = torch::kCPU});
    const auto predicted = predictor.predict(valid.get(0).x);
    CHECK(torch::allclose(predicted.probs, output, 1e-5, 1e-6));
    CHECK(predicted.index == -1);  // values, not classes
    CHECK(predicted.label == spec_text::number(predicted.probs[0].item<double>()) + " " +
                                 spec_text::number(predicted.probs[1].item<double>()));
    CHECK(error_of([] { vision::SigmoidRange(3, -1); }) == "SigmoidRange: low must be below high, got (3, -1)");
    auto bad_spec = spec;
    bad_spec["y_range"] = c10::List<double>({-1.0, 1.0, 3.0});
    CHECK(error_of([&] { vision::create_vision_model(bad_spec, "model.pt"); }) ==
          "model.pt: its 'y_range' holds 3 numbers instead of a range's 2");
    std::filesystem::remove(path);
  }

  TEST_CASE("fastai's presizing (a large Resize, then aug_transforms' size): the export resizes as validation does") {
    const auto root = make_split_folder("export_presized");
    auto dls = vision::ImageDataLoaders::from_folder(
        root, {.bs = 4, .workers = 0, .item_tfms = {vision::Resize(32)}, .batch_tfms = {Normalize::imagenet()},
               .aug_tfms = {vision::aug_transforms({.size = std::pair<int64_t, int64_t>{20, 20}})}});
    auto learn = vision::vision_learner(dls, vision::resnet18, {}, {.stem = vision::Stem::cifar, .width = 8}, quiet());
    silence(learn);
    learn.fit(1, 1e-3);
    const auto path = temp_path("export_presized.pt");
    learn.export_learner(path);
    const auto predictor = vision::load_learner(path, {.device = torch::kCPU});
    const auto& valid = dynamic_cast<const vision::ImageFolder&>(learn.dls.valid.dataset());
    std::vector<torch::Tensor> probs;
    for (const auto& prediction : predictor.predict(valid.paths(), 3)) probs.push_back(prediction.probs);
    CHECK(torch::allclose(torch::stack(probs), learn.get_preds().preds, 1e-5, 1e-6));
    CHECK(torch::allclose(predictor.predict(valid.get(0).x).probs, learn.predict(valid.get(0).x), 1e-5, 1e-6));

    struct Unnamed : BatchAugment {  // a program's own, with no text form
      Batch apply(Batch batch, uint64_t) const override { return batch; }
    };
    learn.dls.valid = DataLoader(learn.dls.valid.dataset_ptr(), {.bs = 4, .aug_tfms = {std::make_shared<Unnamed>()}});
    CHECK(error_of([&] { learn.export_learner(path); }) ==
          "export_learner: batch augmentation 0 of the valid loader has no text form (BatchAugment::spec), so an "
          "exported model cannot carry it");
    std::filesystem::remove(path);
    std::filesystem::remove_all(root);
  }

  TEST_CASE("a multi-label model's export: sigmoid probabilities, and every class above 0.5 as its label") {
    const auto root = make_split_folder("export_multi");
    const auto files = vision::get_image_files(root);
    std::vector<std::string> tags;
    for (const auto& file : files) tags.push_back(file.find("cat") != std::string::npos ? "furry small" : "furry");
    auto dls = vision::ImageDataLoaders::from_lists(
        files, tags, {.valid_pct = 0.25, .bs = 4, .workers = 0, .item_tfms = {vision::Resize(24)}}, vision::MultiCategoryBlock{});
    auto learn = vision::vision_learner(dls, vision::resnet18, {}, {.stem = vision::Stem::cifar, .width = 8}, quiet());
    silence(learn);
    learn.fit(1, 1e-3);
    const auto path = temp_path("export_multi.pt");
    learn.export_learner(path);

    const auto predictor = vision::load_learner(path, {.device = torch::kCPU});
    CHECK(predictor.vocab() == std::vector<std::string>{"furry", "small"});
    const auto& valid = dynamic_cast<const vision::ImageFolder&>(learn.dls.valid.dataset());
    const auto expected = learn.get_preds();
    for (size_t i = 0; i < valid.size(); ++i) {
      const auto prediction = predictor.predict(valid.paths()[i]);
      CHECK(torch::allclose(prediction.probs, expected.preds[static_cast<int64_t>(i)], 1e-5, 1e-6));
      std::vector<std::string> above;
      for (int64_t c = 0; c < 2; ++c)
        if (prediction.probs[c].item<float>() > 0.5) above.push_back(predictor.vocab()[static_cast<size_t>(c)]);
      CHECK(prediction.label == (above.empty() ? "" : above.size() == 1 ? above[0] : above[0] + " " + above[1]));
    }
    fs::remove_all(root);
  }

  TEST_CASE("an exported model is a torch.save archive that Python reads") {
    auto learn = vision::vision_learner(
        DataLoaders{DataLoader(std::make_shared<TensorDataset>(torch::zeros({2, 3, 16, 16}, torch::kByte),
                                                               torch::tensor({0, 1}))),
                    DataLoader(std::make_shared<TensorDataset>(torch::zeros({2, 3, 16, 16}, torch::kByte),
                                                               torch::tensor({0, 1})),
                               {.batch_tfms = {Normalize::imagenet()}}),
                    {"cat", "dog"}},
        vision::xresnet18, {}, {.width = 32}, quiet());
    const auto path = temp_path("export_python.pt");
    learn.export_learner(path);
    const auto out = output_of(std::string(FASTCPP_PYTHON) + " -c \"import torch; e = torch.load('" + path +
                               "', weights_only=False); print(e['format'], e['arch']['arch'], e['arch']['width'], "
                               "e['vocab'], e['item_shape'], e['batch_tfms'], len(e['model']))\"");
    CHECK(out == "fastcpp.export.v1 xresnet18 32 ['cat', 'dog'] [3, 16, 16] ['Normalize 0.485,0.456,0.406 "
                 "0.229,0.224,0.225'] " + std::to_string(named_state(learn.model.module()).size()) + "\n");
  }

  TEST_CASE("a model of the program's own: load_learner is given it and loads the weights into it") {
    Learner learn(grey_dls(), grey_model(), CrossEntropyLoss(), {}, quiet());
    silence(learn);
    learn.fit(1, 1e-2);
    const auto path = temp_path("export_own.pt");
    learn.export_learner(path);

    CHECK_THROWS_WITH_AS(vision::load_learner(path),
                         ("load_learner: exported model '" + path +
                          "' records no architecture (its Learner trained a module of the program's own); "
                          "give that model: load_learner(path, {.model = make_model()})")
                             .c_str(),
                         Error);
    const auto predictor = vision::load_learner(path, {.device = torch::kCPU, .model = grey_model()});
    const auto item = learn.dls.valid.dataset().get(2).x;
    const auto p = predictor.predict(item);
    CHECK(torch::allclose(p.probs, learn.predict(item), 1e-6, 1e-7));
    CHECK(p.label == std::vector<std::string>{"a", "b", "c"}[static_cast<size_t>(p.index)]);

    // An image file without item transforms is squished to the items' 8 x 8.
    const auto png = temp_path("export_own.png");
    cv::Mat big(16, 16, CV_8UC1);
    for (int y = 0; y < 16; ++y)
      for (int x = 0; x < 16; ++x) big.at<uint8_t>(y, x) = static_cast<uint8_t>(16 * (x / 2));
    REQUIRE(cv::imwrite(png, big));
    const auto small = predictor.item(png);
    CHECK(small.sizes().vec() == std::vector<int64_t>{1, 8, 8});
    CHECK(small[0][5][3].item<int>() == 48);
    CHECK(torch::allclose(predictor.predict(png).probs, learn.predict(small), 1e-6, 1e-7));

    CHECK_THROWS_WITH_AS(vision::load_learner(path, {.device = torch::kCPU, .model = grey_model(4)}),
                         ("exported model '" + path +
                          "' does not fit the model: shape differs: '1.weight' is [3, 64] in the file but [4, 64] in "
                          "the model, '1.bias' is [3] in the file but [4] in the model")
                             .c_str(),
                         Error);
  }

  TEST_CASE("missing, cut short, a checkpoint, an unknown architecture or transform: errors naming the file") {
    Learner learn(grey_dls(), grey_model(), CrossEntropyLoss(), {}, quiet());
    const auto path = temp_path("export_bad.pt"), bad = temp_path("export_bad_edit.pt");
    learn.export_learner(path);

    CHECK_THROWS_WITH_AS(vision::load_learner(path + ".missing"),
                         ("exported model '" + path + ".missing' not found or unreadable").c_str(), Error);
    auto bytes = file_bytes(path);
    write_bytes(bad, {bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() / 2)});
    CHECK_THROWS_WITH_AS(vision::load_learner(bad),
                         doctest::Contains(("cannot read exported model '" + bad +
                                            "': the file is truncated or not an exported model (")
                                               .c_str()),
                         Error);
    learn.save(bad);
    CHECK_THROWS_WITH_AS(vision::load_learner(bad),
                         ("cannot read exported model '" + bad +
                          "': not an exported model (written by Learner::export_learner); its format is not "
                          "'fastcpp.export.v1'")
                             .c_str(),
                         Error);

    c10::impl::GenericDict spec(c10::StringType::get(), c10::AnyType::get());
    spec.insert("arch", std::string("resnet7"));
    edit_export(path, bad, "arch", spec);
    CHECK_THROWS_WITH_AS(vision::load_learner(bad),
                         ("load_learner: exported model '" + bad +
                          "': unknown architecture 'resnet7' (known: resnet18, resnet34, resnet50, resnet101, "
                          "xresnet18, xresnet34, xresnet50, xresnet101)")
                             .c_str(),
                         Error);
    // An architecture whose weights are not the file's (a learner's model changed after its making).
    c10::impl::GenericDict other(c10::StringType::get(), c10::AnyType::get());
    for (const auto& [key, value] : vision::vision_model_spec(vision::resnet18, 3, {.width = 8}))
      other.insert(key, value);
    edit_export(path, bad, "arch", other);
    CHECK_THROWS_WITH_AS(vision::load_learner(bad),
                         doctest::Contains("(the model was built from the architecture the file records; if the "
                                           "learner's model was changed after it was made, give that model: "
                                           "load_learner(path, {.model = make_model()}))"),
                         Error);
    edit_export(path, bad, "item_tfms", c10::List<std::string>({"Rotate 10"}));
    CHECK_THROWS_WITH_AS(vision::load_learner(bad, {.model = grey_model()}),
                         ("load_learner: exported model '" + bad +
                          "': unknown item transform 'Rotate 10' (known: Resize, RandomResizedCrop, CenterCrop, "
                          "RandomCrop, FlipItem)")
                             .c_str(),
                         Error);
    edit_export(path, bad, "batch_tfms", c10::List<std::string>({"Normalize 0.5"}));
    CHECK_THROWS_WITH_AS(vision::load_learner(bad, {.model = grey_model()}),
                         ("load_learner: exported model '" + bad +
                          "': batch transform 'Normalize 0.5' is not 'Normalize MEANS STDS' with as many of each")
                             .c_str(),
                         Error);
    edit_export(path, bad, "vocab", int64_t{3});
    CHECK_THROWS_WITH_AS(vision::load_learner(bad, {.model = grey_model()}),
                         doctest::Contains(("cannot read exported model '" + bad +
                                            "': not an exported model (written by Learner::export_learner); an entry "
                                            "has the wrong type (")
                                               .c_str()),
                         Error);
  }

  TEST_CASE("export_learner refuses transforms and activations an exported model cannot carry") {
    auto dls = grey_dls();
    auto with_lambda = DataLoaders{dls.train, DataLoader(dls.valid.dataset_ptr(), {.batch_tfms = {[](const torch::Tensor& x) {
                                                                                     return x.to(torch::kFloat);
                                                                                   }}}),
                                   dls.vocab};
    Learner lambda_tfm(with_lambda, grey_model(), CrossEntropyLoss(), {}, quiet());
    CHECK_THROWS_WITH_AS(lambda_tfm.export_learner(temp_path("export_refused.pt")),
                         "export_learner: batch transform 0 of the valid loader is a function an exported model cannot "
                         "carry; use Normalize or IntToFloat",
                         Error);
    Learner unnamed(grey_dls(), grey_model(),
                    Loss([](const torch::Tensor& p, const torch::Tensor& t) { return p.mean(); },
                         [](const torch::Tensor& p) { return p.sigmoid(); }),
                    {}, quiet());
    CHECK_THROWS_WITH_AS(unnamed.export_learner(temp_path("export_refused.pt")),
                         "export_learner: the loss's activation is an unnamed function; an exported model can carry "
                         "softmax (CrossEntropyLoss's) or none",
                         Error);
    CHECK_FALSE(fs::exists(temp_path("export_refused.pt")));
  }

  TEST_CASE("transforms in text: each is read back to the same transform") {
    const std::vector<vision::ItemTransform> tfms{
        vision::Resize(20, vision::ResizeMethod::Pad),
        vision::Resize(19, vision::ResizeMethod::Pad, vision::PadMode::Zeros),
        vision::Resize(21), vision::Resize(22, vision::ResizeMethod::Squish),
        vision::RandomResizedCrop(16, {0.3, 0.9}, {0.5, 2.0 / 3}, 0.25), vision::CenterCrop(12), vision::RandomCrop(14, 3),
        vision::FlipItem(0.25)};
    const std::vector<std::string> texts{"Resize 20 pad reflection", "Resize 19 pad zeros", "Resize 21 crop",
                                         "Resize 22 squish",
                                         "RandomResizedCrop 16 0.3 0.9 0.5 0.6666666666666666 0.25",
                                         "CenterCrop 12", "RandomCrop 14 3", "FlipItem 0.25"};
    cv::Mat image(30, 40, CV_8UC3);
    cv::RNG(5).fill(image, cv::RNG::UNIFORM, 0, 255);
    for (size_t i = 0; i < tfms.size(); ++i) {
      CAPTURE(texts[i]);
      CHECK(tfms[i].spec() == texts[i]);
      const auto back = vision::item_transform_from_spec(texts[i]);
      CHECK(back.spec() == texts[i]);
      for (bool train : {true, false}) {
        Rng a(11), b(11);
        CHECK(cv::norm(tfms[i](image, a, train), back(image, b, train), cv::NORM_INF) == 0);
      }
    }
    // Exports from before val_xtra was written: fastai's 0.14
    CHECK(vision::item_transform_from_spec("RandomResizedCrop 16 0.3 0.9 0.5 0.75").spec() ==
          "RandomResizedCrop 16 0.3 0.9 0.5 0.75 0.14");
    // and from before Resize's pad mode, when Pad padded with zeros
    CHECK(vision::item_transform_from_spec("Resize 20 pad").spec() == "Resize 20 pad zeros");
    const Normalize normalize{{0.1, 1.0 / 3}, {0.2, 2.0 / 3}};
    const auto text = batch_transform_spec(normalize);
    CHECK(text == "Normalize 0.1,0.3333333333333333 0.2,0.6666666666666666");
    const auto x = torch::randint(256, {2, 2, 3, 3}, torch::kLong).to(torch::kByte);
    CHECK(torch::equal(batch_transform_from_spec(text)(x), normalize(x)));
    CHECK(batch_transform_spec(IntToFloat()) == "IntToFloat");
    CHECK(batch_transform_spec([](const torch::Tensor& t) { return t; }).empty());
    CHECK_THROWS_WITH_AS(batch_transform_from_spec("Rotate 3"),
                         "unknown batch transform 'Rotate 3' (known: Normalize, IntToFloat)", Error);
    for (const std::string bad : {"Resize 20 stretch", "Resize 20 crop zeros", "Resize 20 pad mirror",
                                  "Resize 20 pad zeros 1"}) {
      const std::string message =
          "item transform '" + bad + "' is not 'Resize SIZE crop|squish|pad [reflection|border|zeros]'";
      CHECK_THROWS_WITH_AS(vision::item_transform_from_spec(bad), message.c_str(), Error);
    }
  }
}
