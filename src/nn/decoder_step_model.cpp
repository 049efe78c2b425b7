#include "lazygraph/nn/decoder_step_model.hpp"

#include <string>
#include <vector>

#include "lazygraph/driver/error.hpp"

namespace lazygraph::nn {

template <Element T>
BasicDecoderStepModel<T>::BasicDecoderStepModel(BasicDecoder<T>& decoder) : decoder_(&decoder) {
  if (decoder.sampling().temperature > 0.0F) {
    throw UsageError(
        "DecoderStepModel: the decoder must pick greedily (its set_sampling's temperature 0): each "
        "request's own sampling is applied to its row's logits");
  }
}

template <Element T>
int BasicDecoderStepModel<T>::sampled(int row, const Sampling& sampling, int position) const {
  std::vector<float> logits;
  for (const T x : decoder_->logits(row)) logits.push_back(x.to_float());
  return pick_token(logits, sampling, position);
}

template <Element T>
void BasicDecoderStepModel<T>::step(std::span<const StepRow> rows, std::span<int> next) {
  if (next.size() != rows.size()) {
    throw UsageError("DecoderStepModel::step: " + std::to_string(next.size()) + " places for the next tokens of " +
                     std::to_string(rows.size()) + " rows");
  }
  const int slot_count = slots();
  std::vector<bool> seen(static_cast<std::size_t>(slot_count), false);
  int batch = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const int slot = rows[r].slot;
    if (slot < 0 || slot >= slot_count) {
      throw UsageError("DecoderStepModel::step: row " + std::to_string(r) + "'s slot " + std::to_string(slot) +
                       " is outside [0, " + std::to_string(slot_count) + ")");
    }
    if (seen[static_cast<std::size_t>(slot)]) {
      throw UsageError("DecoderStepModel::step: two rows of slot " + std::to_string(slot));
    }
    seen[static_cast<std::size_t>(slot)] = true;
    if (rows[r].tokens.size() == 1) batch = std::max(batch, slot + 1);
  }
  // Prompts (and sequences recomputed after a preemption) first, each through prefill in its slot.
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const StepRow& row = rows[r];
    if (row.tokens.size() == 1) continue;
    next[r] = decoder_->prefill(row.tokens, row.position, row.slot);
    if (row.sampling.temperature > 0.0F) {
      next[r] = sampled(0, row.sampling, row.position + static_cast<int>(row.tokens.size()) - 1);
    }
  }
  if (batch == 0) return;
  // The rows of one token, in one batch step over slots 0 .. batch - 1.
  std::vector<TokenAt> steps(static_cast<std::size_t>(batch), TokenAt{.token = 0, .position = context() - 1});
  for (const StepRow& row : rows) {
    if (row.tokens.size() == 1)
      steps[static_cast<std::size_t>(row.slot)] = {.token = row.tokens[0], .position = row.position};
  }
  const std::vector<int> out = decoder_->forward_batch(steps);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const StepRow& row = rows[r];
    if (row.tokens.size() != 1) continue;
    next[r] = row.sampling.temperature > 0.0F ? sampled(row.slot, row.sampling, row.position)
                                              : out[static_cast<std::size_t>(row.slot)];
  }
}

template class BasicDecoderStepModel<half>;
template class BasicDecoderStepModel<bfloat16>;

}  // namespace lazygraph::nn
