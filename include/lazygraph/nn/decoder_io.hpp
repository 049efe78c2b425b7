#pragma once
/// \file
/// The decoder's limits and its io layout: how many rows a step takes, how many positions a cache holds, and where the
/// tokens, positions, slots and generate's control lie in the ints the host stages in and out of each replay.

#include <cstddef>

#include "lazygraph/nn/prefill_attention.hpp"

namespace lazygraph::nn {

/// Rows one step processes at most: sequences of a batch, or tokens of a prompt chunk (prefill).
inline constexpr int kMaxRows = 8;
/// Rows one step of a paged decoder processes at most (DecoderConfig::max_batch up to this): steps of more than
/// kMaxRows rows run as the wide step on tensor cores (nn/wide_step.hpp).
inline constexpr int kMaxWideRows = 256;
/// The most positions a decoder's KV cache holds (DecoderConfig::context): attention keeps a row's scores in shared
/// memory.
inline constexpr int kMaxContext = 8192;
/// The most positions a sequence of a paged KV cache reaches (DecoderConfig::kv_block_size): attention then splits
/// over positions (flash-decoding) where one block's shared memory cannot hold a row's scores.
inline constexpr int kMaxPagedContext = 131072;
/// Chunks of the vocabulary the persistent backend's greedy choice splits each row's logits into, at most.
inline constexpr int kArgmaxChunks = 64;

/// The decoder's io layout, in ints: the one place its offsets are written down.
///
/// In: the device io buffer (BasicDecoderState::io) and the pinned input staging that each replay copies to it whole
/// hold [tokens | positions | slots | control]; row r of a step is index r of the first three. The control is
/// generate's [n, stop_token, count], which its loop kernel (generate_advance) reads and counts in. The input staging
/// holds a prefill chunk's io (PrefillIo) after that, at `prefill`, which prefill's chunk graphs copy to their own
/// device buffer (BasicPrefillBuffers::io); the step graphs copy only the first input_size ints.
///
/// Out: the pinned output staging that every graph of a decoder copies its results to holds
/// [next | control | generated]. A step's graph (forward, forward_batch, prefill) writes its rows' next tokens to
/// `next`; generate's loop graph writes its control as the loop left it to `control` (count: the tokens appended)
/// and the tokens it appended to `generated` (context ints, the first count of them meaningful).
struct DecoderIo {
  // In: BasicDecoderState::io and the input staging.
  static constexpr std::size_t tokens = 0;                           ///< the rows' tokens [kMaxRows]
  static constexpr std::size_t positions = tokens + kMaxRows;        ///< the rows' positions [kMaxRows]
  static constexpr std::size_t slots = positions + kMaxRows;         ///< the rows' sequence slots [kMaxRows]
  static constexpr std::size_t control = slots + kMaxRows;           ///< generate's control [n, stop_token, count]
  static constexpr std::size_t control_size = 3;                     ///< ints of a control
  static constexpr std::size_t input_size = control + control_size;  ///< ints in (the step's: BasicDecoderState::io)
  static constexpr std::size_t prefill = input_size;  ///< where the input staging holds a prefill chunk's PrefillIo

  // A control's fields, from its start.
  static constexpr std::size_t n = 0;      ///< tokens generate may append
  static constexpr std::size_t stop = 1;   ///< the stop token, -1 for none
  static constexpr std::size_t count = 2;  ///< tokens appended so far

  // Out: the output staging.
  static constexpr std::size_t next = 0;                                     ///< a step's next tokens [kMaxRows]
  static constexpr std::size_t generate_control = next + kMaxRows;           ///< generate's control after its loop
  static constexpr std::size_t generated = generate_control + control_size;  ///< generate's tokens [context]
  /// Ints out for a decoder of `context` positions.
  [[nodiscard]] static constexpr std::size_t output_size(int context) noexcept {
    return generated + static_cast<std::size_t>(context);
  }
};

/// The io of a prefill chunk on tensor cores (nn/prefill.hpp), in ints: [start | rows | slot | last_position | tokens],
/// the first three as flash attention and the prefill kernels read them (PrefillChunkLayout), last_position (start +
/// rows - 1) as the sampler reads the last row's position, then the chunk's tokens (token 0 in the bucket's padding).
/// The decoder's input staging holds it at DecoderIo::prefill; each chunk graph copies it, up to its bucket's tokens,
/// to BasicPrefillBuffers::io, and the head graph writes the next token to DecoderIo::next of the output staging.
struct PrefillIo {
  static constexpr std::size_t start = PrefillChunkLayout::start;         ///< the chunk's first position
  static constexpr std::size_t rows = PrefillChunkLayout::rows;           ///< its rows (tokens)
  static constexpr std::size_t slot = PrefillChunkLayout::slot;           ///< its sequence slot
  static constexpr std::size_t last_position = PrefillChunkLayout::size;  ///< start + rows - 1
  static constexpr std::size_t tokens = last_position + 1;                ///< the tokens [rows of the bucket]
  /// Ints of the io of a chunk of up to `rows` rows.
  [[nodiscard]] static constexpr std::size_t input_size(int rows) noexcept {
    return tokens + static_cast<std::size_t>(rows > 0 ? rows : 0);
  }
};

/// The io of a packed prefill chunk (BasicPrefill::run_packed: up to kMaxRows sequences' prompt parts in one chunk on
/// tensor cores), in ints: PrefillIo's header [start = 0 | rows (all parts') | slot = 0 | unused], so that the
/// row-wise kernels see one chunk of all the rows, then the parts' segments as varlen_prefill_attention reads them
/// (PrefillSegmentsLayout for kMaxRows), each part's last row in the chunk, that row's position and the part's slot
/// (for the LM head and the sampler, kMaxRows each), then the chunk's tokens and each row's position (a bucket's rows
/// each, padding rows token 0 at position 0). The decoder's input staging holds it at DecoderIo::prefill, where a
/// PrefillIo would be (the two never run at once); the parts' block tables are the forward_batch tables' rows.
struct PackedPrefillIo {
  static constexpr std::size_t segments = PrefillIo::tokens;  ///< the parts' [count, start_i, rows_i ...]
  static constexpr std::size_t lasts = segments + PrefillSegmentsLayout::size(kMaxRows);  ///< last rows [kMaxRows]
  static constexpr std::size_t last_positions = lasts + kMaxRows;  ///< their positions [kMaxRows]
  static constexpr std::size_t slots = last_positions + kMaxRows;  ///< the parts' slots [kMaxRows]
  static constexpr std::size_t tokens = slots + kMaxRows;          ///< the chunk's tokens [rows of the bucket]
  /// Where the rows' positions lie for a bucket of `rows` rows: after its tokens.
  [[nodiscard]] static constexpr std::size_t positions(int rows) noexcept {
    return tokens + static_cast<std::size_t>(rows > 0 ? rows : 0);
  }
  /// Ints of the io of a packed chunk of up to `rows` rows.
  [[nodiscard]] static constexpr std::size_t input_size(int rows) noexcept {
    return positions(rows) + static_cast<std::size_t>(rows > 0 ? rows : 0);
  }
};

/// Ints of the io buffer: DecoderIo::input_size (tokens, positions and slots, kMaxRows each, then generate's control).
inline constexpr int kIoSize = static_cast<int>(DecoderIo::input_size);

}  // namespace lazygraph::nn
