#include "lazygraph/nn/decoder_rank.hpp"

#include <string>

#include "lazygraph/driver/memcpy.hpp"
#include "lazygraph/driver/symmetric_buffer.hpp"
#include "lazygraph/nn/decoder_quantization.hpp"
#include "lazygraph/nn/quantized_slice.hpp"

namespace lazygraph::nn {

void check_tensor_split(const DecoderConfig& config, int ranks) {
  config.validate();
  const auto fail = [&](const std::string& why) {
    throw UsageError("a decoder split over " + std::to_string(ranks) + " tensor-parallel ranks: " + why);
  };
  if (ranks < 1) fail("at least one rank");
  if (config.mixture_of_experts() && config.moe.expert_width % (8 * ranks) != 0) {
    fail("moe.expert_width " + std::to_string(config.moe.expert_width) +
         " does not split into shares of a multiple of 8 (each expert's width is cut over the ranks)");
  }
  if (config.qk_norm_whole) {
    fail(
        "tensor parallelism does not split q/k norms over the whole projection (qk_norm_whole: OLMoE's), whose "
        "mean spans every rank's heads");
  }
  if (config.heads % ranks != 0) fail("heads " + std::to_string(config.heads) + " do not divide among the ranks");
  if (config.kv_head_count() % ranks != 0) {
    fail("kv heads " + std::to_string(config.kv_head_count()) + " do not divide among the ranks");
  }
  if (config.vocab % ranks != 0) fail("vocab " + std::to_string(config.vocab) + " does not divide among the ranks");
  if (!config.mixture_of_experts() && config.ffn % (8 * ranks) != 0) {  // experts replace the MLP of ffn
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
  shard.moe.expert_width = config.moe.expert_width / ranks;
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
    case DecoderTensorRole::moe_w1:  // each expert's rows, as W1 and W3
    case DecoderTensorRole::moe_w3:
      return rows(shard.moe.expert_width);
    case DecoderTensorRole::moe_w2:  // each expert's columns, as W2
      return {true, r * static_cast<std::size_t>(shard.moe.expert_width),
              static_cast<std::size_t>(shard.moe.expert_width)};
    case DecoderTensorRole::moe_router:  // every rank routes every row itself: whole
    case DecoderTensorRole::attention_gain:
    case DecoderTensorRole::q_norm:  // a head's gain, the same for every head: whole on every rank
    case DecoderTensorRole::k_norm:
    case DecoderTensorRole::attention_post_gain:
    case DecoderTensorRole::mlp_post_gain:
    case DecoderTensorRole::mlp_gain:
    case DecoderTensorRole::final_gain:
      break;
  }
  return {false, 0, static_cast<std::size_t>(t.rows)};
}

namespace {
/// Dense tensor `t` of the full weights `w` of `c` (a bias: its part of the layer's stacked biases; an expert's
/// matrix, `expert`'s part of the layer's stack).
template <Element T>
DeviceSpan<const T> full_tensor(const BasicDecoderWeights<T>& w, const DecoderConfig& c, const DecoderTensor& t,
                                int expert) {
  const auto l = static_cast<std::size_t>(t.layer < 0 ? 0 : t.layer);
  const BasicAttentionWeights<T>& a = w.attention[l];
  const auto expert_part = [&](const Weight<T>& stack) {
    return stack.dense().subspan(static_cast<std::size_t>(expert) * t.elements(), t.elements());
  };
  switch (t.role) {
    case DecoderTensorRole::embedding:
      return w.embedding.cview();
    case DecoderTensorRole::attention_gain:
      return a.gain.cview();
    case DecoderTensorRole::wq:
      return a.wq(c).dense();
    case DecoderTensorRole::wk:
      return a.wk(c).dense();
    case DecoderTensorRole::wv:
      return a.wv(c).dense();
    case DecoderTensorRole::wo:
      return a.wo.dense();
    case DecoderTensorRole::bq:
      return a.bias_part(c, 0);
    case DecoderTensorRole::bk:
      return a.bias_part(c, 1);
    case DecoderTensorRole::bv:
      return a.bias_part(c, 2);
    case DecoderTensorRole::q_norm:
      return a.q_norm.cview();
    case DecoderTensorRole::k_norm:
      return a.k_norm.cview();
    case DecoderTensorRole::attention_post_gain:
      return a.post_gain.cview();
    case DecoderTensorRole::mlp_post_gain:
      return w.mlp[l].post_gain.cview();
    case DecoderTensorRole::mlp_gain:
      return w.mlp[l].gain.cview();
    case DecoderTensorRole::w1:
      return w.mlp[l].w1.dense();
    case DecoderTensorRole::w3:
      return w.mlp[l].w3.dense();
    case DecoderTensorRole::w2:
      return w.mlp[l].w2.dense();
    case DecoderTensorRole::final_gain:
      return w.final_gain.cview();
    case DecoderTensorRole::lm_head:
      return w.lm_head.dense();
    case DecoderTensorRole::moe_router:
      return w.moe.at(l).router.cview();
    case DecoderTensorRole::moe_w1:
      return expert_part(w.moe.at(l).w1);
    case DecoderTensorRole::moe_w3:
      return expert_part(w.moe.at(l).w3);
    case DecoderTensorRole::moe_w2:
      return expert_part(w.moe.at(l).w2);
  }
  return {};
}
}  // namespace

void check_quantized_split(const DecoderConfig& config, const DecoderQuantization& quantization, int ranks) {
  const DecoderConfig s = shard_config(config, ranks);
  (void)quantized_layouts(s, quantization);
  if (ranks == 1) return;  // one rank takes each matrix whole
  const auto tiles = [&](const std::optional<QuantizedFormat>& format, const std::string& what, int rows) {
    if (format && rows % QuantizedLayout::tile_rows != 0) {
      throw UsageError("a decoder split over " + std::to_string(ranks) + " tensor-parallel ranks with the " + what +
                       " quantized: each rank's " + std::to_string(rows) + " rows of it are not whole tiles of " +
                       std::to_string(QuantizedLayout::tile_rows) + " rows, which a share of a quantized matrix is");
    }
  };
  tiles(quantization.attention, "q projection", s.q_dim());
  tiles(quantization.attention, "k and v projections", s.kv_dim());
  if (config.mixture_of_experts()) {
    tiles(quantization.mlp, "experts' gate and up projections (each expert's share)", s.moe.expert_width);
  } else {
    tiles(quantization.mlp, "gate and up projections", s.ffn);
  }
  tiles(quantization.lm_head, "LM head", s.vocab);
}

template <Element T>
DeviceQuantizedWeight<T> shard_quantized(const Stream& stream, const DeviceQuantizedWeight<T>& whole,
                                         DecoderTensorRole role, const DecoderConfig& config, int rank, int ranks) {
  const DecoderConfig s = shard_config(config, ranks);
  if (rank < 0 || rank >= ranks) {
    throw UsageError("shard_quantized: rank " + std::to_string(rank) + " is outside [0, " + std::to_string(ranks) +
                     ")");
  }
  if (ranks == 1) {  // the whole matrix (one block ending at its last row: any row count)
    const std::vector<QuantizedRowBlock> all{{0, whole.layout().rows()}};
    return quantized_rows(stream, whole, all);
  }
  const auto rows = [&](int count, int first_of_whole = 0) {
    return QuantizedRowBlock{first_of_whole + rank * count, count};
  };
  switch (role) {
    case DecoderTensorRole::wq: {  // the stacked q, k and v: the rank's heads' rows of each
      check_quantized(whole, config.q_dim() + 2 * config.kv_dim(), config.d, 1);
      const std::vector<QuantizedRowBlock> blocks{rows(s.q_dim()), rows(s.kv_dim(), config.q_dim()),
                                                  rows(s.kv_dim(), config.q_dim() + config.kv_dim())};
      return quantized_rows(stream, whole, blocks);
    }
    case DecoderTensorRole::wo:
      check_quantized(whole, config.d, config.q_dim(), 1);
      return quantized_columns(stream, whole, rank * s.q_dim(), s.q_dim());
    case DecoderTensorRole::w2:
      check_quantized(whole, config.d, config.ffn, 1);
      return quantized_columns(stream, whole, rank * s.ffn, s.ffn);
    case DecoderTensorRole::moe_w1:  // each expert's rows of the stack
    case DecoderTensorRole::moe_w3: {
      const int width = config.moe.expert_width;
      check_quantized(whole, config.moe.experts * width, config.d, 1);
      std::vector<QuantizedRowBlock> blocks;
      for (int e = 0; e < config.moe.experts; ++e) blocks.push_back(rows(s.moe.expert_width, e * width));
      return quantized_rows(stream, whole, blocks);
    }
    case DecoderTensorRole::moe_w2:  // each expert's columns: the stack's, every expert's rows alike
      check_quantized(whole, config.moe.experts * config.d, config.moe.expert_width, 1);
      return quantized_columns(stream, whole, rank * s.moe.expert_width, s.moe.expert_width);
    case DecoderTensorRole::w1:
    case DecoderTensorRole::w3:
    case DecoderTensorRole::lm_head: {
      const bool head = role == DecoderTensorRole::lm_head;
      check_quantized(whole, head ? config.vocab : config.ffn, config.d, 1);
      const std::vector<QuantizedRowBlock> blocks{rows(head ? s.vocab : s.ffn)};
      return quantized_rows(stream, whole, blocks);
    }
    default:
      throw UsageError("shard_quantized: tensor " + whole.layout().name() +
                       " is given for a role no quantized matrix holds (wq, wo, w1, w3, w2, the experts' or lm_head)");
  }
}

template <Element T>
BasicDecoderWeights<T> shard_decoder_weights(const Stream& stream, const BasicDecoderWeights<T>& full,
                                             const DecoderConfig& config, int rank, int ranks) {
  const DecoderConfig shard = shard_config(config, ranks);
  if (rank < 0 || rank >= ranks) {
    throw UsageError("shard_decoder_weights: rank " + std::to_string(rank) + " is outside [0, " +
                     std::to_string(ranks) + ")");
  }
  const DecoderQuantization quantization = quantization_of(full);
  check_quantization(config, quantization, scale_type_of<T>);
  check_quantized_split(config, quantization, ranks);  // before anything is allocated
  const std::vector<DecoderTensor> tensors = decoder_tensors(config);
  std::size_t next = 0;
  int expert = 0;  // a layer's experts of a kind come one after another, in expert order
  BasicDecoderWeights<T> out = assemble_decoder_weights<T>(
      stream.device(), shard, [&](const DecoderTensor& t) { return !quantization.format_of(t.role).has_value(); },
      [&](const DecoderTensor&, DeviceSpan<T> into) {
        const DecoderTensor& t = tensors[next++];
        expert = next >= 2 && tensors[next - 2].role == t.role && tensors[next - 2].layer == t.layer ? expert + 1 : 0;
        if (into.empty()) return;  // held quantized
        const DeviceSpan<const T> from = full_tensor(full, config, t, expert);
        const TensorShard part = tensor_shard(t, config, rank, ranks);
        const auto cols = static_cast<std::size_t>(t.cols);
        if (part.columns) {  // `rows` rows of `part.count` columns from column `part.first`
          copy_2d_async(stream, into, part.count, from.subspan(part.first, from.size() - part.first), cols, part.count,
                        static_cast<std::size_t>(t.rows));
        } else {
          copy_async(stream, into, from.subspan(part.first * cols, part.count * cols));
        }
      });
  std::vector<DeviceQuantizedWeight<T>> matrices;  // in quantized_layouts' order
  const auto add = [&](const Weight<T>& whole, DecoderTensorRole role) {
    matrices.push_back(shard_quantized(stream, whole.quantized(), role, config, rank, ranks));
  };
  for (std::size_t l = 0; l < full.attention.size(); ++l) {
    if (quantization.attention) {
      add(full.attention[l].qkv, DecoderTensorRole::wq);
      add(full.attention[l].wo, DecoderTensorRole::wo);
    }
    if (quantization.mlp && config.mixture_of_experts()) {  // the layer's expert stacks in place of its MLP's
      add(full.moe[l].w1, DecoderTensorRole::moe_w1);
      add(full.moe[l].w3, DecoderTensorRole::moe_w3);
      add(full.moe[l].w2, DecoderTensorRole::moe_w2);
    } else if (quantization.mlp) {
      add(full.mlp[l].w1, DecoderTensorRole::w1);
      add(full.mlp[l].w3, DecoderTensorRole::w3);
      add(full.mlp[l].w2, DecoderTensorRole::w2);
    }
  }
  if (quantization.lm_head) add(full.lm_head, DecoderTensorRole::lm_head);
  stream.synchronize();
  adopt_quantized(stream, out, shard, quantization, std::move(matrices));
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

template DeviceQuantizedWeight<half> shard_quantized(const Stream&, const DeviceQuantizedWeight<half>&,
                                                     DecoderTensorRole, const DecoderConfig&, int, int);
template DeviceQuantizedWeight<bfloat16> shard_quantized(const Stream&, const DeviceQuantizedWeight<bfloat16>&,
                                                         DecoderTensorRole, const DecoderConfig&, int, int);
template BasicDecoderWeights<half> shard_decoder_weights(const Stream&, const BasicDecoderWeights<half>&,
                                                         const DecoderConfig&, int, int);
template BasicDecoderWeights<bfloat16> shard_decoder_weights(const Stream&, const BasicDecoderWeights<bfloat16>&,
                                                             const DecoderConfig&, int, int);
template struct BasicRankState<half>;
template struct BasicRankState<bfloat16>;

}  // namespace lazygraph::nn
