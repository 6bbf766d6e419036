#pragma once
// A CSV file as a table of strings (RFC 4180: fields in double quotes may hold the
// delimiter, line breaks and "" for a quote; a quote after a field's first character is
// itself, as Python's csv reads it; a leading UTF-8 byte order mark is skipped),
// for fastai's from_csv and a DataBlock over its rows. Columns are named by the header
// line, or by position.
//
//   auto table = read_csv("data/labels.csv");
//   const auto name = table.column("name");          // or table.column(0)
//   for (const auto& row : table.rows) use(row[name]);
//
// Lines that are empty or hold only spaces and tabs are skipped, as pandas' read_csv
// skips them. Bad input is an error naming the file and line: an unclosed quote, a row
// with more or fewer fields than the header, an unknown column.
#include <cstddef>
#include <string>
#include <variant>
#include <vector>

namespace fastcpp {

using CsvRow = std::vector<std::string>;

// A column by its header name or its position from 0 (fastai's fn_col and label_col).
struct Column {
  Column(const char* name) : key(std::string(name)) {}         // NOLINT: a name is a column
  Column(std::string name) : key(std::move(name)) {}           // NOLINT
  Column(int position);                                         // NOLINT: so is a position (>= 0)
  std::variant<size_t, std::string> key;
  std::string str() const;
};

struct CsvTable {
  std::string source;               // the file, for messages
  std::vector<std::string> header;  // "0", "1", ... when the file has none
  std::vector<CsvRow> rows;
  std::vector<size_t> lines;        // the line each row starts on, for messages

  // The position of `column`; an error naming the file and its columns if there is none.
  size_t column(const Column& column) const;
};

struct CsvOptions {
  char delimiter = ',';
  bool header = true;  // false: every line is a row, columns named by position
};

CsvTable read_csv(const std::string& path, CsvOptions options = {});
// The same from text in memory; `source` names it in messages.
CsvTable parse_csv(const std::string& text, const std::string& source, CsvOptions options = {});

}  // namespace fastcpp
