// Host tests of lazygraph::nn::Engine over a deterministic host model: many requests at once give each the tokens
// its prompt makes alone, also when the KV pool runs out and sequences are preempted and recomputed; the bounded
// queue, cancellation, stop tokens and strings, limits, submissions from several threads, and refusals by field.
#include <doctest/doctest.h>

#include <lazygraph/driver/error.hpp>
#include <lazygraph/nn/engine.hpp>
#include <lazygraph/nn/step_model.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/tokenizer_files.hpp"

using lazygraph::nn::Engine;
using lazygraph::nn::EngineOptions;
using lazygraph::nn::EngineStats;
using lazygraph::nn::FinishReason;
using lazygraph::nn::GenerationEvent;
using lazygraph::nn::GenerationRequest;
using lazygraph::nn::RequestError;
using lazygraph::nn::RequestId;
using lazygraph::nn::Sampling;
using lazygraph::nn::StepModel;
using lazygraph::nn::StepRow;

namespace {

/// A model on the host whose logits are a hash of the whole sequence so far: each slot keeps the tokens at its
/// positions (its "cache"), and a row must continue its slot's positions or start over at 0, as the engine promises.
/// Tokens `low` to `high` only get logits above the rest, so that its text (bytes) is plain letters.
class HostModel final : public StepModel {
 public:
  HostModel(int slots, int context, int vocab = 256, int low = 'a', int high = 'z')
      : slots_(slots),
        context_(context),
        vocab_(vocab),
        low_(low),
        high_(high),
        caches_(static_cast<std::size_t>(slots)) {}
  [[nodiscard]] int slots() const override { return slots_; }
  [[nodiscard]] int context() const override { return context_; }
  [[nodiscard]] int vocab() const override { return vocab_; }
  void step(std::span<const StepRow> rows, std::span<int> next) override {
    REQUIRE(next.size() == rows.size());
    REQUIRE(!rows.empty());
    REQUIRE(static_cast<int>(rows.size()) <= slots_);
    ++steps;
    most_rows = std::max(most_rows, static_cast<int>(rows.size()));
    int prompt_tokens = 0;
    for (const StepRow& row : rows) prompt_tokens += row.position == 0 ? static_cast<int>(row.tokens.size()) : 0;
    prompt_tokens_per_step.push_back(prompt_tokens);
    std::set<int> seen;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const StepRow& row = rows[r];
      REQUIRE(seen.insert(row.slot).second);  // one row per slot
      REQUIRE(row.slot >= 0);
      REQUIRE(row.slot < slots_);
      std::vector<int>& cache = caches_[static_cast<std::size_t>(row.slot)];
      REQUIRE((row.position == 0 || row.position == static_cast<int>(cache.size())));
      REQUIRE(!row.tokens.empty());
      cache.resize(static_cast<std::size_t>(row.position));
      cache.insert(cache.end(), row.tokens.begin(), row.tokens.end());
      REQUIRE(static_cast<int>(cache.size()) <= context_);
      next[r] = lazygraph::nn::pick_token(logits(cache), row.sampling, static_cast<int>(cache.size()) - 1);
    }
  }
  /// The logits after `history`.
  [[nodiscard]] std::vector<float> logits(std::span<const int> history) const {
    std::uint64_t h = 1469598103934665603ULL;
    for (const int t : history) h = (h ^ static_cast<std::uint64_t>(t)) * 1099511628211ULL;
    std::vector<float> out(static_cast<std::size_t>(vocab_));
    for (int v = 0; v < vocab_; ++v) {
      const std::uint64_t x = (h ^ (static_cast<std::uint64_t>(v) * 0x9E3779B97F4A7C15ULL)) * 0xBF58476D1CE4E5B9ULL;
      out[static_cast<std::size_t>(v)] =
          static_cast<float>((x >> 40U) % 1000U) / 100.0F + (v >= low_ && v <= high_ ? 20.0F : 0.0F);
    }
    return out;
  }
  /// The tokens a request makes alone: its prompt stepped one token at a time, as the engine's rules say.
  [[nodiscard]] std::vector<int> alone(const GenerationRequest& r) const {
    std::vector<int> history = r.prompt;
    std::vector<int> made;
    while (true) {
      const int t = lazygraph::nn::pick_token(logits(history), r.sampling, static_cast<int>(history.size()) - 1);
      if (std::find(r.stop_tokens.begin(), r.stop_tokens.end(), t) != r.stop_tokens.end()) break;
      made.push_back(t);
      history.push_back(t);
      if (r.max_tokens > 0 && static_cast<int>(made.size()) == r.max_tokens) break;
      if (static_cast<int>(history.size()) > context_) break;
    }
    return made;
  }

  int steps = 0;
  int most_rows = 0;
  std::vector<int> prompt_tokens_per_step;  ///< the tokens of rows at position 0, each step

 private:
  int slots_, context_, vocab_, low_, high_;
  std::vector<std::vector<int>> caches_;
};

/// A model with a paged cache on the host (StepModel::kv_block_size): each row's tokens go to its positions in the
/// blocks its row carries, and its history is read back through them, its logits HostModel's of that history; so a
/// wrong, short or stale table makes other tokens than the prompt alone makes.
class PagedHostModel final : public StepModel {
 public:
  PagedHostModel(int slots, int context, int blocks, int block_size)
      : reference_(slots, context),
        slots_(slots),
        context_(context),
        blocks_(blocks),
        block_size_(block_size),
        pool_(static_cast<std::size_t>(blocks) * static_cast<std::size_t>(block_size), -1) {}
  [[nodiscard]] int slots() const override { return slots_; }
  [[nodiscard]] int context() const override { return context_; }
  [[nodiscard]] int vocab() const override { return reference_.vocab(); }
  [[nodiscard]] int kv_block_size() const override { return block_size_; }
  [[nodiscard]] int kv_blocks() const override { return blocks_; }
  void step(std::span<const StepRow> rows, std::span<int> next) override {
    std::set<int> written;
    int fed = 0;
    for (const StepRow& row : rows) fed += row.tokens.size() > 1 ? static_cast<int>(row.tokens.size()) : 0;
    prompt_tokens_fed.push_back(fed);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const StepRow& row = rows[r];
      const int last = row.position + static_cast<int>(row.tokens.size()) - 1;
      REQUIRE(static_cast<int>(row.blocks.size()) > last / block_size_);  // the blocks cover what it feeds
      const auto at = [&](int p) {
        const int block = row.blocks[static_cast<std::size_t>(p / block_size_)];
        REQUIRE(block >= 0);
        REQUIRE(block < blocks_);
        return static_cast<std::size_t>(block * block_size_ + p % block_size_);
      };
      for (std::size_t i = 0; i < row.tokens.size(); ++i) {
        const int position = row.position + static_cast<int>(i);
        const std::size_t where = at(position);
        REQUIRE(written.insert(static_cast<int>(where)).second);  // no two rows write one place
        if (pool != nullptr) {  // nobody else holds a block written (the engine makes no copy-on-write copies)
          REQUIRE(pool->references(row.blocks[static_cast<std::size_t>(position / block_size_)]) == 1);
        }
        pool_[where] = row.tokens[i];
      }
      std::vector<int> history;
      for (int p = 0; p <= last; ++p) history.push_back(pool_[at(p)]);
      next[r] = lazygraph::nn::pick_token(reference_.logits(history), row.sampling, last);
    }
    if (failing_steps.contains(steps_++)) throw std::runtime_error("device lost");  // after writing, as a device might
  }
  /// The tokens a request makes alone (HostModel::alone).
  [[nodiscard]] std::vector<int> alone(const GenerationRequest& r) const { return reference_.alone(r); }

  std::vector<int> prompt_tokens_fed;  ///< per step, the tokens of rows of more than one
  /// When set, the engine's pool: a block a row writes must be held by that row's sequence alone, as whole-block
  /// sharing promises (a token model rewrites a shared prefix with the same tokens, so only this shows it).
  const lazygraph::nn::KvBlockPool* pool = nullptr;
  std::set<int> failing_steps;  ///< steps (from 0) that throw once they have written their rows

 private:
  HostModel reference_;
  int slots_, context_, blocks_, block_size_;
  int steps_ = 0;
  std::vector<int> pool_;  ///< the tokens at each block's positions
};

/// What a request received through its callback.
struct Received {
  std::vector<int> tokens;
  std::string text;
  std::optional<FinishReason> finished;
  int events_after_finish = 0;
  int completion_tokens = 0;
};

/// Collects every request's events (thread-safe).
class Collector {
 public:
  [[nodiscard]] std::function<void(const GenerationEvent&)> callback() {
    return [this](const GenerationEvent& e) {
      const std::lock_guard<std::mutex> lock(mutex_);
      Received& r = by_id_[e.id];
      if (r.finished.has_value()) ++r.events_after_finish;
      if (e.token.has_value()) r.tokens.push_back(*e.token);
      r.text += e.text;
      r.completion_tokens = e.completion_tokens;
      if (e.finished.has_value()) r.finished = e.finished;
    };
  }
  [[nodiscard]] Received operator[](RequestId id) {
    const std::lock_guard<std::mutex> lock(mutex_);
    return by_id_[id];
  }

 private:
  std::mutex mutex_;
  std::map<RequestId, Received> by_id_;
};

/// A request for `prompt` (designated initializers would leave fields out, which -Wextra flags).
GenerationRequest req(std::vector<int> prompt, int max_tokens = 0,
                      std::function<void(const GenerationEvent&)> on_event = {}) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.on_event = std::move(on_event);
  return r;
}

EngineOptions opts(int kv_blocks, int block_size = 16, int max_queue = 64) {
  EngineOptions o;
  o.kv_blocks = kv_blocks;
  o.block_size = block_size;
  o.max_queue = max_queue;
  return o;
}

Sampling sampled(float temperature, int top_k, std::uint32_t seed, float top_p) {
  Sampling s;
  s.temperature = temperature;
  s.top_k = top_k;
  s.seed = seed;
  s.top_p = top_p;
  return s;
}

/// A request for prompt i of a family of prompts of different lengths.
GenerationRequest request_for(int i, Collector& c) {
  GenerationRequest r;
  for (int t = 0; t < 3 + (i * 7) % 29; ++t) r.prompt.push_back((i * 31 + t * 17) % 256);
  r.max_tokens = 5 + (i * 13) % 40;
  if (i % 3 == 1) r.sampling = sampled(0.8F, 20, static_cast<std::uint32_t>(i), 1.0F);
  if (i % 5 == 2) r.sampling = sampled(1.5F, 0, 99, 0.7F);
  if (i % 4 == 3) r.stop_tokens = {'e', 'q'};
  r.on_event = c.callback();
  return r;
}

void run_until_idle(Engine& engine) {
  for (int guard = 0; engine.step(); ++guard) REQUIRE(guard < 100000);
}

}  // namespace

TEST_CASE("an engine running many requests at once gives each the tokens its prompt makes alone") {
  HostModel model(4, 128);
  Engine engine(model, opts(0));
  Collector c;
  std::vector<std::pair<RequestId, GenerationRequest>> sent;
  for (int i = 0; i < 30; ++i) {
    GenerationRequest r = request_for(i, c);
    const GenerationRequest copy = r;
    const std::optional<RequestId> id = engine.submit(std::move(r));
    REQUIRE(id.has_value());
    sent.emplace_back(*id, copy);
  }
  run_until_idle(engine);
  CHECK(model.most_rows == 4);
  for (const auto& [id, r] : sent) {
    const Received got = c[id];
    CAPTURE(id);
    CHECK(got.tokens == model.alone(r));
    CHECK(got.completion_tokens == static_cast<int>(got.tokens.size()));
    REQUIRE(got.finished.has_value());
    CHECK(got.events_after_finish == 0);
    const bool stopped = got.tokens.size() < static_cast<std::size_t>(r.max_tokens);
    CHECK(*got.finished == (stopped ? FinishReason::stop_token : FinishReason::max_tokens));
  }
  const lazygraph::nn::EngineStats s = engine.stats();
  CHECK(s.finished == 30);
  CHECK(s.running == 0);
  CHECK(s.queued == 0);
  CHECK(s.kv_blocks_used == 0);
  CHECK(s.first_token_count == 30);
  CHECK(engine.pool().sequences() == 0);
  CHECK(s.preemptions == 0);  // 4 slots of 128 positions: the default pool holds them whole
}

TEST_CASE(
    "an engine feeds at most max_prompt_tokens of prompts a step, a longer prompt in parts, and first tokens early") {
  HostModel model(10, 256);  // a slot for each request
  EngineOptions o = opts(0);
  o.max_prompt_tokens = 40;
  Engine engine(model, o);
  Collector c;
  std::vector<std::pair<RequestId, GenerationRequest>> sent;
  std::map<RequestId, int> first_step;  // the step after which each request had its first token
  int stepped = 0;
  // Eight prompts of 15 tokens, then one of 60 (past the budget by itself).
  for (int i = 0; i < 9; ++i) {
    GenerationRequest r;
    const int length = i < 8 ? 15 : 60;
    for (int t = 0; t < length; ++t) r.prompt.push_back((i * 31 + t * 17) % 256);
    r.max_tokens = 6;
    r.on_event = [collect = c.callback(), &first_step, &stepped](const GenerationEvent& e) {
      collect(e);
      if (e.token.has_value()) first_step.emplace(e.id, stepped);
    };
    const GenerationRequest copy = r;
    const std::optional<RequestId> id = engine.submit(std::move(r));
    REQUIRE(id.has_value());
    sent.emplace_back(*id, copy);
  }
  std::vector<long long> fed;   // prompt tokens fed by each step
  std::vector<long long> made;  // tokens made by each step
  for (int guard = 0;; ++guard) {
    REQUIRE(guard < 10000);
    const lazygraph::nn::EngineStats before = engine.stats();
    if (!engine.step()) break;
    fed.push_back(static_cast<long long>(engine.stats().prompt_tokens - before.prompt_tokens));
    made.push_back(static_cast<long long>(engine.stats().generated_tokens - before.generated_tokens));
    ++stepped;
  }
  for (const auto& [id, r] : sent) {
    CAPTURE(id);
    CHECK(c[id].tokens == model.alone(r));
  }
  // Every step feeds the budget's worth while prompts last (a prompt admitted with budget left is fed in part), and
  // no more: 180 prompt tokens in steps of 40, 40, 40, 40, 20.
  REQUIRE(fed.size() >= 5);
  CHECK(std::vector<long long>(fed.begin(), fed.begin() + 5) == std::vector<long long>{40, 40, 40, 40, 20});
  CHECK(std::accumulate(fed.begin(), fed.end(), 0LL) == 8 * 15 + 60);
  // First tokens come out as their prompts are fed: the first two after the first step (10 of the third's 15 tokens
  // were fed with them), the third after the second, the long prompt's after its last part, in the fifth.
  CHECK(first_step[sent[0].first] == 0);
  CHECK(first_step[sent[1].first] == 0);
  CHECK(first_step[sent[2].first] == 1);
  CHECK(first_step[sent[8].first] == 4);
  // While the long prompt was fed in parts (steps 4 and 5), the eight before it each made a token in both, and it
  // made its first in the second.
  CHECK(made[3] == 8);
  CHECK(made[4] == 9);

  EngineOptions bad = opts(0);
  bad.max_prompt_tokens = -1;
  CHECK_THROWS_WITH_AS(Engine(model, bad), doctest::Contains("max_prompt_tokens must be 0 (no limit) or more, not -1"),
                       lazygraph::UsageError);
}

TEST_CASE(
    "prompts past max_prompt_tokens wait in the queue, not in slots, may be cancelled there, and with a paged pool "
    "that runs out every request still gets the tokens it makes alone") {
  // Four prompts of 15 tokens with a budget of 20: two are admitted (the second with 5 tokens of budget left, fed in
  // part), the other two stay queued.
  HostModel model(4, 256);
  EngineOptions o = opts(0);
  o.max_prompt_tokens = 20;
  Engine engine(model, o);
  Collector c;
  std::vector<RequestId> ids;
  for (int i = 0; i < 4; ++i) {
    GenerationRequest r;
    r.prompt.assign(15, 'a' + i);
    r.max_tokens = 3;
    r.on_event = c.callback();
    ids.push_back(*engine.submit(std::move(r)));
  }
  REQUIRE(engine.step());
  CHECK(engine.stats().prompt_tokens == 20);
  CHECK(engine.stats().running == 2);
  CHECK(engine.stats().queued == 2);
  CHECK(engine.stats().kv_blocks_used == 2);  // the waiting prompts hold no blocks
  engine.cancel(ids[3]);
  REQUIRE(engine.step());
  CHECK(c[ids[3]].finished == FinishReason::cancelled);
  CHECK(c[ids[3]].tokens.empty());
  run_until_idle(engine);
  for (int i = 0; i < 3; ++i) CHECK(c[ids[static_cast<std::size_t>(i)]].finished == FinishReason::max_tokens);
  CHECK(engine.stats().kv_blocks_used == 0);

  // A paged model whose pool runs out while prompts wait for the budget: preempted histories queue behind it too.
  PagedHostModel paged(4, 128, 7, 16);
  EngineOptions po = opts(0);
  po.max_prompt_tokens = 20;
  Engine tight(paged, po);
  Collector pc;
  std::vector<std::pair<RequestId, GenerationRequest>> sent;
  for (int i = 0; i < 12; ++i) {
    GenerationRequest r = request_for(i, pc);
    r.max_tokens = 40;
    r.stop_tokens.clear();
    const GenerationRequest copy = r;
    sent.emplace_back(*tight.submit(std::move(r)), copy);
  }
  run_until_idle(tight);
  CHECK(tight.stats().preemptions > 0);
  for (const auto& [id, r] : sent) {
    CAPTURE(id);
    CHECK(pc[id].tokens == paged.alone(r));
  }
  CHECK(tight.pool().free_blocks() == 7);
}

TEST_CASE("an engine whose KV pool runs out preempts the youngest sequence and recomputes it to the same tokens") {
  HostModel model(4, 128);
  Engine engine(model, opts(7));  // 112 positions for 4 sequences that grow to ~70
  Collector c;
  std::vector<std::pair<RequestId, GenerationRequest>> sent;
  for (int i = 0; i < 12; ++i) {
    GenerationRequest r = request_for(i, c);
    r.max_tokens = 40;
    r.stop_tokens.clear();
    const GenerationRequest copy = r;
    sent.emplace_back(*engine.submit(std::move(r)), copy);
  }
  run_until_idle(engine);
  const lazygraph::nn::EngineStats s = engine.stats();
  CHECK(s.preemptions > 0);
  for (const auto& [id, r] : sent) {
    const Received got = c[id];
    CAPTURE(id);
    CHECK(got.tokens == model.alone(r));
    CHECK(got.finished == FinishReason::max_tokens);
  }
  CHECK(s.kv_blocks_used == 0);
  CHECK(engine.pool().free_blocks() == 7);
}

TEST_CASE("an engine over a paged model feeds each sequence through the pool's blocks and returns every block") {
  PagedHostModel model(4, 128, 7, 16);  // 112 positions for 4 sequences that grow to ~70: preemptions
  Engine engine(model, opts(0));
  CHECK(engine.pool().total_blocks() == 7);
  Collector c;
  std::vector<std::pair<RequestId, GenerationRequest>> sent;
  for (int i = 0; i < 12; ++i) {
    GenerationRequest r = request_for(i, c);
    r.max_tokens = 40;
    r.stop_tokens.clear();
    const GenerationRequest copy = r;
    sent.emplace_back(*engine.submit(std::move(r)), copy);
  }
  run_until_idle(engine);
  CHECK(engine.stats().preemptions > 0);
  for (const auto& [id, r] : sent) {
    CAPTURE(id);
    CHECK(c[id].tokens == model.alone(r));
  }
  CHECK(engine.pool().free_blocks() == 7);
  CHECK(engine.pool().sequences() == 0);
}

TEST_CASE("an engine that caches prefixes shares a fed prompt's whole blocks with later prompts that begin with it") {
  PagedHostModel model(4, 128, 40, 16);
  EngineOptions o = opts(0);
  o.cache_prefixes = true;
  Engine engine(model, o);
  Collector c;
  const auto prompt = [](int length, int tail) {
    std::vector<int> p;
    for (int t = 0; t < length; ++t) p.push_back(t < 36 ? (t * 17 + 5) % 256 : (t * 7 + tail) % 256);
    return p;
  };
  std::vector<std::pair<RequestId, GenerationRequest>> sent;
  const auto send = [&](std::vector<int> tokens) {
    GenerationRequest r = req(std::move(tokens), 6, c.callback());
    const GenerationRequest copy = r;
    sent.emplace_back(*engine.submit(std::move(r)), copy);
  };
  send(prompt(40, 1));  // blocks 0 and 1 whole, 8 positions of block 2
  run_until_idle(engine);
  CHECK(engine.stats().cached_prompt_tokens == 0);
  CHECK(engine.stats().kv_blocks_cached == 2);  // the prompt's two whole blocks stay
  CHECK(engine.stats().kv_blocks_used == 0);
  send(prompt(50, 2));  // the first 36 tokens the same: shares two blocks, feeds 18
  send(prompt(33, 1));  // 32 the same and one more: shares two blocks, feeds 1
  send(prompt(40, 1));  // the same prompt: shares two blocks (never the last token's), feeds 8
  send(prompt(20, 1));  // shorter than two blocks: shares one, feeds 4
  run_until_idle(engine);
  for (const auto& [id, r] : sent) {
    CAPTURE(id);
    CHECK(c[id].tokens == model.alone(r));
  }
  const lazygraph::nn::EngineStats stats = engine.stats();
  CHECK(stats.cached_prompt_tokens == 32 + 32 + 32 + 16);
  CHECK(stats.prompt_tokens == 40 + 18 + 1 + 8 + 4);
  CHECK(stats.kv_blocks_used == 0);
  CHECK(stats.kv_blocks_cached > 0);
  CHECK(stats.kv_blocks_cached + engine.pool().free_blocks() == 40);
}

TEST_CASE("a burst of prompts with a common beginning shares it: the budget admits the first alone, the rest after") {
  PagedHostModel model(8, 128, 40, 16);
  EngineOptions o = opts(0);
  o.max_prompt_tokens = 40;
  o.cache_prefixes = true;
  Engine engine(model, o);
  Collector c;
  std::vector<std::pair<RequestId, GenerationRequest>> sent;
  for (int i = 0; i < 6; ++i) {  // 40 tokens each, the first 32 the same
    std::vector<int> tokens;
    for (int t = 0; t < 40; ++t) tokens.push_back(t < 32 ? (t * 19 + 3) % 256 : (t * 5 + i * 41) % 256);
    GenerationRequest r = req(std::move(tokens), 5, c.callback());
    const GenerationRequest copy = r;
    sent.emplace_back(*engine.submit(std::move(r)), copy);
  }
  run_until_idle(engine);
  for (const auto& [id, r] : sent) {
    CAPTURE(id);
    CHECK(c[id].tokens == model.alone(r));
  }
  // The first step feeds the first prompt whole (40 tokens, the budget); the second admits the other five with its
  // two blocks shared, 8 tokens each.
  CHECK(engine.stats().cached_prompt_tokens == 5 * 32);
  CHECK(engine.stats().prompt_tokens == 40 + 5 * 8);
  REQUIRE(model.prompt_tokens_fed.size() >= 2);
  CHECK(model.prompt_tokens_fed[0] == 40);
  CHECK(model.prompt_tokens_fed[1] == 40);
}

TEST_CASE("an engine's cached prefixes give their blocks back before a request waits or a sequence is preempted") {
  PagedHostModel model(2, 128, 8, 16);  // 128 positions in all
  EngineOptions o = opts(0);
  o.cache_prefixes = true;
  Engine engine(model, o);
  Collector c;
  std::vector<std::pair<RequestId, GenerationRequest>> sent;
  for (int i = 0; i < 6; ++i) {  // six different prompts of 33 tokens, one at a time
    std::vector<int> tokens;
    for (int t = 0; t < 33; ++t) tokens.push_back((i * 31 + t * 13) % 256);
    GenerationRequest r = req(std::move(tokens), 3, c.callback());
    const GenerationRequest copy = r;
    sent.emplace_back(*engine.submit(std::move(r)), copy);
    run_until_idle(engine);
  }
  // Each leaves its two whole blocks cached; from the fourth on, admitting one (three blocks) drops the oldest prefix:
  // three prefixes stay, six blocks, and two are free.
  CHECK(engine.stats().kv_blocks_cached == 6);
  CHECK(engine.pool().free_blocks() == 2);
  // Two sequences that need the whole pool between them: the cache gives way, and nobody is preempted.
  for (int i = 0; i < 2; ++i) {
    std::vector<int> tokens(40, 'a' + i);
    GenerationRequest r = req(std::move(tokens), 20, c.callback());
    const GenerationRequest copy = r;
    sent.emplace_back(*engine.submit(std::move(r)), copy);
  }
  run_until_idle(engine);
  for (const auto& [id, r] : sent) {
    CAPTURE(id);
    CHECK(c[id].tokens == model.alone(r));
  }
  CHECK(engine.stats().preemptions == 0);
  CHECK(engine.stats().kv_blocks_used == 0);
  CHECK(engine.stats().kv_blocks_cached + engine.pool().free_blocks() == 8);
}

TEST_CASE("an engine that must drop cached prefixes to admit a request drops the one the request shares last") {
  // M's and then O's 32 tokens leave two whole blocks cached each, one block free. R begins with M's 32 tokens and
  // needs two blocks more: dropping O gives them, and R shares M's, though M's prefix is the least recently used.
  PagedHostModel model(2, 128, 5, 16);
  EngineOptions o = opts(0);
  o.cache_prefixes = true;
  Engine engine(model, o);
  Collector c;
  std::vector<int> m;
  std::vector<int> other;
  for (int t = 0; t < 32; ++t) {
    m.push_back((t * 19 + 7) % 256);
    other.push_back((t * 29 + 3) % 256);
  }
  std::vector<int> r_tokens = m;
  for (int t = 0; t < 20; ++t) r_tokens.push_back((t * 23 + 100) % 256);
  std::vector<std::pair<RequestId, GenerationRequest>> sent;
  for (std::vector<int>* tokens : {&m, &other, &r_tokens}) {
    GenerationRequest r = req(*tokens, 1, c.callback());
    const GenerationRequest copy = r;
    sent.emplace_back(*engine.submit(std::move(r)), copy);
    run_until_idle(engine);
    if (tokens == &other) {
      CHECK(engine.stats().kv_blocks_cached == 4);
      CHECK(engine.pool().free_blocks() == 1);
    }
  }
  CHECK(engine.stats().cached_prompt_tokens == 32);
  for (const auto& [id, r] : sent) {
    CAPTURE(id);
    CHECK(c[id].tokens == model.alone(r));
  }
}

TEST_CASE("a request that cannot be admitted even sharing its prefix waits and drops no cached prefix") {
  // P's 64 tokens leave four blocks cached; X runs in three; one is free. R begins with P's first 32 tokens and needs
  // six blocks: four more if it shares two of P's, which one free block cannot give, and six alone, which the free
  // block and P's four cannot either. So R waits with P cached, and shares it once X is done.
  PagedHostModel model(2, 256, 8, 16);
  EngineOptions o = opts(0);
  o.cache_prefixes = true;
  Engine engine(model, o);
  Collector c;
  std::vector<int> p;
  std::vector<int> x;
  for (int t = 0; t < 64; ++t) p.push_back((t * 19 + 7) % 256);
  for (int t = 0; t < 40; ++t) x.push_back((t * 29 + 3) % 256);
  std::vector<int> r(p.begin(), p.begin() + 32);
  for (int t = 0; t < 64; ++t) r.push_back((t * 23 + 100) % 256);
  const GenerationRequest rp = req(p, 1, c.callback());
  const GenerationRequest rx = req(x, 5, c.callback());
  const GenerationRequest rr = req(r, 1, c.callback());
  const RequestId idp = *engine.submit(rp);
  run_until_idle(engine);
  CHECK(engine.stats().kv_blocks_cached == 4);
  const RequestId idx = *engine.submit(rx);
  CHECK(engine.step());
  const RequestId idr = *engine.submit(rr);
  CHECK(engine.step());
  CHECK(engine.stats().queued == 1);
  CHECK(engine.stats().kv_blocks_cached == 4);
  run_until_idle(engine);
  CHECK(engine.stats().cached_prompt_tokens == 32);
  CHECK(c[idp].tokens == model.alone(rp));
  CHECK(c[idx].tokens == model.alone(rx));
  CHECK(c[idr].tokens == model.alone(rr));
}

TEST_CASE("an engine counts the prompt tokens a cached prefix shares when they are, not when a request is admitted") {
  // A's 32 tokens leave two whole blocks cached; B shares the first and is admitted into the last free block, which
  // A's next position needs at once: B is preempted before it is fed, and shares (or feeds) its prompt later.
  PagedHostModel model(2, 128, 3, 16);
  EngineOptions o = opts(0);
  o.cache_prefixes = true;
  Engine engine(model, o);
  Collector c;
  std::vector<int> tokens;
  for (int t = 0; t < 32; ++t) tokens.push_back((t * 19 + 7) % 256);
  GenerationRequest a = req(tokens, 4, c.callback());
  tokens.resize(16);
  for (int t = 0; t < 10; ++t) tokens.push_back((t * 23 + 100) % 256);
  GenerationRequest b = req(tokens, 2, c.callback());
  const RequestId ida = *engine.submit(a);
  CHECK(engine.step());
  const RequestId idb = *engine.submit(b);
  CHECK(engine.step());
  CHECK(engine.stats().preemptions == 1);
  run_until_idle(engine);
  CHECK(c[ida].tokens == model.alone(a));
  CHECK(c[idb].tokens == model.alone(b));
  // Each prompt token is either fed or shared, once.
  const lazygraph::nn::EngineStats st = engine.stats();
  CHECK(st.prompt_tokens + st.cached_prompt_tokens == 32 + 26);
}

TEST_CASE("an engine drops no cached prefix that would give no block back, nor any when that could not make room") {
  const auto prompt = [](int length, int seed) {
    std::vector<int> p;
    for (int t = 0; t < length; ++t) p.push_back((t * 19 + seed * 41 + 7) % 256);
    return p;
  };
  Collector c;
  SUBCASE("a sequence preempted for a block while the cache's every block is held by sequences") {
    PagedHostModel model(2, 128, 3, 16);  // A's 32 tokens cached; B shares their first block and takes the last free
    EngineOptions o = opts(0);
    o.cache_prefixes = true;
    Engine engine(model, o);
    const GenerationRequest a = req(prompt(32, 0), 4, c.callback());
    std::vector<int> tokens = prompt(16, 0);
    for (int t = 0; t < 10; ++t) tokens.push_back((t * 23 + 100) % 256);
    const GenerationRequest b = req(tokens, 2, c.callback());
    const RequestId ida = *engine.submit(a);
    CHECK(engine.step());
    const RequestId idb = *engine.submit(b);
    CHECK(engine.step());  // A's next position preempts B; the cached prefix, whose blocks A holds, stays
    CHECK(engine.stats().preemptions == 1);
    CHECK(engine.pool().sequences() == 2);  // A and the cached prefix
    run_until_idle(engine);
    CHECK(c[ida].tokens == model.alone(a));
    CHECK(c[idb].tokens == model.alone(b));
    CHECK(engine.stats().cached_prompt_tokens == 16);  // B shares its first block when it returns
  }
  SUBCASE("a request that waits for blocks the cache could not give") {
    PagedHostModel model(2, 128, 4, 16);
    EngineOptions o = opts(0);
    o.cache_prefixes = true;
    Engine engine(model, o);
    const GenerationRequest x = req(prompt(20, 1), 1, c.callback());  // leaves one block cached, only there
    const GenerationRequest a = req(prompt(32, 2), 6, c.callback());  // two blocks cached, held by A, and a third
    const GenerationRequest w = req(prompt(40, 3), 1, c.callback());  // three blocks: waits for A
    const RequestId idx = *engine.submit(x);
    CHECK(engine.step());
    const RequestId ida = *engine.submit(a);
    CHECK(engine.step());
    CHECK(engine.step());
    CHECK(engine.pool().free_blocks() == 0);
    const RequestId idw = *engine.submit(w);
    CHECK(engine.step());  // W needs three blocks; one is free with the cache's: both prefixes stay
    CHECK(engine.stats().queued == 1);
    CHECK(engine.pool().sequences() == 3);
    CHECK(engine.stats().kv_blocks_cached == 1);
    run_until_idle(engine);
    CHECK(c[idx].tokens == model.alone(x));
    CHECK(c[ida].tokens == model.alone(a));
    CHECK(c[idw].tokens == model.alone(w));
    CHECK(engine.stats().kv_blocks_used == 0);
  }
}

TEST_CASE("a prompt past the budget that shares a cached prefix feeds the rest in parts and counts the shared once") {
  // A's 40 tokens leave two blocks (32 tokens) cached. B begins with them and has 50 more: it shares the 32 and feeds
  // 24, 24 and 2 tokens in three steps (the budget), its first token after the last part, while C, running, makes one
  // token a step.
  PagedHostModel model(3, 256, 24, 16);
  EngineOptions o = opts(0);
  o.max_prompt_tokens = 24;
  o.cache_prefixes = true;
  Engine engine(model, o);
  Collector c;
  std::vector<int> a;
  for (int t = 0; t < 40; ++t) a.push_back((t * 19 + 7) % 256);
  std::vector<int> b(a.begin(), a.begin() + 32);
  for (int t = 0; t < 50; ++t) b.push_back((t * 23 + 100) % 256);
  const GenerationRequest ra = req(a, 1, c.callback());
  const GenerationRequest rb = req(b, 2, c.callback());
  const GenerationRequest rc = req(std::vector<int>{5, 6, 7}, 8, c.callback());
  const RequestId ida = *engine.submit(ra);
  run_until_idle(engine);  // 40 tokens: 24, then 16
  const RequestId idc = *engine.submit(rc);
  CHECK(engine.step());  // C fed and its first token
  model.prompt_tokens_fed.clear();
  const RequestId idb = *engine.submit(rb);
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    const std::size_t made_c = c[idc].tokens.size();
    CHECK(engine.step());
    CHECK(c[idc].tokens.size() == made_c + 1);             // C goes on while B's prompt is fed
    CHECK(c[idb].tokens.size() == (step == 2 ? 1U : 0U));  // B's first token after its last part
  }
  CHECK(model.prompt_tokens_fed == std::vector<int>{24, 24, 2});
  run_until_idle(engine);
  CHECK(c[ida].tokens == model.alone(ra));
  CHECK(c[idb].tokens == model.alone(rb));
  CHECK(c[idc].tokens == model.alone(rc));
  const lazygraph::nn::EngineStats st = engine.stats();
  CHECK(st.cached_prompt_tokens == 32);
  CHECK(st.prompt_tokens == 40 + 3 + 50);
}

TEST_CASE(
    "an engine that caches prefixes under random prompts with common beginnings, cancellations, failing steps, a "
    "small pool and a prompt budget gives every request its tokens alone and never writes a shared block") {
  for (std::uint32_t seed = 1; seed <= 16; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    const auto pick = [&](int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng); };
    // 160 to 224 positions in blocks of 16 or 32 for 4 slots of sequences of up to 96 positions: the cache gives way
    // and sequences are preempted, but one alone always fits (so none ends kv_pool).
    const int block_size = seed % 2 == 1 ? 16 : 32;
    const int blocks = pick(10, 14) * 16 / block_size;
    PagedHostModel model(4, 96, blocks, block_size);
    for (int s = 0; s < 400; ++s) {
      if (pick(0, 24) == 0) model.failing_steps.insert(s);
    }
    EngineOptions o = opts(0, block_size);
    o.cache_prefixes = true;
    o.max_prompt_tokens = seed % 3 == 0 ? 0 : pick(1, 60);
    Engine engine(model, o);
    model.pool = &engine.pool();
    Collector c;
    std::vector<std::vector<int>> beginnings(3);
    for (std::vector<int>& b : beginnings) {
      for (int t = 0; t < 64; ++t) b.push_back(pick(0, 255));
    }
    std::vector<std::pair<RequestId, GenerationRequest>> sent;
    for (int round = 0; round < 2000 && (sent.size() < 40 || !engine.idle()); ++round) {
      for (int n = pick(0, 3); n > 0 && sent.size() < 40; --n) {
        const std::vector<int>& b = beginnings[static_cast<std::size_t>(pick(0, 2))];
        std::vector<int> tokens(b.begin(), b.begin() + pick(0, 64));
        for (int t = pick(1, 24); t > 0; --t) tokens.push_back(pick(0, 255));
        GenerationRequest r = req(std::move(tokens), pick(1, 12), c.callback());
        if (pick(0, 3) == 0) r.sampling = sampled(0.9F, 30, static_cast<std::uint32_t>(pick(0, 1000)), 1.0F);
        const GenerationRequest copy = r;
        const std::optional<RequestId> id = engine.submit(std::move(r));
        REQUIRE(id.has_value());
        sent.emplace_back(*id, copy);
      }
      if (!sent.empty() && pick(0, 5) == 0)
        engine.cancel(sent[static_cast<std::size_t>(pick(0, 1000)) % sent.size()].first);
      static_cast<void>(engine.step());
      const lazygraph::nn::EngineStats st = engine.stats();
      REQUIRE(st.kv_blocks_used >= 0);
      REQUIRE(st.kv_blocks_cached >= 0);
    }
    REQUIRE(engine.idle());
    REQUIRE(sent.size() == 40);
    int whole = 0;
    for (const auto& [id, r] : sent) {
      CAPTURE(id);
      const Received got = c[id];
      const std::vector<int> alone = model.alone(r);
      REQUIRE(got.finished.has_value());
      CHECK(got.events_after_finish == 0);
      CHECK(*got.finished != FinishReason::kv_pool);
      if (*got.finished == FinishReason::cancelled || *got.finished == FinishReason::error) {
        CHECK((got.tokens.size() <= alone.size() && std::equal(got.tokens.begin(), got.tokens.end(), alone.begin())));
      } else {
        CHECK(got.tokens == alone);
        ++whole;
      }
    }
    CHECK(whole > 0);
    const lazygraph::nn::EngineStats st = engine.stats();
    CHECK(st.kv_blocks_used == 0);
    CHECK(st.kv_blocks_cached + engine.pool().free_blocks() == blocks);
    CHECK(st.finished == 40);
  }
}

TEST_CASE("an engine over a paged model refuses a pool of another size or block size, naming both") {
  PagedHostModel model(2, 64, 9, 16);
  CHECK_THROWS_WITH_AS(Engine(model, opts(8)),
                       doctest::Contains("the model's paged KV cache holds 9 blocks of 16 positions; EngineOptions "
                                         "asks for 8 blocks of 16 positions"),
                       lazygraph::UsageError);
  CHECK_THROWS_WITH_AS(Engine(model, opts(0, 32)), doctest::Contains("asks for 0 blocks of 32 positions"),
                       lazygraph::UsageError);
  CHECK_NOTHROW(Engine(model, opts(9)));
}

TEST_CASE(
    "a sequence alone that outgrows the whole pool ends with kv_pool, and one that fills the context with "
    "context") {
  HostModel model(2, 64);
  Engine engine(model, opts(2));
  Collector c;
  GenerationRequest r;
  r.prompt.assign(20, 'a');
  r.on_event = c.callback();
  const RequestId id = *engine.submit(r);
  run_until_idle(engine);
  // Positions 0..31 fit two blocks: the prompt's 20, then 12 more fed; position 32 needs a third block.
  CHECK(c[id].tokens.size() == 13);
  CHECK(c[id].finished == FinishReason::kv_pool);

  HostModel small(1, 24);
  Engine full(small, {});
  Collector c2;  // ids start at 1 in each engine
  r.prompt.assign(20, 'b');
  r.on_event = c2.callback();
  const RequestId fills = *full.submit(r);
  run_until_idle(full);
  CHECK(c2[fills].tokens.size() == 5);  // a prompt of 20 in a context of 24 leaves room for 24 - 20 + 1
  CHECK(c2[fills].finished == FinishReason::context);
  CHECK(c2[fills].tokens == small.alone(r));
}

TEST_CASE("an engine's bounded queue refuses submissions when full, and all once closed") {
  HostModel model(1, 64);
  Engine engine(model, opts(0, 16, 2));
  const GenerationRequest r = req({1, 2, 3}, 2);
  CHECK(engine.submit(r).has_value());
  CHECK(engine.submit(r).has_value());
  CHECK_FALSE(engine.submit(r).has_value());
  CHECK(engine.stats().rejected == 1);
  CHECK(engine.stats().queued == 2);
  CHECK(engine.step());  // one enters the slot: room in the queue again
  CHECK(engine.submit(r).has_value());
  engine.close();
  CHECK(engine.closed());
  CHECK_FALSE(engine.submit(r).has_value());
  run_until_idle(engine);  // what was accepted still runs
  CHECK(engine.stats().finished == 3);
  CHECK(engine.idle());
}

TEST_CASE("an engine refuses a request it cannot serve, naming the field") {
  HostModel model(1, 64, 100);
  Engine engine(model, opts(3));
  const auto refusal = [&](GenerationRequest r) -> std::string {
    try {
      static_cast<void>(engine.submit(std::move(r)));
    } catch (const RequestError& e) {
      return e.what();
    }
    return "";
  };
  CHECK(refusal(req({})) == "prompt: must hold at least one token");
  CHECK(refusal(req(std::vector<int>(65, 1))) == "prompt: 65 tokens, more than the context of 64 positions");
  CHECK(refusal(req(std::vector<int>(49, 1))) == "prompt: 49 tokens need 4 KV blocks, more than the pool's 3");
  CHECK(refusal(req({1, 100})) == "prompt[1]: token 100 is outside the vocabulary of 100");
  CHECK(refusal(req({1, -1})) == "prompt[1]: token -1 is outside the vocabulary of 100");
  CHECK(refusal(req({1}, -1)) == "max_tokens: must be 0 (no limit) or more, not -1");
  CHECK(refusal([] {
          GenerationRequest r = req({1});
          r.sampling.temperature = -1.0F;
          return r;
        }())
            .starts_with("sampling: "));
  CHECK(refusal([] {
          GenerationRequest r = req({1});
          r.stop_strings = {"x"};
          return r;
        }())
            .starts_with("stop: stop strings need the engine to have a "
                         "tokenizer"));
  CHECK(engine.stats().submitted == 0);
  CHECK_THROWS_AS(Engine(model, opts(0, 16, 0)), lazygraph::UsageError);
}

TEST_CASE("cancelling ends a queued or running request at the next step and returns its blocks") {
  HostModel model(1, 256);
  Engine engine(model, {});
  Collector c;
  const RequestId running = *engine.submit(req({5, 6, 7}, 0, c.callback()));
  const RequestId queued = *engine.submit(req({8}, 0, c.callback()));
  CHECK(engine.step());
  CHECK(engine.step());
  CHECK(c[running].tokens.size() == 2);
  engine.cancel(running);
  engine.cancel(queued);
  engine.cancel(12345);  // unknown: nothing
  CHECK(engine.step());
  CHECK(c[running].finished == FinishReason::cancelled);
  CHECK(c[running].tokens.size() == 2);
  CHECK(c[queued].finished == FinishReason::cancelled);
  CHECK(c[queued].tokens.empty());
  CHECK(engine.stats().kv_blocks_used == 0);
  CHECK_FALSE(engine.step());

  const RequestId a = *engine.submit(req({1}, 0, c.callback()));
  const RequestId b = *engine.submit(req({2}, 0, c.callback()));
  CHECK(engine.step());
  engine.cancel_all();
  CHECK(engine.step());
  CHECK(c[a].finished == FinishReason::cancelled);
  CHECK(c[b].finished == FinishReason::cancelled);
  CHECK(engine.idle());
  CHECK(engine.pool().used_blocks() == 0);
  CHECK(engine.stats().cancelled == 4);
}

TEST_CASE("an engine with nothing to do waits for work, also once closed, and wakes for a submission") {
  HostModel model(1, 64);
  Engine engine(model, {});
  engine.close();
  const auto start = std::chrono::steady_clock::now();
  engine.wait_for_work(std::chrono::milliseconds(30));
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(25));

  Engine open(model, {});
  std::thread submitter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    static_cast<void>(open.submit(req({1}, 1)));
  });
  const auto before = std::chrono::steady_clock::now();
  open.wait_for_work(std::chrono::seconds(10));
  CHECK(std::chrono::steady_clock::now() - before < std::chrono::seconds(5));
  submitter.join();
  CHECK(open.step());
}

TEST_CASE("a callback that throws cancels its own request only") {
  HostModel model(2, 64);
  Engine engine(model, {});
  Collector c;
  int calls = 0;
  const RequestId bad = *engine.submit(req({1}, 0, [&](const GenerationEvent& e) {
    ++calls;
    if (!e.finished.has_value()) throw std::runtime_error("client gone");
  }));
  const RequestId good = *engine.submit(req({2}, 4, c.callback()));
  run_until_idle(engine);
  CHECK(calls == 2);  // its first token, then its end
  CHECK(c[good].tokens.size() == 4);
  static_cast<void>(bad);
}

TEST_CASE("an engine's text stops before a stop string, as the text of the same tokens made alone") {
  lgtest::Parts parts;
  parts.model = lgtest::bpe(lgtest::byte_level_chars(), {});
  parts.pre_tokenizer = lgtest::kByteLevel;
  parts.decoder = lgtest::kByteLevel;
  const lgtest::Loaded tokenizer(lgtest::json_of(parts));
  HostModel model(2, 128);
  Engine engine(model, {}, *tokenizer);
  Collector c;
  GenerationRequest r = req({'h', 'i'}, 30);
  const std::vector<int> alone = model.alone(r);
  const std::string text = tokenizer->decode(alone);
  REQUIRE(text.size() == 30);
  const std::string stop = text.substr(12, 3);
  const std::string before = text.substr(0, text.find(stop));
  r.stop_strings = {stop};
  r.on_event = c.callback();
  const RequestId stopped = *engine.submit(r);
  const RequestId plain = *engine.submit(req({'h', 'i'}, 30, c.callback()));
  run_until_idle(engine);
  CHECK(c[stopped].text == before);
  CHECK(c[stopped].finished == FinishReason::stop_string);
  CHECK(c[plain].text == text);
  CHECK(c[plain].finished == FinishReason::max_tokens);
}

TEST_CASE("requests submitted from several threads while another steps all complete as alone") {
  HostModel model(4, 96);
  Engine engine(model, opts(12, 16, 200));
  Collector c;
  std::mutex sent_mutex;
  std::vector<std::pair<RequestId, GenerationRequest>> sent;
  std::atomic<int> submitting = 4;
  std::thread stepper([&] {
    while (submitting > 0 || !engine.idle()) {
      if (!engine.step()) engine.wait_for_work(std::chrono::milliseconds(5));
    }
  });
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        GenerationRequest r = request_for(t * 20 + i, c);
        const GenerationRequest copy = r;
        const std::optional<RequestId> id = engine.submit(std::move(r));
        const std::lock_guard<std::mutex> lock(sent_mutex);
        if (id.has_value()) sent.emplace_back(*id, copy);
      }
      --submitting;
    });
  }
  for (std::thread& t : clients) t.join();
  stepper.join();
  CHECK(sent.size() == 80);
  for (const auto& [id, r] : sent) {
    CAPTURE(id);
    CHECK(c[id].tokens == model.alone(r));
  }
  CHECK(engine.stats().finished == 80);
  CHECK(engine.pool().used_blocks() == 0);
}

namespace {

/// A host model whose step can be made to throw, or to return a token outside the vocabulary.
class FailingModel final : public StepModel {
 public:
  [[nodiscard]] int slots() const override { return inner.slots(); }
  [[nodiscard]] int context() const override { return inner.context(); }
  [[nodiscard]] int vocab() const override { return inner.vocab(); }
  void step(std::span<const StepRow> rows, std::span<int> next) override {
    if (fail) throw std::runtime_error("device lost");
    inner.step(rows, next);
    if (bad_token) next[0] = inner.vocab();
  }
  HostModel inner{2, 64};
  bool fail = false;
  bool bad_token = false;
};

}  // namespace

TEST_CASE("a model step that throws ends that step's requests with its message, and the engine goes on") {
  FailingModel model;
  Engine engine(model, {});
  Collector c;
  std::string error;
  const RequestId a = *engine.submit(req({1, 2}, 0, c.callback()));
  const RequestId b = *engine.submit(req({3}, 0, [&](const GenerationEvent& e) {
    if (e.finished == FinishReason::error) error = e.error;
  }));
  CHECK(engine.step());
  model.fail = true;
  CHECK(engine.step());
  CHECK(c[a].finished == FinishReason::error);
  CHECK(c[a].tokens.size() == 1);
  CHECK(error == "device lost");
  static_cast<void>(b);
  CHECK(engine.idle());
  CHECK(engine.pool().used_blocks() == 0);

  model.fail = false;
  model.bad_token = true;
  const RequestId d = *engine.submit(req({4}, 0, c.callback()));
  CHECK(engine.step());
  CHECK(c[d].finished == FinishReason::error);
  CHECK(c[d].tokens.empty());
  model.bad_token = false;
  const RequestId e = *engine.submit(req({5}, 3, c.callback()));
  run_until_idle(engine);
  CHECK(c[e].tokens.size() == 3);
}

namespace {

/// A host model whose every step takes at least `pause` (it sleeps), so that the time in it is known from below.
class PausingModel final : public StepModel {
 public:
  [[nodiscard]] int slots() const override { return inner.slots(); }
  [[nodiscard]] int context() const override { return inner.context(); }
  [[nodiscard]] int vocab() const override { return inner.vocab(); }
  void step(std::span<const StepRow> rows, std::span<int> next) override {
    std::this_thread::sleep_for(pause);
    inner.step(rows, next);
  }
  HostModel inner{2, 64};
  std::chrono::milliseconds pause{3};
};

}  // namespace

TEST_CASE("an engine's stats time its steps and, within them, the model's: the rest is its own host work") {
  PausingModel model;
  Engine engine(model, {});
  CHECK(engine.stats().step_seconds_sum == 0.0);
  CHECK(engine.stats().model_seconds_sum == 0.0);
  Collector c;
  const RequestId a = *engine.submit(req({1, 2}, 4, c.callback()));
  run_until_idle(engine);
  CHECK(c[a].tokens.size() == 4);
  const EngineStats s = engine.stats();
  const double pause = std::chrono::duration<double>(model.pause).count();
  CHECK(s.steps >= 4);
  CHECK(s.model_seconds_sum >= static_cast<double>(s.steps) * pause);
  CHECK(s.step_seconds_sum >= s.model_seconds_sum);
  // A step without rows (nothing to do) adds no time.
  CHECK_FALSE(engine.step());
  CHECK(engine.stats().step_seconds_sum == s.step_seconds_sum);
  // Callbacks run inside the step: their time counts as the engine's, not the model's.
  const RequestId b = *engine.submit(req({3}, 2, [&](const GenerationEvent& e) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    c.callback()(e);
  }));
  run_until_idle(engine);
  CHECK(c[b].tokens.size() == 2);
  const EngineStats t = engine.stats();
  const std::uint64_t more = t.steps - s.steps;
  CHECK(more >= 2);
  CHECK((t.step_seconds_sum - s.step_seconds_sum) - (t.model_seconds_sum - s.model_seconds_sum) >= 0.002 * 2);
}
