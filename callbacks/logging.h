#pragma once
// CSVLogger (order 60): appends each epoch's row of the table to a CSV file
// (header first, unless appending to a file whose last header names the same columns;
// cells quoted as RFC 4180 where they need it); rows are flushed as they
// are written, so a crashed run keeps its history. It sits out lr_find (whose fit would
// truncate the file).
#include <fstream>
#include <string>

#include "learner/callback.h"

namespace fastcpp {

class CSVLogger : public Callback {
 public:
  explicit CSVLogger(std::string path = "history.csv", bool append = false);
  void before_fit() override;
  void after_epoch() override;
  void after_fit() override { file_.close(); }
  void after_fit_failed() override { file_.close(); }

 private:
  std::string path_;
  bool append_;
  std::ofstream file_;
};

}  // namespace fastcpp
