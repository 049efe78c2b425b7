#pragma once
/// \file
/// GEMM as an op, backed by cuBLASLt: D[M, N] = alpha * X[M, K] * W[N, K]^T (+ beta * C[M, N]), every matrix
/// row-major, in half or bfloat16 with float accumulation. W is laid out as the nn layer stores a weight (out_features
/// rows of in_features), so `gemm(y, x, w)` is a linear layer over M rows of x at once.
///
/// Two steps, as a graph wants them:
///   1. `Gemm<T> gemm(device, {m, n, k})`, outside any capture: loads cuBLASLt (at run time, never linked), makes the
///      device's cuBLASLt handle once, builds the descriptors, asks cuBLASLt's heuristic for an algorithm (once per
///      device, shape, type and options in the process: a second plan of the same shape asks nothing) and allocates
///      the workspace that algorithm needs. Nothing here may happen inside a capture, and nothing later allocates.
///   2. `gemm(d, x, w)` / `gemm.add(d, x, w, c)` return lazy ops (GemmOp) that check their spans against the shape
///      when they are built and enqueue one cublasLtMatmul when executed: eagerly (`sync_on`), or captured into a
///      graph (`CudaGraph::capture`, `scope`), which then keeps the plan's descriptors and workspace alive.
///
/// A GemmOp is a GraphNode, but not a BuildableNode: cuBLASLt submits its kernels to a stream itself, which only
/// capture can record, so `CudaGraph::build` of an op containing one is a compile-time error naming the fix.
/// Its accesses are what it reads (x, w, c) and writes (d, and the plan's workspace), so `dataflow` orders it, and
/// `all` refuses two products of one plan side by side: they would share the workspace (make a second plan of the
/// same shape for that; it reuses the algorithm and gets a workspace of its own).
///
/// Plans whose products never run at the same time (a model's layers, its batch-size buckets, on one stream) may share
/// one SharedGemmWorkspace instead of owning one each: its size is the most any of them needs (workspace_needed).

#include <cuda.h>

#include <concepts>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "lazygraph/detail/kernels/gemm_plan.hpp"
#include "lazygraph/driver/bfloat16.hpp"
#include "lazygraph/driver/device.hpp"
#include "lazygraph/driver/device_buffer.hpp"
#include "lazygraph/driver/device_span.hpp"
#include "lazygraph/driver/error.hpp"
#include "lazygraph/driver/half.hpp"
#include "lazygraph/ops/access.hpp"
#include "lazygraph/ops/concepts.hpp"
#include "lazygraph/ops/exec_context.hpp"

namespace lazygraph {

/// The element types a Gemm multiplies: half and bfloat16 (products accumulated in float).
template <class T>
concept GemmElement = std::same_as<T, half> || std::same_as<T, bfloat16>;

/// The sizes of D[m, n] = X[m, k] * W[n, k]^T, every matrix row-major.
struct GemmShape {
  std::size_t m = 0;  ///< rows of X and of D (tokens, batch)
  std::size_t n = 0;  ///< rows of W, columns of D (a linear layer's out_features)
  std::size_t k = 0;  ///< columns of X and of W (in_features)

  /// Shapes compare by their three sizes.
  friend bool operator==(const GemmShape&, const GemmShape&) = default;
};

/// How a Gemm plan chooses its algorithm. Part of what the process-wide algorithm cache is keyed by.
struct GemmOptions {
  /// The bytes every operand's address (d, x, w, c) is a multiple of: a power of two from the element's size to
  /// 256. Algorithms are chosen for it and each op checks it; DeviceBuffers are 256-byte aligned, so only subspans
  /// may need less (a row offset times K elements).
  std::size_t alignment = 16;
  /// The most workspace cuBLASLt's algorithm may use (32 MiB, what NVIDIA suggests for Hopper); the plan allocates
  /// only what the chosen one needs.
  std::size_t max_workspace_bytes = std::size_t{32} << 20U;
  /// How many of cuBLASLt's heuristic's algorithms to time on the device, keeping the fastest, 1 to 64: 1 (the
  /// default) takes the heuristic's first untimed. More times each on operands of the shape (allocated for it: X, W
  /// and D, and the most workspace a candidate asks) over 10 runs, once per plan key in the process. The runs re-read
  /// the same W, which stays in L2 when it fits (50 MB on an H100): for a product that streams its weights
  /// from memory (a few rows) the fastest there need not be the fastest in a model's graph, and timing on a GPU busy
  /// with other work may choose worse. A device without the memory for those operands keeps the heuristic's first
  /// untimed, for the process's life (a key's choice never changes, so that workspace_needed and the plans after it
  /// agree); any other driver failure while timing is a CudaError from the plan's constructor, and the next plan of
  /// the key asks again. Timing holds up plans of the same key, and other keys' timing (one at a time in the process,
  /// so that no trial runs beside another's); plans that time nothing go on meanwhile.
  int candidates = 1;
};

/// Device memory that Gemm plans made with it use as their workspace instead of one each. Every product of such a plan
/// writes all of it, so `dataflow` orders the products of all its plans and `all` refuses two of them side by side;
/// across streams, or graphs replayed at the same time, they must not run concurrently (give those their own).
/// Plans and the graphs that recorded their products keep it alive.
class SharedGemmWorkspace {
 public:
  /// Allocates `bytes` on `device`: the most that the plans to share it need (Gemm<T>::workspace_needed).
  /// \throws UsageError for 0 bytes (plans whose algorithms need none need no workspace); CudaError when the device is
  ///         out of memory.
  SharedGemmWorkspace(const Device& device, std::size_t bytes);

  /// Its size.
  [[nodiscard]] std::size_t bytes() const noexcept { return buffer_.size(); }
  /// The ordinal of its device.
  [[nodiscard]] int device_ordinal() const noexcept { return ordinal_; }
  /// Its memory.
  [[nodiscard]] DeviceSpan<const std::byte> span() const { return buffer_.cview(); }

 private:
  int ordinal_;
  DeviceBuffer<std::byte> buffer_;
};

/// One product D = alpha * X * W^T (+ beta * C) of a Gemm plan, made by `gemm(d, x, w)` or `gemm.add(d, x, w, c)`: a
/// GraphNode (captured as cuBLASLt's kernels), not a BuildableNode. Holds the plan's shared state and the spans, so
/// the buffers and the plan's workspace live as long as the op and a graph that recorded it.
template <GemmElement T>
class [[nodiscard]] GemmOp : public OpBase<GemmOp<T>> {
 public:
  /// No output.
  using Output = void;
  /// A GraphNode: it neither allocates (the plan made the workspace) nor touches host memory. It does not say
  /// `builds_without_capture`: cuBLASLt submits to the stream itself, which only capture records.
  static constexpr bool is_graph_node = true;

  /// Made by Gemm's call operators, which pass their plan. \throws UsageError when a span does not fit the shape,
  ///         is not aligned as the plan asks, or overlaps another (see Gemm::add for what may alias).
  GemmOp(std::shared_ptr<const detail::GemmState> state, const GemmShape& shape, std::size_t alignment, DeviceSpan<T> d,
         DeviceSpan<const T> x, DeviceSpan<const T> w, std::optional<DeviceSpan<const T>> c, float alpha, float beta)
      : state_(std::move(state)),
        shape_(shape),
        workspace_(detail::gemm_workspace(*state_)),
        d_(std::move(d)),
        x_(std::move(x)),
        w_(std::move(w)),
        c_(std::move(c)),
        alpha_(alpha),
        beta_(beta) {
    const detail::GemmOperand c_operand{c_ ? c_->address() : 0, c_ ? c_->size() : 0};
    detail::check_gemm_operands(shape_, alignment, sizeof(T), {d_.address(), d_.size()}, {x_.address(), x_.size()},
                                {w_.address(), w_.size()}, c_ ? &c_operand : nullptr);
  }

  /// Enqueues one cublasLtMatmul on `ctx.stream()`, keeping the plan and the buffers alive through `ctx`.
  /// \throws UsageError in CudaGraph::build (record it with capture or scope) or for a stream on another device than
  ///         the plan; CublasError when cuBLASLt refuses.
  void execute(ExecContext& ctx) const {
    ctx.keep_alive(state_);
    ctx.keep_alive(d_.owner());
    ctx.keep_alive(x_.owner());
    ctx.keep_alive(w_.owner());
    if (c_) ctx.keep_alive(c_->owner());
    detail::submit_gemm(ctx, *state_,
                        {d_.address(), x_.address(), w_.address(), c_ ? c_->address() : d_.address(), alpha_, beta_});
  }

  /// Reads x, w and c; writes d and the plan's workspace (so two products of one plan are never concurrent).
  void accesses(AccessSet& out) const {
    out.read(x_, "gemm");
    out.read(w_, "gemm");
    if (c_) out.read(*c_, "gemm");
    out.write(d_, "gemm");
    out.write(workspace_.address, workspace_.bytes, "gemm workspace");
  }

  /// The plan's shape.
  [[nodiscard]] const GemmShape& shape() const noexcept { return shape_; }
  /// The factor of X * W^T.
  [[nodiscard]] float alpha() const noexcept { return alpha_; }
  /// The factor of C (0 without one).
  [[nodiscard]] float beta() const noexcept { return beta_; }

 private:
  std::shared_ptr<const detail::GemmState> state_;
  GemmShape shape_;
  detail::GemmWorkspace workspace_;
  DeviceSpan<T> d_;
  DeviceSpan<const T> x_;
  DeviceSpan<const T> w_;
  std::optional<DeviceSpan<const T>> c_;
  float alpha_;
  float beta_;
};

/// A plan for D[m, n] = X[m, k] * W[n, k]^T in T (half or bfloat16) on one device: cuBLASLt's descriptors, the
/// algorithm its heuristic chose for the shape, and the workspace that algorithm needs, made once; calling it
/// makes ops (GemmOp) for any buffers of that shape. One plan serves every layer of a model that has its shape.
///
/// Thread safety: a plan is immutable once made; ops may be made from it on any thread. Two of its products must not
/// run at the same time (they share the workspace): in one graph, `all` refuses that and `dataflow` orders them;
/// across streams or graphs replayed concurrently, give each its own plan.
///
/// Exception safety: a constructor that throws leaves nothing behind but what it cached for the process (the
/// device's cuBLASLt handle, a chosen algorithm).
template <GemmElement T>
class Gemm {
 public:
  /// Plans the shape on `device`, outside any graph capture (it may load cuBLASLt, make its handle, ask its heuristic
  /// and allocate the workspace).
  /// \throws UsageError for a dimension of 0 or an alignment that is not a power of two from sizeof(T) to 256;
  ///         CaptureError while a capture on this thread (or a global-mode one) is in progress; CublasUnavailable
  ///         without cuBLASLt; CublasError when it has no algorithm for the shape; CudaError when the workspace
  ///         cannot be allocated.
  Gemm(const Device& device, GemmShape shape, GemmOptions options = {})
      : state_(detail::make_gemm_state(device, shape, options, type, nullptr)), shape_(shape), options_(options) {}

  /// Plans the shape as above, with `workspace` as its workspace instead of one of its own (see SharedGemmWorkspace).
  /// \throws as above; UsageError when `workspace` is null, of another device, or smaller than the chosen algorithm
  ///         needs (size it with workspace_needed).
  Gemm(const Device& device, GemmShape shape, GemmOptions options, std::shared_ptr<const SharedGemmWorkspace> workspace)
      : state_(detail::make_gemm_state(device, shape, options, type, checked(std::move(workspace)))),
        shape_(shape),
        options_(options) {}

  /// The bytes of workspace a plan of (device, shape, options) needs: what cuBLASLt's chosen algorithm asks for (0 for
  /// none). Asks the heuristic when no plan of that key has, and remembers its answer; allocates no workspace. With
  /// `options.candidates` above 1 that first answer is timed as the constructor times it, on trial operands it
  /// allocates and frees. \throws as the constructor, but for the workspace's allocation.
  [[nodiscard]] static std::size_t workspace_needed(const Device& device, GemmShape shape, GemmOptions options = {}) {
    return detail::gemm_workspace_needed(device, shape, options, type);
  }

  /// The op d = alpha * x * w^T (d: M*N elements, x: M*K, w: N*K, row-major).
  /// \throws UsageError when a span does not fit the shape, is misaligned, or d overlaps x or w.
  [[nodiscard]] GemmOp<T> operator()(DeviceSpan<T> d, DeviceSpan<const T> x, DeviceSpan<const T> w,
                                     float alpha = 1.0F) const {
    return {state_, shape_, options_.alignment, std::move(d), std::move(x), std::move(w), std::nullopt, alpha, 0.0F};
  }

  /// The op d = alpha * x * w^T + beta * c: a residual added in the same kernel. `c` (M*N elements) may be exactly
  /// `d` (`gemm.add(y, x, w, y)`: y += x w^T in place), or apart from it; any other overlap is refused.
  /// \throws UsageError as operator(), or when c overlaps d without being the same span.
  [[nodiscard]] GemmOp<T> add(DeviceSpan<T> d, DeviceSpan<const T> x, DeviceSpan<const T> w, DeviceSpan<const T> c,
                              float alpha = 1.0F, float beta = 1.0F) const {
    return {state_, shape_, options_.alignment, std::move(d), std::move(x), std::move(w), std::move(c), alpha, beta};
  }

  /// The shape planned for.
  [[nodiscard]] const GemmShape& shape() const noexcept { return shape_; }
  /// The options planned with.
  [[nodiscard]] const GemmOptions& options() const noexcept { return options_; }
  /// The bytes of workspace this plan owns: what the chosen algorithm needs, or 0 when it needs none or the plan uses a
  /// SharedGemmWorkspace.
  [[nodiscard]] std::size_t workspace_bytes() const noexcept { return detail::gemm_owned_workspace_bytes(*state_); }
  /// How many times this process has asked cuBLASLt's heuristic for an algorithm, for every element type: a plan
  /// whose device, shape, type and options an earlier plan had asks nothing.
  [[nodiscard]] static std::size_t heuristic_queries() noexcept { return detail::gemm_heuristic_queries(); }

 private:
  static constexpr detail::GemmElementType type =
      std::same_as<T, half> ? detail::GemmElementType::f16 : detail::GemmElementType::bf16;
  static std::shared_ptr<const SharedGemmWorkspace> checked(std::shared_ptr<const SharedGemmWorkspace> workspace) {
    if (!workspace) throw UsageError("Gemm: the shared workspace is null; use the constructor without one");
    return workspace;
  }
  std::shared_ptr<const detail::GemmState> state_;
  GemmShape shape_;
  GemmOptions options_;
};

/// True when cuBLASLt loads (libcublasLt.so.N of the cuBLAS major version built against, .so.13 for CUDA 13, or
/// LAZYGRAPH_CUBLASLT_LIBRARY / set_cublaslt_library); else false with the reason in `why`. Needs no GPU; never throws.
bool cublaslt_available(std::string* why = nullptr) noexcept;
/// The cuBLASLt version, e.g. "13.1.0". \throws CublasUnavailable.
std::string cublaslt_version();
/// The file cuBLASLt was loaded from. \throws CublasUnavailable.
std::string cublaslt_library();
/// Uses the cuBLASLt library at `path` (instead of LAZYGRAPH_CUBLASLT_LIBRARY and the loader's search). Call it
/// before the first Gemm plan. \throws UsageError when cuBLASLt is already loaded from another file.
void set_cublaslt_library(std::string path);

}  // namespace lazygraph
