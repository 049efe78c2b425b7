#pragma once
/// \file
/// A Llama-style decoder as a Module (docs/nn.md gives the exact math): token embedding, layers of grouped-query
/// attention with RoPE and a KV cache plus a gated MLP, final norm, LM head and greedy or sampled choice. One decode
/// step is an op expression (decoder_step.hpp) that the decoder's backend (step_backend.hpp) hands to a capture once;
/// the token and the position reach it through device memory, so every step replays the same graph. Weights come from a
/// seed (DecoderWeights::generate) or from a checkpoint (checkpoint.hpp). Weights and activations are fp16 (`Decoder`)
/// or bf16 (`BasicDecoder<bfloat16>`), element.hpp; the matrices may be weight-only quantized instead (int8, int4 or
/// fp8 e4m3 with scales of the element type: decoder_quantization.hpp), each run on its own kind of kernels.
///
/// The parts, a header each: decoder_io.hpp (limits, io layout), decoder_config.hpp (shape and options, argument
/// checks), decoder_weights.hpp, decoder_state.hpp, decoder_step.hpp (the step's ops), step_backend.hpp (what runs it).

#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lazygraph/driver/peer_exchange.hpp"
#include "lazygraph/module.hpp"
#include "lazygraph/nn/decoder_config.hpp"
#include "lazygraph/nn/decoder_io.hpp"
#include "lazygraph/nn/decoder_state.hpp"
#include "lazygraph/nn/decoder_step.hpp"
#include "lazygraph/nn/decoder_weights.hpp"
#include "lazygraph/nn/moe_routes.hpp"
#include "lazygraph/nn/quantized_kernels.hpp"
#include "lazygraph/nn/sampling.hpp"
#include "lazygraph/nn/step_backend.hpp"
#include "lazygraph/nn/tensor_parallel_options.hpp"
#include "lazygraph/nn/wide_step_report.hpp"

namespace lazygraph::nn {
template <Element T>
class BasicPrefill;  // nn/prefill.hpp
template <Element T>
class BasicWideStep;  // nn/wide_step.hpp
template <Element T>
struct BasicWideContext;  // nn/wide_step.hpp

/// The decoder as a Module: `forward({token, position})` returns the next token of sequence 0 (greedy unless
/// set_sampling says otherwise). Steps of a
/// sequence must come at positions 0, 1, 2, ... (each attends over the k and v of the earlier ones), or a prompt
/// first through `prefill`; `forward_batch` steps up to max_batch sequences at once, reading the weights once for
/// all of them. Each row count has its own graph, captured on first use (a paged decoder's steps of more than kMaxRows
/// rows: each bucket of 16 to 256 rows, the wide step's, nn/wide_step.hpp). Thread safety: every member function may
/// be called from several threads; an execution lock runs one call at a time (a sequence's steps must still come
/// in order, which only the caller can ensure).
template <Element T>
class BasicDecoder {
 public:
  using Input = TokenAt;  ///< the token and its position
  using Output = int;     ///< the next token

  /// A decoder with weights generated from config.seed. \throws UsageError for an invalid config.
  BasicDecoder(const Stream& stream, const KernelLibrary& library, const DecoderConfig& config = {});
  /// A decoder with the given weights (e.g. DecoderCheckpoint::upload), dense or quantized in part
  /// (decoder_quantization.hpp): quantized weights load the quantized kernels (BasicQuantizedKernels) and run on them.
  /// \throws UsageError for an invalid config; a weight whose size differs from what `config` needs (naming its
  /// checkpoint tensor name), or that is both dense and quantized, or neither; for quantized weights on a GPU without
  /// tensor cores.
  BasicDecoder(const Stream& stream, const KernelLibrary& library, const DecoderConfig& config,
               BasicDecoderWeights<T> weights);
  /// Rank comm.rank() of the decoder `config` split over comm.size() GPUs (tensor parallelism, nn/decoder_rank.hpp):
  /// `weights` are this rank's share (shapes of shard_config(config, comm.size()): shard_decoder_weights, or
  /// DecoderCheckpoint::upload_shard), on comm's device. Every rank must make its decoder and then make the same calls
  /// with the same arguments, each from its own thread or process (their graphs' collectives meet): steps, prompts,
  /// generate and sampling then run as on one GPU, with every rank returning the same tokens; prompts on tensor cores
  /// where the config and GPU allow (prefill_layer's collectives between the blocks). The first graph of each kind is
  /// captured at the first call that needs it, on every rank at once (the constructor captures the one-row step).
  /// Quantized weights are the rank's shares of matrices quantized whole (shard_quantized) and run on the quantized
  /// kernels. \throws UsageError for a config that does not split (check_tensor_split), the persistent backend, a
  /// weight whose size is not its share's (naming its checkpoint tensor name), a stream of another device than comm's;
  /// NcclError.
  /// `options`: the residual stream and the logits in NCCL symmetric memory or not (TensorParallelOptions); every rank
  /// must give the same. `peer`: this rank's share of a PeerExchange over every rank's GPU (PeerExchange::create_all
  /// for ranks of one process, PeerExchange::create for ranks in processes of one machine): the step's all-reduces of
  /// the residual stream then go through it (peer_all_reduce) instead of NCCL; every rank must give one, or none.
  /// \throws UsageError when `peer` is another communicator's.
  BasicDecoder(const Stream& stream, const KernelLibrary& library, const DecoderConfig& config,
               BasicDecoderWeights<T> weights, const Communicator& comm, const TensorParallelOptions& options = {},
               const PeerExchange* peer = nullptr);
  /// Moves the decoder (its graphs keep pointing at the same device memory).
  BasicDecoder(BasicDecoder&&);
  /// Moves the decoder.
  BasicDecoder& operator=(BasicDecoder&&);
  BasicDecoder(const BasicDecoder&) = delete;
  BasicDecoder& operator=(const BasicDecoder&) = delete;
  /// Waits for nothing: every call already waited for its replay.
  ~BasicDecoder();

  /// Runs one step of sequence 0. \throws UsageError for a token outside [0, vocab) or a position outside
  /// [0, context); on a paged decoder (it takes block tables: forward_batch with tables).
  Output forward(Input in);

  /// One step of sequences 0 .. steps.size() - 1 at once (sequence r takes steps[r]): returns each one's
  /// next token. \throws UsageError for no step or more than max_batch, or a token or position out of range
  /// (naming the row); on a paged decoder (give the tables).
  std::vector<int> forward_batch(std::span<const TokenAt> steps);

  /// forward_batch on a paged cache (DecoderConfig::kv_block_size): row r takes steps[r], appending its k and v and
  /// attending through its block table, tables[r * table_width() .. (r + 1) * table_width()) (KvBlockPool::table's
  /// layout; entries past the row's position's block are padding, never read). The tables are staged and copied in
  /// with the tokens: new tables never recapture. A row's sampled draws depend on (seed, position, r), as
  /// forward_batch's. Returns each row's next token; logits(r) holds row r's logits.
  /// Up to kMaxRows rows run on the step's graphs (one per row count); more (max_batch above kMaxRows) as the wide
  /// step on tensor cores (nn/wide_step.hpp: GEMMs, a graph per bucket of 16, 32, ... 256 rows, captured on first use),
  /// whose logits differ from a row's alone within the GEMMs' rounding (its token may too, at a near tie).
  /// \throws UsageError (check_paged_batch) before any GPU work: a bad step, a table of the wrong size, a block outside
  /// the pool, a written block another row holds elsewhere; for a contiguous decoder; as Gemm's constructor and
  /// CudaGraph's capture when a wide bucket is first used.
  std::vector<int> forward_batch(std::span<const TokenAt> steps, std::span<const int> tables);

  /// Runs a prompt through sequence `slot`, filling its KV cache at positions start .. start + prompt.size() - 1, and
  /// returns the token that follows the prompt (greedy, or drawn as set_sampling says, at position start +
  /// prompt.size() - 1). Afterwards `logits()` holds the prompt's last token's logits (one row).
  /// On tensor cores (DecoderConfig::prefill_chunk, where prefill_on_tensor_cores holds): chunks of up to
  /// prefill_chunk rows, each through every layer at once (cuBLASLt GEMMs, flash attention writing the cache; one
  /// graph per bucket of rows, captured on first use; nn/prefill.hpp), the LM head for the last row only; a prompt or
  /// a rest of one below 16 rows (up to 32 with quantized experts: prefill_min_rows), and every prompt elsewhere,
  /// through the decode step's graphs, kMaxRows rows per step. The step path gives exactly the cache, logits and token
  /// of forwarding the prompt one token at a time; the tensor-core path the same within rounding (its products sum in
  /// another order and round q, k, v, and the MLP's gate and up once more), so its token may differ where the top two
  /// logits nearly tie. Quantized weights take the same paths: on tensor cores each quantized matrix is dequantized
  /// into a scratch buffer for its GEMMs (nn/prefill.hpp's prefill_layer), one matrix at a time; a layer's quantized
  /// experts two stacks at a time (prefill_moe.hpp). \throws UsageError, before any GPU work and with the cache
  /// unchanged, for an empty prompt, a token outside the vocabulary (naming its index), a prompt that does not fit the
  /// context from `start`, or a slot outside [0, max_batch); as Gemm's constructor and CudaGraph's capture when a
  /// bucket is first used.
  int prefill(std::span<const int> prompt, int start = 0, int slot = 0);

  /// prefill on a paged cache: the prompt's k and v go into the blocks of `table` (table_width() block ids, those up to
  /// position start + prompt.size() - 1 in the pool and distinct), by the same paths as prefill(prompt, start, slot):
  /// chunks on tensor cores where prefill_on_tensor_cores holds (flash attention reading and writing the cache through
  /// the table, which each chunk graph copies in with the chunk: new tables never recapture), the rest through the
  /// decode step's graphs. Either way the logits, token and keys and values are the contiguous decoder's for the same
  /// prompt, start and prefill_chunk, bit for bit. `slot` numbers the sequence for sampled draws only (in
  /// [0, max_batch)). \throws UsageError (check_paged_prompt) before any GPU work; for a contiguous decoder; as
  /// prefill(prompt, start, slot) when a bucket is first used.
  int prefill(std::span<const int> prompt, int start, std::span<const int> table, int slot = 0);

  /// Several sequences' prompt parts in one chunk on tensor cores (a paged cache): up to kMaxRows parts of distinct
  /// sequences, packed_prefill_rows() tokens in all, go through every layer at once, each part's rows rotated at its
  /// own positions and attending through its own table (varlen_prefill_attention, nn/prefill.hpp), so that short
  /// prompts share one read of the weights instead of one each. Then each part's last row goes through the LM head
  /// and the sampler: returns each part's next token (greedy, or drawn as set_sampling says, at the part's last
  /// position and its slot), and logits(i) holds part i's. A part that is not the end of its prompt gives a token the
  /// caller ignores. Each part's keys, values, logits and token are what prefill(part.tokens, part.start, part.table,
  /// part.slot) gives within rounding (the chunk's GEMMs take another bucket of rows, so their products may round
  /// otherwise). A bucket's packed graph is captured on first use, as prefill's.
  /// \throws UsageError (check_packed_prompts) before any GPU work, and when packed_prefill_rows() is 0 (saying why);
  /// as prefill when a bucket is first used.
  std::vector<int> prefill_packed(std::span<const PromptPart> parts);

  /// The most tokens prefill_packed takes in one call (the largest prefill bucket), or 0 when it cannot run: a
  /// contiguous cache, a tensor-parallel rank, or prompts not on tensor cores (prefill_fallback_reason). Asking may
  /// load cuBLASLt.
  [[nodiscard]] int packed_prefill_rows() const;

  /// The fewest tokens a packed chunk should hold to be worth it: with quantized experts prefill_min_rows (each chunk
  /// dequantizes every expert stack, however few its tokens; DecoderStepModel runs smaller sets of prompts one by
  /// one), else 0. prefill_packed itself takes any count.
  [[nodiscard]] int packed_min_tokens() const;

  /// Generates up to `n` tokens of sequence 0 from `token` at position `start` in ONE graph replay: a WHILE loop on
  /// the device runs the decode step, appends its token, advances the position and stops after n tokens or after
  /// `stop_token` (which is returned too; -1: none). The same tokens as n calls of forward (greedy or sampled), with
  /// no host round trip between them. The loop graph is captured on first use, its loop bounded by the context.
  /// On a tensor-parallel rank the loop's body holds the step's collectives; every rank draws the same tokens, so
  /// every rank's loop runs as many times.
  /// \throws UsageError (check_generate) before any GPU work; UsageError saying why when the kernel library lacks
  /// the loop's kernels (BasicKernels::loop); on a paged decoder (its loop would need the table of a growing
  /// sequence: step it with forward_batch).
  std::vector<int> generate(int token, int n, int stop_token = -1, int start = 0);

  /// Captures every bucket of the wide step (max_batch above kMaxRows) not yet captured, as the first forward_batch of
  /// each would. \throws UsageError when max_batch is at most kMaxRows; as forward_batch.
  void capture_wide_steps();
  /// Each captured bucket of the wide step (in the order captured): its rows, capture time and the device memory its
  /// capture took (graph and GEMM plans). Empty when none is captured or max_batch is at most kMaxRows; set_sampling
  /// drops the graphs and so the report (the buckets are captured again on their next use).
  [[nodiscard]] std::vector<WideBucketReport> wide_step_report() const;

  /// Clears the KV caches (not needed to start over at position 0; it makes stale entries impossible to read).
  void reset();

  /// Row `row`'s logits (vocab values) from the last call: row r of forward_batch's steps (0 for forward and
  /// generate's last step); after prefill a single row, the prompt's last token's. \throws UsageError for a row the
  /// last call did not have.
  [[nodiscard]] std::vector<T> logits(int row = 0) const;

  /// Every layer's routes of a mixture of experts from the last step of the last call (DecoderConfig::record_routes
  /// on): the rows of forward_batch's steps, row 0 of forward and of generate's last step, and after prefill the
  /// rows of its last step (a prompt runs through the step's graphs, kMaxRows rows at a time: the last up to 8
  /// tokens). Copies layers * rows * top k ids and weights to the host and waits for them.
  /// \throws UsageError (check_last_routes) without a mixture of experts, with record_routes off, or before the first
  /// step.
  [[nodiscard]] MoeRoutes last_routes() const;

  /// The key cache, [layers][max_batch][kv_heads][context][head_dim] (BasicDecoderState::k_cache), or a paged cache's
  /// pools [layers][kv_blocks][kv_heads][kv_block_size][head_dim]: to inspect it, or to fill it (a saved prefix). Not
  /// guarded by the execution lock: use it while no other thread runs the decoder.
  [[nodiscard]] DeviceSpan<T> k_cache() noexcept { return state_.k_cache.view(); }
  /// The value cache, laid out as k_cache.
  [[nodiscard]] DeviceSpan<T> v_cache() noexcept { return state_.v_cache.view(); }

  /// Block ids per row's table of a paged cache (DecoderConfig::kv_table_width); 0 for the contiguous cache.
  [[nodiscard]] int table_width() const noexcept { return config_.kv_table_width(); }

  /// Why prefill runs every prompt through the decode step's graphs (prefill_on_tensor_cores said no), or empty when it
  /// runs chunks of 16 rows or more (more than 32 with quantized experts: prefill_min_rows) on tensor cores (with a
  /// contiguous or a paged cache). Asking may load cuBLASLt.
  [[nodiscard]] std::string prefill_fallback_reason() const;

  /// The step of `rows` rows as an op, for running it without the graph (the benchmark's eager variant); reads
  /// the rows from the device io buffer, which the last forward, forward_batch, prefill on the step graphs or generate
  /// wrote (generate's loop leaves row 0 at its last token and position; prefill on tensor cores has its own io). The
  /// attention kernels are those the staged positions choose when the op is made (grouped_batches).
  /// \throws UsageError on a tensor-parallel rank (its step's collectives run in its graphs only).
  [[nodiscard]] auto step_op(int rows = 1) {
    if (backend_->rank() != nullptr) {
      throw UsageError("Decoder::step_op: a tensor-parallel rank's step runs in its graphs only");
    }
    return decoder_step(projector(), weights_, state_, config_, rows, sampling_,
                        step_context(grouped_batch(rows)).paged);
  }

  /// How later steps pick their tokens: greedy (the default) or drawn (sampling.hpp). A sequence's draws depend on
  /// (seed, position, sequence), so the same calls give the same tokens. Re-captures the step graphs on next use.
  /// \throws UsageError for an invalid Sampling.
  void set_sampling(const Sampling& sampling);
  /// The sampling rule in use.
  [[nodiscard]] const Sampling& sampling() const noexcept { return sampling_; }

  /// The config it was built with.
  [[nodiscard]] const DecoderConfig& config() const noexcept { return config_; }
  /// Whether this decoder's batches whose longest row is at kGroupedBatchFrom or past it attend on the grouped kernels
  /// (BasicDecoderState::grouped_batches says when: the contiguous cache, the graph backend on one GPU, batches on
  /// tensor cores, head_dim 64 or 128, attention_blocks 1, sm_80+).
  [[nodiscard]] bool grouped_batches() const noexcept { return state_.grouped_batches && backend_->rank() == nullptr; }
  /// The communicator of a tensor-parallel rank (the rank constructor's), or null for a decoder on one GPU.
  [[nodiscard]] const Communicator* communicator() const noexcept;
  /// Whether this tensor-parallel rank's residual stream and logits live in NCCL symmetric memory
  /// (TensorParallelOptions::symmetric_memory, where NCCL has it); false for a decoder on one GPU.
  [[nodiscard]] bool symmetric_memory() const noexcept;
  /// Whether this tensor-parallel rank all-reduces its residual stream through a PeerExchange (the rank constructor's
  /// `peer`); false for a decoder on one GPU.
  [[nodiscard]] bool peer_all_reduce() const noexcept;
  /// The graph of a step of `rows` rows (captured now if it was not yet): replay it directly to time the device
  /// work alone (forward replays the same nodes between the staging copies, in a graph of its own). Where the
  /// contiguous cache's batches attend on the grouped kernels past a position (BasicDecoderState::grouped_batches,
  /// kGroupedBatchFrom), a row count has two graphs, and this is the one the positions last staged (by forward_batch)
  /// choose. \throws UsageError for rows outside [1, kMaxRows].
  [[nodiscard]] CudaGraph<>& graph(int rows = 1);

  /// The persistent backend's program for steps of `rows` rows (made now if it was not yet), for its schedule and
  /// its profile (DecoderConfig::persistent.profile); valid until set_sampling, which makes the programs anew.
  /// \throws UsageError for the graph backend, or rows outside [1, kMaxRows].
  [[nodiscard]] const PersistentProgram& persistent_program(int rows = 1);

 private:
  /// The kernels the projections run on: the dense ones, and the quantized ones where some weight is quantized.
  [[nodiscard]] Projector<T> projector() const noexcept {
    return {kernels_, quantized_kernels_ ? &*quantized_kernels_ : nullptr};
  }
  /// graph() without the lock (the caller holds it).
  CudaGraph<>& step_graph(int rows);
  /// The graph a step of `rows` rows replays: the io staging copied in, the step's nodes, the next tokens copied
  /// out (captured on first use, after the step graph). Both: the variant grouped_batch(rows) picks.
  CudaGraph<>& io_graph(int rows);
  /// Whether a step of the `rows` rows staged now attends on the grouped kernels: the contiguous cache's batches
  /// (BasicDecoderState::grouped_batches) of 2 rows or more whose longest row is at kGroupedBatchFrom or past it.
  [[nodiscard]] bool grouped_batch(int rows) const;
  /// Sets row `row` of the io staging (no allocation per step).
  void set_row(int row, int token, int position, int slot);
  /// Sets row `row`'s block table in the staging (a paged cache).
  void set_table(int row, std::span<const int> table);
  /// Replays the io graph of `rows` rows (one replay, one wait) and returns the rows' next tokens.
  std::span<const int> run(int rows);
  /// Runs prompt[first..] through the step graphs, kMaxRows rows per step; returns the last row's next token.
  /// `table`: a paged cache's table for every row (empty for the contiguous cache).
  int prefill_steps(std::span<const int> prompt, std::size_t first, int start, int slot,
                    std::span<const int> table = {});
  /// Both prefills' body, under the lock: chunks on tensor cores where they run, the rest through prefill_steps.
  /// `table`: a paged cache's table of the sequence (empty for the contiguous cache).
  int prefill_chunks(std::span<const int> prompt, int start, int slot, std::span<const int> table);
  /// What the backend builds a step from, now. `grouped`: the contiguous cache's batches attend on the grouped kernels
  /// (attention_heads takes the paged attention object as the sign; a paged cache always passes it).
  [[nodiscard]] StepContext<T> step_context(bool grouped = false) noexcept {
    return {shard_, config_,   projector(), weights_,
            state_, sampling_, stream_,     paged_ && (config_.paged() || grouped) ? &*paged_ : nullptr};
  }

  /// What the wide step reads (wide_ made: a paged decoder).
  [[nodiscard]] BasicWideContext<T> wide_context() noexcept;

  /// The constructors' common part: `comm` null for one GPU.
  BasicDecoder(const Stream& stream, const KernelLibrary& library, const DecoderConfig& config,
               BasicDecoderWeights<T> weights, const Communicator* comm, const TensorParallelOptions& options,
               const PeerExchange* peer);

  DecoderConfig config_;
  /// The shapes the step runs: config_, or on a tensor-parallel rank its shard's (shard_config: its heads, kv heads,
  /// ffn and vocabulary rows).
  DecoderConfig shard_;
  BasicKernels<T> kernels_;
  BasicDecoderWeights<T> weights_;
  /// The quantized kernels, loaded only when some weight is quantized (a dense decoder runs on any GPU, as before).
  std::optional<BasicQuantizedKernels<T>> quantized_kernels_;
  BasicDecoderState<T> state_;
  /// A paged cache's attention kernels (DecoderConfig::kv_block_size), or the grouped kernels of the contiguous
  /// cache's batches (BasicDecoderState::grouped_batches); else empty.
  std::optional<PagedAttention<T>> paged_;
  /// The staging of every graph: in and out as DecoderIo lays them out; a paged cache's tables after the input.
  HostIo<int, int> io_;
  std::size_t tables_at_ = 0;  ///< where the input staging holds the tables ([kMaxRows][table_width])
  Stream stream_;
  Sampling sampling_;
  /// by rows (plus kMaxRows for grouped_batch's variant), captured on first use (room for every one: none is dropped)
  GraphCache<int> graphs_;
  GraphCache<int> io_graphs_;                  ///< the same keys, what forward replays (io_graph)
  std::optional<LoopBound> bound_;             ///< generate's loop bound (the context), made on first use
  std::optional<CudaGraph<>> generate_graph_;  ///< generate's loop, captured on first use
  std::unique_ptr<std::mutex> mutex_ = std::make_unique<std::mutex>();  ///< the execution lock (movable decoder)
  std::unique_ptr<BasicPrefill<T>> prefill_;  ///< prefill's tensor-core path, made at the first prefill that takes it
  std::optional<bool> prefill_gemm_;          ///< whether chunks run on tensor cores, decided at the first prefill
  std::unique_ptr<StepBackend<T>> backend_;   ///< what runs the step (step_backend.hpp)
  /// The wide step (max_batch above kMaxRows), made with the decoder; else null.
  std::unique_ptr<BasicWideStep<T>> wide_;
  bool wide_last_ = false;  ///< whether the last call was a wide step (logits() reads its buffer)
  int last_rows_ = 1;       ///< rows logits() may read
  int logits_first_ = 0;    ///< the state's logits row that logits(0) reads
  int route_rows_ = 0;      ///< rows of the last step, whose routes last_routes reads; 0: none yet
};

/// The fp16 decoder.
using Decoder = BasicDecoder<half>;
/// The bf16 decoder: bf16 weights, activations, KV cache and logits.
using DecoderBf16 = BasicDecoder<bfloat16>;

extern template class BasicDecoder<half>;
extern template class BasicDecoder<bfloat16>;

static_assert(Module<Decoder>);
static_assert(Module<DecoderBf16>);

}  // namespace lazygraph::nn
