// A mixture of experts' layer of a prefill chunk on tensor cores (nn/prefill_moe.hpp): its memory and its tiles'
// bound on the host, and which decoders take it; on the GPU, its five kernels (route, group, the grouped gate/up and
// down products, combine) against float64 on random inputs, with experts of several tiles and sizes that are not
// whole tiles, and the decode step's smaller tiles of the same products against them bit for bit and against float64;
// a decoder's prefill through it against the float64 reference and against the decode step; with int8 or fp8 experts,
// against the same decoder on its dequantized experts, bit for bit.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/moe_routing.hpp>
#include <lazygraph/nn/prefill.hpp>
#include <lazygraph/nn/prefill_moe.hpp>
#include <lazygraph/nn/reference.hpp>

#include "common/gpu.hpp"
#include "common/nn.hpp"
#include "common/quantized_weights.hpp"
#include "common/small_decoder.hpp"

using namespace lazygraph;
using namespace lazygraph::nn;

namespace {

/// Qwen3-30B-A3B's mixture: 128 experts, top 8, width 768, d 2048.
DecoderConfig qwen3_moe_shape() {
  DecoderConfig c;
  c.d = 2048;
  c.heads = 32;
  c.kv_heads = 4;
  c.moe = {128, 8, 768, true};
  return c;
}

/// The small MoE decoder of the prefill tests: d 128 in 2 heads of 64 (the flash-attention kernels' head_dim), one kv
/// head, q/k norms, 8 experts of 64, top 2 renormalized (Qwen3-MoE's block). Seed 82 with the prompt of prompt_of
/// gives routes whose top 2 stand clear of the third by at least 0.034 in float64 over its 20 tokens, in fp16 and
/// bf16 weights (DecoderReference::route_margin, checked below): far above what the GPU's rounding moves.
DecoderConfig prefill_moe_decoder() {
  DecoderConfig c = lgtest::small_decoder(1, 1, 82);
  c.heads = 2;
  c.qk_norm = true;
  c.moe = {8, 2, 64, true};
  return c;
}

/// The prompt of the seed search above: `n` tokens of a linear congruential sequence from `seed`.
std::vector<int> prompt_of(int n, unsigned seed, int vocab) {
  std::vector<int> out;
  unsigned x = seed * 2654435761U;
  for (int p = 0; p < n; ++p) {
    x = x * 1664525U + 1013904223U;
    out.push_back(static_cast<int>((x >> 8U) % static_cast<unsigned>(vocab)));
  }
  return out;
}

}  // namespace

TEST_CASE("a mixture of experts' prefill buffers take what prefill_moe.hpp says, and nothing without experts") {
  const DecoderConfig qwen3 = qwen3_moe_shape();
  // 2048 rows: 16384 pairs; logits 0.5 MiB, pairs 0.25 MiB, act 24 MiB in bf16, fp32 products 128 MiB, tiles 6 KiB.
  const std::size_t bytes = BasicPrefillMoeBuffers<bfloat16>::bytes(qwen3, 2048);
  CHECK(bytes == 2048 * 128 * 2 + 16384 * 16 + (1 + 4 * (16384 / 64 + 128)) * 4 + std::size_t{16384} * 768 * 2 +
                     std::size_t{16384} * 2048 * 4);
  CHECK(bytes / (1 << 20) == 152);
  DecoderConfig dense = qwen3;
  dense.moe = {};
  CHECK(BasicPrefillMoeBuffers<half>::bytes(dense, 2048) == 0);
  // The MLP's gate and up (3 ffn: the stacked product's 2 and the activation) are not allocated beside experts.
  CHECK(BasicPrefillBuffers<half>::bytes(qwen3, 64) ==
        BasicPrefillBuffers<half>::bytes(dense, 64) - std::size_t{64} * 3 * static_cast<std::size_t>(qwen3.ffn) * 2 +
            BasicPrefillMoeBuffers<half>::bytes(qwen3, 64));
}

TEST_CASE("the grouped products' grid holds every tiling of a chunk's pairs") {
  // Each expert's pairs in tiles of 64: at most pairs / 64 full tiles and one partial tile per expert with pairs.
  CHECK(moe_prefill_tiles(16, 8) == 8);       // 16 pairs: at most 8 experts, one partial tile each
  CHECK(moe_prefill_tiles(128, 128) == 130);  // 2 full tiles are possible, or 128 partial ones
  CHECK(moe_prefill_tiles(16384, 128) == 384);
}

TEST_CASE("prefill on tensor cores takes a mixture of experts, but for a router it cannot store 16-byte aligned") {
  DecoderConfig c = prefill_moe_decoder();
  std::string why;
  (void)prefill_on_tensor_cores(c, {9, 0}, &why);
  CHECK(why.find("experts") == std::string::npos);  // refused at most for want of cuBLASLt here
  c.moe = {12, 2, 64, true};
  CHECK_FALSE(prefill_on_tensor_cores(c, {9, 0}, &why));
  CHECK(why.find("moe.experts (12) is not a multiple of 8") != std::string::npos);
}

TEST_SUITE("gpu") {
  TEST_CASE_TEMPLATE("a mixture of experts' prefill kernels compute the chunk's rows' experts as float64 does", T, half,
                     bfloat16) {
    Stream& s = lgtest::stream();
    if (s.device().compute_capability().major < 8) {
      MESSAGE("skipped: the grouped products need tensor cores of sm_80 or newer");
      return;
    }
    const BasicKernels<T> k(lgtest::nn_kernels());
    int max_rows = 256;
    int rows = 200;
    int experts = 4;
    int top_k = 2;
    bool normalize = true;
    int d = 200;     // not whole tiles of 64 columns nor of 32 in the reduction
    int width = 72;  // likewise
    SUBCASE("4 experts, top 2 renormalized: about 100 rows an expert, two tiles each") {}
    SUBCASE("16 experts, top 4 as the softmax gives them, a chunk of 37 rows in a bucket of 64") {
      max_rows = 64;
      rows = 37;
      experts = 16;
      top_k = 4;
      normalize = false;
      d = 128;
      width = 64;
    }
    CAPTURE(experts);
    const auto count = [](int a, int b) { return static_cast<std::size_t>(a) * static_cast<std::size_t>(b); };
    const auto random = [](std::size_t n, float scale) {
      std::vector<T> out;
      for (const float f : lgtest::random_floats(n)) out.push_back(T::from_float(scale * f));
      return out;
    };
    const std::vector<T> logits = random(count(max_rows, experts), 3.0F);
    const std::vector<T> h = random(count(max_rows, d), 1.0F);
    const std::vector<T> w1 = random(count(experts * width, d), 0.2F);
    const std::vector<T> w3 = random(count(experts * width, d), 0.2F);
    const std::vector<T> w2 = random(count(experts * d, width), 0.2F);
    const std::vector<T> x = random(count(max_rows, d), 1.0F);
    const int pairs = max_rows * top_k;
    const int tiles = moe_prefill_tiles(pairs, experts);
    const auto dlogits = lgtest::to_device(s, logits);
    const auto dh = lgtest::to_device(s, h);
    const auto dw1 = lgtest::to_device(s, w1);
    const auto dw3 = lgtest::to_device(s, w3);
    const auto dw2 = lgtest::to_device(s, w2);
    auto dx = lgtest::to_device(s, x);
    const auto chunk = lgtest::to_device(s, std::vector<int>{5, rows, 0});
    DeviceBuffer<int> ids(s.device(), count(max_rows, top_k));
    DeviceBuffer<float> weights(s.device(), ids.size());
    DeviceBuffer<int> order(s.device(), ids.size());
    DeviceBuffer<int> slot_of(s.device(), ids.size());
    DeviceBuffer<int> tile_list(s.device(), 1 + count(4, tiles));
    DeviceBuffer<T> act(s.device(), count(pairs, width));
    DeviceBuffer<float> partial(s.device(), count(pairs, d));

    const DeviceSpan<const int> real_rows = chunk.cview().subspan(1, 1);  // the chunk's real rows
    k.moe_prefill_route.launch(s, k.moe_prefill_route_config(max_rows), dlogits.cview(), real_rows, ids.view(),
                               weights.view(), experts, top_k, normalize ? 1 : 0, max_rows);
    k.moe_prefill_group.launch(s, LaunchConfig{{1, 1, 1}, {1024, 1, 1}, 0}, ids.cview(), real_rows, order.view(),
                               slot_of.view(), tile_list.view(), experts, top_k, max_rows, tiles);
    k.moe_prefill_gate_up.launch(s, k.moe_prefill_gate_up_config(width, tiles), dh.cview(), dw1.cview(), dw3.cview(),
                                 order.cview(), tile_list.cview(), act.view(), width, d, top_k, tiles);
    k.moe_prefill_down.launch(s, k.moe_prefill_down_config(d, tiles), act.cview(), dw2.cview(), tile_list.cview(),
                              partial.view(), d, width, tiles);
    k.moe_prefill_combine.launch(s, grid_for(count(max_rows, d) / 8, 256), partial.cview(), slot_of.cview(),
                                 weights.cview(), dx.view(), real_rows, d, top_k, max_rows);
    const std::vector<int> got_ids = lgtest::to_host(s, ids.cview());
    const std::vector<float> got_weights = lgtest::to_host(s, weights.cview());
    const std::vector<int> got_order = lgtest::to_host(s, order.cview());
    const std::vector<int> got_slot = lgtest::to_host(s, slot_of.cview());
    const std::vector<int> got_tiles = lgtest::to_host(s, tile_list.cview());
    const std::vector<T> got_x = lgtest::to_host(s, dx.cview());

    // Routes: route_token's on the same logits (the fp32 softmax differs from float64 far below these gaps).
    std::vector<int> per_expert(static_cast<std::size_t>(experts));
    int routed = 0;
    double weight_err = 0;
    for (int r = 0; r < rows; ++r) {
      std::vector<double> row(static_cast<std::size_t>(experts));
      for (std::size_t e = 0; e < row.size(); ++e) row[e] = logits[count(r, experts) + e].to_float();
      const std::vector<ExpertChoice> want = route_token(row, top_k, normalize);
      for (int slot = 0; slot < top_k; ++slot) {
        const std::size_t j = count(r, top_k) + static_cast<std::size_t>(slot);
        routed += got_ids[j] == want[static_cast<std::size_t>(slot)].expert ? 1 : 0;
        weight_err = std::max(weight_err, std::abs(got_weights[j] - want[static_cast<std::size_t>(slot)].weight));
        ++per_expert[static_cast<std::size_t>(got_ids[j])];
      }
    }
    CHECK(routed == rows * top_k);
    CHECK(weight_err < (std::same_as<T, half> ? 1e-3 : 8e-3));

    // The grouping: each real pair at one position, experts in ascending order, tiles of up to 64 of one expert.
    int want_tiles = 0;
    for (const int n : per_expert) want_tiles += (n + kMoePrefillTileRows - 1) / kMoePrefillTileRows;
    REQUIRE(got_tiles[0] == want_tiles);
    std::vector<int> covered(static_cast<std::size_t>(rows * top_k));
    for (int t = 0; t < want_tiles; ++t) {
      const int e = got_tiles[1 + 4 * static_cast<std::size_t>(t)];
      const int first = got_tiles[2 + 4 * static_cast<std::size_t>(t)];
      const int n = got_tiles[3 + 4 * static_cast<std::size_t>(t)];
      REQUIRE(n >= 1);
      REQUIRE(n <= kMoePrefillTileRows);
      for (int p = first; p < first + n; ++p) {
        const int j = got_order[static_cast<std::size_t>(p)];
        REQUIRE(j >= 0);
        REQUIRE(j < rows * top_k);
        CHECK(got_ids[static_cast<std::size_t>(j)] == e);
        CHECK(got_slot[static_cast<std::size_t>(j)] == p);
        ++covered[static_cast<std::size_t>(j)];
      }
    }
    CHECK(std::all_of(covered.begin(), covered.end(), [](int c) { return c == 1; }));
    CHECK(*std::max_element(per_expert.begin(), per_expert.end()) >
          (experts == 4 ? kMoePrefillTileRows : 0));  // the first case has experts of two tiles

    // x against float64 with the GPU's routes; the padding rows keep their bits.
    double err = 0;
    double top = 0;
    std::size_t padding_changed = 0;
    for (int r = 0; r < max_rows; ++r) {
      const std::size_t row = count(r, d);
      if (r >= rows) {
        for (int i = 0; i < d; ++i) padding_changed += got_x[row + i].bits != x[row + i].bits ? 1 : 0;
        continue;
      }
      std::vector<double> want(static_cast<std::size_t>(d));
      for (int i = 0; i < d; ++i) want[static_cast<std::size_t>(i)] = x[row + i].to_float();
      for (int slot = 0; slot < top_k; ++slot) {
        const std::size_t j = count(r, top_k) + static_cast<std::size_t>(slot);
        const int e = got_ids[j];
        std::vector<double> a(static_cast<std::size_t>(width));
        for (int i = 0; i < width; ++i) {
          double g = 0;
          double u = 0;
          const std::size_t wrow = count(e * width + i, d);
          for (int c = 0; c < d; ++c) {
            g += static_cast<double>(w1[wrow + c].to_float()) * h[row + c].to_float();
            u += static_cast<double>(w3[wrow + c].to_float()) * h[row + c].to_float();
          }
          a[static_cast<std::size_t>(i)] = g / (1 + std::exp(-g)) * u;
        }
        for (int i = 0; i < d; ++i) {
          double y = 0;
          const std::size_t wrow = count(e * d + i, width);
          for (int c = 0; c < width; ++c)
            y += static_cast<double>(w2[wrow + c].to_float()) * a[static_cast<std::size_t>(c)];
          want[static_cast<std::size_t>(i)] += got_weights[j] * y;
        }
      }
      for (int i = 0; i < d; ++i) {
        err = std::max(err, std::abs(got_x[row + i].to_float() - want[static_cast<std::size_t>(i)]));
        top = std::max(top, std::abs(want[static_cast<std::size_t>(i)]));
      }
    }
    CHECK(padding_changed == 0);
    CAPTURE(err / top);
    CHECK(err / top < (std::same_as<T, half> ? 3e-3 : 2e-2));
  }

  TEST_CASE_TEMPLATE("the decode step's grouped products give the prefill ones' bits in their smaller tiles", T, half,
                     bfloat16) {
    Stream& s = lgtest::stream();
    if (s.device().compute_capability().major < 8) {
      MESSAGE("skipped: the grouped products need tensor cores of sm_80 or newer");
      return;
    }
    const BasicKernels<T> k(lgtest::nn_kernels());
    int rows = 8;
    int experts = 16;
    int top_k = 4;
    int d = 200;     // not whole blocks of 64 output columns nor of 64 in the reduction
    int width = 72;  // likewise
    SUBCASE("8 rows, 16 experts, top 4: tiles of 1 to 8 positions") {}
    SUBCASE("2 rows, 128 experts, top 8 (Qwen3-30B-A3B's router), width 768, d 256") {
      rows = 2;
      experts = 128;
      top_k = 8;
      d = 256;
      width = 768;
    }
    SUBCASE("16 rows, 2 experts, top 1: tiles of up to 16 positions, the decode shape's most") {
      rows = 16;
      experts = 2;
      top_k = 1;
    }
    CAPTURE(rows);
    CAPTURE(experts);
    const auto count = [](int a, int b) { return static_cast<std::size_t>(a) * static_cast<std::size_t>(b); };
    const auto random = [](std::size_t n, float scale) {
      std::vector<T> out;
      for (const float f : lgtest::random_floats(n)) out.push_back(T::from_float(scale * f));
      return out;
    };
    const std::vector<T> logits = random(count(rows, experts), 3.0F);
    const std::vector<T> h = random(count(rows, d), 1.0F);
    const std::vector<T> w1 = random(count(experts * width, d), 0.2F);
    const std::vector<T> w3 = random(count(experts * width, d), 0.2F);
    const std::vector<T> w2 = random(count(experts * d, width), 0.2F);
    const int pairs = rows * top_k;
    const int tiles = moe_prefill_tiles(pairs, experts);
    const auto dlogits = lgtest::to_device(s, logits);
    const auto dh = lgtest::to_device(s, h);
    const auto dw1 = lgtest::to_device(s, w1);
    const auto dw3 = lgtest::to_device(s, w3);
    const auto dw2 = lgtest::to_device(s, w2);
    const auto real_rows = lgtest::to_device(s, std::vector<int>{rows});
    DeviceBuffer<int> ids(s.device(), count(rows, top_k));
    DeviceBuffer<float> weights(s.device(), ids.size());
    DeviceBuffer<int> order(s.device(), ids.size());
    DeviceBuffer<int> slot_of(s.device(), ids.size());
    DeviceBuffer<int> tile_list(s.device(), 1 + count(4, tiles));
    DeviceBuffer<T> act_prefill(s.device(), count(pairs, width));
    DeviceBuffer<T> act_decode(s.device(), act_prefill.size());
    DeviceBuffer<float> partial_prefill(s.device(), count(pairs, d));
    DeviceBuffer<float> partial_decode(s.device(), partial_prefill.size());

    k.moe_prefill_route.launch(s, k.moe_prefill_route_config(rows), dlogits.cview(), real_rows.cview(), ids.view(),
                               weights.view(), experts, top_k, 1, rows);
    k.moe_prefill_group.launch(s, LaunchConfig{{1, 1, 1}, {1024, 1, 1}, 0}, ids.cview(), real_rows.cview(),
                               order.view(), slot_of.view(), tile_list.view(), experts, top_k, rows, tiles);
    k.moe_prefill_gate_up.launch(s, k.moe_prefill_gate_up_config(width, tiles), dh.cview(), dw1.cview(), dw3.cview(),
                                 order.cview(), tile_list.cview(), act_prefill.view(), width, d, top_k, tiles);
    k.moe_prefill_down.launch(s, k.moe_prefill_down_config(d, tiles), act_prefill.cview(), dw2.cview(),
                              tile_list.cview(), partial_prefill.view(), d, width, tiles);
    k.moe_decode_gate_up.launch(s, k.moe_decode_gate_up_config(width, tiles), dh.cview(), dw1.cview(), dw3.cview(),
                                order.cview(), tile_list.cview(), act_decode.view(), width, d, top_k, tiles);
    k.moe_decode_down.launch(s, k.moe_decode_down_config(d, tiles), act_prefill.cview(), dw2.cview(), tile_list.cview(),
                             partial_decode.view(), d, width, tiles);
    const std::vector<int> got_ids = lgtest::to_host(s, ids.cview());
    const std::vector<int> got_order = lgtest::to_host(s, order.cview());
    const std::vector<int> got_tiles = lgtest::to_host(s, tile_list.cview());
    const std::vector<T> act = lgtest::to_host(s, act_decode.cview());
    const std::vector<T> act_want = lgtest::to_host(s, act_prefill.cview());
    const std::vector<float> partial = lgtest::to_host(s, partial_decode.cview());
    const std::vector<float> partial_want = lgtest::to_host(s, partial_prefill.cview());

    int largest_tile = 0;
    for (int t = 0; t < got_tiles[0]; ++t) largest_tile = std::max(largest_tile, got_tiles[3 + 4 * std::size_t(t)]);
    CHECK(largest_tile <= kMoeDecodeTileRows);
    CHECK(largest_tile >= (rows == 16 ? 8 : 1));  // two experts share 16 rows: one of them has at least 8
    std::size_t act_differ = 0;
    for (std::size_t i = 0; i < act.size(); ++i) act_differ += act[i].bits != act_want[i].bits ? 1 : 0;
    std::size_t partial_differ = 0;
    for (std::size_t i = 0; i < partial.size(); ++i) {
      partial_differ += std::bit_cast<std::uint32_t>(partial[i]) != std::bit_cast<std::uint32_t>(partial_want[i]);
    }
    CHECK(act_differ == 0);
    CHECK(partial_differ == 0);

    // Each position against float64: its pair's row of h through its expert's W1 and W3, then W2 over its act.
    double act_err = 0;
    double act_top = 0;
    double partial_err = 0;
    double partial_top = 0;
    for (int p = 0; p < pairs; ++p) {
      const int j = got_order[static_cast<std::size_t>(p)];
      const int e = got_ids[static_cast<std::size_t>(j)];
      const std::size_t hrow = count(j / top_k, d);
      for (int i = 0; i < width; ++i) {
        double g = 0;
        double u = 0;
        const std::size_t wrow = count(e * width + i, d);
        for (int c = 0; c < d; ++c) {
          g += static_cast<double>(w1[wrow + c].to_float()) * h[hrow + c].to_float();
          u += static_cast<double>(w3[wrow + c].to_float()) * h[hrow + c].to_float();
        }
        const double want = g / (1 + std::exp(-g)) * u;
        act_err = std::max(act_err, std::abs(act[count(p, width) + i].to_float() - want));
        act_top = std::max(act_top, std::abs(want));
      }
      for (int i = 0; i < d; ++i) {
        double y = 0;
        const std::size_t wrow = count(e * d + i, width);
        for (int c = 0; c < width; ++c)
          y += static_cast<double>(w2[wrow + c].to_float()) * act[count(p, width) + c].to_float();
        partial_err = std::max(partial_err, std::abs(partial[count(p, d) + i] - y));
        partial_top = std::max(partial_top, std::abs(y));
      }
    }
    CAPTURE(act_err / act_top);
    CAPTURE(partial_err / partial_top);
    CHECK(act_err / act_top < (std::same_as<T, half> ? 2e-3 : 1e-2));
    CHECK(partial_err / partial_top < 1e-3);  // fp32 sums (the tensor cores') of products of T values
  }

  TEST_CASE_TEMPLATE(
      "a mixture-of-experts decoder's prefill on tensor cores matches float64 and continues as its decode step does", T,
      half, bfloat16) {
    DecoderConfig config = prefill_moe_decoder();
    SUBCASE("the whole prompt in one chunk of a bucket of 32 rows") {}
    SUBCASE("chunks of 16 rows: one on tensor cores, the rest of 4 through the decode step's graphs") {
      config.prefill_chunk = 16;
    }
    CAPTURE(config.prefill_chunk);
    BasicDecoder<T> fast(lgtest::stream(), lgtest::nn_kernels(), config);
    if (const std::string why = fast.prefill_fallback_reason(); !why.empty()) {
      MESSAGE("skipped: prefill does not run on tensor cores here: " << why);
      return;
    }
    config.prefill_chunk = 0;
    BasicDecoder<T> steps(lgtest::stream(), lgtest::nn_kernels(), config);
    const DType dtype = std::same_as<T, half> ? DType::f16 : DType::bf16;
    const double bound = std::same_as<T, half> ? 1e-2 : 4e-2;
    DecoderReference reference(config, dtype);
    const std::vector<int> prompt = prompt_of(20, config.seed, config.vocab);
    std::vector<double> want;
    for (std::size_t p = 0; p < prompt.size(); ++p) want = reference.step(prompt[p], static_cast<int>(p));
    CHECK(reference.route_margin() > 0.03);  // else a route may part from float64's for want of a clear margin

    const int first = fast.prefill(prompt);
    const std::vector<double> got = lgtest::widened(fast.logits());
    CHECK(nn::relative_error(got, want) < bound);
    CHECK(first == steps.prefill(prompt));
    CHECK(nn::relative_error(got, lgtest::widened(steps.logits())) < bound);
    // Decode on from the caches each prefill wrote: the same tokens, logits within rounding.
    int token = first;
    for (int p = 20; p < 26; ++p) {
      CAPTURE(p);
      const int a = fast.forward({token, p});
      const int b = steps.forward({token, p});
      std::vector<double> want_step = lgtest::widened(steps.logits());
      CHECK(nn::relative_error(lgtest::widened(fast.logits()), want_step) < bound);
      // The same token where the step's best stands clear of the second by more than the paths' rounding.
      double largest = 0;
      for (const double v : want_step) largest = std::max(largest, std::abs(v));
      std::partial_sort(want_step.begin(), want_step.begin() + 2, want_step.end(), std::greater<>());
      if (want_step[0] - want_step[1] > 2 * bound * largest) CHECK(a == b);
      token = b;
    }
  }

  TEST_CASE_TEMPLATE(
      "a mixture-of-experts decoder's prompts with int8 or fp8 experts on tensor cores give the bits of the same "
      "decoder on its dequantized experts",
      T, half, bfloat16) {
    // Quantized experts are dequantized into the chunk's scratch (prefill_expert_scratch), each value rounded once to
    // T, then run the dense experts' grouped products: the same values as the twin's experts, dequantized on the host
    // and rounded to T, so the same logits, bits and all, whatever the routes.
    DecoderConfig c = prefill_moe_decoder();
    c.moe.expert_width = 128;  // fp8's blocks of 128 x 128
    QuantizedFormat format{WeightFormat::int8_channel, 0, false, scale_type_of<T>};
    SUBCASE("int8 per channel") {}
    SUBCASE("fp8 in blocks of 128 x 128") { format = {WeightFormat::fp8_block, 128, false, scale_type_of<T>}; }
    CAPTURE(format_name(format));
    DecoderQuantization q;
    q.mlp = format;
    Stream& s = lgtest::stream();
    const BasicKernels<T> k(lgtest::nn_kernels());
    BasicDecoderWeights<T> quantized = quantize_decoder_weights(s, BasicDecoderWeights<T>::generate(s, k, c), c, q);
    REQUIRE(quantized.quantized());
    CHECK(prefill_expert_scratch(quantized) == 2 * std::size_t{8} * 128 * 128);
    CHECK(prefill_min_rows(quantized) == kPrefillQuantizedExpertRows);
    BasicDecoderWeights<T> twin = lgtest::with_dequantized_experts(s, k, c, quantized);
    CHECK(prefill_expert_scratch(twin) == 0);
    CHECK(prefill_min_rows(twin) == kPrefillMinRows);
    BasicDecoder<T> a(s, lgtest::nn_kernels(), c, std::move(quantized));
    BasicDecoder<T> b(s, lgtest::nn_kernels(), c, std::move(twin));
    if (const std::string why = a.prefill_fallback_reason(); !why.empty()) {
      MESSAGE("skipped: prefill does not run on tensor cores here: " << why);
      return;
    }
    REQUIRE(b.prefill_fallback_reason().empty());
    const std::vector<int> prompt = prompt_of(37, c.seed, c.vocab);  // one chunk on tensor cores
    CHECK(a.prefill(prompt) == b.prefill(prompt));
    const auto same_bits = [](const std::vector<T>& x, const std::vector<T>& y) {
      return std::equal(x.begin(), x.end(), y.begin(), y.end(), [](T u, T v) { return u.bits == v.bits; });
    };
    CHECK(same_bits(a.logits(), b.logits()));
    // And the keys and values the chunk wrote for the steps after it.
    const auto host = [&](DeviceSpan<T> d) {
      std::vector<T> out(d.size());
      copy(std::span<T>(out), d.as_const()).sync_on(s);
      return out;
    };
    CHECK(same_bits(host(a.k_cache()), host(b.k_cache())));
    CHECK(same_bits(host(a.v_cache()), host(b.v_cache())));
    // Below kPrefillQuantizedExpertRows rows a prompt of quantized experts goes through the decode step's graphs (where
    // dequantizing every expert would cost more): the bits of a decoder that never prefills on tensor cores.
    DecoderConfig stepped = c;
    stepped.prefill_chunk = 0;
    BasicDecoder<T> steps(s, lgtest::nn_kernels(), stepped,
                          quantize_decoder_weights(s, BasicDecoderWeights<T>::generate(s, k, c), c, q));
    const std::vector<int> short_prompt(prompt.begin(), prompt.begin() + 20);
    a.reset();
    CHECK(a.prefill(short_prompt) == steps.prefill(short_prompt));
    CHECK(same_bits(a.logits(), steps.logits()));
    // On a paged cache a packed chunk of two prompts (20 + 17 tokens) dequantizes once for both: each part's logits
    // within rounding of its prompt prefilled alone (through the step's graphs, below packed_min_tokens).
    DecoderConfig paged = c;
    paged.max_batch = 2;
    paged.kv_block_size = 16;
    paged.kv_blocks = 2 * c.context / 16;
    BasicDecoder<T> p(s, lgtest::nn_kernels(), paged,
                      quantize_decoder_weights(s, BasicDecoderWeights<T>::generate(s, k, c), c, q));
    CHECK(p.packed_prefill_rows() > 0);
    CHECK(p.packed_min_tokens() == kPrefillQuantizedExpertRows);
    const int width = p.table_width();
    std::vector<int> tables(static_cast<std::size_t>(2 * width));
    for (std::size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<int>(i);
    const auto table_of = [&](int slot) {
      return std::span<const int>(tables).subspan(static_cast<std::size_t>(slot * width),
                                                  static_cast<std::size_t>(width));
    };
    const std::vector<int> second(prompt.begin() + 20, prompt.end());
    const std::vector<PromptPart> parts{{.tokens = short_prompt, .start = 0, .table = table_of(0), .slot = 0},
                                        {.tokens = second, .start = 0, .table = table_of(1), .slot = 1}};
    (void)p.prefill_packed(parts);
    const std::vector<std::vector<T>> packed{p.logits(0), p.logits(1)};
    const double bound = std::same_as<T, half> ? 1e-2 : 4e-2;
    for (int i = 0; i < 2; ++i) {
      CAPTURE(i);
      (void)p.prefill(i == 0 ? short_prompt : second, 0, table_of(i), i);
      CHECK(nn::relative_error(lgtest::widened(packed[static_cast<std::size_t>(i)]), lgtest::widened(p.logits())) <
            bound);
    }
  }
}
