#include "lazygraph/nn/decoder_rank.hpp"

#include <string>

#include "lazygraph/driver/memcpy.hpp"
#include "lazygraph/driver/symmetric_buffer.hpp"

namespace lazygraph::nn {

void check_tensor_split(const DecoderConfig& config, int ranks) {
  config.validate();
  const auto fail = [&](const std::string& why) {
    throw UsageError("a decoder split over " + std::to_string(ranks) + " tensor-parallel ranks: " + why);
  };
  if (ranks < 1) fail("at least one rank");
  if (config.heads % ranks != 0) fail("heads " + std::to_string(config.heads) + " do not divide among the ranks");
  if (config.kv_head_count() % ranks != 0) {
    fail("kv heads " + std::to_string(config.kv_head_count()) + " do not divide among the ranks");
  }
  if (config.vocab % ranks != 0) fail("vocab " + std::to_string(config.vocab) + " does not divide among the ranks");
  if (config.ffn % (8 * ranks) != 0) {
    fail("ffn " + std::to_string(config.ffn) + " does not split into shards of a multiple of 8");
  }
  if (config.backend != DecoderBackend::graph) fail("the graph backend only (DecoderBackend::graph)");
}

DecoderConfig shard_config(const DecoderConfig& config, int ranks) {
  check_tensor_split(config, ranks);
  DecoderConfig shard = config;
  shard.head_width = config.head_dim();
  shard.heads = config.heads / ranks;
  shard.kv_heads = config.kv_head_count() / ranks;
  shard.ffn = config.ffn / ranks;
  shard.vocab = config.vocab / ranks;
  return shard;
}

TensorShard tensor_shard(const DecoderTensor& t, const DecoderConfig& config, int rank, int ranks) {
  const DecoderConfig shard = shard_config(config, ranks);
  if (rank < 0 || rank >= ranks) {
    throw UsageError("tensor_shard: rank " + std::to_string(rank) + " is outside [0, " + std::to_string(ranks) + ")");
  }
  const auto r = static_cast<std::size_t>(rank);
  const auto rows = [&](int per_rank) {
    return TensorShard{false, r * static_cast<std::size_t>(per_rank), static_cast<std::size_t>(per_rank)};
  };
  switch (t.role) {
    case DecoderTensorRole::embedding:
    case DecoderTensorRole::lm_head:
      return rows(shard.vocab);
    case DecoderTensorRole::wq:
    case DecoderTensorRole::bq:
      return rows(shard.q_dim());
    case DecoderTensorRole::wk:
    case DecoderTensorRole::wv:
    case DecoderTensorRole::bk:
    case DecoderTensorRole::bv:
      return rows(shard.kv_dim());
    case DecoderTensorRole::wo:
      return {true, r * static_cast<std::size_t>(shard.q_dim()), static_cast<std::size_t>(shard.q_dim())};
    case DecoderTensorRole::w1:
    case DecoderTensorRole::w3:
      return rows(shard.ffn);
    case DecoderTensorRole::w2:
      return {true, r * static_cast<std::size_t>(shard.ffn), static_cast<std::size_t>(shard.ffn)};
    case DecoderTensorRole::attention_gain:
    case DecoderTensorRole::mlp_gain:
    case DecoderTensorRole::final_gain:
      break;
  }
  return {false, 0, static_cast<std::size_t>(t.rows)};
}

namespace {
/// Tensor `t` of the full weights `w` of `c`.
template <Element T>
DeviceSpan<const T> full_tensor(const BasicDecoderWeights<T>& w, const DecoderConfig& c, const DecoderTensor& t) {
  const auto l = static_cast<std::size_t>(t.layer < 0 ? 0 : t.layer);
  switch (t.role) {
    case DecoderTensorRole::embedding:
      return w.embedding.cview();
    case DecoderTensorRole::attention_gain:
      return w.attention[l].gain.cview();
    case DecoderTensorRole::wq:
      return w.attention[l].wq(c);
    case DecoderTensorRole::wk:
      return w.attention[l].wk(c);
    case DecoderTensorRole::wv:
      return w.attention[l].wv(c);
    case DecoderTensorRole::wo:
      return w.attention[l].wo.cview();
    case DecoderTensorRole::bq:
      return w.attention[l].bq.cview();
    case DecoderTensorRole::bk:
      return w.attention[l].bk.cview();
    case DecoderTensorRole::bv:
      return w.attention[l].bv.cview();
    case DecoderTensorRole::mlp_gain:
      return w.mlp[l].gain.cview();
    case DecoderTensorRole::w1:
      return w.mlp[l].w1.cview();
    case DecoderTensorRole::w3:
      return w.mlp[l].w3.cview();
    case DecoderTensorRole::w2:
      return w.mlp[l].w2.cview();
    case DecoderTensorRole::final_gain:
      return w.final_gain.cview();
    case DecoderTensorRole::lm_head:
      return w.lm_head.cview();
  }
  return {};
}
}  // namespace

template <Element T>
BasicDecoderWeights<T> shard_decoder_weights(const Stream& stream, const BasicDecoderWeights<T>& full,
                                             const DecoderConfig& config, int rank, int ranks) {
  if (full.quantized()) {
    throw UsageError(
        "shard_decoder_weights: the weights are quantized in part; a tensor-parallel rank runs dense ones");
  }
  const DecoderConfig shard = shard_config(config, ranks);
  const std::vector<DecoderTensor> tensors = decoder_tensors(config);
  std::size_t next = 0;
  BasicDecoderWeights<T> out =
      assemble_decoder_weights<T>(stream.device(), shard, [&](const DecoderTensor&, DeviceSpan<T> into) {
        const DecoderTensor& t = tensors[next++];
        const DeviceSpan<const T> from = full_tensor(full, config, t);
        const TensorShard part = tensor_shard(t, config, rank, ranks);
        const auto cols = static_cast<std::size_t>(t.cols);
        if (part.columns) {  // `rows` rows of `part.count` columns from column `part.first`
          copy_2d_async(stream, into, part.count, from.subspan(part.first, from.size() - part.first), cols, part.count,
                        static_cast<std::size_t>(t.rows));
        } else {
          copy_async(stream, into, from.subspan(part.first * cols, part.count * cols));
        }
      });
  stream.synchronize();
  return out;
}

namespace {
/// `count` elements of symmetric memory for this rank (registered with its peers), as a DeviceBuffer.
template <Element T>
DeviceBuffer<T> symmetric(const Communicator& comm, std::size_t count) {
  return DeviceBuffer<T>::adopt(comm.device(), SymmetricBuffer<T>::create(comm, count).view());
}
}  // namespace

template <Element T>
BasicRankState<T>::BasicRankState(const Communicator& comm_in, BasicDecoderState<T>& state,
                                  const TensorParallelOptions& options)
    : comm(comm_in),
      logits_part(comm.device(), state.logits.size() / static_cast<std::size_t>(comm.size())),
      gathered(comm.device(), state.logits.size()),
      fused_projections(options.fused_peer_all_reduce) {
  if (!options.symmetric_memory || !SymmetricBuffer<T>::supported()) return;
  try {
    DeviceBuffer<T> x = symmetric<T>(comm, state.x.size());
    DeviceBuffer<T> logits = symmetric<T>(comm, state.logits.size());
    DeviceBuffer<T> part = symmetric<T>(comm, logits_part.size());
    DeviceBuffer<T> all = symmetric<T>(comm, gathered.size());
    state.x = std::move(x);
    state.logits = std::move(logits);
    logits_part = std::move(part);
    gathered = std::move(all);
    symmetric_memory = true;
  } catch (const NcclError&) {  // NOLINT(bugprone-empty-catch): registration refused (no cuMem): plain memory
  }
}

template BasicDecoderWeights<half> shard_decoder_weights(const Stream&, const BasicDecoderWeights<half>&,
                                                         const DecoderConfig&, int, int);
template BasicDecoderWeights<bfloat16> shard_decoder_weights(const Stream&, const BasicDecoderWeights<bfloat16>&,
                                                             const DecoderConfig&, int, int);
template struct BasicRankState<half>;
template struct BasicRankState<bfloat16>;

}  // namespace lazygraph::nn
