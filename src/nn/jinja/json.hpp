#pragma once
/// \file
/// JSON in and out of the template engine: the inputs (messages, tools, extra variables) read into Values with
/// their keys in the order of the text, as Python's json.loads keeps them, and the `tojson` filter as transformers
/// defines it (Python's json.dumps with ensure_ascii=False). Private to src/nn.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "value.hpp"

namespace lazygraph::nn::jinja {

/// The deepest nesting of arrays and objects an input may have.
inline constexpr std::size_t kMaxInputDepth = 64;
/// The most JSON values an input may hold (each array, object, string, number, boolean and null counts one).
inline constexpr std::size_t kMaxInputValues = std::size_t{1} << 22U;

/// The value of JSON `text`. Throws JinjaError (without a place) naming `what` ("the messages") when the text is
/// not JSON, holds a NUL byte, nests deeper than kMaxInputDepth, holds more than kMaxInputValues values, repeats a
/// key in one object, or has an integer outside int64.
[[nodiscard]] Value parse_json(std::string_view text, std::string_view what);

/// How json.dumps writes: transformers' tojson(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False).
struct JsonStyle {
  std::optional<std::string> indent;  ///< the text of one level of indent; nullopt: all on one line
  std::string item_separator = ", ";  ///< between items (json.dumps' default is "," when indent is given)
  std::string key_separator = ": ";   ///< between a key and its value
  bool sort_keys = false;             ///< dict keys sorted (by code point, as Python sorts str)
};

/// json.dumps(value) in `style`. Throws JinjaError (without a place) for a value JSON cannot hold (undefined, a
/// namespace, a function), as json.dumps raises TypeError.
[[nodiscard]] std::string to_json(const Value& value, const JsonStyle& style);

}  // namespace lazygraph::nn::jinja
