#pragma once
/// \file
/// What a Gemm plan (kernels/gemm.hpp) shares with its ops and with the graphs that record them: GemmState holds the
/// cuBLASLt descriptors, the algorithm chosen for the shape and the workspace. It is defined in
/// src/kernels/gemm_plan.cpp, so that no public header needs cublasLt.h; this header declares what the templates of
/// gemm.hpp call: the checks a plan and an op make before any GPU work, making a state, and submitting one product.

#include <cuda.h>

#include <cstddef>
#include <memory>

namespace lazygraph {

class Device;
class ExecContext;
class SharedGemmWorkspace;
struct GemmShape;
struct GemmOptions;

namespace detail {

/// The element types cuBLASLt is asked for (CUDA_R_16F, CUDA_R_16BF), for the non-template part of Gemm<T>.
enum class GemmElementType : int { f16, bf16 };

/// A plan's cuBLASLt state (src/kernels/gemm_plan.cpp): descriptors, algorithm, workspace, the device's handle.
struct GemmState;

/// One matrix operand of a gemm op as the checks see it: where it starts and how many elements it views.
struct GemmOperand {
  CUdeviceptr address = 0;
  std::size_t elements = 0;
};

/// The checks a plan makes before it touches the GPU: every dimension at least 1, each matrix's element count and
/// bytes within std::size_t and cuBLASLt's int64 leading dimensions, `options.alignment` a power of two from
/// `element_size` to 256 bytes, `options.candidates` 1 to 64. \throws UsageError naming the dimension or option.
void check_gemm_shape(const GemmShape& shape, const GemmOptions& options, std::size_t element_size);

/// The checks a gemm op makes when it is built, before any GPU work: `d` must have M*N elements, `x` M*K, `w` N*K and
/// `c` (when not null) M*N; each address a multiple of `alignment`; `d` must not overlap `x` or `w`, and `c` is
/// either exactly `d` (in place) or apart from it. \throws UsageError naming the operand, its size and the shape.
void check_gemm_operands(const GemmShape& shape, std::size_t alignment, std::size_t element_size, const GemmOperand& d,
                         const GemmOperand& x, const GemmOperand& w, const GemmOperand* c);

/// Makes a plan's state on `device`: the device's cuBLASLt handle (made on first use), the descriptors, the algorithm
/// (asked of cuBLASLt's heuristic once per device, shape, type and options in the process) and its workspace: its own,
/// or `shared` when not null. \throws UsageError (check_gemm_shape; a shared workspace of another device or smaller
///         than the algorithm needs), CaptureError while a capture forbids it, CublasUnavailable, CublasError,
///         CudaError when the workspace cannot be allocated.
std::shared_ptr<const GemmState> make_gemm_state(const Device& device, const GemmShape& shape,
                                                 const GemmOptions& options, GemmElementType type,
                                                 std::shared_ptr<const SharedGemmWorkspace> shared);

/// The bytes of workspace the algorithm chosen for (device, shape, options, type) needs, asking the heuristic if no
/// plan has yet (no workspace allocated; with options.candidates above 1, the timing's trial operands are).
/// \throws as make_gemm_state, but for the workspace.
std::size_t gemm_workspace_needed(const Device& device, const GemmShape& shape, const GemmOptions& options,
                                  GemmElementType type);

/// The device memory a plan's workspace occupies (0 bytes when its algorithm needs none).
struct GemmWorkspace {
  CUdeviceptr address = 0;
  std::size_t bytes = 0;
};
/// `state`'s workspace: its own, or the whole of the shared one it was made with.
GemmWorkspace gemm_workspace(const GemmState& state) noexcept;
/// The bytes of workspace `state` owns (0 when it needs none or shares one).
std::size_t gemm_owned_workspace_bytes(const GemmState& state) noexcept;

/// The addresses and scalars of one product D = alpha X W^T + beta C (C is D when beta is 0 and there is none).
struct GemmCall {
  CUdeviceptr d = 0;
  CUdeviceptr x = 0;
  CUdeviceptr w = 0;
  CUdeviceptr c = 0;
  float alpha = 1.0F;
  float beta = 0.0F;
};

/// Enqueues the product on `ctx.stream()` (captured when it captures; cuBLASLt may set itself up there, so the call
/// runs in relaxed capture mode). \throws UsageError when planning (CudaGraph::build) or when the stream is on
/// another device than the plan; CublasError when cuBLASLt refuses.
void submit_gemm(ExecContext& ctx, const GemmState& state, const GemmCall& call);

/// How many times this process has asked cuBLASLt's heuristic for an algorithm (once per distinct plan key).
std::size_t gemm_heuristic_queries() noexcept;

}  // namespace detail
}  // namespace lazygraph
