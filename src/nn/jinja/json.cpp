#include "json.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "error.hpp"

namespace lazygraph::nn::jinja {

namespace {

/// A SAX handler for nlohmann::json::sax_parse that builds a Value, keeping object keys in text order, and stops
/// at the first problem, which it records.
class ValueBuilder {
 public:
  using json = nlohmann::json;
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  bool null() { return put(None{}); }
  bool boolean(bool value) { return put(value); }
  bool number_integer(number_integer_t value) { return put(static_cast<std::int64_t>(value)); }
  bool number_unsigned(number_unsigned_t value) {
    if (value > static_cast<number_unsigned_t>(std::numeric_limits<std::int64_t>::max())) {
      problem = "holds the integer " + std::to_string(value) + ", larger than 2^63 - 1";
      return false;
    }
    return put(static_cast<std::int64_t>(value));
  }
  bool number_float(number_float_t value, const string_t& /*text*/) { return put(static_cast<double>(value)); }
  bool string(string_t& value) { return put(std::move(value)); }
  bool binary(binary_t& /*value*/) { return false; }  // not produced by JSON text
  bool start_object(std::size_t /*elements*/) { return open(false); }
  bool start_array(std::size_t /*elements*/) { return open(true); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(string_t& name) {
    Frame& frame = open_.back();
    if (!frame.keys.insert(name).second) {
      problem = "has the key \"" + name + "\" twice in one object";
      return false;
    }
    frame.key = std::move(name);
    return true;
  }
  bool parse_error(std::size_t /*position*/, const std::string& /*token*/, const json::exception& error) {
    problem = std::string("is not valid JSON: ") + error.what();
    return false;
  }

  Value root;
  std::optional<std::string> problem;

 private:
  struct Frame {
    bool array = true;
    std::vector<Value> list;
    DictData dict;
    std::string key;
    std::unordered_set<std::string> keys;
  };

  bool count() {
    if (++values_ <= kMaxInputValues) return true;
    problem = "holds more than " + std::to_string(kMaxInputValues) + " JSON values";
    return false;
  }

  bool put(Value value) {
    if (!count()) return false;
    place(std::move(value));
    return true;
  }

  void place(Value value) {
    if (open_.empty()) {
      root = std::move(value);
    } else if (open_.back().array) {
      open_.back().list.push_back(std::move(value));
    } else {
      open_.back().dict.items.emplace_back(std::move(open_.back().key), std::move(value));
    }
  }

  bool open(bool array) {
    if (open_.size() >= kMaxInputDepth) {
      problem = "nests deeper than " + std::to_string(kMaxInputDepth) + " levels of arrays and objects";
      return false;
    }
    if (!count()) return false;
    open_.emplace_back();
    open_.back().array = array;
    return true;
  }

  bool close() {
    Frame frame = std::move(open_.back());
    open_.pop_back();
    if (frame.array) {
      place(Value(std::move(frame.list)));
    } else {
      place(Value(std::move(frame.dict)));
    }
    return true;
  }

  std::vector<Frame> open_;
  std::size_t values_ = 0;
};

void dump_string(std::string_view text, std::string& out) {
  out += '"';
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (byte < 0x20U) {
          std::array<char, 16> escaped{};
          std::snprintf(escaped.data(), escaped.size(), "\\u%04x", byte);
          out += escaped.data();
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void dump(const Value& value, const JsonStyle& style, std::size_t level, std::string& out) {
  const auto newline = [&](std::size_t depth) {
    if (!style.indent.has_value()) return;
    out += '\n';
    for (std::size_t i = 0; i < depth; ++i) out += *style.indent;
  };
  if (value.is_none()) {
    out += "null";
  } else if (value.is<bool>()) {
    out += value.as<bool>() ? "true" : "false";
  } else if (value.is<std::int64_t>()) {
    out += std::to_string(value.as<std::int64_t>());
  } else if (value.is<double>()) {
    const double d = value.as<double>();
    out += d != d                                          ? "NaN"
           : d == std::numeric_limits<double>::infinity()  ? "Infinity"
           : -d == std::numeric_limits<double>::infinity() ? "-Infinity"
                                                           : float_repr(d);
  } else if (value.is_string()) {
    dump_string(value.as<std::string>(), out);
  } else if (value.is_list()) {
    const auto& list = value.list();
    if (list.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (i > 0) out += style.item_separator;
      newline(level + 1);
      dump(list[i], style, level + 1, out);
    }
    newline(level);
    out += ']';
  } else if (value.is_dict()) {
    const auto& dict = value.dict();
    if (dict.items.empty()) {
      out += "{}";
      return;
    }
    std::vector<const std::pair<std::string, Value>*> items;
    items.reserve(dict.items.size());
    for (const auto& item : dict.items) items.push_back(&item);
    if (style.sort_keys) {
      std::stable_sort(items.begin(), items.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
    }
    out += '{';
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += style.item_separator;
      newline(level + 1);
      dump_string(items[i]->first, out);
      out += style.key_separator;
      dump(items[i]->second, style, level + 1, out);
    }
    newline(level);
    out += '}';
  } else {
    throw JinjaError({}, "tojson cannot write a value of type " + std::string(type_name(value)) + " (Object of type " +
                             std::string(type_name(value)) + " is not JSON serializable)");
  }
}

}  // namespace

Value parse_json(std::string_view text, std::string_view what) {
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos) {
    throw JinjaError({},
                     std::string(what) + " is not valid JSON: it holds a NUL byte at offset " + std::to_string(nul));
  }
  ValueBuilder builder;
  bool parsed = false;
  try {
    parsed = nlohmann::json::sax_parse(text.begin(), text.end(), &builder);
  } catch (const nlohmann::json::exception& e) {
    throw JinjaError({}, std::string(what) + " is not valid JSON: " + e.what());
  }
  if (builder.problem.has_value()) throw JinjaError({}, std::string(what) + " " + *builder.problem);
  if (!parsed) throw JinjaError({}, std::string(what) + " is not valid JSON");
  return std::move(builder.root);
}

std::string to_json(const Value& value, const JsonStyle& style) {
  std::string out;
  dump(value, style, 0, out);
  return out;
}

}  // namespace lazygraph::nn::jinja
