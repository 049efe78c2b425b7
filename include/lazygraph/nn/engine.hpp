#pragma once
/// \file
/// nn::Engine: schedules many generation requests over one StepModel and a KvBlockPool (continuous batching):
/// requests wait in a bounded queue, enter a free slot when the pool has blocks for them, step together, each with its
/// own sampling, stop tokens, stop strings and limit, stream their tokens and text through a callback as they come,
/// and leave between steps. When the pool runs out, the youngest running sequence is preempted: its blocks are freed
/// and it waits again at the head of the queue, to be recomputed (its prompt and the tokens it made) when it returns.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lazygraph/nn/kv_block_pool.hpp"
#include "lazygraph/nn/request_error.hpp"
#include "lazygraph/nn/sampling.hpp"
#include "lazygraph/nn/step_model.hpp"
#include "lazygraph/nn/tokenizer.hpp"

namespace lazygraph::nn {

/// Why a request ended.
enum class FinishReason {
  stop_token,   ///< the model made one of its stop tokens (not passed on)
  stop_string,  ///< its text reached one of its stop strings (not passed on)
  max_tokens,   ///< it made max_tokens tokens
  context,      ///< its sequence filled the model's context
  cancelled,    ///< Engine::cancel, or the engine shut down
  kv_pool,      ///< alone in the engine, it needs more KV blocks than the whole pool holds
  error,        ///< the model failed (GenerationEvent::error says how)
};
/// The reason's name as OpenAI's finish_reason spells it where there is one ("stop", "length"), else its own
/// ("cancelled", "kv_pool", "error").
[[nodiscard]] const char* finish_reason_name(FinishReason reason) noexcept;

/// A request's handle, unique per engine.
using RequestId = std::uint64_t;

/// What a request's callback receives: after each token, and once at the end (finished set), possibly both at once.
struct GenerationEvent {
  RequestId id = 0;                      ///< the request's, as submit returned it
  std::optional<int> token;              ///< the token made this step (none for a stop token, or an end alone)
  std::string text;                      ///< text that can be shown now (with a tokenizer; may be empty)
  std::optional<FinishReason> finished;  ///< set on the request's last event
  std::string error;                     ///< FinishReason::error: the model's message
  int prompt_tokens = 0;                 ///< the prompt's length
  int completion_tokens = 0;             ///< tokens made so far (a stop token not counted)
};

/// A generation request.
struct GenerationRequest {
  std::vector<int> prompt;                ///< token ids, 1 to the context of them
  int max_tokens = 0;                     ///< tokens to make at most; 0: until a stop or a full context
  Sampling sampling;                      ///< greedy by default
  std::vector<int> stop_tokens;           ///< end-of-sequence ids (the one made is not passed on)
  std::vector<std::string> stop_strings;  ///< the text stops before the first of these (needs a tokenizer)
  std::function<void(const GenerationEvent&)> on_event;  ///< called on the stepping thread, without the engine's lock
};

/// How an engine is sized.
struct EngineOptions {
  /// Blocks in the pool; 0: enough for every slot's whole context, or a paged model's own (StepModel::kv_blocks).
  int kv_blocks = 0;
  int block_size = 16;  ///< positions per block (16 or 32); a paged model's must be its own
  int max_queue = 64;   ///< requests waiting at most; submit refuses more
  /// Prompt tokens one step feeds at most, 0 for no limit (the default, 8192, is about 40 ms of prompts for a 1B model
  /// on an H200). Requests are admitted while the prompts admitted and not yet fed leave some of it (the others stay
  /// queued, so that with cache_prefixes they find the earlier prompts' blocks), and a prompt (or recomputed history)
  /// longer than what a step leaves is fed in parts over several steps (chunked prefill), the running sequences making
  /// a token in each: so no step's prompts hold everyone's next token for longer than this budget's worth of prefill,
  /// and a burst's first tokens do not all wait for its last prompt. A prompt fed in parts agrees with feeding it whole
  /// within rounding, bit for bit where the model cuts both into the same chunks (a decoder whose prefill_chunk divides
  /// every part but the last).
  int max_prompt_tokens = 8192;
  /// Keeps the whole blocks of each prompt fed (of each history recomputed) in the pool, for up to kMaxCachedPrefixes
  /// prompts, so that a later request that begins with the same tokens shares those blocks and feeds only the rest
  /// (its first row starts at the shared positions). Cached blocks go back to the pool, least recently used first,
  /// whenever admission or a step lacks blocks; a prefix whose blocks running sequences hold too gives none back and
  /// stays, and none goes for a request that would wait anyway. A paged model only (StepModel::kv_block_size), ignored
  /// otherwise; off by default.
  bool cache_prefixes = false;
};

/// The most prompts an engine keeps the blocks of (EngineOptions::cache_prefixes).
inline constexpr int kMaxCachedPrefixes = 64;

/// A snapshot of an engine's state and counters.
struct EngineStats {
  int queued = 0;                          ///< requests waiting (preempted ones included)
  int running = 0;                         ///< requests in a slot
  int kv_blocks_used = 0;                  ///< pool blocks held by running requests (queued ones hold none)
  int kv_blocks_cached = 0;                ///< pool blocks only cached prefixes hold (EngineOptions::cache_prefixes)
  int kv_blocks_total = 0;                 ///< pool blocks
  std::uint64_t submitted = 0;             ///< requests accepted
  std::uint64_t finished = 0;              ///< requests ended (any reason)
  std::uint64_t cancelled = 0;             ///< of those, ended by cancel or cancel_all
  std::uint64_t rejected = 0;              ///< submissions refused because the queue was full or the engine closed
  std::uint64_t preemptions = 0;           ///< sequences preempted
  std::uint64_t steps = 0;                 ///< model steps
  std::uint64_t prompt_tokens = 0;         ///< prompt tokens fed (recomputed ones too)
  std::uint64_t cached_prompt_tokens = 0;  ///< prompt tokens not fed: shared from a cached prefix
  std::uint64_t generated_tokens = 0;      ///< tokens made
  double tokens_per_second = 0.0;          ///< tokens made per second over the last 10 s
  double first_token_seconds_sum = 0.0;    ///< time to first token (submission to first event), summed
  std::uint64_t first_token_count = 0;     ///< requests that had their first token
  /// Wall time of the steps that ran the model (`steps` of them), summed: from step's call to its return, the
  /// callbacks included. Less model_seconds_sum, what the engine itself costs the steps on the host (scheduling,
  /// the pool, sampling parameters, stop strings, the callbacks), which the GPU waits for between model steps.
  double step_seconds_sum = 0.0;
  double model_seconds_sum = 0.0;  ///< of that, the time inside StepModel::step, summed
};

/// Schedules generation requests over a StepModel (continuous batching over a paged KV pool).
///
/// One thread steps (step, or serve); any thread may submit, cancel, close or read stats. The KV pool accounts for
/// the model's cache: a sequence holds ceil(positions / block_size) blocks. A model with a paged cache
/// (StepModel::kv_block_size: DecoderStepModel over a paged decoder) stores each sequence in the blocks the pool gave
/// it (StepRow::blocks), so the pool is the cache; for a model with a contiguous cache per slot the pool decides
/// admission and preemption only.
///
/// Exception safety: submit checks everything before queueing (RequestError, naming the field); a model step that
/// throws ends the requests of that step with FinishReason::error and the engine goes on.
class Engine {
 public:
  /// An engine over `model` (which must outlive it); `tokenizer` makes text (GenerationEvent::text) and stop
  /// strings possible. \throws UsageError for invalid options (KvBlockPool's, a max_queue below 1, a max_prompt_tokens
  /// below 0; for a paged model, a kv_blocks or block_size other than its own).
  explicit Engine(StepModel& model, EngineOptions options = {}, std::optional<Tokenizer> tokenizer = std::nullopt);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  Engine(Engine&&) = delete;
  Engine& operator=(Engine&&) = delete;
  ~Engine();

  /// Queues `request`; returns its id, or nullopt when the queue is full or the engine is closed (closed() says
  /// which). Thread-safe. \throws RequestError naming the field: an empty prompt or one longer than the context, a
  /// token outside the vocabulary ("prompt[i]"), a negative max_tokens, an invalid sampling, stop strings without a
  /// tokenizer or empty, a prompt that needs more blocks than the pool holds.
  [[nodiscard]] std::optional<RequestId> submit(GenerationRequest request);

  /// Ends request `id` at the next step (FinishReason::cancelled), queued or running; nothing for an id that has
  /// ended or is unknown. Thread-safe.
  void cancel(RequestId id);

  /// Runs one round: ends cancelled requests, admits queued ones while slots and blocks allow, grows each running
  /// sequence by its next position (preempting the youngest when the pool runs out), runs one model step and passes
  /// each request its events. Returns false, doing nothing, when no request is queued or running. Call from one
  /// thread at a time.
  bool step();

  /// Blocks until a request is queued or running, something was cancelled, or `timeout` passes.
  void wait_for_work(std::chrono::milliseconds timeout);

  /// Refuses further submissions (submit returns nullopt); queued and running requests go on. Thread-safe.
  void close();
  /// Ends every queued and running request (FinishReason::cancelled) at the next step. Thread-safe.
  void cancel_all();
  /// Whether close() was called.
  [[nodiscard]] bool closed() const;
  /// Whether no request is queued or running.
  [[nodiscard]] bool idle() const;
  /// The state and counters now. Thread-safe.
  [[nodiscard]] EngineStats stats() const;
  /// The pool, for inspection by the stepping thread (e.g. that it is empty once idle; with cache_prefixes, the cached
  /// prefixes' sequences stay).
  [[nodiscard]] const KvBlockPool& pool() const noexcept { return pool_; }

 private:
  struct Sequence;      // a request and its progress (src/nn/engine.cpp)
  struct Pending;       // an event and the callback it goes to
  struct CachedPrefix;  // the blocks of a prompt fed before (EngineOptions::cache_prefixes)
  using SequencePtr = std::unique_ptr<Sequence>;

  /// Ends `s` with `reason` (its slot and blocks freed) and queues its last event. Lock held.
  void finish(Sequence& s, FinishReason reason, std::vector<Pending>& events, std::string error = {});
  /// Frees s's slot and blocks. Lock held.
  void release(Sequence& s);
  /// Admits queued sequences while a slot and the blocks are free. Lock held.
  void admit();
  /// Gives each running sequence the position its step writes, preempting as needed. Lock held.
  void reserve(std::vector<Pending>& events);
  /// Takes the step's next token for `s`, queueing its event. Lock held.
  void advance(Sequence& s, int token, std::vector<Pending>& events);
  /// The cached prefix (its index in prefixes_, -1 for none) that shares the most whole blocks with s's tokens, and
  /// the positions it shares (at most all but s's last token). Lock held.
  [[nodiscard]] std::pair<int, int> longest_prefix(const Sequence& s) const;
  /// A sequence of s's tokens' whole blocks that shares a cached prefix's, and how many positions it shares (at
  /// least one block, at most all but s's last token), or nullopt when none is cached or the pool lacks the rest.
  /// Lock held.
  std::optional<std::pair<KvBlockPool::SequenceId, int>> from_cache(const Sequence& s);
  /// Caches the whole blocks of what `s` has fed. Lock held.
  void remember_prefix(const Sequence& s);
  /// Drops the least recently used cached prefix whose dropping gives a block back to the pool, other than prefixes_
  /// [spare] (the one a waiting request would share) while another would do, and that one only when `drop_spare`;
  /// false when none would. Lock held.
  bool evict_prefix(int spare = -1, bool drop_spare = true);
  /// The blocks only cached prefixes hold: what dropping them all (all but prefixes_[except]) would give back. Lock
  /// held.
  [[nodiscard]] int cache_only_blocks(int except = -1) const;

  StepModel& model_;
  std::optional<Tokenizer> tokenizer_;
  int max_queue_;
  int max_prompt_tokens_;
  bool cache_prefixes_;
  mutable std::mutex mutex_;
  std::condition_variable work_;
  KvBlockPool pool_;
  std::deque<SequencePtr> queue_;
  std::vector<SequencePtr> running_;  ///< in admission order
  std::vector<bool> slot_used_;
  std::vector<RequestId> cancels_;
  bool cancel_all_ = false;
  bool closed_ = false;
  RequestId next_id_ = 1;
  EngineStats counters_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, int>> recent_;  ///< tokens made per step, last 10 s
  std::vector<CachedPrefix> prefixes_;
  std::uint64_t prefix_clock_ = 0;  ///< counts uses of cached prefixes, for least-recently-used eviction
};

}  // namespace lazygraph::nn
