#include "lazygraph/nn/engine.hpp"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "lazygraph/driver/error.hpp"
#include "lazygraph/nn/stop_strings.hpp"
#include "lazygraph/nn/text_stream.hpp"

namespace lazygraph::nn {
namespace {

using Clock = std::chrono::steady_clock;
using Callback = std::function<void(const GenerationEvent&)>;

/// The window EngineStats::tokens_per_second averages over.
constexpr auto kRateWindow = std::chrono::seconds(10);

}  // namespace

const char* finish_reason_name(FinishReason reason) noexcept {
  switch (reason) {
    case FinishReason::stop_token:
    case FinishReason::stop_string:
      return "stop";
    case FinishReason::max_tokens:
    case FinishReason::context:
      return "length";
    case FinishReason::cancelled:
      return "cancelled";
    case FinishReason::kv_pool:
      return "kv_pool";
    case FinishReason::error:
      return "error";
  }
  return "error";
}

struct Engine::Sequence {
  RequestId id = 0;
  std::vector<int> tokens;  ///< the prompt, then the tokens made
  int prompt_size = 0;
  int max_tokens = 0;
  Sampling sampling;
  std::vector<int> stop_tokens;
  std::shared_ptr<const Callback> on_event;
  std::optional<TextStream> text;
  std::optional<StopStrings> stops;
  Clock::time_point submitted;
  int made = 0;
  int fed = 0;    ///< tokens in the model's cache (0 while queued: a preempted sequence is recomputed whole)
  int slot = -1;  ///< -1 while queued
  /// From admission until it has fed all of `tokens` (a prompt longer than a step's budget takes several steps):
  /// its blocks already hold every position it feeds (from `fed` on: a cached prefix's are shared), and it makes no
  /// token before the last of them.
  bool admitted_now = false;
  /// From admission to its first step: the tokens a cached prefix shared are counted then.
  bool first_piece = false;
  std::optional<KvBlockPool::SequenceId> kv;
  bool first_token = false;
  bool finished = false;
};

struct Engine::Pending {
  std::shared_ptr<const Callback> on_event;
  GenerationEvent event;
};

struct Engine::CachedPrefix {
  KvBlockPool::SequenceId kv = 0;  ///< a pool sequence holding the blocks
  std::vector<int> tokens;         ///< the tokens they hold: whole blocks
  std::uint64_t used = 0;          ///< prefix_clock_ when last cached or shared
};

namespace {
/// The engine's pool: `options`' (kv_blocks 0: every slot's whole context), or a paged model's own
/// (StepModel::kv_block_size). \throws UsageError when options and a paged model disagree; as KvBlockPool's.
KvBlockPool engine_pool(const StepModel& model, const EngineOptions& options) {
  if (model.kv_block_size() > 0) {
    const auto shape = [&](int blocks, int size) {
      return std::to_string(blocks) + " blocks of " + std::to_string(size) + " positions";
    };
    if ((options.kv_blocks != 0 && options.kv_blocks != model.kv_blocks()) ||
        options.block_size != model.kv_block_size()) {
      throw UsageError("Engine: the model's paged KV cache holds " + shape(model.kv_blocks(), model.kv_block_size()) +
                       "; EngineOptions asks for " + shape(options.kv_blocks, options.block_size) +
                       " (kv_blocks 0 takes the model's; block_size must be its own)");
    }
    return KvBlockPool(model.kv_blocks(), model.kv_block_size());
  }
  return KvBlockPool(options.kv_blocks > 0 ? options.kv_blocks
                                           : model.slots() * ((model.context() + options.block_size - 1) /
                                                              std::max(options.block_size, 1)),
                     options.block_size);
}
}  // namespace

Engine::Engine(StepModel& model, EngineOptions options, std::optional<Tokenizer> tokenizer)
    : model_(model),
      tokenizer_(std::move(tokenizer)),
      max_queue_(options.max_queue),
      max_prompt_tokens_(options.max_prompt_tokens),
      cache_prefixes_(options.cache_prefixes && model.kv_block_size() > 0),
      pool_(engine_pool(model, options)),
      slot_used_(static_cast<std::size_t>(std::max(model.slots(), 0)), false) {
  if (options.max_queue < 1) {
    throw UsageError("Engine: max_queue must be at least 1, not " + std::to_string(options.max_queue));
  }
  if (options.max_prompt_tokens < 0) {
    throw UsageError("Engine: max_prompt_tokens must be 0 (no limit) or more, not " +
                     std::to_string(options.max_prompt_tokens));
  }
  if (model.slots() < 1) throw UsageError("Engine: the model has no slot to run a sequence in");
  counters_.kv_blocks_total = pool_.total_blocks();
}

Engine::~Engine() = default;

std::optional<RequestId> Engine::submit(GenerationRequest request) {
  const int context = model_.context();
  if (request.prompt.empty()) throw RequestError("prompt", "must hold at least one token");
  if (static_cast<int>(request.prompt.size()) > context) {
    throw RequestError("prompt", std::to_string(request.prompt.size()) + " tokens, more than the context of " +
                                     std::to_string(context) + " positions");
  }
  for (std::size_t i = 0; i < request.prompt.size(); ++i) {
    if (request.prompt[i] < 0 || request.prompt[i] >= model_.vocab()) {
      throw RequestError("prompt[" + std::to_string(i) + "]", "token " + std::to_string(request.prompt[i]) +
                                                                  " is outside the vocabulary of " +
                                                                  std::to_string(model_.vocab()));
    }
  }
  if (request.max_tokens < 0) {
    throw RequestError("max_tokens", "must be 0 (no limit) or more, not " + std::to_string(request.max_tokens));
  }
  try {
    request.sampling.validate();
  } catch (const UsageError& e) {
    throw RequestError("sampling", e.what());
  }
  if (!request.stop_strings.empty() && !tokenizer_.has_value()) {
    throw RequestError("stop", "stop strings need the engine to have a tokenizer, and this one has none");
  }
  for (const std::string& stop : request.stop_strings) {
    if (stop.empty()) throw RequestError("stop", "a stop string must not be empty");
  }
  const int blocks = pool_.blocks_for(static_cast<int>(request.prompt.size()));
  if (blocks > pool_.total_blocks()) {
    throw RequestError("prompt", std::to_string(request.prompt.size()) + " tokens need " + std::to_string(blocks) +
                                     " KV blocks, more than the pool's " + std::to_string(pool_.total_blocks()));
  }

  auto s = std::make_unique<Sequence>();
  s->prompt_size = static_cast<int>(request.prompt.size());
  s->max_tokens = request.max_tokens;
  s->sampling = request.sampling;
  s->stop_tokens = std::move(request.stop_tokens);
  if (request.on_event) s->on_event = std::make_shared<const Callback>(std::move(request.on_event));
  if (tokenizer_.has_value()) s->text.emplace(*tokenizer_, request.prompt);
  if (!request.stop_strings.empty()) s->stops.emplace(std::move(request.stop_strings));
  s->tokens = std::move(request.prompt);
  s->submitted = Clock::now();

  const std::lock_guard<std::mutex> lock(mutex_);
  if (closed_ || static_cast<int>(queue_.size()) >= max_queue_) {
    ++counters_.rejected;
    return std::nullopt;
  }
  s->id = next_id_++;
  const RequestId id = s->id;
  queue_.push_back(std::move(s));
  ++counters_.submitted;
  work_.notify_all();
  return id;
}

void Engine::cancel(RequestId id) {
  const std::lock_guard<std::mutex> lock(mutex_);
  cancels_.push_back(id);
  work_.notify_all();
}

void Engine::cancel_all() {
  const std::lock_guard<std::mutex> lock(mutex_);
  cancel_all_ = true;
  work_.notify_all();
}

void Engine::close() {
  const std::lock_guard<std::mutex> lock(mutex_);
  closed_ = true;
  work_.notify_all();
}

bool Engine::closed() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return closed_;
}

bool Engine::idle() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return queue_.empty() && running_.empty();
}

void Engine::wait_for_work(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  work_.wait_for(lock, timeout,
                 [&] { return !queue_.empty() || !running_.empty() || !cancels_.empty() || cancel_all_; });
}

EngineStats Engine::stats() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  EngineStats s = counters_;
  s.queued = static_cast<int>(queue_.size());
  s.running = static_cast<int>(running_.size());
  const int cache_only = cache_only_blocks();
  s.kv_blocks_cached = cache_only;
  s.kv_blocks_used = pool_.used_blocks() - cache_only;
  s.kv_blocks_total = pool_.total_blocks();
  const Clock::time_point now = Clock::now();
  int tokens = 0;
  for (const auto& [when, count] : recent_) {
    if (now - when <= kRateWindow) tokens += count;
  }
  if (!recent_.empty()) {
    const double span = std::chrono::duration<double>(now - std::max(recent_.front().first, now - kRateWindow)).count();
    s.tokens_per_second = span > 0.0 ? tokens / std::max(span, 1.0) : 0.0;
  }
  return s;
}

void Engine::release(Sequence& s) {
  if (s.kv.has_value()) pool_.release(*s.kv);
  s.kv.reset();
  if (s.slot >= 0) slot_used_[static_cast<std::size_t>(s.slot)] = false;
  s.slot = -1;
  s.fed = 0;
}

void Engine::finish(Sequence& s, FinishReason reason, std::vector<Pending>& events, std::string error) {
  // The text still held back (an incomplete character, a possible beginning of a stop string) is passed on, but
  // when the request was cancelled or failed, or its text stopped.
  std::string rest;
  if (reason != FinishReason::cancelled && reason != FinishReason::error && reason != FinishReason::stop_string) {
    if (s.text.has_value()) rest = s.text->finish();
    if (s.stops.has_value()) {
      rest = s.stops->push(rest);
      if (!s.stops->stopped()) rest += s.stops->finish();
    }
  }
  if (events.empty() || events.back().event.id != s.id || events.back().event.finished.has_value()) {
    Pending p;
    p.on_event = s.on_event;
    p.event.id = s.id;
    p.event.prompt_tokens = s.prompt_size;
    events.push_back(std::move(p));
  }
  GenerationEvent& e = events.back().event;
  e.text += rest;
  e.finished = reason;
  e.error = std::move(error);
  e.completion_tokens = s.made;
  release(s);
  s.finished = true;
  ++counters_.finished;
  if (reason == FinishReason::cancelled) ++counters_.cancelled;
}

void Engine::admit() {
  // Prompt tokens the sequences admitted but not yet fed will feed: admission stops once they fill the step's budget,
  // so that a burst's later prompts wait in the queue (not in a slot, holding blocks) and may share the prefixes the
  // earlier ones leave cached. A prompt admitted with budget left is fed from this step on, as much a step as the
  // budget leaves (step()).
  long long pending = 0;
  for (const SequencePtr& r : running_) {
    if (r->admitted_now) pending += static_cast<long long>(r->tokens.size()) - r->fed;
  }
  const auto over_budget = [&] { return max_prompt_tokens_ > 0 && pending >= max_prompt_tokens_; };
  while (!queue_.empty()) {
    const auto slot = std::find(slot_used_.begin(), slot_used_.end(), false);
    if (slot == slot_used_.end()) return;
    Sequence& s = *queue_.front();
    const int size = static_cast<int>(s.tokens.size());
    // A request that waits (for the budget, or for blocks that dropping cached prefixes could not give) takes and
    // drops nothing: both are judged by what the cache would share now. It fits sharing the prefix it matches when the
    // other prefixes' blocks make room, or alone when all of theirs do; only then is the matched prefix dropped.
    if (over_budget()) return;
    const auto [match, could_share] = longest_prefix(s);
    const int free = pool_.free_blocks();
    const int need = pool_.blocks_for(size) - could_share / pool_.block_size();
    const bool fits_sharing = need <= free + cache_only_blocks(match);
    if (!fits_sharing && pool_.blocks_for(size) > free + cache_only_blocks()) return;
    std::optional<KvBlockPool::SequenceId> kv;
    int shared = 0;
    while (true) {
      if (const auto hit = from_cache(s); hit.has_value()) {
        kv = hit->first;
        shared = hit->second;
      } else {
        kv = pool_.allocate(size);
      }
      // Cached blocks go back before a request waits for them, the prefix it would share last.
      if (kv.has_value() || !evict_prefix(longest_prefix(s).first, !fits_sharing)) break;
    }
    if (!kv.has_value()) return;  // first come, first served: the head waits for blocks
    pending += static_cast<long long>(size) - shared;
    s.kv = kv;
    s.slot = static_cast<int>(slot - slot_used_.begin());
    *slot = true;
    s.fed = shared;
    s.admitted_now = true;
    s.first_piece = true;
    running_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
}

void Engine::reserve(std::vector<Pending>& events) {
  for (std::size_t i = 0; i < running_.size(); ++i) {
    Sequence& s = *running_[i];
    if (s.admitted_now) continue;  // its blocks hold everything it feeds
    while (!pool_.append(*s.kv, 1)) {
      if (evict_prefix()) continue;  // cached blocks go back before a sequence is preempted
      Sequence& youngest = *running_.back();
      if (&youngest == &s && running_.size() == 1) {
        finish(s, FinishReason::kv_pool, events);
        running_.pop_back();
        return;
      }
      // Preempt the youngest (s itself when it is): its blocks back to the pool, itself to the head of the queue,
      // to be recomputed from its tokens when it returns.
      release(youngest);
      ++counters_.preemptions;
      queue_.push_front(std::move(running_.back()));
      running_.pop_back();
      if (&youngest == &s) return;  // s was the last: nothing after it to reserve for
    }
  }
}

void Engine::advance(Sequence& s, int token, std::vector<Pending>& events) {
  if (token < 0 || token >= model_.vocab()) {
    finish(s, FinishReason::error, events,
           "the model returned token " + std::to_string(token) + ", outside the vocabulary of " +
               std::to_string(model_.vocab()));
    return;
  }
  if (!s.first_token) {
    s.first_token = true;
    counters_.first_token_seconds_sum += std::chrono::duration<double>(Clock::now() - s.submitted).count();
    ++counters_.first_token_count;
  }
  if (std::find(s.stop_tokens.begin(), s.stop_tokens.end(), token) != s.stop_tokens.end()) {
    finish(s, FinishReason::stop_token, events);
    return;
  }
  s.tokens.push_back(token);
  ++s.made;
  ++counters_.generated_tokens;
  GenerationEvent e;
  e.id = s.id;
  e.token = token;
  e.prompt_tokens = s.prompt_size;
  e.completion_tokens = s.made;
  if (s.text.has_value()) e.text = s.text->push(token);
  if (s.stops.has_value()) e.text = s.stops->push(e.text);
  events.push_back({.on_event = s.on_event, .event = std::move(e)});
  if (s.stops.has_value() && s.stops->stopped()) {
    finish(s, FinishReason::stop_string, events);
  } else if (s.max_tokens > 0 && s.made >= s.max_tokens) {
    finish(s, FinishReason::max_tokens, events);
  } else if (static_cast<int>(s.tokens.size()) > model_.context()) {  // its last token has no position to go to
    finish(s, FinishReason::context, events);
  }
}

std::pair<int, int> Engine::longest_prefix(const Sequence& s) const {
  const int block = pool_.block_size();
  // At most all but the last token: the model must feed at least that one to give the next token.
  const int most = (static_cast<int>(s.tokens.size()) - 1) / block * block;
  int best = -1;
  int best_shared = 0;
  for (std::size_t i = 0; i < prefixes_.size(); ++i) {
    const CachedPrefix& p = prefixes_[i];
    const int limit = std::min(most, static_cast<int>(p.tokens.size()));
    int same = 0;
    while (same < limit && p.tokens[static_cast<std::size_t>(same)] == s.tokens[static_cast<std::size_t>(same)]) ++same;
    const int shared = same / block * block;
    if (shared > best_shared) {
      best = static_cast<int>(i);
      best_shared = shared;
    }
  }
  return {best, best_shared};
}

std::optional<std::pair<KvBlockPool::SequenceId, int>> Engine::from_cache(const Sequence& s) {
  const auto [best, shared] = longest_prefix(s);
  if (best < 0) return std::nullopt;
  CachedPrefix& p = prefixes_[static_cast<std::size_t>(best)];
  const KvBlockPool::SequenceId kv = pool_.fork(p.kv, shared);
  if (!pool_.append(kv, static_cast<int>(s.tokens.size()) - shared)) {
    pool_.release(kv);
    return std::nullopt;
  }
  p.used = ++prefix_clock_;
  return std::pair{kv, shared};
}

void Engine::remember_prefix(const Sequence& s) {
  if (!cache_prefixes_ || !s.kv.has_value()) return;
  const int whole = s.fed / pool_.block_size() * pool_.block_size();
  if (whole == 0) return;
  const auto prefix = std::span<const int>(s.tokens).first(static_cast<std::size_t>(whole));
  const auto begins_with = [](std::span<const int> longer, std::span<const int> shorter) {
    return longer.size() >= shorter.size() && std::equal(shorter.begin(), shorter.end(), longer.begin());
  };
  for (CachedPrefix& p : prefixes_) {
    if (begins_with(p.tokens, prefix)) {  // cached already, or a longer one holds it
      p.used = ++prefix_clock_;
      return;
    }
  }
  // Prefixes this one extends are dropped: it covers their tokens (and holds their blocks when it was admitted with
  // them; else its own copies).
  std::erase_if(prefixes_, [&](const CachedPrefix& p) {
    if (!begins_with(prefix, p.tokens)) return false;
    pool_.release(p.kv);
    return true;
  });
  if (static_cast<int>(prefixes_.size()) >= kMaxCachedPrefixes) {  // the least recently used makes room
    const auto oldest = std::min_element(prefixes_.begin(), prefixes_.end(),
                                         [](const CachedPrefix& a, const CachedPrefix& b) { return a.used < b.used; });
    pool_.release(oldest->kv);
    prefixes_.erase(oldest);
  }
  prefixes_.push_back({.kv = pool_.fork(*s.kv, whole),
                       .tokens = std::vector<int>(prefix.begin(), prefix.end()),
                       .used = ++prefix_clock_});
}

bool Engine::evict_prefix(int spare, bool drop_spare) {
  // Only a prefix that holds a block alone gives one back; one whose blocks sequences hold too costs nothing to keep.
  // Whenever some block only prefixes hold, some prefix holds one alone: its last (prefixes never share their last
  // block: one that did would begin another, and remember_prefix keeps no prefix of another).
  auto oldest = prefixes_.end();
  bool spare_gives = false;
  for (auto p = prefixes_.begin(); p != prefixes_.end(); ++p) {
    const std::span<const int> blocks = pool_.blocks(p->kv);
    const bool gives = std::any_of(blocks.begin(), blocks.end(), [&](int b) { return pool_.references(b) == 1; });
    if (p - prefixes_.begin() == spare) {
      spare_gives = gives;
      continue;
    }
    if (gives && (oldest == prefixes_.end() || p->used < oldest->used)) oldest = p;
  }
  if (oldest == prefixes_.end() && spare_gives && drop_spare) oldest = prefixes_.begin() + spare;
  if (oldest == prefixes_.end()) return false;
  pool_.release(oldest->kv);
  prefixes_.erase(oldest);
  return true;
}

int Engine::cache_only_blocks(int except) const {
  // A block only prefixes hold has as many holders in the pool as prefixes that hold it (prefixes_[except] left out:
  // then a block it holds has one holder more than the others count, and is not counted).
  std::vector<int> held;
  for (std::size_t i = 0; i < prefixes_.size(); ++i) {
    if (static_cast<int>(i) == except) continue;
    const std::span<const int> blocks = pool_.blocks(prefixes_[i].kv);
    held.insert(held.end(), blocks.begin(), blocks.end());
  }
  std::sort(held.begin(), held.end());
  int only = 0;
  for (std::size_t i = 0; i < held.size();) {
    std::size_t j = i;
    while (j < held.size() && held[j] == held[i]) ++j;
    only += pool_.references(held[i]) == static_cast<int>(j - i) ? 1 : 0;
    i = j;
  }
  return only;
}

bool Engine::step() {
  const Clock::time_point entered = Clock::now();
  std::vector<Pending> events;
  std::vector<StepRow> rows;
  std::vector<Sequence*> stepped;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.empty() && running_.empty()) {
      cancels_.clear();
      cancel_all_ = false;
      return false;
    }
    const auto cancelled = [&](const Sequence& s) {
      return cancel_all_ || std::find(cancels_.begin(), cancels_.end(), s.id) != cancels_.end();
    };
    for (const SequencePtr& s : queue_) {
      if (cancelled(*s)) finish(*s, FinishReason::cancelled, events);
    }
    for (const SequencePtr& s : running_) {
      if (cancelled(*s)) finish(*s, FinishReason::cancelled, events);
    }
    cancels_.clear();
    cancel_all_ = false;
    std::erase_if(queue_, [](const SequencePtr& s) { return s->finished; });
    std::erase_if(running_, [](const SequencePtr& s) { return s->finished; });

    admit();
    reserve(events);
    const bool paged = model_.kv_block_size() > 0;
    // Prompt tokens this step may still feed: a prompt (or recomputed history) longer than what is left is fed in
    // part, the rest in later steps, so that no step's prompts hold the running sequences' next tokens for longer
    // than the budget's worth of prefill; one left without budget waits for the next step.
    long long budget = max_prompt_tokens_ > 0 ? max_prompt_tokens_ : std::numeric_limits<long long>::max();
    for (const SequencePtr& s : running_) {
      const std::size_t first = static_cast<std::size_t>(s->fed);
      std::size_t count = s->tokens.size() - first;
      if (s->admitted_now) {
        if (budget <= 0) continue;
        count = static_cast<std::size_t>(std::min(static_cast<long long>(count), budget));
        budget -= static_cast<long long>(count);
      }
      // A paged model's rows carry their blocks: the pool's own tables, which change only on this thread.
      rows.push_back({.slot = s->slot,
                      .position = s->fed,
                      .tokens = std::span<const int>(s->tokens).subspan(first, count),
                      .sampling = s->sampling,
                      .blocks = paged ? pool_.blocks(*s->kv) : std::span<const int>()});
      stepped.push_back(s.get());
    }
  }

  if (!rows.empty()) {
    std::vector<int> next(rows.size(), -1);
    std::string failure;
    const Clock::time_point model_start = Clock::now();
    try {
      model_.step(rows, next);
    } catch (const std::exception& e) {
      failure = e.what();
      if (failure.empty()) failure = "the model's step failed";
    }
    const Clock::time_point model_end = Clock::now();
    const std::lock_guard<std::mutex> lock(mutex_);
    ++counters_.steps;
    counters_.model_seconds_sum += std::chrono::duration<double>(model_end - model_start).count();
    const std::uint64_t made_before = counters_.generated_tokens;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      Sequence& s = *stepped[r];
      if (!failure.empty()) {
        finish(s, FinishReason::error, events, failure);
        continue;
      }
      if (s.admitted_now) {  // counted once fed: a sequence preempted before its first step is admitted again
        counters_.prompt_tokens += rows[r].tokens.size();
        if (s.first_piece) counters_.cached_prompt_tokens += static_cast<std::uint64_t>(rows[r].position);  // shared
        s.first_piece = false;
      }
      s.fed += static_cast<int>(rows[r].tokens.size());
      if (s.fed < static_cast<int>(s.tokens.size())) continue;  // a part of its prompt: no token yet
      if (s.admitted_now) {
        s.admitted_now = false;
        remember_prefix(s);
      }
      advance(s, next[r], events);
    }
    std::erase_if(running_, [](const SequencePtr& s) { return s->finished; });
    const Clock::time_point now = Clock::now();
    recent_.emplace_back(now, static_cast<int>(counters_.generated_tokens - made_before));
    while (!recent_.empty() && now - recent_.front().first > kRateWindow) recent_.pop_front();
  }

  // The callbacks run without the lock, so that they may submit or cancel. One that throws cancels its request.
  for (const Pending& p : events) {
    if (!p.on_event) continue;
    try {
      (*p.on_event)(p.event);
    } catch (...) {
      if (!p.event.finished.has_value()) cancel(p.event.id);
    }
  }
  if (!rows.empty()) {
    const double seconds = std::chrono::duration<double>(Clock::now() - entered).count();
    const std::lock_guard<std::mutex> lock(mutex_);
    counters_.step_seconds_sum += seconds;
  }
  return true;
}

}  // namespace lazygraph::nn
