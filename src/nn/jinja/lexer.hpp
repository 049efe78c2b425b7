#pragma once
/// \file
/// The template's text split into tokens, as Jinja's lexer splits it in transformers' environment
/// (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False): text between tags, the `{{ }}` and
/// `{% %}` tags with the names, literals and operators inside them; comments dropped; whitespace control (`{%-`,
/// `-%}`, `{{-`, `-}}`, `{%+`, `+%}`) applied to the text around. Private to src/nn.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "error.hpp"

namespace lazygraph::nn::jinja {

/// One token.
struct Token {
  enum class Kind {
    text,
    variable_begin,
    variable_end,
    block_begin,
    block_end,
    name,
    string,
    integer,
    floating,
    op,
    end
  };
  Kind kind = Kind::end;
  std::string text;  ///< the text, the name, the string literal's value or the operator
  std::int64_t integer = 0;
  double floating = 0;
  std::size_t offset = 0;  ///< where it starts in the source
};

/// The template source's lines, to turn an offset into a line and column.
class SourceMap {
 public:
  explicit SourceMap(std::string_view source);
  [[nodiscard]] Place place(std::size_t offset) const;

 private:
  std::vector<std::size_t> line_starts_;
};

/// The tokens of `source` (newlines already normalized to "\n"), ending with one of kind `end`. Throws JinjaError
/// at the place of a tag, comment or string that is not closed, or a character no token starts with.
[[nodiscard]] std::vector<Token> tokenize(std::string_view source, const SourceMap& map);

/// `source` as Jinja reads it: "\r\n" and "\r" become "\n", and one newline at the end is dropped.
[[nodiscard]] std::string normalize_newlines(std::string_view source);

}  // namespace lazygraph::nn::jinja
