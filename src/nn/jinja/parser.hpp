#pragma once
/// \file
/// The template's tokens parsed into a Program, with Jinja's grammar and operator precedence, and the whole
/// template checked against the engine's subset: a tag, filter, test, method or function outside it is refused
/// here, by name and place, before anything renders. Private to src/nn.

#include <cstddef>
#include <string>
#include <string_view>

#include "ast.hpp"

namespace lazygraph::nn::jinja {

/// The deepest nesting of blocks and expressions a template may have.
inline constexpr std::size_t kMaxNesting = 100;

/// The Program of template `source` (as read from the file). Throws JinjaError at the place of a syntax error, a
/// construct outside the subset (naming it: "the 'include' tag", "the filter 'wordwrap'"), a block not closed, or
/// nesting deeper than kMaxNesting.
[[nodiscard]] Program parse(std::string_view source);

}  // namespace lazygraph::nn::jinja
