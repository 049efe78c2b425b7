#pragma once
/// \file
/// nn::DecoderStepModel: a decoder (decoder.hpp) as the StepModel nn::Engine drives, through its batch steps and its
/// slots: max_batch sequences, each with the contiguous KV cache of its slot, or with a paged decoder
/// (DecoderConfig::kv_block_size) in the blocks the engine's KvBlockPool gives it (StepRow::blocks).

#include <cstddef>
#include <span>
#include <vector>

#include "lazygraph/nn/decoder.hpp"
#include "lazygraph/nn/step_model.hpp"

namespace lazygraph::nn {

/// How a paged decoder's step runs its rows (plan_paged_step): indices into the step's rows.
struct PagedStepPlan {
  /// Chunks for Decoder::prefill_packed, in order: each up to kMaxRows rows (its prompts in row order, then the rows
  /// of one token that ride in it).
  std::vector<std::vector<std::size_t>> chunks;
  std::vector<std::size_t> alone;  ///< prompts run through Decoder::prefill one by one, in row order
  std::vector<std::size_t> batch;  ///< rows of one token in one Decoder::forward_batch, in row order
};

/// A row of one token rides in a packed chunk (plan_paged_step) only at a position below this. In the chunk its
/// attention is one flash-attention tile per head over all of its positions, where the decode step splits them over
/// blocks, so a long row would cost the chunk more than the step it saves; the limit is a conservative guess, not
/// measured.
inline constexpr int kRiderMaxPosition = 2048;

/// The plan of a paged step whose row r feeds tokens[r] tokens (each at least 1) from position positions[r], for a
/// decoder whose packed chunks take `chunk_rows` tokens (Decoder::packed_prefill_rows; 0: none) in `buckets`
/// (prefill_buckets, ascending): the rows of several tokens packed in row order, a chunk closed when the next would
/// take it past kMaxRows parts or chunk_rows tokens; a row longer than chunk_rows (every one when chunk_rows is 0)
/// alone; then the rows of one token in the last chunk, as parts of one token, where all of them fit its parts, its
/// tokens and its bucket (so that it takes no more rows through the GEMMs) and each is at a position below
/// kRiderMaxPosition, else in the batch. A chunk of fewer than `min_chunk_tokens` tokens (Decoder::packed_min_tokens:
/// a mixture of experts' quantized experts, whose every chunk dequantizes every expert stack) is not made: its prompts
/// run alone and its riders in the batch. \throws UsageError when positions and tokens differ in length.
[[nodiscard]] PagedStepPlan plan_paged_step(std::span<const std::size_t> tokens, std::span<const int> positions,
                                            int chunk_rows, std::span<const int> buckets, int min_chunk_tokens = 0);

/// A BasicDecoder as a StepModel. A row of several tokens runs through `prefill` (its own call, in its slot); the
/// rows of one token run together through one `forward_batch` of as many rows as the highest such slot + 1. That
/// call steps slots 0 .. n - 1, so a slot without a row of one token gets a filler row at the last position of its
/// cache (token 0): a position a sequence writes before it reads it (a step writes its position's k and v, then
/// attends over the positions up to it), so the filler never changes what a sequence reads. Greedy rows take the
/// decoder's device argmax; sampled rows pick_token from the row's logits on the host (the decoder itself stays
/// greedy).
///
/// With a paged decoder the engine's pool is the decoder's (kv_block_size, kv_blocks), and plan_paged_step decides how
/// the rows run: the prompt rows packed, up to 8 parts and packed_prefill_rows() tokens a chunk, through prefill_packed
/// with their blocks as their tables (where the decoder has no packed chunks, and a prompt longer than one, through
/// prefill alone); the rows of one token ride in the step's last chunk as parts of one token where they fit its 8 parts
/// and its bucket of rows (so a step with prompts reads the weights once less), else run through one forward_batch of
/// exactly those rows, each with its blocks as its table (no filler rows: a row writes only its own blocks); up to
/// max_batch (256) of them, more than 8 running as the decoder's wide step on tensor cores (nn/wide_step.hpp). A row's
/// logits then depend, within rounding, on the rows it runs beside.
///
/// Thread safety: one call of step at a time (it keeps its rows' block tables between calls); the engine calls step
/// from one thread. The decoder must outlive the model.
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
  /// The decoder's kv_block_size (0: a contiguous cache).
  [[nodiscard]] int kv_block_size() const override { return decoder_->config().kv_block_size; }
  /// The decoder's kv_blocks.
  [[nodiscard]] int kv_blocks() const override { return decoder_->config().kv_blocks; }
  /// Runs the rows as above. \throws UsageError for two rows of one slot, a slot outside [0, max_batch), or a row
  /// the decoder refuses (naming it); with a paged decoder, a row whose blocks do not cover its positions or exceed
  /// the decoder's table_width; the decoder's errors.
  void step(std::span<const StepRow> rows, std::span<int> next) override;

 private:
  /// Block tables of `width` entries a row, kept from step to step: each row's blocks, -1 past them. Setting a row
  /// writes its blocks and clears only what a longer table left there, so that a step's host work grows with the
  /// blocks in use, not with the table width (8192 entries a row at a context of 131072).
  class Tables {
   public:
    /// Row `r` holds `blocks` (at most width of them), -1 after them.
    void set(std::size_t r, std::span<const int> blocks, std::size_t width);
    /// Row r, `width` entries.
    [[nodiscard]] std::span<const int> row(std::size_t r, std::size_t width) const;
    /// Rows 0 .. n - 1, `width` entries each.
    [[nodiscard]] std::span<const int> rows(std::size_t n, std::size_t width) const;

   private:
    std::vector<int> values_;          ///< [rows][width]
    std::vector<std::size_t> filled_;  ///< per row, the entries that may hold a block
  };

  /// step with a paged decoder (the slots checked).
  void step_paged(std::span<const StepRow> rows, std::span<int> next);
  /// Checks that row r's blocks cover its positions and fit the decoder's table_width. \throws UsageError as step.
  void check_blocks(const StepRow& row, std::size_t r) const;

  /// The token row `row` of the last decoder call makes, as `sampling` picks it at `position`.
  [[nodiscard]] int sampled(int row, const Sampling& sampling, int position) const;

  BasicDecoder<T>* decoder_;
  Tables prompt_tables_;  ///< the prompt rows' tables, by row of the step
  Tables batch_tables_;   ///< the one-token rows' tables, in the order of their batch step
};

/// The fp16 decoder as a StepModel.
using DecoderStepModel = BasicDecoderStepModel<half>;

extern template class BasicDecoderStepModel<half>;
extern template class BasicDecoderStepModel<bfloat16>;

}  // namespace lazygraph::nn
