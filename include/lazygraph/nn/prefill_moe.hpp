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
/// Dense experts only: quantized ones prefill through the decode step's graphs (prefill_experts_on_tensor_cores).

#include <cstddef>
#include <string>

#include "lazygraph/kernels/gemm.hpp"
#include "lazygraph/nn/decoder_config.hpp"
#include "lazygraph/nn/decoder_weights.hpp"
#include "lazygraph/nn/kernels.hpp"
#include "lazygraph/nn/prefill_attention.hpp"

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

/// Why the experts of `weights` cannot run prefill on tensor cores (their stacks are quantized: the grouped products
/// read dense experts), or empty when they can (or there are none). Never throws but std::bad_alloc.
template <Element T>
[[nodiscard]] std::string prefill_experts_refusal(const BasicDecoderWeights<T>& weights);

/// A mixture of experts' block of a chunk of up to `rows` rows (see the file comment): reads the normed rows in `h`
/// and the chunk ([start, rows, slot] in device memory), adds each real row's experts into `x` (both [rows][d]), and
/// leaves the padding rows alone. `router` is the bucket's GEMM plan of (experts x d).
/// \throws UsageError for quantized experts, for weights or buffers of other shapes than `c`'s and `rows`'.
template <Element T>
auto prefill_moe_block(const BasicKernels<T>& k, const Gemm<T>& router, const BasicMoeWeights<T>& w,
                       BasicPrefillMoeBuffers<T>& b, DeviceSpan<const T> h, DeviceSpan<T> x,
                       DeviceSpan<const int> chunk, const DecoderConfig& c, int rows) {
  const MoeShape& m = c.moe;
  if (w.quantized()) {
    throw UsageError("prefill_moe_block: the experts are quantized; prefill on tensor cores reads dense experts (" +
                     w.w1.describe() + ")");
  }
  const auto n = [](int a, int b) { return static_cast<std::size_t>(a) * static_cast<std::size_t>(b); };
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
               k.moe_prefill_gate_up(k.moe_prefill_gate_up_config(m.expert_width, tiles), h, w.w1.dense(), w.w3.dense(),
                                     order.as_const(), tile_list.as_const(), act, m.expert_width, c.d,
                                     m.experts_per_token, tiles)) >>
         named("experts down", k.moe_prefill_down(k.moe_prefill_down_config(c.d, tiles), act.as_const(), w.w2.dense(),
                                                  tile_list.as_const(), partial, c.d, m.expert_width, tiles)) >>
         named("combine",
               k.moe_prefill_combine(k.step_config(grid_for(n(rows, c.d) / 8, 256)), partial.as_const(),
                                     slot_of.as_const(), weights.as_const(), x, count, c.d, m.experts_per_token, rows));
}

extern template struct BasicPrefillMoeBuffers<half>;
extern template struct BasicPrefillMoeBuffers<bfloat16>;

}  // namespace lazygraph::nn
