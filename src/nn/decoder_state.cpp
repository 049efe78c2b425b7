#include "lazygraph/nn/decoder_state.hpp"

#include <numeric>
#include <span>
#include <vector>

#include "lazygraph/nn/kernels.hpp"
#include "lazygraph/nn/moe_routes.hpp"
#include "lazygraph/nn/paged_attention.hpp"
#include "lazygraph/nn/prefill_moe.hpp"
#include "lazygraph/ops.hpp"

namespace lazygraph::nn {

namespace {
/// Elements of one of the caches: max_batch x context positions per layer, or the paged pool's blocks.
std::size_t cache_elements(const DecoderConfig& c) {
  const std::size_t per_layer = c.paged()
                                    ? static_cast<std::size_t>(c.kv_blocks) * static_cast<std::size_t>(c.kv_block_size)
                                    : static_cast<std::size_t>(c.max_batch) * static_cast<std::size_t>(c.context);
  return static_cast<std::size_t>(c.layers) * per_layer * static_cast<std::size_t>(c.kv_dim());
}

/// Whether a paged step attends with the grouped kernels (BasicDecoderState::grouped_attention).
bool grouped(const Device& device, const DecoderConfig& c) {
  return c.paged() && c.attention_blocks == 0 && device.compute_capability().major >= 8;
}

/// Whether the contiguous cache's batches attend with the grouped kernels (BasicDecoderState::grouped_batches).
bool grouped_batch_steps(const Device& device, const DecoderConfig& c) {
  return !c.paged() && c.backend == DecoderBackend::graph && c.tensor_cores && c.max_batch >= 2 &&
         c.attention_blocks == 1 && (c.head_dim() == 64 || c.head_dim() == 128) && (c.fused || c.qk_norm) &&
         device.compute_capability().major >= 8;
}

/// Attention splits the partials must hold: attention_splits(), or paged with attention_blocks 0 (and for the
/// contiguous cache's grouped batches) the most paged_attention_splits and paged_grouped_wave_splits give.
int most_splits(const Device& device, const DecoderConfig& c) {
  return (c.paged() && c.attention_blocks == 0) || grouped_batch_steps(device, c) ? paged_max_splits
                                                                                  : c.attention_splits();
}
}  // namespace

template <Element T>
int BasicDecoderState<T>::paged_splits(const DecoderConfig& c, int rows, int resident) const {
  if (c.attention_blocks > 0) return c.attention_blocks;
  if (grouped_attention) {
    return paged_grouped_wave_splits(rows, c.heads, c.kv_head_count(), c.head_dim(), multiprocessors, resident);
  }
  const long long capacity = static_cast<long long>(c.kv_table_width()) * c.kv_block_size;
  return paged_attention_splits(capacity, rows * c.heads, multiprocessors);
}

template <Element T>
BasicDecoderState<T>::BasicDecoderState(const Device& device, const DecoderConfig& c)
    : io(device, DecoderIo::input_size),
      generated(device, static_cast<std::size_t>(c.context)),
      next(device, kMaxRows),
      x(DeviceBuffer<T>(device, kMaxRows * static_cast<std::size_t>(c.d))),
      q(DeviceBuffer<T>(device, kMaxRows * static_cast<std::size_t>(c.q_dim()))),
      k(DeviceBuffer<T>(device, kMaxRows * static_cast<std::size_t>(c.kv_dim()))),
      v(DeviceBuffer<T>(device, kMaxRows * static_cast<std::size_t>(c.kv_dim()))),
      qkv(DeviceBuffer<T>(
          device, c.qk_norm || c.paged() ? kMaxRows * static_cast<std::size_t>(c.q_dim() + 2 * c.kv_dim()) : 0)),
      block_out(DeviceBuffer<T>(device, c.post_norms ? kMaxRows * static_cast<std::size_t>(c.d) : 0)),
      attn(DeviceBuffer<T>(device, kMaxRows * static_cast<std::size_t>(c.q_dim()))),
      act(DeviceBuffer<T>(device, c.mixture_of_experts() ? 0 : kMaxRows * static_cast<std::size_t>(c.ffn))),
      moe_h(device, c.mixture_of_experts() ? kMaxRows * static_cast<std::size_t>(c.d) : 0),
      moe_logits(device, c.mixture_of_experts() ? kMaxRows * static_cast<std::size_t>(c.moe.experts) : 0),
      expert_ids(device, route_buffer_size(c)),
      expert_weights(device, expert_ids.size()),
      moe_plan(device, c.mixture_of_experts() ? kMoePlanInts : 0),
      moe_act(device, c.mixture_of_experts() ? kMaxRows * static_cast<std::size_t>(c.moe.experts_per_token) *
                                                   static_cast<std::size_t>(c.moe.expert_width)
                                             : 0),
      moe_partial(device, c.mixture_of_experts() ? kMaxRows * static_cast<std::size_t>(c.moe.experts_per_token) *
                                                       static_cast<std::size_t>(c.d)
                                                 : 0),
      moe_counters(device, c.mixture_of_experts() ? static_cast<std::size_t>(c.d) : 0),
      moe_order(device, grouped_expert_steps(c) ? kMaxRows * static_cast<std::size_t>(c.moe.experts_per_token) : 0),
      moe_slot_of(device, moe_order.size()),
      moe_tiles(device, grouped_expert_steps(c) ? 1 + 4 * static_cast<std::size_t>(moe_prefill_tiles(
                                                              kMaxRows * c.moe.experts_per_token, c.moe.experts))
                                                : 0),
      logits(DeviceBuffer<T>(device, kMaxRows * static_cast<std::size_t>(c.vocab))),
      k_cache(DeviceBuffer<T>(device, cache_elements(c))),
      v_cache(DeviceBuffer<T>(device, k_cache.size())),
      tables(device, static_cast<std::size_t>(kMaxRows) * static_cast<std::size_t>(c.kv_table_width())),
      attention_partials(device, static_cast<std::size_t>(kMaxRows) * static_cast<std::size_t>(c.heads) *
                                     static_cast<std::size_t>(most_splits(device, c)) *
                                     static_cast<std::size_t>(c.head_dim() + 2)),
      attention_counters(device, static_cast<std::size_t>(kMaxRows) * static_cast<std::size_t>(c.heads)),
      rope_frequencies(device, static_cast<std::size_t>(c.head_dim() / 2)),
      local_rope_frequencies(device, c.local_theta > 0 ? static_cast<std::size_t>(c.head_dim() / 2) : 0),
      argmax_values(device, static_cast<std::size_t>(kMaxRows) * kArgmaxChunks),
      argmax_indices(device, static_cast<std::size_t>(kMaxRows) * kArgmaxChunks),
      row_counts(device, grouped(device, c) || grouped_batch_steps(device, c) || c.paged() || grouped_expert_steps(c)
                             ? static_cast<std::size_t>(kMaxRows) + 1
                             : 0),
      multiprocessors(device.sm_count()),
      grouped_attention(grouped(device, c)),
      grouped_batches(grouped_batch_steps(device, c)) {
  const Stream stream(device);
  if (!row_counts.empty()) {
    std::vector<int> counts(row_counts.size());
    std::iota(counts.begin(), counts.end(), 0);
    copy(row_counts.view(), std::span<const int>(counts)).sync_on(stream);
  }
  // attention_split counts each (row, head)'s blocks here and leaves the counts at zero; they start there.
  fill(attention_counters.view(), 0U).sync_on(stream);
  // moe_down counts each grid column's blocks here and leaves the counts at zero; they start there too.
  if (!moe_counters.empty()) fill(moe_counters.view(), 0U).sync_on(stream);
  // generate copies all of `generated` out and the host reads only the first count: zeros keep that copy from
  // reading memory nothing wrote (which compute-sanitizer's initcheck reports).
  fill(generated.view(), 0).sync_on(stream);
  // A replay copies the tables in whole: block 0 for the rows a call leaves unset (never read past their positions).
  if (tables.size() > 0) fill(tables.view(), 0).sync_on(stream);
  const std::vector<float> table = rope_table(c);
  copy(rope_frequencies.view(), std::span<const float>(table)).sync_on(stream);
  if (c.local_theta > 0) {
    const std::vector<double> local = nn::rope_frequencies(c.local_theta, {}, c.head_dim());
    const std::vector<float> local_table(local.begin(), local.end());
    copy(local_rope_frequencies.view(), std::span<const float>(local_table)).sync_on(stream);
  }
}

template struct BasicDecoderState<half>;
template struct BasicDecoderState<bfloat16>;

}  // namespace lazygraph::nn
