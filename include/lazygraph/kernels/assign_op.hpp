#pragma once
/// \file
/// `assign(out, expression)`: a fused elementwise expression (expression.hpp) as ONE kernel launch, a GraphNode.
///
///     auto op = lg::assign(out.view(), silu(a.cview()) * b.cview() + 2.0F * c.cview());
///     op.prepare(device);             // optional: compile now (needed before CudaGraph::scope / capture)
///     op.sync_on(stream);             // or s.record(op), CudaGraph::build(device, op), ...
///     std::puts(op.source().c_str()); // the generated CUDA source
///
/// Each distinct expression (its structure and element types, and the output's type) is generated into one CUDA
/// source and compiled by NVRTC once per process and device: in memory (`expression_cache_stats`), and on disk
/// through the KernelCache that KernelLibrary uses (same key: source, core headers, options, NVRTC version).
/// Spans' addresses, lengths and host numbers are kernel arguments, so a new value, buffer or length reuses the
/// kernel.
///
/// Building the op never touches the GPU. The kernel is compiled and loaded on the first `prepare(device)` or
/// execution on that device. Loading a module during a stream capture is forbidden (it breaks the capture), so an
/// op whose kernel is not loaded yet cannot be first executed inside `CudaGraph::scope` / `capture`: that throws
/// CaptureError asking for `prepare(device)` first. `CudaGraph::build` records without capturing, so there the
/// first execution compiles.
///
/// The kernel computes in float, moves 16 bytes per access when every span (and the output) is 16-byte aligned
/// (else one element at a time), with one block of 256 threads per 256 such accesses: a grid as large as the work,
/// so that the hardware keeps every multiprocessor full to the end (on the H100 a grid of one wave, looping, reached
/// 0.87 of the copy ceiling on 16M floats, this one reached a copy's 0.93). `with_max_blocks` caps it; the kernel
/// then loops over the rest. It may be launched early (`with_early_launch`): it waits for the work before it
/// before reading anything.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "lazygraph/detail/kernels/kernel_info.hpp"
#include "lazygraph/driver/device.hpp"
#include "lazygraph/kernels/expression.hpp"
#include "lazygraph/kernels/kernel_cache.hpp"
#include "lazygraph/kernels/launch_config.hpp"
#include "lazygraph/ops/access.hpp"
#include "lazygraph/ops/concepts.hpp"
#include "lazygraph/ops/exec_context.hpp"

namespace lazygraph {

/// What the in-memory cache of fused-expression kernels has done in this process (all devices together).
struct ExpressionCacheStats {
  std::size_t compiled = 0;     ///< kernels compiled by NVRTC
  std::size_t disk_hits = 0;    ///< kernels loaded from the disk cache instead
  std::size_t memory_hits = 0;  ///< lookups that found the kernel already loaded (no compile, no load)
  std::size_t loaded = 0;       ///< kernels held now (one per expression and device)
  double compile_ms = 0;        ///< wall time spent generating, compiling and loading (misses only)
};

/// The counts so far. Thread-safe.
[[nodiscard]] ExpressionCacheStats expression_cache_stats();

/// Forgets every loaded fused-expression kernel: the next use of each loads it from the disk cache or compiles it
/// again. Ops already executed and graphs that recorded them keep the kernels they use. Thread-safe; for tests and
/// benchmarks (measuring a first use) more than for programs.
void clear_expression_cache();

namespace detail {

/// The generated program of expression type E assigned to an output of T, generated on first use (thread-safe).
template <class T, class E>
const ExpressionProgram& expression_program() {
  static const ExpressionProgram program = [] {
    ExpressionWriter w;
    const Emitted result = E::emit(w);
    return w.finish(result, device_type_name<T>(), sizeof(T));
  }();
  return program;
}

/// A loaded expression kernel.
struct ExpressionKernel {
  std::shared_ptr<KernelInfo> info;  ///< the function, its module and limits
};

/// The kernel of `program`, compiled (or loaded from the disk cache) and loaded on `device` the first time, from
/// memory afterwards. Thread-safe: one thread compiles, others asking for the same kernel wait for it.
/// \throws CaptureError when it is not loaded yet and a capture forbids loading it now (naming prepare);
///         CompileError with the generated source and NVRTC's log when NVRTC rejects it; UsageError when NVRTC
///         supports no architecture at or below the device's; CudaError when the driver refuses it.
ExpressionKernel expression_kernel(const ExpressionProgram& program, const Device& device);

/// Compiles `program` with NVRTC (the core kernel headers available, `options` from nvrtc_options) into a CUBIN
/// (`cubin`) or PTX image. Touches no GPU.
/// \throws CompileError whose message holds NVRTC's log and the whole generated source; NvrtcError when NVRTC
///         itself fails.
KernelCache::Entry compile_expression(const ExpressionProgram& program, std::span<const std::string> options,
                                      bool cubin);

/// The launch shape of an expression kernel over `n` elements: blocks of 256 threads, one per 256 vectors of
/// `vector_width` elements (`vectorized`) or per 256 elements, at least one block and at most `max_blocks` (the
/// kernel's grid-stride loop covers the rest).
LaunchConfig expression_launch_config(std::size_t n, int vector_width, bool vectorized, unsigned max_blocks);

/// The most blocks an expression kernel is launched with unless with_max_blocks says fewer: the driver's limit on a
/// grid's x dimension.
inline constexpr unsigned expression_max_blocks = 0x7fffffffU;

/// \throws UsageError when `out` overlaps the operand `operand` (named `name`) without being exactly the same
/// elements (same address, byte size and element size), or overlaps a broadcast operand at all.
void check_assign_overlap(CUdeviceptr out, std::size_t out_bytes, std::size_t out_element_size, CUdeviceptr operand,
                          std::size_t operand_bytes, std::size_t operand_element_size, bool is_broadcast,
                          std::string_view name, std::string_view description);

/// \throws UsageError naming both lengths.
[[noreturn]] void throw_assign_length_mismatch(std::size_t out, std::size_t expression, std::string_view description);

}  // namespace detail

/// `out[i] = expression[i]` for every i, as one generated kernel launch (see the file comment): a GraphNode that
/// CudaGraph::build can add without capturing. Made by `assign`. Holds the expression (its spans share their
/// buffers' ownership); executing it keeps those buffers and the kernel alive for as long as the work may run.
///
/// Thread safety: a const AssignOp may be executed and prepared from several threads at once.
template <class T, class E>
class [[nodiscard]] AssignOp : public OpBase<AssignOp<T, E>> {
  static_assert(!std::is_const_v<T> && ExpressionElement<T>, "AssignOp<T, E>: made by assign, which checks T");

 public:
  /// No output.
  using Output = void;
  /// A GraphNode: one kernel launch, which allocates nothing and touches no host memory.
  static constexpr bool is_graph_node = true;
  /// Submits through the ExecContext, so CudaGraph::build can add it as a kernel node.
  static constexpr bool builds_without_capture = true;

  /// Assigns `expression` to `out`. Never touches the GPU.
  /// \throws UsageError when the expression's spans and `out` differ in length (naming both), or when `out`
  ///         overlaps an operand without being exactly the same elements (assign(x, x * 2.0F) is fine; a view of
  ///         x shifted by one element is not: the kernel would read elements it has already written).
  AssignOp(DeviceSpan<T> out, E expression)
      : out_(std::move(out)), expression_(std::move(expression)), program_(&detail::expression_program<T, E>()) {
    if (const auto n = expression_.size(); n && *n != out_.size()) {
      detail::throw_assign_length_mismatch(out_.size(), *n, program_->description);
    }
    bool aligned = out_.address() % 16 == 0;
    std::size_t bytes = out_.size_bytes();
    std::size_t index = 0;
    expression_.for_each_span([&](const auto& span, bool is_broadcast) {
      using U = typename std::remove_cvref_t<decltype(span)>::value_type;
      detail::check_assign_overlap(out_.address(), out_.size_bytes(), sizeof(T), span.address(), span.size_bytes(),
                                   sizeof(U), is_broadcast, program_->span_names.at(index), program_->description);
      ++index;
      bytes += span.size_bytes();
      if (!is_broadcast) aligned = aligned && span.address() % 16 == 0;
    });
    vectorized_ = aligned;
    span_bytes_ = bytes;
  }

  /// Launches the kernel through `ctx`, after compiling and loading it on the stream's device if this is its
  /// first use there.
  /// \throws CaptureError when the kernel is not loaded yet and `ctx` is capturing (call prepare first);
  ///         CompileError, CudaError as `prepare` does.
  void execute(ExecContext& ctx) const {
    const Device& device = ctx.stream().device();
    const detail::ExpressionKernel kernel = detail::expression_kernel(*program_, device);
    ctx.keep_alive(kernel.info);  // the module must stay loaded while a graph may replay this launch
    ctx.keep_alive(out_.owner());
    expression_.for_each_span([&](const auto& span, bool) { ctx.keep_alive(span.owner()); });
    detail::submit_launch(ctx, *kernel.info, launch_config(),
                          std::tuple_cat(expression_.params(),
                                         std::tuple<T*, long long, int>(
                                             out_.data(), static_cast<long long>(out_.size()), vectorized_ ? 1 : 0)),
                          span_bytes_);
  }

  /// Compiles (or loads from the disk cache) and loads the kernel on `device` now, unless it is loaded already:
  /// call it before recording the op in CudaGraph::scope or capture.
  /// \throws CaptureError during a capture on this thread; CompileError with the generated source and NVRTC's
  ///         log should NVRTC reject the source; UsageError when NVRTC cannot target the device; CudaError when the
  ///         driver refuses the module.
  const AssignOp& prepare(const Device& device) const {
    (void)detail::expression_kernel(*program_, device);
    return *this;
  }

  /// What it reads (every span of the expression, broadcasts included) and writes (the output), named by the
  /// generated kernel's name.
  void accesses(AccessSet& out) const {
    expression_.for_each_span([&](const auto& span, bool) { out.read(span, program_->kernel_name); });
    out.write(out_, program_->kernel_name);
  }

  /// The same assignment, launched early (LaunchConfig::early_launch) when `on`: it may start while the kernel before
  /// it finishes, and waits for that kernel's completion before touching memory.
  [[nodiscard]] AssignOp with_early_launch(bool on = true) const {
    AssignOp copy = *this;
    copy.early_launch_ = on;
    return copy;
  }

  /// The whole generated CUDA source (identical for every op of the same expression type).
  [[nodiscard]] const std::string& source() const noexcept { return program_->source; }
  /// The generated kernel's name, `lg_expr_` and 16 hex digits.
  [[nodiscard]] const std::string& kernel_name() const noexcept { return program_->kernel_name; }
  /// The expression in words, e.g. "out = silu(x0) * x1 + s2 * x3" (x: spans, s: numbers, b: broadcasts).
  [[nodiscard]] const std::string& description() const noexcept { return program_->description; }
  /// The number of elements assigned.
  [[nodiscard]] std::size_t size() const noexcept { return out_.size(); }
  /// True when every span and the output are 16-byte aligned, so that the kernel moves 16 bytes per access.
  [[nodiscard]] bool vectorized() const noexcept { return vectorized_; }
  /// The bytes of device memory the spans and the output view (each broadcast counts its one element).
  [[nodiscard]] std::size_t span_bytes() const noexcept { return span_bytes_; }
  /// The same assignment on at most `blocks` blocks of 256 threads (at least 1), each looping over its share: to
  /// leave multiprocessors to kernels running beside it (in another branch of all()), at some cost in bandwidth.
  [[nodiscard]] AssignOp with_max_blocks(unsigned blocks) const {
    AssignOp copy = *this;
    copy.max_blocks_ = std::max(blocks, 1U);
    return copy;
  }
  /// The launch shape it uses: from the length, the 16-byte path and with_max_blocks (it does not depend on the GPU).
  [[nodiscard]] LaunchConfig launch_config() const {
    LaunchConfig config =
        detail::expression_launch_config(out_.size(), program_->vector_width, vectorized_, max_blocks_);
    config.early_launch = early_launch_;
    return config;
  }

 private:
  DeviceSpan<T> out_;
  E expression_;
  const detail::ExpressionProgram* program_;
  bool vectorized_ = false;
  bool early_launch_ = false;
  unsigned max_blocks_ = detail::expression_max_blocks;
  std::size_t span_bytes_ = 0;
};

/// `out[i] = x[i]` for every element, as one generated kernel (see AssignOp), e.g.
/// `assign(y.view(), silu(a.cview()) * b.cview() + 2.0F * c.cview())`. `x` is an expression or an operand of one
/// (a span, a host number, a DeviceScalar). The expression's element type must be the output's: a host number takes
/// it; otherwise convert with cast<T>.
/// \throws UsageError as AssignOp's constructor does (lengths, overlap). Never touches the GPU.
template <class T, class X>
requires ExpressionOperand<X>
[[nodiscard]] auto assign(const DeviceSpan<T>& out, const X& x) {
  using V = typename detail::OperandNode<X>::value_type;
  using U = std::remove_const_t<T>;
  if constexpr (std::is_const_v<T>) {
    static_assert(detail::dependent_false_v<T>,
                  "assign: the output is a read-only DeviceSpan<const T>; pass a writable span (buffer.view(), not "
                  "cview())");
  } else if constexpr (!ExpressionElement<U>) {
    static_assert(detail::dependent_false_v<T>, "assign: the output must hold float, half or bfloat16");
  } else if constexpr (std::same_as<V, bool>) {
    static_assert(detail::dependent_false_v<T>,
                  "assign: the expression is a bool expression (a comparison); store numbers with select(cond, x, y) "
                  "or cast<T>(cond)");
  } else if constexpr (!std::same_as<V, T> && !std::same_as<V, detail::WeakScalar>) {
    static_assert(detail::dependent_false_v<T>,
                  "assign: the expression's element type differs from the output's; convert it with cast<T>(e)");
  } else {
    return AssignOp<T, detail::OperandNode<X>>(out, detail::operand(x));
  }
}

}  // namespace lazygraph
