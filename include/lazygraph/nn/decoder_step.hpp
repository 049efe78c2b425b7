#pragma once
/// \file
/// The decoder's step as op expressions (docs/nn.md gives the math): a layer's attention block and MLP block, the
/// embedding, the LM head and the choice of the next token, for `rows` rows. The graph backend captures
/// decoder_step; the tensor-parallel rank's step (decoder_rank.hpp) and prefill (prefill.hpp) reuse its parts.

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "lazygraph/nn/decoder_state.hpp"
#include "lazygraph/nn/decoder_weights.hpp"
#include "lazygraph/nn/detail/one_of_op.hpp"
#include "lazygraph/nn/expert_projection.hpp"
#include "lazygraph/nn/kernels.hpp"
#include "lazygraph/nn/moe_routes.hpp"
#include "lazygraph/nn/paged_attention.hpp"
#include "lazygraph/nn/prefill_moe.hpp"
#include "lazygraph/nn/projection.hpp"
#include "lazygraph/nn/sampling.hpp"
#include "lazygraph/nn/swiglu.hpp"
#include "lazygraph/ops.hpp"

namespace lazygraph::nn {

/// attention_block up to its output projection: the norm, the q, k and v projections, RoPE, the cache append and
/// attention, into s.attn ([rows][q_dim]); x is read, not written. Fused (DecoderConfig::fused, the default): the norm,
/// the three projections of the stacked weight, RoPE and the cache append in one kernel (norm_project_qkv_rope_append),
/// then attention, each head spread over attention_splits() blocks of positions (one block a head: after a dense
/// stacked weight's one row on multiprocessors split for the most L1, for more rows split half for shared memory). With
/// q/k norms (DecoderConfig::qk_norm, whatever `fused` says): the norm and the stacked projection into s.qkv
/// (norm_project), then the heads' norms (or with qk_norm_whole the whole q's and k's), RoPE and the cache append
/// (qk_norm_rope_append), then attention as the fused path runs it. Unfused: three norm_project of the stacked weight's
/// parts, rope, kv_append, attention with one block per head, ordered as DecoderConfig::ordering says. Only the chosen
/// path is built. A tensor-parallel rank follows it with an output projection of its own (decoder_rank.hpp). Layer
/// `layer`'s window and RoPE table (DecoderConfig::sliding) and the config's score scale. With a paged cache
/// (DecoderConfig::paged), k_cache and v_cache are the layer's pools: the fused kernel appends through s.tables
/// (qkv_rope_append_paged; a quantized stacked weight: norm_project into s.qkv on its format's kernels, then
/// PagedAttention::rope_append) and `paged`'s kernels attend through them, split as s.paged_splits says: attend_grouped
/// where s.grouped_attention holds (within rounding of the contiguous cache), else attend or attend_split, whose bits
/// are the contiguous cache's for the same splits. \throws UsageError as the projections (projection.hpp) and
/// PagedAttention's calls; for a paged config without `paged`. With the contiguous cache, `paged` given marks a
/// batch's graph that attends on the grouped kernels (PagedAttention::attend_grouped_slots, where
/// s.grouped_batches holds; BasicDecoder passes it past kGroupedBatchFrom); null keeps one block a (row, head).
template <Element T>
auto attention_heads(const Projector<T>& p, const BasicAttentionWeights<T>& w, BasicDecoderState<T>& s,
                     DeviceSpan<T> k_cache, DeviceSpan<T> v_cache, const DecoderConfig& c, int rows, int layer = 0,
                     const PagedAttention<T>* paged = nullptr) {
  const BasicKernels<T>& k = p.dense;
  const int d = c.d;
  const float scale = c.score_scale();
  const int window = c.layer_window(layer);
  const LaunchConfig per_head = k.attention_config(c.heads, c.head_dim(), rows, c.context);
  const int q_dim = c.q_dim();
  const DeviceSpan<const float> frequencies =
      c.local_rope(layer) ? s.local_rope_frequencies.cview() : s.rope_frequencies.cview();
  // Attention over the cache, each head over attention_splits() blocks of positions (the fused paths'). One block a
  // head asks for multiprocessors split for the most L1 (shared carveout 0) after the fused dense Q/K/V of one row,
  // split half for shared memory (50) for more rows, else leaves the split to the driver. On an H200
  // (docs/decode_performance.md) 0 took the one-row step from 767-768 to 747-749 us (TinyLlama shape, position 128)
  // and from 881-882 to 846.5 (Llama-3.2-1B shape, position 1000), and was as fast or slower after quantized
  // projections and at 8 rows; 50 took the 8-row steps from 1019 to 994.6-994.7 (TinyLlama, fp16; int4 672.6-673.1
  // -> 636.1-641.3) and from 1217.4-1220.2 to 1157.2-1157.8 (Llama-3.2-1B, fp16; int8 854.1-856.6 -> 793.4-798.7)
  // and Qwen3-30B-A3B's (12 layers) from 2664.7-2664.8 to 2632.6-2633.6, but its one-row step from 780.0-783.0 to
  // 803.0-803.4. After the q/k norms' kernel 0 is slower too: Qwen3-30B-A3B's one-row step 778.3-779.6 -> 802.6-804.5
  // us, OLMoE-1B-7B's 968.3-972.4 -> 970.5-971.4 (2026-12-03, alternated four times in one run).
  const auto ungrouped = [&](bool max_l1) {
    const LaunchConfig per_split =
        k.attention_split_config(c.heads, rows, c.context, c.attention_splits(), c.head_dim());
    const LaunchConfig one_block = with_shared_carveout(per_head, max_l1 ? 0 : rows > 1 ? 50 : -1);
    return choose(
        c.attention_splits() > 1,
        k.attention_split(per_split, s.q.cview(), k_cache.as_const(), v_cache.as_const(), s.attn.view(),
                          s.attention_partials.view(), s.attention_counters.view(), s.positions(), s.slots(), c.heads,
                          c.kv_head_count(), c.head_dim(), c.context, c.max_batch, scale, window),
        k.attention(one_block, s.q.cview(), k_cache.as_const(), v_cache.as_const(), s.attn.view(), s.positions(),
                    s.slots(), c.heads, c.kv_head_count(), c.head_dim(), c.context, c.max_batch, scale, window));
  };
  // A batch on tensor cores (BasicDecoderState::grouped_batches) attends on the grouped kernels: one block per kv head
  // and split, each key and value read once for the query heads that share it. Its splits and warps are a full step's
  // (kMaxRows rows), whatever the batch, so that a row gets the same bits in a batch of any size.
  const auto grouped = [&] {
    const auto count = static_cast<std::size_t>(rows);
    const auto q_size = static_cast<std::size_t>(q_dim);
    const PagedAttentionShape full{.rows = kMaxRows,
                                   .heads = c.heads,
                                   .kv_heads = c.kv_head_count(),
                                   .head_dim = c.head_dim(),
                                   .scale = scale,
                                   .window = window};
    PagedAttentionShape shape = full;
    shape.rows = rows;
    // The paged kernels' occupancy stands for the slot kernels': one body, the same launch bounds and shared memory.
    const int splits = paged_grouped_wave_splits(kMaxRows, c.heads, c.kv_head_count(), c.head_dim(), s.multiprocessors,
                                                 paged->grouped_resident(full));
    const int warps = paged->grouped_warps(full, splits);
    const SlotKvCache<T> cache{k_cache.as_const(),          v_cache.as_const(), s.positions().subspan(0, count),
                               s.slots().subspan(0, count), c.context,          c.max_batch};
    return paged->attend_grouped_slots(
        shape, s.q.cview().subspan(0, count * q_size), s.attn.view().subspan(0, count * q_size),
        s.attention_partials.view().subspan(0, PagedAttention<T>::split_partials(shape, splits)),
        s.attention_counters.view().subspan(0, count * static_cast<std::size_t>(c.heads)), cache,
        s.row_counts.cview().subspan(count, 1), splits, warps);
  };
  const auto attend = [&](bool max_l1) {
    return detail::either(rows > 1 && s.grouped_batches && paged != nullptr, grouped,
                          [&] { return ungrouped(max_l1); });
  };
  const auto normed = [&] {
    const int qkv_rows = q_dim + 2 * c.kv_dim();
    const auto count = static_cast<std::size_t>(rows);
    return norm_project(p, w.qkv, s.x.cview(), w.gain.cview(),
                        s.qkv.view().subspan(0, count * static_cast<std::size_t>(qkv_rows)), qkv_rows, d, c.eps,
                        rows) >>
           k.qk_norm_rope_append(k.qk_norm_config(c.heads, c.kv_head_count(), c.head_dim(), rows), s.qkv.cview(),
                                 w.bias.cview(), w.q_norm.cview(), w.k_norm.cview(), s.q.view(), k_cache, v_cache,
                                 s.positions(), s.slots(), c.heads, c.kv_head_count(), c.head_dim(), c.context,
                                 c.max_batch, frequencies, c.eps, c.qk_norm_whole ? 1 : 0, rows) >>
           attend(false);
  };
  const auto fused = [&] {
    const QkvRopeAppend<T> args{.x = s.x.cview(),
                                .gain = w.gain.cview(),
                                .bias = w.bias.cview(),
                                .q = s.q.view(),
                                .k_cache = k_cache,
                                .v_cache = v_cache,
                                .positions = s.positions(),
                                .slots = s.slots(),
                                .frequencies = frequencies,
                                .d = d,
                                .q_rows = q_dim,
                                .kv_heads = c.kv_head_count(),
                                .head_dim = c.head_dim(),
                                .context = c.context,
                                .slot_count = c.max_batch,
                                .eps = c.eps,
                                .batch = rows};
    return norm_project_qkv_rope_append(p, w.qkv, args) >> attend(rows == 1 && w.qkv.is_dense());
  };
  const auto unfused = [&] {
    const auto project = [&](const Weight<T>& weight, DeviceBuffer<T>& out, int out_rows) {
      return norm_project(p, weight, s.x.cview(), w.gain.cview(), out.view(), out_rows, d, c.eps, rows);
    };
    const auto count = static_cast<std::size_t>(rows);
    auto q = project(w.wq(c), s.q, q_dim);
    auto kp = project(w.wk(c), s.k, c.kv_dim());
    auto v = project(w.wv(c), s.v, c.kv_dim());
    auto rope = k.rope(k.step_config(grid_for(count * static_cast<std::size_t>(q_dim), 256)), s.q.view(), s.k.view(),
                       s.positions(), c.heads, c.kv_head_count(), c.head_dim(), frequencies, rows);
    auto append = k.kv_append(k.step_config(grid_for(count * static_cast<std::size_t>(c.kv_dim()), 256)), s.k.cview(),
                              s.v.cview(), k_cache, v_cache, s.positions(), s.slots(), c.kv_head_count(), c.head_dim(),
                              c.context, c.max_batch, rows);
    auto attend =
        k.attention(per_head, s.q.cview(), k_cache.as_const(), v_cache.as_const(), s.attn.view(), s.positions(),
                    s.slots(), c.heads, c.kv_head_count(), c.head_dim(), c.context, c.max_batch, scale, window);
    // The same kernels three ways (DecoderOrdering): ordered by their accesses, by a hand-written all, serially.
    return choose(c.ordering == DecoderOrdering::inferred, dataflow(q, kp, v, rope, append, attend),
                  choose(c.ordering == DecoderOrdering::hand_written, all(q, kp, v) >> rope >> append >> attend,
                         q >> kp >> v >> rope >> append >> attend));
  };
  // The fused path through block tables (validate refuses unfused with a paged cache); with q/k norms, the stacked
  // projection first and PagedAttention::qk_norm_rope_append (the contiguous path's arithmetic, through the tables).
  const auto paged_fused = [&] {
    if (paged == nullptr) throw UsageError("attention_heads: a paged cache (kv_block_size) needs PagedAttention");
    const int kv_dim = c.kv_dim();
    const int width = c.kv_table_width();
    const auto count = static_cast<std::size_t>(rows);
    const PagedAttentionShape shape{.rows = rows,
                                    .heads = c.heads,
                                    .kv_heads = c.kv_head_count(),
                                    .head_dim = c.head_dim(),
                                    .block_size = c.kv_block_size,
                                    .blocks = c.kv_blocks,
                                    .table_width = width,
                                    .scale = scale,
                                    .window = window};
    const PagedKvCache<T> cache{k_cache, v_cache, s.positions().subspan(0, count),
                                s.tables.cview().subspan(0, count * static_cast<std::size_t>(width))};
    const auto dd = static_cast<std::size_t>(d);
    const auto q_size = static_cast<std::size_t>(q_dim);
    const auto kv_size = static_cast<std::size_t>(kv_dim);
    const auto bias = [&](std::size_t at, std::size_t size) {
      return w.bias.empty() ? DeviceSpan<const T>{} : w.bias.cview().subspan(at, size);
    };
    // The dense stacked weight: the norm, the projections, RoPE and the append in one kernel.
    const auto dense_append = [&] {
      const DeviceSpan<const T> all = w.qkv.dense();
      return k.qkv_rope_append_paged(
          k.qkv_config(q_dim, kv_dim, d, rows), all.subspan(0, q_size * dd), all.subspan(q_size * dd, kv_size * dd),
          all.subspan((q_size + kv_size) * dd, kv_size * dd), bias(0, q_size), bias(q_size, kv_size),
          bias(q_size + kv_size, kv_size), s.x.cview(), w.gain.cview(), s.q.view(), k_cache, v_cache, s.positions(),
          s.tables.cview(), d, q_dim, c.kv_head_count(), c.head_dim(), c.kv_block_size, c.kv_blocks, width, frequencies,
          c.eps, rows);
    };
    auto append = detail::either(
        c.qk_norm,
        [&] {
          const std::size_t width_qkv = q_size + 2 * kv_size;
          const DeviceSpan<T> qkv = s.qkv.view().subspan(0, count * width_qkv);
          return norm_project(p, w.qkv, s.x.cview(), w.gain.cview(), qkv, static_cast<int>(width_qkv), d, c.eps,
                              rows) >>
                 paged->qk_norm_rope_append(shape, qkv.as_const(), w.bias.cview(), w.q_norm.cview(), w.k_norm.cview(),
                                            s.q.view().subspan(0, count * q_size), cache,
                                            s.row_counts.cview().subspan(count, 1), frequencies, c.eps,
                                            c.qk_norm_whole);
        },
        [&] {
          return detail::either(
              w.qkv.is_dense(), [&] { return dense_append(); },
              [&] {  // quantized: the stacked projection on its format's kernels, then RoPE and the append
                const std::size_t width_qkv = q_size + 2 * kv_size;
                const DeviceSpan<T> qkv = s.qkv.view().subspan(0, count * width_qkv);
                return norm_project(p, w.qkv, s.x.cview(), w.gain.cview(), qkv, static_cast<int>(width_qkv), d, c.eps,
                                    rows) >>
                       paged->rope_append(shape, qkv.as_const(), w.bias.cview(), s.q.view().subspan(0, count * q_size),
                                          cache, s.row_counts.cview().subspan(count, 1), frequencies);
              });
        });
    const DeviceSpan<const T> q = s.q.cview().subspan(0, count * q_size);
    const DeviceSpan<T> out = s.attn.view().subspan(0, count * q_size);
    const int splits = s.paged_splits(c, rows, s.grouped_attention ? paged->grouped_resident(shape) : 0);
    const DeviceSpan<float> partials =
        s.attention_partials.view().subspan(0, PagedAttention<T>::split_partials(shape, splits));
    const DeviceSpan<unsigned> counters =
        s.attention_counters.view().subspan(0, count * static_cast<std::size_t>(c.heads));
    return std::move(append) >>
           detail::either(
               s.grouped_attention,
               [&] {
                 return paged->attend_grouped(shape, q, out, partials, counters, cache,
                                              s.row_counts.cview().subspan(count, 1), splits);
               },
               [&] {
                 return detail::either(
                     splits > 1, [&] { return paged->attend_split(shape, q, out, partials, counters, cache, splits); },
                     [&] { return paged->attend(shape, q, out, cache); });
               });
  };
  return detail::either(c.paged(), paged_fused, [&] {
    return detail::either(c.qk_norm, normed, [&] { return detail::either(c.fused, fused, unfused); });
  });
}

/// A block's output into the residual stream, for `rows` rows of `d`: without post-norms (DecoderConfig::post_norms)
/// `project` writes it there itself (x += W a); with them it writes into s.block_out, and rms_norm_add adds its
/// RMSNorm with `post_gain` to x (Gemma 3's post-attention and post-feedforward norms). `project(out, add)` makes the
/// projection into `out`, adding to it when `add`.
template <Element T, class Project>
auto block_output(const BasicKernels<T>& k, BasicDecoderState<T>& s, const DecoderConfig& c,
                  const DeviceBuffer<T>& post_gain, int rows, Project project) {
  const auto n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(c.d);
  return detail::either(
      c.post_norms,
      [&] {
        return project(s.block_out.view().subspan(0, n), false) >>
               k.rms_norm_add(k.step_config({{static_cast<unsigned>(rows), 1, 1}, {256, 1, 1}, 0}), s.block_out.cview(),
                              post_gain.cview(), s.x.view(), c.d, c.eps);
      },
      [&] { return project(s.x.view(), true); });
}

/// x += Wo attention(rope(Wq h), rope(Wk h), Wv h), h = rmsnorm(x) * gain, for `rows` rows, appending each row's
/// k and v to its sequence's cache in this layer: attention_heads, then the output projection with the residual add
/// (with post-norms, block_output's). Every projection reads its weights once for all rows, on the kernels of its
/// format (projection.hpp). `residual` false (a tensor-parallel rank other than 0, whose partial sum an all-reduce adds
/// to rank 0's): the output projection overwrites x instead of adding to it. `paged`: a paged cache's kernels, or
/// the contiguous cache's grouped kernels for a long batch (attention_heads). \throws UsageError as attention_heads and
/// project().
template <Element T>
auto attention_block(const Projector<T>& p, const BasicAttentionWeights<T>& w, BasicDecoderState<T>& s,
                     DeviceSpan<T> k_cache, DeviceSpan<T> v_cache, const DecoderConfig& c, int rows,
                     bool residual = true, int layer = 0, const PagedAttention<T>* paged = nullptr) {
  return attention_heads(p, w, s, k_cache, v_cache, c, rows, layer, paged) >>
         block_output(p.dense, s, c, w.post_gain, rows, [&](DeviceSpan<T> out, bool add) {
           return project(p, w.wo, s.attn.cview(), out, c.d, c.q_dim(), rows, add && residual);
         });
}

/// The MLP block of a decoder layer: swiglu_gate_up with the config's gate (SwiGLU or GeGLU), then the down
/// projection into the residual stream (with post-norms, block_output's). \throws UsageError as swiglu_gate_up and
/// project().
template <Element T>
auto mlp_block(const Projector<T>& p, const BasicSwigluWeights<T>& w, BasicDecoderState<T>& s, const DecoderConfig& c,
               int rows) {
  return swiglu_gate_up(p, w, s.x.cview(), s.act.view(), c.d, c.ffn, c.eps, rows, c.activation) >>
         block_output(p.dense, s, c, w.post_gain, rows, [&](DeviceSpan<T> out, bool add) {
           return project(p, w.w2, s.act.cview(), out, c.d, c.ffn, rows, add);
         });
}

/// moe_block's route and experts where routed_experts does not take them: moe_route of s.moe_logits into ids, weights
/// and s.moe_plan, then the experts as expert_gate_up and expert_down give them, or, `grouped`, moe_prefill_route into
/// ids and weights (the same routes, no plan) and a prompt chunk's grouped products in their decode shape.
static_assert(kMaxRows <= kMoeDecodeTileRows,
              "a decode step's tile (its rows that chose one expert) fits the decode "
              "shape of the grouped products");
static_assert(kMaxRows == kAttentionStepRows, "attention_block_threads counts a full step's rows");

template <Element T>
auto moe_experts(const Projector<T>& p, const BasicMoeWeights<T>& w, BasicDecoderState<T>& s, const DecoderConfig& c,
                 int rows, DeviceSpan<int> ids, DeviceSpan<float> weights, bool grouped) {
  const BasicKernels<T>& k = p.dense;
  const MoeShape& m = c.moe;
  const auto one_block = [&](unsigned threads) { return k.step_config({{1, 1, 1}, {threads, 1, 1}, 0}); };
  return detail::either(
      grouped,
      [&] {
        const auto pairs = static_cast<std::size_t>(rows * m.experts_per_token);
        const int tiles = moe_prefill_tiles(rows * m.experts_per_token, m.experts);
        const DeviceSpan<const int> count = s.row_counts.cview().subspan(static_cast<std::size_t>(rows), 1);
        const DeviceSpan<const int> order = s.moe_order.cview().subspan(0, pairs);
        const DeviceSpan<const int> slot_of = s.moe_slot_of.cview().subspan(0, pairs);
        const DeviceSpan<const int> tile_list = s.moe_tiles.cview().subspan(0, 1 + 4 * std::size_t(tiles));
        const DeviceSpan<T> act = s.moe_act.view().subspan(0, pairs * std::size_t(m.expert_width));
        const DeviceSpan<float> partial = s.moe_partial.view().subspan(0, pairs * std::size_t(c.d));
        // The rows' routes without moe_route's plan, which only the gemv family's expert kernels read.
        return k.moe_prefill_route(k.moe_prefill_route_config(rows), s.moe_logits.cview(), count, ids.subspan(0, pairs),
                                   weights.subspan(0, pairs), m.experts, m.experts_per_token, m.normalize ? 1 : 0,
                                   rows) >>
               k.moe_prefill_group(one_block(1024), ids.as_const().subspan(0, pairs), count,
                                   s.moe_order.view().subspan(0, pairs), s.moe_slot_of.view().subspan(0, pairs),
                                   s.moe_tiles.view().subspan(0, tile_list.size()), m.experts, m.experts_per_token,
                                   rows, tiles) >>
               k.moe_decode_gate_up(k.moe_decode_gate_up_config(m.expert_width, tiles), s.moe_h.cview(), w.w1.dense(),
                                    w.w3.dense(), order, tile_list, act, m.expert_width, c.d, m.experts_per_token,
                                    tiles) >>
               k.moe_decode_down(k.moe_decode_down_config(c.d, tiles), act.as_const(), w.w2.dense(), tile_list, partial,
                                 c.d, m.expert_width, tiles) >>
               k.moe_prefill_combine(k.step_config(grid_for(static_cast<std::size_t>(rows) * c.d / 8, 256)),
                                     partial.as_const(), slot_of, weights.as_const().subspan(0, pairs), s.x.view(),
                                     count, c.d, m.experts_per_token, rows);
      },
      [&] {
        return k.moe_route(one_block(256), s.moe_logits.cview(), ids, weights, s.moe_plan.view(), m.experts,
                           m.experts_per_token, m.normalize ? 1 : 0, rows) >>
               expert_gate_up(p, w.w1, w.w3, s.moe_h.cview(), s.moe_plan.cview(), s.moe_act.view(), m, c.d, rows) >>
               expert_down(p, w.w2, s.moe_act.cview(), s.moe_plan.cview(), weights.as_const(),
                           {s.moe_partial.view(), s.moe_counters.view()}, s.x.view(), m, c.d, rows);
      });
}

/// Layer `layer`'s mixture of experts (DecoderConfig::moe) for `rows` rows: x += sum over each row's top k experts of
/// weight * W2_e (silu(W1_e h) * (W3_e h)), h = rmsnorm(x) * gain, the experts chosen by the router on the device
/// (kernels/nn/moe.cu): rms_norm into s.moe_h, the router's gemv into s.moe_logits (for one row both in one launch,
/// rms_norm_store_gemv, with their bits), moe_route into the layer's slice of s.expert_ids and s.expert_weights
/// (route_offset: its own with DecoderConfig::record_routes) and s.moe_plan, the experts' gate/up projection into
/// s.moe_act and their down projection through s.moe_partial into x (expert_projection.hpp: dense experts on the gemv
/// family's row loops, tensor cores for 2 to 8 rows where KernelOptions::tensor_cores says; quantized ones on the
/// quantized kernels' tiles). Only the chosen experts' weights are read, once for all rows that chose them. Steps of 2
/// to 8 rows of dense experts with DecoderConfig::tensor_cores (grouped_expert_steps) run the experts as a prompt
/// chunk's grouped products instead, in their decode shape (moe_prefill_route's choices, moe_route's, grouped by
/// expert, one tile per expert; moe_decode_gate_up and moe_decode_down; each row's products in fp32 added in slot
/// order), within rounding of the row loops. One row of dense experts where staged_experts says so runs routed_experts'
/// two kernels instead of moe_route and the expert kernels (they route the row themselves, with moe_route's bits, and
/// write ids, weights and the plan as it would). `residual` false (a tensor-parallel rank other than 0, whose experts
/// are its share of each expert's width: decoder_rank.hpp): x's rows are cleared once the norm has read them, so that
/// the block leaves the rank's partial sum there for the all-reduce after it. \throws UsageError as expert_gate_up,
/// expert_down and routed_experts.
template <Element T>
auto moe_block(const Projector<T>& p, const BasicSwigluWeights<T>& norm, const BasicMoeWeights<T>& w,
               BasicDecoderState<T>& s, const DecoderConfig& c, int rows, int layer, bool residual = true) {
  const BasicKernels<T>& k = p.dense;
  const MoeShape& m = c.moe;
  const std::size_t route_size = kMaxRows * static_cast<std::size_t>(m.experts_per_token);
  const DeviceSpan<int> ids = s.expert_ids.view().subspan(route_offset(c, layer), route_size);
  const DeviceSpan<float> weights = s.expert_weights.view().subspan(route_offset(c, layer), route_size);
  std::vector<FillOp<T>> clear;
  if (!residual) {
    clear.push_back(fill(s.x.view().subspan(0, static_cast<std::size_t>(rows) * static_cast<std::size_t>(c.d)),
                         T::from_float(0.0F)));
  }
  // One row: the norm and the router's gemv in one launch (rms_norm_store_gemv, their bits). The clear follows the
  // norm's read of x either way.
  auto logits =
      detail::either(
          rows == 1,
          [&] {
            return k.rms_norm_store_gemv(k.rms_norm_store_gemv_config(m.experts, c.d), w.router.cview(), s.x.cview(),
                                         norm.gain.cview(), s.moe_h.view(), s.moe_logits.view(), m.experts, c.d, c.eps);
          },
          [&] {
            return k.rms_norm(k.step_config({{static_cast<unsigned>(rows), 1, 1}, {256, 1, 1}, 0}), s.x.cview(),
                              norm.gain.cview(), s.moe_h.view(), c.d, c.eps) >>
                   k.gemv(k.gemv_config(m.experts, c.d, rows), w.router.cview(), s.moe_h.cview(), s.moe_logits.view(),
                          m.experts, c.d, rows);
          }) >>
      chain(std::move(clear));
  const bool grouped = grouped_expert_steps(c) && rows >= 2 && !w.quantized();
  return std::move(logits) >>
         detail::either(
             !grouped && staged_experts(p, w.w1, w.w3, w.w2, m, c.d, rows),
             [&] {
               return routed_experts(p, w.w1, w.w3, w.w2, s.moe_logits.cview(), s.moe_h.cview(),
                                     RoutedExpertsIo<T>{ids, weights, s.moe_plan.view(), s.moe_act.view(), s.x.view()},
                                     m, c.d);
             },
             [&] { return moe_experts(p, w, s, c, rows, ids, weights, grouped); });
}

/// One decoder layer for `rows` rows: attention block, then the MLP block (moe_block with DecoderConfig::moe). The
/// layer's part of the caches: max_batch x context positions, or with a paged cache its kv_blocks blocks, appended and
/// attended through `paged` (which, given with the contiguous cache, marks a long batch's grouped attention:
/// attention_heads). \throws UsageError as attention_block and mlp_block.
template <Element T>
auto decoder_layer(const Projector<T>& p, const BasicDecoderWeights<T>& w, BasicDecoderState<T>& s, int layer,
                   const DecoderConfig& c, int rows, const PagedAttention<T>* paged = nullptr) {
  const std::size_t positions = c.paged()
                                    ? static_cast<std::size_t>(c.kv_blocks) * static_cast<std::size_t>(c.kv_block_size)
                                    : static_cast<std::size_t>(c.max_batch) * static_cast<std::size_t>(c.context);
  const std::size_t cache_size = positions * static_cast<std::size_t>(c.kv_dim());
  const std::size_t offset = static_cast<std::size_t>(layer) * cache_size;
  const auto l = static_cast<std::size_t>(layer);
  const std::string name = "layer " + std::to_string(layer);
  return named(name + " attention",
               attention_block(p, w.attention[l], s, s.k_cache.view().subspan(offset, cache_size),
                               s.v_cache.view().subspan(offset, cache_size), c, rows, true, layer, paged)) >>
         named(name + " mlp",
               detail::either(
                   c.mixture_of_experts(), [&] { return moe_block(p, w.mlp[l], w.moe.at(l), s, c, rows, layer); },
                   [&] { return mlp_block(p, w.mlp[l], s, c, rows); }));
}

/// The op type of one decoder layer (decoder_layer), for holding layers in a vector.
template <Element T>
using BasicDecoderLayerOp =
    decltype(decoder_layer(std::declval<const Projector<T>&>(), std::declval<const BasicDecoderWeights<T>&>(),
                           std::declval<BasicDecoderState<T>&>(), 0, std::declval<const DecoderConfig&>(), 1,
                           static_cast<const PagedAttention<T>*>(nullptr)));
/// The op type of one fp16 decoder layer.
using DecoderLayerOp = BasicDecoderLayerOp<half>;

/// The LM head's logits of `rows` rows, [rows][vocab], into `logits`: the final norm and the head in one kernel
/// (norm_project); reads x and the final gain. With `softcap` (DecoderConfig::logit_softcap) above 0, each logit is
/// then soft-capped, tanh(logit / softcap) * softcap. \throws UsageError as norm_project.
template <Element T>
auto lm_head_logits(const Projector<T>& p, const BasicDecoderWeights<T>& w, DeviceSpan<const T> x, DeviceSpan<T> logits,
                    int vocab, int d, float eps, int rows, float softcap = 0) {
  const auto n = static_cast<long long>(rows) * vocab;
  const BasicKernels<T>& k = p.dense;
  std::vector<decltype(k.softcap(LaunchConfig{}, logits, n, softcap))> capped;
  if (softcap > 0)
    capped.push_back(k.softcap(k.step_config(grid_for(static_cast<std::size_t>(n), 256)), logits, n, softcap));
  return norm_project(p, w.lm_head, x, w.final_gain.cview(), logits, vocab, d, eps, rows) >> chain(std::move(capped));
}

/// The embedding of a step's `rows` rows into x (s.tokens' rows of the table), scaled by DecoderConfig::
/// embedding_scale (rounded to T first) where it is not 1.
template <Element T>
auto embed(const BasicKernels<T>& k, const BasicDecoderWeights<T>& w, BasicDecoderState<T>& s, const DecoderConfig& c,
           int rows) {
  const auto n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(c.d);
  std::vector<decltype(k.scale(LaunchConfig{}, s.x.view(), 0LL, 0.0F))> scaled;
  if (c.embedding_scale != 1.0F) {
    scaled.push_back(k.scale(k.step_config(grid_for(n, 256)), s.x.view(), static_cast<long long>(n),
                             T::from_float(c.embedding_scale).to_float()));
  }
  return k.embedding(k.step_config(grid_for(n, 256)), w.embedding.cview(), s.tokens(), s.x.view(), c.d, rows) >>
         chain(std::move(scaled));
}

/// The next token of each of `rows` rows of logits ([rows][vocab]) into next, as `sampling` says: sample's rule, one
/// block a row; for greedy steps (temperature 0) over long rows on a GPU with clusters (BasicKernels::
/// greedy_by_cluster), argmax_cluster's, the same tokens with each row read by a cluster of blocks.
template <Element T>
auto next_tokens(const BasicKernels<T>& k, DeviceSpan<const T> logits, DeviceSpan<int> next,
                 DeviceSpan<const int> positions, DeviceSpan<const int> slots, int vocab, int rows,
                 const Sampling& sampling) {
  const bool clustered = sampling.temperature <= 0.0F && k.greedy_by_cluster(vocab);
  const auto count = static_cast<unsigned>(rows);
  // (The op not chosen is built but never run: unclustered, its launch shape is one any GPU takes.)
  const LaunchConfig argmax_config =
      clustered ? k.argmax_cluster_config(rows) : k.step_config({{1, count, 1}, {512, 1, 1}, 0});
  return choose(clustered, k.argmax_cluster(argmax_config, logits, next, vocab),
                k.sample(k.step_config({{count, 1, 1}, {1024, 1, 1}, 0}), logits, next, positions, slots, vocab,
                         sampling.top_k, sampling.temperature, static_cast<unsigned>(sampling.seed), sampling.top_p));
}

/// One decode step of `rows` rows: reads tokens, positions and slots from s.io, writes each row's logits and next
/// token (greedy, or drawn as `sampling` says). A paged cache (DecoderConfig::kv_block_size) also reads s.tables and
/// runs `paged`'s kernels; with the contiguous cache `paged` given marks a long batch's grouped attention
/// (attention_heads). \throws UsageError as decoder_layer and lm_head_logits.
template <Element T>
auto decoder_step(const Projector<T>& p, const BasicDecoderWeights<T>& w, BasicDecoderState<T>& s,
                  const DecoderConfig& c, int rows = 1, const Sampling& sampling = {},
                  const PagedAttention<T>* paged = nullptr) {
  const BasicKernels<T>& k = p.dense;
  std::vector<BasicDecoderLayerOp<T>> layers;
  layers.reserve(static_cast<std::size_t>(c.layers));
  for (int l = 0; l < c.layers; ++l) layers.push_back(decoder_layer(p, w, s, l, c, rows, paged));
  auto head = lm_head_logits(p, w, s.x.cview(), s.logits.view(), c.vocab, c.d, c.eps, rows, c.logit_softcap);
  return named("embedding", embed(k, w, s, c, rows)) >> chain(std::move(layers)) >>
         named("lm head", std::move(head) >> next_tokens(k, s.logits.cview(), s.next.view(), s.positions(), s.slots(),
                                                         c.vocab, rows, sampling));
}

}  // namespace lazygraph::nn
