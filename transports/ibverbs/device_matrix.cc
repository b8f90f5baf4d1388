#include "transports/ibverbs/device_matrix.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tbcoll/error.hpp"

namespace tbcoll::ibverbs {
namespace {

// A JSON value of the kinds these files hold.
struct Value {
  enum Kind { kNull, kString, kArray } kind = kNull;
  std::string text;
  std::vector<Value> items;
  size_t line = 1, column = 1;  // where it starts, for messages
};

class Parser {
 public:
  Parser(const std::string& text, const std::string& source) : text_(text), source_(source) {}

  Value document() {
    Value value = parse_value(0);
    skip_space();
    if (at_ < text_.size()) fail("unexpected text after the matrix");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < std::min(at_, text_.size()); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw InvalidArgument(fmt::format("[ibverbs] device matrix {}: malformed JSON at line {}, column {}: {}", source_,
                                      line, column, what));
  }

  void skip_space() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r'))
      ++at_;
  }

  void locate(Value* value) const {
    for (size_t i = 0; i < at_; ++i) {
      if (text_[i] == '\n') {
        ++value->line;
        value->column = 1;
      } else {
        ++value->column;
      }
    }
  }

  Value parse_value(int depth) {
    skip_space();
    if (depth > 3) fail("nested deeper than a matrix of lists of names");
    if (at_ >= text_.size()) fail("the text ends where a value was expected");
    Value value;
    locate(&value);
    const char c = text_[at_];
    if (c == '[') {
      value.kind = Value::kArray;
      ++at_;
      skip_space();
      if (at_ < text_.size() && text_[at_] == ']') {
        ++at_;
        return value;
      }
      for (;;) {
        value.items.push_back(parse_value(depth + 1));
        skip_space();
        if (at_ >= text_.size()) fail("the text ends inside a list (missing ']')");
        if (text_[at_] == ',') {
          ++at_;
          continue;
        }
        if (text_[at_] == ']') {
          ++at_;
          return value;
        }
        fail(fmt::format("expected ',' or ']', found '{}'", text_[at_]));
      }
    }
    if (c == '"') {
      value.kind = Value::kString;
      value.text = parse_string();
      return value;
    }
    if (text_.compare(at_, 4, "null") == 0) {
      at_ += 4;
      return value;
    }
    fail(fmt::format("expected null, a device name in quotes or a list, found '{}'", c));
  }

  std::string parse_string() {
    ++at_;  // the opening quote
    std::string out;
    while (at_ < text_.size() && text_[at_] != '"') {
      const char c = text_[at_++];
      if (static_cast<unsigned char>(c) < 0x20) fail("a control character inside a name");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (at_ >= text_.size()) break;
      const char escaped = text_[at_++];
      switch (escaped) {
        case '"':
        case '\\':
        case '/':
          out.push_back(escaped);
          break;
        default:
          fail(fmt::format("escape \\{} in a name (device names need none)", escaped));
      }
    }
    if (at_ >= text_.size()) fail("the text ends inside a name (missing '\"')");
    ++at_;  // the closing quote
    return out;
  }

  const std::string& text_;
  const std::string& source_;
  size_t at_ = 0;
};

std::string cell_text(const std::vector<std::string>& cell) {
  if (cell.empty()) return "null";
  if (cell.size() == 1) return fmt::format("\"{}\"", cell[0]);
  return fmt::format("[\"{}\"]", fmt::join(cell, "\", \""));
}

}  // namespace

DeviceMatrix parse_device_matrix(const std::string& text, const std::string& source) {
  const Value root = Parser(text, source).document();
  auto wrong = [&](const Value& at, const std::string& what) {
    return InvalidArgument(fmt::format("[ibverbs] device matrix {} (line {}, column {}): {}", source, at.line,
                                       at.column, what));
  };
  if (root.kind != Value::kArray || root.items.empty()) {
    throw wrong(root, "expected an N x N list of lists (one row per rank)");
  }
  DeviceMatrix matrix;
  matrix.source = source;
  const size_t n = root.items.size();
  for (size_t row = 0; row < n; ++row) {
    const Value& cells = root.items[row];
    if (cells.kind != Value::kArray || cells.items.size() != n) {
      throw wrong(cells, fmt::format("row {} has {} cells; a matrix of {} ranks needs {} in every row", row,
                                     cells.kind == Value::kArray ? cells.items.size() : 0, n, n));
    }
    matrix.cells.emplace_back();
    for (size_t column = 0; column < n; ++column) {
      const Value& cell = cells.items[column];
      const std::string where = fmt::format("row {}, column {}", row, column);
      std::vector<std::string> names;
      if (cell.kind == Value::kString) {
        names.push_back(cell.text);
      } else if (cell.kind == Value::kArray) {  // [] is no cable, as null (exo writes its matrices so)
        for (const Value& name : cell.items) {
          if (name.kind != Value::kString) throw wrong(name, where + ": a list of cables holds device names only");
          names.push_back(name.text);
        }
      }
      for (size_t i = 0; i < names.size(); ++i) {
        if (names[i].empty()) throw wrong(cell, where + ": an empty device name");
        if (std::find(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(i), names[i]) !=
            names.begin() + static_cast<std::ptrdiff_t>(i)) {
          throw wrong(cell, fmt::format("{}: device {} twice (one name per cable)", where, names[i]));
        }
      }
      if (row == column && !names.empty()) {
        throw wrong(cell, fmt::format("{}: the diagonal must be null (a rank does not cable itself), found {}", where,
                                      cell_text(names)));
      }
      matrix.cells.back().push_back(std::move(names));
    }
  }
  for (size_t row = 0; row < n; ++row) {
    for (size_t column = row + 1; column < n; ++column) {
      const auto& there = matrix.cells[row][column];
      const auto& back = matrix.cells[column][row];
      if (there.size() != back.size()) {
        throw InvalidArgument(fmt::format(
            "[ibverbs] device matrix {}: row {}, column {} is {} but row {}, column {} is {}: both ends of a pair "
            "list the same cables (null on both, or one name per cable on both)",
            source, row, column, cell_text(there), column, row, cell_text(back)));
      }
    }
  }
  return matrix;
}

DeviceMatrix load_device_matrix(const std::string& path) {
  std::ifstream file(path);
  if (!file) {
    throw InvalidArgument(fmt::format("[ibverbs] device matrix {}: cannot read the file (TBCOLL_IB_DEVICES or "
                                      "MLX_IBV_DEVICES names it)",
                                      path));
  }
  std::stringstream text;
  text << file.rdbuf();
  return parse_device_matrix(text.str(), path);
}

bool names_a_matrix(const std::string& value) {
  const size_t first = value.find_first_not_of(" \t\n");
  if (first != std::string::npos && value[first] == '[') return true;
  const std::string suffix = ".json";
  return value.find('/') != std::string::npos ||
         (value.size() >= suffix.size() && value.compare(value.size() - suffix.size(), suffix.size(), suffix) == 0);
}

void check_device_matrix(const DeviceMatrix& matrix, int world_size, int rank,
                         const std::vector<std::string>& devices_here) {
  if (matrix.size() != world_size) {
    throw InvalidArgument(fmt::format("[ibverbs] device matrix {} is {} x {}, but the job has {} ranks (one row and "
                                      "one column per rank)",
                                      matrix.source, matrix.size(), matrix.size(), world_size));
  }
  if (rank < 0 || rank >= matrix.size()) {
    throw InvalidArgument(
        fmt::format("[ibverbs] device matrix {} has no row {} (it has {})", matrix.source, rank, matrix.size()));
  }
  const auto& row = matrix.cells[static_cast<size_t>(rank)];
  for (size_t column = 0; column < row.size(); ++column) {
    for (const std::string& name : row[column]) {
      if (std::find(devices_here.begin(), devices_here.end(), name) == devices_here.end()) {
        throw InvalidArgument(fmt::format("[ibverbs] device matrix {}: row {}, column {} names {}, which this host "
                                          "does not have (its RDMA devices: {})",
                                          matrix.source, rank, column, name,
                                          devices_here.empty() ? "none" : fmt::format("{}", fmt::join(devices_here, ", "))));
      }
    }
  }
}

}  // namespace tbcoll::ibverbs
