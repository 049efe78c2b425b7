#pragma once
/// \file
/// The values a chat template computes with: Python's as Jinja sees them (None, bool, int, float, str, list, dict,
/// jinja's Undefined, a namespace, a macro or a global function), and how Python prints and compares them. Private
/// to src/nn.
///
/// Lists and dicts are shared and never changed once built (the templates run in transformers' immutable sandbox,
/// where `list.append` is refused); a namespace is shared and changed by `{% set ns.x = ... %}`, as in Jinja. A dict
/// keeps its keys in insertion order, as Python's does, and its keys are strings (JSON objects' are).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace lazygraph::nn::jinja {

struct Value;
struct MacroNode;

/// A name that is not defined, or a missing key or attribute; `name` says which, for the error when it is used.
struct Undefined {
  std::string name;
};
/// Python's None.
struct None {};

/// The items of a dict, in insertion order.
struct DictData {
  std::vector<std::pair<std::string, Value>> items;
  /// The value of `key`, or nullptr.
  [[nodiscard]] const Value* find(std::string_view key) const;
  /// Sets `key` (appended when new).
  void set(std::string key, Value value);
};

/// A macro of the template or one of the environment's functions (raise_exception, strftime_now, namespace, range,
/// dict), called by name.
struct Callable {
  const MacroNode* macro = nullptr;  ///< the macro, or nullptr for a global function
  std::string name;                  ///< the macro's or the function's name
};

using ListPtr = std::shared_ptr<const std::vector<Value>>;
using DictPtr = std::shared_ptr<const DictData>;
/// A namespace(): the one mutable kind of value.
using NamespacePtr = std::shared_ptr<DictData>;

/// One value.
struct Value {
  std::variant<Undefined, None, bool, std::int64_t, double, std::string, ListPtr, DictPtr, NamespacePtr, Callable> v;
  /// For a list: whether Python would hold it as a tuple (a dict's items, `(a, b)`), which prints as "(a, b)".
  bool tuple = false;
  /// For a str: whether Jinja holds it as Markup (what `safe` and `escape` return): `+` with a str that is not
  /// escapes that one's HTML characters, as markupsafe's Markup does even where autoescaping is off.
  bool markup = false;
  /// For a list: whether Jinja would hold it as an iterator (what select, map, items, unique and reverse return),
  /// which is true however empty.
  bool iterator = false;

  Value() = default;
  Value(Undefined u) : v(std::move(u)) {}       // NOLINT(google-explicit-constructor)
  Value(None n) : v(n) {}                       // NOLINT(google-explicit-constructor)
  Value(bool b) : v(b) {}                       // NOLINT(google-explicit-constructor)
  Value(std::int64_t i) : v(i) {}               // NOLINT(google-explicit-constructor)
  Value(double d) : v(d) {}                     // NOLINT(google-explicit-constructor)
  Value(std::string s) : v(std::move(s)) {}     // NOLINT(google-explicit-constructor)
  Value(const char* s) : v(std::string(s)) {}   // NOLINT(google-explicit-constructor)
  Value(std::vector<Value> list);               // NOLINT(google-explicit-constructor)
  Value(DictData dict);                         // NOLINT(google-explicit-constructor)
  Value(NamespacePtr ns) : v(std::move(ns)) {}  // NOLINT(google-explicit-constructor)
  Value(Callable c) : v(std::move(c)) {}        // NOLINT(google-explicit-constructor)

  template <class T>
  [[nodiscard]] bool is() const noexcept {
    return std::holds_alternative<T>(v);
  }
  template <class T>
  [[nodiscard]] const T& as() const {
    return std::get<T>(v);
  }
  [[nodiscard]] bool is_undefined() const noexcept { return is<Undefined>(); }
  [[nodiscard]] bool is_none() const noexcept { return is<None>(); }
  [[nodiscard]] bool is_string() const noexcept { return is<std::string>(); }
  [[nodiscard]] bool is_list() const noexcept { return is<ListPtr>(); }
  [[nodiscard]] bool is_dict() const noexcept { return is<DictPtr>(); }
  /// int or float, not bool (Jinja's `is number` also takes a bool: see builtins).
  [[nodiscard]] bool is_number() const noexcept { return is<std::int64_t>() || is<double>(); }
  [[nodiscard]] const std::vector<Value>& list() const { return *as<ListPtr>(); }
  [[nodiscard]] const DictData& dict() const { return *as<DictPtr>(); }
};

/// A tuple of `items` (a list that prints as "(a, b)").
[[nodiscard]] Value make_tuple(std::vector<Value> items);

/// An iterator over `items` (a list that is always true).
[[nodiscard]] Value make_iterator(std::vector<Value> items);

/// `text` with markupsafe's escapes: & < > " ' as &amp; &lt; &gt; &#34; &#39;.
[[nodiscard]] std::string html_escape(std::string_view text);

/// The name of the value's Python type, for messages: "str", "int", "list", "dict", "undefined", ...
[[nodiscard]] std::string_view type_name(const Value& value) noexcept;

/// Python's truth value: empty strings, lists and dicts, 0, 0.0, None, False and undefined are false; an iterator
/// is true.
[[nodiscard]] bool truthy(const Value& value);

/// Python's ==: 1 == 1.0 and True == 1, lists and dicts item by item, undefined equal only to undefined. Recursion
/// depth is the values' nesting (bounded by the JSON parser and the template's literals).
[[nodiscard]] bool equal(const Value& a, const Value& b);

/// Python's str(): what `{{ value }}` prints. Undefined prints nothing; None, True, 1.0 and lists print as Python
/// does ("None", "True", "1.0", "['a', 1]").
[[nodiscard]] std::string to_str(const Value& value);

/// Python's repr(): strings quoted as Python quotes them, undefined as "Undefined", the rest as to_str.
[[nodiscard]] std::string to_repr(const Value& value);

/// Python's repr() of a float: the shortest text that reads back as the same double, "1.0", "1e+16", "1.5e-05",
/// "inf", "nan".
[[nodiscard]] std::string float_repr(double value);

/// The number of Unicode code points in UTF-8 `text` (Python's len() of a str).
[[nodiscard]] std::size_t code_points(std::string_view text) noexcept;

/// Whether code point `cp` is whitespace to Python's str.isspace() (what str.strip() and str.split() remove).
[[nodiscard]] bool is_py_space(std::uint32_t cp) noexcept;

/// `text` without the whitespace Python's str.strip() removes: at its start when `left`, at its end when `right`.
[[nodiscard]] std::string_view py_strip(std::string_view text, bool left, bool right);

/// The code point of the UTF-8 sequence at `text[i]` and its length in bytes; a byte that starts no valid sequence
/// is returned alone, as code point 0xFFFFFFFF.
[[nodiscard]] std::pair<std::uint32_t, std::size_t> decode_utf8(std::string_view text, std::size_t i) noexcept;

/// UTF-8 `text` split into its code points, each as its UTF-8 bytes (a byte that starts no valid sequence is one
/// item).
[[nodiscard]] std::vector<std::string_view> split_code_points(std::string_view text);

}  // namespace lazygraph::nn::jinja
