// Image decoding, item transforms, ImageFolder and segmentation pairs, on images the
// test writes itself.
#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <zlib.h>
#include <set>
#include <stdexcept>

#include "helpers.h"
#include "formats/canvas.h"
#include "vision/device_decode.h"
#include "formats/png_samples.h"
#if FASTCPP_HAS_DIRECT_DECODERS
#include "vision/decoders.h"
#endif
#include <zlib.h>

using namespace fastcpp;
using namespace fastcpp::testing;
namespace fs = std::filesystem;

namespace {

std::string temp_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("fastcpp_vision_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// A w x h image whose pixel (x, y) is (R, G, B) = (x, y, 200), saved as BGR by OpenCV.
cv::Mat gradient(int w, int h) {
  cv::Mat bgr(h, w, CV_8UC3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) bgr.at<cv::Vec3b>(y, x) = cv::Vec3b(200, static_cast<uint8_t>(y), static_cast<uint8_t>(x));
  return bgr;
}

void write(const std::string& path, const cv::Mat& image) { REQUIRE(cv::imwrite(path, image)); }

// A smooth photo-like picture (BGR): gradients, a disc and a bar, w x h.
cv::Mat picture(int w, int h, int seed) {
  cv::Mat bgr(h, w, CV_8UC3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      bgr.at<cv::Vec3b>(y, x) = cv::Vec3b(uint8_t(60 + x * 150 / w), uint8_t(40 + y * 170 / h), uint8_t((x + y + 40 * seed) % 200));
  cv::circle(bgr, {w / 3, h / 2}, h / 4, cv::Scalar(20, 220, 90), -1, cv::LINE_AA);
  cv::rectangle(bgr, cv::Rect(w / 2, h / 5, w / 6, h / 2), cv::Scalar(230, 30, 200), -1);
  return bgr;
}

// root/<class>/<i>.png with `per_class` gradient images of varying sizes.
std::string make_folder(const std::string& name, int per_class) {
  const auto root = temp_dir(name);
  for (const char* cls : {"cat", "dog"}) {
    fs::create_directories(fs::path(root) / cls);
    for (int i = 0; i < per_class; ++i) write(root + "/" + cls + "/" + std::to_string(i) + ".png", gradient(40 + i, 30 + 2 * i));
  }
  return root;
}

// root/images/<i>.png and root/masks/<i>.png: masks of 8x8 blocks of classes 0-2, and
// grey images whose pixels are 20 x their mask's value (so a pair's geometry can be
// compared pixel by pixel); sizes vary from image to image.
std::string make_segmentation_folder(const std::string& name, int n) {
  const auto root = temp_dir(name);
  fs::create_directories(fs::path(root) / "images");
  fs::create_directories(fs::path(root) / "masks");
  for (int i = 0; i < n; ++i) {
    cv::Mat mask(30 + i, 36 + 2 * i, CV_8UC1);
    for (int y = 0; y < mask.rows; ++y)
      for (int x = 0; x < mask.cols; ++x) mask.at<uint8_t>(y, x) = static_cast<uint8_t>((x / 8 + y / 8 + i) % 3);
    write(root + "/images/" + std::to_string(i) + ".png", mask * 20);
    write(root + "/masks/" + std::to_string(i) + ".png", mask);
  }
  return root;
}

// A PNG of the given bit depth and colour type from its raw rows (what OpenCV cannot
// write: palettes, 1-bit grey, grey with alpha).
std::vector<uint8_t> raw_png(int w, int h, int depth, int colour, const std::vector<std::vector<uint8_t>>& rows,
                             const std::vector<uint8_t>& palette = {}, bool interlaced = false) {
  std::vector<uint8_t> png{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  auto put32 = [](std::vector<uint8_t>& out, uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(uint8_t(v >> shift));
  };
  auto chunk = [&](const char* type, const std::vector<uint8_t>& data) {
    put32(png, uint32_t(data.size()));
    std::vector<uint8_t> body(type, type + 4);
    body.insert(body.end(), data.begin(), data.end());
    png.insert(png.end(), body.begin(), body.end());
    put32(png, uint32_t(crc32(0, body.data(), uInt(body.size()))));
  };
  std::vector<uint8_t> header;
  put32(header, uint32_t(w));
  put32(header, uint32_t(h));
  header.insert(header.end(), {uint8_t(depth), uint8_t(colour), 0, 0, uint8_t(interlaced)});
  std::vector<uint8_t> raw;
  for (const auto& row : rows) {
    raw.push_back(0);
    raw.insert(raw.end(), row.begin(), row.end());
  }
  uLongf size = compressBound(uLong(raw.size()));
  std::vector<uint8_t> compressed(size);
  REQUIRE(compress(compressed.data(), &size, raw.data(), uLong(raw.size())) == Z_OK);
  compressed.resize(size);
  chunk("IHDR", header);
  if (!palette.empty()) chunk("PLTE", palette);
  chunk("IDAT", compressed);
  chunk("IEND", {});
  return png;
}

// A JPEG with an EXIF APP1 segment carrying `orientation`, right after its SOI marker.
std::vector<uint8_t> with_orientation(std::vector<uint8_t> jpeg, int orientation) {
  const std::vector<uint8_t> app1{0xFF, 0xE1, 0, 34, 'E', 'x', 'i', 'f', 0, 0,  // length 34: 2 + 6 + 26
                                  'M', 'M', 0, 0x2A, 0, 0, 0, 8,                  // big-endian TIFF header, IFD at 8
                                  0, 1,                                           // one entry
                                  0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, uint8_t(orientation), 0, 0,  // Orientation, SHORT
                                  0, 0, 0, 0};                                    // no next IFD
  jpeg.insert(jpeg.begin() + 2, app1.begin(), app1.end());
  return jpeg;
}

// A PNG with an eXIf chunk (after its header chunk) holding an EXIF `orientation`.
std::vector<uint8_t> png_with_orientation(std::vector<uint8_t> png, int orientation) {
  const std::vector<uint8_t> tiff{'M', 'M', 0, 0x2A, 0, 0, 0, 8, 0, 1,  // big-endian, IFD at 8, one entry
                                  0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, uint8_t(orientation), 0, 0, 0, 0, 0, 0};
  std::vector<uint8_t> chunk{0, 0, 0, uint8_t(tiff.size()), 'e', 'X', 'I', 'f'};
  chunk.insert(chunk.end(), tiff.begin(), tiff.end());
  const auto crc = static_cast<uint32_t>(crc32(0, chunk.data() + 4, static_cast<uInt>(chunk.size() - 4)));
  for (int shift : {24, 16, 8, 0}) chunk.push_back(uint8_t(crc >> shift));
  png.insert(png.begin() + 33, chunk.begin(), chunk.end());  // signature 8 + IHDR 25
  return png;
}

#if FASTCPP_HAS_DIRECT_DECODERS
std::vector<uint8_t> encoded(const std::string& extension, const cv::Mat& image, const std::vector<int>& params = {}) {
  std::vector<uint8_t> bytes;
  REQUIRE(cv::imencode(extension, image, bytes, params));
  return bytes;
}

bool same_pixels(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && cv::norm(a, b, cv::NORM_INF) == 0;
}

// What cv::imdecode gives, in RGB order.
cv::Mat opencv_rgb(const std::vector<uint8_t>& bytes, int flags) {
  cv::Mat image = cv::imdecode(bytes, flags);
  if (image.channels() == 3) cv::cvtColor(image, image, cv::COLOR_BGR2RGB);
  return image;
}
#endif

}  // namespace

TEST_SUITE("vision") {
  TEST_CASE("PNG and JPEG decode to RGB, colour or grayscale") {
    const auto dir = temp_dir("decode");
    write(dir + "/g.png", gradient(20, 10));
    auto rgb = vision::read_image(dir + "/g.png");
    CHECK(rgb.size() == cv::Size(20, 10));
    CHECK((rgb.at<cv::Vec3b>(7, 13) == cv::Vec3b(13, 7, 200)));  // RGB order
    auto tensor = vision::image_to_tensor(rgb);
    CHECK((tensor.sizes() == torch::IntArrayRef{3, 10, 20}));
    CHECK(tensor[0][7][13].item<int>() == 13);
    CHECK(tensor[2][7][13].item<int>() == 200);
    auto gray = vision::read_image(dir + "/g.png", {.channels = 1});
    CHECK(gray.channels() == 1);

    cv::Mat flat(64, 64, CV_8UC3, cv::Scalar(30, 60, 90));  // BGR
    write(dir + "/flat.jpg", flat);
    auto jpeg = vision::read_image(dir + "/flat.jpg");
    const auto pixel = jpeg.at<cv::Vec3b>(32, 32);
    CHECK(std::abs(pixel[0] - 90) <= 2);
    CHECK(std::abs(pixel[2] - 30) <= 2);
    fs::remove_all(dir);
  }

#if FASTCPP_HAS_DIRECT_DECODERS
  TEST_CASE("libjpeg and libpng decode to OpenCV's pixels: subsamplings, reduced sizes, EXIF orientations, PNG kinds") {
    cv::Mat photo(61, 83, CV_8UC3);  // smooth colours with edges, odd sizes
    for (int y = 0; y < photo.rows; ++y)
      for (int x = 0; x < photo.cols; ++x)
        photo.at<cv::Vec3b>(y, x) = cv::Vec3b(uint8_t(3 * x + y), uint8_t((x * y) % 256), uint8_t(x > 40 ? 230 : 20 + y));
    cv::Mat grey;
    cv::cvtColor(photo, grey, cv::COLOR_BGR2GRAY);
    const std::vector<std::pair<std::string, std::vector<uint8_t>>> jpegs{
        {"4:2:0", encoded(".jpg", photo, {cv::IMWRITE_JPEG_QUALITY, 90})},
        {"restart markers", encoded(".jpg", photo, {cv::IMWRITE_JPEG_RST_INTERVAL, 4, cv::IMWRITE_JPEG_OPTIMIZE, 1})},
        {"progressive", encoded(".jpg", photo, {cv::IMWRITE_JPEG_PROGRESSIVE, 1})},
        {"grey", encoded(".jpg", grey)}};
    const std::map<int, std::pair<int, int>> reduced{{1, {cv::IMREAD_COLOR, cv::IMREAD_GRAYSCALE}},
                                                     {2, {cv::IMREAD_REDUCED_COLOR_2, cv::IMREAD_REDUCED_GRAYSCALE_2}},
                                                     {4, {cv::IMREAD_REDUCED_COLOR_4, cv::IMREAD_REDUCED_GRAYSCALE_4}},
                                                     {8, {cv::IMREAD_REDUCED_COLOR_8, cv::IMREAD_REDUCED_GRAYSCALE_8}}};
    for (const auto& [name, bytes] : jpegs)
      for (const auto& [denom, flags] : reduced) {
        CAPTURE(name);
        CAPTURE(denom);
        CHECK(same_pixels(vision::libjpeg_decode(bytes, 3, denom), opencv_rgb(bytes, flags.first)));
        CHECK(same_pixels(vision::libjpeg_decode(bytes, 1, denom), opencv_rgb(bytes, flags.second)));
      }
    for (int orientation = 1; orientation <= 8; ++orientation) {
      CAPTURE(orientation);
      const auto bytes = with_orientation(jpegs[0].second, orientation);
      const auto ours = vision::libjpeg_decode(bytes, 3);
      CHECK(same_pixels(ours, opencv_rgb(bytes, cv::IMREAD_COLOR)));
      CHECK(ours.size() == (orientation >= 5 ? cv::Size(61, 83) : cv::Size(83, 61)));
    }

    // Regions: the pixels of the whole image's decode, whatever the region and scale.
    Rng rng(5);
    for (const auto& [name, bytes] : jpegs)
      for (const auto& [denom, flags] : reduced) {
        if (denom > 2) continue;
        const cv::Mat whole = cv::imdecode(bytes, flags.first);  // BGR
        for (int i = 0; i < 60; ++i) {
          const int w = int(rng.integer(1, whole.cols)), h = int(rng.integer(1, whole.rows));
          const cv::Rect region(int(rng.integer(0, whole.cols - w)), int(rng.integer(0, whole.rows - h)), w, h);
          CAPTURE(name);
          CAPTURE(denom);
          CAPTURE(region);
          CHECK(same_pixels(vision::libjpeg_decode_region(bytes, denom, region), whole(region)));
        }
      }
    CHECK_THROWS_WITH_AS(vision::libjpeg_decode_region(jpegs[0].second, 1, {80, 0, 10, 10}),
                         "libjpeg_decode_region: the region is not inside the image", std::runtime_error);

    cv::Mat rgba, photo16, grey16;
    cv::cvtColor(photo, rgba, cv::COLOR_BGR2BGRA);
    rgba.forEach<cv::Vec4b>([](cv::Vec4b& p, const int* at) { p[3] = uint8_t(at[1] * 3); });
    photo.convertTo(photo16, CV_16UC3, 257.3);
    grey.convertTo(grey16, CV_16UC1, 131);
    std::vector<std::vector<uint8_t>> palette_rows, bit_rows, grey_alpha_rows;
    for (int y = 0; y < 9; ++y) {
      palette_rows.push_back({uint8_t(y % 3), 1, 2, 0, uint8_t((y + 1) % 3)});
      bit_rows.push_back({uint8_t(0xA5 ^ y), 0x3C});  // 13 pixels, 1 bit each, in 2 bytes
      std::vector<uint8_t> pairs;
      for (int x = 0; x < 6; ++x) pairs.insert(pairs.end(), {uint8_t(40 * x + y), uint8_t(255 - 30 * x)});
      grey_alpha_rows.push_back(pairs);
    }
    const std::vector<uint8_t> colours{0, 0, 0, 250, 10, 10, 20, 200, 120};
    const std::vector<std::pair<std::string, std::vector<uint8_t>>> pngs{
        {"rgb", encoded(".png", photo)},      {"rgba", encoded(".png", rgba)},
        {"grey", encoded(".png", grey)},      {"rgb16", encoded(".png", photo16)},
        {"grey16", encoded(".png", grey16)},  {"palette", raw_png(5, 9, 8, 3, palette_rows, colours)},
        {"1-bit", raw_png(13, 9, 1, 0, bit_rows)}, {"grey+alpha", raw_png(6, 9, 8, 4, grey_alpha_rows)}};
    for (const auto& [name, bytes] : pngs) {
      CAPTURE(name);
      CHECK(same_pixels(vision::libpng_decode(bytes, 3), opencv_rgb(bytes, cv::IMREAD_COLOR)));
      CHECK(same_pixels(vision::libpng_decode(bytes, 1), opencv_rgb(bytes, cv::IMREAD_GRAYSCALE)));
    }

    CHECK_THROWS_AS(vision::libjpeg_decode({0xFF, 0xD8, 0xFF, 0xE0, 1, 2}, 3), std::runtime_error);
    CHECK_THROWS_AS(vision::libpng_decode(std::vector<uint8_t>(pngs[0].second.begin(), pngs[0].second.begin() + 60), 3),
                    std::runtime_error);
    CHECK_THROWS_WITH_AS(vision::libpng_decode({1, 2, 3, 4, 5, 6, 7, 8, 9}, 3), "Not a PNG file", std::runtime_error);
    // Found by fuzzing: a header that asks for 65472x35152 pixels is refused before any allocation.
    std::ifstream huge_file(std::string(FASTCPP_FIXTURES) + "/../fuzz/corpus/decoders/huge_header.jpg", std::ios::binary);
    const std::vector<uint8_t> huge((std::istreambuf_iterator<char>(huge_file)), std::istreambuf_iterator<char>());
    CHECK_THROWS_WITH_AS(vision::libjpeg_decode(huge, 3), "the image is too large (65472x35152)", std::runtime_error);
  }
#endif

  TEST_CASE("JPEG decodes at reduced size only while the short side stays large enough") {
    const auto dir = temp_dir("reduced");
    write(dir + "/big.jpg", gradient(400, 300));
    CHECK(vision::read_image(dir + "/big.jpg", {.min_side = 100}).size() == cv::Size(200, 150));
    CHECK(vision::read_image(dir + "/big.jpg", {.min_side = 70}).size() == cv::Size(100, 75));
    CHECK(vision::read_image(dir + "/big.jpg", {.min_side = 160}).size() == cv::Size(400, 300));
    std::ifstream in(dir + "/big.jpg", std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(vision::image_header_size(bytes) == cv::Size(400, 300));
    CHECK(vision::image_header_size(with_orientation(bytes, 3)) == cv::Size(400, 300));
    CHECK(vision::image_header_size(with_orientation(bytes, 6)) == cv::Size(300, 400));  // shown turned, as decoded
    fs::remove_all(dir);
  }

  TEST_CASE("only a JPEG's EXIF orientation turns it: a PNG's eXIf is left, on every build, as its header says") {
    cv::Mat wide(61, 83, CV_8UC3, cv::Scalar(10, 20, 30));
    wide(cv::Rect(0, 0, 10, 61)).setTo(cv::Scalar(200, 200, 200));  // a light left edge
    std::vector<uint8_t> png;
    REQUIRE(cv::imencode(".png", wide, png));
    const auto dir = temp_dir("png_exif");
    const auto path = dir + "/turned.png";
    const auto bytes = png_with_orientation(png, 6);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    const auto image = vision::read_image(path);
    CHECK(image.size() == cv::Size(83, 61));  // as stored (OpenCV's imdecode would turn it to 61 x 83)
    CHECK(vision::image_header_size(bytes) == image.size());
    CHECK(image.at<cv::Vec3b>(30, 2)[0] == 200);
    fs::remove_all(dir);
  }

  TEST_CASE("corrupt, truncated, empty and missing files are errors naming the file") {
    const auto dir = temp_dir("bad");
    write(dir + "/ok.jpg", gradient(64, 64));
    std::ifstream in(dir + "/ok.jpg", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(dir + "/truncated.jpg", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    std::ofstream(dir + "/garbage.png") << "this is not a png";
    std::ofstream(dir + "/empty.png");
    CHECK(error_of([&] { vision::read_image(dir + "/truncated.jpg"); }) ==
          "cannot decode image '" + dir + "/truncated.jpg': truncated JPEG (no end-of-image marker)");
    // Bytes after the end marker (a phone's Motion Photo appends a video): the image, as PIL reads it.
    std::ofstream(dir + "/trailer.jpg", std::ios::binary) << bytes << std::string(100, '\0') << "ftypmp42";
    const auto ok = vision::read_image(dir + "/ok.jpg"), trailer = vision::read_image(dir + "/trailer.jpg");
    CHECK(cv::norm(ok, trailer, cv::NORM_INF) == 0);
    CHECK(error_of([&] { vision::read_image(dir + "/garbage.png"); }) ==
          "cannot decode image '" + dir + "/garbage.png': not a JPEG, PNG, BMP, TIFF, WebP or PNM image");
    std::ofstream(dir + "/damaged.png", std::ios::binary) << "\x89PNG\r\n\x1a\n and then garbage";
    CHECK(error_of([&] { vision::read_image(dir + "/damaged.png"); }) ==
          "cannot decode image '" + dir + "/damaged.png': not an image, or corrupt or truncated");
    // Found by fuzzing: OpenCV handed these files to its DICOM decoder, which aborted the
    // process (the second starts "P4" like a PBM image, but OpenCV's PBM check wants a space;
    // the third starts as a WebP, but its first chunk is not one libwebp reads).
    for (const std::string name : {"gdcm_abort.bin", "gdcm_abort_pnm.bin", "gdcm_abort_webp.bin"}) {
      const auto dicom = std::string(FASTCPP_FIXTURES) + "/../fuzz/corpus/image/" + name;
      CHECK(error_of([&] { vision::read_image(dicom); }) ==
            "cannot decode image '" + dicom + "': not a JPEG, PNG, BMP, TIFF, WebP or PNM image");
    }
    CHECK(error_of([&] { vision::read_image(dir + "/empty.png"); }) ==
          "cannot decode image '" + dir + "/empty.png': the file is empty");
    CHECK(error_of([&] { vision::read_image(dir + "/missing.png"); }) == "cannot open image '" + dir + "/missing.png'");
    CHECK(error_of([&] { vision::read_image(dir); }) == "cannot read image '" + dir + "': it is a directory");
    fs::remove_all(dir);
  }

  TEST_CASE("RandomResizedCrop: output size, crops inside the image, areas in scale") {
    vision::RandomResizedCrop rrc(24, {0.08, 1.0});
    const cv::Size image(120, 80);
    for (uint64_t seed = 0; seed < 200; ++seed) {
      Rng rng(seed);
      const auto crop = rrc.crop_for(image, rng);
      CHECK(crop.x >= 0);
      CHECK(crop.y >= 0);
      CHECK(crop.x + crop.width <= image.width);
      CHECK(crop.y + crop.height <= image.height);
      const double area = double(crop.area()) / image.area();
      CHECK(area >= 0.07);
      CHECK(area <= 1.01);
    }
    Rng rng(3);
    auto out = rrc.apply(gradient(120, 80), rng, /*train=*/true);
    CHECK(out.size() == cv::Size(24, 24));
    auto valid = rrc.apply(gradient(120, 80), rng, /*train=*/false);
    CHECK(valid.size() == cv::Size(24, 24));
    // fastai's validation form at 224 squishes to 256 and keeps the centre 224: of a 500x375
    // image, x from 16/256 * 500 = 31.25 over 224/256 * 500 = 437.5, y from 23.4 over 328.1.
    CHECK(vision::RandomResizedCrop(224).validation_crop({500, 375}) == cv::Rect(31, 23, 438, 328));
    CHECK(vision::RandomResizedCrop(24, {0.08, 1.0}, {0.75, 4.0 / 3}, 0).validation_crop({120, 80}) ==
          cv::Rect(0, 0, 120, 80));  // no extra: the whole image squished
    // The decode keeps enough pixels for the narrowest crop of the ratios as well as the widest:
    // 16 * sqrt(max(2/3, 1/0.5) / 0.25) = 45.3 for tall crops, 16 * sqrt(4/3) = 18.5 for the default ratios,
    // and for the validation crop, which keeps 16 of each 16 + 8 (224 of 256).
    CHECK(vision::RandomResizedCrop(16, {0.25, 1.0}, {0.5, 2.0 / 3}).min_input_side() == 46);
    CHECK(vision::RandomResizedCrop(16, {1.0, 1.0}).min_input_side() == 24);
    CHECK(vision::RandomResizedCrop(16, {1.0, 1.0}, {3.0 / 4, 4.0 / 3}, 0).min_input_side() == 19);
    CHECK(vision::RandomResizedCrop(224, {0.8, 1.0}, {1.0, 1.0}).min_input_side() == 256);
  }

  TEST_CASE("RandomCrop with padding, CenterCrop, Resize and FlipItem") {
    const auto image = gradient(32, 32);
    Rng rng(1);
    auto padded = vision::RandomCrop(32, 4).apply(image, rng, true);
    CHECK(padded.size() == cv::Size(32, 32));
    CHECK((vision::RandomCrop(32, 4).apply(image, rng, false).at<cv::Vec3b>(5, 6) == image.at<cv::Vec3b>(5, 6)));
    auto centre = vision::CenterCrop(8).apply(image, rng, false);
    CHECK((centre.at<cv::Vec3b>(0, 0) == image.at<cv::Vec3b>(12, 12)));
    // Padding by an odd count puts the extra pixel before, as fastai's CropPad ((5 - 8) // 2 = -2).
    const auto tiny = gradient(5, 5);
    for (const auto& pad : {vision::CenterCrop(8).apply(tiny, rng, false),
                            vision::RandomCrop(8).apply(tiny, rng, false)}) {
      CHECK((pad.at<cv::Vec3b>(2, 2) == tiny.at<cv::Vec3b>(0, 0)));
      CHECK((pad.at<cv::Vec3b>(1, 1) == cv::Vec3b(0, 0, 0)));
      CHECK((pad.at<cv::Vec3b>(7, 7) == cv::Vec3b(0, 0, 0)));
      CHECK((pad.at<cv::Vec3b>(6, 6) == tiny.at<cv::Vec3b>(4, 4)));
    }
    CHECK(error_of([] { vision::FlipItem(1.5); }) == "FlipItem: p must be a probability in [0, 1], got 1.5");
    CHECK(vision::Resize(16, vision::ResizeMethod::Squish).apply(gradient(40, 20), rng, true).size() == cv::Size(16, 16));
    // A squish that narrows 1000 columns of stripes to 224 and stretches 200 rows to 224:
    // the narrowed axis averaged, not sampled (bilinear on both gave a std of 73.5; OpenCV's
    // area average over 4.46 columns 11.3; Pillow's wider triangle filter 1.8).
    cv::Mat stripes(200, 1000, CV_8UC3);
    for (int col = 0; col < 1000; ++col) stripes.col(col).setTo(cv::Scalar::all(col % 2 ? 255 : 0));
    cv::Scalar mean, deviation;
    cv::meanStdDev(vision::Resize(224, vision::ResizeMethod::Squish).apply(stripes, rng, true), mean, deviation);
    CHECK(mean[0] == doctest::Approx(127.5).epsilon(0.02));
    CHECK(deviation[0] < 15);
    vision::FlipItem always(1.0);
    auto flipped = always.apply(image, rng, true);
    CHECK((flipped.at<cv::Vec3b>(3, 0) == image.at<cv::Vec3b>(3, 31)));
    CHECK((always.apply(image, rng, false).at<cv::Vec3b>(3, 0) == image.at<cv::Vec3b>(3, 0)));  // not on valid
    CHECK(error_of([] { vision::CenterCrop(0); }) == "CenterCrop: size must be positive, got 0");
    CHECK(error_of([] { vision::RandomCrop(-3); }) == "RandomCrop: size must be positive, got -3");
    CHECK(error_of([] { vision::RandomCrop(8, -1); }) == "RandomCrop: padding must be >= 0, got -1");
    CHECK(error_of([] { vision::item_transform_from_spec("CenterCrop -3"); }) ==
          "CenterCrop: size must be positive, got -3");
    // copy_image_to writes 8-bit images of the tensor's shape only (cv::split would write elsewhere)
    auto slot = torch::zeros({3, 32, 32}, torch::kByte);
    cv::Mat as_float;
    image.convertTo(as_float, CV_32F);
    CHECK(error_of([&] { vision::copy_image_to(as_float, slot); }) ==
          "copy_image_to: a CV_32FC3 image of 32x32 into a Byte tensor [3, 32, 32] (it takes 8-bit images into uint8 "
          "[channels, height, width])");
    auto small = torch::zeros({3, 16, 32}, torch::kByte);
    CHECK(error_of([&] { vision::copy_image_to(image, small); }) ==
          "copy_image_to: a CV_8UC3 image of 32x32 into a Byte tensor [3, 16, 32] (it takes 8-bit images into uint8 "
          "[channels, height, width])");
  }

  TEST_CASE("Resize's pad method: fastai's pad modes; centred for validation, placed at random for training") {
    using vision::PadMode;
    const auto image = gradient(40, 20);  // resized to 16 x 8, then 8 rows of padding; channel 0 is 200
    auto row = [](const cv::Mat& m, int r) { return m.row(r).clone(); };
    auto same = [](const cv::Mat& a, const cv::Mat& b) { return cv::norm(a, b, cv::NORM_INF) == 0; };
    Rng rng(0);
    const auto mirrored = vision::Resize(16, vision::ResizeMethod::Pad).apply(image, rng, false);  // reflection
    const auto repeated = vision::Resize(16, vision::ResizeMethod::Pad, PadMode::Border).apply(image, rng, false);
    const auto zeros = vision::Resize(16, vision::ResizeMethod::Pad, PadMode::Zeros).apply(image, rng, false);
    REQUIRE(mirrored.size() == cv::Size(16, 16));
    CHECK(same(mirrored.rowRange(4, 12), zeros.rowRange(4, 12)));
    for (int k = 0; k < 4; ++k) {
      CAPTURE(k);
      CHECK(same(row(mirrored, 3 - k), row(mirrored, 5 + k)));  // the edge row is not repeated
      CHECK(same(row(mirrored, 12 + k), row(mirrored, 10 - k)));
      CHECK(same(row(repeated, k), row(repeated, 4)));
      CHECK(same(row(repeated, 12 + k), row(repeated, 11)));
      CHECK(cv::countNonZero(zeros.row(k).reshape(1)) == 0);
      CHECK(cv::countNonZero(zeros.row(12 + k).reshape(1)) == 0);
    }
    CHECK_FALSE(same(row(mirrored, 3), row(mirrored, 4)));
    // Training: the image at a random height, its mask at the same one (filled with the mask's fill)
    const vision::ItemTransform padded(vision::Resize(16, vision::ResizeMethod::Pad, PadMode::Zeros));
    const cv::Mat mask(20, 40, CV_8U, cv::Scalar(1));
    std::set<int> tops;
    for (uint64_t seed = 0; seed < 30; ++seed) {
      Rng a(seed), b(seed);
      const auto out = padded(image, a, true);
      const auto mask_out = padded.mask(mask, b, true, 7);
      std::vector<cv::Mat> channels;
      cv::split(out, channels);
      const cv::Mat inside = channels[0] == 200;
      const int top = cv::boundingRect(inside).y;
      CHECK(cv::countNonZero(inside) == 16 * 8);
      CHECK(cv::countNonZero(inside.rowRange(top, top + 8)) == 16 * 8);
      CHECK(cv::countNonZero(mask_out == 1) == 16 * 8);
      CHECK(cv::countNonZero((mask_out == 1) != inside) == 0);
      CHECK(cv::countNonZero(mask_out == 7) == 16 * 8);
      tops.insert(top);
    }
    CHECK(*tops.begin() >= 0);
    CHECK(*tops.rbegin() <= 8);
    CHECK(tops.size() >= 5);
  }

  TEST_CASE("ImageFolder: sorted vocab, labels, bitwise-equal augmented batches across worker counts") {
    const auto root = make_folder("folder", 6);
    auto ds = std::make_shared<vision::ImageFolder>(vision::ImageFolder::scan(
        root, {.item_tfms = {vision::RandomResizedCrop(16), vision::FlipItem()}}));
    CHECK(ds->vocab() == std::vector<std::string>{"cat", "dog"});
    CHECK(ds->size() == 12);
    CHECK(ds->labels()[0] == 0);
    CHECK(ds->labels()[11] == 1);
    std::vector<torch::Tensor> xs;
    for (int workers : {0, 1, 8}) {
      DataLoader loader(ds, {.bs = 5, .shuffle = true, .workers = workers, .seed = 3});
      std::vector<torch::Tensor> parts;
      for (const auto& b : loader) parts.push_back(b.x);
      xs.push_back(torch::cat(parts));
    }
    CHECK((xs[0].sizes() == torch::IntArrayRef{12, 3, 16, 16}));
    CHECK((xs[0].scalar_type() == torch::kUInt8));
    CHECK(torch::equal(xs[0], xs[1]));
    CHECK(torch::equal(xs[0], xs[2]));
    fs::remove_all(root);
  }

  TEST_CASE("Decode::Device: the CPU path's draws from the JPEG headers, its pixels within rounding, the rest its own") {
    // JPEGs of several sizes (one large enough to decode at 1/2 on the CPU path), a PNG,
    // a grey JPEG and an EXIF-rotated one: those last three go the CPU path whole.
    const auto root = temp_dir("device_decode");
    for (const char* cls : {"cat", "dog"}) fs::create_directories(fs::path(root) / cls);
    const std::vector<std::pair<int, int>> sizes{{120, 90}, {100, 130}, {150, 150}, {96, 72}, {400, 300}};
    for (size_t i = 0; i < sizes.size(); ++i)
      write(root + (i % 2 ? "/dog/" : "/cat/") + std::to_string(i) + ".jpg", picture(sizes[i].first, sizes[i].second, int(i)));
    write(root + "/cat/png.png", picture(90, 80, 7));
    cv::Mat grey;
    cv::cvtColor(picture(90, 90, 8), grey, cv::COLOR_BGR2GRAY);
    write(root + "/dog/grey.jpg", grey);
    std::vector<uint8_t> rotated;
    REQUIRE(cv::imencode(".jpg", picture(80, 100, 9), rotated));
    const std::vector<uint8_t> app1{0xFF, 0xE1, 0, 34, 'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 0x2A, 0, 0, 0, 8, 0, 1,
                                    0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0};
    rotated.insert(rotated.begin() + 2, app1.begin(), app1.end());
    std::ofstream(root + "/dog/rotated.jpg", std::ios::binary).write(reinterpret_cast<const char*>(rotated.data()), long(rotated.size()));

    const vision::RandomResizedCrop crop(40, {0.3, 1.0});
    const std::vector<vision::ItemTransform> tfms{crop, vision::FlipItem()};
    const auto cpu = vision::ImageFolder::scan(root, {.item_tfms = tfms});
    const auto device = vision::ImageFolder::scan(root, {.item_tfms = tfms, .decode = vision::Decode::Device});
    REQUIRE(device.size() == 8);
    std::vector<int64_t> all(8);
    std::iota(all.begin(), all.end(), 0);
    for (uint64_t seed : {1, 2, 3}) {
      CAPTURE(seed);
      const auto expected = cpu.get_batch(all, seed);
      const auto batch = device.get_batch(all, seed);
      REQUIRE(batch.x_stage);
      CHECK_FALSE(batch.x.defined());
      CHECK(torch::equal(batch.y, expected.y));
      const auto& items = dynamic_cast<const vision::DeviceDecode&>(*batch.x_stage).items();
      const auto x = batch.x_stage->run(torch::kCPU);
      REQUIRE((x.sizes() == expected.x.sizes()));
      for (int64_t k = 0; k < 8; ++k) {
        const auto& item = items[size_t(k)];
        CAPTURE(item.path);
        const bool on_device = !item.jpeg.empty();
        CHECK(on_device == (item.path.find("rotated") == std::string::npos && item.path.find("grey") == std::string::npos &&
                            item.path.find(".png") == std::string::npos));
        if (!on_device) {
          CHECK(torch::equal(x[k], expected.x[k]));  // the CPU path's item, as it was
          continue;
        }
        // The CPU path decodes only the crop of such a JPEG: bitwise what decoding it whole
        // (at the same reduced size) and transforming it gives.
        {
          Rng stream(mix_seed(seed, uint64_t(k)));
          auto whole = vision::read_image(item.path, {.channels = 3, .min_side = crop.min_input_side(), .rgb = false});
          for (const auto& tfm : tfms) whole = tfm(whole, stream, true);
          CHECK(torch::equal(vision::image_to_tensor(whole, /*reverse_channels=*/true), expected.x[k]));
        }
        // The draws: RandomResizedCrop's box at the size the CPU path decodes at (the
        // 400x300 image at 1/2), then FlipItem's coin, from the item's own stream.
        Rng rng(mix_seed(seed, uint64_t(k)));
        const int factor = item.size.width == 400 ? 2 : 1;
        const auto box = crop.crop_for({item.size.width / factor, item.size.height / factor}, rng);
        CHECK(item.plan.crop == cv::Rect(box.x * factor, box.y * factor, box.width * factor, box.height * factor));
        CHECK(item.plan.flip == rng.bernoulli(0.5));
        // From the same pixels (factor 1): bilinear within OpenCV's rounding, or, shrunk,
        // an average of samples for OpenCV's area average; the 400x300 one is decoded whole
        // here and at 1/2 there.
        const auto difference = (x[k].to(torch::kInt) - expected.x[k].to(torch::kInt)).abs();
        const bool averaged = std::min(item.plan.crop.width, item.plan.crop.height) / factor > 40;
        CHECK(difference.to(torch::kFloat).mean().item<double>() < (factor == 1 ? 0.6 : 3.0));
        if (factor == 1) CHECK(difference.max().item<int>() <= (averaged ? 6 : 1));
      }
    }
    // The validation form, fastai's: squished to 48, its centre 40 (of each side 40/48, from 4/48), no flip.
    const auto valid = device.with_options({.item_tfms = tfms, .train = false, .decode = vision::Decode::Device});
    const auto& centre = dynamic_cast<const vision::DeviceDecode&>(*valid.get_batch({0}, 5).x_stage).items()[0];
    CHECK(centre.plan.crop == cv::Rect(10, 7, 100, 75));
    CHECK_FALSE(centre.plan.flip);

    // A loader: the same batches with 0 or 2 workers; a corrupt file, the CPU path's error.
    auto shared = std::make_shared<vision::ImageFolder>(device);
    std::vector<torch::Tensor> runs;
    for (int workers : {0, 2}) {
      DataLoader loader(shared, {.bs = 3, .shuffle = true, .workers = workers, .seed = 4});
      std::vector<torch::Tensor> parts;
      for (const auto& b : loader) parts.push_back(b.x);
      runs.push_back(torch::cat(parts));
    }
    CHECK(torch::equal(runs[0], runs[1]));
    std::ofstream(root + "/cat/0.jpg", std::ios::binary | std::ios::trunc) << std::string("\xFF\xD8\xFF\xE0 truncated");
    CHECK(error_of([&] { device.get_batch({0}, 1); }) == error_of([&] { cpu.get_batch({0}, 1); }));
    CHECK(vision::device_decoder_name(torch::kCPU) == "libjpeg on the CPU");
    fs::remove_all(root);
  }

  TEST_CASE("ImageFolder::augmented: a validation set's twin with its random transforms acting") {
    const auto root = make_folder("augmented", 4);
    const auto valid = vision::ImageFolder::scan(root, {.item_tfms = {vision::FlipItem(1.0)}, .train = false});
    const auto twin = valid.augmented();
    REQUIRE(twin);
    CHECK(twin->size() == valid.size());
    Rng rng(0), twin_rng(0);
    const auto plain = valid.get(1, rng).x, flipped = twin->get(1, twin_rng).x;
    CHECK(torch::equal(flipped, plain.flip({2})));
    CHECK(!torch::equal(flipped, plain));
    CHECK(!vision::ImageFolder::scan(root).augmented());  // no item transforms: nothing to augment
    fs::remove_all(root);
  }

  TEST_CASE("from_folder: train/valid folders or a valid_pct split, float batches") {
    const auto root = temp_dir("from_folder");
    for (const char* split : {"train", "valid"})
      for (const char* cls : {"a", "b", "c"}) {
        fs::create_directories(fs::path(root) / split / cls);
        for (int i = 0; i < 3; ++i) write(root + "/" + split + "/" + cls + "/" + std::to_string(i) + ".png", gradient(20, 20));
      }
    auto dls = vision::ImageDataLoaders::from_folder(
        root, {.bs = 4, .workers = 2, .item_tfms = {vision::Resize(8)}, .batch_tfms = {Normalize::imagenet()}});
    CHECK(dls.num_classes() == 3);
    CHECK(dls.train.n_items() == 9);
    CHECK(dls.valid.n_items() == 9);
    auto batch = *dls.train.begin();
    CHECK((batch.x.sizes() == torch::IntArrayRef{4, 3, 8, 8}));
    CHECK((batch.x.scalar_type() == torch::kFloat));
    auto split = vision::ImageDataLoaders::from_folder(root + "/train", {.valid_pct = 0.34, .bs = 2, .workers = 0, .item_tfms = {vision::Resize(8)}});
    CHECK(split.train.n_items() == 6);
    CHECK(split.valid.n_items() == 3);
    // As fastai's: a random split of every image under root, however deep, labelled by its folder.
    auto nested = vision::ImageDataLoaders::from_folder(root, {.valid_pct = 0.5, .bs = 2, .workers = 0});
    CHECK(nested.vocab == dls.vocab);
    CHECK(nested.train.n_items() + nested.valid.n_items() == 18);
    fs::remove_all(root);
  }

  TEST_CASE("bad folders: an error naming the file, or with skip_bad a warning and the file left out") {
    const auto root = make_folder("badfolder", 2);
    std::ofstream(root + "/cat/notes.txt") << "hello";  // not an image's name: skipped, as fastai's get_image_files
    CHECK(vision::ImageFolder::scan(root).size() == 4);
    std::ofstream(root + "/dog/broken.png") << "not a png";
    auto strict = vision::ImageFolder::scan(root);
    CHECK(strict.size() == 5);
    DataLoader unsized(std::make_shared<vision::ImageFolder>(strict), {.bs = 5});
    CHECK(error_of([&] { unsized.begin(); }) ==
          "items of one batch differ in size: '" + root + "/cat/1.png' is 41x32, '" + root +
              "/cat/0.png' 40x30: add a Resize or crop to the item transforms (batch 0 of epoch 0)");
    DataLoader loader(std::make_shared<vision::ImageFolder>(strict.with_options({.item_tfms = {vision::Resize(8)}})),
                      {.bs = 5, .workers = 2});
    CHECK(error_of([&] {
            for (const auto& b : loader) (void)b;
          }) == "item 4: cannot decode image '" + root + "/dog/broken.png': not a JPEG, PNG, BMP, TIFF, WebP or PNM image (batch 0 of epoch 0)");
    // A transform of the program's own: any error it throws names the item and its image; a
    // batch takes only 8-bit pixels of one channel count.
    struct Throwing : vision::ImageTransform {
      cv::Mat apply(const cv::Mat&, Rng&, bool) const override { throw std::runtime_error("boom"); }
    };
    struct ToFloat : vision::ImageTransform {
      cv::Mat apply(const cv::Mat& image, Rng&, bool) const override {
        cv::Mat out;
        image.convertTo(out, CV_32F);
        return out;
      }
    };
    const auto first_error = [&](std::vector<vision::ItemTransform> tfms) {
      DataLoader strange(std::make_shared<vision::ImageFolder>(strict.with_options({.item_tfms = std::move(tfms)})),
                         {.bs = 2, .workers = 0});
      return error_of([&] { strange.begin(); });
    };
    CHECK(first_error({Throwing{}}) == "item 0: boom (image '" + root + "/cat/0.png') (batch 0 of epoch 0)");
    CHECK(first_error({vision::Resize(8), ToFloat{}}) ==
          "item 0: image '" + root + "/cat/0.png' is CV_32FC3 after its item transforms, where the batch takes CV_8UC3 "
          "(8-bit, the channels of '" + root + "/cat/0.png') (batch 0 of epoch 0)");
    auto lenient = vision::ImageFolder::scan(root, {.skip_bad = true});
    CHECK(lenient.size() == 4);
    // A random split as well: the broken file left out before the split, or its error on first use.
    for (bool skip_bad : {false, true}) {
      const auto split =
          vision::ImageDataLoaders::from_folder(root, {.valid_pct = 0.4, .workers = 0, .skip_bad = skip_bad});
      CHECK(split.train.n_items() + split.valid.n_items() == (skip_bad ? 4 : 5));
    }
    // The classes are the training split's: an image of any other class is refused, as fastai's Categorize.
    fs::create_directories(root + "/bird");
    write(root + "/bird/0.png", gradient(40, 30));
    int birds_refused = 0;
    for (uint64_t seed = 0; seed < 12; ++seed) {
      const auto error = error_of([&] {
        vision::ImageDataLoaders::from_folder(root, {.valid_pct = 0.4, .seed = seed, .workers = 0, .skip_bad = true});
      });
      if (error == "(no fastcpp::Error thrown)") continue;
      // Usually the lone bird; with some seeds every image of another class lands in validation.
      std::set<std::string> expected;
      const auto all = vision::ImageFolder::scan(root, {.skip_bad = true});
      for (size_t i = 0; i < all.size(); ++i)
        expected.insert("from_folder: the class of validation image '" + all.paths()[i] + "', '" +
                        all.vocab()[all.labels()[i]] + "', has no training images (valid_pct 0.4, seed " +
                        std::to_string(seed) + ")");
      CHECK(expected.count(error) == 1);
      birds_refused += error.find("'bird'") != std::string::npos;
    }
    CHECK(birds_refused > 0);
    fs::remove_all(root + "/bird");
    fs::create_directories(root + "/empty_class");
    CHECK(error_of([&] { vision::ImageFolder::scan(root); }) ==
          "class folder '" + root + "/empty_class' has no images (skip_bad leaves such files out)");
    // With skip_bad a folder without images is no class (fastai's vocab: the labels there are).
    fs::create_directories(root + "/annotations");
    std::ofstream(root + "/annotations/0.xml") << "<annotation/>";
    const auto kept = vision::ImageFolder::scan(root, {.skip_bad = true});
    CHECK(kept.vocab() == std::vector<std::string>{"cat", "dog"});
    CHECK(kept.labels() == std::vector<int64_t>{0, 0, 1, 1});
    CHECK(error_of([&] { vision::ImageFolder::scan(root + "/nowhere"); }) ==
          "image folder '" + root + "/nowhere' not found or not a directory");
    fs::remove_all(root);
  }
}

TEST_SUITE("vision") {
  TEST_CASE("segmentation pairs: the same draws for image and mask, masks never interpolated, any worker count") {
    const auto root = make_segmentation_folder("seg", 6);
    std::vector<std::string> images, masks;
    for (int i = 0; i < 6; ++i) {
      images.push_back(root + "/images/" + std::to_string(i) + ".png");
      masks.push_back(root + "/masks/" + std::to_string(i) + ".png");
    }
    const std::vector<std::string> codes{"a", "b", "c"};
    // Crops with padding and flips move image and mask alike: the image is 20 x the mask
    // wherever the mask is not the void fill.
    auto moved = std::make_shared<vision::SegmentationDataset>(
        images, masks, codes,
        vision::SegmentationOptions{.channels = 1, .item_tfms = {vision::RandomCrop(24, 6), vision::FlipItem()},
                                    .void_index = 255, .mask_fill = 255});
    int padded = 0;
    for (size_t i = 0; i < moved->size(); ++i) {
      Rng rng(100 + i);
      const auto item = moved->get(i, rng);
      REQUIRE((item.y.sizes() == torch::IntArrayRef{24, 24}));
      CHECK((item.y.scalar_type() == torch::kLong));
      const auto void_pixels = item.y == 255;
      padded += void_pixels.sum().item<int>();
      CHECK(torch::equal(item.x[0].to(torch::kLong).masked_select(~void_pixels), (item.y * 20).masked_select(~void_pixels)));
      CHECK(torch::all(item.x[0].masked_select(void_pixels) == 0).item<bool>());
    }
    CHECK(padded > 0);  // some crops reached the padding
    // Resizing: the image is interpolated, the mask keeps only values it had.
    vision::SegmentationDataset resized(images, masks, codes,
                                        {.channels = 1, .item_tfms = {vision::RandomResizedCrop(20, {0.3, 1.0})}});
    for (size_t i = 0; i < resized.size(); ++i) {
      const auto y = resized.get(i).y;
      CHECK(torch::all((y >= 0).logical_and(y <= 2)).item<bool>());
    }

    std::vector<torch::Tensor> xs, ys;
    for (int workers : {0, 1, 8}) {
      DataLoader loader(moved, {.bs = 4, .shuffle = true, .workers = workers, .seed = 3});
      std::vector<torch::Tensor> x_parts, y_parts;
      for (const auto& b : loader) {
        x_parts.push_back(b.x);
        y_parts.push_back(b.y);
      }
      xs.push_back(torch::cat(x_parts));
      ys.push_back(torch::cat(y_parts));
    }
    CHECK((ys[0].sizes() == torch::IntArrayRef{6, 24, 24}));
    for (int k = 1; k < 3; ++k) {
      CHECK(torch::equal(xs[0], xs[k]));
      CHECK(torch::equal(ys[0], ys[k]));
    }

    auto dls = vision::SegmentationDataLoaders::from_folders(root + "/images", root + "/masks", codes,
                                                             {.valid_pct = 0.34, .bs = 2, .workers = 0, .channels = 1,
                                                              .item_tfms = {vision::Resize(16, vision::ResizeMethod::Squish)}});
    CHECK(dls.vocab == codes);
    CHECK(dls.valid.dataset().size() == 2);
    const auto batch = *dls.train.begin();
    CHECK((batch.x.sizes() == torch::IntArrayRef{2, 1, 16, 16}));
    CHECK((batch.x.scalar_type() == torch::kFloat));  // IntToFloat: images only
    CHECK((batch.y.scalar_type() == torch::kLong));
    CHECK_FALSE(dls.void_index.has_value());

    // The void index declared once, on the loaders; a split from a list of file names.
    std::ofstream(root + "/valid.txt") << "1.png\n4.png\n";
    auto declared = vision::SegmentationDataLoaders::from_folders(
        root + "/images", root + "/masks", codes,
        {.bs = 2, .val_bs = 3, .workers = 0, .channels = 1, .void_index = 255, .splitter = FileSplitter(root + "/valid.txt")});
    CHECK(declared.void_index == 255);
    const auto& valid = dynamic_cast<const vision::SegmentationDataset&>(declared.valid.dataset());
    CHECK(valid.images() == std::vector<std::string>{root + "/images/1.png", root + "/images/4.png"});
    CHECK(declared.valid.bs() == 3);
    CHECK(declared.train.dataset().size() == 4);

    // Batch augmentation pads masks with the data's mask_fill, as the item transforms do.
    auto zoomed_out = vision::SegmentationDataLoaders::from_folders(
        root + "/images", root + "/masks", codes,
        {.bs = 2, .workers = 0, .channels = 1, .item_tfms = {vision::Resize(16, vision::ResizeMethod::Squish)},
         .void_index = 255, .mask_fill = 255,
         .aug_tfms = {vision::aug_transforms({.do_flip = false, .max_rotate = 0, .min_zoom = 0.5, .max_zoom = 0.5,
                                              .max_lighting = 0, .max_warp = 0, .p_affine = 1,
                                              .pad_mode = vision::PadMode::Zeros})}});
    const auto zoomed_batch = *zoomed_out.train.begin();
    CHECK((zoomed_batch.y.index({torch::indexing::Slice(), 0, 0}) == 255).all().item<bool>());
    CHECK((zoomed_batch.y.index({torch::indexing::Slice(), 8, 8}) < 3).all().item<bool>());  // the image's own classes

    // A mask value neither a class nor ignored is named (torch's: a bare index error, or a device assert).
    auto void_mask = torch::zeros({2, 2, 2}, torch::kLong);
    void_mask[1][1][0] = 255;
    const auto pred = torch::zeros({2, 3, 2, 2});
    CHECK(error_of([&] { vision::CrossEntropyLossFlat()(pred, void_mask); }) ==
          "CrossEntropyLossFlat: mask value 255 (image 1 of the batch) is not a class of the model's 3 outputs nor the "
          "ignore_index (-100): a void value is the loaders' void_index, or the loss's ignore_index");
    CHECK(error_of([&] { vision::FocalLossFlat()(pred, void_mask); }).rfind("FocalLossFlat: mask value 255 (image 1",
                                                                             0) == 0);
    CHECK(std::isfinite(vision::CrossEntropyLossFlat({.ignore_index = 255})(pred, void_mask).item<double>()));
    CHECK(error_of([&] {
            vision::SegmentationDataLoaders::from_label_func({root + "/images/0.png"},
                                                             [](const std::string&) -> std::string {
                                                               throw std::out_of_range("map::at");
                                                             },
                                                             codes);
          }) == "SegmentationDataLoaders: label_func failed on '" + root + "/images/0.png': map::at");
    fs::remove_all(root);
  }

  TEST_CASE("masks drawn: show_batch, show_results and SegmentationInterpretation, the data's void index white") {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    const auto images = torch::randint(0, 256, {4, 1, 8, 8}, gen, torch::kLong).to(torch::kByte);
    auto masks = torch::randint(0, 3, {4, 8, 8}, gen, torch::kLong);
    masks.index_put_({torch::indexing::Slice(), 0, 0}, 255);  // a void pixel in each
    auto data = std::make_shared<TensorDataset>(images, masks);
    DataLoaders dls{DataLoader(data, {.bs = 4, .batch_tfms = {IntToFloat()}}), DataLoader(data, {.bs = 3, .batch_tfms = {IntToFloat()}}),
                    {"a", "b", "c"}};
    dls.void_index = 255;
    const auto dir = temp_dir("show_masks");
    constexpr int kGap = 8, kLabel = 16, kSide = 32, kScale = kSide / 8;
    // The colour at pixel (y, x) of cell `column` in row `row` of a picture of rows of cells.
    auto pixel = [&](const cv::Mat& png, int row, int column, int y, int x, int row_label = 0) {
      const auto p = png.at<cv::Vec3b>(kGap + kLabel + row * (kSide + kGap + row_label) + row_label + kScale * y + 1,
                                       kGap + column * (kSide + kGap) + kScale * x + 1);
      return std::vector<int>{p[0], p[1], p[2]};
    };
    auto colour = [&](const torch::Tensor& mask, int y, int x) {
      const auto rgb = vision::colour_mask(mask, 255)[y][x];  // void: white
      return std::vector<int>{rgb[0].item<int>(), rgb[1].item<int>(), rgb[2].item<int>()};
    };

    vision::show_batch(dls, dir + "/batch.png", {.max_n = 4, .min_side = kSide});
    const auto batch = vision::read_image(dir + "/batch.png");
    CHECK(batch.cols == 2 * (kSide + kGap) + kGap);
    CHECK(batch.rows == kLabel + 4 * (kSide + kGap) + kGap);
    for (int i = 0; i < 4; ++i)
      for (int y = 0; y < 8; ++y)
        for (int x = 0; x < 8; ++x) {
          CHECK(pixel(batch, i, 0, y, x)[1] == images[i][0][y][x].item<int>());
          CHECK(pixel(batch, i, 1, y, x) == colour(masks[i], y, x));
        }
    CHECK(pixel(batch, 0, 1, 0, 0) == std::vector<int>{255, 255, 255});

    torch::manual_seed(0);
    auto learn = Learner(dls, torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 3, 1))),
                         vision::CrossEntropyLossFlat({.ignore_index = 255}), {}, quiet());
    torch::NoGradGuard no_grad;
    const auto output = learn.model(images.to(torch::kFloat) / 255);
    const auto decided = output.argmax(1);
    vision::show_results(learn, dir + "/results.png", {.max_n = 3, .min_side = kSide});
    const auto results = vision::read_image(dir + "/results.png");
    CHECK(results.cols == 3 * (kSide + kGap) + kGap);
    for (int i = 0; i < 3; ++i)
      for (int y = 0; y < 8; ++y)
        for (int x = 0; x < 8; ++x) {
          CHECK(pixel(results, i, 1, y, x) == colour(masks[i], y, x));
          CHECK(pixel(results, i, 2, y, x) == colour(decided[i], y, x));
        }

    // Each image's loss, fastai's: the mean over all its pixels, the void ones counting 0.
    const auto pixel_losses = torch::nn::functional::cross_entropy(
        output, masks, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(255).reduction(torch::kNone));
    const auto expected = pixel_losses.flatten(1).mean(1);
    const auto interp = vision::SegmentationInterpretation::from_learner(learn);
    CHECK(torch::allclose(interp.losses(), expected));
    const auto [worst, worst_index] = expected.topk(2);
    const auto top = interp.top_losses(2);
    REQUIRE(top.size() == 2);
    for (size_t k = 0; k < 2; ++k) {
      CHECK(top[k].index == worst_index[static_cast<int64_t>(k)].item<int64_t>());
      CHECK(top[k].loss == doctest::Approx(worst[static_cast<int64_t>(k)].item<double>()).epsilon(1e-6));
    }
    CHECK(interp.top_losses(1, /*largest=*/false)[0].index == expected.argmin().item<int64_t>());
    // From a loader that shuffles and drops its short last batch: every item once, each loss its own.
    DataLoader shuffled(data, {.bs = 3, .shuffle = true, .drop_last = true, .seed = 7, .batch_tfms = {IntToFloat()}});
    const auto from_shuffled = vision::SegmentationInterpretation::from_learner(learn, &shuffled);
    CHECK(torch::allclose(from_shuffled.losses(), expected));
    CHECK(from_shuffled.top_losses(1)[0].index == worst_index[0].item<int64_t>());
    interp.plot_top_losses(2, dir + "/top_losses.png", {.min_side = kSide});
    const auto plot = vision::read_image(dir + "/top_losses.png");
    CHECK(plot.rows == kLabel + 2 * (kSide + kGap + kLabel) + kGap);  // a caption above each row
    for (int k = 0; k < 2; ++k) {
      const auto i = top[static_cast<size_t>(k)].index;
      for (int y = 0; y < 8; ++y)
        for (int x = 0; x < 8; ++x) {
          CHECK(pixel(plot, k, 0, y, x, kLabel)[0] == images[i][0][y][x].item<int>());
          CHECK(pixel(plot, k, 1, y, x, kLabel) == colour(masks[i], y, x));
          CHECK(pixel(plot, k, 2, y, x, kLabel) == colour(decided[i], y, x));
        }
    }
    fs::remove_all(dir);
  }

  TEST_CASE("the void index declared by the data: unet_learner's default loss leaves those pixels out") {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(6);
    auto masks = torch::randint(0, 2, {4, 32, 32}, gen, torch::kLong);
    masks.narrow(1, 0, 4).fill_(255);
    auto data = std::make_shared<TensorDataset>(torch::randn({4, 3, 32, 32}, gen), masks);
    DataLoaders dls{DataLoader(data, {.bs = 2}), DataLoader(data, {.bs = 4}), {"a", "b"}};
    dls.void_index = 255;
    torch::manual_seed(0);
    auto learn = vision::unet_learner(dls, vision::resnet18, {vision::jaccard_coeff_multi()}, {.width = 8}, quiet());
    learn.fit(1, 1e-3);
    const auto values = learn.recorder->valid_values();  // [valid_loss, jaccard_coeff_multi]
    REQUIRE(values.size() == 2);
    CHECK(std::isfinite(values[0]));
    // The loss is the mean over the labelled pixels only: the same as CrossEntropyLossFlat told so.
    torch::NoGradGuard no_grad;
    learn.model.module().eval();
    const auto output = learn.model(data->get_batch({0, 1, 2, 3}).x);
    CHECK(values[0] == doctest::Approx(vision::CrossEntropyLossFlat({.ignore_index = 255})(output, masks).item<double>()).epsilon(1e-5));
    dls.void_index.reset();
    auto unaware = vision::unet_learner(dls, vision::resnet18, {}, {.width = 8}, quiet());
    CHECK_THROWS(unaware.validate());  // 255 is no class: what the declaration prevents
  }

  TEST_CASE("a batch wholly void: the flat losses are 0 with no gradient, not torch's 0 / 0 NaN") {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    const auto pred = torch::randn({1, 3, 4, 4}, gen).requires_grad_();
    const auto void_mask = torch::full({1, 4, 4}, 255, torch::kLong);
    for (const auto& loss : {vision::CrossEntropyLossFlat({.ignore_index = 255}),
                             vision::FocalLossFlat(2.0, {.ignore_index = 255})}) {
      const auto value = loss(pred, void_mask);
      CHECK(value.item<double>() == 0);
      value.backward();
      CHECK(torch::equal(pred.grad(), torch::zeros_like(pred)));
      pred.mutable_grad().reset();
    }
    // With labelled pixels, torch's mean over them.
    auto mask = void_mask.clone();
    mask.index_put_({0, 0}, torch::tensor({0, 1, 2, 1}));
    CHECK(vision::CrossEntropyLossFlat({.ignore_index = 255})(pred, mask).item<double>() ==
          doctest::Approx(torch::nn::functional::cross_entropy(
                              pred, mask, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(255))
                              .item<double>())
              .epsilon(1e-6));
  }

  TEST_CASE("a void index that is a class's code (CamVid's 'Void') is no class: its score is NaN, out of the mean") {
    // 3 codes, void 2. Pixels (mask, prediction): (0, 0), (0, 2), (1, 1), (2, 1): the void pixel
    // is left out; predicting the void code on a class-0 pixel counts against class 0.
    const auto mask = torch::tensor({0, 0, 1, 2}, torch::kLong).view({1, 1, 4});
    const auto output = torch::one_hot(torch::tensor({0, 2, 1, 1}), 3).to(torch::kFloat).t().reshape({1, 3, 1, 4});
    const auto iou = vision::per_class_iou(output, mask, {.void_index = 2});
    REQUIRE(iou.size() == 3);
    CHECK(iou[0] == 0.5);
    CHECK(iou[1] == 1.0);
    CHECK(std::isnan(iou[2]));
    Learner learn(synthetic_dls(), tiny_model(), CrossEntropyLoss(), {}, quiet());
    learn.pred = output;
    learn.yb = mask;
    learn.dls.void_index = 2;
    const auto metric = vision::jaccard_coeff_multi();
    metric->reset();
    metric->accumulate(learn);
    CHECK(metric->value() == 0.75);
  }

  TEST_CASE("show_batch and show_results: the images decoded back exactly, labels, red where wrong, masks") {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(4);
    const auto images = torch::randint(0, 256, {12, 1, 8, 8}, gen, torch::kLong).to(torch::kByte);
    const std::vector<BatchTransform> tfms{Normalize{{0.3}, {0.2}}};
    // The normalized batch, channels-last, decodes to its bytes.
    const auto normalized = tfms[0](images).contiguous(at::MemoryFormat::ChannelsLast);
    const auto decoded = vision::decode_images(normalized, tfms);
    CHECK((decoded.sizes() == torch::IntArrayRef{12, 8, 8, 3}));
    CHECK(torch::equal(decoded.select(3, 0), images.squeeze(1)));
    CHECK(torch::equal(decoded.select(3, 2), images.squeeze(1)));  // grey: R = G = B
    CHECK(torch::equal(vision::decode_images(IntToFloat()(images), {IntToFloat()}).select(3, 1), images.squeeze(1)));
    // Two channels (a picture has one or three): the first, in grey, a [N, H, W, 3] to draw.
    const auto two = vision::decode_images(torch::cat({images, 255 - images}, 1), {});
    CHECK((two.sizes() == torch::IntArrayRef{12, 8, 8, 3}));
    CHECK(torch::equal(two.select(3, 2), images.squeeze(1)));

    const auto dir = temp_dir("show");
    auto data = std::make_shared<TensorDataset>(images, torch::randint(0, 3, {12}, gen, torch::kLong));
    DataLoaders dls{DataLoader(data, {.bs = 6, .batch_tfms = tfms}), DataLoader(data, {.bs = 6, .batch_tfms = tfms})};
    dls.vocab = {"ant", "bee", "cat"};
    vision::show_batch(dls, dir + "/batch.png", {.max_n = 6, .ncols = 3, .min_side = 32});
    const auto batch_png = vision::read_image(dir + "/batch.png");
    // 3 columns of 32 px images (8 px enlarged 4x) with 8 px gaps, 2 rows of label + image
    CHECK(batch_png.cols == 3 * (32 + 8) + 8);
    CHECK(batch_png.rows == 2 * (32 + 16 + 8) + 8);
    // The first image, 4x, under its label.
    for (int y = 0; y < 8; ++y)
      for (int x = 0; x < 8; ++x) CHECK(batch_png.at<cv::Vec3b>(8 + 16 + 4 * y + 1, 8 + 4 * x + 2)[0] == images[0][0][y][x].item<int>());

    torch::manual_seed(0);
    Learner learn(dls, torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(64, 3)), CrossEntropyLoss(), {},
                  quiet());
    vision::show_results(learn, dir + "/results.png", {.max_n = 6, .ncols = 3, .min_side = 32});
    const auto results = vision::read_image(dir + "/results.png");
    // Labels are "target/prediction", wider than the images: red ink where they differ.
    torch::NoGradGuard no_grad;
    const auto predicted = learn.model((*dls.valid.begin()).x).argmax(1);
    const bool any_wrong = !torch::equal(predicted, data->get_batch({0, 1, 2, 3, 4, 5}).y);
    bool red = false;
    for (int y = 0; y < results.rows; ++y)
      for (int x = 0; x < results.cols; ++x) {
        const auto p = results.at<cv::Vec3b>(y, x);
        red = red || (p[0] == 220 && p[1] == 30 && p[2] == 30);
      }
    CHECK(red == any_wrong);
    fs::remove_all(dir);
  }

  TEST_CASE("a U-Net exports and loads: the predictor's masks equal the learner's, its PNG a colour per class") {
    const auto root = make_segmentation_folder("seg_export", 6);
    const std::vector<std::string> codes{"a", "b", "c"};
    auto dls = vision::SegmentationDataLoaders::from_folders(root + "/images", root + "/masks", codes,
                                                             {.valid_pct = 0.34, .bs = 2, .workers = 0,
                                                              .item_tfms = {vision::Resize(32, vision::ResizeMethod::Squish)}});
    torch::manual_seed(0);
    auto learn = vision::unet_learner(dls, vision::resnet18, {}, {.width = 8}, quiet());
    silence(learn);
    learn.fit(1, 1e-3);
    const auto path = root + "/unet_export.pt";
    learn.export_learner(path);
    const auto predictor = vision::load_learner(path, {.device = torch::kCPU});
    const auto image = root + "/images/0.png";
    const auto p = predictor.predict(image);
    REQUIRE(p.mask.defined());
    CHECK((p.mask.sizes() == torch::IntArrayRef{32, 32}));
    CHECK((p.probs.sizes() == torch::IntArrayRef{3, 32, 32}));
    CHECK(torch::allclose(p.probs.sum(0), torch::ones({32, 32}), 1e-5, 1e-5));  // softmax over the classes
    const auto expected = learn.predict(predictor.item(image));  // the learner's own path
    CHECK(torch::allclose(p.probs, expected, 1e-5, 1e-6));
    CHECK(torch::equal(p.mask, expected.argmax(0)));
    // A JPEG four times the size is decoded whole, as the mask datasets decode their images
    // (an image folder would decode it at half its size, other pixels).
    cv::Mat photo(96, 128, CV_8UC3);
    cv::randu(photo, 0, 255);
    cv::GaussianBlur(photo, photo, {5, 5}, 0);
    write(root + "/photo.jpg", photo);
    write(root + "/photo_mask.png", cv::Mat::zeros(96, 128, CV_8UC1));
    const vision::SegmentationDataset validated({root + "/photo.jpg"}, {root + "/photo_mask.png"}, codes,
                                                {.item_tfms = {vision::Resize(32, vision::ResizeMethod::Squish)},
                                                 .train = false});
    CHECK(torch::equal(predictor.item(root + "/photo.jpg"), validated.get(0).x));
    const auto png = root + "/mask.png";
    vision::write_mask_png(png, p.mask);
    const auto pixels = vision::read_image(png);  // RGB
    const auto rgb = vision::colour_mask(p.mask);
    for (const auto& [y, x] : std::vector<std::pair<int, int>>{{0, 0}, {5, 17}, {31, 31}}) {
      const auto pixel = pixels.at<cv::Vec3b>(y, x);
      for (int c = 0; c < 3; ++c) CHECK(pixel[c] == rgb[y][x][c].item<int>());
    }
    CHECK(vision::colour_mask(torch::tensor({{0, 1}, {255, 21}}), 255).view({4, 3}).equal(
        torch::tensor({{0, 0, 0}, {230, 25, 75}, {255, 255, 255}, {230, 25, 75}}, torch::kByte)));  // 21 wraps to 1
    fs::remove_all(root);
  }

  TEST_CASE("segmentation: a missing mask, a mask of another size, a value out of range are errors naming the file") {
    const auto root = make_segmentation_folder("seg_bad", 1);
    const auto image = root + "/images/0.png";
    write(root + "/small.png", cv::Mat::zeros(10, 10, CV_8UC1));
    cv::Mat bad = cv::Mat::zeros(30, 36, CV_8UC1);
    bad.at<uint8_t>(4, 7) = 9;
    write(root + "/bad.png", bad);
    auto item_of = [&](const std::string& mask, std::optional<int64_t> void_index = std::nullopt) {
      return error_of([&] {
        vision::SegmentationDataset({image}, {mask}, {"a", "b", "c"}, {.void_index = void_index}).get(0);
      });
    };
    CHECK(item_of(root + "/none.png") == "mask '" + root + "/none.png' of image '" + image + "' not found");
    CHECK(item_of(root + "/small.png") == "mask '" + root + "/small.png' is 10x10 but its image '" + image + "' is 36x30");
    CHECK(item_of(root + "/bad.png") == "mask '" + root + "/bad.png' has value 9 at pixel (7, 4): not a class index (3 codes)");
    CHECK(item_of(root + "/bad.png", 255) ==
          "mask '" + root + "/bad.png' has value 9 at pixel (7, 4): not a class index (3 codes) nor the void index 255");
    CHECK(error_of([&] { vision::SegmentationDataset({image}, {image}, {"a"}, {.mask_fill = 255}); }) ==
          "SegmentationDataset: mask_fill 255 is neither a class index nor the void index");
    // An 8-bit mask cannot hold a void index above 255 (its padding would be clipped to 255).
    CHECK(error_of([&] {
            vision::SegmentationDataset({image}, {image}, {"a"}, {.void_index = 300, .mask_fill = 300});
          }) == "SegmentationDataset: void_index must be in [0, 255] (masks are 8-bit), got 300");
    // A splitter's index past the images.
    const std::vector<std::string> codes{"a", "b", "c"};
    auto split_past = [](const std::vector<std::string>&) { return Split{{0}, {10}}; };
    CHECK(error_of([&] {
            vision::SegmentationDataLoaders::from_folders(root + "/images", root + "/masks", codes,
                                                          {.workers = 0, .splitter = split_past});
          }) == "SegmentationDataLoaders: the splitter gave index 10 for 1 items");
    // unet_learner's default loss with fewer outputs than codes: a target out of range.
    const auto dls = vision::SegmentationDataLoaders::from_folders(root + "/images", root + "/masks", codes,
                                                                   {.workers = 0, .splitter = IndexSplitter{{}}});
    CHECK(error_of([&] { vision::unet_learner(dls, vision::resnet18, {}, {.n_out = 2}); }) ==
          "unet_learner: n_out is 2 but the data have 3 codes; give n_out >= 3 (or leave it out), or a loss_func "
          "of your own");
    fs::remove_all(root);
  }

  TEST_CASE("mask PNGs read as stored: 16-bit, 1-bit and 2-bit grey unscaled, a palette's indices; bad ones named") {
    const auto root = make_segmentation_folder("seg_depths", 1);
    const auto image = root + "/images/0.png";
    const cv::Mat classes = cv::imread(root + "/masks/0.png", cv::IMREAD_UNCHANGED);  // 0..2, 36x30
    auto save = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
      std::ofstream(root + "/" + name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                               static_cast<std::streamsize>(bytes.size()));
      return root + "/" + name;
    };
    // The rows of `mask` packed at `depth` bits a pixel, the leftmost in the highest bits.
    auto packed = [](const cv::Mat& mask, int depth) {
      std::vector<std::vector<uint8_t>> rows;
      for (int y = 0; y < mask.rows; ++y) {
        std::vector<uint8_t> row((mask.cols * depth + 7) / 8, 0);
        for (int x = 0; x < mask.cols; ++x)
          row[x * depth / 8] |= uint8_t(mask.at<uint8_t>(y, x) << (8 - depth - x * depth % 8));
        rows.push_back(row);
      }
      return rows;
    };
    auto mask_of = [&](const std::string& path) {
      return vision::SegmentationDataset({image}, {path}, {"a", "b", "c"}).get(0).y;
    };
    const auto expected = torch::from_blob(classes.data, {30, 36}, torch::kUInt8).to(torch::kLong);
    cv::Mat sixteen;
    classes.convertTo(sixteen, CV_16U);
    write(root + "/16.png", sixteen);  // a picture decoder keeps only the high byte: all 0
    CHECK(torch::equal(mask_of(root + "/16.png"), expected));
    CHECK(torch::equal(mask_of(save("2.png", raw_png(36, 30, 2, 0, packed(classes, 2)))), expected));  // not x85
    cv::Mat odd;
    cv::bitwise_and(classes, cv::Scalar(1), odd);  // 0, 1, 0: what 1 bit holds
    CHECK(torch::equal(mask_of(save("1.png", raw_png(36, 30, 1, 0, packed(odd, 1)))), expected % 2));  // not x255
    const std::vector<uint8_t> palette{0, 0, 0, 128, 0, 0, 0, 128, 0};  // VOC's first colours
    CHECK(torch::equal(mask_of(save("p.png", raw_png(36, 30, 4, 3, packed(classes, 4), palette))), expected));
    // Interlaced (Adam7): the rows of seven passes, each a small image of every dx-th pixel
    // of every dy-th row from (x0, y0); a pass with no pixels has no rows.
    auto adam7 = [&](const cv::Mat& mask, int depth) {
      const std::array<std::array<int, 4>, 7> passes{
          {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4}, {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}}};
      std::vector<std::vector<uint8_t>> rows;
      for (const auto& [x0, y0, dx, dy] : passes) {
        if (mask.cols <= x0 || mask.rows <= y0) continue;
        cv::Mat pass((mask.rows - y0 + dy - 1) / dy, (mask.cols - x0 + dx - 1) / dx, CV_8UC1);
        for (int y = 0; y < pass.rows; ++y)
          for (int x = 0; x < pass.cols; ++x) pass.at<uint8_t>(y, x) = mask.at<uint8_t>(y0 + y * dy, x0 + x * dx);
        const auto pass_rows = packed(pass, depth);
        rows.insert(rows.end(), pass_rows.begin(), pass_rows.end());
      }
      return rows;
    };
    cv::Mat ramp(30, 36, CV_8UC1);  // a value per pixel: a pass out of place shows
    for (int y = 0; y < ramp.rows; ++y)
      for (int x = 0; x < ramp.cols; ++x) ramp.at<uint8_t>(y, x) = uint8_t(y * 7 + x);
    const auto interlaced_ramp = raw_png(36, 30, 8, 0, adam7(ramp, 8), {}, /*interlaced=*/true);
    const cv::Mat decoded = cv::imdecode(interlaced_ramp, cv::IMREAD_UNCHANGED);  // libpng's reading of the file
    REQUIRE(decoded.size() == ramp.size());
    CHECK(cv::countNonZero(decoded != ramp) == 0);
    const auto ramp_samples = decode_png_samples(interlaced_ramp, "ramp.png");
    REQUIRE(ramp_samples.has_value());
    CHECK(std::equal(ramp_samples->samples.begin(), ramp_samples->samples.end(), ramp.begin<uint8_t>()));
    CHECK(torch::equal(mask_of(save("pi.png", raw_png(36, 30, 4, 3, adam7(classes, 4), palette, true))), expected));
    const cv::Mat corner = odd(cv::Rect(0, 0, 5, 3)).clone();  // pass 3 starts below its rows; pass 2 has 1 pixel
    const auto small = decode_png_samples(raw_png(5, 3, 1, 0, adam7(corner, 1), {}, true), "small.png");
    REQUIRE(small.has_value());
    CHECK(std::vector<int>(small->samples.begin(), small->samples.end()) ==
          std::vector<int>(corner.begin<uint8_t>(), corner.end<uint8_t>()));
    sixteen.at<uint16_t>(4, 7) = 300;
    write(root + "/300.png", sixteen);
    CHECK(error_of([&] { mask_of(root + "/300.png"); }) ==
          "mask '" + root + "/300.png' has value 300 at pixel (7, 4): masks hold class indices up to 255");
    // Against OpenCV's 16-bit decode, over rows libpng filtered each its own way.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
    cv::Mat wide(23, 37, CV_16U);
    for (int y = 0; y < wide.rows; ++y)
      for (int x = 0; x < wide.cols; ++x)
        wide.at<uint16_t>(y, x) = uint16_t(y < 12 ? x * 1500 + y * 700 : torch::randint(65536, {1}, gen).item<int>());
    std::vector<uint8_t> bytes;
    REQUIRE(cv::imencode(".png", wide, bytes));
    const auto samples = decode_png_samples(bytes, "wide.png");
    REQUIRE(samples.has_value());
    CHECK(samples->bit_depth == 16);
    CHECK(std::equal(samples->samples.begin(), samples->samples.end(), wide.ptr<uint16_t>(0)));
    // Damaged files, and PNGs that are pictures (left to the image decoders).
    auto cut = bytes;
    cut.resize(bytes.size() - 20);
    CHECK(error_of([&] { decode_png_samples(cut, "cut.png"); }) ==
          "cannot read PNG 'cut.png': the file ends inside a chunk (truncated)");
    auto flipped = bytes;
    flipped[40] ^= 1;
    CHECK(error_of([&] { decode_png_samples(flipped, "bad.png"); }) ==
          "cannot read PNG 'bad.png': a chunk's checksum does not match (corrupt)");
    // A header claiming 2^30 16-bit pixels over a few bytes of data: refused before 2 GB are allocated.
    auto bomb = raw_png(2, 1, 16, 0, {{0, 0, 0, 0}});
    for (const auto [at, value] : {std::pair{16, 1u << 20}, std::pair{20, 1u << 10}})
      for (int k = 0; k < 4; ++k) bomb[static_cast<size_t>(at + k)] = uint8_t(value >> (24 - 8 * k));
    const auto crc = uint32_t(crc32(0, bomb.data() + 12, 17));  // the header chunk's type and data
    for (int k = 0; k < 4; ++k) bomb[static_cast<size_t>(29 + k)] = uint8_t(crc >> (24 - 8 * k));
    CHECK(error_of([&] { decode_png_samples(bomb, "bomb.png"); }) ==
          "cannot read PNG 'bomb.png': its image data are corrupt or shorter than its size");
    std::vector<uint8_t> colour;
    REQUIRE(cv::imencode(".png", gradient(4, 3), colour));
    CHECK_FALSE(decode_png_samples(colour, "colour.png").has_value());
    fs::remove_all(root);
  }

  TEST_CASE("a mask turns with its image's EXIF orientation where only its stored size fits, or as mask_frame says") {
    const auto root = temp_dir("seg_exif");
    // Stored: dark on the left (class 0), bright on the right (class 1).
    auto item_of = [&](int orientation, int width, int height, vision::MaskFrame frame) {
      cv::Mat stored(height, width, CV_8UC1, cv::Scalar(0)), mask(height, width, CV_8UC1, cv::Scalar(0));
      stored.colRange(width / 2, width).setTo(255);
      mask.colRange(width / 2, width).setTo(1);
      const auto name = root + "/" + std::to_string(orientation) + "_" + std::to_string(width);
      write(name + ".png", mask);
      std::vector<uint8_t> jpeg;
      REQUIRE(cv::imencode(".jpg", stored, jpeg));
      jpeg = with_orientation(jpeg, orientation);
      std::ofstream(name + ".jpg", std::ios::binary)
          .write(reinterpret_cast<const char*>(jpeg.data()), static_cast<std::streamsize>(jpeg.size()));
      const vision::SegmentationOptions options{.channels = 1, .mask_frame = frame};
      return vision::SegmentationDataset({name + ".jpg"}, {name + ".png"}, {"a", "b"}, options).get(0);
    };
    const auto image_class = [](const Example& item) { return item.x[0].gt(128).to(torch::kLong); };
    for (const auto frame : {vision::MaskFrame::stored, vision::MaskFrame::shown}) {
      CAPTURE(frame == vision::MaskFrame::stored);
      for (const int orientation : {6, 8}) {  // a quarter turn of a 36x30 image: only the stored size fits
        CAPTURE(orientation);
        const auto item = item_of(orientation, 36, 30, frame);
        CHECK(item.y.sizes() == torch::IntArrayRef{36, 30});
        CHECK(torch::equal(image_class(item), item.y));
      }
    }
    // Both frames fit: half a turn, and a quarter turn of a square.
    for (const int orientation : {3, 6}) {
      CAPTURE(orientation);
      const auto stored = item_of(orientation, 32, 32, vision::MaskFrame::stored);
      CHECK(torch::equal(image_class(stored), stored.y));
      const auto shown = item_of(orientation, 32, 32, vision::MaskFrame::shown);
      const auto drawn_on_stored = orientation == 3 ? shown.y.flip({0, 1}) : shown.y.t().flip({1});
      CHECK(torch::equal(image_class(shown), drawn_on_stored));
      CHECK_FALSE(torch::equal(image_class(shown), shown.y));
    }
    fs::remove_all(root);
  }

  TEST_CASE("a mask resized takes the pixel nearest each output pixel's centre, as Pillow's NEAREST (fastai's)") {
    // Each pixel's value is its column; 30 -> 36 columns. OpenCV's plain nearest takes
    // the pixel at each output pixel's corner: 0 0 1 2 3 4 5 5, half a pixel off.
    cv::Mat columns(30, 30, CV_8UC1);
    for (int x = 0; x < 30; ++x) columns.col(x).setTo(x);
    Rng rng(0);
    const auto resized = vision::ItemTransform(vision::Resize(36, vision::ResizeMethod::Squish))
                             .mask(columns, rng, /*train=*/false, /*fill=*/0);
    REQUIRE(resized.cols == 36);
    std::vector<int> first;
    for (int x = 0; x < 8; ++x) first.push_back(resized.at<uint8_t>(0, x));
    CHECK(first == std::vector<int>{0, 1, 2, 2, 3, 4, 5, 6});
  }

  TEST_CASE("CIFAR binary batches and the export to an image folder round-trip") {
    const auto dir = temp_dir("cifar");
    auto gen = at::make_generator<at::CPUGeneratorImpl>(4);
    auto images = torch::randint(256, {5, 3, 32, 32}, gen, torch::kUInt8);
    auto labels = torch::tensor({3, 0, 9, 3, 1}, torch::kUInt8);
    auto records = torch::cat({labels.view({5, 1}), images.view({5, -1})}, 1).contiguous();
    std::ofstream(dir + "/test_batch.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(records.data_ptr<uint8_t>()), records.numel());
    auto ds = vision::cifar_dataset(dir, /*train=*/false);
    CHECK(torch::equal(ds->x(), images));
    CHECK(torch::equal(ds->y(), labels.to(torch::kLong)));
    CHECK(vision::cifar_vocab(dir).size() == 10);
    CHECK(error_of([&] { vision::read_cifar_file(dir); }) == "CIFAR batch '" + dir + "' is a directory");
    std::ofstream(dir + "/short.bin", std::ios::binary) << "abc";
    CHECK(error_of([&] { vision::read_cifar_file(dir + "/short.bin"); }) ==
          "'" + dir + "/short.bin' is not a CIFAR-10 binary batch: 3 bytes is not a multiple of 3073");
    // Found by fuzzing: labels beyond the classes were read as they were.
    records[2][0] = 10;
    std::ofstream(dir + "/label10.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(records.data_ptr<uint8_t>()), records.numel());
    CHECK(error_of([&] { vision::read_cifar_file(dir + "/label10.bin"); }) ==
          "'" + dir + "/label10.bin': image 2 has label 10, outside the 10 classes of CIFAR-10 (not a CIFAR batch, or corrupt)");
    auto hundred = torch::cat({torch::tensor({{19, 99}, {20, 5}}, torch::kUInt8), torch::zeros({2, 3072}, torch::kUInt8)}, 1);
    std::ofstream(dir + "/coarse.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(hundred.data_ptr<uint8_t>()), hundred.numel());
    CHECK(error_of([&] { vision::read_cifar_file(dir + "/coarse.bin", vision::Cifar::hundred); }) ==
          "'" + dir + "/coarse.bin': image 1 has coarse label 20, outside the 20 classes of CIFAR-100 (not a CIFAR batch, or corrupt)");

    std::vector<std::string> vocab;
    for (int i = 0; i < 10; ++i) vocab.push_back(i == 3 ? "cat/kitten" : "class" + std::to_string(i));
    vision::export_image_folder(*ds, vocab, dir + "/folder");
    auto folder = vision::ImageFolder::scan(dir + "/folder");
    CHECK(folder.vocab() == std::vector<std::string>{"cat_kitten", "class0", "class1", "class9"});
    REQUIRE(folder.size() == 5);
    CHECK(fs::exists(dir + "/folder/cat_kitten/0.png"));
    // item 0 was written as cat_kitten/0.png: the pixels survive the round trip exactly (PNG)
    const auto it = std::find(folder.paths().begin(), folder.paths().end(), dir + "/folder/cat_kitten/0.png");
    REQUIRE(it != folder.paths().end());
    const auto pixels = folder.get(static_cast<size_t>(it - folder.paths().begin())).x;
    CHECK(torch::equal(pixels, images[0]));
    fs::remove_all(dir);
  }
  TEST_CASE("get_image_files: sorted by path, hidden folders and other files left out") {
    const auto root = temp_dir("get_image_files");
    for (const char* dir : {"b", "a-b", "a", ".hidden"}) fs::create_directories(fs::path(root) / dir);
    for (const char* file : {"b/2.png", "a-b/1.jpg", "a/x.png", "z.PNG", ".hidden/h.png", "a/notes.txt", "b/3.jfif",
                             "b/4.pnm", "b/5.gif"})
      std::ofstream(root + "/" + file) << "x";
    // By path element, as Python sorts paths: "a/x.png" before "a-b/1.jpg" (text order would swap them).
    // fastai's extensions that the decoders read (.jfif, .pnm); not .gif, which they do not.
    CHECK(vision::get_image_files(root) == std::vector<std::string>{root + "/a/x.png", root + "/a-b/1.jpg",
                                                                    root + "/b/2.png", root + "/b/3.jfif",
                                                                    root + "/b/4.pnm", root + "/z.PNG"});
    CHECK(vision::parent_label(root + "/b/2.png") == "b");
    CHECK(error_of([&] { vision::get_image_files(root + "/nowhere"); }) ==
          "get_image_files: '" + root + "/nowhere' not found or not a directory");
    fs::remove_all(root);
  }

  TEST_CASE("hidden image files (macOS's \"._x.jpg\") are left out of every folder scan, as fastai's get_files") {
    const auto root = make_segmentation_folder("hidden_files", 4);
    write(root + "/images/._0.png", gradient(8, 8));
    CHECK(vision::get_image_files(root + "/images").size() == 4);
    auto dls = vision::SegmentationDataLoaders::from_folders(root + "/images", root + "/masks", {"a", "b", "c"},
                                                             {.valid_pct = 0.25, .bs = 1, .workers = 0});
    CHECK(dls.train.n_items() + dls.valid.n_items() == 4);
    fs::remove_all(root);
  }

  TEST_CASE("from_folder: a validation class the training folder lacks is an error naming it, as in fastai") {
    const auto root = temp_dir("unseen_valid_class");
    for (const char* folder : {"train/cat", "train/dog", "valid/cat", "valid/bird", "valid/dog"}) {
      fs::create_directories(fs::path(root) / folder);
      write(root + "/" + folder + "/0.png", gradient(8, 8));
    }
    CHECK(error_of([&] { vision::ImageDataLoaders::from_folder(root, {.workers = 0}); }) ==
          "image folder '" + root + "/valid': its class folder 'bird' is not one of the training classes (cat, dog)");
    // A root/<class>/* tree read as a train/valid one: the message says how to split it.
    CHECK(error_of([&] { vision::ImageDataLoaders::from_folder(root + "/train", {.workers = 0}); }) ==
          "from_folder: no folder '" + root + "/train/train' (valid_pct 0 reads root/train and root/valid); for a "
          "root/<class>/* tree give .valid_pct = 0.2: a random 20% validates");
    // A folder that links back to itself: listing it ends in an Error, not a filesystem_error.
    fs::create_directory_symlink(fs::absolute(root + "/train/cat"), root + "/train/cat/again");
    const auto looped = error_of([&] { vision::get_image_files(root + "/train"); });
    CHECK(looped.rfind("get_image_files: cannot list '" + root + "/train': ", 0) == 0);
    fs::remove_all(root);
  }

  TEST_CASE("DataBlock labels only the items its splitter keeps; a CategoryBlock's vocab is sorted, as fastai's") {
    const auto root = temp_dir("data_block_labels");
    for (const char* file : {"train/b/dog_0.png", "train/c/cat_1.png", "train/z/ant_2.png", "valid/c/cat_3.png",
                             "test/a/x.png"}) {
      fs::create_directories((fs::path(root) / file).parent_path());
      write(root + "/" + file, gradient(8, 8));
    }
    // fastai: the test folder's file does not match get_y's pattern, and is never labelled
    vision::DataBlock<> block{.get_y = vision::RegexLabeller("^(.+)_\\d+\\.png$"), .splitter = GrandparentSplitter{},
                              .item_tfms = {vision::Resize(8)}};
    auto dls = block.dataloaders(root, {.bs = 1, .workers = 0});
    CHECK(dls.vocab == std::vector<std::string>{"ant", "cat", "dog"});
    CHECK(dls.train.n_items() == 3);
    CHECK(dls.valid.n_items() == 1);
    // A given vocab is sorted and its duplicates dropped (fastai's CategoryMap), unless sort is false.
    block.blocks.y = vision::CategoryBlock{.vocab = {"dog", "cat", "ant", "cat"}};
    CHECK(block.dataloaders(root, {.bs = 1, .workers = 0}).vocab == std::vector<std::string>{"ant", "cat", "dog"});
    block.blocks.y = vision::CategoryBlock{.vocab = {"dog", "cat", "ant", "cat"}, .sort = false};
    CHECK(block.dataloaders(root, {.bs = 1, .workers = 0}).vocab == std::vector<std::string>{"dog", "cat", "ant"});
    block.blocks.y = vision::CategoryBlock{.sort = false};  // the training items' order: b/dog_0, c/cat_1, z/ant_2
    CHECK(block.dataloaders(root, {.bs = 1, .workers = 0}).vocab == std::vector<std::string>{"dog", "cat", "ant"});
    // Numbers by value (a CSV's number column); "nan", "inf", hex or spaces are text, and so is then every label.
    block.blocks.y = vision::CategoryBlock{.numbers_by_value = true};
    auto numbers = [&](std::map<std::string, std::string> by_name) {
      block.get_y = [by_name](const std::string& path) { return by_name.at(fs::path(path).filename().string()); };
      return block.dataloaders(root, {.bs = 1, .workers = 0}).vocab;
    };
    CHECK(numbers({{"dog_0.png", "10"}, {"cat_1.png", "2"}, {"ant_2.png", "1e-1"}, {"cat_3.png", "2"}}) ==
          std::vector<std::string>{"1e-1", "2", "10"});
    const std::map<std::string, std::vector<std::string>> as_text{
        {"nan", {"10", "2", "nan"}}, {"inf", {"10", "2", "inf"}}, {"0x1", {"0x1", "10", "2"}}, {" 5", {" 5", "10", "2"}}};
    for (const auto& [odd, vocab] : as_text)
      CHECK(numbers({{"dog_0.png", "10"}, {"cat_1.png", "2"}, {"ant_2.png", odd}, {"cat_3.png", "2"}}) == vocab);

    block.blocks.y = vision::CategoryBlock{};
    block.get_y = [](const std::string& path) { return path.find("cat_1") != std::string::npos ? "" : "animal"; };
    CHECK(error_of([&] { block.dataloaders(root, {.bs = 1, .workers = 0}); }) ==
          "DataBlock: the label of '" + root + "/train/c/cat_1.png' is empty (a CategoryBlock needs one class per item)");
    const std::map<std::string, std::string> known{{"dog_0.png", "dog"}};
    block.get_y = [&](const std::string& path) { return known.at(fs::path(path).filename().string()); };
    CHECK(error_of([&] { block.dataloaders(root, {.bs = 1, .workers = 0}); }).rfind(
              "DataBlock: get_y failed on '" + root + "/train/c/cat_1.png': ", 0) == 0);
    fs::remove_all(root);
  }

  TEST_CASE("multi-label data: one-hot targets, BCEWithLogitsLoss and accuracy_multi by default in vision_learner") {
    const auto root = temp_dir("multi_label");
    std::vector<std::string> files, tags;
    const char* tag_sets[] = {"sky", "sky sea", "sea", "sand sea", "sand", "sky sand"};
    for (int i = 0; i < 12; ++i) {
      files.push_back(root + "/" + std::to_string(i) + ".png");
      write(files.back(), picture(24, 20, i));
      tags.push_back(tag_sets[i % 6]);
    }
    auto dls = vision::ImageDataLoaders::from_lists(files, tags, {.valid_pct = 0.25, .seed = 1, .bs = 4, .workers = 2,
                                                                  .item_tfms = {vision::Resize(16)}},
                                                    vision::MultiCategoryBlock{});
    CHECK(dls.multi_label);
    CHECK(dls.vocab == std::vector<std::string>{"sand", "sea", "sky"});
    // A given vocab keeps its order, each class once (fastai's CategoryMap).
    const auto given = vision::ImageDataLoaders::from_lists(files, tags, {.bs = 4, .workers = 0},
                                                            vision::MultiCategoryBlock{.vocab = {"sky", "sea", "sky", "sand"}});
    CHECK(given.vocab == std::vector<std::string>{"sky", "sea", "sand"});
    const auto& train = dynamic_cast<const vision::ImageFolder&>(dls.train.dataset());
    const auto& first = train.paths()[0];
    const auto tags_of_first = tags[static_cast<size_t>(std::stoi(fs::path(first).stem().string()))];
    const auto row = train.multi_hot()[0];
    for (size_t c = 0; c < 3; ++c)
      CHECK(row[static_cast<int64_t>(c)].item<float>() == (tags_of_first.find(dls.vocab[c]) != std::string::npos ? 1 : 0));
    const auto batch = *dls.train.begin();
    CHECK((batch.y.sizes() == torch::IntArrayRef{4, 3}));
    CHECK((batch.y.scalar_type() == torch::kFloat));
    auto learn = vision::vision_learner(dls, vision::resnet18, {metrics::accuracy_multi()}, {.width = 8}, quiet());
    CHECK(learn.loss_func.activation_name() == "sigmoid");
    learn.fit(1, 1e-3);
    // The recorded accuracy_multi: the share of (item, class) pairs where sigmoid > 0.5 is the target.
    const auto accuracy = learn.recorder->values.back().back();
    torch::NoGradGuard no_grad;
    learn.model.module().eval();
    double right = 0, pairs = 0;
    for (const auto& b : dls.valid) {
      const auto decided = (torch::sigmoid(learn.model(b.x)) > 0.5).to(torch::kFloat);
      right += (decided == b.y).sum().item<double>();
      pairs += static_cast<double>(b.y.numel());
    }
    CHECK(pairs == 3 * 3);  // 3 validation images, 3 classes
    CHECK(accuracy == doctest::Approx(right / pairs).epsilon(1e-6));  // the metric sums in float
    CHECK(error_of([&] { vision::ImageDataLoaders::from_lists(files, {"sky"}); }) == "from_lists: 12 files but 1 labels");
    fs::remove_all(root);
  }

  TEST_CASE("show_results captions multi-label targets and predictions as their classes joined by ';'") {
    const std::vector<std::string> vocab{"sand", "sea", "sky"};
    const auto targets = torch::tensor({1.f, 0.f, 1.f, 0.f, 1.f, 0.f, 0.f, 0.f, 0.f}).view({3, 3});
    const auto logits = torch::tensor({2.f, -1.f, 3.f, 1.f, -2.f, -3.f, -1.f, -0.5f, -4.f}).view({3, 3});
    const auto multi = vision::result_captions(targets, logits, vocab, true);
    CHECK(multi.text == std::vector<std::string>{"sand;sky/sand;sky", "sea/sand", "/"});
    CHECK(multi.wrong == std::vector<bool>{false, true, false});
    const auto outputs = torch::tensor({0.f, 0.f, 5.f, 7.f, 9.f, 1.f}).view({2, 3});
    const auto single = vision::result_captions(torch::tensor({2, 0}, torch::kLong), outputs, vocab, false);
    CHECK(single.text == std::vector<std::string>{"sky/sky", "sand/sea"});
    CHECK(single.wrong == std::vector<bool>{false, true});
    CHECK(error_of([&] { vision::result_captions(targets, logits.narrow(1, 0, 2), vocab, true); }) ==
          "result_captions: targets [3, 3] do not match outputs [3, 2]");
    // Float targets of a single-label loader are regression values, not classes.
    const auto points = vision::result_captions(targets.narrow(1, 0, 2) - 0.25, logits.narrow(1, 0, 2), vocab, false);
    CHECK(points.text == std::vector<std::string>{"0.75,-0.25/2.00,-1.00", "-0.25,0.75/1.00,-2.00",
                                                  "-0.25,-0.25/-1.00,-0.50"});
    CHECK(points.wrong == std::vector<bool>{false, false, false});
    const auto many = vision::result_captions(torch::arange(8.f).view({1, 8}), torch::zeros({1, 8}), vocab, false);
    CHECK(many.text[0] == "0.00,1.00,2.00,3.00,4.00,5.00,.../0.00,0.00,0.00,0.00,0.00,0.00,...");
    CHECK(error_of([&] { vision::result_captions(targets, logits.narrow(1, 0, 2), vocab, false); }) ==
          "result_captions: targets [3, 3] do not match outputs [3, 2]");
    // ';' and ',' are drawn, not left blank.
    for (const auto* mark : {";", ","}) {
      Canvas canvas(8, 12);
      canvas.text(0, 0, mark, {0, 0, 0});
      CHECK(std::count(canvas.rgb().begin(), canvas.rgb().end(), uint8_t{0}) > 0);
    }

    // Both pictures of a multi-label learner are drawn (they failed on a [classes] target).
    const auto root = temp_dir("multi_label_show");
    std::vector<std::string> files, tags;
    for (int i = 0; i < 8; ++i) {
      files.push_back(root + "/" + std::to_string(i) + ".png");
      write(files.back(), picture(24, 20, i));
      tags.push_back(i % 2 ? "sky sea" : "sand");
    }
    auto dls = vision::ImageDataLoaders::from_lists(files, tags, {.valid_pct = 0.5, .seed = 1, .bs = 4, .workers = 0,
                                                                  .item_tfms = {vision::Resize(16)}},
                                                    vision::MultiCategoryBlock{});
    auto learn = vision::vision_learner(dls, vision::resnet18, {}, {.width = 8}, quiet());
    vision::show_batch(dls, root + "/batch.png", {.max_n = 4, .ncols = 2, .min_side = 16});
    vision::show_results(learn, root + "/results.png", {.max_n = 4, .ncols = 2, .min_side = 16});
    // Two rows of two cells, each as wide as its widest caption ("sea;sky/sand;sea;sky" at most).
    const auto batch = vision::read_image(root + "/batch.png");
    CHECK(batch.rows == 2 * (16 + 16 + 8) + 8);
    DataLoader shown = dls.train;  // the batch show_batch drew
    const bool both_tags = (shown.begin()->y.narrow(0, 0, 4).sum(1) == 2).any().item<bool>();
    CHECK(batch.cols == 2 * (Canvas::text_width(both_tags ? "sea;sky" : "sand") + 8) + 8);
    CHECK(vision::read_image(root + "/results.png").rows == 2 * (16 + 16 + 8) + 8);

    // Image-like float targets (an image-to-image model's) get no caption, not their pixels'
    // values as one line as wide as thousands of images.
    auto pairs = std::make_shared<TensorDataset>(torch::rand({4, 3, 16, 16}), torch::rand({4, 1, 16, 16}));
    Learner maps(DataLoaders{DataLoader(pairs, {.bs = 4}), DataLoader(pairs, {.bs = 4})},
                 torch::nn::Sequential(torch::nn::Conv2d(3, 1, 1)), MSELoss(), {}, quiet());
    vision::show_results(maps, root + "/maps.png", {.max_n = 4, .ncols = 2, .min_side = 16});
    CHECK(vision::read_image(root + "/maps.png").cols == 2 * (16 + 8) + 8);
    fs::remove_all(root);
  }

  TEST_CASE("DataBlock: masks with their images; errors for a missing get_y, no training items, a label unseen in training") {
    const auto root = make_segmentation_folder("data_block_masks", 5);
    auto dls = vision::DataBlock<>{.blocks = {vision::ImageBlock{.channels = 1}, vision::MaskBlock{{"a", "b", "c"}, 255}},
                                         .get_y = [&](const std::string& image) { return root + "/masks/" + fs::path(image).filename().string(); },
                                         .splitter = IndexSplitter{{0, 1}},
                                         .item_tfms = {vision::Resize(16)}}
                         .dataloaders(root + "/images", {.bs = 3, .workers = 0});
    const auto batch = *dls.train.begin();
    CHECK((batch.x.sizes() == torch::IntArrayRef{3, 1, 16, 16}));
    CHECK((batch.y.sizes() == torch::IntArrayRef{3, 16, 16}));
    CHECK(batch.y.max().item<int64_t>() == 2);
    CHECK(dls.valid.n_items() == 2);
    CHECK(dls.valid.bs() == 3);  // fastai's val_bs: bs
    CHECK(dls.vocab == std::vector<std::string>{"a", "b", "c"});
    CHECK(dls.void_index == 255);  // the block's, for the loss, the metrics and the pictures

    CHECK(error_of([&] { vision::DataBlock<>{}.dataloaders(root + "/images"); }) == "DataBlock: get_y is not set");
    CHECK(error_of([&] { vision::DataBlock<size_t>{.get_y = [](size_t) { return "x"; }}.dataloaders(std::vector<size_t>{0}); }) ==
          "DataBlock: get_x is not set (needed for items that are not image paths)");
    CHECK(error_of([&] {
            vision::DataBlock<>{.get_y = vision::parent_label, .splitter = IndexSplitter{{0, 1, 2, 3, 4}}}.dataloaders(root + "/images");
          }) == "DataBlock: no training items (the splitter put none of the 5 items in training)");
    CHECK(error_of([&] {
            vision::DataBlock<>{.get_y = [](const std::string& path) { return path.back() == 'g' && path[path.size() - 5] == '0' ? "zero" : "other"; },
                                .splitter = IndexSplitter{{0}}}
                .dataloaders(root + "/images");
          }) == "DataBlock: label 'zero' of '" + root + "/images/0.png' is not among the training items' labels (other)");
    CHECK(error_of([] { vision::RegexLabeller("^(.+)_\\d+$")("/pets/pug.jpg"); }) ==
          "RegexLabeller: '^(.+)_\\d+$' is not found in 'pug.jpg'");
    CHECK(error_of([] { vision::RegexLabeller("pug"); }) == "RegexLabeller: 'pug' has no group ( ) to take the label from");
    CHECK(vision::RegexLabeller("^(.+)_\\d+\\.jpg$")("/pets/great_pyrenees_12.jpg") == "great_pyrenees");
    fs::remove_all(root);
  }
}
