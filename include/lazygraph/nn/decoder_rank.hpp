#pragma once
/// \file
/// One rank of a decoder split over tensor-parallel ranks, Megatron style: what the rank holds and what its step
/// computes. A Decoder made with a Communicator (BasicDecoder's rank constructor) is such a rank; every path of the
/// Decoder (forward, forward_batch, prefill on tensor cores or through the step graphs, generate's device loop,
/// sampling) runs on it, with the collectives inside its graphs. Rank r of N holds:
///
///   - heads / N query heads and kv_heads / N key/value heads: their rows of Wq, Wk, Wv (and biases), the columns of
///     Wo that read them, their KV cache;
///   - ffn / N rows of W1 and W3 and the matching columns of W2; in a mixture of experts (DecoderConfig::moe), the
///     router whole and expert_width / N rows of every expert's W1 and W3 and the matching columns of its W2;
///   - vocab / N rows of the embedding and of the LM head (rows [r vocab / N, (r + 1) vocab / N));
///   - the norm gains whole.
///
/// Its step, for `rows` rows (x replicated on every rank):
///
///     x = all_reduce_sum(embedding rows of its vocabulary, zeros for other tokens)
///     per layer: attn = attention_heads(x)
///                x = all_reduce_sum(rank 0: x + Wo_0 attn_0, rank r: Wo_r attn_r)        (RankProjectionOp)
///                act = swiglu(W1, W3, rms_norm(x))
///                x = all_reduce_sum(rank 0: x + W2_0 act_0,  rank r: W2_r act_r)          (RankProjectionOp)
///                or, with experts: every rank routes every row itself (the same x, router and kernels: the same
///                choice), then x = all_reduce_sum(rank 0: x + experts_0(h), rank r: experts_r(h)), experts_r the
///                chosen experts' weighted sum over the rank's share of their width        (moe_block)
///     logits = all_gather(LM head rows of its vocabulary), then the sampler over the whole vocabulary
///
/// Every rank ends with the same logits and draws the same token (the sampler depends on the logits, the seed, the
/// position and the sequence only), so every rank takes the same turns through generate. One rank of one computes
/// the single-GPU Decoder's bits exactly (an all-reduce and an all-gather of one rank copy). Dense or weight-only
/// quantized weights (a rank's quantized matrices are its shares of the whole model's: shard_quantized), the graph
/// backend; prompts on tensor cores run prefill_layer with the same collectives (nn/prefill.hpp).

#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "lazygraph/nn/decoder_step.hpp"
#include "lazygraph/nn/decoder_tensors.hpp"
#include "lazygraph/nn/detail/one_of_op.hpp"
#include "lazygraph/nn/detail/rank_ops.hpp"
#include "lazygraph/nn/peer_all_reduce.hpp"
#include "lazygraph/nn/quantization_config.hpp"
#include "lazygraph/nn/quantized_kernels.hpp"
#include "lazygraph/nn/swiglu.hpp"
#include "lazygraph/nn/tensor_parallel_options.hpp"
#include "lazygraph/ops/collective.hpp"
#include "lazygraph/ops/collective_log.hpp"
#include "lazygraph/ops/copy.hpp"

namespace lazygraph::nn {

/// \throws UsageError unless `config` is valid (DecoderConfig::validate) and splits over `ranks` (1 or more): heads,
/// kv heads and vocab divisible by it, ffn (and a mixture of experts' expert_width) into shards of a multiple of 8, the
/// graph backend, and no q/k norms over the whole projection (DecoderConfig::qk_norm_whole); naming the numbers or the
/// feature.
void check_tensor_split(const DecoderConfig& config, int ranks);

/// The shapes of one rank's weights (see the file comment): heads / ranks, kv_heads / ranks (head_width written out),
/// ffn / ranks, moe.expert_width / ranks, vocab / ranks; the rest as `config`. \throws UsageError as
/// check_tensor_split.
[[nodiscard]] DecoderConfig shard_config(const DecoderConfig& config, int ranks);

/// Which part of a tensor a rank holds: `count` rows (or columns, for Wo, W2 and an expert's W2) from `first`; the
/// whole tensor for a gain and a router. Rows of a bias are its elements.
struct TensorShard {
  bool columns = false;   ///< a block of columns (Wo, W2) rather than of rows
  std::size_t first = 0;  ///< the first row or column
  std::size_t count = 0;  ///< rows or columns
};

/// Rank `rank` of `ranks`'s part of tensor `t` of the full model `config` (decoder_tensors(config)).
/// \throws UsageError as check_tensor_split, and for a rank outside [0, ranks).
[[nodiscard]] TensorShard tensor_shard(const DecoderTensor& t, const DecoderConfig& config, int rank, int ranks);

/// \throws UsageError unless `quantization`'s formats fit the shares of `config`'s decoder over `ranks` (1 or more):
/// check_tensor_split; every quantized matrix of the rank's shapes valid (quantized_layouts of shard_config: an int4
/// group must divide the rank's columns of Wo, W2 and each expert's W2); and with more than one rank, the rows each
/// rank takes of a quantized matrix whole tiles of 16 rows (its q rows and its k and v rows, its rows of W1 and W3 or
/// of each expert's, of the LM head); naming the tensor or the rows.
void check_quantized_split(const DecoderConfig& config, const DecoderQuantization& quantization, int ranks);

/// Rank `rank` of `ranks`'s share of `whole`, the quantized matrix of `config`'s decoder that holds the tensors of
/// `role` (wq: the layer's q, k and v stacked, of which the rank takes its heads' rows of each; wo and w2: its columns;
/// w1, w3 and the LM head: its rows; moe_w1 and moe_w3, a layer's experts stacked: its rows of each expert; moe_w2:
/// its columns of every expert's), cut out of the stored bytes by quantized_rows or quantized_columns: the share
/// dequantizes to exactly the rank's part of the whole matrix's dequantized weights (int8's row scales, chosen over
/// whole rows, are kept). Waits for the copies. \throws UsageError as tensor_shard; naming the tensor when `whole` is
/// not of the role's shape, the role is not a quantized matrix's, or the share does not lie on whole tiles of 16 rows
/// or, for int4, on whole groups (quantized_rows, quantized_columns).
template <Element T>
[[nodiscard]] DeviceQuantizedWeight<T> shard_quantized(const Stream& stream, const DeviceQuantizedWeight<T>& whole,
                                                       DecoderTensorRole role, const DecoderConfig& config, int rank,
                                                       int ranks);

/// Rank `rank` of `ranks`'s weights, copied on `stream` out of the full weights `full` of `config` on the same device
/// (the seeded weights, say, or those quantized by quantize_decoder_weights): dense tensors as tensor_shard says,
/// quantized matrices by shard_quantized, in the same classes and formats (quantization_of). Waits for the copies.
/// \throws UsageError, before anything is allocated, as tensor_shard, quantization_of and check_quantized_split (a
/// format that does not fit the rank's shares), naming the tensor; as shard_quantized.
template <Element T>
[[nodiscard]] BasicDecoderWeights<T> shard_decoder_weights(const Stream& stream, const BasicDecoderWeights<T>& full,
                                                           const DecoderConfig& config, int rank, int ranks);

/// What a rank's step needs besides the Decoder's state: its communicator and the LM head's share of the logits.
template <Element T>
struct BasicRankState {
  /// Buffers for the whole vocabulary of `state` (its logits' row length: state.logits.size() / kMaxRows) over
  /// comm.size() ranks, on comm's device. With options.symmetric_memory, where NCCL has symmetric memory and
  /// registers it, these buffers and the state's x and logits (moved there: its buffers then adopt the symmetric
  /// memory) lie in NCCL symmetric windows; every rank must make its state at the same time (the registration is
  /// collective). Else plain device memory.
  BasicRankState(const Communicator& comm, BasicDecoderState<T>& state, const TensorParallelOptions& options);
  Communicator comm;              ///< this rank's
  bool symmetric_memory = false;  ///< whether x, the logits and these buffers lie in NCCL symmetric memory
  DeviceBuffer<T> logits_part;    ///< this rank's logits [kMaxRows][vocab / ranks]
  /// The ranks' logits as all_gather lays them out for steps of 2 rows or more, [ranks][rows][vocab / ranks], before
  /// they are copied into the state's [rows][vocab] (a step of one row gathers straight there).
  DeviceBuffer<T> gathered;
  /// The rank's share of a PeerExchange over every rank's GPU (ranks of one process), or none: the step's all-reduces
  /// of x go through it where they fit (peer_all_reduce), through NCCL where not.
  std::optional<PeerExchange> peer;
  /// With `peer`: the all-reduces after the output projections (Wo, W2) run inside the projection's kernel
  /// (gemv_all_reduce) where they fit (TensorParallelOptions::fused_peer_all_reduce).
  bool fused_projections = true;
};

/// A rank's in-place all-reduce of x (reads and writes x): peer_all_reduce where the rank has a PeerExchange and x
/// fits it, else NCCL's all_reduce.
template <Element T>
class [[nodiscard]] RankAllReduceOp
    : public detail::OneOfOp<RankAllReduceOp<T>, CollectiveOp<T>, detail::PeerAllReduceOp<T>> {
 public:
  /// The peer form where `r` has a PeerExchange and x fits it, else NCCL's. \throws UsageError as either form.
  RankAllReduceOp(const BasicKernels<T>& k, const BasicRankState<T>& r, DeviceSpan<T> x)
      : RankAllReduceOp::OneOfOp(r.peer && fits_peer_all_reduce<T>(x.size()) ? Form(peer_all_reduce(k, *r.peer, x))
                                                                             : Form(all_reduce(r.comm, x))) {}

 private:
  using Form = std::variant<CollectiveOp<T>, detail::PeerAllReduceOp<T>>;
};

/// A rank's row-parallel output projection and the all-reduce after it: x[b] += the sum over the ranks of their
/// w a[b] (w the rank's [rows x cols] columns of Wo or W2, in any format); reads w and a, reads and writes x. Through
/// the PeerExchange, one kernel (project_all_reduce) where the rank fuses its projections
/// (BasicRankState::fused_projections) and the shape fits. Else the projection (rank 0 adding x, the others
/// overwriting it) followed by RankAllReduceOp.
template <Element T>
class [[nodiscard]] RankProjectionOp : public detail::OneOfOp<RankProjectionOp<T>, ProjectAllReduceOp<T>,
                                                              detail::SequenceOp<ProjectOp<T>, RankAllReduceOp<T>>> {
 public:
  /// The chosen form for a projection of `rows` outputs (d) and `cols` inputs for `batch` vectors, x of every row of
  /// the state. \throws UsageError as either form.
  RankProjectionOp(const Projector<T>& p, const BasicRankState<T>& r, const Weight<T>& w, DeviceSpan<const T> a,
                   DeviceSpan<T> x, int rows, int cols, int batch)
      : RankProjectionOp::OneOfOp(
            r.peer && r.fused_projections && fits_gemv_all_reduce(rows, batch)
                ? Form(std::in_place_index<0>, project_all_reduce(p, *r.peer, w, a, x, rows, cols, batch))
                : Form(std::in_place_index<1>, project(p, w, a, x, rows, cols, batch, r.comm.rank() == 0) >>
                                                   RankAllReduceOp<T>(p.dense, r, reduced(x, rows, batch)))) {}

 private:
  using Form = std::variant<ProjectAllReduceOp<T>, detail::SequenceOp<ProjectOp<T>, RankAllReduceOp<T>>>;
  /// The part of x a projection of `rows` outputs for `batch` vectors writes.
  static DeviceSpan<T> reduced(DeviceSpan<T> x, int rows, int batch) {
    return x.subspan(0, static_cast<std::size_t>(rows) * static_cast<std::size_t>(batch));
  }
};

/// One step of `rows` rows on the rank of `r` (see the file comment): `c` is shard_config's (vocab: this rank's
/// rows), `s` a state of the whole vocabulary's logits. Each matrix runs on the kernels of its format
/// (projection.hpp), as decoder_step's. \throws UsageError as attention_heads, swiglu_gate_up, RankProjectionOp and
/// lm_head_logits.
template <Element T>
auto decoder_rank_step(const Projector<T>& p, const BasicDecoderWeights<T>& w, BasicDecoderState<T>& s,
                       BasicRankState<T>& r, const DecoderConfig& c, int rows, const Sampling& sampling) {
  const BasicKernels<T>& k = p.dense;
  const int n = r.comm.size();
  const int rank = r.comm.rank();
  const int d = c.d;
  const int part = c.vocab;
  const int vocab = part * n;
  const auto count = static_cast<std::size_t>(rows);
  const auto parts = static_cast<std::size_t>(part);
  const DeviceSpan<T> x = s.x.view().subspan(0, count * static_cast<std::size_t>(d));
  std::vector<decltype(k.scale(LaunchConfig{}, x, 0LL, 0.0F))> scaled;  // the embedding's scale, where not 1
  if (c.embedding_scale != 1.0F) {
    scaled.push_back(k.scale(k.step_config(grid_for(x.size(), 256)), x, static_cast<long long>(x.size()),
                             T::from_float(c.embedding_scale).to_float()));
  }
  auto embedding = k.embedding_rows(k.step_config(grid_for(count * static_cast<std::size_t>(d), 256)),
                                    w.embedding.cview(), s.tokens(), s.x.view(), d, rows, rank * part, part) >>
                   RankAllReduceOp<T>(k, r, x) >> chain(std::move(scaled));
  const std::size_t cache_size = static_cast<std::size_t>(c.max_batch) * static_cast<std::size_t>(c.context) *
                                 static_cast<std::size_t>(c.kv_dim());
  const auto layer = [&](int l) {
    const auto at = static_cast<std::size_t>(l);
    const std::string name = "layer " + std::to_string(l);
    const BasicAttentionWeights<T>& attention = w.attention[at];
    const BasicSwigluWeights<T>& mlp = w.mlp[at];
    // A row-parallel projection into x: its all-reduce inside or after it (RankProjectionOp); with post-norms, into
    // the block's output, all-reduced, then normed into x (the norm needs the whole sum).
    const auto project = [&](const Weight<T>& weight, DeviceSpan<const T> a, int cols,
                             const DeviceBuffer<T>& post_gain) {
      return detail::either(
          c.post_norms,
          [&] {
            const DeviceSpan<T> out = s.block_out.view().subspan(0, x.size());
            return nn::project(p, weight, a, out, d, cols, rows, false) >> RankAllReduceOp<T>(k, r, out) >>
                   k.rms_norm_add(k.step_config({{static_cast<unsigned>(rows), 1, 1}, {256, 1, 1}, 0}),
                                  s.block_out.cview(), post_gain.cview(), s.x.view(), d, c.eps);
          },
          [&] { return RankProjectionOp<T>(p, r, weight, a, s.x.view(), d, cols, rows); });
    };
    return named(name + " attention",
                 attention_heads(p, attention, s, s.k_cache.view().subspan(at * cache_size, cache_size),
                                 s.v_cache.view().subspan(at * cache_size, cache_size), c, rows, l) >>
                     project(attention.wo, s.attn.cview(), c.q_dim(), attention.post_gain)) >>
           named(name + " mlp",
                 detail::either(
                     c.mixture_of_experts(),
                     [&] {  // the rank's share of every expert's width; x cleared on ranks other than 0
                       return moe_block(p, mlp, w.moe.at(at), s, c, rows, l, rank == 0) >> RankAllReduceOp<T>(k, r, x);
                     },
                     [&] {
                       return swiglu_gate_up(p, mlp, s.x.cview(), s.act.view(), d, c.ffn, c.eps, rows, c.activation) >>
                              project(mlp.w2, s.act.cview(), c.ffn, mlp.post_gain);
                     }));
  };
  std::vector<decltype(layer(0))> layers;
  layers.reserve(static_cast<std::size_t>(c.layers));
  for (int l = 0; l < c.layers; ++l) layers.push_back(layer(l));
  const DeviceSpan<const T> mine = r.logits_part.cview().subspan(0, count * parts);
  // Steps of several rows: rank q's [rows][vocab / ranks] block of `gathered` into columns [q part, (q + 1) part).
  std::vector<DeviceCopy2dOp<T>> spread;
  for (int q = 0; q < n; ++q) {
    const auto first = static_cast<std::size_t>(q) * parts;
    spread.push_back(copy_2d(s.logits.view().subspan(first, s.logits.size() - first), static_cast<std::size_t>(vocab),
                             r.gathered.cview().subspan(first * count, count * parts), parts, parts, count));
  }
  // Both branches are built (choose), each with sizes valid for any row count; one row gathers straight into the
  // state's logits, whose first row is then laid out as the whole vocabulary.
  const std::size_t all = static_cast<std::size_t>(n) * count * parts;
  auto gather = choose(rows == 1, all_gather<T>(r.comm, mine, s.logits.view().subspan(0, all)),
                       all_gather<T>(r.comm, mine, r.gathered.view().subspan(0, all)) >> chain(std::move(spread)));
  return named("embedding", std::move(embedding)) >> chain(std::move(layers)) >>
         named("lm head",
               lm_head_logits(p, w, s.x.cview(), r.logits_part.view(), part, d, c.eps, rows, c.logit_softcap) >>
                   std::move(gather) >>
                   next_tokens(k, s.logits.cview(), s.next.view(), s.positions(), s.slots(), vocab, rows, sampling));
}

extern template struct BasicRankState<half>;
extern template struct BasicRankState<bfloat16>;

}  // namespace lazygraph::nn
