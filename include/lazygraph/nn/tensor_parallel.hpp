#pragma once
/// \file
/// Tensor parallelism, Megatron style, for the SwiGLU MLP stack: each of N ranks (one GPU each, an NCCL
/// Communicator) holds ffn / N rows of the gate and up projections (column-parallel) and the matching ffn / N
/// columns of the down projection (row-parallel), so each rank reads 1 / N of the weights per step. Per block:
///
///     act_r = silu(W1_r h) * (W3_r h),  h = rmsnorm(x) * gain            (every rank, its own rows; x replicated)
///     y_0   = x + W2_0 act_0,  y_r = W2_r act_r (r > 0)                   (rank 0 adds the residual, fused)
///     x     = all_reduce_sum(y)                                          (one all-reduce per block, in place)
///
/// so every rank ends the block with x + W2 (silu(W1 h) * (W3 h)), the single-GPU block's result up to the order of
/// the fp32 sums and one more fp16 rounding per rank (a tensor-parallel run of one rank is bit-identical to Mlp).
/// Weights are the seeded ones of BasicMlp (same seed, same tensors), cut into shards on each rank's GPU.

#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "lazygraph/graph.hpp"
#include "lazygraph/nn/detail/rank_buffers.hpp"
#include "lazygraph/nn/kernels.hpp"
#include "lazygraph/nn/mlp.hpp"
#include "lazygraph/nn/swiglu.hpp"
#include "lazygraph/nn/tensor_parallel_options.hpp"

namespace lazygraph::nn {

/// One rank's share of one block: norm gain [d] (whole), W1 and W3 rows [ffn / N x d], W2 columns [d x ffn / N].
template <Element T>
struct BasicSwigluShard {
  DeviceBuffer<T> gain;  ///< norm gain [d], every rank
  DeviceBuffer<T> w1;    ///< gate projection rows [ffn / N x d]
  DeviceBuffer<T> w3;    ///< up projection rows [ffn / N x d]
  DeviceBuffer<T> w2;    ///< down projection columns [d x ffn / N]
  int ffn_shard = 0;     ///< ffn / N
};

/// \throws UsageError unless `config` is valid and ffn splits into `ranks` shards of a multiple of 8 (the gemv
/// kernels read rows in 8-element chunks), naming the numbers.
void check_tensor_parallel(const MlpConfig& config, int ranks);

/// Rank `rank` of `ranks`'s shard of `full` (on the same device, copied on `stream`, which is then waited for).
template <Element T>
BasicSwigluShard<T> shard_swiglu_weights(const Stream& stream, const BasicSwigluWeights<T>& full, int d, int ffn,
                                         int rank, int ranks);

/// One block on one rank, in place on the replicated residual stream `x` [d], `act` [ffn / N] as scratch: the
/// norm + gate/up kernel, the down projection (with the residual on rank 0), and the all-reduce (see the file
/// comment).
template <Element T>
auto tensor_parallel_swiglu_block(const BasicKernels<T>& k, const BasicSwigluShard<T>& w, const Communicator& comm,
                                  DeviceSpan<T> x, DeviceSpan<T> act, int d, float eps) {
  const int f = w.ffn_shard;
  const auto& down = comm.rank() == 0 ? k.gemv_add : k.gemv;  // rank 0 keeps x in its sum; the others overwrite it
  return k.rms_norm_gemv_swiglu(k.gemv_config(f, d), w.w1.cview(), w.w3.cview(), x.as_const(), w.gain.cview(), act, f,
                                d, eps, 1) >>
         down(k.gemv_config(d, f), w.w2.cview(), act.as_const(), x, d, f, 1) >> all_reduce(comm, x);
}

/// The MLP stack split over the ranks of `comms` (Communicator::create_all), one graph per rank recorded once
/// (MultiDeviceGraph). `forward` copies the input to every rank, replays every graph and returns rank 0's result.
/// Not thread-safe: forward it from one thread at a time.
template <Element T>
class BasicTensorParallelMlp {
 public:
  /// `libraries[i]`: a KernelLibrary with the nn kernels (nn::kernel_library) for comms[i]'s device.
  /// \throws UsageError for a config that does not split (check_tensor_parallel) or a library count that differs
  /// from the ranks'; CudaError when a GPU runs out of memory; NcclError.
  BasicTensorParallelMlp(std::span<const Communicator> comms, std::span<const KernelLibrary* const> libraries,
                         const MlpConfig& config, const TensorParallelOptions& options = {});
  /// Whether x lives in NCCL symmetric memory (TensorParallelOptions::symmetric_memory, when NCCL has it).
  [[nodiscard]] bool symmetric_memory() const noexcept { return symmetric_; }
  /// The d outputs for the d inputs `x`. \throws UsageError unless x has d elements.
  std::vector<T> forward(std::span<const T> x);
  /// The number of ranks.
  [[nodiscard]] int ranks() const noexcept { return static_cast<int>(ranks_.size()); }
  /// Every rank's graph (to replay without the copies, or to inspect).
  [[nodiscard]] MultiDeviceGraph& graph() { return *graph_; }
  /// The config it was built with.
  [[nodiscard]] const MlpConfig& config() const noexcept { return config_; }

 private:
  struct Rank {
    Communicator comm;
    BasicKernels<T> kernels;
    std::vector<BasicSwigluShard<T>> layers;
    DeviceBuffer<T> input;
    DeviceSpan<T> x;  // owns its memory: a SymmetricBuffer's or a DeviceBuffer's
    DeviceBuffer<T> act;
  };
  MlpConfig config_;
  bool symmetric_ = false;
  std::vector<Rank> ranks_;
  std::optional<MultiDeviceGraph> graph_;
};

/// The fp16 tensor-parallel MLP stack.
using TensorParallelMlp = BasicTensorParallelMlp<half>;
extern template class BasicTensorParallelMlp<half>;
extern template class BasicTensorParallelMlp<bfloat16>;

}  // namespace lazygraph::nn
