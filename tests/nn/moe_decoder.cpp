// A decoder whose layers are mixtures of experts (DecoderConfig::moe): its config's refusals and its tensors on the
// host (and those of OLMoE's q/k norms over the whole projection); on the GPU, its step against the float64 reference
// (Qwen3-MoE's, OLMoE's and Mixtral's routing and blocks), and its batches, prefill and generate against one sequence
// at a time, bit for bit. Quantized experts (the mlp class): their stacks' layouts on the host; on the GPU, a decoder
// with int8 or fp8 experts against the same decoder on its dequantized experts, and the device quantizer's stacks
// against the host's, byte for byte.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <string>
#include <vector>

#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/decoder_quantization.hpp>
#include <lazygraph/nn/decoder_rank.hpp>
#include <lazygraph/nn/decoder_tensors.hpp>
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

/// The small test decoder with a mixture of `shape` in every layer.
DecoderConfig moe_decoder(MoeShape shape, std::uint32_t seed = 1234, int max_batch = 1) {
  DecoderConfig c = lgtest::small_decoder(2, max_batch, seed);
  c.moe = shape;
  return c;
}

void check_invalid(const DecoderConfig& c, const std::string& fragment) {
  CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains(fragment.c_str()), UsageError);
}

}  // namespace

TEST_CASE("a mixture of experts' decoder config is refused by name where its kernels or a backend cannot run it") {
  CHECK_NOTHROW(moe_decoder({8, 2, 64, true}).validate());
  CHECK_NOTHROW(moe_decoder({1024, 16, 8, false}).validate());
  check_invalid(moe_decoder({8, 9, 64, true}), "moe.experts_per_token (9) must be 1 to 16 and at most the 8 experts");
  check_invalid(moe_decoder({32, 17, 64, true}), "moe.experts_per_token (17)");
  check_invalid(moe_decoder({8, 0, 64, true}), "moe.experts_per_token (0)");
  check_invalid(moe_decoder({2048, 2, 64, true}), "moe.experts (2048) must be at most 1024");
  check_invalid(moe_decoder({8, 2, 60, true}), "moe.expert_width (60) must be a positive multiple of 8");
  check_invalid(moe_decoder({-1, 2, 64, true}), "moe.experts (-1) must be 0 (a dense MLP) or positive");
  DecoderConfig geglu = moe_decoder({8, 2, 64, true});
  geglu.activation = GateActivation::gelu_tanh;
  check_invalid(geglu, "a mixture of experts' experts are SwiGLU");
  DecoderConfig post = moe_decoder({8, 2, 64, true});
  post.post_norms = true;
  check_invalid(post, "a mixture of experts has no post-norm");
  DecoderConfig persistent = moe_decoder({8, 2, 64, true});
  persistent.backend = DecoderBackend::persistent;
  check_invalid(persistent, "the persistent backend has no tiles for a mixture of experts");
  // Tensor parallelism cuts each expert's width: shares of a multiple of 8, of whole tiles where quantized.
  CHECK_NOTHROW(check_tensor_split(moe_decoder({8, 2, 64, true}), 2));
  CHECK_THROWS_WITH_AS(check_tensor_split(moe_decoder({8, 2, 72, true}), 2),
                       doctest::Contains("moe.expert_width 72 does not split into shares of a multiple of 8"),
                       UsageError);
  DecoderQuantization int8_experts;
  int8_experts.mlp = QuantizedFormat{.kind = WeightFormat::int8_channel};
  CHECK_NOTHROW(check_quantized_split(moe_decoder({8, 2, 64, true}), int8_experts, 2));
  CHECK_THROWS_WITH_AS(
      check_quantized_split(moe_decoder({8, 2, 48, true}), int8_experts, 2),
      doctest::Contains("down_proj.weight: int8 needs the input dimension (24) to be a multiple of 32"),
      UsageError);  // each rank's 24 columns of an expert's W2
}

TEST_CASE("a tensor-parallel rank holds the router whole and its share of every expert's width") {
  const DecoderConfig c = moe_decoder({4, 2, 64, true});
  const DecoderConfig s = shard_config(c, 2);
  CHECK(s.moe.expert_width == 32);
  CHECK(s.moe.experts == 4);
  CHECK(s.moe.experts_per_token == 2);
  int experts = 0;
  for (const DecoderTensor& t : decoder_tensors(c)) {
    CAPTURE(t.name);
    const TensorShard share = tensor_shard(t, c, 1, 2);
    switch (t.role) {
      case DecoderTensorRole::moe_router:
        CHECK((!share.columns && share.first == 0 && share.count == 4));
        break;
      case DecoderTensorRole::moe_w1:
      case DecoderTensorRole::moe_w3:
        CHECK((!share.columns && share.first == 32 && share.count == 32));
        ++experts;
        break;
      case DecoderTensorRole::moe_w2:
        CHECK((share.columns && share.first == 32 && share.count == 32));
        ++experts;
        break;
      default:
        break;
    }
  }
  CHECK(experts == 3 * 4 * c.layers);
}

TEST_CASE(
    "q/k norms over the whole projection (OLMoE's) have gains as wide as q and k, and are refused by name on the "
    "persistent backend and over tensor-parallel ranks") {
  DecoderConfig c = moe_decoder({8, 2, 64, false});  // d 128: 4 heads of 32, kv heads 4
  c.kv_heads = 2;
  c.qk_norm = c.qk_norm_whole = true;
  CHECK_NOTHROW(c.validate());
  std::size_t elements = 0;
  int gains = 0;
  for (const DecoderTensor& t : decoder_tensors(c)) {
    if (t.role != DecoderTensorRole::embedding) elements += t.elements();
    if (t.role == DecoderTensorRole::q_norm) CHECK(t.shape() == std::vector<std::int64_t>{128});
    if (t.role == DecoderTensorRole::k_norm) CHECK(t.shape() == std::vector<std::int64_t>{64});
    if (t.role == DecoderTensorRole::q_norm || t.role == DecoderTensorRole::k_norm) {
      CHECK(t.rope_rows);
      ++gains;
    }
  }
  CHECK(gains == 2 * c.layers);
  CHECK(c.weight_bytes() == (elements + static_cast<std::size_t>(c.d)) * 2);

  DecoderConfig alone = c;
  alone.qk_norm = false;
  check_invalid(alone, "qk_norm_whole (q/k norms over the whole projection) needs qk_norm");
  DecoderConfig dense = lgtest::small_decoder(2);  // no mixture of experts, which the persistent backend refuses first
  dense.qk_norm = dense.qk_norm_whole = true;
  CHECK_NOTHROW(dense.validate());
  DecoderConfig persistent = dense;
  persistent.backend = DecoderBackend::persistent;
  check_invalid(persistent, "the persistent backend has no tiles for q/k norms over the whole projection");
  CHECK_THROWS_WITH_AS(check_tensor_split(dense, 2),
                       doctest::Contains("tensor parallelism does not split q/k norms over the whole projection"),
                       UsageError);
  dense.qk_norm_whole = false;
  CHECK_NOTHROW(check_tensor_split(dense, 2));  // per-head norms split with their heads
}

TEST_CASE("a mixture of experts' tensors are its router and every expert's three matrices, named as Qwen3-MoE's") {
  const DecoderConfig c = moe_decoder({4, 2, 32, true});
  const std::vector<DecoderTensor> tensors = decoder_tensors(c);
  std::vector<std::string> layer1;
  std::size_t elements = 0;
  for (const DecoderTensor& t : tensors) {
    if (t.layer == 1 && t.name.find(".mlp.") != std::string::npos) layer1.push_back(t.name);
    if (t.role != DecoderTensorRole::embedding) elements += t.elements();
    CHECK(t.role != DecoderTensorRole::w1);  // no dense MLP
    if (t.role == DecoderTensorRole::moe_router) CHECK(t.shape() == std::vector<std::int64_t>{4, 128});
    if (t.role == DecoderTensorRole::moe_w3) CHECK(t.shape() == std::vector<std::int64_t>{32, 128});
    if (t.role == DecoderTensorRole::moe_w2) CHECK(t.shape() == std::vector<std::int64_t>{128, 32});
  }
  const std::vector<std::string> want{"model.layers.1.mlp.gate.weight",
                                      "model.layers.1.mlp.experts.0.gate_proj.weight",
                                      "model.layers.1.mlp.experts.1.gate_proj.weight",
                                      "model.layers.1.mlp.experts.2.gate_proj.weight",
                                      "model.layers.1.mlp.experts.3.gate_proj.weight",
                                      "model.layers.1.mlp.experts.0.up_proj.weight",
                                      "model.layers.1.mlp.experts.1.up_proj.weight",
                                      "model.layers.1.mlp.experts.2.up_proj.weight",
                                      "model.layers.1.mlp.experts.3.up_proj.weight",
                                      "model.layers.1.mlp.experts.0.down_proj.weight",
                                      "model.layers.1.mlp.experts.1.down_proj.weight",
                                      "model.layers.1.mlp.experts.2.down_proj.weight",
                                      "model.layers.1.mlp.experts.3.down_proj.weight"};
  CHECK(layer1 == want);
  // weight_bytes: every tensor but the embedding, plus one embedding row, in two bytes each.
  CHECK(c.weight_bytes() == (elements + static_cast<std::size_t>(c.d)) * 2);
  const DecoderConfig dense = lgtest::small_decoder(2);
  std::size_t dense_elements = 0;
  for (const DecoderTensor& t : decoder_tensors(dense)) {
    if (t.role != DecoderTensorRole::embedding) dense_elements += t.elements();
  }
  CHECK(dense.weight_bytes() == (dense_elements + static_cast<std::size_t>(dense.d)) * 2);
}

TEST_CASE("a mixture of experts' experts are the mlp class: each layer's experts of a kind one quantized stack") {
  const DecoderConfig c = moe_decoder({4, 2, 128, true});  // d 128
  QuantizedFormat int8;
  int8.kind = WeightFormat::int8_channel;
  DecoderQuantization experts;
  experts.mlp = int8;
  CHECK(experts.format_of(DecoderTensorRole::moe_w2) == int8);
  CHECK_FALSE(experts.format_of(DecoderTensorRole::moe_router).has_value());  // the router stays dense
  CHECK_NOTHROW(check_quantization(c, experts, ScaleType::f16));
  const std::vector<QuantizedLayout> layouts = quantized_layouts(c, experts);
  REQUIRE(layouts.size() == 6);  // 2 layers of gate, up and down stacks
  CHECK(layouts[0].name() == "model.layers.0.mlp.experts.*.gate_proj.weight");
  CHECK(layouts[1].name() == "model.layers.0.mlp.experts.*.up_proj.weight");
  CHECK(layouts[5].name() == "model.layers.1.mlp.experts.*.down_proj.weight");
  CHECK((layouts[0].rows() == 4 * 128 && layouts[0].cols() == 128));
  CHECK((layouts[2].rows() == 4 * 128 && layouts[2].cols() == 128));  // down: 4 experts of d rows, width columns
  // Device bytes: the stacks' layouts in place of the experts' 2 bytes an element, the router still dense.
  std::size_t dense = 0;
  for (const DecoderTensor& t : decoder_tensors(c)) {
    if (!experts.format_of(t.role)) dense += t.elements() * 2;
  }
  std::size_t stacks = 0;
  for (const QuantizedLayout& l : layouts) stacks += l.bytes();
  CHECK(decoder_device_bytes(c, experts) == dense + stacks);
  CHECK(stacks == 6 * (4 * 128 * 128 + 2 * 4 * 128));  // int8 values and one fp16 scale per row

  // A format that cannot apply to an expert names the expert's own tensor.
  DecoderQuantization fp8;
  fp8.mlp = QuantizedFormat{WeightFormat::fp8_block, 128, false, ScaleType::f16};
  CHECK_THROWS_WITH_AS(check_quantization(moe_decoder({4, 2, 64, true}), fp8, ScaleType::f16),
                       doctest::Contains("tensor model.layers.0.mlp.experts.0.down_proj.weight: fp8 group size 128 "
                                         "does not divide the input dimension (64)"),
                       UsageError);
  CHECK_NOTHROW(check_quantization(c, fp8, ScaleType::f16));
  CHECK(stacked_experts_name("model.layers.3.block_sparse_moe.experts.0.w2.weight") ==
        "model.layers.3.block_sparse_moe.experts.*.w2.weight");

  // assemble_decoder_weights stacks a layer's experts of a kind all dense or none.
  const std::vector<DecoderTensor> tensors = decoder_tensors(c);
  std::size_t first_expert = 0;
  while (tensors[first_expert].role != DecoderTensorRole::moe_w1) ++first_expert;
  CHECK(stacked_with_next(tensors, first_expert));
  CHECK_FALSE(stacked_with_next(tensors, first_expert + 3));  // the last gate_proj; up_proj follows
  CHECK(stacked_with_next(tensors, first_expert + 4));
  CHECK_FALSE(stacked_with_next(tensors, first_expert - 1));  // the router
}

TEST_SUITE("gpu") {
  TEST_CASE_TEMPLATE("a mixture-of-experts decoder matches float64 step by step, for each architecture's routing", T,
                     half, bfloat16) {
    // Each seed gives routes whose top k stand clear of the rest in float64 (route_margin over these 10 steps from
    // token 7: 0.07, 0.14, 0.05 and, for OLMoE's block, 0.34 in both element types, checked below) by far more than the
    // GPU's rounding moves a logit (about 1e-3 in fp16, 5e-3 in bf16): near a tie the GPU may choose another expert,
    // and float64 is no oracle there. Random seeds give margins under 0.01 in about every other sequence.
    DecoderConfig config;
    SUBCASE("Qwen3-MoE's: 8 experts, top 2 renormalized, q/k norms") {
      config = moe_decoder({8, 2, 64, true}, 41);
      config.qk_norm = true;
    }
    SUBCASE("OLMoE's routing: 16 experts, top 4 as the softmax gives them") {
      config = moe_decoder({16, 4, 32, false}, 1124);
    }
    SUBCASE("OLMoE's block: q/k norms over the whole projection, 8 experts, top 3 as the softmax gives them") {
      config = moe_decoder({8, 3, 64, false}, 183);
      config.qk_norm = config.qk_norm_whole = true;
    }
    SUBCASE("Mixtral's: 8 experts, top 2 renormalized, a window of 4 positions") {
      config = moe_decoder({8, 2, 128, true}, 46);
      config.window = 4;
    }
    CAPTURE(config.moe.experts);
    CAPTURE(config.moe.experts_per_token);
    const DType dtype = std::same_as<T, half> ? DType::f16 : DType::bf16;
    const double bound = std::same_as<T, half> ? 1e-2 : 4e-2;
    BasicDecoder<T> decoder(lgtest::stream(), lgtest::nn_kernels(), config);
    DecoderReference reference(config, dtype);
    int token = 7;
    for (int p = 0; p < 10; ++p) {
      CAPTURE(p);
      const int next = decoder.forward({token, p});
      const std::vector<double> got = widen(decoder.logits());
      const std::vector<double> want = reference.step(token, p);
      CHECK(relative_error(got, want) < bound);
      REQUIRE(next >= 0);
      REQUIRE(next < config.vocab);
      const int best = argmax(want);
      CHECK((next == best || want[static_cast<std::size_t>(best)] - want[static_cast<std::size_t>(next)] < bound));
      token = next;
    }
    CHECK(reference.route_margin() > 0.02);  // else the comparison above may fail for want of a clear route
  }

  TEST_CASE_TEMPLATE("a mixture-of-experts decoder's 8-row steps on tensor cores match float64 in every row", T, half,
                     bfloat16) {
    // The Qwen3-MoE sequence of the test above (seed 41 from token 7: clear routes) in all 8 rows at once, with
    // DecoderConfig::tensor_cores: the router's gemv runs its _mma variant and the experts the grouped products
    // (grouped_expert_steps) (every row choosing the same experts), and each row must still match float64 and get the
    // bits of the others.
    DecoderConfig config = moe_decoder({8, 2, 64, true}, 41, 8);
    config.qk_norm = true;
    config.tensor_cores = true;
    const DType dtype = std::same_as<T, half> ? DType::f16 : DType::bf16;
    const double bound = std::same_as<T, half> ? 1e-2 : 4e-2;
    BasicDecoder<T> decoder(lgtest::stream(), lgtest::nn_kernels(), config);
    DecoderReference reference(config, dtype);
    int token = 7;
    for (int p = 0; p < 10; ++p) {
      CAPTURE(p);
      const std::vector<TokenAt> steps(8, TokenAt{token, p});
      const std::vector<int> next = decoder.forward_batch(steps);
      const std::vector<double> want = reference.step(token, p);
      const std::vector<T> first = decoder.logits(0);
      for (int r = 0; r < 8; ++r) {
        CAPTURE(r);
        const std::vector<T> row = decoder.logits(r);
        CHECK(relative_error(widen(row), want) < bound);
        CHECK(
            std::equal(row.begin(), row.end(), first.begin(), first.end(), [](T a, T b) { return a.bits == b.bits; }));
        CHECK(next[static_cast<std::size_t>(r)] == next[0]);
      }
      const int best = argmax(want);
      CHECK(
          (next[0] == best || want[static_cast<std::size_t>(best)] - want[static_cast<std::size_t>(next[0])] < bound));
      token = next[0];
    }
    CHECK(reference.route_margin() > 0.02);
  }

  TEST_CASE_TEMPLATE(
      "a mixture-of-experts decoder's steps of 2 to 8 rows on tensor cores run the grouped products and give each row "
      "what it gets alone within rounding",
      T, half, bfloat16) {
    // grouped_expert_steps: each row's experts as the prompt chunk's grouped products (prefill_moe.hpp), against the
    // same row stepped alone on the gemv family's fp32 row loop. Every expert chosen (top 4 of 4, renormalized), so
    // that no near tie can route a row otherwise on the two paths (the batch's router gemv runs on tensor cores).
    DecoderConfig config = moe_decoder({4, 4, 64, true}, 7, 8);
    config.tensor_cores = true;
    REQUIRE(grouped_expert_steps(config));
    BasicDecoder<T> batched(lgtest::stream(), lgtest::nn_kernels(), config);
    DecoderConfig alone = config;
    alone.max_batch = 1;
    alone.tensor_cores = false;
    BasicDecoder<T> single(lgtest::stream(), lgtest::nn_kernels(), alone);
    const double bound = std::same_as<T, half> ? 1e-2 : 4e-2;
    const std::vector<int> starts{3, 77, 100, 5, 511, 7, 7, 300};
    for (const int rows : {2, 5, 8}) {
      CAPTURE(rows);
      batched.reset();
      std::vector<std::vector<int>> fed(static_cast<std::size_t>(rows));
      std::vector<int> tokens(starts.begin(), starts.begin() + rows);
      for (int p = 0; p < 4; ++p) {
        std::vector<TokenAt> steps;
        for (int r = 0; r < rows; ++r) {
          steps.push_back({tokens[static_cast<std::size_t>(r)], p});
          fed[static_cast<std::size_t>(r)].push_back(tokens[static_cast<std::size_t>(r)]);
        }
        tokens = batched.forward_batch(steps);
      }
      for (int r = 0; r < rows; ++r) {
        CAPTURE(r);
        single.reset();
        for (int p = 0; p < 4; ++p)
          (void)single.forward({fed[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)], p});
        CHECK(relative_error(widen(batched.logits(r)), widen(single.logits())) < bound);
      }
    }
  }

  TEST_CASE_TEMPLATE(
      "a mixture-of-experts decoder's batches, prefill and generate give the bits of one sequence at a time", T, half,
      bfloat16) {
    DecoderConfig config = moe_decoder({8, 2, 64, true}, 1234, 8);
    SUBCASE("8 experts, top 2 renormalized") {}
    SUBCASE("OLMoE's block: q/k norms over the whole projection, 8 experts, top 4 as the softmax gives them") {
      config.moe = {8, 4, 64, false};
      config.qk_norm = config.qk_norm_whole = true;
    }
    CAPTURE(config.qk_norm_whole);
    BasicDecoder<T> batched(lgtest::stream(), lgtest::nn_kernels(), config);
    config.max_batch = 1;
    BasicDecoder<T> single(lgtest::stream(), lgtest::nn_kernels(), config);
    const auto same_bits = [](const std::vector<T>& a, const std::vector<T>& b) {
      std::size_t differ = a.size() == b.size() ? 0 : 1;
      for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) differ += a[i].bits != b[i].bits ? 1 : 0;
      return differ == 0;
    };
    for (const std::vector<int>& starts :
         {std::vector<int>{3, 77, 100, 5, 511, 7, 7, 300}, std::vector<int>{9, 42, 1}}) {
      CAPTURE(starts.size());
      batched.reset();
      std::vector<int> tokens = starts;
      std::vector<std::vector<int>> history(tokens.size());
      for (int p = 0; p < 4; ++p) {
        std::vector<TokenAt> steps;
        for (const int t : tokens) steps.push_back({t, p});
        tokens = batched.forward_batch(steps);
        for (std::size_t r = 0; r < tokens.size(); ++r) history[r].push_back(tokens[r]);
      }
      for (std::size_t r = 0; r < starts.size(); ++r) {
        CAPTURE(r);
        single.reset();
        int t = starts[r];
        for (int p = 0; p < 4; ++p) {
          t = single.forward({t, p});
          CHECK(t == history[r][static_cast<std::size_t>(p)]);
        }
        CHECK(same_bits(single.logits(), batched.logits(static_cast<int>(r))));
      }
    }

    // Prefill of 11 tokens (fewer than a chunk on tensor cores takes) runs the step's graphs: 8 rows, then 3.
    const std::vector<int> prompt{9, 400, 12, 12, 7, 300, 1, 2, 3, 4, 250};
    batched.reset();
    const int from_prefill = batched.prefill(prompt);
    const std::vector<T> prefill_logits = batched.logits();
    single.reset();
    int one_by_one = -1;
    for (std::size_t i = 0; i < prompt.size(); ++i) one_by_one = single.forward({prompt[i], static_cast<int>(i)});
    CHECK(from_prefill == one_by_one);
    CHECK(same_bits(single.logits(), prefill_logits));

    single.reset();
    std::vector<int> want;
    int t = 7;
    for (int p = 0; p < 6; ++p) want.push_back(t = single.forward({t, p}));
    single.reset();
    CHECK(single.generate(7, 6) == want);
  }

  TEST_CASE_TEMPLATE(
      "a mixture-of-experts decoder with int8 or fp8 experts computes what the same decoder on its dequantized "
      "experts does for one row and three",
      T, half, bfloat16) {
    constexpr bool fp16 = std::same_as<T, half>;
    const double bound = fp16 ? 1e-2 : 4e-2;  // tests/nn/decoder_quantization.cpp's quantized-against-dense bounds
    DecoderConfig c = moe_decoder({8, 2, 128, true}, 41, 3);
    c.qk_norm = true;
    c.record_routes = true;
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
    BasicDecoderWeights<T> twin = lgtest::with_dequantized_experts(s, k, c, quantized);
    BasicDecoder<T> a(s, lgtest::nn_kernels(), c, std::move(quantized));
    BasicDecoder<T> b(s, lgtest::nn_kernels(), c, std::move(twin));
    for (const int rows : {1, 3}) {
      CAPTURE(rows);
      a.reset();
      b.reset();
      std::vector<int> tokens{7, 300, 42};
      tokens.resize(static_cast<std::size_t>(rows));
      int same_routes = 0;
      for (int p = 0; p < 8; ++p) {
        CAPTURE(p);
        std::vector<TokenAt> steps;
        for (const int t : tokens) steps.push_back({t, p});
        (void)a.forward_batch(steps);
        tokens = b.forward_batch(steps);  // both teacher-forced on the twin's tokens
        // Where a router near a tie chose otherwise (its logits differ by the kernels' rounding), the logits may
        // differ by more than rounding: those steps are counted, not compared.
        const MoeRoutes ra = a.last_routes();
        const MoeRoutes rb = b.last_routes();
        if (ra.experts != rb.experts) continue;
        ++same_routes;
        for (int r = 0; r < rows; ++r) {
          CAPTURE(r);
          const std::vector<T> la = a.logits(r);
          const std::vector<T> lb = b.logits(r);
          double largest = 0;
          double difference = 0;
          for (std::size_t i = 0; i < lb.size(); ++i) {
            largest = std::max(largest, std::abs(static_cast<double>(lb[i].to_float())));
            difference = std::max(difference, std::abs(static_cast<double>(la[i].to_float()) - lb[i].to_float()));
          }
          REQUIRE(std::isfinite(difference));
          CHECK(largest > 0);
          CHECK(difference <= bound * largest);
        }
      }
      CHECK(same_routes >= 6);  // of 8 steps: the experts' kernels rarely move a route
    }
  }

  TEST_CASE_TEMPLATE("a mixture of experts' expert stacks quantized on the device are the bytes the host route makes",
                     T, half, bfloat16) {
    const DecoderConfig c = moe_decoder({8, 2, 128, true}, 41);
    Stream& s = lgtest::stream();
    const BasicKernels<T> k(lgtest::nn_kernels());
    const DeviceQuantizer quantizer(lgtest::nn_kernels());
    const ScaleType scales = scale_type_of<T>;
    for (const QuantizedFormat& format : {QuantizedFormat{WeightFormat::int8_channel, 0, false, scales},
                                          QuantizedFormat{WeightFormat::int4_group, 64, true, scales},
                                          QuantizedFormat{WeightFormat::fp8_block, 128, false, scales}}) {
      CAPTURE(format_name(format));
      DecoderQuantization q;
      q.mlp = format;
      const auto host =
          lgtest::downloaded(s, quantize_decoder_weights(s, BasicDecoderWeights<T>::generate(s, k, c), c, q));
      const auto device = lgtest::downloaded(
          s, quantize_decoder_weights(s, quantizer, BasicDecoderWeights<T>::generate(s, k, c), c, q));
      REQUIRE(host.size() == 6);  // 2 layers of gate, up and down stacks
      REQUIRE(device.size() == host.size());
      for (std::size_t i = 0; i < host.size(); ++i) {
        CAPTURE(host[i].layout().name());
        CHECK(host[i].layout().rows() == 8 * 128);
        CHECK(lgtest::same_bytes(device[i], host[i]));
      }
    }
  }
}
