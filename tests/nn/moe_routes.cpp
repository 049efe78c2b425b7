// The routes a mixture-of-experts decoder's step chose (DecoderConfig::record_routes, Decoder::last_routes): on the
// host, the config's and the accessor's refusals and where each layer's routes lie; on the GPU, the recorded routes
// against route_token's float64 choices wherever their margin is clear, and recording that changes no logit.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <string>
#include <vector>

#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/moe_routes.hpp>
#include <lazygraph/nn/reference.hpp>

#include "common/gpu.hpp"
#include "common/nn.hpp"
#include "common/small_decoder.hpp"

using namespace lazygraph;
using namespace lazygraph::nn;

namespace {

/// The small test decoder with a mixture of `shape` in every layer, recording its routes.
DecoderConfig recording(MoeShape shape, std::uint32_t seed = 1234, int max_batch = 1) {
  DecoderConfig c = lgtest::small_decoder(2, max_batch, seed);
  c.moe = shape;
  c.record_routes = true;
  return c;
}

}  // namespace

TEST_CASE("record_routes is refused by name on a decoder without a mixture of experts") {
  DecoderConfig dense = lgtest::small_decoder(2);
  dense.record_routes = true;
  CHECK_THROWS_WITH_AS(dense.validate(), doctest::Contains("record_routes keeps a mixture of experts' routes"),
                       UsageError);
  CHECK_NOTHROW(recording({8, 2, 64, true}).validate());
}

TEST_CASE("last_routes refuses a decoder without experts, one that does not record, and one that has not stepped") {
  CHECK_THROWS_WITH_AS(check_last_routes(lgtest::small_decoder(2), 1), doctest::Contains("no mixture of experts"),
                       UsageError);
  DecoderConfig off = recording({8, 2, 64, true});
  off.record_routes = false;
  CHECK_THROWS_WITH_AS(check_last_routes(off, 1), doctest::Contains("DecoderConfig::record_routes"), UsageError);
  CHECK_THROWS_WITH_AS(check_last_routes(recording({8, 2, 64, true}), 0), doctest::Contains("no step has run yet"),
                       UsageError);
  CHECK_NOTHROW(check_last_routes(recording({8, 2, 64, true}), 8));
}

TEST_CASE("each layer's routes lie in a slice of their own when recorded, and last_routes takes the step's rows") {
  const DecoderConfig c = recording({16, 3, 64, true});  // 2 layers, top 3
  const std::size_t slice = kMaxRows * 3;
  CHECK(route_buffer_size(c) == 2 * slice);
  CHECK(route_offset(c, 0) == 0);
  CHECK(route_offset(c, 1) == slice);
  DecoderConfig off = c;
  off.record_routes = false;
  CHECK(route_buffer_size(off) == slice);
  CHECK(route_offset(off, 1) == 0);  // every layer overwrites the same slice
  CHECK(route_buffer_size(lgtest::small_decoder(2)) == 0);

  // Buffers as the step leaves them: layer l, row r, rank k holds expert (l * 5 + r + k) % 16, weight l + r / 10 + k
  // / 100; the rows past the step's hold what an earlier, larger step wrote (here -1).
  std::vector<int> ids(route_buffer_size(c), -1);
  std::vector<float> weights(ids.size(), -1.0F);
  const int rows = 2;
  for (int l = 0; l < 2; ++l) {
    for (int r = 0; r < rows; ++r) {
      for (int k = 0; k < 3; ++k) {
        const std::size_t at = route_offset(c, l) + static_cast<std::size_t>(r * 3 + k);
        ids[at] = (l * 5 + r + k) % 16;
        weights[at] = static_cast<float>(l) + static_cast<float>(r) / 10 + static_cast<float>(k) / 100;
      }
    }
  }
  const MoeRoutes routes = gather_routes(c, rows, ids, weights);
  CHECK(routes.layers == 2);
  CHECK(routes.rows == 2);
  CHECK(routes.top_k == 3);
  REQUIRE(routes.experts.size() == 12);
  CHECK(std::none_of(routes.experts.begin(), routes.experts.end(), [](int e) { return e < 0; }));
  CHECK(routes.expert(1, 1, 2) == 8);
  CHECK(routes.weight(1, 1, 2) == doctest::Approx(1.12));
  CHECK(routes.expert(0, 0, 0) == 0);
  CHECK(routes.distinct_experts(0) == std::vector<int>{0, 1, 2, 3});
  CHECK(routes.distinct_experts(1) == std::vector<int>{5, 6, 7, 8});
  CHECK_THROWS_WITH_AS((void)routes.expert(2, 0, 0), doctest::Contains("layer 2 is outside [0, 2)"), UsageError);
  CHECK_THROWS_WITH_AS((void)routes.weight(0, 2, 0), doctest::Contains("row 2 is outside [0, 2)"), UsageError);
  CHECK_THROWS_WITH_AS((void)routes.expert(0, 0, 3), doctest::Contains("rank k 3 is outside [0, 3)"), UsageError);
  CHECK_THROWS_WITH_AS((void)routes.distinct_experts(-1), doctest::Contains("layer -1"), UsageError);

  CHECK_THROWS_WITH_AS((void)gather_routes(c, rows, std::span<const int>(ids).first(slice), weights),
                       doctest::Contains("route buffers of 24 ids and 48 weights, the config needs 48"), UsageError);
  CHECK_THROWS_WITH_AS((void)gather_routes(c, 9, ids, weights), doctest::Contains("9 rows, at most 8"), UsageError);
  CHECK_THROWS_WITH_AS((void)gather_routes(off, rows, ids, weights), doctest::Contains("record_routes"), UsageError);
}

TEST_SUITE("gpu") {
  TEST_CASE_TEMPLATE("a decoder's recorded routes are route_token's float64 choices wherever their margin is clear", T,
                     half, bfloat16) {
    // The seeds of moe_decoder.cpp's float64 test, whose routes stand clear of the rest over these steps (margin at
    // least 0.05); a layer's route is compared only where its own margin exceeds clear_margin, far above the GPU's
    // rounding of a router logit (about 1e-3 in fp16, 5e-3 in bf16).
    constexpr double clear_margin = 0.02;
    DecoderConfig config;
    SUBCASE("Qwen3-MoE's: 8 experts, top 2 renormalized, q/k norms") {
      config = recording({8, 2, 64, true}, 41);
      config.qk_norm = true;
    }
    SUBCASE("OLMoE's: 16 experts, top 4 as the softmax gives them") { config = recording({16, 4, 32, false}, 1124); }
    CAPTURE(config.moe.experts);
    const DType dtype = std::same_as<T, half> ? DType::f16 : DType::bf16;
    const double weight_bound = std::same_as<T, half> ? 1e-2 : 4e-2;
    BasicDecoder<T> decoder(lgtest::stream(), lgtest::nn_kernels(), config);
    DecoderConfig plain_config = config;
    plain_config.record_routes = false;
    BasicDecoder<T> plain(lgtest::stream(), lgtest::nn_kernels(), plain_config);
    CHECK_THROWS_WITH_AS((void)decoder.last_routes(), doctest::Contains("no step has run yet"), UsageError);
    DecoderReference reference(config, dtype);
    int token = 7;
    int compared = 0;
    for (int p = 0; p < 10; ++p) {
      CAPTURE(p);
      const int next = decoder.forward({token, p});
      CHECK(plain.forward({token, p}) == next);
      const std::vector<T> logits = decoder.logits();
      const std::vector<T> plain_logits = plain.logits();
      CHECK(std::equal(logits.begin(), logits.end(), plain_logits.begin(), plain_logits.end(),
                       [](T a, T b) { return a.bits == b.bits; }));  // recording moves no bit
      (void)reference.step(token, p);
      const MoeRoutes routes = decoder.last_routes();
      REQUIRE(routes.layers == config.layers);
      REQUIRE(routes.rows == 1);
      REQUIRE(routes.top_k == config.moe.experts_per_token);
      for (int l = 0; l < config.layers; ++l) {
        CAPTURE(l);
        const auto layer = static_cast<std::size_t>(l);
        if (reference.last_route_margins()[layer] <= clear_margin) continue;
        ++compared;
        std::vector<ExpertChoice> want = reference.last_routes()[layer];
        std::vector<ExpertChoice> got;
        for (int k = 0; k < routes.top_k; ++k) got.push_back({routes.expert(l, 0, k), routes.weight(l, 0, k)});
        const auto by_expert = [](const ExpertChoice& a, const ExpertChoice& b) { return a.expert < b.expert; };
        std::sort(want.begin(), want.end(), by_expert);
        std::sort(got.begin(), got.end(), by_expert);
        for (std::size_t k = 0; k < want.size(); ++k) {
          CHECK(got[k].expert == want[k].expert);
          CHECK(std::abs(got[k].weight - want[k].weight) < weight_bound);
        }
      }
      token = next;
    }
    CHECK(compared >= 15);  // of the 20 (step, layer) routes, most are clear

    // A batch's routes: row r's are what forward gives its sequence alone, bit for bit (the same kernels per row).
    DecoderConfig batched_config = config;
    batched_config.max_batch = 3;
    BasicDecoder<T> batched(lgtest::stream(), lgtest::nn_kernels(), batched_config);
    const std::vector<TokenAt> steps{{3, 0}, {100, 0}, {7, 0}};
    (void)batched.forward_batch(steps);
    const MoeRoutes rows = batched.last_routes();
    REQUIRE(rows.rows == 3);
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      (void)decoder.forward(steps[static_cast<std::size_t>(r)]);
      const MoeRoutes alone = decoder.last_routes();
      for (int l = 0; l < config.layers; ++l) {
        for (int k = 0; k < rows.top_k; ++k) {
          CHECK(rows.expert(l, r, k) == alone.expert(l, 0, k));
          CHECK(rows.weight(l, r, k) == alone.weight(l, 0, k));
        }
      }
    }
    // generate's routes are its last step's: one row.
    (void)batched.generate(5, 3);
    CHECK(batched.last_routes().rows == 1);
  }

  TEST_CASE("last_routes refuses a decoder that does not record its routes") {
    DecoderConfig c = lgtest::small_decoder(2, 1, 41);
    c.moe = {8, 2, 64, true};
    Decoder decoder(lgtest::stream(), lgtest::nn_kernels(), c);
    (void)decoder.forward({7, 0});
    CHECK_THROWS_WITH_AS((void)decoder.last_routes(), doctest::Contains("record_routes"), UsageError);
  }
}
