// Tests of lazygraph::nn::DecoderStepModel: requests through nn::Engine over a decoder's batch steps give each the
// tokens its prompt makes alone through prefill and generate (gpu suite); misuse refused (gpu suite, as it needs a
// decoder); over a paged decoder, with prompts through the step graphs and on tensor cores, and with prefixes cached.
#include <doctest/doctest.h>

#include <lazygraph/driver/error.hpp>
#include <lazygraph/nn/decoder_step_model.hpp>
#include <lazygraph/nn/engine.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "common/gpu.hpp"
#include "common/nn.hpp"
#include "common/small_decoder.hpp"

namespace nn = lazygraph::nn;

TEST_CASE("a paged step's plan packs prompts up to 8 parts and the chunk's tokens, and lets one-token rows ride") {
  using Rows = std::vector<std::size_t>;
  using Positions = std::vector<int>;
  const std::vector<int> buckets{16, 32, 64, 128};
  // Prompts of 40, 30 and 50 tokens (120: bucket 128) and two rows of one token, which ride (122: still 128).
  nn::PagedStepPlan plan = nn::plan_paged_step(Rows{40, 1, 30, 50, 1}, Positions(5, 0), 128, buckets);
  REQUIRE(plan.chunks.size() == 1);
  CHECK(plan.chunks[0] == Rows{0, 2, 3, 1, 4});
  CHECK(plan.alone.empty());
  CHECK(plan.batch.empty());
  // 126 + 3 riders would take the chunk to 129 rows, past the chunk: the riders run as a batch.
  plan = nn::plan_paged_step(Rows{100, 26, 1, 1, 1}, Positions(5, 0), 128, buckets);
  CHECK(plan.chunks == std::vector<Rows>{{0, 1}});
  CHECK(plan.batch == Rows{2, 3, 4});
  // 30 + 3 riders would move the chunk from the bucket of 32 to 64: a batch too.
  plan = nn::plan_paged_step(Rows{30, 1, 1, 1}, Positions(4, 0), 128, buckets);
  CHECK(plan.chunks == std::vector<Rows>{{0}});
  CHECK(plan.batch == Rows{1, 2, 3});
  // A chunk closes at the chunk's tokens (60 + 70 > 128) and at 8 parts; a prompt longer than a chunk runs alone.
  plan = nn::plan_paged_step(Rows{60, 70, 200, 2, 2, 2, 2, 2, 2, 2, 2, 2}, Positions(12, 0), 128, buckets);
  CHECK(plan.chunks == std::vector<Rows>{{0}, {1, 3, 4, 5, 6, 7, 8, 9}, {10, 11}});
  CHECK(plan.alone == Rows{2});
  CHECK(plan.batch.empty());
  // Riders join only the last chunk, and only all of them: 9 parts would be too many.
  plan = nn::plan_paged_step(Rows{5, 5, 5, 5, 5, 5, 5, 1, 1}, Positions(9, 0), 128, buckets);
  CHECK(plan.chunks == std::vector<Rows>{{0, 1, 2, 3, 4, 5, 6}});
  CHECK(plan.batch == Rows{7, 8});
  // A row of one token at position kRiderMaxPosition or beyond keeps the riders out: its attention would be one tile.
  plan = nn::plan_paged_step(Rows{40, 1, 1}, Positions{0, 100, nn::kRiderMaxPosition}, 128, buckets);
  CHECK(plan.chunks == std::vector<Rows>{{0}});
  CHECK(plan.batch == Rows{1, 2});
  plan = nn::plan_paged_step(Rows{40, 1, 1}, Positions{0, 100, nn::kRiderMaxPosition - 1}, 128, buckets);
  CHECK(plan.chunks == std::vector<Rows>{{0, 1, 2}});
  CHECK_THROWS_AS((void)nn::plan_paged_step(Rows{40, 1}, Positions{0}, 128, buckets), lazygraph::UsageError);
  // The fewest tokens a chunk is worth (quantized experts: 33): a chunk of 5 + 20 + 1 rider tokens is not made, its
  // prompts run alone and its rider in the batch, all in row order; one of 40 is.
  plan = nn::plan_paged_step(Rows{5, 1, 20}, Positions(3, 0), 128, buckets, 33);
  CHECK(plan.chunks.empty());
  CHECK(plan.alone == Rows{0, 2});
  CHECK(plan.batch == Rows{1});
  plan = nn::plan_paged_step(Rows{20, 20, 1}, Positions(3, 0), 128, buckets, 33);
  CHECK(plan.chunks == std::vector<Rows>{{0, 1, 2}});
  CHECK(plan.alone.empty());
  // No packed chunks (a decoder whose prompts do not run on tensor cores): every prompt alone.
  plan = nn::plan_paged_step(Rows{5, 1, 300}, Positions(3, 0), 0, {});
  CHECK(plan.chunks.empty());
  CHECK(plan.alone == Rows{0, 2});
  CHECK(plan.batch == Rows{1});
}

TEST_SUITE("gpu") {
  TEST_CASE("requests through the engine over a decoder's batch steps make the tokens of each prompt alone") {
    // 4 slots, 11 requests of prompts of 1 to 15 tokens (below the 16 rows of the tensor-core prefill, so both runs
    // take the step path) and different limits: requests enter and leave slots between steps.
    const nn::DecoderConfig c = lgtest::small_decoder(2, 4, 77);
    nn::Decoder decoder(lgtest::stream(), lgtest::nn_kernels(), c);
    std::map<nn::RequestId, std::vector<int>> made;
    std::map<nn::RequestId, nn::FinishReason> why;
    std::vector<std::pair<nn::RequestId, nn::GenerationRequest>> sent;
    {
      nn::DecoderStepModel model(decoder);
      nn::Engine engine(model, {});
      for (int i = 0; i < 11; ++i) {
        nn::GenerationRequest r;
        for (int t = 0; t <= (i * 5) % 15; ++t) r.prompt.push_back((i * 97 + t * 31) % c.vocab);
        r.max_tokens = 3 + (i * 7) % 20;
        r.on_event = [&](const nn::GenerationEvent& e) {
          if (e.token.has_value()) made[e.id].push_back(*e.token);
          if (e.finished.has_value()) why[e.id] = *e.finished;
        };
        const nn::GenerationRequest copy = r;
        const std::optional<nn::RequestId> id = engine.submit(std::move(r));
        REQUIRE(id.has_value());
        sent.emplace_back(*id, copy);
      }
      while (engine.step()) {
      }
      CHECK(engine.pool().used_blocks() == 0);
      CHECK(engine.stats().preemptions == 0);
    }
    for (const auto& [id, r] : sent) {
      CAPTURE(id);
      const int first = decoder.prefill(r.prompt, 0, 0);
      std::vector<int> alone = {first};
      if (r.max_tokens > 1) {
        const std::vector<int> rest = decoder.generate(first, r.max_tokens - 1, -1, static_cast<int>(r.prompt.size()));
        alone.insert(alone.end(), rest.begin(), rest.end());
      }
      CHECK(made[id] == alone);
      CHECK(why[id] == nn::FinishReason::max_tokens);
    }
  }

  TEST_CASE("a decoder step model samples each row with its own rule, as pick_token on the row's logits") {
    const nn::DecoderConfig c = lgtest::small_decoder(2, 2, 78);
    nn::Decoder decoder(lgtest::stream(), lgtest::nn_kernels(), c);
    nn::DecoderStepModel model(decoder);
    const std::vector<int> prompt = {5, 6, 7};
    nn::Sampling hot;
    hot.temperature = 1.0F;
    hot.seed = 3;
    std::vector<nn::StepRow> rows = {{.slot = 1, .position = 0, .tokens = prompt, .sampling = hot, .blocks = {}}};
    std::vector<int> next(1);
    model.step(rows, next);
    std::vector<float> logits;
    for (const lazygraph::half x : decoder.logits(0)) logits.push_back(x.to_float());
    CHECK(next[0] == nn::pick_token(logits, hot, 2));
    // Then one token in slot 1 beside a greedy row in slot 0: a batch of two.
    const std::vector<int> one = {next[0]};
    const std::vector<int> first = {9};
    rows = {{.slot = 1, .position = 3, .tokens = one, .sampling = hot, .blocks = {}},
            {.slot = 0, .position = 0, .tokens = first, .sampling = {}, .blocks = {}}};
    next.assign(2, -1);
    model.step(rows, next);
    logits.clear();
    for (const lazygraph::half x : decoder.logits(1)) logits.push_back(x.to_float());
    CHECK(next[0] == nn::pick_token(logits, hot, 3));
    logits.clear();
    for (const lazygraph::half x : decoder.logits(0)) logits.push_back(x.to_float());
    CHECK(next[1] == nn::pick_token(logits, {}, 0));
    rows = {{.slot = 2, .position = 0, .tokens = first, .sampling = {}, .blocks = {}}};
    next.assign(1, -1);
    CHECK_THROWS_WITH_AS(model.step(rows, next), doctest::Contains("slot 2 is outside [0, 2)"), lazygraph::UsageError);
  }

  TEST_CASE_TEMPLATE(
      "requests through the engine over a paged decoder make each prompt's tokens and return every block", T,
      lazygraph::half, lazygraph::bfloat16) {
    // The engine's pool is the decoder's: 10 blocks of 16 for 4 slots of sequences that grow to 31 to 53 positions, so
    // sequences are preempted and recomputed through prefill into new blocks. The reference: the contiguous decoder
    // of the same weights, each prompt alone (prefill, then generate).
    nn::DecoderConfig c = lgtest::small_decoder(2, 4, 79);
    c.prefill_chunk = 0;
    nn::DecoderConfig pc = c;
    pc.kv_block_size = 16;
    pc.kv_blocks = 10;
    nn::BasicDecoder<T> reference(lgtest::stream(), lgtest::nn_kernels(), c);
    nn::BasicDecoder<T> paged(lgtest::stream(), lgtest::nn_kernels(), pc);
    std::map<nn::RequestId, std::vector<int>> made;
    std::vector<std::pair<nn::RequestId, nn::GenerationRequest>> sent;
    std::uint64_t preemptions = 0;
    {
      nn::BasicDecoderStepModel<T> model(paged);
      nn::Engine engine(model, {});
      CHECK(engine.pool().total_blocks() == 10);
      for (int i = 0; i < 9; ++i) {
        nn::GenerationRequest r;
        for (int t = 0; t <= (i * 5) % 15; ++t) r.prompt.push_back((i * 89 + t * 37) % c.vocab);
        r.max_tokens = 30 + (i * 7) % 9;
        r.on_event = [&](const nn::GenerationEvent& e) {
          if (e.token.has_value()) made[e.id].push_back(*e.token);
        };
        const nn::GenerationRequest copy = r;
        const std::optional<nn::RequestId> id = engine.submit(std::move(r));
        REQUIRE(id.has_value());
        sent.emplace_back(*id, copy);
      }
      while (engine.step()) {
      }
      CHECK(engine.pool().used_blocks() == 0);
      CHECK(engine.pool().sequences() == 0);
      preemptions = engine.stats().preemptions;
    }
    CHECK(preemptions > 0);
    for (const auto& [id, r] : sent) {
      CAPTURE(id);
      const int first = reference.prefill(r.prompt, 0, 0);
      std::vector<int> alone = {first};
      const std::vector<int> rest = reference.generate(first, r.max_tokens - 1, -1, static_cast<int>(r.prompt.size()));
      alone.insert(alone.end(), rest.begin(), rest.end());
      CHECK(made[id] == alone);
    }
  }

  TEST_CASE_TEMPLATE(
      "requests through the engine over a paged decoder that caches prefixes share whole blocks and make each "
      "prompt's tokens alone",
      T, lazygraph::half, lazygraph::bfloat16) {
    // A first prompt of 40 tokens leaves its two whole blocks cached; five later prompts begin with its first 36
    // tokens (one is the same prompt) and are admitted with those blocks shared, their first row at position 32 (16
    // for the one of 20 tokens). The reference: the contiguous decoder of the same weights, each prompt alone.
    nn::DecoderConfig c = lgtest::small_decoder(2, 4, 89);
    c.prefill_chunk = 0;
    nn::DecoderConfig pc = c;
    pc.kv_block_size = 16;
    pc.kv_blocks = 40;
    nn::BasicDecoder<T> reference(lgtest::stream(), lgtest::nn_kernels(), c);
    nn::BasicDecoder<T> paged(lgtest::stream(), lgtest::nn_kernels(), pc);
    const auto prompt = [&](int length, int tail) {
      std::vector<int> p;
      for (int t = 0; t < length; ++t) p.push_back(t < 36 ? (t * 37 + 11) % c.vocab : (t * 53 + tail) % c.vocab);
      return p;
    };
    std::map<nn::RequestId, std::vector<int>> made;
    std::vector<std::pair<nn::RequestId, nn::GenerationRequest>> sent;
    nn::EngineStats stats;
    {
      nn::BasicDecoderStepModel<T> model(paged);
      nn::Engine engine(model, {.cache_prefixes = true});
      const auto send = [&](std::vector<int> tokens) {
        nn::GenerationRequest r;
        r.prompt = std::move(tokens);
        r.max_tokens = 9;
        r.on_event = [&](const nn::GenerationEvent& e) {
          if (e.token.has_value()) made[e.id].push_back(*e.token);
        };
        const nn::GenerationRequest copy = r;
        const std::optional<nn::RequestId> id = engine.submit(std::move(r));
        REQUIRE(id.has_value());
        sent.emplace_back(*id, copy);
      };
      send(prompt(40, 1));
      while (engine.step()) {
      }
      for (const auto& [length, tail] :
           {std::pair{50, 2}, std::pair{33, 1}, std::pair{40, 1}, std::pair{20, 1}, std::pair{47, 3}}) {
        send(prompt(length, tail));
      }
      while (engine.step()) {
      }
      stats = engine.stats();
    }
    CHECK(stats.cached_prompt_tokens == 32 + 32 + 32 + 16 + 32);
    CHECK(stats.kv_blocks_used == 0);
    CHECK(stats.kv_blocks_cached > 0);
    for (const auto& [id, r] : sent) {
      CAPTURE(id);
      const int first = reference.prefill(r.prompt, 0, 0);
      std::vector<int> alone = {first};
      const std::vector<int> rest = reference.generate(first, r.max_tokens - 1, -1, static_cast<int>(r.prompt.size()));
      alone.insert(alone.end(), rest.begin(), rest.end());
      CHECK(made[id] == alone);
    }
  }

  TEST_CASE_TEMPLATE(
      "requests through the engine over a paged decoder with prompts on tensor cores make each prompt's tokens and "
      "return every block",
      T, lazygraph::half, lazygraph::bfloat16) {
    // head_dim 64 and prefill_chunk 32: prompts of 16 to 45 tokens run on tensor cores through the sequences' blocks.
    // A pool that holds every sequence: each request's tokens are the contiguous decoder's of the same prefill_chunk,
    // the prompt alone (prefill, then generate). A pool of 10 blocks: sequences are preempted and recomputed on tensor
    // cores (other roundings than the steps that made their tokens, so only the counts are compared), and every block
    // comes back.
    if (lgtest::device().compute_capability().major < 8) {
      MESSAGE("skipped: prefill on tensor cores needs compute capability 8.0 or newer");
      return;
    }
    nn::DecoderConfig c = lgtest::small_decoder(2, 4, 83);
    c.d = 256;  // 4 heads of 64
    c.context = 128;
    c.prefill_chunk = 32;
    nn::BasicDecoder<T> reference(lgtest::stream(), lgtest::nn_kernels(), c);
    for (const int blocks : {32, 10}) {
      CAPTURE(blocks);
      nn::DecoderConfig pc = c;
      pc.kv_block_size = 16;
      pc.kv_blocks = blocks;
      nn::BasicDecoder<T> paged(lgtest::stream(), lgtest::nn_kernels(), pc);
      REQUIRE_MESSAGE(paged.prefill_fallback_reason().empty(), paged.prefill_fallback_reason());
      std::map<nn::RequestId, std::vector<int>> made;
      std::vector<std::pair<nn::RequestId, nn::GenerationRequest>> sent;
      std::uint64_t preemptions = 0;
      {
        nn::BasicDecoderStepModel<T> model(paged);
        nn::Engine engine(model, {});
        for (int i = 0; i < 7; ++i) {
          nn::GenerationRequest r;
          for (int t = 0; t < 16 + (i * 11) % 30; ++t) r.prompt.push_back((i * 97 + t * 31) % c.vocab);
          r.max_tokens = 12 + (i * 5) % 9;
          r.on_event = [&](const nn::GenerationEvent& e) {
            if (e.token.has_value()) made[e.id].push_back(*e.token);
          };
          const nn::GenerationRequest copy = r;
          const std::optional<nn::RequestId> id = engine.submit(std::move(r));
          REQUIRE(id.has_value());
          sent.emplace_back(*id, copy);
        }
        while (engine.step()) {
        }
        CHECK(engine.pool().used_blocks() == 0);
        CHECK(engine.pool().sequences() == 0);
        preemptions = engine.stats().preemptions;
      }
      if (blocks == 32) {
        CHECK(preemptions == 0);
      } else {
        CHECK(preemptions > 0);
      }
      for (const auto& [id, r] : sent) {
        CAPTURE(id);
        REQUIRE(made[id].size() == static_cast<std::size_t>(r.max_tokens));
        if (preemptions > 0) continue;
        const int first = reference.prefill(r.prompt, 0, 0);
        std::vector<int> alone = {first};
        const std::vector<int> rest =
            reference.generate(first, r.max_tokens - 1, -1, static_cast<int>(r.prompt.size()));
        alone.insert(alone.end(), rest.begin(), rest.end());
        CHECK(made[id] == alone);
      }
    }
  }
}
