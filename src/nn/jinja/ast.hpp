#pragma once
/// \file
/// The parsed template: expressions and statements of the subset the engine runs. Built by parse() (parser.hpp),
/// read by render() (evaluator.hpp). Private to src/nn.

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "value.hpp"

namespace lazygraph::nn::jinja {

/// One expression.
struct Expr {
  enum class Kind {
    literal,      ///< `value`
    name,         ///< the variable `name`
    list,         ///< [args...]; a tuple `(a, b)` when `negated` is set
    dict,         ///< {keys[i]: args[i]}; keys are expressions in `args` at even positions, values at odd ones
    attr,         ///< args[0].name
    item,         ///< args[0][args[1]]
    slice,        ///< args[0][args[1]:args[2]:args[3]], each bound may be null
    call,         ///< args[0](args[1:], kwargs)
    filter,       ///< args[0] | name(args[1:], kwargs)
    test,         ///< args[0] is [not] name(args[1:]); `negated` for "is not"
    logical_not,  ///< not args[0]
    negate,       ///< -args[0]
    plus,         ///< +args[0]
    binary,       ///< args[0] name args[1]: + - * / // % ** ~ == != < <= > >= in "not in" and or
    condition,    ///< args[1] if args[0] else args[2] (args[2] may be null: undefined)
  };
  Kind kind = Kind::literal;
  std::size_t offset = 0;  ///< where it starts in the source
  Value value;             ///< literal
  std::string name;        ///< name, attribute, filter, test or operator
  bool negated = false;    ///< test: "is not"; list: a tuple
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
};

using ExprPtr = std::unique_ptr<Expr>;
struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

/// A macro: {% macro name(params, with=defaults) %}body{% endmacro %}.
struct MacroNode {
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  ///< each with its default, or null
  Body body;
};

/// One statement.
struct Node {
  enum class Kind {
    text,       ///< `text`
    output,     ///< {{ expr }}
    for_loop,   ///< {% for targets in expr if filter %}body{% else %}else_body{% endfor %}
    if_chain,   ///< {% if %}/{% elif %}...: branches; {% else %}: else_body
    set,        ///< {% set targets = expr %}, or {% set targets[0].attribute = expr %} when attribute is not empty
    set_block,  ///< {% set targets[0] %}body{% endset %}
    macro,      ///< {% macro %}: macro
    break_loop,
    continue_loop,
    scope,  ///< a body that renders in place ({% generation %})
  };
  Kind kind = Kind::text;
  std::size_t offset = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attribute;
  Body body;
  Body else_body;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::unique_ptr<MacroNode> macro;
};

/// A whole template.
struct Program {
  std::string source;  ///< as read (newlines normalized)
  Body body;
};

}  // namespace lazygraph::nn::jinja
