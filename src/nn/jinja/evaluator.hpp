#pragma once
/// \file
/// Renders a parsed template with Jinja's semantics in transformers' environment: scopes (a for loop's body and a
/// macro have their own; `set` inside them does not leak out), the `loop` variable, break and continue, macros,
/// undefined values, and Python's printing of values. Private to src/nn.
///
/// Bounded: the output stops at kMaxOutputBytes, loop iterations and macro calls together at the caller's
/// `max_steps`, macro calls nest at most kMaxCallDepth deep and the whole recursion kMaxRenderNesting deep; each
/// bound throws JinjaError at the place it was reached.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "ast.hpp"
#include "value.hpp"

namespace lazygraph::nn::jinja {

/// The most bytes a render may produce: 64 MiB.
inline constexpr std::size_t kMaxOutputBytes = std::size_t{64} << 20U;
/// The deepest nesting of macro calls.
inline constexpr std::size_t kMaxCallDepth = 64;
/// The deepest recursion of a render (bodies, expressions and macro calls together), which bounds its stack.
inline constexpr std::size_t kMaxRenderNesting = 1000;

/// The text of `program` with the variables `variables` (name and value; the environment's global functions are
/// added), taking at most `max_steps` loop iterations and macro calls. Throws JinjaError at the place of the
/// failure, RaisedError for raise_exception.
[[nodiscard]] std::string render(const Program& program, const std::vector<std::pair<std::string, Value>>& variables,
                                 std::size_t max_steps);

}  // namespace lazygraph::nn::jinja
