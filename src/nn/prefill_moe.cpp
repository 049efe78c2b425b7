#include "lazygraph/nn/prefill_moe.hpp"

#include <cstddef>

namespace lazygraph::nn {

namespace {

/// Elements of `rows` x `width`, or none without experts.
std::size_t elements(const DecoderConfig& c, int rows, int width) {
  return c.mixture_of_experts() ? static_cast<std::size_t>(rows) * static_cast<std::size_t>(width) : 0;
}

/// The chunk's (row, slot) pairs.
int pairs(const DecoderConfig& c, int rows) { return rows * c.moe.experts_per_token; }

/// Ints of the tile list.
std::size_t tile_ints(const DecoderConfig& c, int rows) {
  return c.mixture_of_experts() ? 1 + 4 * static_cast<std::size_t>(moe_prefill_tiles(pairs(c, rows), c.moe.experts))
                                : 0;
}

}  // namespace

template <Element T>
BasicPrefillMoeBuffers<T>::BasicPrefillMoeBuffers(const Stream& stream, const DecoderConfig& c, int rows)
    : logits(stream.device(), elements(c, rows, c.moe.experts)),
      ids(stream.device(), elements(c, rows, c.moe.experts_per_token)),
      weights(stream.device(), ids.size()),
      order(stream.device(), ids.size()),
      slot_of(stream.device(), ids.size()),
      tiles(stream.device(), tile_ints(c, rows)),
      act(stream.device(), elements(c, pairs(c, rows), c.moe.expert_width)),
      partial(stream.device(), elements(c, pairs(c, rows), c.d)) {
  if (logits.size() > 0) fill(logits.view(), T{}).sync_on(stream);
}

template <Element T>
std::size_t BasicPrefillMoeBuffers<T>::bytes(const DecoderConfig& c, int rows) {
  const std::size_t pair_count = elements(c, rows, c.moe.experts_per_token);
  return elements(c, rows, c.moe.experts) * sizeof(T) + pair_count * (2 * sizeof(int) + sizeof(int) + sizeof(float)) +
         tile_ints(c, rows) * sizeof(int) + elements(c, pairs(c, rows), c.moe.expert_width) * sizeof(T) +
         elements(c, pairs(c, rows), c.d) * sizeof(float);
}

template struct BasicPrefillMoeBuffers<half>;
template struct BasicPrefillMoeBuffers<bfloat16>;

}  // namespace lazygraph::nn
