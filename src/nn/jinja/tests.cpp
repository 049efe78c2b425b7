// Jinja's tests (`value is name`) that chat templates use (builtins.hpp).
#include <array>
#include <cstdint>
#include <string>

#include "builtins.hpp"
#include "error.hpp"
#include "text_case.hpp"

namespace lazygraph::nn::jinja {

namespace {

constexpr std::array<std::string_view, 28> kTests = {
    "defined", "undefined",   "none",  "string",  "mapping",  "iterable", "sequence", "number", "integer", "float",
    "boolean", "true",        "false", "equalto", "eq",       "==",       "ne",       "!=",     "in",      "odd",
    "even",    "divisibleby", "lower", "upper",   "callable", "sameas",   "gt",       "lt"};

std::int64_t integer_operand(const Value& value, std::string_view test) {
  if (value.is<std::int64_t>()) return value.as<std::int64_t>();
  if (value.is<bool>()) return value.as<bool>() ? 1 : 0;
  if (value.is_undefined()) fail_undefined(value);
  throw JinjaError({}, "the test '" + std::string(test) + "' needs an integer, not " + std::string(type_name(value)));
}

}  // namespace

bool is_test(std::string_view name) noexcept {
  for (const std::string_view t : kTests) {
    if (t == name) return true;
  }
  return name == "ge" || name == "le";
}

bool apply_test(std::string_view name, const Value& value, const Args& args) {
  const auto arg = [&](std::string_view param) {
    args.expect(1, {param}, name);
    Value other = args.get(0, param, Undefined{}, name);
    if (args.positional.empty() && args.keyword.empty()) {
      throw JinjaError({}, "the test '" + std::string(name) + "' needs an argument");
    }
    return other;
  };
  if (name == "defined") return !value.is_undefined();
  if (name == "undefined") return value.is_undefined();
  if (name == "none") return value.is_none();
  if (name == "string") return value.is_string();
  if (name == "mapping") return value.is_dict();
  // Jinja's Undefined iterates (as empty) and has a length, so both tests take it.
  if (name == "iterable") return value.is_string() || value.is_list() || value.is_dict() || value.is_undefined();
  if (name == "sequence") return value.is_string() || value.is_list() || value.is_dict() || value.is_undefined();
  if (name == "number") return value.is_number() || value.is<bool>();  // Python's bool is a Number
  if (name == "integer") return value.is<std::int64_t>();
  if (name == "float") return value.is<double>();
  if (name == "boolean") return value.is<bool>();
  if (name == "true") return value.is<bool>() && value.as<bool>();
  if (name == "false") return value.is<bool>() && !value.as<bool>();
  if (name == "callable") return value.is<Callable>();
  if (name == "equalto" || name == "eq" || name == "==") return equal(value, arg("other"));
  if (name == "ne" || name == "!=") return !equal(value, arg("other"));
  if (name == "sameas") {
    const Value other = arg("other");
    // Python's `is`: the singletons None, True, False and small ints compare by value here.
    return value.v.index() == other.v.index() && equal(value, other) && !value.is_list() && !value.is_dict();
  }
  if (name == "in") return binary_op("in", value, arg("seq")).as<bool>();
  if (name == "gt") return binary_op(">", value, arg("other")).as<bool>();
  if (name == "lt") return binary_op("<", value, arg("other")).as<bool>();
  if (name == "ge") return binary_op(">=", value, arg("other")).as<bool>();
  if (name == "le") return binary_op("<=", value, arg("other")).as<bool>();
  if (name == "odd" || name == "even") {  // value % 2 == 1 (or == 0), floats included
    if (value.is_undefined()) fail_undefined(value);
    if (!value.is_number() && !value.is<bool>()) {
      throw JinjaError({}, "the test '" + std::string(name) + "' needs a number, not " + std::string(type_name(value)));
    }
    return equal(binary_op("%", value, std::int64_t{2}), std::int64_t{name == "odd" ? 1 : 0});
  }
  if (name == "divisibleby") {
    const std::int64_t divisor = integer_operand(arg("num"), name);
    if (divisor == 0) throw JinjaError({}, "integer division or modulo by zero");
    return integer_operand(value, name) % divisor == 0;
  }
  if (name == "lower" || name == "upper") return all_cased(to_str(value), name == "lower");
  throw JinjaError({}, "no test named '" + std::string(name) + "'");
}

}  // namespace lazygraph::nn::jinja
