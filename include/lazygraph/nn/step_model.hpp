#pragma once
/// \file
/// nn::StepModel: the narrow interface through which nn::Engine drives a model: one batched step, each row a
/// sequence's slot with the tokens it feeds, the next token of each row out. A decoder implements it through
/// nn::DecoderStepModel (decoder_step_model.hpp); tests implement it on the host.

#include <span>

#include "lazygraph/nn/sampling.hpp"

namespace lazygraph::nn {

/// One row of a step: sequence slot `slot` feeds `tokens` at positions position, position + 1, ... and the model
/// picks the token after the last of them as `sampling` says.
struct StepRow {
  int slot = 0;                 ///< the sequence's slot, in [0, StepModel::slots())
  int position = 0;             ///< the position of tokens[0]
  std::span<const int> tokens;  ///< one token (a decode step) or several (a prompt, or a sequence recomputed)
  Sampling sampling;            ///< how the next token is picked
  /// The sequence's KV blocks in position order (the engine's KvBlockPool::blocks), covering every position the row
  /// feeds: what a model with a paged cache (StepModel::kv_block_size) appends and attends through; empty otherwise.
  std::span<const int> blocks;
};

/// A model that steps several sequences at once, each in a slot whose KV cache it keeps between steps. A row's
/// positions follow the slot's earlier ones (the engine feeds each sequence in order, from 0 when it enters a slot).
class StepModel {
 public:
  /// A model; the derived class sets it up.
  StepModel() = default;
  StepModel(const StepModel&) = delete;
  StepModel& operator=(const StepModel&) = delete;
  StepModel(StepModel&&) = delete;
  StepModel& operator=(StepModel&&) = delete;
  virtual ~StepModel() = default;

  /// Sequences the model holds at once (each row of a step has its own slot).
  [[nodiscard]] virtual int slots() const = 0;
  /// Positions per sequence.
  [[nodiscard]] virtual int context() const = 0;
  /// Token ids are in [0, vocab).
  [[nodiscard]] virtual int vocab() const = 0;
  /// Positions per block of the model's paged KV cache, or 0 (the default) when its cache is not paged: the engine's
  /// pool is then the model's (kv_blocks blocks of this size) and each row carries its sequence's blocks.
  [[nodiscard]] virtual int kv_block_size() const { return 0; }
  /// Blocks of the model's paged KV cache (kv_block_size), or 0.
  [[nodiscard]] virtual int kv_blocks() const { return 0; }
  /// Runs `rows` (each a different slot) and writes row r's next token to next[r] (next.size() == rows.size()).
  virtual void step(std::span<const StepRow> rows, std::span<int> next) = 0;
};

/// The token `sampling` picks from one row's logits, on the host: the first largest logit at temperature 0, else
/// sample_reference's draw with the uniform number of (sampling.seed, position, slot 0), so that a sequence draws the
/// same tokens whatever slot it runs in. `position` is that of the token the logits follow. The rule is the sample
/// kernel's in float64 (sampling.hpp), so it agrees with a decoder sampling on the device but at a boundary within
/// rounding. \throws UsageError for empty logits.
[[nodiscard]] int pick_token(std::span<const float> logits, const Sampling& sampling, int position);

}  // namespace lazygraph::nn
