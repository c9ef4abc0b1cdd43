// Generic JSON-to-text rendering for `kvstash describe` and `kvstash stats`.
#include "json_table.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <utility>
#include <vector>

namespace kvstash::cli {

namespace {

using json = nlohmann::ordered_json;

constexpr size_t kMaxListedElements = 16;

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool IsScalarArray(const json& value) {
  return value.is_array() &&
         std::all_of(value.begin(), value.end(), [](const json& v) { return !v.is_structured(); });
}

bool IsObjectArray(const json& value) {
  return value.is_array() && !value.empty() &&
         std::all_of(value.begin(), value.end(), [](const json& v) { return v.is_object(); });
}

// Columns on a terminal: UTF-8 continuation bytes take none ("µs").
size_t Width(const std::string& text) {
  size_t width = 0;
  for (const char c : text) width += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return width;
}

std::string Scalar(const json& value) {
  if (value.is_null()) return "-";
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_float()) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.4g", value.get<double>());
    return text;
  }
  return value.dump();
}

// "0-31" for runs of consecutive integers, "a,b,c" otherwise; long lists end
// in "... (N items)".
std::string ScalarList(const json& array) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < array.size();) {
    size_t j = i;
    while (array[i].is_number_integer() && j + 1 < array.size() &&
           array[j + 1].is_number_integer() &&
           array[j + 1].get<int64_t>() == array[j].get<int64_t>() + 1) {
      ++j;
    }
    parts.push_back(j > i ? Scalar(array[i]) + "-" + Scalar(array[j]) : Scalar(array[i]));
    i = j + 1;
  }
  if (parts.empty()) return "(none)";
  std::string out;
  for (size_t i = 0; i < parts.size() && i < kMaxListedElements; ++i) {
    out += (i ? "," : "") + parts[i];
  }
  if (parts.size() > kMaxListedElements) {
    out += ",... (" + std::to_string(array.size()) + " items)";
  }
  return out;
}

// Long hex identifiers (keys, fingerprints) are cut in tables; --json has them.
std::string ShortenHex(std::string text) {
  constexpr size_t kKept = 12;
  if (text.size() < 32 || text.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return text;
  }
  return text.substr(0, kKept) + "...";
}

// A value in a cell or after a key: bytes get a human size.
std::string Cell(const std::string& key, const json& value, bool with_exact) {
  if (value.is_array()) return IsScalarArray(value) ? ScalarList(value) : value.dump();
  if (value.is_object()) return value.dump();
  if (value.is_number() && EndsWith(key, "_bytes")) {
    const std::string human = HumanBytes(value.get<double>());
    return with_exact ? Scalar(value) + " (" + human + ")" : human;
  }
  return Scalar(value);
}

class Renderer {
 public:
  std::string Take() { return out_.str(); }

  void Document(const json& document) {
    if (document.is_object()) {
      Object(document, "");
    } else if (IsObjectArray(document)) {
      Table(document, "");
    } else {
      out_ << Cell("", document, true) << "\n";
    }
  }

 private:
  void Title(const std::string& path) {
    if (path.empty()) return;
    if (wrote_) out_ << "\n";
    out_ << "# " << path << "\n";
  }

  static std::string Join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

  void Object(const json& object, const std::string& path) {
    std::vector<std::pair<std::string, std::string>> lines;
    for (const auto& [key, value] : object.items()) {
      if (!value.is_object() && !IsObjectArray(value))
        lines.emplace_back(key, Cell(key, value, true));
    }
    if (!lines.empty()) {
      Title(path);
      size_t width = 0;
      for (const auto& line : lines) width = std::max(width, Width(line.first));
      for (const auto& [key, text] : lines) {
        out_ << key << std::string(width - Width(key) + 2, ' ') << text << "\n";
      }
      wrote_ = true;
    }
    for (const auto& [key, value] : object.items()) {
      if (value.is_object()) Object(value, Join(path, key));
      if (IsObjectArray(value)) Table(value, Join(path, key));
    }
  }

  struct Column {
    std::string key;      // field of the row
    std::string sub_key;  // field of a nested object, or empty
    std::string title;
  };

  static std::vector<Column> Columns(const json& rows) {
    std::vector<Column> columns;
    auto add = [&](const std::string& key, const std::string& sub_key) {
      for (const Column& c : columns) {
        if (c.key == key && c.sub_key == sub_key) return;
      }
      columns.push_back({key, sub_key, sub_key.empty() ? key : sub_key});
    };
    for (const json& row : rows) {
      for (const auto& [key, value] : row.items()) {
        if (value.is_object()) {
          for (const auto& [sub_key, sub_value] : value.items()) {
            if (!IsObjectArray(sub_value)) add(key, sub_key);
          }
        } else if (!IsObjectArray(value)) {
          add(key, "");
        }
      }
    }
    // A nested field whose name repeats another column keeps its parent's name.
    for (Column& c : columns) {
      if (c.sub_key.empty()) continue;
      const size_t same = std::count_if(columns.begin(), columns.end(),
                                        [&](const Column& o) { return o.title == c.sub_key; });
      if (same > 1) c.title = c.key + "." + c.sub_key;
    }
    return columns;
  }

  void Table(const json& rows, const std::string& path) {
    Title(path.empty() ? std::string() : path);
    const std::vector<Column> columns = Columns(rows);
    std::vector<std::vector<std::string>> cells;
    cells.emplace_back();
    for (const Column& c : columns) cells.back().push_back(c.title);
    for (const json& row : rows) {
      cells.emplace_back();
      for (const Column& c : columns) {
        const json* value = row.contains(c.key) ? &row[c.key] : nullptr;
        if (value != nullptr && !c.sub_key.empty()) {
          value = value->is_object() && value->contains(c.sub_key) ? &(*value)[c.sub_key] : nullptr;
        }
        const std::string& name = c.sub_key.empty() ? c.key : c.sub_key;
        cells.back().push_back(value ? ShortenHex(Cell(name, *value, false)) : "");
      }
    }
    std::vector<size_t> widths(columns.size(), 0);
    for (const auto& line : cells) {
      for (size_t i = 0; i < line.size(); ++i) widths[i] = std::max(widths[i], Width(line[i]));
    }
    for (const auto& line : cells) {
      std::string text;
      for (size_t i = 0; i < line.size(); ++i) {
        text += line[i];
        if (i + 1 < line.size()) text += std::string(widths[i] - Width(line[i]) + 2, ' ');
      }
      text.erase(text.find_last_not_of(' ') + 1);
      out_ << text << "\n";
    }
    wrote_ = true;
    // Arrays of objects inside rows (a registration's groups) follow as
    // their own tables.
    for (size_t r = 0; r < rows.size(); ++r) {
      const std::string row_path =
          (path.empty() ? std::string("row") : path) + "[" + std::to_string(r) + "]";
      for (const auto& [key, value] : rows[r].items()) {
        if (IsObjectArray(value)) Table(value, row_path + "." + key);
        if (value.is_object()) {
          for (const auto& [sub_key, sub_value] : value.items()) {
            if (IsObjectArray(sub_value)) Table(sub_value, row_path + "." + key + "." + sub_key);
          }
        }
      }
    }
  }

  std::ostringstream out_;
  bool wrote_ = false;
};

}  // namespace

std::string RenderJson(const nlohmann::ordered_json& document) {
  Renderer renderer;
  renderer.Document(document);
  return renderer.Take();
}

}  // namespace kvstash::cli
