#pragma once
// Where an example writes its files: a folder of its own (its --out, by default the
// program's name), made when the example starts, so that one example's pictures and
// models never replace another's.
#include <filesystem>
#include <string>
#include <utility>

class OutputFolder {
 public:
  explicit OutputFolder(std::string path) : path_(std::move(path)) { std::filesystem::create_directories(path_); }
  // The path of `file` in the folder: out("model.pt").
  std::string operator()(const std::string& file) const { return (std::filesystem::path(path_) / file).string(); }

 private:
  std::string path_;
};
