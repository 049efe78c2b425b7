#pragma once
/// \file
/// TensorParallelOptions: how the tensor-parallel modules (tensor_parallel.hpp's MLP, decoder_rank.hpp's decoder rank)
/// hold what their collectives read and write. Its own header, as both the Decoder and the MLP take it.

namespace lazygraph::nn {

/// How the tensor-parallel modules hold what they all-reduce.
struct TensorParallelOptions {
  /// The residual stream x, which every block all-reduces (and a decoder's logits, which every step all-gathers), in
  /// NCCL symmetric memory (SymmetricBuffer) when the NCCL here has it: NCCL then runs its symmetric kernels, the
  /// lowest latency it has for a decode step's small collectives. When it does not (older than 2.27, or registration
  /// refused), plain device memory, as with false; the module's symmetric_memory() says which.
  bool symmetric_memory = true;
  /// TensorParallelDecoder (ranks of one process) and load_decoder_rank (ranks in processes of one machine):
  /// all-reduce the residual stream through a PeerExchange over the ranks' GPUs (nn/peer_all_reduce.hpp) where every
  /// pair of them has peer access, instead of NCCL; a decode step's all-reduces then cost a fraction of NCCL's. Where
  /// they lack peer access (or, across processes, cannot map each other's memory), NCCL, as with false.
  bool peer_all_reduce = true;
  /// With peer_all_reduce: the all-reduce after each output projection (Wo, W2) runs inside the projection's kernel
  /// (gemv_all_reduce, nn/peer_all_reduce.hpp), which sends each output to the peers as soon as it is done, instead of
  /// in a kernel after it; a step then has no kernel between the projection and the next block. The sum is taken in
  /// fp32 and rounded once (the separate kernel adds the ranks' fp16 partial sums), so the two differ within rounding.
  bool fused_peer_all_reduce = true;
};

}  // namespace lazygraph::nn
