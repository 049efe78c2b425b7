#pragma once
/// \file
/// Layer 6, nn: a mixture of experts' layer of a prefill chunk on tensor cores (DecoderConfig::moe; prefill.hpp runs
/// the rest of the layer). After the chunk's rows are normed into h, over its M rows (kernels/nn/moe_prefill.cu):
///
///   logits = h Wr^T                               the router as a cuBLASLt GEMM (experts x d), rounded to T
///   ids, weights = route(logits)                  moe_prefill_route: each row's top k, as the decode step's
///                                                 moe_route chooses them
///   order, tiles = group(ids)                     moe_prefill_group: the (row, slot) pairs sorted by expert, cut
///                                                 into tiles of up to kMoePrefillTileRows pairs of one expert
///   act[p] = silu(W1_e h[r]) * (W3_e h[r])        moe_prefill_gate_up: one grouped product over every tile, each
///                                                 reading its expert's two matrices once for all its rows
///   partial[p] = W2_e act[p]                      moe_prefill_down, in fp32
///   x[r] += sum over s of weight * partial        moe_prefill_combine, in slot order, rounded once
///
/// Every size is fixed when the bucket's graph is captured; what the router chose stays on the device (the grids
/// are sized for the most tiles there can be, moe_prefill_tiles, and the blocks past the chunk's return). An expert's
/// weights are read once per tile of its rows: with the 8 of 128 experts Qwen3-30B-A3B's rows choose, a chunk of 512
/// rows reads each expert about once, where the decode step's graphs (8 rows at a time) read the chosen ones 64 times.
///
/// Quantized experts (int8, int4, fp8: the mlp class) are dequantized first, a whole stack at a time, into a scratch
/// buffer of two stacks (W1 and W3 side by side, then W2 over them: prefill_expert_scratch), as prefill's GEMMs
/// dequantize a quantized matrix (gemm_operand: each value rounded once to T), so that the products differ from the
/// decode step's, which scale fp32 sums, by rounding only. That reads each stack once more than a dense layer and
/// writes it in T, whichever experts the chunk chose: a chunk of 16 rows then takes about twice as long as the decode
/// step's graphs, so Decoder::prefill gives such chunks of fewer than kPrefillQuantizedExpertRows rows to the step's
/// graphs (prefill_min_rows, nn/prefill.hpp) and DecoderStepModel packs prompts only into chunks of at least as many
/// tokens (Decoder::packed_min_tokens); at 512 rows it is 12x faster than they are (docs/performance.md).

#include <algorithm>
#include <cstddef>
#include <string>

#include "lazygraph/kernels/gemm.hpp"
#include "lazygraph/nn/decoder_config.hpp"
#include "lazygraph/nn/decoder_weights.hpp"
#include "lazygraph/nn/kernels.hpp"
#include "lazygraph/nn/prefill_attention.hpp"
#include "lazygraph/nn/projection.hpp"

namespace lazygraph::nn {

/// The device memory of a mixture of experts' prefill chunk, for chunks of up to `rows` rows: all empty without
/// experts (DecoderConfig::moe).
template <Element T>
struct BasicPrefillMoeBuffers {
  /// Allocates the buffers for `config`'s experts (none without) on `stream`'s device, and zeroes the logits on
  /// `stream`, waiting for it (cuBLASLt writes them in ways compute-sanitizer's initcheck does not see; see
  /// BasicPrefillBuffers). \throws CudaError when the device is out of memory.
  BasicPrefillMoeBuffers(const Stream& stream, const DecoderConfig& config, int rows);

  DeviceBuffer<T> logits;       ///< the router's [rows][experts]
  DeviceBuffer<int> ids;        ///< each row's experts [rows][top k] (pair j = row * top k + slot)
  DeviceBuffer<float> weights;  ///< and their weights [rows][top k]
  DeviceBuffer<int> order;      ///< the pair at each grouped position [rows * top k]
  DeviceBuffer<int> slot_of;    ///< each pair's grouped position [rows * top k]
  DeviceBuffer<int> tiles;      ///< the count of tiles, then 4 ints a tile [1 + 4 moe_prefill_tiles]
  DeviceBuffer<T> act;          ///< the experts' activations by position [rows * top k][expert width]
  DeviceBuffer<float> partial;  ///< their down products by position, fp32 [rows * top k][d]

  /// The bytes of device memory these buffers take for `config` and `rows` rows (0 without experts): for Qwen3-30B-A3B
  /// (128 experts, top 8, width 768, d 2048) about 153 MiB for 2048 rows in bf16, most of it the fp32 products.
  [[nodiscard]] static std::size_t bytes(const DecoderConfig& config, int rows);
};

/// Whether a decoder of `c` runs a mixture of experts' steps of 2 to 8 rows on the grouped products too (moe_block,
/// decoder_step.hpp): with experts and DecoderConfig::tensor_cores (docs/performance.md has what it gains).
[[nodiscard]] inline bool grouped_expert_steps(const DecoderConfig& c) noexcept {
  return c.mixture_of_experts() && c.tensor_cores;
}

/// Elements of the scratch a prefill chunk dequantizes `weights`' quantized experts into (see the file comment): two
/// of the largest quantized expert stack, 0 when no expert is quantized. For Qwen3-30B-A3B's (128 experts of 768 x
/// 2048) 403 M elements, 806 MB in 16 bits; for Mixtral-8x7B's (8 of 14336 x 4096) 1.9 GB.
template <Element T>
[[nodiscard]] std::size_t prefill_expert_scratch(const BasicDecoderWeights<T>& weights) noexcept {
  std::size_t most = 0;
  for (const BasicMoeWeights<T>& layer : weights.moe) {
    for (const Weight<T>* m : {&layer.w1, &layer.w3, &layer.w2}) {
      if (!m->is_dense()) {
        most = std::max(most, static_cast<std::size_t>(m->rows()) * static_cast<std::size_t>(m->cols()));
      }
    }
  }
  return 2 * most;
}

/// A mixture of experts' block of a chunk of up to `rows` rows (see the file comment): reads the normed rows in `h`
/// and the chunk ([start, rows, slot] in device memory), adds each real row's experts into `x` (both [rows][d]), and
/// leaves the padding rows alone. `router` is the bucket's GEMM plan of (experts x d). Quantized experts are
/// dequantized into `scratch` (prefill_expert_scratch elements; not touched for dense ones) on `p`'s quantized kernels.
/// \throws UsageError for weights or buffers of other shapes than `c`'s and `rows`', for quantized experts with a
/// scratch too small (gemm_operand, naming the weight).
template <Element T>
auto prefill_moe_block(const Projector<T>& p, const Gemm<T>& router, const BasicMoeWeights<T>& w,
                       BasicPrefillMoeBuffers<T>& b, DeviceSpan<const T> h, DeviceSpan<T> x,
                       DeviceSpan<const int> chunk, DeviceSpan<T> scratch, const DecoderConfig& c, int rows) {
  const BasicKernels<T>& k = p.dense;
  const MoeShape& m = c.moe;
  const auto n = [](int a, int b) { return static_cast<std::size_t>(a) * static_cast<std::size_t>(b); };
  // W1 and W3 side by side in the scratch, then W2 over W1's (the gate/up product has read it by then).
  const std::size_t stack = n(m.experts * m.expert_width, c.d);
  const auto scratch_part = [&](std::size_t i) {
    return scratch.size() >= 2 * stack ? scratch.subspan(i * stack, stack) : DeviceSpan<T>{};
  };
  GemmOperand<T> w1 = gemm_operand(p, w.w1, scratch_part(0));
  GemmOperand<T> w3 = gemm_operand(p, w.w3, scratch_part(1));
  GemmOperand<T> w2 = gemm_operand(p, w.w2, scratch_part(0));
  const int pairs = rows * m.experts_per_token;
  const int tiles = moe_prefill_tiles(pairs, m.experts);
  if (b.ids.size() < n(rows, m.experts_per_token) || b.tiles.size() < 1 + n(4, tiles)) {
    throw UsageError("prefill_moe_block: the buffers hold fewer than " + std::to_string(rows) + " rows");
  }
  const DeviceSpan<T> logits = b.logits.view().subspan(0, n(rows, m.experts));
  const DeviceSpan<int> ids = b.ids.view().subspan(0, n(rows, m.experts_per_token));
  const DeviceSpan<float> weights = b.weights.view().subspan(0, ids.size());
  const DeviceSpan<int> order = b.order.view().subspan(0, ids.size());
  const DeviceSpan<int> slot_of = b.slot_of.view().subspan(0, ids.size());
  const DeviceSpan<int> tile_list = b.tiles.view().subspan(0, 1 + n(4, tiles));
  const DeviceSpan<T> act = b.act.view().subspan(0, n(pairs, m.expert_width));
  const DeviceSpan<float> partial = b.partial.view().subspan(0, n(pairs, c.d));
  const DeviceSpan<const int> count = chunk.subspan(PrefillChunkLayout::rows, 1);  // the chunk's real rows
  return named("router", router(logits, h, w.router.cview())) >>
         named("route", k.moe_prefill_route(k.moe_prefill_route_config(rows), logits.as_const(), count, ids, weights,
                                            m.experts, m.experts_per_token, m.normalize ? 1 : 0, rows)) >>
         named("group", k.moe_prefill_group(k.step_config({{1, 1, 1}, {1024, 1, 1}, 0}), ids.as_const(), count, order,
                                            slot_of, tile_list, m.experts, m.experts_per_token, rows, tiles)) >>
         named("experts gate/up",
               std::move(w1.prepare) >> std::move(w3.prepare) >>
                   k.moe_prefill_gate_up(k.moe_prefill_gate_up_config(m.expert_width, tiles), h, w1.values, w3.values,
                                         order.as_const(), tile_list.as_const(), act, m.expert_width, c.d,
                                         m.experts_per_token, tiles)) >>
         named("experts down", std::move(w2.prepare) >>
                                   k.moe_prefill_down(k.moe_prefill_down_config(c.d, tiles), act.as_const(), w2.values,
                                                      tile_list.as_const(), partial, c.d, m.expert_width, tiles)) >>
         named("combine",
               k.moe_prefill_combine(k.step_config(grid_for(n(rows, c.d) / 8, 256)), partial.as_const(),
                                     slot_of.as_const(), weights.as_const(), x, count, c.d, m.experts_per_token, rows));
}

extern template struct BasicPrefillMoeBuffers<half>;
extern template struct BasicPrefillMoeBuffers<bfloat16>;

}  // namespace lazygraph::nn
