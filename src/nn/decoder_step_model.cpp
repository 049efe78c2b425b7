#include "lazygraph/nn/decoder_step_model.hpp"

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "lazygraph/driver/error.hpp"
#include "lazygraph/nn/prefill.hpp"

namespace lazygraph::nn {

PagedStepPlan plan_paged_step(std::span<const std::size_t> tokens, std::span<const int> positions, int chunk_rows,
                              std::span<const int> buckets, int min_chunk_tokens) {
  if (positions.size() != tokens.size()) {
    throw UsageError("plan_paged_step: " + std::to_string(positions.size()) + " positions for " +
                     std::to_string(tokens.size()) + " rows");
  }
  PagedStepPlan plan;
  const auto most = static_cast<std::size_t>(std::max(chunk_rows, 0));
  std::vector<std::size_t> chunk;
  std::size_t chunk_tokens = 0;
  const auto close = [&] {
    if (!chunk.empty()) plan.chunks.push_back(std::move(chunk));
    chunk.clear();
    chunk_tokens = 0;
  };
  for (std::size_t r = 0; r < tokens.size(); ++r) {
    if (tokens[r] <= 1) {
      plan.batch.push_back(r);
    } else if (tokens[r] > most) {
      plan.alone.push_back(r);
    } else {
      if (chunk.size() == static_cast<std::size_t>(kMaxRows) || chunk_tokens + tokens[r] > most) close();
      chunk.push_back(r);
      chunk_tokens += tokens[r];
    }
  }
  // The rows of one token ride in the last chunk where they fit: their own step would read the weights once more.
  const std::size_t riders = plan.batch.size();
  const auto bucket = [&](std::size_t rows) {
    const auto at = std::lower_bound(buckets.begin(), buckets.end(), static_cast<int>(rows));
    return at == buckets.end() ? -1 : *at;
  };
  const bool near = std::all_of(plan.batch.begin(), plan.batch.end(),
                                [&](std::size_t r) { return positions[r] < kRiderMaxPosition; });
  if (!chunk.empty() && riders > 0 && near && chunk.size() + riders <= static_cast<std::size_t>(kMaxRows) &&
      chunk_tokens + riders <= most && bucket(chunk_tokens + riders) == bucket(chunk_tokens) &&
      bucket(chunk_tokens) > 0) {
    chunk.insert(chunk.end(), plan.batch.begin(), plan.batch.end());
    plan.batch.clear();
  }
  close();
  // Chunks below the fewest tokens worth one: their prompts alone, their riders in the batch, each kept in row order.
  std::vector<std::vector<std::size_t>> kept;
  for (std::vector<std::size_t>& c : plan.chunks) {
    std::size_t total = 0;
    for (const std::size_t r : c) total += tokens[r];
    if (total >= static_cast<std::size_t>(std::max(min_chunk_tokens, 0))) {
      kept.push_back(std::move(c));
      continue;
    }
    for (const std::size_t r : c) (tokens[r] <= 1 ? plan.batch : plan.alone).push_back(r);
  }
  plan.chunks = std::move(kept);
  std::sort(plan.alone.begin(), plan.alone.end());
  std::sort(plan.batch.begin(), plan.batch.end());
  return plan;
}

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
  if (decoder_->config().paged()) {
    step_paged(rows, next);
    return;
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

template <Element T>
void BasicDecoderStepModel<T>::Tables::set(std::size_t r, std::span<const int> blocks, std::size_t width) {
  if (values_.size() < (r + 1) * width) {
    values_.resize((r + 1) * width, -1);
    filled_.resize(r + 1, 0);
  }
  const auto at = values_.begin() + static_cast<std::ptrdiff_t>(r * width);
  std::copy(blocks.begin(), blocks.end(), at);
  if (filled_[r] > blocks.size()) {
    std::fill(at + static_cast<std::ptrdiff_t>(blocks.size()), at + static_cast<std::ptrdiff_t>(filled_[r]), -1);
  }
  filled_[r] = blocks.size();
}

template <Element T>
std::span<const int> BasicDecoderStepModel<T>::Tables::row(std::size_t r, std::size_t width) const {
  return std::span<const int>(values_).subspan(r * width, width);
}

template <Element T>
std::span<const int> BasicDecoderStepModel<T>::Tables::rows(std::size_t n, std::size_t width) const {
  return std::span<const int>(values_).subspan(0, n * width);
}

template <Element T>
void BasicDecoderStepModel<T>::check_blocks(const StepRow& row, std::size_t r) const {
  const auto width = static_cast<std::size_t>(decoder_->table_width());
  const int block_size = decoder_->config().kv_block_size;
  const auto last = static_cast<std::size_t>(row.position + static_cast<int>(row.tokens.size()) - 1);
  if (row.blocks.size() > width || row.blocks.size() <= last / static_cast<std::size_t>(block_size)) {
    throw UsageError("DecoderStepModel::step: row " + std::to_string(r) + " holds " +
                     std::to_string(row.blocks.size()) + " blocks; its positions up to " + std::to_string(last) +
                     " need " + std::to_string(last / static_cast<std::size_t>(block_size) + 1) +
                     " and the table holds " + std::to_string(width));
  }
}

template <Element T>
void BasicDecoderStepModel<T>::step_paged(std::span<const StepRow> rows, std::span<int> next) {
  const auto width = static_cast<std::size_t>(decoder_->table_width());
  for (std::size_t r = 0; r < rows.size(); ++r) check_blocks(rows[r], r);
  std::vector<std::size_t> tokens;
  std::vector<int> positions;
  for (const StepRow& row : rows) {
    tokens.push_back(row.tokens.size());
    positions.push_back(row.position);
  }
  const int chunk_rows = decoder_->packed_prefill_rows();
  const PagedStepPlan plan = plan_paged_step(tokens, positions, chunk_rows,
                                             chunk_rows > 0 ? prefill_buckets(decoder_->config()) : std::vector<int>{},
                                             decoder_->packed_min_tokens());
  const auto last_position = [&](const StepRow& row) { return row.position + static_cast<int>(row.tokens.size()) - 1; };
  for (const std::vector<std::size_t>& chunk : plan.chunks) {
    for (const std::size_t r : chunk) prompt_tables_.set(r, rows[r].blocks, width);
    std::vector<PromptPart> parts;
    for (const std::size_t r : chunk) {
      parts.push_back({.tokens = rows[r].tokens,
                       .start = rows[r].position,
                       .table = prompt_tables_.row(r, width),
                       .slot = rows[r].slot});
    }
    const std::vector<int> out = decoder_->prefill_packed(parts);
    for (std::size_t i = 0; i < chunk.size(); ++i) {
      const StepRow& row = rows[chunk[i]];
      next[chunk[i]] =
          row.sampling.temperature > 0.0F ? sampled(static_cast<int>(i), row.sampling, last_position(row)) : out[i];
    }
  }
  for (const std::size_t r : plan.alone) {
    const StepRow& row = rows[r];
    prompt_tables_.set(r, row.blocks, width);
    next[r] = decoder_->prefill(row.tokens, row.position, prompt_tables_.row(r, width), row.slot);
    if (row.sampling.temperature > 0.0F) next[r] = sampled(0, row.sampling, last_position(row));
  }
  const std::vector<std::size_t>& single = plan.batch;
  if (single.empty()) return;
  // The rows of one token, in one batch step of exactly those rows.
  std::vector<TokenAt> steps;
  for (std::size_t i = 0; i < single.size(); ++i) {
    const StepRow& row = rows[single[i]];
    steps.push_back({.token = row.tokens[0], .position = row.position});
    batch_tables_.set(i, row.blocks, width);
  }
  const std::vector<int> out = decoder_->forward_batch(steps, batch_tables_.rows(single.size(), width));
  for (std::size_t i = 0; i < single.size(); ++i) {
    const StepRow& row = rows[single[i]];
    next[single[i]] =
        row.sampling.temperature > 0.0F ? sampled(static_cast<int>(i), row.sampling, row.position) : out[i];
  }
}

template class BasicDecoderStepModel<half>;
template class BasicDecoderStepModel<bfloat16>;

}  // namespace lazygraph::nn
