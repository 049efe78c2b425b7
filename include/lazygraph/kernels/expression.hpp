#pragma once
/// \file
/// Fused elementwise expressions: typed expression templates over device spans and scalars, such as
/// `silu(a) * b + 2.0F * c`, that `assign` (assign_op.hpp) turns into ONE generated CUDA kernel.
///
/// Operands: `DeviceSpan<T>` / `DeviceSpan<const T>` of float, half or bfloat16 (read element by element); host
/// numbers (`2.0F`, `3`, `0.5`: passed to the kernel as float *arguments*, so a new value reuses the compiled
/// kernel); `broadcast(span)` of a one-element span (read once per thread from device memory, so a graph replays
/// with whatever the memory holds then: a DeviceScalar is such an operand directly); and expressions.
/// Operations: `+ - * /`, unary `-`, `min`, `max`, `abs`, `exp`, `tanh`, `sqrt`, `rsqrt`, `silu`; comparisons
/// `< <= > >= == !=` giving bool; `!`, `&&`, `||` on bools; `select(cond, x, y)`; `cast<T>(e)` between float, half
/// and bfloat16.
///
/// Types are checked at compile time: every operand has an element type (float, half, bfloat16 or bool); a host
/// number takes the type of the other side (`2.0F * half_span` is half). Mixing two element types, arithmetic on
/// bools, `select` on a condition that is not bool: each is a static_assert naming the rule and the fix.
/// Lengths are checked when the expression is built: two spans of different lengths are a UsageError naming both.
///
/// Values: whatever the nominal element type, every intermediate value is a float in the kernel (half and bfloat16
/// are widened when loaded); only `cast<half>` / `cast<bfloat16>` and the final store round. So `a * b + c` over
/// halves rounds once, not three times. A host number is passed as a float, not rounded to the expression's type.
///
/// An expression holds its spans (sharing their buffers' ownership) and numbers by value; it is cheap to copy.
/// It cannot express reductions, indexing other than element i, or broadcasting of anything but one element.

#include <concepts>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "lazygraph/driver/bfloat16.hpp"
#include "lazygraph/driver/device_span.hpp"
#include "lazygraph/driver/half.hpp"
#include "lazygraph/kernels/kernel_arguments.hpp"  // detail::is_device_span_v

namespace lazygraph {

/// The base of every expression node. It carries nothing; deriving from it makes lazygraph's operators and
/// functions (found by argument-dependent lookup) apply to the node.
struct ExpressionBase {};

/// An expression node: the result of an operator or function of this file on expression operands.
template <class X>
concept Expression = std::derived_from<X, ExpressionBase>;

/// The element types a fused expression reads and writes: float, half and bfloat16 (computed in float).
template <class T>
concept ExpressionElement = std::same_as<T, float> || std::same_as<T, half> || std::same_as<T, bfloat16>;

/// A host number that an expression broadcasts (passed to the kernel as a float argument): any arithmetic type
/// but bool.
template <class X>
concept HostScalar = std::is_arithmetic_v<X> && !std::same_as<X, bool>;

/// What an expression's operators and functions accept: an expression, a DeviceSpan (its element type is checked
/// when used: float, half or bfloat16), a host number, or a type of your own for which `to_expression(x)`, found by
/// argument-dependent lookup, returns an expression (DeviceScalar has one: `broadcast(scalar.cview())`).
template <class X>
concept ExpressionOperand = Expression<X> || detail::is_device_span_v<X> || HostScalar<X> || requires(const X& x) {
  { to_expression(x) } -> Expression;
};

namespace detail {

template <class T>
inline constexpr bool dependent_false_v = false;

/// The element type of a host number in an expression: none of its own, it takes the other operand's.
struct WeakScalar {};

/// How generated device code spells a storage type.
template <class T>
constexpr std::string_view device_type_name() noexcept {
  if constexpr (std::same_as<T, half>) {
    return "lg::half_t";
  } else if constexpr (std::same_as<T, bfloat16>) {
    return "lg::bf16_t";
  } else {
    return "float";
  }
}

/// A subexpression as code: the variable holding its value, its description (for comments and messages), and its
/// precedence in that description (0 for names and calls; higher binds looser).
struct Emitted {
  std::string value;   ///< a parameter or temporary of the generated body function
  std::string text;    ///< e.g. "silu(x0) * x1"
  int precedence = 0;  ///< 1 unary, 2 * /, 3 + -, 4 < <= > >=, 5 == !=, 6 &&, 7 ||
};

/// The generated source of one expression assigned to one output type: everything about it that depends on its
/// structure and element types (never on its spans' addresses or its numbers' values). One per expression type,
/// made once (expression_program).
struct ExpressionProgram {
  std::string source;       ///< the whole CUDA source NVRTC compiles
  std::string kernel_name;  ///< `lg_expr_` and 16 hex digits of a hash of the source's structure
  std::string description;  ///< e.g. "out = silu(x0) * x1 + s2 * x3"
  int vector_width = 4;     ///< elements per thread and step on the 16-byte path
  /// The names of the span and broadcast operands, in the order for_each_span visits them ("x0", "b3").
  std::vector<std::string> span_names;
};

/// Writes an expression's generated source as its nodes visit it (leaves from left to right, which is also the
/// order of the kernel's arguments). Made by expression_program only.
class ExpressionWriter {
 public:
  /// A span read element by element; returns the body parameter ("x3") that holds its element.
  std::string span(std::string_view device_type, std::size_t element_size);
  /// A host number; returns its parameter ("s3").
  std::string scalar();
  /// A one-element span read once; returns the body parameter ("b3") that holds it.
  std::string broadcast(std::string_view device_type);
  /// A temporary `const float tN = expression;` (bool when `is_bool`); returns "tN".
  std::string temp(bool is_bool, std::string_view expression);
  /// The whole program, with `result` (a float value) stored to an output of `out_type`.
  [[nodiscard]] ExpressionProgram finish(const Emitted& result, std::string_view out_type,
                                         std::size_t out_element_size) const;

 private:
  enum class LeafKind { span, scalar, broadcast };
  struct Leaf {
    LeafKind kind;
    std::string device_type;
  };
  std::string leaf_name(char prefix) const;
  std::vector<Leaf> leaves_;
  std::string body_;
  std::size_t smallest_element_ = 4;
  int temps_ = 0;
};

/// The common length of two operands (nullopt for numbers and broadcasts, which have none).
/// \throws UsageError when both have one and they differ, naming both lengths and the operator.
std::optional<std::size_t> common_size(std::optional<std::size_t> a, std::optional<std::size_t> b,
                                       std::string_view operation);
/// \throws UsageError unless `size` is 1 (what broadcast reads).
void check_broadcast_size(std::size_t size);

// ---- Leaves -------------------------------------------------------------------------------------------------

/// A span read element by element.
template <class T>
class SpanLeaf : public ExpressionBase {
  static_assert(ExpressionElement<T>,
                "fused expression: spans in an expression must hold float, half or bfloat16 (computed in float); "
                "this DeviceSpan holds another type");

 public:
  /// The element type (after a type error, a host number's, so that one error gives one message).
  using value_type = std::conditional_t<ExpressionElement<T>, T, WeakScalar>;
  /// Reads `span`.
  explicit SpanLeaf(DeviceSpan<const T> span) : span_(std::move(span)) {}
  /// The span's length.
  [[nodiscard]] std::optional<std::size_t> size() const noexcept { return span_.size(); }
  /// Registers the leaf.
  static Emitted emit(ExpressionWriter& w) {
    std::string v = w.span(device_type_name<T>(), sizeof(T));
    return {v, v, 0};
  }
  /// The kernel argument: the device pointer.
  [[nodiscard]] std::tuple<const T*> params() const noexcept { return {span_.data()}; }
  /// Calls `f(span, false)`.
  template <class F>
  void for_each_span(F&& f) const {
    f(span_, false);
  }

 private:
  DeviceSpan<const T> span_;
};

/// A one-element span, every element's value (read once per thread, when the kernel runs).
template <class T>
class BroadcastLeaf : public ExpressionBase {
  static_assert(ExpressionElement<T>, "broadcast: the span must hold float, half or bfloat16");

 public:
  using value_type = T;  ///< the element type
  /// Reads `span`, which holds one element. \throws UsageError otherwise.
  explicit BroadcastLeaf(DeviceSpan<const T> span) : span_(std::move(span)) { check_broadcast_size(span_.size()); }
  /// No length: it fits any.
  [[nodiscard]] std::optional<std::size_t> size() const noexcept { return std::nullopt; }
  /// Registers the leaf.
  static Emitted emit(ExpressionWriter& w) {
    std::string v = w.broadcast(device_type_name<T>());
    return {v, v, 0};
  }
  /// The kernel argument: the device pointer.
  [[nodiscard]] std::tuple<const T*> params() const noexcept { return {span_.data()}; }
  /// Calls `f(span, true)`.
  template <class F>
  void for_each_span(F&& f) const {
    f(span_, true);
  }

 private:
  DeviceSpan<const T> span_;
};

/// A host number, passed to the kernel as a float argument.
class ScalarLeaf : public ExpressionBase {
 public:
  using value_type = WeakScalar;  ///< takes the other operand's type
  /// Holds `value`.
  explicit ScalarLeaf(float value) noexcept : value_(value) {}
  /// No length: it fits any.
  [[nodiscard]] static std::optional<std::size_t> size() noexcept { return std::nullopt; }
  /// Registers the leaf.
  static Emitted emit(ExpressionWriter& w) {
    std::string v = w.scalar();
    return {v, v, 0};
  }
  /// The kernel argument.
  [[nodiscard]] std::tuple<float> params() const noexcept { return {value_}; }
  /// No spans.
  template <class F>
  void for_each_span(F&& /*f*/) const {}
  /// The value.
  [[nodiscard]] float value() const noexcept { return value_; }

 private:
  float value_;
};

/// `x` as an expression node (see ExpressionOperand).
template <class X>
auto operand(const X& x) {
  if constexpr (Expression<X>) {
    return x;
  } else if constexpr (is_device_span_v<X>) {
    using T = std::remove_const_t<typename X::element_type>;
    return SpanLeaf<T>(DeviceSpan<const T>(x));
  } else if constexpr (HostScalar<X>) {
    return ScalarLeaf(static_cast<float>(x));
  } else {
    return to_expression(x);
  }
}

/// The node type of an operand.
template <class X>
using OperandNode = decltype(operand(std::declval<const X&>()));

// ---- Element types of results -------------------------------------------------------------------------------

/// The type of an arithmetic result (+ - * / min max, and the branches of select): both sides of one element type,
/// or one a host number.
template <class A, class B>
struct ArithmeticResult {
  static_assert(!std::same_as<A, bool> && !std::same_as<B, bool>,
                "fused expression: arithmetic (+ - * / min max, unary functions) on a bool expression; turn it into "
                "numbers with select(cond, x, y) or cast<T>(cond)");
  static_assert(std::same_as<A, B> || std::same_as<A, WeakScalar> || std::same_as<B, WeakScalar>,
                "fused expression: the two operands have different element types (e.g. half and float); convert one "
                "with cast<T>(e) so that both have the same");
  /// The result's element type (after a type error, a host number's, so that one error gives one message).
  using type = std::conditional_t<std::same_as<A, bool> || std::same_as<B, bool>, WeakScalar,
                                  std::conditional_t<std::same_as<A, WeakScalar>, B, A>>;
};

/// The type of a comparison: bool, after checking the operands as ArithmeticResult does (== and != also compare two
/// bools).
template <class A, class B, bool equality>
struct ComparisonResult {
  static_assert(equality || (!std::same_as<A, bool> && !std::same_as<B, bool>),
                "fused expression: < <= > >= order numbers, not bool expressions");
  static_assert(std::same_as<A, B> || std::same_as<A, WeakScalar> || std::same_as<B, WeakScalar>,
                "fused expression: the two operands have different element types (e.g. half and float); convert one "
                "with cast<T>(e) so that both have the same");
  static_assert(!std::same_as<A, WeakScalar> || !std::same_as<B, bool>,
                "fused expression: a bool expression compared with a number; compare bools with bools");
  static_assert(!std::same_as<B, WeakScalar> || !std::same_as<A, bool>,
                "fused expression: a bool expression compared with a number; compare bools with bools");
  /// bool.
  using type = bool;
};

/// The type of `!`, `&&`, `||`: bool operands only.
template <class A, class B>
struct LogicalResult {
  static_assert(std::same_as<A, bool> && std::same_as<B, bool>,
                "fused expression: ! && || combine bool expressions (comparisons), not numbers");
  /// bool.
  using type = bool;
};

// ---- Operations -------------------------------------------------------------------------------------------------

/// The operation kinds, which choose how the result's type is found.
enum class OperationKind { arithmetic, ordering, equality, logical };

/// One binary operation: its C++ spelling, how it is written in the generated code, its precedence.
struct BinarySpelling {
  std::string_view symbol;  ///< "+", or the function name for a call ("min")
  std::string_view device;  ///< "+", or the device function ("fminf")
  int precedence;           ///< 0 for a call
  OperationKind kind;       ///< which result rule applies
};

/// Binary operation tags.
struct AddOp {
  static constexpr BinarySpelling spelling{"+", "+", 3, OperationKind::arithmetic};  ///< a + b
};
/// a - b
struct SubOp {
  static constexpr BinarySpelling spelling{"-", "-", 3, OperationKind::arithmetic};  ///< a - b
};
/// a * b
struct MulOp {
  static constexpr BinarySpelling spelling{"*", "*", 2, OperationKind::arithmetic};  ///< a * b
};
/// a / b
struct DivOp {
  static constexpr BinarySpelling spelling{"/", "/", 2, OperationKind::arithmetic};  ///< a / b
};
/// min(a, b)
struct MinOp {
  static constexpr BinarySpelling spelling{"min", "fminf", 0, OperationKind::arithmetic};  ///< fminf
};
/// max(a, b)
struct MaxOp {
  static constexpr BinarySpelling spelling{"max", "fmaxf", 0, OperationKind::arithmetic};  ///< fmaxf
};
/// a < b
struct LessOp {
  static constexpr BinarySpelling spelling{"<", "<", 4, OperationKind::ordering};  ///< a < b
};
/// a <= b
struct LessEqualOp {
  static constexpr BinarySpelling spelling{"<=", "<=", 4, OperationKind::ordering};  ///< a <= b
};
/// a > b
struct GreaterOp {
  static constexpr BinarySpelling spelling{">", ">", 4, OperationKind::ordering};  ///< a > b
};
/// a >= b
struct GreaterEqualOp {
  static constexpr BinarySpelling spelling{">=", ">=", 4, OperationKind::ordering};  ///< a >= b
};
/// a == b
struct EqualOp {
  static constexpr BinarySpelling spelling{"==", "==", 5, OperationKind::equality};  ///< a == b
};
/// a != b
struct NotEqualOp {
  static constexpr BinarySpelling spelling{"!=", "!=", 5, OperationKind::equality};  ///< a != b
};
/// a && b
struct AndOp {
  static constexpr BinarySpelling spelling{"&&", "&&", 6, OperationKind::logical};  ///< a && b
};
/// a || b
struct OrOp {
  static constexpr BinarySpelling spelling{"||", "||", 7, OperationKind::logical};  ///< a || b
};

/// The element type of `Op` applied to operands of types A and B (static_asserts on a type error).
template <class Op, class A, class B>
auto binary_result() {
  constexpr OperationKind kind = Op::spelling.kind;
  if constexpr (kind == OperationKind::arithmetic) {
    return std::type_identity<typename ArithmeticResult<A, B>::type>{};
  } else if constexpr (kind == OperationKind::logical) {
    return std::type_identity<typename LogicalResult<A, B>::type>{};
  } else {
    return std::type_identity<typename ComparisonResult<A, B, kind == OperationKind::equality>::type>{};
  }
}

/// `Op` applied to two expressions.
template <class Op, class A, class B>
class BinaryNode : public ExpressionBase {
 public:
  /// The result's element type.
  using value_type = typename decltype(binary_result<Op, typename A::value_type, typename B::value_type>())::type;
  /// \throws UsageError when both have lengths and they differ.
  BinaryNode(A a, B b) : a_(std::move(a)), b_(std::move(b)), size_(common_size(a_.size(), b_.size(), name())) {}
  /// The common length of the spans below, if any.
  [[nodiscard]] std::optional<std::size_t> size() const noexcept { return size_; }
  /// Writes the operation.
  static Emitted emit(ExpressionWriter& w) {
    const Emitted a = A::emit(w);
    const Emitted b = B::emit(w);
    constexpr BinarySpelling s = Op::spelling;
    constexpr bool is_bool = std::same_as<value_type, bool>;
    if constexpr (s.precedence == 0) {
      return {w.temp(is_bool, std::string(s.device) + "(" + a.value + ", " + b.value + ")"),
              std::string(s.symbol) + "(" + a.text + ", " + b.text + ")", 0};
    } else {
      // Left-associative: a left operand of the same precedence needs no parentheses, a right one does.
      const std::string left = a.precedence > s.precedence ? "(" + a.text + ")" : a.text;
      const std::string right = b.precedence >= s.precedence && b.precedence != 0 ? "(" + b.text + ")" : b.text;
      return {w.temp(is_bool, a.value + " " + std::string(s.device) + " " + b.value),
              left + " " + std::string(s.symbol) + " " + right, s.precedence};
    }
  }
  /// The operands' kernel arguments, left then right.
  [[nodiscard]] auto params() const { return std::tuple_cat(a_.params(), b_.params()); }
  /// Visits the operands' spans, left then right.
  template <class F>
  void for_each_span(F&& f) const {
    a_.for_each_span(f);
    b_.for_each_span(f);
  }

 private:
  static std::string name() { return "`" + std::string(Op::spelling.symbol) + "`"; }
  A a_;
  B b_;
  std::optional<std::size_t> size_;
};

/// One unary operation: its name, its device spelling, whether it takes bools (`!`) or numbers.
struct UnarySpelling {
  std::string_view symbol;  ///< "-", "!" or the function name ("exp")
  std::string_view device;  ///< "-", "!" or the device function ("expf")
  bool is_prefix;           ///< an operator (written "-x"), not a call
  bool logical;             ///< takes and gives bool (`!`)
};

/// -a
struct NegateOp {
  static constexpr UnarySpelling spelling{"-", "-", true, false};  ///< -a
};
/// !a
struct NotOp {
  static constexpr UnarySpelling spelling{"!", "!", true, true};  ///< !a
};
/// exp(a)
struct ExpOp {
  static constexpr UnarySpelling spelling{"exp", "expf", false, false};  ///< expf
};
/// tanh(a)
struct TanhOp {
  static constexpr UnarySpelling spelling{"tanh", "tanhf", false, false};  ///< tanhf
};
/// sqrt(a)
struct SqrtOp {
  static constexpr UnarySpelling spelling{"sqrt", "sqrtf", false, false};  ///< sqrtf
};
/// rsqrt(a) = 1 / sqrt(a)
struct RsqrtOp {
  static constexpr UnarySpelling spelling{"rsqrt", "rsqrtf", false, false};  ///< rsqrtf
};
/// silu(a) = a / (1 + exp(-a))
struct SiluOp {
  static constexpr UnarySpelling spelling{"silu", "lg::expr::silu", false, false};  ///< lg::expr::silu
};
/// abs(a)
struct AbsOp {
  static constexpr UnarySpelling spelling{"abs", "fabsf", false, false};  ///< fabsf
};

/// `Op` applied to one expression.
template <class Op, class A>
class UnaryNode : public ExpressionBase {
  static constexpr bool logical = Op::spelling.logical;
  using operand_type = typename A::value_type;
  static_assert(!logical || std::same_as<operand_type, bool>,
                "fused expression: ! negates a bool expression (a comparison), not a number");
  static_assert(logical || !std::same_as<operand_type, bool>,
                "fused expression: arithmetic (+ - * / min max, unary functions) on a bool expression; turn it into "
                "numbers with select(cond, x, y) or cast<T>(cond)");

 public:
  /// The operand's element type (after a type error, a host number's, so that one error gives one message).
  using value_type = std::conditional_t<logical == std::same_as<operand_type, bool>, operand_type, WeakScalar>;
  /// Applies the operation to `a`.
  explicit UnaryNode(A a) : a_(std::move(a)) {}
  /// The operand's length, if any.
  [[nodiscard]] std::optional<std::size_t> size() const noexcept { return a_.size(); }
  /// Writes the operation.
  static Emitted emit(ExpressionWriter& w) {
    const Emitted a = A::emit(w);
    constexpr UnarySpelling s = Op::spelling;
    if constexpr (s.is_prefix) {
      const std::string operand = a.precedence > 1 ? "(" + a.text + ")" : a.text;
      return {w.temp(logical, std::string(s.device) + a.value), std::string(s.symbol) + operand, 1};
    } else {
      return {w.temp(logical, std::string(s.device) + "(" + a.value + ")"), std::string(s.symbol) + "(" + a.text + ")",
              0};
    }
  }
  /// The operand's kernel arguments.
  [[nodiscard]] auto params() const { return a_.params(); }
  /// Visits the operand's spans.
  template <class F>
  void for_each_span(F&& f) const {
    a_.for_each_span(f);
  }

 private:
  A a_;
};

/// select(cond, x, y): x where cond holds, else y.
template <class C, class X, class Y>
class SelectNode : public ExpressionBase {
  static_assert(std::same_as<typename C::value_type, bool>,
                "select(cond, x, y): the condition must be a bool expression (a comparison such as a < b, or ! && || "
                "of comparisons), not a number");

 public:
  /// The branches' common element type.
  using value_type = typename ArithmeticResult<typename X::value_type, typename Y::value_type>::type;
  /// \throws UsageError when two of the three have lengths that differ.
  SelectNode(C c, X x, Y y)
      : c_(std::move(c)),
        x_(std::move(x)),
        y_(std::move(y)),
        size_(common_size(common_size(c_.size(), x_.size(), "select"), y_.size(), "select")) {}
  /// The common length of the spans below, if any.
  [[nodiscard]] std::optional<std::size_t> size() const noexcept { return size_; }
  /// Writes the choice.
  static Emitted emit(ExpressionWriter& w) {
    const Emitted c = C::emit(w);
    const Emitted x = X::emit(w);
    const Emitted y = Y::emit(w);
    return {w.temp(false, c.value + " ? " + x.value + " : " + y.value),
            "select(" + c.text + ", " + x.text + ", " + y.text + ")", 0};
  }
  /// The operands' kernel arguments: condition, then x, then y.
  [[nodiscard]] auto params() const { return std::tuple_cat(c_.params(), x_.params(), y_.params()); }
  /// Visits the operands' spans: condition, then x, then y.
  template <class F>
  void for_each_span(F&& f) const {
    c_.for_each_span(f);
    x_.for_each_span(f);
    y_.for_each_span(f);
  }

 private:
  C c_;
  X x_;
  Y y_;
  std::optional<std::size_t> size_;
};

/// cast<T>(a): `a` rounded to T (a bool becomes 1 or 0).
template <class T, class A>
class CastNode : public ExpressionBase {
  static_assert(ExpressionElement<T>, "cast<T>(e): T must be float, half or bfloat16");

 public:
  /// T.
  using value_type = T;
  /// Converts `a`.
  explicit CastNode(A a) : a_(std::move(a)) {}
  /// The operand's length, if any.
  [[nodiscard]] std::optional<std::size_t> size() const noexcept { return a_.size(); }
  /// Writes the conversion.
  static Emitted emit(ExpressionWriter& w) {
    const Emitted a = A::emit(w);
    const std::string text = "cast<" + std::string(name()) + ">(" + a.text + ")";
    std::string value = a.value;
    if constexpr (std::same_as<typename A::value_type, bool>) value = w.temp(false, a.value + " ? 1.0f : 0.0f");
    if constexpr (std::same_as<T, half>) {
      return {w.temp(false, "lg::expr::round_half(" + value + ")"), text, 0};
    } else if constexpr (std::same_as<T, bfloat16>) {
      return {w.temp(false, "lg::expr::round_bf16(" + value + ")"), text, 0};
    } else {
      return {value, text, 0};  // every value is a float already
    }
  }
  /// The operand's kernel arguments.
  [[nodiscard]] auto params() const { return a_.params(); }
  /// Visits the operand's spans.
  template <class F>
  void for_each_span(F&& f) const {
    a_.for_each_span(f);
  }

 private:
  static constexpr std::string_view name() {
    if constexpr (std::same_as<T, half>) {
      return "half";
    } else if constexpr (std::same_as<T, bfloat16>) {
      return "bfloat16";
    } else {
      return "float";
    }
  }
  A a_;
};

template <class Op, class L, class R>
auto binary(const L& l, const R& r) {
  return BinaryNode<Op, OperandNode<L>, OperandNode<R>>(operand(l), operand(r));
}

template <class Op, class X>
auto unary(const X& x) {
  return UnaryNode<Op, OperandNode<X>>(operand(x));
}

/// Both operands are expression operands and at least one is not a host number.
template <class L, class R>
concept BinaryOperands = ExpressionOperand<L> && ExpressionOperand<R> &&(!HostScalar<L> || !HostScalar<R>);

/// An expression operand that is not a host number (what the functions of one operand take).
template <class X>
concept NonScalarOperand = ExpressionOperand<X> && !HostScalar<X>;

}  // namespace detail

// ---- Operators and functions ----------------------------------------------------------------------------------

/// Element-wise sum.
template <class L, class R>
requires detail::BinaryOperands<L, R>
[[nodiscard]] auto operator+(const L& l, const R& r) { return detail::binary<detail::AddOp>(l, r); }
/// Element-wise difference.
template <class L, class R>
requires detail::BinaryOperands<L, R>
[[nodiscard]] auto operator-(const L& l, const R& r) { return detail::binary<detail::SubOp>(l, r); }
/// Element-wise product.
template <class L, class R>
requires detail::BinaryOperands<L, R>
[[nodiscard]] auto operator*(const L& l, const R& r) { return detail::binary<detail::MulOp>(l, r); }
/// Element-wise quotient.
template <class L, class R>
requires detail::BinaryOperands<L, R>
[[nodiscard]] auto operator/(const L& l, const R& r) { return detail::binary<detail::DivOp>(l, r); }
/// Element-wise a < b, a bool expression.
template <class L, class R>
requires detail::BinaryOperands<L, R>
[[nodiscard]] auto operator<(const L& l, const R& r) { return detail::binary<detail::LessOp>(l, r); }
/// Element-wise a <= b, a bool expression.
template <class L, class R>
requires detail::BinaryOperands<L, R>
[[nodiscard]] auto operator<=(const L& l, const R& r) { return detail::binary<detail::LessEqualOp>(l, r); }
/// Element-wise a > b, a bool expression.
template <class L, class R>
requires detail::BinaryOperands<L, R>
[[nodiscard]] auto operator>(const L& l, const R& r) { return detail::binary<detail::GreaterOp>(l, r); }
/// Element-wise a >= b, a bool expression.
template <class L, class R>
requires detail::BinaryOperands<L, R>
[[nodiscard]] auto operator>=(const L& l, const R& r) { return detail::binary<detail::GreaterEqualOp>(l, r); }
/// Element-wise a == b, a bool expression (not a comparison of the spans themselves).
template <class L, class R>
requires detail::BinaryOperands<L, R>
[[nodiscard]] auto operator==(const L& l, const R& r) { return detail::binary<detail::EqualOp>(l, r); }
/// Element-wise a != b, a bool expression.
template <class L, class R>
requires detail::BinaryOperands<L, R>
[[nodiscard]] auto operator!=(const L& l, const R& r) { return detail::binary<detail::NotEqualOp>(l, r); }
/// Element-wise a && b of two bool expressions (both sides are always computed).
template <class L, class R>
requires Expression<L> && Expression<R>
[[nodiscard]] auto operator&&(const L& l, const R& r) { return detail::binary<detail::AndOp>(l, r); }
/// Element-wise a || b of two bool expressions (both sides are always computed).
template <class L, class R>
requires Expression<L> && Expression<R>
[[nodiscard]] auto operator||(const L& l, const R& r) { return detail::binary<detail::OrOp>(l, r); }
/// Element-wise negation.
template <class X>
requires detail::NonScalarOperand<X>
[[nodiscard]] auto operator-(const X& x) { return detail::unary<detail::NegateOp>(x); }
/// Element-wise logical not of a bool expression.
template <class X>
requires detail::NonScalarOperand<X>
[[nodiscard]] auto operator!(const X& x) { return detail::unary<detail::NotOp>(x); }

/// Element-wise minimum (fminf: a NaN operand gives the other).
template <class L, class R>
requires detail::BinaryOperands<L, R>
[[nodiscard]] auto min(const L& l, const R& r) { return detail::binary<detail::MinOp>(l, r); }
/// Element-wise maximum (fmaxf: a NaN operand gives the other).
template <class L, class R>
requires detail::BinaryOperands<L, R>
[[nodiscard]] auto max(const L& l, const R& r) { return detail::binary<detail::MaxOp>(l, r); }
/// Element-wise e^x (expf).
template <class X>
requires detail::NonScalarOperand<X>
[[nodiscard]] auto exp(const X& x) { return detail::unary<detail::ExpOp>(x); }
/// Element-wise tanh (tanhf).
template <class X>
requires detail::NonScalarOperand<X>
[[nodiscard]] auto tanh(const X& x) { return detail::unary<detail::TanhOp>(x); }
/// Element-wise square root (sqrtf).
template <class X>
requires detail::NonScalarOperand<X>
[[nodiscard]] auto sqrt(const X& x) { return detail::unary<detail::SqrtOp>(x); }
/// Element-wise 1 / sqrt(x) (rsqrtf: a few ulp from the exact value).
template <class X>
requires detail::NonScalarOperand<X>
[[nodiscard]] auto rsqrt(const X& x) { return detail::unary<detail::RsqrtOp>(x); }
/// Element-wise x / (1 + e^-x), SwiGLU's gate.
template <class X>
requires detail::NonScalarOperand<X>
[[nodiscard]] auto silu(const X& x) { return detail::unary<detail::SiluOp>(x); }
/// Element-wise |x|.
template <class X>
requires detail::NonScalarOperand<X>
[[nodiscard]] auto abs(const X& x) { return detail::unary<detail::AbsOp>(x); }

/// Element-wise `cond ? x : y`: `cond` a bool expression, `x` and `y` of one element type (or host numbers). Both
/// branches are computed for every element.
template <class C, class X, class Y>
requires ExpressionOperand<C> && ExpressionOperand<X> && ExpressionOperand<Y>
[[nodiscard]] auto select(const C& cond, const X& x, const Y& y) {
  return detail::SelectNode<detail::OperandNode<C>, detail::OperandNode<X>, detail::OperandNode<Y>>(
      detail::operand(cond), detail::operand(x), detail::operand(y));
}

/// `x` converted to T (float, half or bfloat16): rounded to T's precision (to nearest even), then computed on as
/// a float of that value; a bool becomes 1 or 0. `cast<float>` only changes the element type.
template <class T, class X>
requires ExpressionOperand<X>
[[nodiscard]] auto cast(const X& x) { return detail::CastNode<T, detail::OperandNode<X>>(detail::operand(x)); }

/// The one element of `span` as an operand that fits any length: read from device memory when the kernel runs
/// (so a graph replay sees the value the memory holds then).
/// \throws UsageError unless `span` holds exactly one element.
template <class T>
[[nodiscard]] auto broadcast(const DeviceSpan<T>& span) {
  using U = std::remove_const_t<T>;
  return detail::BroadcastLeaf<U>(DeviceSpan<const U>(span));
}

}  // namespace lazygraph
