#pragma once
/// \file
/// nn::DecoderStepModel: a decoder (decoder.hpp) as the StepModel nn::Engine drives, through its batch steps and its
/// slots: max_batch sequences, each with the contiguous KV cache of its slot. The paged cache's kernels come later;
/// until then the engine's KvBlockPool accounts for positions of these caches.

#include <span>

#include "lazygraph/nn/decoder.hpp"
#include "lazygraph/nn/step_model.hpp"

namespace lazygraph::nn {

/// A BasicDecoder as a StepModel. A row of several tokens runs through `prefill` (its own call, in its slot); the
/// rows of one token run together through one `forward_batch` of as many rows as the highest such slot + 1. That
/// call steps slots 0 .. n - 1, so a slot without a row of one token gets a filler row at the last position of its
/// cache (token 0): a position a sequence writes before it reads it (a step writes its position's k and v, then
/// attends over the positions up to it), so the filler never changes what a sequence reads. Greedy rows take the
/// decoder's device argmax; sampled rows pick_token from the row's logits on the host (the decoder itself stays
/// greedy).
///
/// Thread safety: as the decoder; the engine calls step from one thread. The decoder must outlive the model.
template <Element T>
class BasicDecoderStepModel final : public StepModel {
 public:
  /// A step model over `decoder`, whose sampling must be greedy (the default). \throws UsageError when it is not.
  explicit BasicDecoderStepModel(BasicDecoder<T>& decoder);

  /// The decoder's max_batch.
  [[nodiscard]] int slots() const override { return decoder_->config().max_batch; }
  /// The decoder's context.
  [[nodiscard]] int context() const override { return decoder_->config().context; }
  /// The decoder's vocabulary.
  [[nodiscard]] int vocab() const override { return decoder_->config().vocab; }
  /// Runs the rows as above. \throws UsageError for two rows of one slot, a slot outside [0, max_batch), or a row
  /// the decoder refuses (naming it); the decoder's errors.
  void step(std::span<const StepRow> rows, std::span<int> next) override;

 private:
  /// The token row `row` of the last decoder call makes, as `sampling` picks it at `position`.
  [[nodiscard]] int sampled(int row, const Sampling& sampling, int position) const;

  BasicDecoder<T>* decoder_;
};

/// The fp16 decoder as a StepModel.
using DecoderStepModel = BasicDecoderStepModel<half>;

extern template class BasicDecoderStepModel<half>;
extern template class BasicDecoderStepModel<bfloat16>;

}  // namespace lazygraph::nn
