// Jinja's filters that chat templates use, and transformers' tojson (builtins.hpp).
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "builtins.hpp"
#include "error.hpp"
#include "json.hpp"
#include "text_case.hpp"

namespace lazygraph::nn::jinja {

namespace {

constexpr std::array<std::string_view, 33> kFilters = {
    "trim",  "length", "count", "tojson",  "string",   "upper", "lower",      "capitalize", "title",  "default", "d",
    "first", "last",   "join",  "replace", "items",    "list",  "selectattr", "rejectattr", "select", "reject",  "map",
    "int",   "float",  "safe",  "indent",  "dictsort", "abs",   "reverse",    "sort",       "unique", "escape",  "e"};

/// Jinja's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
Value lookup_path(const Value& item, const std::string& path) {
  Value current = item;
  std::size_t start = 0;
  for (;;) {
    const std::size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    std::int64_t index = 0;
    const auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), index);
    const bool digits = !part.empty() && error == std::errc{} && end == part.data() + part.size();
    current = digits ? get_item(current, Value(index)) : get_item(current, Value(part));
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

std::string attribute_name(const Value& v) {
  if (v.is_string()) return v.as<std::string>();
  if (v.is<std::int64_t>()) return std::to_string(v.as<std::int64_t>());
  throw JinjaError({}, "an attribute name must be a str, not " + std::string(type_name(v)));
}

/// select / reject / selectattr / rejectattr.
Value select(const Value& seq, const Args& args, bool by_attribute, bool keep) {
  std::size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (args.positional.empty()) throw JinjaError({}, "selectattr() needs the attribute's name");
    attribute = attribute_name(args.positional[next++]);
  }
  std::string test;
  if (next < args.positional.size()) test = attribute_name(args.positional[next++]);
  if (!test.empty() && !is_test(test)) throw JinjaError({}, "no test named '" + test + "'");
  Args test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
  test_args.keyword = args.keyword;
  std::vector<Value> out;
  if (!truthy(seq)) return out;  // Jinja's `if seq:` before iterating: a false non-sequence gives nothing
  for (const Value& item : iterate(seq)) {
    const Value subject = by_attribute ? lookup_path(item, attribute) : item;
    const bool passed = test.empty() ? truthy(subject) : apply_test(test, subject, test_args);
    if (passed == keep) out.push_back(item);
  }
  return out;
}

Value map(const Value& seq, const Args& args) {
  std::vector<Value> out;
  if (!truthy(seq)) return out;  // as select
  for (const auto& [key, value] : args.keyword) {
    if (key != "attribute" && key != "default")
      throw JinjaError({}, "map() got an unexpected keyword argument '" + key + "'");
  }
  const Value attribute = args.get(kKeywordOnly, "attribute", Undefined{}, "map");
  if (!attribute.is_undefined()) {
    const std::string path = attribute_name(attribute);
    const Value fallback = args.get(kKeywordOnly, "default", Undefined{}, "map");
    for (const Value& item : iterate(seq)) {
      Value v = lookup_path(item, path);
      if (v.is_undefined() && !fallback.is_undefined()) v = fallback;
      out.push_back(std::move(v));
    }
    return out;
  }
  if (args.positional.empty()) throw JinjaError({}, "map() needs a filter name or attribute=");
  const std::string filter = attribute_name(args.positional[0]);
  if (!is_filter(filter)) throw JinjaError({}, "no filter named '" + filter + "'");
  Args rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  for (const Value& item : iterate(seq)) out.push_back(apply_filter(filter, item, rest));
  return out;
}

Value tojson(const Value& value, const Args& args) {
  args.expect(4, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson");
  const Value ensure_ascii = args.get(0, "ensure_ascii", false, "tojson");
  const Value indent = args.get(1, "indent", None{}, "tojson");
  const Value separators = args.get(2, "separators", None{}, "tojson");
  const Value sort_keys = args.get(3, "sort_keys", false, "tojson");
  JsonStyle style;
  if (indent.is<std::int64_t>()) {
    style.indent =
        std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(indent.as<std::int64_t>(), 0, 64)), ' ');
  } else if (indent.is_string()) {
    style.indent = indent.as<std::string>();
  } else if (!indent.is_none()) {
    throw JinjaError({}, "tojson's indent must be an int, a str or None");
  }
  if (style.indent.has_value()) style.item_separator = ",";
  if (!separators.is_none()) {
    if (!separators.is_list() || separators.list().size() != 2 || !separators.list()[0].is_string() ||
        !separators.list()[1].is_string()) {
      throw JinjaError({}, "tojson's separators must be a pair of str");
    }
    style.item_separator = separators.list()[0].as<std::string>();
    style.key_separator = separators.list()[1].as<std::string>();
  }
  style.sort_keys = truthy(sort_keys);
  std::string text = to_json(value, style);
  if (!truthy(ensure_ascii)) return text;
  std::string ascii;
  for (std::size_t i = 0; i < text.size();) {
    const auto [cp, length] = decode_utf8(text, i);
    i += length;
    if (cp < 0x80U) {
      ascii += static_cast<char>(cp);
      continue;
    }
    const auto hex = [&](std::uint32_t unit) {
      std::array<char, 16> buffer{};
      std::snprintf(buffer.data(), buffer.size(), "\\u%04x", unit);
      ascii += buffer.data();
    };
    if (cp == 0xffffffffU) {
      hex(0xfffdU);
    } else if (cp >= 0x10000U) {
      hex(0xd800U + ((cp - 0x10000U) >> 10U));
      hex(0xdc00U + ((cp - 0x10000U) & 0x3ffU));
    } else {
      hex(cp);
    }
  }
  return ascii;
}

Value indent(const Value& value, const Args& args) {
  args.expect(3, {"width", "first", "blank"}, "indent");
  const Value width = args.get(0, "width", std::int64_t{4}, "indent");
  const bool first = truthy(args.get(1, "first", false, "indent"));
  const bool blank = truthy(args.get(2, "blank", false, "indent"));
  std::string prefix;
  if (width.is_string()) {
    prefix = width.as<std::string>();
  } else if (width.is<std::int64_t>()) {
    prefix.assign(static_cast<std::size_t>(std::clamp<std::int64_t>(width.as<std::int64_t>(), 0, 1024)), ' ');
  } else {
    throw JinjaError({}, "indent's width must be an int or a str");
  }
  if (!value.is_string()) {  // Jinja's indent appends "\n" to its operand
    if (value.is_undefined()) fail_undefined(value);
    throw JinjaError({}, "indent needs a str, not " + std::string(type_name(value)));
  }
  const std::string text = value.as<std::string>() + "\n";
  std::vector<std::string> lines;  // str.splitlines() on "\n", "\r\n" and "\r"
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n' || text[i] == '\r') {
      lines.push_back(text.substr(start, i - start));
      if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += '\n';
      if (blank || !lines[i].empty()) out += prefix;
    }
    out += lines[i];
    if (out.size() > kMaxBuiltSize) throw JinjaError({}, "indent would build a string over 64 MiB");
  }
  return first ? prefix + out : out;
}

/// A sort key for dictsort and sort: lower-cased strs unless case-sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_string()) return v;
  return to_lower(v.as<std::string>());
}

Value sorted(std::vector<Value> items, const std::function<Value(const Value&)>& key, bool reverse) {
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return truthy(binary_op("<", key(reverse ? b : a), key(reverse ? a : b)));
  });
  return items;
}

Value to_int(const Value& value, const Value& fallback) {
  if (value.is<std::int64_t>()) return value;
  if (value.is<bool>()) return std::int64_t{value.as<bool>() ? 1 : 0};
  if (value.is<double>()) {
    const double d = value.as<double>();
    if (std::isfinite(d) && std::fabs(d) < 9.2e18) return static_cast<std::int64_t>(d);
    return fallback;
  }
  if (value.is_string()) {
    const std::string s(py_strip(value.as<std::string>(), true, true));
    std::int64_t i = 0;
    const char* begin = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
    const auto [end, error] = std::from_chars(begin, s.data() + s.size(), i);
    if (!s.empty() && error == std::errc{} && end == s.data() + s.size()) return i;
    char* stop = nullptr;
    const double d = std::strtod(s.c_str(), &stop);
    if (!s.empty() && stop == s.c_str() + s.size()) return to_int(d, fallback);
  }
  return fallback;
}

}  // namespace

bool is_filter(std::string_view name) noexcept {
  return std::find(kFilters.begin(), kFilters.end(), name) != kFilters.end();
}

Value apply_filter(std::string_view name, const Value& value, const Args& args) {
  if (name == "tojson") return tojson(value, args);
  if (name == "trim") {
    args.expect(1, {"chars"}, name);
    const Value chars = args.get(0, "chars", None{}, name);
    if (chars.is_none()) return std::string(py_strip(to_str(value), true, true));
    return call_method(to_str(value), "strip", Args{{chars}, {}});
  }
  if (name == "length" || name == "count") {
    args.expect(0, {}, name);
    if (value.is_string()) return static_cast<std::int64_t>(code_points(value.as<std::string>()));
    if (value.is_list()) return static_cast<std::int64_t>(value.list().size());
    if (value.is_dict()) return static_cast<std::int64_t>(value.dict().items.size());
    if (value.is_undefined()) return std::int64_t{0};
    throw JinjaError({}, "object of type '" + std::string(type_name(value)) + "' has no len()");
  }
  if (name == "escape" || name == "e") {
    args.expect(0, {}, name);
    Value escaped(value.is_string() && value.markup ? value.as<std::string>() : html_escape(to_str(value)));
    escaped.markup = true;
    return escaped;
  }
  if (name == "string" || name == "safe") {
    args.expect(0, {}, name);
    Value text(to_str(value));
    text.markup = name == "safe" || (value.is_string() && value.markup);  // Markup(x); str(Markup) stays Markup
    return text;
  }
  if (name == "upper" || name == "lower" || name == "capitalize") {
    args.expect(0, {}, name);
    const std::string s = to_str(value);
    return name == "upper" ? to_upper(s) : name == "lower" ? to_lower(s) : capitalize(s);
  }
  if (name == "title") {
    args.expect(0, {}, name);
    return jinja_title(to_str(value));
  }
  if (name == "default" || name == "d") {
    args.expect(2, {"default_value", "boolean"}, name);
    const Value fallback = args.get(0, "default_value", "", name);
    const bool boolean = truthy(args.get(1, "boolean", false, name));
    return value.is_undefined() || (boolean && !truthy(value)) ? fallback : value;
  }
  if (name == "first" || name == "last") {
    args.expect(0, {}, name);
    const std::vector<Value> items = iterate(value);
    if (items.empty()) return Undefined{"No " + std::string(name) + " item, sequence was empty."};
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    args.expect(2, {"d", "attribute"}, name);
    const std::string separator = to_str(args.get(0, "d", "", name));
    const Value attribute = args.get(1, "attribute", None{}, name);
    std::string out;
    bool first = true;
    for (const Value& item : iterate(value)) {
      if (!first) out += separator;
      first = false;
      out += to_str(attribute.is_none() ? item : lookup_path(item, attribute_name(attribute)));
      if (out.size() > kMaxBuiltSize) throw JinjaError({}, "join would build a string over 64 MiB");
    }
    return out;
  }
  if (name == "replace") {
    args.expect(3, {"old", "new", "count"}, name);
    Args call{{to_str(args.get(0, "old", "", name)), to_str(args.get(1, "new", "", name))}, {}};
    const Value count = args.get(2, "count", None{}, name);
    if (!count.is_none()) call.positional.push_back(count);
    return call_method(to_str(value), "replace", call);
  }
  if (name == "items") {
    args.expect(0, {}, name);
    if (value.is_undefined()) return make_iterator({});
    if (!value.is_dict()) throw JinjaError({}, "Can only get item pairs from a mapping.");
    return make_iterator(call_method(value, "items", Args{}).list());
  }
  if (name == "list") {
    args.expect(0, {}, name);
    return iterate(value);
  }
  // Jinja returns these as generators: true even when empty.
  if (name == "selectattr" || name == "rejectattr") {
    return make_iterator(select(value, args, true, name == "selectattr").list());
  }
  if (name == "select" || name == "reject") return make_iterator(select(value, args, false, name == "select").list());
  if (name == "map") return make_iterator(map(value, args).list());
  if ((name == "int" || name == "float") && value.is_undefined()) fail_undefined(value);  // int(Undefined) raises
  if (name == "int") {
    args.expect(2, {"default", "base"}, name);
    return to_int(value, args.get(0, "default", std::int64_t{0}, name));
  }
  if (name == "float") {
    args.expect(1, {"default"}, name);
    Value fallback = args.get(0, "default", 0.0, name);
    if (value.is<double>()) return value;
    if (value.is<std::int64_t>()) return static_cast<double>(value.as<std::int64_t>());
    if (value.is<bool>()) return value.as<bool>() ? 1.0 : 0.0;
    if (value.is_string()) {
      const std::string s(py_strip(value.as<std::string>(), true, true));
      char* stop = nullptr;
      const double d = std::strtod(s.c_str(), &stop);
      if (!s.empty() && stop == s.c_str() + s.size()) return d;
    }
    return fallback;
  }
  if (name == "abs") {
    args.expect(0, {}, name);
    if (value.is<std::int64_t>()) {
      if (value.as<std::int64_t>() == INT64_MIN) throw JinjaError({}, "an integer result does not fit in 64 bits");
      return std::int64_t{std::llabs(value.as<std::int64_t>())};
    }
    if (value.is<double>()) return std::fabs(value.as<double>());
    if (value.is<bool>()) return std::int64_t{value.as<bool>() ? 1 : 0};
    if (value.is_undefined()) fail_undefined(value);
    throw JinjaError({}, "bad operand type for abs(): '" + std::string(type_name(value)) + "'");
  }
  if (name == "reverse") {
    args.expect(0, {}, name);
    if (value.is_string()) {
      const Value step(std::int64_t{-1});
      return get_slice(value, nullptr, nullptr, &step);
    }
    std::vector<Value> items = iterate(value);
    std::reverse(items.begin(), items.end());
    return make_iterator(std::move(items));
  }
  if (name == "indent") return indent(value, args);
  if (name == "dictsort") {
    args.expect(3, {"case_sensitive", "by", "reverse"}, name);
    const bool case_sensitive = truthy(args.get(0, "case_sensitive", false, name));
    const Value by = args.get(1, "by", "key", name);
    const bool reverse = truthy(args.get(2, "reverse", false, name));
    if (!value.is_dict()) throw JinjaError({}, "dictsort needs a dict, not " + std::string(type_name(value)));
    const std::size_t position = by.is_string() && by.as<std::string>() == "value" ? 1 : 0;
    if (position == 0 && !(by.is_string() && by.as<std::string>() == "key")) {
      throw JinjaError({}, "You can only sort by either \"key\" or \"value\"");
    }
    return sorted(
        call_method(value, "items", Args{}).list(),
        [&](const Value& pair) { return sort_key(pair.list()[position], case_sensitive); }, reverse);
  }
  if (name == "sort") {
    args.expect(3, {"reverse", "case_sensitive", "attribute"}, name);
    const bool reverse = truthy(args.get(0, "reverse", false, name));
    const bool case_sensitive = truthy(args.get(1, "case_sensitive", false, name));
    const Value attribute = args.get(2, "attribute", None{}, name);
    return sorted(
        iterate(value),
        [&](const Value& item) {
          return sort_key(attribute.is_none() ? item : lookup_path(item, attribute_name(attribute)), case_sensitive);
        },
        reverse);
  }
  if (name == "unique") {
    args.expect(0, {}, name);
    std::vector<Value> out;
    for (const Value& item : iterate(value)) {
      const Value key = sort_key(item, false);
      bool seen = false;
      for (const Value& o : out) seen = seen || equal(sort_key(o, false), key);
      if (!seen) out.push_back(item);
    }
    return make_iterator(std::move(out));
  }
  throw JinjaError({}, "no filter named '" + std::string(name) + "'");
}

}  // namespace lazygraph::nn::jinja
