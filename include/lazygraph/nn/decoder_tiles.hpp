#pragma once
/// \file
/// The decode step as tile-function calls for a persistent program (kernels/persistent_program.hpp): the decoder's
/// persistent backend (DecoderConfig::backend). The same kernels' code as the graph backend's fused path, each kernel
/// body run as tiles instead of blocks: the embedding, per layer the norm and q/k/v projections with RoPE and the
/// cache append, attention (a tile per row and head), the output projection with its residual add, the SwiGLU
/// block's two halves, then the final norm with the LM head and the choice of the next token: greedy over chunks of
/// the vocabulary (a tile each, then a tile per row takes the best: the argmax kernel's token), or drawn by a tile per
/// row (sample).
///
/// What differs from the graph backend's results, within rounding: every projection runs on tensor cores (the
/// kernels' _mma path, BatchedKernel), also for one row, attention sums its positions over the program's
/// blocks (256 threads by default) instead of the attention kernel's, and a quantized projection's tile of 16 rows
/// is shared by the block's warps rather than by its kernel's (BasicQuantizedKernels::config), so its sums add up in
/// another order. What does not: a program's op() and its graph_op() (the same tiles as kernels) give the same bits.
#include <vector>

#include "lazygraph/kernels/persistent_program.hpp"
#include "lazygraph/kernels/tile_function.hpp"
#include "lazygraph/nn/decoder_state.hpp"
#include "lazygraph/nn/decoder_weights.hpp"
#include "lazygraph/nn/quantized_kernels.hpp"
#include "lazygraph/nn/sampling.hpp"

namespace lazygraph::nn {

/// Typed handles to the tile functions of the decoder's persistent backend over elements of T (fp16:
/// `gemv_add_mma_tile` and so on; bf16: `gemv_add_mma_tile_bf16`). The parameters are their kernels' (BasicKernels).
template <Element T>
struct BasicDecoderTiles {
  /// Looks every function up. \throws UsageError as KernelLibrary::tile does (the nn kernel set missing from
  /// `library`, a signature that differs from the declaration).
  explicit BasicDecoderTiles(const KernelLibrary& library);

  /// embedding_tile(table, tokens, out, d, batch): a tile per row (kernels/nn/embedding.cu).
  TileFunction<void(const T*, const int*, T*, int, int)> embedding;
  /// qkv_rope_append_mma_tile: qkv_rope_append's tensor-core path, a tile per 8 stacked weight rows
  /// (kernels/nn/qkv.cu).
  TileFunction<void(const T*, const T*, const T*, const T*, const T*, const T*, const T*, const T*, T*, T*, T*,
                    const int*, const int*, int, int, int, int, int, int, const float*, float, int)>
      qkv_rope_append;
  /// attention_tile: attention, a tile per (head, row) with the scores in the tile's shared memory
  /// (kernels/nn/attention.cu).
  TileFunction<void(const T*, const T*, const T*, T*, const int*, const int*, int, int, int, int, int, float)>
      attention;
  /// gemv_add_mma_tile(W, x, out, rows, cols, batch): out += W x, a tile per 8 rows (kernels/nn/gemv.cu).
  TileFunction<void(const T*, const T*, T*, int, int, int)> gemv_add;
  /// rms_norm_gemv_mma_tile(W, x, g, out, rows, cols, eps, batch).
  TileFunction<void(const T*, const T*, const T*, T*, int, int, float, int)> rms_norm_gemv;
  /// rms_norm_gemv_swiglu_mma_tile(W1, W3, x, g, out, rows, cols, eps, batch).
  TileFunction<void(const T*, const T*, const T*, const T*, T*, int, int, float, int)> rms_norm_gemv_swiglu;
  /// sample_tile(logits, out, positions, slots, n, top_k, temperature, seed, top_p): a tile per row
  /// (kernels/nn/sample.cu).
  TileFunction<void(const T*, int*, const int*, const int*, int, int, float, unsigned, float)> sample;
  /// argmax_chunk_tile(logits, best_values, best_indices, n, chunk): a tile per (chunk, row) (kernels/nn/argmax.cu).
  TileFunction<void(const T*, float*, int*, int, int)> argmax_chunk;
  /// argmax_final_tile(best_values, best_indices, out, chunks): a tile per row; greedy steps choose with the two.
  TileFunction<void(const float*, const int*, int*, int)> argmax_final;

  /// The quantized projections' tiles (kernels/nn/qgemv.cu; fp16 `qgemv_add_tile_int8` and so on, bf16
  /// `qgemv_add_tile_bf16_int8`), the parameters their kernels' (BasicQuantizedKernels): the program's block shares
  /// out each tile of 16 weight rows.
  QuantizedTile<void(QuantizedMatrix, const T*, const T*, const T*, T*, T*, T*, const int*, const int*, int, int, int,
                     int, int, int, const float*, float, int)>
      quantized_qkv_rope_append;
  /// qgemv_add_tile(W, x, out, rows, cols, batch).
  QuantizedTile<void(QuantizedMatrix, const T*, T*, int, int, int)> qgemv_add;
  /// rms_norm_qgemv_tile(W, x, g, out, rows, cols, eps, batch).
  QuantizedTile<void(QuantizedMatrix, const T*, const T*, T*, int, int, float, int)> rms_norm_qgemv;
  /// rms_norm_qgemv_swiglu_tile(W1, W3, x, g, out, rows, cols, eps, batch).
  QuantizedTile<void(QuantizedMatrix, QuantizedMatrix, const T*, const T*, T*, int, int, float, int)>
      rms_norm_qgemv_swiglu;
};

/// One decode step of `rows` rows as tile calls, in program order, reading and writing what decoder_step does (the
/// tokens, positions and slots in s.io; the next tokens in s.next, the logits in s.logits). Each projection in its
/// weight's format: a dense one takes c.persistent_tile_rows weight rows per tile, or with 0 `blocks` tiles (the
/// program's blocks; fewer where it has fewer groups of 8 rows); a quantized one (any format of the storage table,
/// its kernels' code) as many tiles, of 16 rows (persistent_tile_rows rounded up to 16), the block's warps sharing
/// each.
/// \throws UsageError for rows outside 1..kMaxRows, for a config the backend does not run (DecoderConfig::validate
/// says which).
template <Element T>
[[nodiscard]] std::vector<TileCall> decoder_step_tiles(const BasicDecoderTiles<T>& tiles,
                                                       const BasicDecoderWeights<T>& w, BasicDecoderState<T>& s,
                                                       const DecoderConfig& c, int rows, const Sampling& sampling,
                                                       unsigned blocks);

extern template struct BasicDecoderTiles<half>;
extern template struct BasicDecoderTiles<bfloat16>;

}  // namespace lazygraph::nn
