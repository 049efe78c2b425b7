#pragma once
/// \file
/// The decoder split over every GPU of one process: one tensor-parallel rank Decoder per GPU (nn/decoder_rank.hpp
/// says what a rank holds and computes), each driven by a thread of its own, so that one call runs on every rank at
/// once. Every path of the Decoder is there: steps of one sequence or a batch, prompts (on tensor cores where the
/// config allows), generate (its loop on the device), greedy or sampled tokens. One rank computes the single-GPU
/// Decoder's logits and tokens bit for bit; N ranks the same within rounding (the all-reduces add the ranks'
/// fp32-accumulated partial sums after rounding each to T).
///
/// For one rank per process, as deployments run, make the rank Decoder itself in each process (BasicDecoder's rank
/// constructor, or load_decoder_rank) from a Communicator joined through a CommunicatorId.

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "lazygraph/nn/decoder.hpp"
#include "lazygraph/nn/decoder_rank.hpp"
#include "lazygraph/nn/detail/rank_threads.hpp"
#include "lazygraph/nn/tensor_parallel.hpp"

namespace lazygraph::nn {

/// The decoder split over the ranks of `comms` (Communicator::create_all: every GPU of this process, rank r on
/// comms[r]'s device). Each call runs on every rank at once and returns what rank 0 returns (every rank returns the
/// same tokens). Thread safety: every member function may be called from several threads; calls run one at a time
/// (each on every rank). A rank that fails inside a call (a CUDA error) leaves the others waiting in their collectives:
/// make the communicators anew. (Aborting them from another thread did not end such a wait: ncclCommAbort did not
/// return, 2x H100, NCCL 2.28.3, docs/multi_gpu.md.)
template <Element T>
class BasicTensorParallelDecoder {
 public:
  /// The seeded weights of `config` (the single-GPU Decoder's: generated whole on each GPU, cut into its share and
  /// freed). `libraries[r]`: a KernelLibrary with the nn kernels for comms[r]'s device (nn::kernel_library).
  /// \throws UsageError for a config that does not split (check_tensor_split) or a library count that differs from
  /// the ranks'; CudaError when a GPU runs out of memory; NcclError.
  BasicTensorParallelDecoder(std::span<const Communicator> comms, std::span<const KernelLibrary* const> libraries,
                             const DecoderConfig& config, const TensorParallelOptions& options = {});
  /// Given weights: `weights[r]` is rank r's share on comms[r]'s device (shard_decoder_weights,
  /// DecoderCheckpoint::upload_shard). \throws as above, and as the rank constructor for a share of the wrong sizes.
  BasicTensorParallelDecoder(std::span<const Communicator> comms, std::span<const KernelLibrary* const> libraries,
                             const DecoderConfig& config, std::vector<BasicDecoderWeights<T>> weights,
                             const TensorParallelOptions& options = {});

  /// One step of sequence 0 (Decoder::forward). \throws UsageError as Decoder::forward.
  int forward(TokenAt in);
  /// One step of several sequences (Decoder::forward_batch).
  std::vector<int> forward_batch(std::span<const TokenAt> steps);
  /// A prompt through sequence `slot` (Decoder::prefill).
  int prefill(std::span<const int> prompt, int start = 0, int slot = 0);
  /// Up to n tokens, on every rank at once (Decoder::generate on a rank).
  std::vector<int> generate(int token, int n, int stop_token = -1, int start = 0);
  /// How later steps pick their tokens, on every rank (Decoder::set_sampling).
  void set_sampling(const Sampling& sampling);
  /// Clears every rank's KV cache.
  void reset();
  /// Row `row`'s logits of the last call (the whole vocabulary, gathered), from rank 0.
  [[nodiscard]] std::vector<T> logits(int row = 0) const;
  /// Replays every rank's step graph of `rows` rows once (no staging copies) and waits: the device work of a step,
  /// to time. The rows' io is what the last call left.
  void replay(int rows = 1);

  /// Whether the ranks' residual streams and logits live in NCCL symmetric memory (TensorParallelOptions).
  [[nodiscard]] bool symmetric_memory() const noexcept { return ranks_[0]->symmetric_memory(); }
  /// Whether the ranks all-reduce their residual streams through a PeerExchange (TensorParallelOptions).
  [[nodiscard]] bool peer_all_reduce() const noexcept { return ranks_[0]->peer_all_reduce(); }
  /// The number of ranks.
  [[nodiscard]] int ranks() const noexcept { return static_cast<int>(ranks_.size()); }
  /// Rank r's decoder (its graphs, its KV cache). Its graph(rows) captures on first use, which must happen on every
  /// rank at once: call replay(rows) first, then time rank(r).graph(rows) from any thread.
  [[nodiscard]] BasicDecoder<T>& rank(int r) { return *ranks_.at(static_cast<std::size_t>(r)); }
  /// The config it was built with (the whole model's).
  [[nodiscard]] const DecoderConfig& config() const noexcept { return config_; }

 private:
  DecoderConfig config_;
  std::vector<std::unique_ptr<BasicDecoder<T>>> ranks_;
  std::unique_ptr<detail::RankThreads> threads_;
};

/// The fp16 tensor-parallel decoder.
using TensorParallelDecoder = BasicTensorParallelDecoder<half>;
extern template class BasicTensorParallelDecoder<half>;
extern template class BasicTensorParallelDecoder<bfloat16>;

}  // namespace lazygraph::nn
