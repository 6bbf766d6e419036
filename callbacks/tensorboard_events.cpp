#include "callbacks/tensorboard_events.h"

#include <torch/torch.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace fastcpp {
namespace {

// Protocol buffer wire format: a key is (field number << 3) | wire type.
enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7F) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}

void key(std::string& out, uint32_t field, Wire wire) { varint(out, (field << 3) | wire); }

template <class T>
void fixed(std::string& out, T value) {  // little-endian, as x86 stores it
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void double_field(std::string& out, uint32_t field, double value) {
  key(out, field, kFixed64);
  fixed(out, value);
}

void bytes_field(std::string& out, uint32_t field, const std::string& bytes) {
  key(out, field, kBytes);
  varint(out, bytes.size());
  out += bytes;
}

// Summary { repeated Value value = 1 }, Value { string tag = 1; float simple_value = 2; HistogramProto histo = 5 }.
std::string summary_of(const std::string& tag, const std::string& value_fields) {
  std::string value;
  bytes_field(value, 1, tag);
  value += value_fields;
  std::string summary;
  bytes_field(summary, 1, value);
  return summary;
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace

uint32_t crc32c(const std::string& data) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : data) crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

EventFileWriter::EventFileWriter(const std::string& log_dir) {
  std::error_code error;
  std::filesystem::create_directories(log_dir, error);
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch()).count();
  // A number of its own for each writer of the process, as TensorBoard's writers have: two fits
  // (fine_tune's) starting within one second must not share a file.
  static std::atomic<int64_t> writers{0};
  path_ = (std::filesystem::path(log_dir) / ("events.out.tfevents." + std::to_string(seconds) + "." + host + "." +
                                             std::to_string(::getpid()) + "." + std::to_string(writers++)))
              .string();
  file_.open(path_, std::ios::binary);
  if (!file_) throw Error("TensorBoard: cannot write an event file in '" + log_dir + "'");
  std::string first;  // Event { wall_time = 1; file_version = 3 }
  double_field(first, 1, wall_time());
  bytes_field(first, 3, "brain.Event:2");
  write_record(first);
  file_.flush();
}

void EventFileWriter::scalar(const std::string& tag, int64_t step, double value) {
  std::string simple;
  key(simple, 2, kFixed32);
  fixed(simple, static_cast<float>(value));
  write_event(step, summary_of(tag, simple));
}

void EventFileWriter::histogram(const std::string& tag, int64_t step, const torch::Tensor& values, int buckets) {
  // The finite values: a diverged weight's inf or nan has no bucket (histc refuses such a range).
  const auto all = values.detach().to(torch::kCPU, torch::kDouble).flatten();
  const auto v = all.masked_select(all.isfinite());
  const double lo = v.numel() ? v.min().item<double>() : 0.0, hi = v.numel() ? v.max().item<double>() : 0.0;
  // HistogramProto { min = 1; max = 2; num = 3; sum = 4; sum_squares = 5; bucket_limit = 6; bucket = 7 }
  std::string histo;
  double_field(histo, 1, lo);
  double_field(histo, 2, hi);
  double_field(histo, 3, static_cast<double>(v.numel()));
  double_field(histo, 4, v.sum().item<double>());
  double_field(histo, 5, (v * v).sum().item<double>());
  const auto counts = hi > lo ? torch::histc(v, buckets, lo, hi) : torch::full({1}, static_cast<double>(v.numel()), torch::kDouble);
  std::string limits, bucket_counts;
  for (int64_t b = 0; b < counts.numel(); ++b) {
    fixed(limits, counts.numel() == 1 ? hi : lo + (hi - lo) * static_cast<double>(b + 1) / static_cast<double>(counts.numel()));
    fixed(bucket_counts, counts[b].item<double>());
  }
  bytes_field(histo, 6, limits);  // packed repeated doubles
  bytes_field(histo, 7, bucket_counts);
  std::string field;
  bytes_field(field, 5, histo);
  write_event(step, summary_of(tag, field));
}

void EventFileWriter::write_event(int64_t step, const std::string& summary) {
  std::string event;  // Event { wall_time = 1; step = 2; summary = 5 }
  double_field(event, 1, wall_time());
  key(event, 2, kVarint);
  varint(event, static_cast<uint64_t>(step));
  bytes_field(event, 5, summary);
  write_record(event);
}

void EventFileWriter::write_record(const std::string& data) {
  std::string header;
  fixed(header, static_cast<uint64_t>(data.size()));
  std::string frame = header;
  fixed(frame, masked(crc32c(header)));
  frame += data;
  fixed(frame, masked(crc32c(data)));
  file_.write(frame.data(), static_cast<std::streamsize>(frame.size()));
  if (!file_) throw Error("TensorBoard: cannot write to '" + path_ + "'");
}

}  // namespace fastcpp
