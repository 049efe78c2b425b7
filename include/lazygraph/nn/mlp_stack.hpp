#pragma once
/// \file
/// A stack of SwiGLU blocks as ONE persistent kernel launch (kernels/nn/mlp_stack.cu): the same math as a chain of
/// swiglu_block ops, with the boundaries between phases inside the kernel (counters in device memory) instead of
/// between kernels, and the next phase's weights loaded while the current one finishes. Measured on the H100 it is
/// 1.05-2.1x slower than the chain of early-launched kernels (docs/decode_performance.md): the counters cost more
/// than a kernel boundary, so nn::Mlp uses it only when asked (MlpConfig::persistent).

#include <array>
#include <memory>
#include <span>

#include "lazygraph/nn/kernels.hpp"
#include "lazygraph/nn/swiglu.hpp"

namespace lazygraph::nn {

/// How the stack kernel splits its rows: warps per row of phase A (the gate/up projection, ffn rows of d columns)
/// and phase B (the down projection, d rows of ffn columns), each 1, 2, 4 or 8; 0 picks by shape (mlp_stack_split).
struct MlpStackSplit {
  int a = 0;  ///< warps per row of phase A
  int b = 0;  ///< warps per row of phase B
};

/// The split `split` asks for, its zeros replaced by the shape rule: rows of more than 4096 columns get two warps
/// each (as gemv_config), and a phase with fewer rows than `resident_warps` (the warps the GPU runs at once) gets
/// more warps per row, down to 256 columns per warp, so that every multiprocessor has work.
/// \throws UsageError for a value other than 0, 1, 2, 4 or 8.
MlpStackSplit mlp_stack_split(MlpStackSplit split, int d, int ffn, int resident_warps);

/// `layers` SwiGLU blocks of width d and hidden width ffn as one launch op (see the file comment).
///
/// It owns a table of the weights' addresses and the kernel's counters, and keeps the weights alive: so do its ops
/// and every graph that records one. Copies share the table and the counters.
///
/// Thread safety: ops of one stack (and of its copies) must not run at once — they share the counters, as they
/// share the activations they are given. A graph replayed from one stream at a time is fine.
template <Element T>
class BasicMlpStack {
 public:
  /// The op signature: mlp_stack(layers, x, act, sync, layer_count, d, ffn, eps, split_a, split_b, batch).
  using Op = LaunchOp<const MlpLayer*, T*, T*, unsigned*, int, int, int, float, int, int, int>;

  /// Uploads the table of `layers` (each d x ffn) and zeroed counters on `stream` (and waits).
  /// \throws UsageError for no layers, d or ffn not a positive multiple of 8, a weight of another size (naming the
  /// layer and the tensor), or an invalid split.
  BasicMlpStack(const Stream& stream, const BasicKernels<T>& kernels,
                std::span<const std::type_identity_t<BasicSwigluWeights<T>>> layers, int d, int ffn, float eps,
                MlpStackSplit split = {});

  /// x [batch][d] += every block in turn (x = x + W2 (silu(W1 h) * (W3 h)), h = rmsnorm(x) * gain), with act
  /// [batch][ffn] as scratch, as one kernel launch: early when the kernels say so (BasicKernels::early_launch).
  /// \throws UsageError for a batch outside 1..8 or spans smaller than batch rows (naming the sizes).
  [[nodiscard]] Op op(DeviceSpan<T> x, DeviceSpan<T> act, int batch = 1) const;

  /// The blocks of the grid for `batch` (the multiprocessors times the blocks each holds).
  [[nodiscard]] unsigned grid(int batch) const;
  /// The split in use (never 0).
  [[nodiscard]] MlpStackSplit split() const noexcept { return split_; }
  /// The number of blocks.
  [[nodiscard]] int layers() const noexcept { return layer_count_; }

 private:
  BatchedKernel<void(const MlpLayer*, T*, T*, unsigned*, int, int, int, float, int, int, int)> kernel_;
  bool early_launch_;
  int layer_count_;
  int d_;
  int ffn_;
  float eps_;
  MlpStackSplit split_;
  std::array<unsigned, 4> grid_{};    ///< per kernel variant (batches up to 1, 2, 4, 8)
  DeviceSpan<const MlpLayer> table_;  ///< its owner also keeps every layer's weights alive
  DeviceSpan<unsigned> sync_;         ///< the kernel's counters (kernels/nn/mlp_stack.cu), zero between launches
};

/// The fp16 stack.
using MlpStack = BasicMlpStack<half>;

extern template class BasicMlpStack<half>;
extern template class BasicMlpStack<bfloat16>;

}  // namespace lazygraph::nn
