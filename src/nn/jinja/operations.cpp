// Python's operators, lookups and iteration on template values (builtins.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "builtins.hpp"
#include "error.hpp"

namespace lazygraph::nn::jinja {

namespace {

std::string object_name(const Value& value) { return "'" + std::string(type_name(value)) + " object'"; }

Value missing(const Value& object, const std::string& what) {
  return Undefined{object_name(object) + " has no attribute " + what};
}

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
  throw JinjaError({}, "unsupported operand type(s) for " + std::string(op) + ": '" + std::string(type_name(a)) +
                           "' and '" + std::string(type_name(b)) + "'");
}

bool as_int(const Value& v, std::int64_t& out) {
  if (v.is<bool>()) {
    out = v.as<bool>() ? 1 : 0;
    return true;
  }
  if (v.is<std::int64_t>()) {
    out = v.as<std::int64_t>();
    return true;
  }
  return false;
}

bool as_float(const Value& v, double& out) {
  std::int64_t i = 0;
  if (as_int(v, i)) {
    out = static_cast<double>(i);
    return true;
  }
  if (v.is<double>()) {
    out = v.as<double>();
    return true;
  }
  return false;
}

std::int64_t checked(bool overflow, std::int64_t value) {
  if (overflow) throw JinjaError({}, "an integer result does not fit in 64 bits");
  return value;
}

/// Python's floor division and modulo of integers.
std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  if (b == 0) throw JinjaError({}, "integer division or modulo by zero");
  if (a == std::numeric_limits<std::int64_t>::min() && b == -1) checked(true, 0);
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

/// The item count of a repetition (str * n), refused when too large.
std::size_t repeat_count(std::int64_t n, std::size_t item_size) {
  if (n <= 0 || item_size == 0) return 0;
  if (static_cast<std::uint64_t>(n) > kMaxBuiltSize / item_size) {
    throw JinjaError({},
                     "the result would hold more than " + std::to_string(kMaxBuiltSize) + " bytes or items (64 MiB)");
  }
  return static_cast<std::size_t>(n);
}

int compare_strings(const std::string& a, const std::string& b) { return a.compare(b); }

/// -1, 0 or 1 for a < b, a == b, a > b with Python's ordering of numbers, strs and lists.
int order(std::string_view op, const Value& a, const Value& b) {
  std::int64_t ia = 0;
  std::int64_t ib = 0;
  if (as_int(a, ia) && as_int(b, ib)) return ia < ib ? -1 : ia > ib ? 1 : 0;
  double da = 0;
  double db = 0;
  if (as_float(a, da) && as_float(b, db)) return da < db ? -1 : da > db ? 1 : 0;
  if (a.is_string() && b.is_string()) {
    const int c = compare_strings(a.as<std::string>(), b.as<std::string>());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list()) {
    const auto& x = a.list();
    const auto& y = b.list();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equal(x[i], y[i])) return order(op, x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  throw JinjaError({}, "'" + std::string(op) + "' not supported between instances of '" + std::string(type_name(a)) +
                           "' and '" + std::string(type_name(b)) + "'");
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) {
      throw JinjaError({}, "'in <string>' requires string as left operand, not " + std::string(type_name(item)));
    }
    return container.as<std::string>().find(item.as<std::string>()) != std::string::npos;
  }
  if (container.is_dict()) return item.is_string() && container.dict().find(item.as<std::string>()) != nullptr;
  if (container.is_list()) {
    for (const Value& element : container.list()) {
      if (equal(element, item)) return true;
    }
    return false;
  }
  if (container.is_undefined()) return false;  // Undefined iterates as empty
  throw JinjaError({}, "argument of type '" + std::string(type_name(container)) + "' is not iterable");
}

}  // namespace

void fail_undefined(const Value& value) {
  const std::string& hint = value.as<Undefined>().name;
  throw JinjaError({}, hint.empty() ? "a value is undefined" : hint);
}

Value Args::get(std::size_t index, std::string_view name, Value fallback, std::string_view callee) const {
  const Value* found = nullptr;
  if (index < positional.size()) found = &positional[index];
  for (const auto& [key, value] : keyword) {
    if (key != name) continue;
    if (found != nullptr) {
      throw JinjaError({}, std::string(callee) + "() got multiple values for argument '" + std::string(name) + "'");
    }
    found = &value;
  }
  if (found != nullptr) return *found;
  return fallback;
}

void Args::expect(std::size_t count, std::initializer_list<std::string_view> names, std::string_view callee) const {
  if (positional.size() > count) {
    throw JinjaError({}, std::string(callee) + "() takes at most " + std::to_string(count) + " argument(s) (" +
                             std::to_string(positional.size()) + " given)");
  }
  for (const auto& [key, value] : keyword) {
    bool known = false;
    for (const std::string_view n : names) known = known || n == key;
    if (!known) throw JinjaError({}, std::string(callee) + "() got an unexpected keyword argument '" + key + "'");
  }
}

Value get_attribute(const Value& object, std::string_view name) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_dict()) {
    if (const Value* found = object.dict().find(name)) return *found;
  } else if (object.is<NamespacePtr>()) {
    if (const Value* found = object.as<NamespacePtr>()->find(name)) return *found;
  }
  return missing(object, "'" + std::string(name) + "'");
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) fail_undefined(object);
  std::int64_t index = 0;
  if ((object.is_list() || object.is_string()) && as_int(key, index)) {
    if (object.is_list()) {
      const auto& list = object.list();
      const auto size = static_cast<std::int64_t>(list.size());
      if (index < 0) index += size;
      if (index >= 0 && index < size) return list[static_cast<std::size_t>(index)];
    } else {
      const auto chars = split_code_points(object.as<std::string>());
      const auto size = static_cast<std::int64_t>(chars.size());
      if (index < 0) index += size;
      if (index >= 0 && index < size) return std::string(chars[static_cast<std::size_t>(index)]);
    }
    return Undefined{object_name(object) + " has no element " + std::to_string(index)};
  }
  if (key.is_string()) return get_attribute(object, key.as<std::string>());
  return Undefined{object_name(object) + " has no element " + to_repr(key)};
}

Value get_slice(const Value& object, const Value* start, const Value* stop, const Value* step) {
  if (object.is_undefined()) fail_undefined(object);
  const auto bound = [](const Value* v, std::int64_t fallback) {
    if (v == nullptr || v->is_none()) return fallback;
    std::int64_t i = 0;
    if (!as_int(*v, i)) throw JinjaError({}, "slice indices must be integers or None");
    return i;
  };
  const std::int64_t s = bound(step, 1);
  if (s == 0) throw JinjaError({}, "slice step cannot be zero");
  std::vector<std::string_view> chars;
  std::int64_t size = 0;
  if (object.is_list()) {
    size = static_cast<std::int64_t>(object.list().size());
  } else if (object.is_string()) {
    chars = split_code_points(object.as<std::string>());
    size = static_cast<std::int64_t>(chars.size());
  } else {
    throw JinjaError({}, object_name(object) + " is not subscriptable");
  }
  // Python's slice.indices().
  const auto clamp = [&](std::int64_t i, std::int64_t low, std::int64_t high) {
    if (i < 0) i += size;
    return i < low ? low : i > high ? high : i;
  };
  std::int64_t begin = 0;
  std::int64_t end = 0;
  if (s > 0) {
    begin = start == nullptr || start->is_none() ? 0 : clamp(bound(start, 0), 0, size);
    end = stop == nullptr || stop->is_none() ? size : clamp(bound(stop, 0), 0, size);
  } else {
    begin = start == nullptr || start->is_none() ? size - 1 : clamp(bound(start, 0), -1, size - 1);
    end = stop == nullptr || stop->is_none() ? -1 : clamp(bound(stop, 0), -1, size - 1);
  }
  std::vector<std::size_t> picks;
  for (std::int64_t i = begin; s > 0 ? i < end : i > end;) {
    picks.push_back(static_cast<std::size_t>(i));
    if (__builtin_add_overflow(i, s, &i)) break;  // a step near 2^63 leaves the sequence at once
  }
  if (object.is_list()) {
    std::vector<Value> out;
    out.reserve(picks.size());
    for (const std::size_t i : picks) out.push_back(object.list()[i]);
    return out;
  }
  std::string out;
  for (const std::size_t i : picks) out += chars[i];
  return out;
}

std::vector<Value> iterate(const Value& value) {
  if (value.is_list()) return value.list();
  if (value.is_dict()) {
    std::vector<Value> keys;
    keys.reserve(value.dict().items.size());
    for (const auto& item : value.dict().items) keys.emplace_back(item.first);
    return keys;
  }
  if (value.is_string()) {
    std::vector<Value> chars;
    for (const std::string_view c : split_code_points(value.as<std::string>())) chars.emplace_back(std::string(c));
    return chars;
  }
  if (value.is_undefined()) return {};
  throw JinjaError({}, object_name(value) + " is not iterable");
}

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string out = to_str(a);
    const std::string right = to_str(b);
    if (out.size() + right.size() > kMaxBuiltSize) repeat_count(2, kMaxBuiltSize);
    return out + right;
  }
  if (op == "in") return contains(b, a);
  if (op == "not in") return !contains(b, a);
  if (op == "<") return order(op, a, b) < 0;
  if (op == "<=") return order(op, a, b) <= 0;
  if (op == ">") return order(op, a, b) > 0;
  if (op == ">=") return order(op, a, b) >= 0;
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  std::int64_t ia = 0;
  std::int64_t ib = 0;
  const bool ints = as_int(a, ia) && as_int(b, ib);
  double da = 0;
  double db = 0;
  const bool numbers = as_float(a, da) && as_float(b, db);
  std::int64_t r = 0;
  if (op == "+") {
    if (ints) {
      const bool overflow = __builtin_add_overflow(ia, ib, &r);
      return checked(overflow, r);
    }
    if (numbers) return da + db;
    if (a.is_string() && b.is_string()) {
      if (a.as<std::string>().size() + b.as<std::string>().size() > kMaxBuiltSize) repeat_count(2, kMaxBuiltSize);
      if (a.markup || b.markup) {  // Markup + str escapes the str, as markupsafe does
        Value sum(a.markup == b.markup ? a.as<std::string>() + b.as<std::string>()
                  : a.markup           ? a.as<std::string>() + html_escape(b.as<std::string>())
                                       : html_escape(a.as<std::string>()) + b.as<std::string>());
        sum.markup = true;
        return sum;
      }
      return a.as<std::string>() + b.as<std::string>();
    }
    if (a.is_list() && b.is_list()) {
      std::vector<Value> out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return out;
    }
  } else if (op == "-") {
    if (ints) {
      const bool overflow = __builtin_sub_overflow(ia, ib, &r);
      return checked(overflow, r);
    }
    if (numbers) return da - db;
  } else if (op == "*") {
    if (ints) {
      const bool overflow = __builtin_mul_overflow(ia, ib, &r);
      return checked(overflow, r);
    }
    if (numbers) return da * db;
    const Value& seq = a.is_string() || a.is_list() ? a : b;
    std::int64_t n = 0;
    if ((seq.is_string() || seq.is_list()) && as_int(&seq == &a ? b : a, n)) {
      if (seq.is_string()) {
        const std::string& text = seq.as<std::string>();
        const std::size_t count = repeat_count(n, text.size());
        const std::size_t total = count * text.size();
        std::string out;
        out.reserve(total);
        out = text.substr(0, total);
        while (out.size() < total) out.append(out, 0, std::min(out.size(), total - out.size()));  // doubling
        return out;
      }
      const auto& list = seq.list();
      const std::size_t count = repeat_count(n, list.size());
      std::vector<Value> out;
      for (std::size_t i = 0; i < count; ++i) out.insert(out.end(), list.begin(), list.end());
      return out;
    }
  } else if (op == "/") {
    if (numbers) {
      if (db == 0) throw JinjaError({}, "division by zero");
      return da / db;
    }
  } else if (op == "//") {
    if (ints) return floor_div(ia, ib);
    if (numbers) {
      if (db == 0) throw JinjaError({}, "float floor division by zero");
      return std::floor(da / db);
    }
  } else if (op == "%") {
    if (ints) {
      if (ib == 0) throw JinjaError({}, "integer division or modulo by zero");
      if (ib == -1) return std::int64_t{0};  // INT64_MIN % -1 would overflow in C++
      const std::int64_t r = ia % ib;        // Python's sign: the divisor's
      return r != 0 && ((r < 0) != (ib < 0)) ? r + ib : r;
    }
    if (numbers) {
      if (db == 0) throw JinjaError({}, "float modulo");
      const double m = std::fmod(da, db);
      return m != 0 && ((m < 0) != (db < 0)) ? m + db : m;
    }
  } else if (op == "**") {
    if (ints && ib >= 0) {
      if (ia == 0 || ia == 1) return ib == 0 ? std::int64_t{1} : ia;
      if (ia == -1) return ib % 2 == 0 ? std::int64_t{1} : std::int64_t{-1};
      std::int64_t result = 1;  // |ia| >= 2: overflows within 63 steps
      for (std::int64_t i = 0; i < ib; ++i) {
        const bool overflow = __builtin_mul_overflow(result, ia, &result);
        checked(overflow, 0);
      }
      return result;
    }
    if (numbers) return std::pow(da, db);
  }
  unsupported(op, a, b);
}

}  // namespace lazygraph::nn::jinja
