// Python's str and dict methods that chat templates call, and the environment's global functions (builtins.hpp).
#include <array>
#include <cstdint>
#include <ctime>
#include <string>

#include "builtins.hpp"
#include "error.hpp"
#include "text_case.hpp"

namespace lazygraph::nn::jinja {

namespace {

constexpr std::array<std::string_view, 22> kStrMethods = {
    "strip",   "lstrip",  "rstrip",  "split",      "rsplit",  "startswith", "endswith", "upper",
    "lower",   "replace", "title",   "capitalize", "find",    "rfind",      "count",    "join",
    "isdigit", "isalpha", "isspace", "islower",    "isupper", "splitlines"};
constexpr std::array<std::string_view, 4> kDictMethods = {"items", "keys", "values", "get"};

/// The most items range() builds (a list of 1 Mi values is about 50 MiB).
constexpr std::size_t kMaxRangeItems = std::size_t{1} << 20U;

const std::string& string_arg(const Value& v, std::string_view method) {
  if (!v.is_string()) {
    throw JinjaError({}, std::string(method) + "() needs a str argument, not " + std::string(type_name(v)));
  }
  return v.as<std::string>();
}

/// str.strip(chars) and friends: `chars` none means whitespace.
std::string strip_chars(const std::string& text, const Value& chars, bool left, bool right, std::string_view method) {
  if (chars.is_none() || chars.is_undefined()) return std::string(py_strip(text, left, right));
  const auto set = split_code_points(string_arg(chars, method));
  const auto in_set = [&](std::string_view c) {
    for (const std::string_view s : set) {
      if (s == c) return true;
    }
    return false;
  };
  auto cps = split_code_points(text);
  std::size_t begin = 0;
  std::size_t end = cps.size();
  while (left && begin < end && in_set(cps[begin])) ++begin;
  while (right && end > begin && in_set(cps[end - 1])) --end;
  std::string out;
  for (std::size_t i = begin; i < end; ++i) out += cps[i];
  return out;
}

Value split(const std::string& text, const Value& sep, std::int64_t maxsplit, bool from_right) {
  std::vector<Value> parts;
  if (sep.is_none() || sep.is_undefined()) {
    // Runs of whitespace separate; empty parts are dropped.
    std::vector<std::string> words;
    std::string word;
    bool in_word = false;
    const auto cps = split_code_points(text);
    for (const std::string_view c : cps) {
      const bool space = is_py_space(decode_utf8(c, 0).first);
      if (space) {
        if (in_word) words.push_back(std::move(word));
        word.clear();
        in_word = false;
      } else {
        word += c;
        in_word = true;
      }
    }
    if (in_word) words.push_back(std::move(word));
    if (maxsplit >= 0 && static_cast<std::size_t>(maxsplit) + 1 < words.size()) {
      // Rejoin what is past the last split with the original text: find the (maxsplit+1)th word's start.
      const std::string_view stripped = py_strip(text, !from_right, from_right);
      if (!from_right) {
        std::size_t pos = 0;
        for (std::int64_t i = 0; i < maxsplit; ++i) {
          pos = stripped.find(words[static_cast<std::size_t>(i)], pos) + words[static_cast<std::size_t>(i)].size();
          parts.emplace_back(words[static_cast<std::size_t>(i)]);
        }
        parts.emplace_back(std::string(py_strip(stripped.substr(pos), true, false)));
        return parts;
      }
    }
    for (auto& w : words) parts.emplace_back(std::move(w));
    return parts;
  }
  const std::string& s = string_arg(sep, "split");
  if (s.empty()) throw JinjaError({}, "empty separator");
  std::vector<std::string> pieces;
  std::size_t pos = 0;
  for (;;) {
    const std::size_t next = text.find(s, pos);
    if (next == std::string::npos ||
        (!from_right && maxsplit >= 0 && static_cast<std::int64_t>(pieces.size()) >= maxsplit)) {
      pieces.push_back(text.substr(pos));
      break;
    }
    pieces.push_back(text.substr(pos, next - pos));
    pos = next + s.size();
  }
  if (from_right && maxsplit >= 0 && static_cast<std::int64_t>(pieces.size()) > maxsplit + 1) {
    const std::size_t keep = static_cast<std::size_t>(maxsplit);
    std::string head;
    const std::size_t joined = pieces.size() - keep;
    for (std::size_t i = 0; i < joined; ++i) head += (i > 0 ? s : "") + pieces[i];
    parts.emplace_back(head);
    for (std::size_t i = joined; i < pieces.size(); ++i) parts.emplace_back(pieces[i]);
    return parts;
  }
  for (auto& p : pieces) parts.emplace_back(std::move(p));
  return parts;
}

bool ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

bool affix(const std::string& text, const Value& candidates, bool start) {
  const auto one = [&](const Value& v) {
    const std::string& a = string_arg(v, start ? "startswith" : "endswith");
    if (a.size() > text.size()) return false;
    return start ? text.compare(0, a.size(), a) == 0 : text.compare(text.size() - a.size(), a.size(), a) == 0;
  };
  if (candidates.is_list()) {
    for (const Value& v : candidates.list()) {
      if (one(v)) return true;
    }
    return false;
  }
  return one(candidates);
}

Value string_method(const std::string& text, std::string_view name, const Args& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    args.expect(1, {}, name);
    return strip_chars(text, args.get(0, "", None{}, name), name != "rstrip", name != "lstrip", name);
  }
  if (name == "split" || name == "rsplit") {
    args.expect(2, {"sep", "maxsplit"}, name);
    const Value max = args.get(1, "maxsplit", std::int64_t{-1}, name);
    if (!max.is<std::int64_t>()) throw JinjaError({}, "maxsplit must be an integer");
    return split(text, args.get(0, "sep", None{}, name), max.as<std::int64_t>(), name == "rsplit");
  }
  if (name == "startswith" || name == "endswith") {
    args.expect(1, {}, name);
    if (args.positional.empty()) throw JinjaError({}, std::string(name) + "() takes at least 1 argument (0 given)");
    return affix(text, args.positional[0], name == "startswith");
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    args.expect(0, {}, name);
    return name == "upper"   ? to_upper(text)
           : name == "lower" ? to_lower(text)
           : name == "title" ? py_title(text)
                             : capitalize(text);
  }
  if (name == "replace") {
    args.expect(3, {}, name);
    if (args.positional.size() < 2) throw JinjaError({}, "replace() takes at least 2 arguments");
    const std::string& old = string_arg(args.positional[0], name);
    const std::string& with = string_arg(args.positional[1], name);
    std::int64_t count = -1;
    if (args.positional.size() == 3) {
      if (!args.positional[2].is<std::int64_t>()) throw JinjaError({}, "replace() count must be an integer");
      count = args.positional[2].as<std::int64_t>();
    }
    std::string out;
    if (old.empty()) {  // Python inserts `with` around every character
      const auto cps = split_code_points(text);
      std::int64_t done = 0;
      for (const std::string_view c : cps) {
        if (count < 0 || done < count) {
          out += with;
          ++done;
        }
        out += c;
        if (out.size() > kMaxBuiltSize) throw JinjaError({}, "replace() would build a string over 64 MiB");
      }
      if (count < 0 || done < count) out += with;
      return out;
    }
    std::size_t pos = 0;
    std::int64_t done = 0;
    for (std::size_t next = text.find(old); next != std::string::npos && (count < 0 || done < count);
         next = text.find(old, pos)) {
      out.append(text, pos, next - pos);
      out += with;
      pos = next + old.size();
      ++done;
      if (out.size() > kMaxBuiltSize) throw JinjaError({}, "replace() would build a string over 64 MiB");
    }
    out.append(text, pos);
    return out;
  }
  if (name == "find" || name == "rfind" || name == "count") {
    args.expect(1, {}, name);
    if (args.positional.empty()) throw JinjaError({}, std::string(name) + "() takes at least 1 argument (0 given)");
    const std::string& sub = string_arg(args.positional[0], name);
    if (name == "count") {
      if (sub.empty()) return static_cast<std::int64_t>(code_points(text) + 1);
      std::int64_t n = 0;
      for (std::size_t p = text.find(sub); p != std::string::npos; p = text.find(sub, p + sub.size())) ++n;
      return n;
    }
    const std::size_t at = name == "find" ? text.find(sub) : text.rfind(sub);
    if (at == std::string::npos) return std::int64_t{-1};
    return static_cast<std::int64_t>(code_points(std::string_view(text).substr(0, at)));
  }
  if (name == "join") {
    args.expect(1, {}, name);
    if (args.positional.empty()) throw JinjaError({}, "join() takes exactly one argument (0 given)");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(args.positional[0])) {
      if (!first) out += text;
      first = false;
      out += string_arg(item, name);
      if (out.size() > kMaxBuiltSize) throw JinjaError({}, "join() would build a string over 64 MiB");
    }
    return out;
  }
  if (name == "splitlines") {
    args.expect(0, {}, name);
    std::vector<Value> lines;
    std::size_t start = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\n' || text[i] == '\r') {
        lines.emplace_back(text.substr(start, i - start));
        if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < text.size()) lines.emplace_back(text.substr(start));
    return lines;
  }
  args.expect(0, {}, name);
  if (name == "islower" || name == "isupper") return all_cased(text, name == "islower");
  bool any = false;
  for (const char c : text) {
    any = true;
    const auto byte = static_cast<unsigned char>(c);
    const bool ok = name == "isdigit"   ? (c >= '0' && c <= '9')
                    : name == "isalpha" ? ascii_alpha(c)
                    : name == "isspace" ? is_py_space(byte)
                                        : true;
    if (!ok) return false;
  }
  return any;
}

Value dict_method(const DictData& dict, std::string_view name, const Args& args) {
  if (name == "get") {
    args.expect(2, {}, name);
    if (args.positional.empty()) throw JinjaError({}, "get() takes at least 1 argument (0 given)");
    const Value& key = args.positional[0];
    if (key.is_string()) {
      if (const Value* found = dict.find(key.as<std::string>())) return *found;
    }
    return args.positional.size() > 1 ? args.positional[1] : Value(None{});
  }
  args.expect(0, {}, name);
  std::vector<Value> out;
  out.reserve(dict.items.size());
  for (const auto& [key, value] : dict.items) {
    if (name == "keys") {
      out.emplace_back(key);
    } else if (name == "values") {
      out.push_back(value);
    } else {
      out.push_back(make_tuple({Value(key), value}));
    }
  }
  return out;
}

}  // namespace

bool is_method(std::string_view name) noexcept {
  for (const std::string_view m : kStrMethods) {
    if (m == name) return true;
  }
  for (const std::string_view m : kDictMethods) {
    if (m == name) return true;
  }
  return false;
}

Value call_method(const Value& object, std::string_view name, const Args& args) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_string()) {
    for (const std::string_view m : kStrMethods) {
      if (m == name) return string_method(object.as<std::string>(), name, args);
    }
  } else if (object.is_dict()) {
    for (const std::string_view m : kDictMethods) {
      if (m == name) return dict_method(object.dict(), name, args);
    }
  }
  throw JinjaError({}, "'" + std::string(type_name(object)) + " object' has no method '" + std::string(name) + "'");
}

bool is_global_function(std::string_view name) noexcept {
  return name == "raise_exception" || name == "strftime_now" || name == "namespace" || name == "range" ||
         name == "dict";
}

Value call_global(std::string_view name, const Args& args) {
  if (name == "raise_exception") {
    args.expect(1, {"message"}, name);
    throw RaisedError({}, to_str(args.get(0, "message", "", name)));
  }
  if (name == "strftime_now") {
    args.expect(1, {"format"}, name);
    const Value format = args.get(0, "format", Undefined{"strftime_now() needs a format"}, name);
    const std::string& f = string_arg(format, name);
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    std::string out(256 + f.size() * 16, '\0');
    const std::size_t n = std::strftime(out.data(), out.size(), f.c_str(), &local);
    out.resize(n);
    return out;
  }
  if (name == "namespace" || name == "dict") {
    DictData data;
    if (args.positional.size() > 1 || (!args.positional.empty() && !args.positional[0].is_dict())) {
      throw JinjaError({}, std::string(name) + "() takes keyword arguments and at most one dict");
    }
    if (!args.positional.empty()) data = args.positional[0].dict();
    for (const auto& [key, value] : args.keyword) data.set(key, value);
    if (name == "dict") return data;
    return std::make_shared<DictData>(std::move(data));
  }
  // range
  args.expect(3, {}, name);
  std::vector<std::int64_t> bounds;
  for (const Value& v : args.positional) {
    if (!v.is<std::int64_t>()) throw JinjaError({}, "range() takes integers, not " + std::string(type_name(v)));
    bounds.push_back(v.as<std::int64_t>());
  }
  if (bounds.empty()) throw JinjaError({}, "range expected at least 1 argument, got 0");
  const std::int64_t start = bounds.size() > 1 ? bounds[0] : 0;
  const std::int64_t stop = bounds.size() > 1 ? bounds[1] : bounds[0];
  const std::int64_t step = bounds.size() > 2 ? bounds[2] : 1;
  if (step == 0) throw JinjaError({}, "range() arg 3 must not be zero");
  std::vector<Value> out;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (out.size() >= kMaxRangeItems) {
      throw JinjaError({}, "range() would build more than " + std::to_string(kMaxRangeItems) + " items");
    }
    out.emplace_back(i);
    if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
  }
  return out;
}

}  // namespace lazygraph::nn::jinja
