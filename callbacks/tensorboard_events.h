#pragma once
// TensorBoard's event file, written without TensorFlow: a TFRecord stream (each record:
// length, masked CRC-32C of the length, the bytes, masked CRC-32C of the bytes) of Event
// protocol buffers, encoded here by hand (wall_time, step, file_version, summary with
// simple_value scalars and histograms).
//
//   EventFileWriter events("runs/exp1");   // runs/exp1/events.out.tfevents.<time>.<host>.<pid>
//   events.scalar("train_loss", step, 0.42);
#include <torch/types.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace fastcpp {

class EventFileWriter {
 public:
  // Makes `log_dir` if needed and starts a new event file in it.
  explicit EventFileWriter(const std::string& log_dir);
  void scalar(const std::string& tag, int64_t step, double value);
  // A histogram of `values` in `buckets` equal-width buckets between their min and max
  // (of the finite values: inf and nan are left out).
  void histogram(const std::string& tag, int64_t step, const torch::Tensor& values, int buckets = 30);
  void flush() { file_.flush(); }
  const std::string& path() const { return path_; }

 private:
  void write_event(int64_t step, const std::string& summary);
  void write_record(const std::string& data);
  std::string path_;
  std::ofstream file_;
};

// CRC-32C (Castagnoli), as TFRecord frames use.
uint32_t crc32c(const std::string& data);

}  // namespace fastcpp
