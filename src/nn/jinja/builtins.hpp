#pragma once
/// \file
/// What a template can call: Jinja's filters and tests that chat templates use, Python's str and dict methods,
/// attribute and item lookup as Jinja's sandbox does them, and transformers' globals (raise_exception,
/// strftime_now) with Jinja's (namespace, range, dict). The is_* functions name the subset: the parser refuses
/// any other name when the template is loaded. Private to src/nn.
///
/// Each function throws JinjaError without a place for a bad argument or a use of undefined that Jinja refuses
/// (the evaluator adds the place).

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "value.hpp"

namespace lazygraph::nn::jinja {

/// The largest string or list a template may build: 64 MiB (or 64 Mi items), so that `'a' * 10**12` fails at once.
inline constexpr std::size_t kMaxBuiltSize = std::size_t{64} << 20U;

/// The index Args::get takes for an argument that can only be given by name.
inline constexpr std::size_t kKeywordOnly = static_cast<std::size_t>(-1);

/// A call's arguments, evaluated.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  /// The argument at `index` (kKeywordOnly: none) or named `name`, else `fallback`. Throws when both are given.
  [[nodiscard]] Value get(std::size_t index, std::string_view name, Value fallback, std::string_view callee) const;
  /// Throws naming `callee` when there are more than `count` positional arguments or a keyword not in `names`.
  void expect(std::size_t count, std::initializer_list<std::string_view> names, std::string_view callee) const;
};

/// Raised by a value that is undefined, used where Jinja raises UndefinedError (its hint: "'x' is undefined").
[[noreturn]] void fail_undefined(const Value& value);

[[nodiscard]] bool is_filter(std::string_view name) noexcept;
[[nodiscard]] bool is_test(std::string_view name) noexcept;
/// A method of str or dict this engine has (strip, split, startswith, items, get, ...).
[[nodiscard]] bool is_method(std::string_view name) noexcept;
/// A global function: raise_exception, strftime_now, namespace, range, dict.
[[nodiscard]] bool is_global_function(std::string_view name) noexcept;

/// value | name(args).
[[nodiscard]] Value apply_filter(std::string_view name, const Value& value, const Args& args);
/// value is name(args).
[[nodiscard]] bool apply_test(std::string_view name, const Value& value, const Args& args);
/// object.name(args) for a str or dict method.
[[nodiscard]] Value call_method(const Value& object, std::string_view name, const Args& args);
/// A global function's result; raise_exception throws RaisedError with the template's message.
[[nodiscard]] Value call_global(std::string_view name, const Args& args);

/// object.name as Jinja's sandbox reads it: a dict's key, a namespace's attribute; undefined (with a hint) when
/// there is none; throws when `object` is undefined.
[[nodiscard]] Value get_attribute(const Value& object, std::string_view name);
/// object[key]: a list's or str's item (negative from the end), a dict's key; undefined when missing.
[[nodiscard]] Value get_item(const Value& object, const Value& key);
/// object[start:stop:step] with Python's rules (null bounds are nullptr).
[[nodiscard]] Value get_slice(const Value& object, const Value* start, const Value* stop, const Value* step);

/// The items Python iterates over: a list's, a dict's keys, a str's characters, nothing for undefined. Throws for
/// other values.
[[nodiscard]] std::vector<Value> iterate(const Value& value);

/// Python's + - * / // % ** and the comparisons < <= > >=, `in` and ~ (string concatenation).
[[nodiscard]] Value binary_op(std::string_view op, const Value& a, const Value& b);

}  // namespace lazygraph::nn::jinja
