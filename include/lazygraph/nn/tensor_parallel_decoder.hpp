#pragma once
/// \file
/// The decoder split Megatron style over N ranks (one GPU each, an NCCL Communicator), for greedy decoding of one
/// sequence. Each rank holds heads / N query heads and kv_heads / N key/value heads: the rows of Wq, Wk and Wv of
/// its heads (column-parallel), the columns of Wo that read them (row-parallel), its heads' KV cache, the SwiGLU
/// shards of tensor_parallel.hpp and vocab / N rows of the LM head. Per layer:
///
///     q, k, v = rmsnorm(x) * gain times the rank's rows; rope; append k, v to the rank's cache; attention of its heads
///     x = all_reduce_sum(rank 0: x + Wo_0 attn_0, rank r: Wo_r attn_r)                 (one all-reduce)
///     x = all_reduce_sum(rank 0: x + W2_0 act_0,  rank r: W2_r act_r)                  (one all-reduce)
///
/// then logits_r = lm_head_r (rmsnorm(x) * final_gain), all_gather of the logits, and every rank's argmax. Two
/// all-reduces per layer and one all-gather per step. The kernels are the Decoder's, on the rank's heads: fused
/// (DecoderConfig::fused, the default: the norm, q, k, v, RoPE and the cache append in one kernel, attention split
/// over blocks of positions) or not (rms_norm_gemv per projection, rope, kv_append, attention with one block per
/// head, in order); one rank computes Decoder's logits with the same config bit for bit.
/// Weights are the seeded ones of BasicDecoder (same seed, same tensors), cut into shards on each rank's GPU.

#include <optional>
#include <span>
#include <vector>

#include "lazygraph/graph.hpp"
#include "lazygraph/nn/decoder.hpp"
#include "lazygraph/nn/tensor_parallel.hpp"

namespace lazygraph::nn {

/// \throws UsageError unless `config` is valid (DecoderConfig::validate) for one sequence (max_batch 1) and splits
/// over `ranks`: heads, kv heads and vocab divisible by it, ffn into shards of a multiple of 8; naming the numbers.
void check_tensor_parallel(const DecoderConfig& config, int ranks);

/// Greedy decoding of one sequence with the decoder split over the ranks of `comms` (see the file comment). Not
/// thread-safe: call it from one thread at a time.
template <Element T>
class BasicTensorParallelDecoder {
 public:
  /// `libraries[i]`: a KernelLibrary with the nn kernels for comms[i]'s device (nn::kernel_library).
  /// \throws UsageError for a config that does not split (check_tensor_parallel) or a library count that differs
  /// from the ranks'; CudaError when a GPU runs out of memory; NcclError.
  BasicTensorParallelDecoder(std::span<const Communicator> comms, std::span<const KernelLibrary* const> libraries,
                             const DecoderConfig& config, const TensorParallelOptions& options = {});
  /// Whether x lives in NCCL symmetric memory (TensorParallelOptions::symmetric_memory, when NCCL has it).
  [[nodiscard]] bool symmetric_memory() const noexcept { return symmetric_; }
  /// One step: `token` at `position` (steps must come at positions 0, 1, 2, ...); returns the next token (greedy).
  /// \throws UsageError for a token or position out of range (check_step).
  int forward(TokenAt in);
  /// The last step's logits (vocab values, gathered from every rank), from rank 0.
  [[nodiscard]] std::vector<T> logits() const;
  /// The number of ranks.
  [[nodiscard]] int ranks() const noexcept { return static_cast<int>(ranks_.size()); }
  /// Every rank's step graph (replay it directly to time the device work alone).
  [[nodiscard]] MultiDeviceGraph& graph() { return *graph_; }
  /// The config it was built with.
  [[nodiscard]] const DecoderConfig& config() const noexcept { return config_; }

 private:
  struct Layer {
    DeviceBuffer<T> gain;  // [d]
    DeviceBuffer<T> wqkv;  // [(q_dim + 2 kv_dim) / N x d]: this rank's rows of Wq, then of Wk, then of Wv
    DeviceBuffer<T> wo;    // [d x q_dim / N]
    BasicSwigluShard<T> mlp;
  };
  struct Rank {
    Communicator comm;
    BasicKernels<T> kernels;
    DeviceBuffer<T> embedding;  // [vocab x d]
    std::vector<Layer> layers;
    DeviceBuffer<T> final_gain;  // [d]
    DeviceBuffer<T> lm_head;     // [vocab / N x d]
    DeviceBuffer<int> io;        // token, position, slot (0)
    DeviceBuffer<int> next;      // [1]
    DeviceSpan<T> x;             // owns its memory: a SymmetricBuffer's or a DeviceBuffer's
    DeviceBuffer<T> qkv, attn, act, logits_part, logits, k_cache, v_cache;  // qkv: q, then k, then v
    DeviceBuffer<float> attention_partials;     // attention_split's [heads / N][splits][head_dim + 2]
    DeviceBuffer<unsigned> attention_counters;  // attention_split's [heads / N], zero between steps
    DeviceBuffer<float> rope_frequencies;       // rope_table(config) [head_dim / 2]
  };
  /// Rank r's step as recorded into its graph.
  void record_step(int r, Scope& s);

  DecoderConfig config_;
  bool symmetric_ = false;
  std::vector<Rank> ranks_;
  std::optional<MultiDeviceGraph> graph_;
};

/// The fp16 tensor-parallel decoder.
using TensorParallelDecoder = BasicTensorParallelDecoder<half>;
extern template class BasicTensorParallelDecoder<half>;
extern template class BasicTensorParallelDecoder<bfloat16>;

}  // namespace lazygraph::nn
