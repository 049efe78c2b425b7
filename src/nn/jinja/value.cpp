#include "value.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <system_error>

namespace lazygraph::nn::jinja {

Value::Value(std::vector<Value> list) : v(std::make_shared<const std::vector<Value>>(std::move(list))) {}
Value::Value(DictData dict) : v(std::make_shared<const DictData>(std::move(dict))) {}

Value make_tuple(std::vector<Value> items) {
  Value value(std::move(items));
  value.tuple = true;
  return value;
}

Value make_iterator(std::vector<Value> items) {
  Value value(std::move(items));
  value.iterator = true;
  return value;
}

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, value] : items) {
    if (k == key) return &value;
  }
  return nullptr;
}

void DictData::set(std::string key, Value value) {
  for (auto& [k, existing] : items) {
    if (k == key) {
      existing = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

std::string_view type_name(const Value& value) noexcept {
  constexpr std::array<std::string_view, 10> kNames = {"undefined", "NoneType", "bool", "int",       "float",
                                                       "str",       "list",     "dict", "Namespace", "function"};
  return kNames.at(value.v.index());
}

bool truthy(const Value& value) {
  return std::visit(
      [&value](const auto& x) -> bool {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Undefined> || std::is_same_v<T, None>) {
          return false;
        } else if constexpr (std::is_same_v<T, bool>) {
          return x;
        } else if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, double>) {
          return x != 0;
        } else if constexpr (std::is_same_v<T, std::string>) {
          return !x.empty();
        } else if constexpr (std::is_same_v<T, ListPtr>) {
          return value.iterator || !x->empty();
        } else if constexpr (std::is_same_v<T, DictPtr>) {
          return !x->items.empty();
        } else {
          return true;
        }
      },
      value.v);
}

namespace {

/// A bool, int or float as a double, for comparing numbers of different kinds.
bool numeric(const Value& value, double& out) {
  if (value.is<bool>()) {
    out = value.as<bool>() ? 1.0 : 0.0;
  } else if (value.is<std::int64_t>()) {
    out = static_cast<double>(value.as<std::int64_t>());
  } else if (value.is<double>()) {
    out = value.as<double>();
  } else {
    return false;
  }
  return true;
}

bool integral(const Value& value, std::int64_t& out) {
  if (value.is<bool>()) {
    out = value.as<bool>() ? 1 : 0;
  } else if (value.is<std::int64_t>()) {
    out = value.as<std::int64_t>();
  } else {
    return false;
  }
  return true;
}

}  // namespace

bool equal(const Value& a, const Value& b) {
  std::int64_t ia = 0;
  std::int64_t ib = 0;
  if (integral(a, ia) && integral(b, ib)) return ia == ib;
  double da = 0;
  double db = 0;
  if (numeric(a, da) && numeric(b, db)) return da == db;
  if (a.v.index() != b.v.index()) return false;
  if (a.is_undefined() || a.is_none()) return true;
  if (a.is_string()) return a.as<std::string>() == b.as<std::string>();
  if (a.is_list()) {
    const auto& x = a.list();
    const auto& y = b.list();
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (!equal(x[i], y[i])) return false;
    }
    return true;
  }
  if (a.is_dict()) {
    const auto& x = a.dict();
    const auto& y = b.dict();
    if (x.items.size() != y.items.size()) return false;
    for (const auto& [key, value] : x.items) {
      const Value* other = y.find(key);
      if (other == nullptr || !equal(value, *other)) return false;
    }
    return true;
  }
  if (a.is<NamespacePtr>()) return a.as<NamespacePtr>() == b.as<NamespacePtr>();
  const auto& ca = a.as<Callable>();
  const auto& cb = b.as<Callable>();
  return ca.macro == cb.macro && ca.name == cb.name;
}

std::string float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  // The shortest round-trip digits, in scientific form: d[.ddd]e[+-]XX.
  std::array<char, 64> buffer{};
  const auto [end, error] =
      std::to_chars(buffer.data(), buffer.data() + buffer.size(), value, std::chars_format::scientific);
  (void)error;  // 64 bytes always suffice for a double
  const std::string text(buffer.data(), end);
  const std::size_t e = text.find('e');
  const bool negative = text[0] == '-';
  std::string digits;
  for (std::size_t i = negative ? 1 : 0; i < e; ++i) {
    if (text[i] != '.') digits += text[i];
  }
  const int exponent = std::atoi(text.c_str() + e + 1);
  std::string out = negative ? "-" : "";
  // Python's repr: positional for 1e-4 <= |x| < 1e16, else scientific with at least two exponent digits.
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<std::size_t>(exponent) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<std::size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(exponent) + 1) + "." +
             digits.substr(static_cast<std::size_t>(exponent) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  std::array<char, 16> exp{};
  std::snprintf(exp.data(), exp.size(), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp.data();
}

namespace {}  // namespace

std::pair<std::uint32_t, std::size_t> decode_utf8(std::string_view text, std::size_t i) noexcept {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80U) return {b0, 1};
  std::size_t length = 0;
  std::uint32_t cp = 0;
  if ((b0 & 0xe0U) == 0xc0U) {
    length = 2;
    cp = b0 & 0x1fU;
  } else if ((b0 & 0xf0U) == 0xe0U) {
    length = 3;
    cp = b0 & 0x0fU;
  } else if ((b0 & 0xf8U) == 0xf0U) {
    length = 4;
    cp = b0 & 0x07U;
  } else {
    return {0xffffffffU, 1};
  }
  if (i + length > text.size()) return {0xffffffffU, 1};
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xc0U) != 0x80U) return {0xffffffffU, 1};
    cp = (cp << 6U) | (byte(i + k) & 0x3fU);
  }
  return {cp, length};
}

bool is_py_space(std::uint32_t cp) noexcept {
  return (cp >= 0x09U && cp <= 0x0dU) || (cp >= 0x1cU && cp <= 0x20U) || cp == 0x85U || cp == 0xa0U || cp == 0x1680U ||
         (cp >= 0x2000U && cp <= 0x200aU) || cp == 0x2028U || cp == 0x2029U || cp == 0x202fU || cp == 0x205fU ||
         cp == 0x3000U;
}

std::string_view py_strip(std::string_view text, bool left, bool right) {
  std::size_t begin = 0;
  std::size_t end = text.size();
  if (left) {
    while (begin < end) {
      const auto [cp, length] = decode_utf8(text, begin);
      if (!is_py_space(cp)) break;
      begin += length;
    }
  }
  if (right) {
    while (end > begin) {
      std::size_t start = end - 1;  // the first byte of the last code point
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xc0U) == 0x80U) --start;
      const auto [cp, length] = decode_utf8(text, start);
      if (start + length != end || !is_py_space(cp)) break;
      end = start;
    }
  }
  return text.substr(begin, end - begin);
}

namespace {

/// Whether Python's str.isprintable() is false for code point `cp` (the control, format and separator characters
/// that chat messages may hold; other unassigned code points are taken as printable).
bool unprintable(std::uint32_t cp) noexcept {
  return cp < 0x20U || (cp >= 0x7fU && cp <= 0xa0U) || cp == 0xadU || cp == 0x1680U ||
         (cp >= 0x2000U && cp <= 0x200fU) || (cp >= 0x2028U && cp <= 0x202fU) || (cp >= 0x205fU && cp <= 0x206fU) ||
         cp == 0x3000U || cp == 0xfeffU || (cp >= 0xfff9U && cp <= 0xfffbU) || (cp >= 0xd800U && cp <= 0xdfffU);
}

std::string string_repr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (std::size_t i = 0; i < text.size();) {
    const auto [cp, length] = decode_utf8(text, i);
    const std::string_view bytes = text.substr(i, length);
    i += length;
    if (cp == static_cast<std::uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == 0xffffffffU || !unprintable(cp)) {
      out += bytes;
    } else {
      std::array<char, 16> escaped{};
      if (cp < 0x100U) {
        std::snprintf(escaped.data(), escaped.size(), "\\x%02x", cp);
      } else {
        std::snprintf(escaped.data(), escaped.size(), "\\u%04x", cp);
      }
      out += escaped.data();
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string to_repr(const Value& value) {
  if (value.is_string()) return string_repr(value.as<std::string>());
  if (value.is_undefined()) return "Undefined";  // repr(jinja2.Undefined())
  return to_str(value);
}

std::string to_str(const Value& value) {
  return std::visit(
      [&](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Undefined>) {
          return "";
        } else if constexpr (std::is_same_v<T, None>) {
          return "None";
        } else if constexpr (std::is_same_v<T, bool>) {
          return x ? "True" : "False";
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          return std::to_string(x);
        } else if constexpr (std::is_same_v<T, double>) {
          return float_repr(x);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return x;
        } else if constexpr (std::is_same_v<T, ListPtr>) {
          std::string out = value.tuple ? "(" : "[";
          for (std::size_t i = 0; i < x->size(); ++i) {
            if (i > 0) out += ", ";
            out += to_repr((*x)[i]);
          }
          if (value.tuple) return out + (x->size() == 1 ? ",)" : ")");
          return out + "]";
        } else if constexpr (std::is_same_v<T, DictPtr>) {
          std::string out = "{";
          bool first = true;
          for (const auto& [key, item] : x->items) {
            if (!first) out += ", ";
            first = false;
            out += string_repr(key) + ": " + to_repr(item);
          }
          return out + "}";
        } else if constexpr (std::is_same_v<T, NamespacePtr>) {
          return "<Namespace>";
        } else {
          return x.macro != nullptr ? "<Macro '" + x.name + "'>" : "<function " + x.name + ">";
        }
      },
      value.v);
}

std::size_t code_points(std::string_view text) noexcept {
  std::size_t count = 0;
  for (std::size_t i = 0; i < text.size(); i += decode_utf8(text, i).second) ++count;
  return count;
}

std::vector<std::string_view> split_code_points(std::string_view text) {
  std::vector<std::string_view> out;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t length = decode_utf8(text, i).second;
    out.push_back(text.substr(i, length));
    i += length;
  }
  return out;
}

}  // namespace lazygraph::nn::jinja
