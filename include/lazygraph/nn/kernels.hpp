#pragma once
/// \file
/// Layer 6, nn: the nn kernel set (`kernels/nn/*.cu`, embedded into liblazygraph_nn) and the typed handles of
/// its kernels with their launch shapes. Each handle's call returns a lazy launch op; the blocks and models of
/// this layer compose them into forward passes.

#include <lazygraph/lazygraph.hpp>

#include "lazygraph/nn/element.hpp"
#include "lazygraph/nn/gate_activation.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>

namespace lazygraph::nn {

/// The nn kernels, embedded at build time from `kernels/nn/*.cu`. Give it to the KernelLibrary the models use:
/// `KernelLibrary(device, {.kernel_sets = {nn::kernel_set()}})`, which also has the core set (`nn::kernel_library`
/// does so).
const KernelSet& kernel_set();

/// A KernelLibrary of the core and the nn kernel sets, cached in the default cache directory.
KernelLibrary kernel_library(const Device& device);

/// Device addresses of one SwiGLU block's weights, the layout kernels/nn/mlp_stack.cu reads (its struct MlpLayer):
/// gain [d], W1 and W3 [ffn x d], W2 [d x ffn].
struct MlpLayer {
  CUdeviceptr gain = 0;  ///< norm gain
  CUdeviceptr w1 = 0;    ///< gate projection
  CUdeviceptr w3 = 0;    ///< up projection
  CUdeviceptr w2 = 0;    ///< down projection
};
static_assert(sizeof(MlpLayer) == 32 && std::is_trivially_copyable_v<MlpLayer>, "MlpLayer is copied to the device");

/// The variants of a gemv-family kernel, called like one Kernel whose last parameter is the batch: the call picks
/// the variant for it. Every such kernel has four fp32 variants, NAME, NAME_b2, NAME_b4 and NAME_b8 (compiled for
/// batches of up to 1, 2, 4 and 8 vectors; the smallest that holds the batch runs it); the kernels of
/// kernels/nn/gemv.cu (and moe.cu's expert kernels) also have NAME_mma, on tensor cores, for 1 to 8 vectors. Asked for
/// tensor cores, the call runs batches of 2 to 8 on NAME_mma and a batch of one on NAME. A batch outside 1..8 is a
/// UsageError.
///
/// Which path runs decides the bits: the fp32 variants give each vector of a batch exactly what a batch of one
/// gives it; NAME_mma gives each vector the same bits whatever else the batch holds, but sums each group of 16
/// products its own way, so its results differ from the fp32 path's within rounding (and it rounds x * g to the
/// element type in the rms_norm kernels, which the fp32 path keeps in fp32).
template <class Signature>
class BatchedKernel;

/// See the primary template.
template <class... Params>
class BatchedKernel<void(Params...)> {
 public:
  /// Looks up the four fp32 variants of `name` and, with `tensor_cores`, NAME_mma.
  /// \throws UsageError as KernelLibrary::get does (also when NAME_mma is asked for and missing).
  BatchedKernel(const KernelLibrary& library, const std::string& name, bool tensor_cores = false)
      : variants_{library.get<void(Params...)>(name), library.get<void(Params...)>(name + "_b2"),
                  library.get<void(Params...)>(name + "_b4"), library.get<void(Params...)>(name + "_b8")} {
    if (tensor_cores) tensor_core_ = library.get<void(Params...)>(name + "_mma");
  }

  /// The variant that runs `batch` vectors. \throws UsageError outside 1..8.
  [[nodiscard]] const Kernel<void(Params...)>& variant(int batch) const {
    if (batch < 1 || batch > 8) {
      throw UsageError("batched kernel " + variants_[0].name() + ": batch " + std::to_string(batch) +
                       " is outside 1..8");
    }
    if (tensor_core_ && batch >= 2) return *tensor_core_;
    return variants_[batch <= 1 ? 0 : batch <= 2 ? 1 : batch <= 4 ? 2 : 3];
  }

  /// Whether batches of 2 to 8 run on tensor cores (NAME_mma).
  [[nodiscard]] bool tensor_cores() const noexcept { return tensor_core_.has_value(); }

  /// The launch op of the variant for the batch (the last argument).
  template <class... Args>
  [[nodiscard]] LaunchOp<Params...> operator()(const LaunchConfig& config, const Args&... args) const {
    return variant(last(args...))(config, args...);
  }

  /// Launches the variant for the batch (the last argument) on `stream` now.
  template <class... Args>
  void launch(const Stream& stream, const LaunchConfig& config, const Args&... args) const {
    variant(last(args...)).launch(stream, config, args...);
  }

 private:
  template <class... Args>
  static int last(const Args&... args) {
    static_assert(sizeof...(Args) == sizeof...(Params), "pass one argument per kernel parameter, the batch last");
    return static_cast<int>(std::get<sizeof...(Args) - 1>(std::forward_as_tuple(args...)));
  }

  std::array<Kernel<void(Params...)>, 4> variants_;
  std::optional<Kernel<void(Params...)>> tensor_core_;
};

/// How BasicKernels launches.
struct KernelOptions {
  /// Launch every kernel early (see BasicKernels::step_config); false gives ordinary launches, to compare.
  bool early_launch = true;
  /// Run batches of 2 to 8 of the gemv-family kernels on tensor cores (BatchedKernel): on the H100 a batch of 8
  /// then costs about what a batch of one does (the fp32 variants: about twice), but a row of a batch no longer
  /// gets exactly the bits it would get alone (within rounding: see BatchedKernel). Off by default, so that batches
  /// and prefill stay bit-identical to one row at a time.
  bool tensor_cores = false;
};

/// Blocks of 256 threads a multiprocessor holds of the one-vector kernels of gemv.cu (their __launch_bounds__), and
/// the most a multiprocessor gets of their grids (BasicKernels::fp32_gemv_config); rms_norm_gemv's excepted
/// (kOneVectorNormGemvBlocks).
inline constexpr unsigned kOneVectorGemvBlocks = 2;
/// Threads a block of the one-vector qkv_rope_append (and its paged twin) has (BasicKernels::qkv_config).
inline constexpr unsigned kOneVectorQkvThreads = 128;
static_assert(kOneVectorQkvThreads % 64 == 0, "a block of Q/K/V holds an even number of rows at 2 warps a row");
/// Blocks of kOneVectorQkvThreads a multiprocessor holds of the one-vector qkv_rope_append (their __launch_bounds__:
/// 95 registers) and gets of its grids: 20 warps a multiprocessor instead of 16, so that 2560 rows of Q/K/V (the
/// TinyLlama shape's) take one pass of the capped grid, not two.
inline constexpr unsigned kOneVectorQkvBlocks = 5;
/// Threads a block of the one-vector rms_norm_gemv has (BasicKernels::rms_norm_gemv_config).
inline constexpr unsigned kOneVectorNormGemvThreads = 128;
static_assert(kOneVectorNormGemvThreads % 32 == 0 && kOneVectorNormGemvThreads <= 256,
              "a block of rms_norm_gemv is whole warps, at most gemv.cu's 8");
/// Blocks of kOneVectorNormGemvThreads a multiprocessor holds of the one-vector rms_norm_gemv (its __launch_bounds__:
/// 80 registers, no spills) and gets of its grids: 24 warps a multiprocessor instead of gemv's 16. H200, 2026-12-01,
/// against 256 x 2, alternated twice in one run: Qwen3-30B-A3B (its Q/K/V, 5120 rows, in 2 passes instead of 3; 12
/// layers) 788.6-789.9 -> 776.8-777.5 us, the dense shapes (their LM heads) within 0.5 %; 128 x 5 gained less
/// (783.9-784.7 on Qwen3), and the same blocks for gemv, gemv_add and the gate/up kernels lost up to 9 %. A second run
/// against main: OLMoE-1B-7B 1002.8-1004.9 -> 969.6-971.5 us (docs/decode_performance.md).
inline constexpr unsigned kOneVectorNormGemvBlocks = 6;

/// Ints of the plan moe_route writes for the expert kernels (kernels/nn/moe.cu's kPlanInts): the count of distinct
/// experts a step chose, the experts (up to 8 rows x 16 slots), and for each and each of 8 rows the pair that chose it.
inline constexpr std::size_t kMoePlanInts = 1153;

/// Grouped positions (a chunk's (row, slot) pairs of one expert) per tile of moe_prefill_gate_up and moe_prefill_down
/// (kernels/nn/moe_prefill.cu's kTileRows): each tile reads its expert's weights once.
inline constexpr int kMoePrefillTileRows = 64;
/// Output columns per block of those kernels (kTileCols).
inline constexpr int kMoePrefillTileCols = 64;
/// Threads per block of those kernels (kThreads): four warps over a tile of 64 x 64.
inline constexpr unsigned kMoePrefillThreads = 128;
/// Columns of the reduction per shared-memory stage of those kernels (kTileK): each stage holds the tile's input rows
/// and each matrix's kMoePrefillTileCols rows, kMoePrefillTileK + 8 elements apart.
inline constexpr int kMoePrefillTileK = 64;
/// Shared-memory stages of those kernels (kStages): two in flight while one is read. Three keep the kernels within
/// the 99 KiB a block may have on sm_86 and sm_89; four were slower on an H200 (two blocks a multiprocessor).
inline constexpr int kMoePrefillStages = 3;
/// The decode step's grouped products (moe_decode_gate_up, moe_decode_down; kernels/nn/moe_prefill.cu's
/// DecodeShape): tiles of at most kMoeDecodeTileRows positions (2 to 8 rows choose an expert at most once each), blocks
/// of kMoeDecodeThreads over kMoeDecodeTileCols output columns, kMoeDecodeStages stages of kMoePrefillTileK columns.
/// A block's shared memory is three quarters of the prefill shape's for gate/up and five eighths for down (16 input
/// rows a stage instead of 64), so a multiprocessor holds 3 blocks of gate/up and 6 of down instead of 2 and 4: H200,
/// Qwen3-30B-A3B's 12 layers at 8 rows, 3172.7-3224.5 us a step with the prefill shape, 2679.3-2679.4 with this one
/// (alternated twice in one run; docs/performance.md has the sweep).
inline constexpr int kMoeDecodeTileRows = 16;
/// Output columns per block of the decode step's grouped products.
inline constexpr int kMoeDecodeTileCols = 64;
/// Threads per block of the decode step's grouped products: four warps of 16 x 16.
inline constexpr unsigned kMoeDecodeThreads = 128;
/// Shared-memory stages of the decode step's grouped products: two in flight while one is read.
inline constexpr int kMoeDecodeStages = 3;
/// Blocks of argmax_cluster's cluster: one row of logits.
inline constexpr unsigned kArgmaxClusterBlocks = 8;
/// Logits a row from which a greedy step on a GPU with clusters takes its token from argmax_cluster rather than from
/// sample's one block a row.
inline constexpr int kArgmaxClusterFrom = 16384;
/// Rows of d per block of moe_down_staged (kernels/nn/moe.cu), at most: 128 blocks for d 2048, one a multiprocessor.
inline constexpr int kMoeStagedRows = 16;
/// Shared memory moe_down_staged may take per block (a multiprocessor of an H100 or H200 has 228 KiB; Qwen3-30B-A3B's
/// 16 rows of d for 8 experts 768 wide take 216.5 KiB, which fits beside three blocks of moe_gate_up_staged).
inline constexpr long long kMoeStagedBytes = 224LL << 10;
/// Experts up to which moe_gate_up_staged and moe_down_staged route a row themselves (kernels/nn/moe_core.cuh's
/// kRegisterExperts: a lane's share of the probabilities in registers).
inline constexpr int kMoeStagedExperts = 128;
/// Blocks of moe_gate_up_staged a multiprocessor holds (its __launch_bounds__(256, 3) in kernels/nn/moe.cu).
inline constexpr int kMoeGateUpStagedBlocksPerSm = 3;
/// Rows moe_prefill_route routes per block (kRouteWarps warps).
inline constexpr int kMoePrefillRouteRows = 8;

/// The most tiles moe_prefill_group can cut `pairs` (row, slot) pairs over `experts` experts into: each expert's
/// pairs in tiles of kMoePrefillTileRows, so at most pairs / kMoePrefillTileRows full tiles and one partial tile per
/// expert that has pairs. The grid height of the grouped products.
[[nodiscard]] constexpr int moe_prefill_tiles(int pairs, int experts) noexcept {
  return pairs / kMoePrefillTileRows + std::min(pairs, experts);
}

/// Chunks of more rows than this run flash attention of head_dim 64 in tiles of 128 query rows
/// (BasicKernels::flash_attention_tile_rows); shorter ones in tiles of 64, which give them twice the blocks.
inline constexpr int kFlashAttentionWideFrom = 512;

/// Rows of a full decode step (nn::kMaxRows), by which attention_block_threads counts a batch's blocks.
inline constexpr int kAttentionStepRows = 8;

/// Warps per block of a tensor-core gemv-family kernel (NAME_mma: a block per tile of 8 rows, kernels/nn/
/// gemv_core.cuh's gemv_rows_mma) for `tiles` tiles of `cols` columns, `matrices` weights read together, on a GPU of
/// `multiprocessors`: 4 or 8. The kernels use 94-128 registers, so a multiprocessor holds at least 16 of their warps
/// (the rule counts 16; a kernel under 85 registers would hold 24, and the rule would then need that as an input); a
/// warp keeps 8 / matrices steps of 32 columns in flight (Q/K/V and the expert kernels wait for a pass's steps
/// before loading the next; the gemv family reloads each step's registers as its products issue). A kernel's time is
/// then about its waves of blocks times what a block costs, its passes over the tile's columns and about one pass
/// more (its start, wait, the warps' sum and its end): ceil(tiles / (multiprocessors * 16 / warps)) * (ceil(cols /
/// (32 * warps * 8 / matrices)) + 1). 4 warps where that is no more than 8 warps', else 8. It chose as the
/// measurements did on every shape tried (H200, 8-row steps, docs/decode_performance.md): 4 for q/k/v of 320 and 384
/// tiles of 2048 columns, gate/up of 1024 tiles and the LM heads of 4000 and 16032 tiles; 8 for gate/up of 704 tiles
/// and the output and down projections of 256 tiles.
/// The bits of a row depend on the warps (their partial sums are added in warp order), so this depends on the
/// shape and the GPU only, never on the batch.
[[nodiscard]] constexpr unsigned tensor_core_gemv_warps(unsigned tiles, int cols, int matrices,
                                                        int multiprocessors) noexcept {
  const auto cost = [&](unsigned warps) {
    const unsigned slots = static_cast<unsigned>(multiprocessors) * (16U / warps);
    const unsigned steps = (static_cast<unsigned>(cols) + 31U) / 32U;
    const unsigned per_pass = warps * (8U / static_cast<unsigned>(matrices));
    return ((tiles + slots - 1U) / slots) * ((steps + per_pass - 1U) / per_pass + 1U);
  };
  return multiprocessors > 0 && matrices > 0 && matrices <= 8 && cost(4) <= cost(8) ? 4U : 8U;
}

/// Blocks of a tensor-core gemv-family grid (NAME_mma) of `tiles` tiles in blocks of `warps` warps on a GPU of
/// `multiprocessors`: one wave (the 16 warps a multiprocessor holds, tensor_core_gemv_warps) where the tiles make a
/// wave and a half or more, each block then taking its tiles in turn (grid-stride); else, or with the GPU unknown, a
/// block a tile. A resident block goes on to its next tile where a new block would have to start, wait and load its
/// first step. A tile is one block's work either way, so a row's bits do not change. H200, 2026-12-02, 8-row steps,
/// one block a tile -> one wave, alternated in three runs (docs/decode_performance.md): TinyLlama shape (gate/up 704
/// tiles, 2.7 waves of 264; LM head 4000) 991.8-1001.8 -> 975.3-983.3 us, Llama-3.2-1B shape (gate/up 1024 tiles, 1.9
/// waves of 528; LM head 16032) 983.2-991.3 -> 963.1-971.0. Qwen3-30B-A3B (12 layers) 2636.7-2637.0 -> 2667.3 with its
/// q/k/v (640 tiles, 1.2 waves) in one wave too, hence the wave and a half; with its LM head alone (18992 tiles, after
/// the experts' kernels) 2647.1-2650.5, which this rule keeps.
[[nodiscard]] constexpr unsigned tensor_core_gemv_blocks(unsigned tiles, unsigned warps, int multiprocessors) noexcept {
  if (multiprocessors <= 0 || warps == 0 || warps > 16) return tiles;
  const unsigned wave = static_cast<unsigned>(multiprocessors) * (16U / warps);
  return tiles >= wave + wave / 2 ? wave : tiles;
}

/// Threads per block of `attention` and of the paged cache's unsplit kernel (`attention_paged`) for `rows` rows of
/// `heads` heads of `head_dim`, on a GPU of `multiprocessors`. With only `heads` blocks a row, many threads put much of
/// the cache in flight (H100, decoder layer chains at position 255: d 2048 773.7 us per 16 layers with 1024 threads
/// vs 851.2 with 256, default decoder 138.7 vs 155.4; at position 1023 886.8 vs 1235.4; at position 63 equal); 1024
/// for heads wider than 64. Heads of 64 or fewer take 512, chosen when such a block fit on a multiprocessor beside
/// the projection's blocks and so loaded the settled cache while they ran (since the one-vector Q/K/V's blocks fill
/// a multiprocessor's registers, kOneVectorQkvBlocks, a one-row step's no longer does; not re-measured against 1024
/// since). H200, one-row steps, 1024 -> 512 threads, alternated twice in one run: TinyLlama shape fp16 869.0 -> 862.1
/// us, int8 661.2 -> 637.0, int4 g128 566.0 -> 542.6; Llama-3.2-1B shape 903.4 -> 892.1, 548.5 -> 530.8, 502.3 ->
/// 485.7. Heads of 128 were slower at 512 (a dense decoder of d 2048, 16 heads over 8: 716.3 -> 720.1 us;
/// Qwen3-30B-A3B's 12 layers 803.5 -> 807.6). Batches of 2 rows or more on tensor cores (KernelOptions::tensor_cores)
/// take 1024, or 256 where a full step's blocks (heads x kAttentionStepRows) outnumber the multiprocessors, which hold
/// one block of 1024 threads each, so that 8 rows attend in one wave instead of two (H200, 8 rows at position 128: the
/// TinyLlama shape's step 1183.3 -> 1034.4 us, Qwen3-30B-A3B's 12 layers 2684.7-2686.8 -> 2632.9-2635.0). The block
/// size orders the softmax's and the values' sums, so it depends on no batch's own row count: a row gets the same bits
/// in every batch of 2 or more, and the paged cache's unsplit kernel the contiguous cache's; batches of 2 to 4 rows on
/// tensor cores, whose blocks alone would fit one wave of 1024, take 256 too (not measured). The fp32 batch takes what
/// one row takes, so that its rows keep the bits they get alone.
[[nodiscard]] constexpr unsigned attention_block_threads(int heads, int rows, int head_dim, bool tensor_cores,
                                                         int multiprocessors) noexcept {
  if (tensor_cores && rows >= 2) return heads * kAttentionStepRows > multiprocessors ? 256U : 1024U;
  return head_dim <= 64 ? 512U : 1024U;
}

/// Checks that a GPU of compute capability `cc` runs the tensor-core variants (mma.sync m16n8k16 on fp16 and bf16
/// needs 8.0 or newer). \throws UsageError naming the capability otherwise.
void check_tensor_cores(ComputeCapability cc);

/// Typed handles to every nn kernel over elements of T (fp16: `gemv`, ...; bf16: `gemv_bf16`, ...), looked up once.
/// The signatures here are the only host-side declaration of the nn kernels (the library checks each against the
/// kernel's source).
template <Element T>
struct BasicKernels {
  /// `early_launch`: launch every kernel early (see step_config); false gives ordinary launches, to compare.
  explicit BasicKernels(const KernelLibrary& library, bool early_launch = true)
      : BasicKernels(library, KernelOptions{.early_launch = early_launch}) {}
  /// The handles, launched as `options` say. \throws UsageError for tensor cores on a GPU without them
  /// (check_tensor_cores).
  BasicKernels(const KernelLibrary& library, KernelOptions options);

  /// embedding(table, tokens, out, d, batch): out[b] = table[tokens[b]] (kernels/nn/embedding.cu).
  Kernel<void(const T*, const int*, T*, int, int)> embedding;
  /// embedding_rows(table, tokens, out, d, batch, first, count): as embedding, for a table of the vocabulary's rows
  /// [first, first + count) only (a tensor-parallel rank's); other tokens give zeros (kernels/nn/embedding.cu).
  Kernel<void(const T*, const int*, T*, int, int, int, int)> embedding_rows;
  /// peer_all_reduce(x, words, slot_table, counters, rank, ranks): x = the sum over the ranks of their x, in place,
  /// through a PeerExchange (kernels/nn/peer_all_reduce.cu; PeerAllReduceOp in nn/peer_all_reduce.hpp runs it).
  Kernel<void(T*, int, const unsigned long long*, unsigned*, int, int)> peer_all_reduce;
  /// gemv_all_reduce(W, a, x, sum_table, counters, rank, ranks, rows, cols, batch): x[b] += the sum over the ranks of
  /// their W a[b], a row-parallel projection and its all-reduce in one kernel, through a PeerExchange
  /// (kernels/nn/peer_all_reduce.cu; nn::gemv_all_reduce in nn/peer_all_reduce.hpp runs it). Launched as
  /// gemv_config_uncapped.
  BatchedKernel<void(const T*, const T*, T*, const unsigned long long*, unsigned*, int, int, int, int, int)>
      gemv_all_reduce;
  /// gemv(W, x, out, rows, cols, batch): out[b] = W x[b] (kernels/nn/gemv.cu, also for the variants below).
  BatchedKernel<void(const T*, const T*, T*, int, int, int)> gemv;
  /// gemv_add(W, x, out, rows, cols, batch): out[b] += W x[b], the residual add fused.
  BatchedKernel<void(const T*, const T*, T*, int, int, int)> gemv_add;
  /// rms_norm_gemv(W, x, g, out, rows, cols, eps, batch): out[b] = W (rmsnorm(x[b]) * g); launched as
  /// rms_norm_gemv_config(rows, cols, batch).
  BatchedKernel<void(const T*, const T*, const T*, T*, int, int, float, int)> rms_norm_gemv;
  /// rms_norm_gemv_swiglu(W1, W3, x, g, out, rows, cols, eps, batch): out[b] = silu(W1 h) * (W3 h),
  /// h = rmsnorm(x[b]) * g; launched as gemv_config(rows, cols, batch, 2).
  BatchedKernel<void(const T*, const T*, const T*, const T*, T*, int, int, float, int)> rms_norm_gemv_swiglu;
  /// rms_norm_gemv_geglu(W1, W3, x, g, out, rows, cols, eps, batch): out[b] = gelu_tanh(W1 h) * (W3 h), h as above;
  /// launched as rms_norm_gemv_swiglu.
  BatchedKernel<void(const T*, const T*, const T*, const T*, T*, int, int, float, int)> rms_norm_gemv_geglu;
  /// mlp_stack(layers, x, act, sync, layer_count, d, ffn, eps, split_a, split_b, batch): every SwiGLU block of a
  /// stack in one persistent launch (kernels/nn/mlp_stack.cu; nn::BasicMlpStack makes its arguments).
  BatchedKernel<void(const MlpLayer*, T*, T*, unsigned*, int, int, int, float, int, int, int)> mlp_stack;
  /// qkv_rope_append(Wq, Wk, Wv, bq, bk, bv, x, g, q, k_cache, v_cache, positions, slots, d, q_rows, kv_heads,
  /// head_dim, context, slot_count, frequencies, eps, batch): h = rmsnorm(x[b]) * g; q[b] = rope(Wq h + bq);
  /// rope(Wk h + bk) and Wv h + bv appended to the caches (kernels/nn/qkv.cu): rms_norm_gemv three times, rope and
  /// kv_append in one launch (qkv_config). Wq has q_rows rows: heads * head_dim for a whole model, a tensor-parallel
  /// rank's heads' rows for its shard. The biases are all empty spans (none) or all given. frequencies: RoPE's
  /// inverse frequency of each pair of a head [head_dim / 2] (rope_frequencies).
  BatchedKernel<void(const T*, const T*, const T*, const T*, const T*, const T*, const T*, const T*, T*, T*, T*,
                     const int*, const int*, int, int, int, int, int, int, const float*, float, int)>
      qkv_rope_append;
  /// qkv_rope_append_paged(Wq, Wk, Wv, bq, bk, bv, x, g, q, k_pool, v_pool, positions, tables, d, q_rows, kv_heads,
  /// head_dim, block_size, blocks, table_width, frequencies, eps, batch): qkv_rope_append appending k and v through
  /// each row's block table into pools [blocks][kv_heads][block_size][head_dim] (a paged KV cache, the layout of
  /// PagedAttention; kernels/nn/qkv.cu). Launched as qkv_config.
  BatchedKernel<void(const T*, const T*, const T*, const T*, const T*, const T*, const T*, const T*, T*, T*, T*,
                     const int*, const int*, int, int, int, int, int, int, int, const float*, float, int)>
      qkv_rope_append_paged;
  /// qk_norm_rope_append(qkv, bias, q_gain, k_gain, q, k_cache, v_cache, positions, slots, heads, kv_heads, head_dim,
  /// context, slot_count, frequencies, eps, whole, batch): a block with q/k norms' input side after the stacked
  /// projection (kernels/nn/qk_norm.cu): each q and k head RMS-normed with its gain [head_dim] (whole 0), or the row's
  /// whole q and whole k with gains [q_dim] and [kv_dim] (whole 1: DecoderConfig::qk_norm_whole), RoPE, q written
  /// out, k and v appended to the caches. Launched as qk_norm_config.
  Kernel<void(const T*, const T*, const T*, const T*, T*, T*, T*, const int*, const int*, int, int, int, int, int,
              const float*, float, int, int)>
      qk_norm_rope_append;
  /// prefill_qk_norm_rope(qkv, bias, q_gain, k_gain, q, k, v, chunk, positions, heads, kv_heads, head_dim,
  /// frequencies, eps, whole, max_rows): qk_norm_rope_append for a prefill chunk's rows (kernels/nn/qk_norm.cu), into
  /// q, k and v, at positions start + r (or positions[r] when `positions` is not null: a packed chunk); launched as
  /// qk_norm_config for max_rows rows.
  Kernel<void(const T*, const T*, const T*, const T*, T*, T*, T*, const int*, const int*, int, int, int, const float*,
              float, int, int)>
      prefill_qk_norm_rope;
  /// rms_norm(x, g, out, d, eps): out = rmsnorm(x) * g per vector, one block each (kernels/nn/rms_norm.cu).
  Kernel<void(const T*, const T*, T*, int, float)> rms_norm;
  /// rms_norm_store_gemv(W, x, g, h, out, rows, cols, eps): h = rmsnorm(x) * g rounded to T and out = W h, for one
  /// vector: rms_norm and gemv in one launch, with their bits (kernels/nn/gemv.cu); launched as
  /// rms_norm_store_gemv_config. A mixture of experts' router, whose h the expert kernels read after it.
  Kernel<void(const T*, const T*, const T*, T*, T*, int, int, float)> rms_norm_store_gemv;
  /// rms_norm_add(in, g, x, d, eps): x += rmsnorm(in) * g per vector, the normed vector rounded first (a post-norm),
  /// one block each (kernels/nn/rms_norm.cu).
  Kernel<void(const T*, const T*, T*, int, float)> rms_norm_add;
  /// moe_route(logits, ids, weights, plan, experts, top_k, normalize, batch): a mixture of experts' routing of the
  /// router's logits [batch][experts] (gemv's): each row's top_k experts and their weights written to ids and
  /// weights, and the step's plan (kMoePlanInts: the distinct experts chosen and which row's pair chose each) for the
  /// expert kernels (kernels/nn/moe.cu); a grid of one block.
  Kernel<void(const T*, int*, float*, int*, int, int, int, int)> moe_route;
  /// moe_gate_up(w1, w3, h, plan, act, experts, width, d, top_k, batch): act[j] = silu(W1_e h[b]) * (W3_e h[b]) for
  /// each pair j by which row b chose expert e, from the stacked [experts][width][d] weights, each chosen expert's
  /// rows read once for the batch (kernels/nn/moe.cu); launched as moe_config(width, d, ...).
  BatchedKernel<void(const T*, const T*, const T*, const int*, T*, int, int, int, int, int)> moe_gate_up;
  /// moe_down(w2, act, plan, weights, partial, counters, x, experts, width, d, top_k, batch): x[b] += the sum over
  /// row b's slots s, in order, of weights[b][s] * W2_e act[b * top_k + s], rounded once, from the stacked
  /// [experts][d][width] weights; each pair's product in fp32 in partial [batch * top_k][d], the last block of each
  /// grid column (counted in counters, zero before and after) adding its rows into x (kernels/nn/moe.cu); launched
  /// as moe_down_config(d, width, ...).
  BatchedKernel<void(const T*, const T*, const int*, const float*, float*, unsigned*, T*, int, int, int, int, int)>
      moe_down;
  /// moe_gate_up_staged(w1, w3, h, logits, ids, weights, plan, act, experts, width, d, top_k, normalize): one row's
  /// moe_route and moe_gate_up in one kernel, the same bits (each block routes the row itself, block (0, 0) writes
  /// ids, weights and the plan; at most kMoeStagedExperts experts), for moe_down_staged to follow: its
  /// multiprocessors kept split for shared memory (prefer_shared_carveout), which moe_down_staged's blocks need to
  /// become resident beside it; launched as moe_gate_up_staged_config.
  Kernel<void(const T*, const T*, const T*, const T*, int*, float*, int*, T*, int, int, int, int, int)>
      moe_gate_up_staged;
  /// moe_down_staged(w2, act, logits, x, experts, width, d, top_k, normalize): moe_down's sum for one row, the same
  /// bits, by blocks that each route the row from the logits and copy their rows of d of the chosen experts into
  /// shared memory before their wait, so that they stream in while moe_gate_up_staged runs; only right after
  /// moe_gate_up_staged of the same logits, which lets it launch once the router's gemv is complete
  /// (kernels/nn/moe.cu); launched as moe_down_staged_config(d, width, ...).
  Kernel<void(const T*, const T*, const T*, T*, int, int, int, int, int)> moe_down_staged;
  /// scale(x, n, factor): x *= factor in place (kernels/nn/scale.cu; the embedding's scale).
  Kernel<void(T*, long long, float)> scale;
  /// softcap(x, n, cap): x = tanh(x / cap) * cap in place (kernels/nn/scale.cu; final logit soft-capping).
  Kernel<void(T*, long long, float)> softcap;
  /// rope(q, k, positions, heads, kv_heads, head_dim, frequencies, batch): rotary embedding in place
  /// (kernels/nn/rope.cu); frequencies as qkv_rope_append's.
  Kernel<void(T*, T*, const int*, int, int, int, const float*, int)> rope;
  /// kv_append(k, v, k_cache, v_cache, positions, slots, kv_heads, head_dim, context, slot_count, batch)
  /// (kernels/nn/attention.cu).
  Kernel<void(const T*, const T*, T*, T*, const int*, const int*, int, int, int, int, int)> kv_append;
  /// attention(q, k_cache, v_cache, out, positions, slots, heads, kv_heads, head_dim, context, slot_count, scale,
  /// window): window 0 attends every position up to the row's, else the `window` positions up to it.
  Kernel<void(const T*, const T*, const T*, T*, const int*, const int*, int, int, int, int, int, float, int)> attention;
  /// attention_split(q, k_cache, v_cache, out, partials, counters, positions, slots, heads, kv_heads, head_dim,
  /// context, slot_count, scale, window): attention with each (row, head) spread over grid.z blocks of positions,
  /// combined by the last of them (kernels/nn/attention.cu).
  Kernel<void(const T*, const T*, const T*, T*, float*, unsigned*, const int*, const int*, int, int, int, int, int,
              float, int)>
      attention_split;
  /// flash_attention_d64 / flash_attention_d128(q, k, v, k_cache, v_cache, out, chunk, max_rows, heads, kv_heads,
  /// context, slot_count, scale): causal attention of a prompt chunk over a slot's cache, on tensor cores, writing the
  /// chunk's k and v into the cache (kernels/nn/flash_attention.cu), for head_dim 64 and 128; `chunk` holds [start,
  /// rows, slot] in device memory (PrefillChunkLayout), rows at most max_rows, the rows q, k, v and out hold; launched
  /// as flash_attention_config. nn::prefill_attention (prefill_attention.hpp) checks the arguments on the host and
  /// picks the kernel.
  using FlashAttention =
      Kernel<void(const T*, const T*, const T*, T*, T*, T*, const int*, int, int, int, int, int, float, int)>;
  /// See FlashAttention.
  FlashAttention flash_attention_d64;
  /// See FlashAttention.
  FlashAttention flash_attention_d128;
  /// flash_attention_d64 in tiles of 64 query rows instead of 128 (one mma row tile per warp instead of two): twice the
  /// blocks, for chunks too short to fill the GPU with 128-row tiles (flash_attention_tile_rows picks).
  FlashAttention flash_attention_rows64_d64;
  /// flash_attention_paged_d64 / _d128 / _rows64_d64(q, k, v, k_pool, v_pool, out, chunk, table, max_rows, heads,
  /// kv_heads, context, block_size, blocks, table_width, scale, window): FlashAttention over a paged KV cache, the pool
  /// [blocks][kv_heads][block_size][head_dim] read and written through the chunk's block table (`table_width` ints in
  /// device memory), with FlashAttention's arithmetic and bits (kernels/nn/flash_attention.cu); launched as
  /// flash_attention_config. nn::paged_prefill_attention checks the arguments on the host and picks the kernel.
  using FlashAttentionPaged = Kernel<void(const T*, const T*, const T*, T*, T*, T*, const int*, const int*, int, int,
                                          int, int, int, int, int, float, int)>;
  /// See FlashAttentionPaged.
  FlashAttentionPaged flash_attention_paged_d64;
  /// See FlashAttentionPaged.
  FlashAttentionPaged flash_attention_paged_d128;
  /// flash_attention_paged_d64 in tiles of 64 query rows (flash_attention_rows64_d64's tiles).
  FlashAttentionPaged flash_attention_paged_rows64_d64;
  /// flash_attention_paged_varlen_d64 / _d128(q, k, v, k_pool, v_pool, out, segments, tables, max_rows, max_segments,
  /// heads, kv_heads, context, block_size, blocks, table_width, scale, window): FlashAttentionPaged over several
  /// sequences' chunks packed in q, k, v and out (segments in device memory, PrefillSegmentsLayout; segment i through
  /// row i of `tables`), each with FlashAttentionPaged's arithmetic; launched as flash_attention_varlen_config.
  /// nn::varlen_prefill_attention checks the arguments on the host.
  using FlashAttentionVarlen = Kernel<void(const T*, const T*, const T*, T*, T*, T*, const int*, const int*, int, int,
                                           int, int, int, int, int, int, float, int)>;
  /// See FlashAttentionVarlen.
  FlashAttentionVarlen flash_attention_paged_varlen_d64;
  /// See FlashAttentionVarlen.
  FlashAttentionVarlen flash_attention_paged_varlen_d128;
  /// prefill_rms_norm(x, gain, out, chunk, d, eps, max_rows): RMSNorm of the chunk's rows (kernels/nn/prefill.cu; chunk
  /// as flash_attention's), 16-byte loads; out may be x.
  Kernel<void(const T*, const T*, T*, const int*, int, float, int)> prefill_rms_norm;
  /// prefill_qkv_rope(qkv, bq, bk, bv, q, k, v, chunk, positions, heads, kv_heads, head_dim, frequencies, max_rows):
  /// the stacked q/k/v GEMM's rows split into q, k and v, with the biases (all three null for none) and RoPE at
  /// positions start + r (or positions[r] when `positions` is not null: a packed chunk), for the rows the chunk holds
  /// (kernels/nn/prefill.cu).
  Kernel<void(const T*, const T*, const T*, const T*, T*, T*, T*, const int*, const int*, int, int, int, const float*,
              int)>
      prefill_qkv_rope;
  /// prefill_silu_mul(gate, up, out, chunk, width, stride, max_rows): out = silu(gate) * up over the chunk's rows of
  /// `width` elements, gate's and up's rows `stride` apart (width, or 2 width for one product over W1 and W3 stacked;
  /// kernels/nn/prefill.cu); out may be gate when stride is width.
  Kernel<void(const T*, const T*, T*, const int*, int, int, int)> prefill_silu_mul;
  /// prefill_gelu_mul(gate, up, out, chunk, width, stride, max_rows): prefill_silu_mul with gelu_tanh (GeGLU's).
  Kernel<void(const T*, const T*, T*, const int*, int, int, int)> prefill_gelu_mul;
  /// prefill_rms_norm_add(in, gain, x, chunk, d, eps, max_rows): x += rmsnorm(in) * gain over the chunk's rows, the
  /// normed row rounded first (a post-norm); launched as prefill_rms_norm (kernels/nn/prefill.cu).
  Kernel<void(const T*, const T*, T*, const int*, int, float, int)> prefill_rms_norm_add;
  /// prefill_last_row(x, chunk, out, d, max_rows): out = the chunk's last row of x (kernels/nn/prefill.cu).
  Kernel<void(const T*, const int*, T*, int, int)> prefill_last_row;
  /// moe_prefill_route(logits, count, ids, weights, experts, top_k, normalize, max_rows): a mixture of experts'
  /// routing of the first count[0] rows, each as moe_route's (kernels/nn/moe_prefill.cu); launched as
  /// moe_prefill_route_config.
  Kernel<void(const T*, const int*, int*, float*, int, int, int, int)> moe_prefill_route;
  /// moe_prefill_group(ids, count, order, slot_of, tiles, experts, top_k, max_rows, max_tiles): the first count[0]
  /// rows' (row, slot) pairs grouped by expert and cut into tiles of up to kMoePrefillTileRows
  /// (kernels/nn/moe_prefill.cu); one block of 1024 threads. The same kernel in fp16 and bf16.
  Kernel<void(const int*, const int*, int*, int*, int*, int, int, int, int)> moe_prefill_group;
  /// moe_prefill_gate_up(h, w1, w3, order, tiles, act, width, d, top_k, max_tiles): act[p] = silu(W1_e h[r]) *
  /// (W3_e h[r]) for each grouped position p (pair order[p], row r, expert e of its tile), on tensor cores
  /// (kernels/nn/moe_prefill.cu); launched as moe_prefill_gate_up_config(width, max_tiles).
  Kernel<void(const T*, const T*, const T*, const int*, const int*, T*, int, int, int, int)> moe_prefill_gate_up;
  /// moe_prefill_down(act, w2, tiles, partial, d, width, max_tiles): partial[p] = W2_e act[p] in fp32, on tensor
  /// cores (kernels/nn/moe_prefill.cu); launched as moe_prefill_down_config(d, max_tiles).
  Kernel<void(const T*, const T*, const int*, float*, int, int, int)> moe_prefill_down;
  /// moe_prefill_gate_up for a decode step of 2 to 8 rows (tiles of at most kMoeDecodeTileRows positions): the same
  /// arguments and bits, in smaller blocks that keep more weights in flight; launched as moe_decode_gate_up_config.
  Kernel<void(const T*, const T*, const T*, const int*, const int*, T*, int, int, int, int)> moe_decode_gate_up;
  /// moe_prefill_down for a decode step of 2 to 8 rows, as moe_decode_gate_up; launched as moe_decode_down_config.
  Kernel<void(const T*, const T*, const int*, float*, int, int, int)> moe_decode_down;
  /// moe_prefill_combine(partial, slot_of, weights, x, count, d, top_k, max_rows): x[r] += the weighted sum of row r's
  /// experts' products, in slot order, rounded once (kernels/nn/moe_prefill.cu); 1-D, any grid.
  Kernel<void(const float*, const int*, const float*, T*, const int*, int, int, int)> moe_prefill_combine;
  /// argmax(logits, out, n): per row (one block each), the index of the largest logit, the lowest among ties
  /// (kernels/nn/argmax.cu).
  Kernel<void(const T*, int*, int)> argmax;
  /// argmax_cluster(logits, out, n): argmax's tokens, each row read by a cluster of blocks (sm_90 and newer;
  /// kernels/nn/argmax.cu), for long rows; launched as argmax_cluster_config, where greedy_by_cluster.
  Kernel<void(const T*, int*, int)> argmax_cluster;
  /// sample(logits, out, positions, slots, n, top_k, temperature, seed, top_p): per row (one block each), the greedy
  /// or sampled next token (kernels/nn/sample.cu, sampling.hpp).
  Kernel<void(const T*, int*, const int*, const int*, int, int, float, unsigned, float)> sample;
  /// The kernels of Decoder::generate's loop: empty when the library lacks them, with the reason in
  /// `loop_unavailable`; everything else works without them.
  struct LoopKernels {
    /// generate_advance(c, next, tokens, positions, control, out): the loop step, for any element type
    /// (kernels/nn/generate.cu).
    Kernel<void(Condition, const int*, int*, int*, int*, int*)> generate_advance;
    /// The core while_guard kernel (kernels/control.cu) that bounds the loop.
    Kernel<void(Condition, unsigned*, unsigned)> while_guard;
  };
  /// See LoopKernels.
  std::optional<LoopKernels> loop;
  /// Why `loop` is empty.
  std::string loop_unavailable;
  /// fill_uniform_f16 / fill_uniform_bf16(out, n, key, scale, offset): seeded weights (kernels/nn/random.cu,
  /// docs/nn.md).
  Kernel<void(T*, long long, unsigned, float, float)> fill_uniform;
  /// Whether step_config launches early.
  bool early_launch = true;
  /// Whether the gemv family runs batches of 2 to 8 on tensor cores (KernelOptions::tensor_cores).
  bool tensor_cores = false;
  /// The device's multiprocessors, which some launch shapes follow.
  int multiprocessors = 0;
  /// The shared memory a block may have on the device (after opting in), which some launch shapes follow.
  int shared_memory_optin = 0;
  /// Whether the device copies into shared memory asynchronously (cp.async: sm_80 and newer).
  bool async_copies = false;
  /// Whether the device launches blocks in clusters (LaunchConfig::cluster: sm_90 and newer).
  bool clusters = false;

  /// `config` as a decode step launches it: early (programmatic dependent launch, LaunchConfig::early_launch)
  /// unless switched off. Every kernel above calls wait_for_prior_grids() before touching activations, and
  /// the gemv kernels prefetch their weights into L2 before that wait, so one kernel's start overlaps the
  /// previous one's tail.
  [[nodiscard]] LaunchConfig step_config(LaunchConfig config) const {
    config.early_launch = early_launch;
    return config;
  }

  /// Launch shape of a gemv-family kernel (kernels/nn/gemv.cu) for a rows x cols weight and `batch` vectors: that of
  /// the tensor-core variant (tensor_core_gemv_config) when it runs the batch, else fp32_gemv_config's. Any shape
  /// within a kernel's launch bound computes the right result on either path; this one is the fast one. Not for
  /// rms_norm_gemv (rms_norm_gemv_config: its one-vector blocks are smaller) or qkv_rope_append (qkv_config).
  /// `matrices`: the weights one kernel reads together (2 for the gate/up kernels), which the tensor-core shape needs.
  /// One vector: the grid capped at kOneVectorGemvBlocks a multiprocessor (see fp32_gemv_config).
  [[nodiscard]] LaunchConfig gemv_config(int rows, int cols, int batch = 1, int matrices = 1) const {
    if (tensor_cores && batch >= 2) return tensor_core_gemv_config(rows, cols, matrices);
    return fp32_gemv_config(rows, cols, 8, batch == 1 ? kOneVectorGemvBlocks : 0);
  }
  /// Launch shape of rms_norm_gemv: gemv_config's, but one vector in blocks of kOneVectorNormGemvThreads, at most
  /// kOneVectorNormGemvBlocks a multiprocessor, and on the fp32 path at most as many warps a row as such a block
  /// has, so that every fp32 batch variant gives a vector the bits a batch of one gives it (the tensor-core variants,
  /// KernelOptions::tensor_cores, do not).
  [[nodiscard]] LaunchConfig rms_norm_gemv_config(int rows, int cols, int batch = 1) const {
    if (tensor_cores && batch >= 2) return tensor_core_gemv_config(rows, cols);
    return batch == 1 ? fp32_gemv_config(rows, cols, kOneVectorNormGemvThreads / 32, kOneVectorNormGemvBlocks,
                                         kOneVectorNormGemvThreads)
                      : fp32_gemv_config(rows, cols, kOneVectorNormGemvThreads / 32);
  }
  /// gemv_config without the one-vector cap, for the kernels that take the gemv family's shapes but are bounded for 3
  /// blocks a multiprocessor at one vector (moe.cu's expert kernels, gemv_all_reduce).
  [[nodiscard]] LaunchConfig gemv_config_uncapped(int rows, int cols, int batch = 1) const {
    if (tensor_cores && batch >= 2) return tensor_core_gemv_config(rows, cols, 1, false);
    return fp32_gemv_config(rows, cols);
  }
  /// Launch shape of rms_norm_store_gemv for a rows x cols weight: fp32_gemv_config's (256 threads, the warps per row
  /// gemv takes for the shape, so the same bits; one vector), with room for h in shared memory.
  [[nodiscard]] LaunchConfig rms_norm_store_gemv_config(int rows, int cols) const {
    LaunchConfig config = fp32_gemv_config(rows, cols, 8, kOneVectorGemvBlocks);
    config.shared_bytes = static_cast<unsigned>(cols) * static_cast<unsigned>(sizeof(T));
    return config;
  }
  /// Launch shape of the tensor-core variants (NAME_mma) for a rows x cols weight (`matrices` of them read
  /// together): one block per 8 rows (an mma tile), its warps sharing out the columns, tensor_core_gemv_warps of them.
  /// The grid is one wave of blocks (tensor_core_gemv_blocks) unless `one_wave` is false: one block a tile, for
  /// kernels whose register bounds hold more warps a multiprocessor (moe.cu's, gemv_all_reduce: gemv_config_uncapped).
  [[nodiscard]] LaunchConfig tensor_core_gemv_config(int rows, int cols, int matrices = 1, bool one_wave = true) const {
    const unsigned tiles = (static_cast<unsigned>(rows) + 7) / 8;
    const unsigned warps = tensor_core_gemv_warps(tiles, cols, matrices, multiprocessors);
    return step_config(
        {{one_wave ? tensor_core_gemv_blocks(tiles, warps, multiprocessors) : tiles, 1, 1}, {32, warps, 1}, 0});
  }
  /// Launch shape of the fp32 variants of the gemv family for a rows x cols weight: one row per group of K warps,
  /// threads / 32 / K rows per block of `threads` (256 unless given; K at most threads / 32). K = 1 for rows of up to
  /// 4096 columns, 2 for longer rows; more warps per row when the rows are long and few, so that the grid still fills
  /// the GPU: K >= 2 for 4096+ columns and at most 4096 rows, 4 for 8192+ columns and at most 2048 rows, 8 for 16384+
  /// columns and at most 1024 rows. The rule follows bench_gemv's shape sweep (H100, early-launched chains; the best K
  /// per shape):
  ///   4096 x 4096: K = 2 117 % of the copy ceiling vs K = 1 96 %;   2048 x 8192: K = 4 116 % vs K = 2 97 %;
  ///   1024 x 16384: K = 8 112 % vs K = 2 85 %;   11008 x 4096: K = 1 100 % vs K = 2 91 %.
  /// `max_warps_per_row` caps K (qkv_config needs two rows per block; rms_norm_gemv_config keeps a batch's K that of
  /// its one-vector blocks). The grid is one block per threads / 32 / K rows,
  /// at most `blocks_per_sm` a multiprocessor when that is not 0 (the groups then take the rows past the grid in
  /// grid-stride passes). The one-vector kernels of gemv.cu are bounded for 2 blocks a multiprocessor and launched at
  /// most 2 a multiprocessor (kOneVectorGemvBlocks; qkv.cu's, 5 of 128 threads: kOneVectorQkvBlocks; rms_norm_gemv's, 6
  /// of 128: kOneVectorNormGemvBlocks), so that no block
  /// of the next projection of the step (93 registers or more; a kernel of few registers still fits) gets resident
  /// beside them before they end: in bench_weight_stream's chain of early-launched kernels, a kernel that left room for
  /// one lost 1.77 us a kernel instead of 0.80. Against 3 blocks, uncapped (H200, 2026-12-01, alternated twice in one
  /// run): the TinyLlama shape's one-row step went from 856 to 828 us, Llama-3.2-1B's from 864 to 821, and
  /// Qwen3-30B-A3B's (12 layers) from 787 to 798 (docs/decode_performance.md). Earlier, the kernels bounded for 3 and
  /// capped at 1 or 2 a multiprocessor (room for the next kernel's blocks) were slower on nearly every shape of the
  /// sweep (H100: 4096 x 4096 115 % uncapped, 89 % at 2). `threads`: a block's, a multiple of 32 (8 warps by default;
  /// the rows a block holds scale with it).
  [[nodiscard]] LaunchConfig fp32_gemv_config(int rows, int cols, unsigned max_warps_per_row = 8,
                                              unsigned blocks_per_sm = 0, unsigned threads = 256) const {
    unsigned warps_per_row = cols > 4096 ? 2 : 1;
    if (cols >= 4096 && rows <= 4096) warps_per_row = std::max(warps_per_row, 2U);
    if (cols >= 8192 && rows <= 2048) warps_per_row = 4;
    if (cols >= 16384 && rows <= 1024) warps_per_row = 8;
    warps_per_row = std::min({warps_per_row, max_warps_per_row, threads / 32});
    const unsigned rows_per_block = threads / 32 / warps_per_row;
    unsigned blocks = (static_cast<unsigned>(rows) + rows_per_block - 1) / rows_per_block;
    if (blocks_per_sm > 0 && multiprocessors > 0)
      blocks = std::min(blocks, blocks_per_sm * static_cast<unsigned>(multiprocessors));
    return step_config({{blocks, 1, 1}, {32, warps_per_row, rows_per_block}, 0});
  }
  /// Launch shape of attention for `heads` heads of `head_dim` for `rows` rows over a cache of `context` positions: a
  /// block of attention_block_threads per (head, row), the scores in dynamic shared memory.
  [[nodiscard]] LaunchConfig attention_config(int heads, int head_dim, int rows, int context) const {
    return step_config({{static_cast<unsigned>(heads), static_cast<unsigned>(rows), 1},
                        {attention_block_threads(heads, rows, head_dim, tensor_cores, multiprocessors), 1, 1},
                        static_cast<unsigned>(context) * static_cast<unsigned>(sizeof(float))});
  }
  /// Launch shape of attention_split: `splits` blocks of 128 threads per (head, row), each over
  /// ceil(context / splits) positions, with room for the scores or the combining block's partials.
  [[nodiscard]] LaunchConfig attention_split_config(int heads, int rows, int context, int splits, int head_dim) const {
    const int split_len = (context + splits - 1) / splits;
    return step_config(
        {{static_cast<unsigned>(heads), static_cast<unsigned>(rows), static_cast<unsigned>(splits)},
         {128, 1, 1},
         static_cast<unsigned>(std::max(split_len, splits * (head_dim + 2))) * static_cast<unsigned>(sizeof(float))});
  }
  /// Query rows per block of the flash-attention kernel for chunks of up to `rows` rows: 128 (flash_attention_d64) for
  /// head_dim 64 and more than kFlashAttentionWideFrom rows, else 64 (flash_attention_rows64_d64,
  /// flash_attention_d128).
  [[nodiscard]] static int flash_attention_tile_rows(int rows, int head_dim) noexcept {
    return head_dim <= 64 && rows > kFlashAttentionWideFrom ? 128 : 64;
  }
  /// The flash-attention kernel for chunks of up to `rows` rows of head_dim 64 or 128 (see flash_attention_tile_rows).
  [[nodiscard]] const FlashAttention& flash_attention(int rows, int head_dim) const noexcept {
    if (head_dim > 64) return flash_attention_d128;
    return flash_attention_tile_rows(rows, head_dim) == 128 ? flash_attention_d64 : flash_attention_rows64_d64;
  }
  /// The paged flash-attention kernel for chunks of up to `rows` rows: flash_attention(rows, head_dim)'s tiles.
  [[nodiscard]] const FlashAttentionPaged& flash_attention_paged(int rows, int head_dim) const noexcept {
    if (head_dim > 64) return flash_attention_paged_d128;
    return flash_attention_tile_rows(rows, head_dim) == 128 ? flash_attention_paged_d64
                                                            : flash_attention_paged_rows64_d64;
  }
  /// Launch shape of flash_attention_d64 / _d128 for up to `rows` query rows (max_rows) of `heads` heads: grid (heads,
  /// tiles), a block of 4 warps per tile of R rows and head (R = 128 for head_dim 64, 64 for 128), the query tile and
  /// two stages of a key and a value tile of 64 positions (rows padded to head_dim + 8) in dynamic shared memory (55296
  /// bytes for head_dim 64, 87040 for 128 in fp16 or bf16). `tile_rows` (64, or 128 for flash_attention_d64) overrides
  /// the rows per block flash_attention_tile_rows picks.
  [[nodiscard]] LaunchConfig flash_attention_config(int rows, int heads, int head_dim, int tile_rows = 0) const {
    const auto tile = static_cast<unsigned>(tile_rows > 0 ? tile_rows : flash_attention_tile_rows(rows, head_dim));
    return step_config({{static_cast<unsigned>(heads), (static_cast<unsigned>(rows) + tile - 1) / tile, 1},
                        {128, 1, 1},
                        (tile + 4U * 64U) * static_cast<unsigned>(head_dim + 8) * static_cast<unsigned>(sizeof(T))});
  }
  /// Launch shape of flash_attention_paged_varlen_d64 / _d128 for up to `rows` query rows in up to `segments`
  /// segments: flash_attention_config's with its tiles (128 rows at head_dim 64, 64 at 128) and segments - 1 more,
  /// since each segment may end in a partial tile.
  [[nodiscard]] LaunchConfig flash_attention_varlen_config(int rows, int segments, int heads, int head_dim) const {
    LaunchConfig config = flash_attention_config(rows, heads, head_dim, head_dim <= 64 ? 128 : 64);
    config.grid.y += static_cast<unsigned>(segments - 1);
    return config;
  }
  /// Launch shape of qk_norm_rope_append and prefill_qk_norm_rope: a block per (head of q, k and v, row), a thread
  /// per pair of the head (32 * ceil(head_dim / 64) threads).
  [[nodiscard]] LaunchConfig qk_norm_config(int heads, int kv_heads, int head_dim, int rows) const {
    return step_config({{static_cast<unsigned>(heads + 2 * kv_heads), static_cast<unsigned>(rows), 1},
                        {32U * ((static_cast<unsigned>(head_dim) + 63U) / 64U), 1, 1},
                        0});
  }
  /// Whether greedy steps take their tokens from argmax_cluster instead of sample: on a device with clusters, for rows
  /// of at least kArgmaxClusterFrom logits.
  [[nodiscard]] bool greedy_by_cluster(int vocab) const noexcept { return clusters && vocab >= kArgmaxClusterFrom; }
  /// Launch shape of argmax_cluster for `rows` rows: a cluster of kArgmaxClusterBlocks blocks of 512 threads a row.
  [[nodiscard]] LaunchConfig argmax_cluster_config(int rows) const {
    LaunchConfig config = step_config({{kArgmaxClusterBlocks, static_cast<unsigned>(rows), 1}, {512, 1, 1}, 0});
    config.cluster = {kArgmaxClusterBlocks, 1, 1};
    return config;
  }
  /// Launch shape of qkv_rope_append for q_rows, kv_dim, width d and `batch` vectors: that of the tensor-core
  /// variant (tensor_core_gemv_config of its q_rows + 2 kv_dim rows) when it runs the batch, else
  /// fp32_gemv_config's with at most half a block's warps per row (a block holds both rows of each RoPE pair); one
  /// vector in blocks of kOneVectorQkvThreads, at most kOneVectorQkvBlocks a multiprocessor.
  [[nodiscard]] LaunchConfig qkv_config(int q_rows, int kv_dim, int d, int batch = 1) const {
    if (tensor_cores && batch >= 2) return tensor_core_gemv_config(q_rows + 2 * kv_dim, d);
    if (batch == 1) {
      return fp32_gemv_config(q_rows + 2 * kv_dim, d, kOneVectorQkvThreads / 64, kOneVectorQkvBlocks,
                              kOneVectorQkvThreads);
    }
    return fp32_gemv_config(q_rows + 2 * kv_dim, d, 4);
  }
  /// Launch shape of moe_gate_up and moe_down for experts of `rows` x `cols` weights and `batch` vectors:
  /// gemv_config_uncapped's for one expert in x, and in y `distinct` experts, the most a step's rows can choose
  /// (min(batch * top k, experts)); blocks past the count the router chose return. On tensor cores always blocks of 8
  /// warps (tensor_core_gemv_warps was measured on dense kernels only).
  [[nodiscard]] LaunchConfig moe_config(int rows, int cols, int batch, int distinct) const {
    LaunchConfig config = gemv_config_uncapped(rows, cols, batch);
    if (tensor_cores && batch >= 2) config.block.y = 8;
    config.grid.y = static_cast<unsigned>(distinct);
    return config;
  }
  /// Launch shape of moe_prefill_gate_up for experts of `width` rows and `tiles` tiles (moe_prefill_tiles): a block of
  /// kMoePrefillThreads per kMoePrefillTileCols rows and tile, kMoePrefillStages stages of three tiles of 64 rows (the
  /// input rows, W1's, W3's) in dynamic shared memory (82944 bytes); blocks past the tiles the chunk has return.
  [[nodiscard]] LaunchConfig moe_prefill_gate_up_config(int width, int tiles) const {
    return grouped_config(width, tiles, 2);
  }
  /// Launch shape of moe_prefill_down for d rows: moe_prefill_gate_up_config's with stages of two tiles (55296 bytes).
  [[nodiscard]] LaunchConfig moe_prefill_down_config(int d, int tiles) const { return grouped_config(d, tiles, 1); }
  /// Launch shape of moe_decode_gate_up: a block of kMoeDecodeThreads per kMoeDecodeTileCols rows of the experts and
  /// tile, kMoeDecodeStages stages of kMoeDecodeTileRows input rows and kMoeDecodeTileCols rows of W1 and of W3
  /// (62208 bytes); blocks past the tiles the step's rows chose return.
  [[nodiscard]] LaunchConfig moe_decode_gate_up_config(int width, int tiles) const {
    return grouped_config(width, tiles, 2, kDecodeShape);
  }
  /// Launch shape of moe_decode_down for d rows: moe_decode_gate_up_config's with one matrix a stage (34560 bytes).
  [[nodiscard]] LaunchConfig moe_decode_down_config(int d, int tiles) const {
    return grouped_config(d, tiles, 1, kDecodeShape);
  }
  /// Launch shape of moe_prefill_route for up to `rows` rows: a block of kMoePrefillRouteRows warps per as many rows.
  [[nodiscard]] LaunchConfig moe_prefill_route_config(int rows) const {
    const auto blocks = (static_cast<unsigned>(rows) + kMoePrefillRouteRows - 1) / kMoePrefillRouteRows;
    return step_config({{blocks, 1, 1}, {32U * kMoePrefillRouteRows, 1, 1}, 0});
  }
  /// Launch shape of moe_down for d rows of `width` columns: moe_config's, but where the one-vector variant takes the
  /// rows four at a time (batch 1, width at most 1024 and d a multiple of 32: kernels/nn/moe.cu), a grid for d / 4
  /// rows. Short rows leave a warp 1.5 KB of loads in flight at width 768 (Qwen3-30B-A3B's experts), four rows 6 KB.
  [[nodiscard]] LaunchConfig moe_down_config(int d, int width, int batch, int distinct) const {
    return moe_config(batch == 1 && width <= 1024 && d % 32 == 0 ? d / 4 : d, width, batch, distinct);
  }
  /// Launch shape of moe_down_staged for d rows of `width` columns, `experts` experts and `top_k` slots of one row:
  /// blocks of 256 threads over kMoeStagedRows rows of d each, or fewer where every slot's rows (rows x width of T),
  /// the slots' act in fp32 and their products would not fit kMoeStagedBytes nor the device's shared memory per
  /// block. No blocks (grid.x 0: route with moe_route and run moe_gate_up and moe_down) for more than one row, more
  /// than kMoeStagedExperts experts, before sm_80 (no cp.async), for rows of 4096 columns or more (moe_down sums those
  /// over two warps: other bits), or where the blocks would not fit one to a multiprocessor (a second wave would load
  /// its experts' rows only after the first: slower, H200, OLMoE-1B-7B's 1024-wide experts).
  [[nodiscard]] LaunchConfig moe_down_staged_config(int d, int width, int experts, int top_k, int batch) const {
    const auto bytes = [&](long long rows) {
      return top_k * (rows * width * static_cast<long long>(sizeof(T)) + width * 4LL + rows * 4LL);
    };
    // Leave room for the kernel's own 192 bytes of static shared memory.
    const long long budget = std::min<long long>(kMoeStagedBytes, shared_memory_optin - 1024LL);
    int rows = kMoeStagedRows;
    while (rows > 0 && bytes(rows) > budget) --rows;
    LaunchConfig none;
    none.grid.x = 0;
    if (batch != 1 || experts > kMoeStagedExperts || !async_copies || width >= 4096 || rows <= 0 ||
        (d + rows - 1) / rows > multiprocessors) {
      return none;
    }
    return step_config(
        {{static_cast<unsigned>((d + rows - 1) / rows), 1, 1}, {256, 1, 1}, static_cast<unsigned>(bytes(rows))});
  }
  /// Launch shape of moe_gate_up_staged: moe_config's for one row, with no more blocks than are resident at once
  /// (kMoeGateUpStagedBlocksPerSm a multiprocessor), each taking its rows in as many passes as that needs.
  /// moe_down_staged launches once every block of moe_gate_up_staged has passed its wait; a second wave of blocks
  /// would start, and pass it, only as the first leaves.
  [[nodiscard]] LaunchConfig moe_gate_up_staged_config(int width, int d, int distinct) const {
    LaunchConfig config = moe_config(width, d, 1, distinct);
    const auto most = std::max(
        1U, static_cast<unsigned>(kMoeGateUpStagedBlocksPerSm * multiprocessors) / static_cast<unsigned>(distinct));
    const unsigned passes = (config.grid.x + most - 1) / most;
    config.grid.x = (config.grid.x + passes - 1) / passes;
    return config;
  }

 private:
  /// A grouped product's block: positions, output columns, threads and stages.
  struct GroupedShape {
    int rows;
    int cols;
    unsigned threads;
    int stages;
  };
  static constexpr GroupedShape kPrefillShape{kMoePrefillTileRows, kMoePrefillTileCols, kMoePrefillThreads,
                                              kMoePrefillStages};
  static constexpr GroupedShape kDecodeShape{kMoeDecodeTileRows, kMoeDecodeTileCols, kMoeDecodeThreads,
                                             kMoeDecodeStages};
  /// The grouped products' launch: `cols` output columns, `tiles` high, stages of the input rows and `matrices`
  /// matrices' rows.
  [[nodiscard]] LaunchConfig grouped_config(int cols, int tiles, int matrices,
                                            GroupedShape shape = kPrefillShape) const {
    const auto across =
        (static_cast<unsigned>(cols) + static_cast<unsigned>(shape.cols) - 1) / static_cast<unsigned>(shape.cols);
    const auto stage = static_cast<unsigned>((shape.rows + matrices * shape.cols) * (kMoePrefillTileK + 8)) *
                       static_cast<unsigned>(sizeof(T));
    return step_config({{across, static_cast<unsigned>(tiles), 1},
                        {shape.threads, 1, 1},
                        static_cast<unsigned>(shape.stages) * stage});
  }
};

/// The handles of the fp16 kernels.
using Kernels = BasicKernels<half>;

extern template struct BasicKernels<half>;
extern template struct BasicKernels<bfloat16>;

}  // namespace lazygraph::nn
