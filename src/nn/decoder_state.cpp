#include "lazygraph/nn/decoder_state.hpp"

#include <span>
#include <vector>

#include "lazygraph/nn/moe_routes.hpp"
#include "lazygraph/ops.hpp"

namespace lazygraph::nn {

template <Element T>
BasicDecoderState<T>::BasicDecoderState(const Device& device, const DecoderConfig& c)
    : io(device, DecoderIo::input_size),
      generated(device, static_cast<std::size_t>(c.context)),
      next(device, kMaxRows),
      x(DeviceBuffer<T>(device, kMaxRows * static_cast<std::size_t>(c.d))),
      q(DeviceBuffer<T>(device, kMaxRows * static_cast<std::size_t>(c.q_dim()))),
      k(DeviceBuffer<T>(device, kMaxRows * static_cast<std::size_t>(c.kv_dim()))),
      v(DeviceBuffer<T>(device, kMaxRows * static_cast<std::size_t>(c.kv_dim()))),
      qkv(DeviceBuffer<T>(device, c.qk_norm ? kMaxRows * static_cast<std::size_t>(c.q_dim() + 2 * c.kv_dim()) : 0)),
      block_out(DeviceBuffer<T>(device, c.post_norms ? kMaxRows * static_cast<std::size_t>(c.d) : 0)),
      attn(DeviceBuffer<T>(device, kMaxRows * static_cast<std::size_t>(c.q_dim()))),
      act(DeviceBuffer<T>(device, c.mixture_of_experts() ? 0 : kMaxRows * static_cast<std::size_t>(c.ffn))),
      moe_h(device, c.mixture_of_experts() ? kMaxRows * static_cast<std::size_t>(c.d) : 0),
      expert_ids(device, route_buffer_size(c)),
      expert_weights(device, expert_ids.size()),
      moe_act(device, c.mixture_of_experts() ? kMaxRows * static_cast<std::size_t>(c.moe.experts_per_token) *
                                                   static_cast<std::size_t>(c.moe.expert_width)
                                             : 0),
      logits(DeviceBuffer<T>(device, kMaxRows * static_cast<std::size_t>(c.vocab))),
      k_cache(DeviceBuffer<T>(device, static_cast<std::size_t>(c.layers) * static_cast<std::size_t>(c.max_batch) *
                                          static_cast<std::size_t>(c.context) * static_cast<std::size_t>(c.kv_dim()))),
      v_cache(DeviceBuffer<T>(device, k_cache.size())),
      attention_partials(device, static_cast<std::size_t>(kMaxRows) * static_cast<std::size_t>(c.heads) *
                                     static_cast<std::size_t>(c.attention_splits()) *
                                     static_cast<std::size_t>(c.head_dim() + 2)),
      attention_counters(device, static_cast<std::size_t>(kMaxRows) * static_cast<std::size_t>(c.heads)),
      rope_frequencies(device, static_cast<std::size_t>(c.head_dim() / 2)),
      local_rope_frequencies(device, c.local_theta > 0 ? static_cast<std::size_t>(c.head_dim() / 2) : 0),
      argmax_values(device, static_cast<std::size_t>(kMaxRows) * kArgmaxChunks),
      argmax_indices(device, static_cast<std::size_t>(kMaxRows) * kArgmaxChunks) {
  const Stream stream(device);
  // attention_split counts each (row, head)'s blocks here and leaves the counts at zero; they start there.
  fill(attention_counters.view(), 0U).sync_on(stream);
  // generate copies all of `generated` out and the host reads only the first count: zeros keep that copy from
  // reading memory nothing wrote (which compute-sanitizer's initcheck reports).
  fill(generated.view(), 0).sync_on(stream);
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
