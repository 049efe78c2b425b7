#include "lazygraph/nn/decoder_tiles.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace lazygraph::nn {

namespace {
template <Element T, class Signature>
TileFunction<Signature> tile_of(const KernelLibrary& library, const std::string& name) {
  return library.tile<Signature>(name + std::string(kernel_suffix<T>));
}
}  // namespace

template <Element T>
BasicDecoderTiles<T>::BasicDecoderTiles(const KernelLibrary& library)
    : embedding(tile_of<T, typename decltype(embedding)::Signature>(library, "embedding_tile")),
      qkv_rope_append(tile_of<T, typename decltype(qkv_rope_append)::Signature>(library, "qkv_rope_append_mma_tile")),
      attention(tile_of<T, typename decltype(attention)::Signature>(library, "attention_tile")),
      gemv_add(tile_of<T, typename decltype(gemv_add)::Signature>(library, "gemv_add_mma_tile")),
      rms_norm_gemv(tile_of<T, typename decltype(rms_norm_gemv)::Signature>(library, "rms_norm_gemv_mma_tile")),
      rms_norm_gemv_swiglu(
          tile_of<T, typename decltype(rms_norm_gemv_swiglu)::Signature>(library, "rms_norm_gemv_swiglu_mma_tile")),
      sample(tile_of<T, typename decltype(sample)::Signature>(library, "sample_tile")),
      argmax_chunk(tile_of<T, typename decltype(argmax_chunk)::Signature>(library, "argmax_chunk_tile")),
      argmax_final(library.tile<typename decltype(argmax_final)::Signature>("argmax_final_tile")),
      quantized_qkv_rope_append(library, "quantized_qkv_rope_append_tile" + std::string(kernel_suffix<T>)),
      qgemv_add(library, "qgemv_add_tile" + std::string(kernel_suffix<T>)),
      rms_norm_qgemv(library, "rms_norm_qgemv_tile" + std::string(kernel_suffix<T>)),
      rms_norm_qgemv_swiglu(library, "rms_norm_qgemv_swiglu_tile" + std::string(kernel_suffix<T>)) {}

template <Element T>
std::vector<TileCall> decoder_step_tiles(const BasicDecoderTiles<T>& tiles, const BasicDecoderWeights<T>& w,
                                         BasicDecoderState<T>& s, const DecoderConfig& c, int rows,
                                         const Sampling& sampling, unsigned blocks) {
  c.validate();
  if (c.backend != DecoderBackend::persistent) {
    throw UsageError("decoder_step_tiles: the config's backend is not DecoderBackend::persistent");
  }
  if (rows < 1 || rows > kMaxRows) {
    throw UsageError("decoder_step_tiles: rows (" + std::to_string(rows) + ") must be 1 to " +
                     std::to_string(kMaxRows));
  }
  const auto quantized = [](const Weight<T>& m) { return format_traits(m.format()).quantized; };
  if (blocks == 0) throw UsageError("decoder_step_tiles: blocks must be positive");
  // Tiles of persistent_tile_rows rows, or one per block: a tile runs its share of groups of 8 rows (gemv_rows_mma).
  const auto tiles_of = [&](int weight_rows) {
    const auto groups = static_cast<unsigned>((weight_rows + 7) / 8);
    const unsigned tiles =
        c.persistent_tile_rows > 0
            ? static_cast<unsigned>((weight_rows + c.persistent_tile_rows - 1) / c.persistent_tile_rows)
            : std::min(groups, blocks);
    return TileConfig{{tiles, 1, 1}};
  };
  // A quantized projection's tiles: as many as a dense one's, each walking tiles of 16 weight rows, with the partial
  // sums of `matrices` matrices in its shared memory.
  const auto quantized_tiles_of = [&](int weight_rows, int matrices) {
    const auto sixteens = static_cast<unsigned>((weight_rows + 15) / 16);
    const int tile_rows = (c.persistent_tile_rows + 15) / 16 * 16;
    const unsigned tiles = c.persistent_tile_rows > 0 ? static_cast<unsigned>((weight_rows + tile_rows - 1) / tile_rows)
                                                      : std::min(sixteens, blocks);
    return TileConfig{{tiles, 1, 1}, quantized_tile_shared_bytes(matrices, c.persistent.threads)};
  };
  const int d = c.d;
  const int q_dim = c.q_dim();
  const int qkv_rows = q_dim + 2 * c.kv_dim();
  const float scale = c.score_scale();
  const std::size_t cache_size = static_cast<std::size_t>(c.max_batch) * static_cast<std::size_t>(c.context) *
                                 static_cast<std::size_t>(c.kv_dim());
  const TileConfig per_head{{static_cast<unsigned>(c.heads), static_cast<unsigned>(rows), 1},
                            static_cast<unsigned>(c.context) * static_cast<unsigned>(sizeof(float))};
  std::vector<TileCall> calls;
  calls.reserve(4 + 5 * static_cast<std::size_t>(c.layers));
  calls.push_back(
      tiles.embedding({{static_cast<unsigned>(rows), 1, 1}}, w.embedding.cview(), s.tokens(), s.x.view(), d, rows));
  for (int l = 0; l < c.layers; ++l) {
    const BasicAttentionWeights<T>& a = w.attention[static_cast<std::size_t>(l)];
    const BasicSwigluWeights<T>& m = w.mlp[static_cast<std::size_t>(l)];
    const std::size_t offset = static_cast<std::size_t>(l) * cache_size;
    const DeviceSpan<T> k_cache = s.k_cache.view().subspan(offset, cache_size);
    const DeviceSpan<T> v_cache = s.v_cache.view().subspan(offset, cache_size);
    if (quantized(a.qkv)) {
      calls.push_back(tiles.quantized_qkv_rope_append(
          quantized_tiles_of(qkv_rows, 1), a.qkv.matrix(), a.bias.empty() ? DeviceSpan<const T>{} : a.bias.cview(),
          s.x.cview(), a.gain.cview(), s.q.view(), k_cache, v_cache, s.positions(), s.slots(), d, q_dim,
          c.kv_head_count(), c.head_dim(), c.context, c.max_batch, s.rope_frequencies.cview(), c.eps, rows));
    } else {
      calls.push_back(tiles.qkv_rope_append(
          tiles_of(qkv_rows), a.wq(c).dense(), a.wk(c).dense(), a.wv(c).dense(), a.bias_part(c, 0), a.bias_part(c, 1),
          a.bias_part(c, 2), s.x.cview(), a.gain.cview(), s.q.view(), k_cache, v_cache, s.positions(), s.slots(), d,
          q_dim, c.kv_head_count(), c.head_dim(), c.context, c.max_batch, s.rope_frequencies.cview(), c.eps, rows));
    }
    calls.push_back(tiles.attention(per_head, s.q.cview(), k_cache.as_const(), v_cache.as_const(), s.attn.view(),
                                    s.positions(), s.slots(), c.heads, c.kv_head_count(), c.head_dim(), c.context,
                                    c.max_batch, scale));
    // out += W x: the output projection and the down projection, each in its weight's format
    const auto add = [&](const Weight<T>& weight, DeviceSpan<const T> x, int cols) {
      return quantized(weight)
                 ? tiles.qgemv_add(quantized_tiles_of(d, 1), weight.matrix(), x, s.x.view(), d, cols, rows)
                 : tiles.gemv_add(tiles_of(d), weight.dense(), x, s.x.view(), d, cols, rows);
    };
    calls.push_back(add(a.wo, s.attn.cview(), q_dim));
    if (quantized(m.w1)) {
      calls.push_back(tiles.rms_norm_qgemv_swiglu(quantized_tiles_of(c.ffn, 2), m.w1.matrix(), m.w3.matrix(),
                                                  s.x.cview(), m.gain.cview(), s.act.view(), c.ffn, d, c.eps, rows));
    } else {
      calls.push_back(tiles.rms_norm_gemv_swiglu(tiles_of(c.ffn), m.w1.dense(), m.w3.dense(), s.x.cview(),
                                                 m.gain.cview(), s.act.view(), c.ffn, d, c.eps, rows));
    }
    calls.push_back(add(m.w2, s.act.cview(), c.ffn));
  }
  calls.push_back(quantized(w.lm_head)
                      ? tiles.rms_norm_qgemv(quantized_tiles_of(c.vocab, 1), w.lm_head.matrix(), s.x.cview(),
                                             w.final_gain.cview(), s.logits.view(), c.vocab, d, c.eps, rows)
                      : tiles.rms_norm_gemv(tiles_of(c.vocab), w.lm_head.dense(), s.x.cview(), w.final_gain.cview(),
                                            s.logits.view(), c.vocab, d, c.eps, rows));
  if (sampling.temperature > 0) {
    calls.push_back(tiles.sample({{static_cast<unsigned>(rows), 1, 1}}, s.logits.cview(), s.next.view(), s.positions(),
                                 s.slots(), c.vocab, sampling.top_k, sampling.temperature,
                                 static_cast<unsigned>(sampling.seed), sampling.top_p));
  } else {
    // Chunks of at least 2048 logits (8 per thread of a 256-thread block), a multiple of 8, at most kArgmaxChunks.
    const int chunks = std::clamp(c.vocab / 2048, 1, kArgmaxChunks);
    const int chunk = ((c.vocab + chunks - 1) / chunks + 7) / 8 * 8;
    const auto used = static_cast<std::size_t>(rows) * static_cast<std::size_t>(chunks);
    calls.push_back(tiles.argmax_chunk({{static_cast<unsigned>(chunks), static_cast<unsigned>(rows), 1}},
                                       s.logits.cview(), s.argmax_values.view().subspan(0, used),
                                       s.argmax_indices.view().subspan(0, used), c.vocab, chunk));
    calls.push_back(tiles.argmax_final({{static_cast<unsigned>(rows), 1, 1}}, s.argmax_values.cview().subspan(0, used),
                                       s.argmax_indices.cview().subspan(0, used), s.next.view(), chunks));
  }
  return calls;
}

template struct BasicDecoderTiles<half>;
template struct BasicDecoderTiles<bfloat16>;
template std::vector<TileCall> decoder_step_tiles(const BasicDecoderTiles<half>&, const BasicDecoderWeights<half>&,
                                                  BasicDecoderState<half>&, const DecoderConfig&, int, const Sampling&,
                                                  unsigned);
template std::vector<TileCall> decoder_step_tiles(const BasicDecoderTiles<bfloat16>&,
                                                  const BasicDecoderWeights<bfloat16>&, BasicDecoderState<bfloat16>&,
                                                  const DecoderConfig&, int, const Sampling&, unsigned);

}  // namespace lazygraph::nn
