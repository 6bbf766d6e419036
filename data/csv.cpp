#include "data/csv.h"

#include "core/error.h"
#include "formats/file_io.h"

namespace fastcpp {

Column::Column(int position) : key(static_cast<size_t>(position)) {
  if (position < 0) throw Error("Column: a position counts from 0, got " + std::to_string(position));
}

std::string Column::str() const {
  if (const auto* name = std::get_if<std::string>(&key)) return "'" + *name + "'";
  return std::to_string(std::get<size_t>(key));
}

size_t CsvTable::column(const Column& column) const {
  if (const auto* position = std::get_if<size_t>(&column.key)) {
    if (*position < header.size()) return *position;
  } else {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == std::get<std::string>(column.key)) return i;
  }
  std::string names;
  for (const auto& name : header) names += (names.empty() ? "" : ", ") + name;
  throw Error("'" + source + "' has no column " + column.str() + " (its columns: " + names + ")");
}

namespace {

// Splits CSV text into records of fields, following quotes across line breaks.
std::vector<std::pair<size_t, CsvRow>> split_records(const std::string& text, const std::string& source, char delimiter) {
  std::vector<std::pair<size_t, CsvRow>> records;  // (line where it starts, fields)
  CsvRow fields;
  std::string field;
  size_t line = 1, start_line = 1;
  bool quoted = false, any = false, had_quotes = false;
  auto end_record = [&] {
    fields.push_back(std::move(field));
    field.clear();
    const bool blank = fields.size() == 1 && !had_quotes &&
                       fields[0].find_first_not_of(" \t") == std::string::npos;  // as pandas' skip_blank_lines
    if (!blank) records.emplace_back(start_line, std::move(fields));
    fields.clear();
    any = had_quotes = false;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        if (c == '\n') ++line;
        field += c;
      }
    } else if (c == '"' && field.empty()) {  // inside a field, as Python's csv, a quote is itself
      quoted = any = had_quotes = true;
    } else if (c == delimiter) {
      fields.push_back(std::move(field));
      field.clear();
      any = true;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      end_record();
      start_line = ++line;
    } else {
      field += c;
      any = true;
    }
  }
  if (quoted) throw Error("'" + source + "' line " + std::to_string(start_line) + ": a quoted field is never closed");
  if (any || !field.empty()) end_record();
  return records;
}

}  // namespace

CsvTable parse_csv(const std::string& text, const std::string& source, CsvOptions options) {
  // A spreadsheet's UTF-8 byte order mark would otherwise become part of the first column's name.
  const bool bom = text.rfind("\xEF\xBB\xBF", 0) == 0;
  auto records = split_records(bom ? text.substr(3) : text, source, options.delimiter);
  CsvTable table{source, {}, {}};
  if (records.empty()) throw Error("'" + source + "' is empty");
  size_t first = 0;
  if (options.header) {
    table.header = std::move(records[0].second);
    first = 1;
  } else {
    for (size_t i = 0; i < records[0].second.size(); ++i) table.header.push_back(std::to_string(i));
  }
  for (size_t r = first; r < records.size(); ++r) {
    auto& [line, fields] = records[r];
    if (fields.size() != table.header.size())
      throw Error("'" + source + "' line " + std::to_string(line) + " has " + std::to_string(fields.size()) +
                  " fields, the header " + std::to_string(table.header.size()));
    table.rows.push_back(std::move(fields));
    table.lines.push_back(line);
  }
  return table;
}

CsvTable read_csv(const std::string& path, CsvOptions options) {
  const auto bytes = read_file(path, "CSV file");
  return parse_csv(std::string(bytes.begin(), bytes.end()), path, options);
}

}  // namespace fastcpp
