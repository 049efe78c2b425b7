// The models of lazygraph::nn: seeded weights (host and device agree bit for bit), the MLP stack and the
// decoder as graph-backed Modules, checked against their float64 references on fresh random inputs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <utility>
#include <vector>

#include <lazygraph/graph.hpp>
#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/decoder_tensors.hpp>
#include <lazygraph/nn/mlp.hpp>
#include <lazygraph/nn/random_weights.hpp>
#include <lazygraph/nn/reference.hpp>
#include "common/gpu.hpp"
#include "common/nn.hpp"
#include "common/small_decoder.hpp"

namespace lg = lazygraph;
using lg::half;

namespace {

using lgtest::small_decoder;

/// The largest difference of `got` from `want`, relative to want's largest magnitude.
double relative_to_largest(const std::vector<half>& want, const std::vector<half>& got) {
  double diff = 0;
  double scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(want[i].to_float() - got[i].to_float())));
    scale = std::max(scale, static_cast<double>(std::abs(want[i].to_float())));
  }
  return diff / scale;
}

/// How many elements of two rows differ in their bits.
std::size_t differing_bits(const std::vector<half>& a, const std::vector<half>& b) {
  std::size_t differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) differ += a[i].bits != b[i].bits ? 1 : 0;
  return differ;
}

}  // namespace

TEST_CASE("seeded weights follow the README's formula and test vector") {
  const std::uint32_t key = lazygraph::nn::tensor_key(1234, 7);
  CHECK(lazygraph::nn::mix(key + 0) == 0x5ea64753U);
  CHECK(lazygraph::nn::mix(key + 1) == 0x70d69901U);
  CHECK(lazygraph::nn::mix(key + 2) == 0x1743e551U);
  CHECK(lazygraph::nn::uniform(key, 0) == doctest::Approx(-0.26055062).epsilon(1e-7));

  const auto spec = lazygraph::nn::matrix_spec(7, 64, 256);
  CHECK(spec.scale == 0.0625F);
  const std::vector<half> w = lazygraph::nn::host_tensor(1234, spec);
  REQUIRE(w.size() == 64U * 256U);
  CHECK(w[0].to_float() == half::from_float(0.0625F * lazygraph::nn::uniform(key, 0)).to_float());
  CHECK(lazygraph::nn::host_tensor(1234, spec)[100].bits == w[100].bits);  // deterministic
  CHECK(lazygraph::nn::host_tensor(1235, spec)[100].bits != w[100].bits);  // the seed matters
  const auto [lo, hi] =
      std::minmax_element(w.begin(), w.end(), [](half a, half b) { return a.to_float() < b.to_float(); });
  CHECK(lo->to_float() >= -0.0625F);
  CHECK(hi->to_float() <= 0.0625F);  // u < 1, but fp16 may round up to the bound
  CHECK(lo->to_float() < -0.06F);    // the whole range is used
  CHECK(hi->to_float() > 0.06F);

  const std::vector<half> gain = lazygraph::nn::host_tensor(1, lazygraph::nn::gain_spec(3, 1000));
  for (const half g : gain) {
    CHECK(g.to_float() >= 0.875F);
    CHECK(g.to_float() <= 1.125F);
  }
}

TEST_CASE("batch and prompt beyond the configured limits are UsageErrors naming the value, before any GPU work") {
  namespace nn = lazygraph::nn;
  nn::DecoderConfig config = small_decoder();
  config.max_batch = 2;
  const std::vector<nn::TokenAt> three{{1, 0}, {2, 0}, {3, 0}};
  CHECK_THROWS_WITH_AS(nn::check_batch(config, three), doctest::Contains("3 steps; give 1 to max_batch (2)"),
                       lg::UsageError);
  CHECK_THROWS_WITH_AS(nn::check_batch(config, {}), doctest::Contains("0 steps"), lg::UsageError);
  CHECK_THROWS_WITH_AS(nn::check_batch(config, std::vector<nn::TokenAt>{{1, 0}, {config.vocab, 0}}),
                       doctest::Contains("sequence 1: token 512"), lg::UsageError);
  CHECK_THROWS_WITH_AS(nn::check_batch(config, std::vector<nn::TokenAt>{{1, config.context}}),
                       doctest::Contains("position 64 is outside the context"), lg::UsageError);
  CHECK_NOTHROW(nn::check_batch(config, std::vector<nn::TokenAt>{{1, 0}, {2, 63}}));
  const std::vector<int> long_prompt(static_cast<std::size_t>(config.context) + 1, 1);
  CHECK_THROWS_WITH_AS(nn::check_prompt(config, long_prompt, 0, 0), doctest::Contains("65 tokens from position 0"),
                       lg::UsageError);
  CHECK_THROWS_WITH_AS(nn::check_prompt(config, std::vector<int>{1, 2}, config.context - 1, 0),
                       doctest::Contains("does not fit the context"), lg::UsageError);
  CHECK_THROWS_WITH_AS(nn::check_prompt(config, std::vector<int>{1}, -1, 0), doctest::Contains("from position -1"),
                       lg::UsageError);
  CHECK_THROWS_WITH_AS(nn::check_prompt(config, {}, 0, 0), doctest::Contains("empty"), lg::UsageError);
  CHECK_THROWS_WITH_AS(nn::check_prompt(config, std::vector<int>{1, -4}, 0, 0),
                       doctest::Contains("prompt token 1 (-4)"), lg::UsageError);
  CHECK_THROWS_WITH_AS(nn::check_prompt(config, std::vector<int>{1}, 0, 2), doctest::Contains("slot 2"),
                       lg::UsageError);
  CHECK_NOTHROW(nn::check_prompt(config, std::vector<int>(64, 3), 0, 1));
  CHECK_THROWS_WITH_AS(nn::check_step(config, {-1, 0}), doctest::Contains("outside the vocabulary"), lg::UsageError);
}

TEST_CASE("generate's inputs are checked before any GPU work, naming the value") {
  namespace nn = lazygraph::nn;
  const nn::DecoderConfig c = small_decoder();  // context 64, vocab 512
  CHECK_NOTHROW(nn::check_generate(c, 5, 64, -1, 0));
  CHECK_NOTHROW(nn::check_generate(c, 5, 1, 511, 63));
  CHECK_THROWS_WITH_AS(nn::check_generate(c, 5, 0, -1, 0), doctest::Contains("n (0) must be 1 to the 64"),
                       lg::UsageError);
  CHECK_THROWS_WITH_AS(nn::check_generate(c, 5, 60, -1, 10), doctest::Contains("n (60) must be 1 to the 54"),
                       lg::UsageError);
  CHECK_THROWS_WITH_AS(nn::check_generate(c, 5, 4, 512, 0), doctest::Contains("stop token 512"), lg::UsageError);
  CHECK_THROWS_WITH_AS(nn::check_generate(c, 5, 4, -2, 0), doctest::Contains("stop token -2"), lg::UsageError);
  CHECK_THROWS_WITH_AS(nn::check_generate(c, 512, 4, -1, 0), doctest::Contains("token 512"), lg::UsageError);
  CHECK_THROWS_WITH_AS(nn::check_generate(c, 5, 4, -1, 64), doctest::Contains("position 64"), lg::UsageError);
}

TEST_CASE("a decoder config with max_batch outside 1..8 is rejected, naming it") {
  lazygraph::nn::DecoderConfig c = small_decoder();
  c.max_batch = 9;
  CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("max_batch (9) must be 1 to 8"), lg::UsageError);
  c.max_batch = 0;
  CHECK_THROWS_AS(c.validate(), lg::UsageError);
}

TEST_CASE("a decoder config with heads not a multiple of kv_heads is rejected, naming both") {
  lazygraph::nn::DecoderConfig c = small_decoder();
  c.kv_heads = 3;
  CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("heads (4) must be a multiple of kv_heads (3)"), lg::UsageError);
  c.kv_heads = 2;
  CHECK_NOTHROW(c.validate());
  CHECK(c.kv_dim() == 64);
  CHECK(c.weight_bytes() < small_decoder().weight_bytes());  // Wk and Wv shrink
}

TEST_CASE("mlp_reference runs each of several rows as it runs that row alone, and refuses a partial row") {
  lazygraph::nn::MlpConfig config;
  config.d = 16;
  config.ffn = 48;
  config.layers = 3;
  const std::vector<double> rows = lazygraph::nn::widen(lazygraph::nn::host_tensor(config.seed, {2000000, 48, 1, 0}));
  const std::vector<double> together = lazygraph::nn::mlp_reference(config, rows);
  REQUIRE(together.size() == rows.size());
  for (std::size_t r = 0; r < 3; ++r) {
    CAPTURE(r);
    const std::vector<double> alone =
        lazygraph::nn::mlp_reference(config, std::span<const double>(rows).subspan(r * 16, 16));
    CHECK(std::equal(alone.begin(), alone.end(), together.begin() + static_cast<std::ptrdiff_t>(r * 16)));
    CHECK(alone != std::vector<double>(rows.begin() + static_cast<std::ptrdiff_t>(r * 16),
                                       rows.begin() + static_cast<std::ptrdiff_t>(r * 16 + 16)));
  }
  CHECK_THROWS_AS((void)lazygraph::nn::mlp_reference(config, std::span<const double>(rows).first(20)),
                  std::invalid_argument);
}

TEST_CASE("model configs reject shapes the kernels cannot run, saying which") {
  lazygraph::nn::MlpConfig mlp;
  mlp.d = 100;
  CHECK_THROWS_WITH_AS(mlp.validate(), doctest::Contains("multiples of 8"), lg::UsageError);
  lazygraph::nn::DecoderConfig dec;
  dec.heads = 3;
  CHECK_THROWS_WITH_AS(dec.validate(), doctest::Contains("divisible by heads"), lg::UsageError);
  dec.heads = 2;  // head_dim 256: the widest the attention kernel takes
  CHECK_NOTHROW(dec.validate());
  dec.heads = 1;  // head_dim 512
  CHECK_THROWS_WITH_AS(dec.validate(), doctest::Contains("at most 256"), lg::UsageError);
  dec.heads = 8;
  dec.head_width = 12;
  CHECK_THROWS_WITH_AS(dec.validate(), doctest::Contains("head_dim (12) must be a multiple of 8"), lg::UsageError);
  CHECK_NOTHROW(lazygraph::nn::DecoderConfig{}.validate());
}

TEST_SUITE("gpu") {
  TEST_CASE("generated weights hold each layer's Wq, Wk and Wv stacked in qkv, and wq, wk and wv view them") {
    namespace nn = lazygraph::nn;
    const nn::DecoderConfig c = small_decoder(2);
    const nn::DecoderWeights w = nn::DecoderWeights::generate(lgtest::stream(), nn::Kernels(lgtest::nn_kernels()), c);
    for (const nn::DecoderTensor& t : nn::decoder_tensors(c)) {
      const bool q = t.role == nn::DecoderTensorRole::wq;
      if (!q && t.role != nn::DecoderTensorRole::wk && t.role != nn::DecoderTensorRole::wv) continue;
      CAPTURE(t.name);
      const nn::AttentionWeights& a = w.attention[static_cast<std::size_t>(t.layer)];
      CHECK(a.qkv.rows() == c.q_dim() + 2 * c.kv_dim());
      CHECK(a.qkv.cols() == c.d);
      const lg::DeviceSpan<const half> part = (q                                     ? a.wq(c)
                                               : t.role == nn::DecoderTensorRole::wk ? a.wk(c)
                                                                                     : a.wv(c))
                                                  .dense();
      const std::vector<half> got = lgtest::to_host(lgtest::stream(), part);
      const std::vector<half> want = nn::host_tensor(c.seed, t.seeded);
      REQUIRE(got.size() == want.size());
      CHECK(std::equal(got.begin(), got.end(), want.begin(), [](half x, half y) { return x.bits == y.bits; }));
    }
    nn::DecoderConfig other = c;
    other.kv_heads = 4;
    CHECK_THROWS_WITH_AS((void)w.attention[0].wv(other), doctest::Contains("are not inside its 256"), lg::UsageError);
  }

  TEST_CASE("weights whose q, k and v are partly dense are refused before anything is made, naming the layer") {
    namespace nn = lazygraph::nn;
    const nn::DecoderConfig c = small_decoder();
    int calls = 0;
    CHECK_THROWS_WITH_AS(
        (void)nn::assemble_decoder_weights<half>(
            lgtest::stream().device(), c,
            [](const nn::DecoderTensor& t) { return t.layer != 1 || t.role != nn::DecoderTensorRole::wk; },
            [&](const nn::DecoderTensor&, lg::DeviceSpan<half>) { ++calls; }),
        doctest::Contains("layer 1's q, k and v share one matrix (BasicAttentionWeights::qkv), so they must be all "
                          "dense or none; dense: model.layers.1.self_attn.q_proj.weight, "
                          "model.layers.1.self_attn.v_proj.weight; not dense: model.layers.1.self_attn.k_proj.weight"),
        lg::UsageError);
    CHECK(calls == 0);
  }

  TEST_CASE("weights generated on the GPU equal the host's bit for bit") {
    const lazygraph::nn::Kernels k(lgtest::nn_kernels());
    for (const auto& spec : {lazygraph::nn::matrix_spec(16 + 7, 1536, 512), lazygraph::nn::gain_spec(1000001, 4096),
                             lazygraph::nn::TensorSpec{1000000, 3 * 1000 + 5, 1.0F, 0.0F}}) {
      CAPTURE(spec.id);
      const auto device = lazygraph::nn::device_tensor(lgtest::stream(), k.fill_uniform, 99, spec);
      const std::vector<half> got = lgtest::to_host(lgtest::stream(), device.cview());
      const std::vector<half> want = lazygraph::nn::host_tensor(99, spec);
      REQUIRE(got.size() == want.size());
      std::size_t differ = 0;
      for (std::size_t i = 0; i < got.size(); ++i) differ += got[i].bits != want[i].bits ? 1 : 0;
      CHECK(differ == 0);
    }
  }

  TEST_CASE("the MLP module matches float64 on fresh inputs, replay after replay, persistent or not") {
    for (const auto& variant :
         {std::pair{std::tuple{512, 1536, 16}, true}, std::pair{std::tuple{256, 1024, 3}, true},
          std::pair{std::tuple{512, 1536, 16}, false}, std::pair{std::tuple{256, 1024, 3}, false}}) {
      lazygraph::nn::MlpConfig config;
      std::tie(config.d, config.ffn, config.layers) = variant.first;
      const bool persistent = variant.second;
      config.persistent = persistent;
      const int d = config.d;
      const int layers = config.layers;
      CAPTURE(d);
      CAPTURE(persistent);
      lazygraph::nn::Mlp mlp(lgtest::stream(), lgtest::nn_kernels(), config);
      // staging copy in, input copy, 2 kernels per layer (or one persistent kernel), staging copy out
      CHECK(mlp.graph().node_count() == 3 + (persistent ? 1 : 2 * static_cast<std::size_t>(layers)));
      for (int round = 0; round < 2; ++round) {
        const std::vector<half> x = lgtest::random_halves(static_cast<std::size_t>(d));
        const std::vector<half> y = mlp.forward(x);
        const std::vector<double> want = lazygraph::nn::mlp_reference(config, lazygraph::nn::widen(x));
        const double error = lazygraph::nn::relative_error(lazygraph::nn::widen(y), want);
        CAPTURE(round);
        CHECK(error < 1e-2);
        CHECK(lazygraph::nn::relative_error(lazygraph::nn::widen(x), want) > 0.05);  // the layers changed x measurably
      }
    }
  }

  TEST_CASE("the MLP module's eager op computes what its graph does") {
    lazygraph::nn::MlpConfig config;
    config.d = 256;
    config.ffn = 512;
    config.layers = 2;
    lazygraph::nn::Mlp mlp(lgtest::stream(), lgtest::nn_kernels(), config);
    const std::vector<half> x = lgtest::random_halves(256);
    const std::vector<half> graph_out = mlp.forward(x);
    const auto input = lgtest::to_device(lgtest::stream(), x);
    lg::DeviceBuffer<half> out(lgtest::device(), 256);
    mlp.forward_op(input.cview(), out.view()).sync_on(lgtest::stream());
    const std::vector<half> eager_out = lgtest::to_host(lgtest::stream(), out.cview());
    for (std::size_t i = 0; i < 256; ++i) CHECK(eager_out[i].bits == graph_out[i].bits);
    CHECK_THROWS_AS(mlp.forward(std::vector<half>(255)), lg::UsageError);
  }

  TEST_CASE("early-launched and ordinarily launched models compute the same bits") {
    lazygraph::nn::MlpConfig config;
    config.d = 512;
    config.ffn = 1536;
    config.layers = 6;
    lazygraph::nn::Mlp early(lgtest::stream(), lgtest::nn_kernels(), config);
    config.early_launch = false;
    lazygraph::nn::Mlp plain(lgtest::stream(), lgtest::nn_kernels(), config);
    // Kernel-to-kernel dependencies are programmatic when launched early; those of the copies (staging in, the
    // input copy, staging out) are always full.
    CHECK(early.graph().edge_counts().programmatic == 2U * 6U - 1U);
    CHECK(early.graph().edge_counts().full == 3U);
    CHECK(plain.graph().edge_counts().programmatic == 0U);
    CHECK(plain.graph().edge_counts().full == 2U * 6U + 2U);
    const std::vector<half> x = lgtest::random_halves(512);
    const std::vector<half> a = early.forward(x);
    const std::vector<half> b = plain.forward(x);
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].bits == b[i].bits);

    lazygraph::nn::DecoderConfig dc = small_decoder();
    lazygraph::nn::Decoder early_decoder(lgtest::stream(), lgtest::nn_kernels(), dc);
    dc.early_launch = false;
    lazygraph::nn::Decoder plain_decoder(lgtest::stream(), lgtest::nn_kernels(), dc);
    int t1 = 3;
    int t2 = 3;
    for (int p = 0; p < 8; ++p) {
      t1 = early_decoder.forward({t1, p});
      t2 = plain_decoder.forward({t2, p});
      REQUIRE(t1 == t2);
      const std::vector<half> l1 = early_decoder.logits();
      const std::vector<half> l2 = plain_decoder.logits();
      std::size_t differ = 0;
      for (std::size_t i = 0; i < l1.size(); ++i) differ += l1[i].bits != l2[i].bits ? 1 : 0;
      CHECK(differ == 0);
    }
  }

  TEST_CASE("the decoder module matches float64 step by step, through its KV cache, with and without GQA") {
    lazygraph::nn::DecoderConfig config = small_decoder();
    int kv_heads = 0;
    SUBCASE("multi-head") { kv_heads = 0; }
    SUBCASE("grouped-query, 2 kv heads for 4 query heads") { kv_heads = 2; }
    SUBCASE("multi-query, 1 kv head") { kv_heads = 1; }
    SUBCASE("grouped-query, attention split over 4 blocks of positions per head") {
      kv_heads = 2;
      config.attention_blocks = 4;
    }
    SUBCASE("the kernels before fusion") {
      kv_heads = 2;
      config.fused = false;
    }
    // Llama 3's rule with a trained context of 64: pairs of wavelength under 16 kept, over 64 divided, blended between.
    const lazygraph::nn::RopeScaling llama3{.type = lazygraph::nn::RopeType::llama3,
                                            .factor = 8,
                                            .low_freq_factor = 1,
                                            .high_freq_factor = 4,
                                            .original_max_position_embeddings = 64};
    SUBCASE("head_dim 64 over a width of 128 (q 256 wide), llama3 RoPE scaling, theta 500000") {
      kv_heads = 2;
      config.head_width = 64;
      config.theta = 500000.0F;
      config.rope_scaling = llama3;
    }
    SUBCASE("head_dim 256 (q 1024 wide over a width of 128), attention split over 4 blocks of positions") {
      kv_heads = 2;
      config.head_width = 256;
      config.attention_blocks = 4;
    }
    SUBCASE("head_dim 256, one block per head") {
      kv_heads = 1;
      config.head_width = 256;
    }
    SUBCASE("q, k and v biases (Qwen2's), grouped-query, theta 1e6") {
      kv_heads = 2;
      config.qkv_bias = true;
      config.theta = 1e6F;
    }
    SUBCASE("q/k norms (Qwen3's), grouped-query, head_dim 64 over a width of 128, theta 1e6") {
      kv_heads = 2;
      config.qk_norm = true;
      config.head_width = 64;
      config.theta = 1e6F;
    }
    SUBCASE("q/k norms over the whole projection (OLMoE's), grouped-query, theta 1e6") {
      kv_heads = 2;
      config.qk_norm = config.qk_norm_whole = true;
      config.theta = 1e6F;
    }
    SUBCASE("q/k norms with q, k and v biases, attention split over 4 blocks of positions") {
      kv_heads = 1;
      config.qk_norm = true;
      config.qkv_bias = true;
      config.attention_blocks = 4;
    }
    SUBCASE("Gemma 3's block: GeGLU, post-norms, q/k norms, a scaled embedding and scores, soft-capped logits") {
      kv_heads = 2;
      config.qk_norm = true;
      config.activation = lazygraph::nn::GateActivation::gelu_tanh;
      config.post_norms = true;
      config.embedding_scale = std::sqrt(128.0F);
      config.attention_scale = 0.0625F;  // query_pre_attn_scalar 256
      config.logit_softcap = 2.0F;       // tight enough that the cap bends the logits
    }
    SUBCASE("sliding windows of 5 positions on layer 0 only, with its own RoPE base (Gemma 3's local layers)") {
      kv_heads = 2;
      config.window = 5;
      config.sliding = {true, false};
      config.local_theta = 100.0F;
      config.theta = 1e6F;
    }
    SUBCASE("a window of 4 positions on every layer, attention split over 4 blocks of positions (Mistral's)") {
      kv_heads = 2;
      config.window = 4;
      config.attention_blocks = 4;
    }
    SUBCASE("the kernels before fusion with head_dim 16 (q 64 wide) and linear RoPE scaling") {
      kv_heads = 2;
      config.fused = false;
      config.head_width = 16;
      config.rope_scaling = {.type = lazygraph::nn::RopeType::linear, .factor = 4};
    }
    config.kv_heads = kv_heads;
    CAPTURE(kv_heads);
    CAPTURE(config.head_dim());
    CAPTURE(config.attention_blocks);
    CAPTURE(config.fused);
    CAPTURE(config.qk_norm);
    CAPTURE(config.qk_norm_whole);
    CAPTURE(config.window);
    lazygraph::nn::Decoder decoder(lgtest::stream(), lgtest::nn_kernels(), config);
    lazygraph::nn::DecoderReference reference(config);
    std::vector<int> tokens;
    int token = 7;
    for (int p = 0; p < 12; ++p) {
      CAPTURE(p);
      const int next = decoder.forward({token, p});
      const std::vector<double> got = lazygraph::nn::widen(decoder.logits());
      const std::vector<double> want = reference.step(token, p);
      CHECK(lazygraph::nn::relative_error(got, want) < 1e-2);
      REQUIRE(next >= 0);  // before indexing with it
      REQUIRE(next < config.vocab);
      const int best = lazygraph::nn::argmax(want);
      // The GPU's choice is the float64 argmax unless float64 itself sees a near tie.
      CHECK((next == best || want[static_cast<std::size_t>(best)] - want[static_cast<std::size_t>(next)] < 1e-2));
      tokens.push_back(next);
      token = next;
    }

    // A new sequence from the same start repeats the same tokens: the graph reads token and position anew.
    decoder.reset();
    token = 7;
    for (std::size_t p = 0; p < tokens.size(); ++p) {
      token = decoder.forward({token, static_cast<int>(p)});
      CHECK(token == tokens[p]);
    }
  }

  TEST_CASE(
      "the unfused decoder ordered by dataflow, by a hand-written all and serially: the same logits, bit for bit") {
    lazygraph::nn::DecoderConfig config = small_decoder();
    config.kv_heads = 2;
    config.fused = false;
    using lazygraph::nn::DecoderOrdering;
    std::vector<std::unique_ptr<lazygraph::nn::Decoder>> decoders;
    for (const DecoderOrdering o :
         {DecoderOrdering::inferred, DecoderOrdering::hand_written, DecoderOrdering::serial}) {
      config.ordering = o;
      decoders.push_back(std::make_unique<lazygraph::nn::Decoder>(lgtest::stream(), lgtest::nn_kernels(), config));
    }
    // Same node count; the inferred graph runs the three projections as parallel branches as all() does: per
    // layer, 3 projections each after the previous layer's last kernel, rope after q and k, kv_append after rope and
    // v, attention after kv_append: the hand-written graph has the same edges; the serial one a chain.
    const auto& inferred = decoders[0]->graph();
    const auto& hand = decoders[1]->graph();
    const auto& serial = decoders[2]->graph();
    CHECK(inferred.node_count() == serial.node_count());
    CHECK(inferred.edge_counts().full + inferred.edge_counts().programmatic ==
          serial.edge_counts().full + serial.edge_counts().programmatic + 2 * static_cast<std::size_t>(config.layers));
    std::size_t roots_inferred = 0;
    std::size_t roots_serial = 0;
    for (const auto& d : inferred.dependencies()) roots_inferred += d.empty() ? 1 : 0;
    for (const auto& d : serial.dependencies()) roots_serial += d.empty() ? 1 : 0;
    CHECK(roots_inferred == 1);
    CHECK(roots_serial == 1);
    CHECK(hand.node_count() == inferred.node_count());
    CHECK(hand.dependencies() == inferred.dependencies());  // kv_append's wait for v moved into rope's join
    CHECK(hand.edge_counts().full + hand.edge_counts().programmatic ==
          inferred.edge_counts().full + inferred.edge_counts().programmatic);
    int t[3] = {11, 11, 11};
    for (int p = 0; p < 6; ++p) {
      for (int i = 0; i < 3; ++i) t[i] = decoders[static_cast<std::size_t>(i)]->forward({t[i], p});
      CHECK(t[0] == t[1]);
      CHECK(t[0] == t[2]);
      const std::vector<half> l0 = decoders[0]->logits();
      for (int i = 1; i < 3; ++i) {
        const std::vector<half> li = decoders[static_cast<std::size_t>(i)]->logits();
        std::size_t differ = 0;
        for (std::size_t j = 0; j < l0.size(); ++j) differ += l0[j].bits != li[j].bits ? 1 : 0;
        CHECK(differ == 0);
      }
    }
  }

  TEST_CASE("the decoder rejects tokens and positions outside its config") {
    const lazygraph::nn::DecoderConfig config = small_decoder();
    lazygraph::nn::Decoder decoder(lgtest::stream(), lgtest::nn_kernels(), config);
    CHECK_THROWS_WITH_AS(decoder.forward({config.vocab, 0}), doctest::Contains("outside the vocabulary"),
                         lg::UsageError);
    CHECK_THROWS_WITH_AS(decoder.forward({-1, 0}), doctest::Contains("outside the vocabulary"), lg::UsageError);
    CHECK_THROWS_WITH_AS(decoder.forward({0, config.context}), doctest::Contains("outside the context"),
                         lg::UsageError);
    CHECK(decoder.forward({0, 0}) >= 0);  // still usable
  }

  TEST_CASE("the decoder's step is one graph of five kernels per layer, whose eager op gives the same logits") {
    const lazygraph::nn::DecoderConfig config = small_decoder();
    lazygraph::nn::Decoder decoder(lgtest::stream(), lgtest::nn_kernels(), config);
    // embedding + per layer (norm, QKV, RoPE and cache append in one kernel + attention + wo + 2 MLP kernels) + lm
    // head + sample
    CHECK(decoder.graph().node_count() == 1 + 5 * static_cast<std::size_t>(config.layers) + 2);
    const int via_graph = decoder.forward({5, 0});
    const std::vector<half> logits = decoder.logits();
    // The same op run eagerly (io still holds token 5, position 0) gives the same logits.
    decoder.step_op().sync_on(lgtest::stream());
    const std::vector<half> eager = decoder.logits();
    for (std::size_t i = 0; i < logits.size(); ++i) CHECK(eager[i].bits == logits[i].bits);
    CHECK(via_graph == lazygraph::nn::argmax(lazygraph::nn::widen(eager)));
  }

  TEST_CASE("forward_batch steps several sequences at once, each exactly as if it were alone") {
    lazygraph::nn::DecoderConfig config = small_decoder();
    config.kv_heads = 2;
    config.max_batch = 5;
    SUBCASE("attention in one block per head") {}
    SUBCASE("attention split over positions") { config.attention_blocks = 3; }
    CAPTURE(config.attention_blocks);
    lazygraph::nn::Decoder batched(lgtest::stream(), lgtest::nn_kernels(), config);
    lazygraph::nn::DecoderConfig single_config = config;
    single_config.max_batch = 1;
    lazygraph::nn::Decoder single(lgtest::stream(), lgtest::nn_kernels(), single_config);
    std::vector<int> tokens{3, 77, 100, 5, 511};
    std::vector<std::vector<int>> batched_tokens(tokens.size());
    std::vector<std::vector<half>> batched_logits;
    for (int p = 0; p < 6; ++p) {
      std::vector<lazygraph::nn::TokenAt> steps;
      for (const int t : tokens) steps.push_back({t, p});
      tokens = batched.forward_batch(steps);
      for (std::size_t r = 0; r < tokens.size(); ++r) batched_tokens[r].push_back(tokens[r]);
      if (p == 5) {
        for (int r = 0; r < 5; ++r) batched_logits.push_back(batched.logits(r));
      }
    }
    const std::vector<int> starts{3, 77, 100, 5, 511};
    for (std::size_t r = 0; r < starts.size(); ++r) {
      CAPTURE(r);
      single.reset();
      int t = starts[r];
      for (int p = 0; p < 6; ++p) {
        t = single.forward({t, p});
        CHECK(t == batched_tokens[r][static_cast<std::size_t>(p)]);
      }
      const std::vector<half> l = single.logits();
      std::size_t differ = 0;
      for (std::size_t i = 0; i < l.size(); ++i) differ += l[i].bits != batched_logits[r][i].bits ? 1 : 0;
      CHECK(differ == 0);
    }
    // Three sequences use the graph of three rows, captured on first use.
    CHECK(batched.forward_batch(std::vector<lazygraph::nn::TokenAt>{{1, 6}, {2, 6}, {3, 6}}).size() == 3);
    CHECK(batched.graph(3).node_count() == batched.graph(1).node_count());
  }

  TEST_CASE(
      "with tensor cores, forward_batch rows agree with one row at a time within rounding, and bit for bit with the "
      "same rows in a batch of another size") {
    lazygraph::nn::DecoderConfig config = small_decoder();
    config.kv_heads = 2;
    SUBCASE("4 heads: attention in blocks of 1024 threads") {}
    SUBCASE(
        "32 heads of 16: a full step's 256 blocks outnumber an H100's or H200's multiprocessors, so attention's blocks "
        "are 256 threads in the batches of 5 and of 2 alike") {
      config.d = 512;
      config.heads = 32;
      config.kv_heads = 8;
    }
    CAPTURE(config.heads);
    config.max_batch = 5;
    config.tensor_cores = true;
    lazygraph::nn::Decoder five(lgtest::stream(), lgtest::nn_kernels(), config);
    lazygraph::nn::Decoder two(lgtest::stream(), lgtest::nn_kernels(), config);
    lazygraph::nn::DecoderConfig single_config = config;
    single_config.max_batch = 1;
    single_config.tensor_cores = false;
    lazygraph::nn::Decoder single(lgtest::stream(), lgtest::nn_kernels(), single_config);
    // The same tokens at every step (not the predicted ones), so that the paths cannot part at a near tie.
    const std::vector<int> tokens{3, 77, 100, 5, 511};
    for (int p = 0; p < 6; ++p) {
      std::vector<lazygraph::nn::TokenAt> steps;
      for (const int t : tokens) steps.push_back({(t + 13 * p) % config.vocab, p});
      (void)five.forward_batch(steps);
      (void)two.forward_batch(std::vector<lazygraph::nn::TokenAt>(steps.begin(), steps.begin() + 2));
    }
    double worst = 0;
    for (std::size_t r = 0; r < tokens.size(); ++r) {
      CAPTURE(r);
      single.reset();
      for (int p = 0; p < 6; ++p) (void)single.forward({(tokens[r] + 13 * p) % config.vocab, p});
      const std::vector<half> in_batch = five.logits(static_cast<int>(r));
      const double relative = relative_to_largest(single.logits(), in_batch);
      worst = std::max(worst, relative);
      CHECK(relative < 1e-2);
      if (r < 2) CHECK(differing_bits(two.logits(static_cast<int>(r)), in_batch) == 0);
    }
    MESSAGE("largest difference of a batch row's logits from one row alone, relative to the largest logit: " << worst);
  }

  TEST_CASE(
      "with tensor cores, a batch whose longest row is past kGroupedBatchFrom attends on the grouped kernels in a "
      "graph "
      "of its own: its rows agree with one row at a time within rounding, and bit for bit with the same rows in a "
      "batch of another size") {
    // head_dim 64 (d 256 over 4 heads, 2 kv heads): BasicDecoderState::grouped_batches holds on sm_80 and newer.
    lazygraph::nn::DecoderConfig config = small_decoder(2, 4);
    config.d = 256;
    config.ffn = 512;
    config.context = 1024;
    config.tensor_cores = true;
    lazygraph::nn::Decoder four(lgtest::stream(), lgtest::nn_kernels(), config);
    if (!four.grouped_batches()) {
      MESSAGE("skipped: the grouped kernels need compute capability 8.0 or newer");
      return;
    }
    lazygraph::nn::Decoder two(lgtest::stream(), lgtest::nn_kernels(), config);
    lazygraph::nn::DecoderConfig single_config = config;
    single_config.max_batch = 1;
    single_config.tensor_cores = false;
    lazygraph::nn::Decoder single(lgtest::stream(), lgtest::nn_kernels(), single_config);
    CHECK_FALSE(single.grouped_batches());
    // Sequence r: a prompt of 790 + 37 r tokens in slot r, so that the rows' positions differ and all pass 768.
    const auto prompt_of = [&](int r) {
      std::vector<int> prompt(static_cast<std::size_t>(790 + 37 * r));
      for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int>((31 * i + 17 * r) % 512);
      return prompt;
    };
    std::vector<lazygraph::nn::TokenAt> steps;
    for (int r = 0; r < 4; ++r) {
      const std::vector<int> prompt = prompt_of(r);
      const int next = four.prefill(prompt, 0, r);
      if (r < 2) CHECK(two.prefill(prompt, 0, r) == next);
      steps.push_back({next, static_cast<int>(prompt.size())});
    }
    REQUIRE(steps.front().position >= lazygraph::nn::kGroupedBatchFrom);
    (void)four.forward_batch(steps);
    (void)two.forward_batch(std::vector<lazygraph::nn::TokenAt>(steps.begin(), steps.begin() + 2));
    lg::CudaGraph<>* const long_graph = &four.graph(4);
    double worst = 0;
    for (int r = 0; r < 4; ++r) {
      CAPTURE(r);
      single.reset();
      (void)single.prefill(prompt_of(r), 0, 0);
      (void)single.forward({steps[static_cast<std::size_t>(r)].token, steps[static_cast<std::size_t>(r)].position});
      const std::vector<half> in_batch = four.logits(r);
      const double relative = relative_to_largest(single.logits(), in_batch);
      worst = std::max(worst, relative);
      CHECK(relative < 1e-2);
      if (r < 2) CHECK(differing_bits(two.logits(r), in_batch) == 0);
    }
    MESSAGE(
        "largest difference of a long batch row's logits from one row alone, relative to the largest logit: " << worst);
    // Short rows replay the other graph of 4 rows (one block a (row, head)).
    std::vector<lazygraph::nn::TokenAt> short_steps;
    for (int r = 0; r < 4; ++r) short_steps.push_back({steps[static_cast<std::size_t>(r)].token, r});
    (void)four.forward_batch(short_steps);
    CHECK(&four.graph(4) != long_graph);
  }

  TEST_CASE("prefill gives the cache, logits and tokens of feeding the prompt one token at a time") {
    lazygraph::nn::DecoderConfig config = small_decoder();
    config.kv_heads = 1;
    config.max_batch = 2;
    SUBCASE("Llama's block") {}
    SUBCASE("q/k norms") { config.qk_norm = true; }
    SUBCASE("q/k norms over the whole projection") { config.qk_norm = config.qk_norm_whole = true; }
    SUBCASE("Gemma 3's block with a window of 6 on layer 1") {
      config.qk_norm = config.post_norms = true;
      config.activation = lazygraph::nn::GateActivation::gelu_tanh;
      config.embedding_scale = 4;
      config.window = 6;
      config.sliding = {false, true};
      config.local_theta = 1000;
    }
    lazygraph::nn::Decoder a(lgtest::stream(), lgtest::nn_kernels(), config);
    lazygraph::nn::Decoder b(lgtest::stream(), lgtest::nn_kernels(), config);
    const std::vector<int> prompt{9, 400, 12, 12, 7, 300, 1, 2, 3, 4, 5, 6, 250};  // 13: a chunk of 8, one of 5
    const int slot = 1;
    const int from_prefill = a.prefill(prompt, 0, slot);
    const std::vector<half> prefill_logits = a.logits();  // the prompt's last token's
    CHECK_THROWS_AS((void)a.logits(1), lg::UsageError);   // after prefill, one row
    int one_by_one = -1;
    for (std::size_t i = 0; i < prompt.size(); ++i) {
      // Sequence 1 of b, through forward_batch with sequence 0 idle at position 0.
      one_by_one = b.forward_batch(std::vector<lazygraph::nn::TokenAt>{{0, 0}, {prompt[i], static_cast<int>(i)}})[1];
    }
    CHECK(from_prefill == one_by_one);
    const std::vector<half> step_logits = b.logits(1);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < step_logits.size(); ++i)
      differ += step_logits[i].bits != prefill_logits[i].bits ? 1 : 0;
    CHECK(differ == 0);
    // Decoding on from the prompt gives the same tokens both ways.
    int ta = from_prefill;
    int tb = one_by_one;
    for (int p = static_cast<int>(prompt.size()); p < static_cast<int>(prompt.size()) + 5; ++p) {
      ta = a.forward_batch(std::vector<lazygraph::nn::TokenAt>{{0, 0}, {ta, p}})[1];
      tb = b.forward_batch(std::vector<lazygraph::nn::TokenAt>{{0, 0}, {tb, p}})[1];
      CHECK(ta == tb);
    }
  }

  TEST_CASE(
      "generate runs many steps in one replay and gives the tokens of the forward loop, stopping at the stop token") {
    lazygraph::nn::DecoderConfig config = small_decoder();
    config.kv_heads = 2;
    SUBCASE("Llama's block") {}
    SUBCASE("q/k norms") { config.qk_norm = true; }
    SUBCASE("q/k norms over the whole projection") { config.qk_norm = config.qk_norm_whole = true; }
    SUBCASE("Gemma 3's block with a window of 6 on every layer") {
      config.qk_norm = config.post_norms = true;
      config.activation = lazygraph::nn::GateActivation::gelu_tanh;
      config.window = 6;
      config.logit_softcap = 5;
    }
    lazygraph::nn::Decoder decoder(lgtest::stream(), lgtest::nn_kernels(), config);
    std::vector<int> want;
    int t = 7;
    for (int p = 0; p < 40; ++p) want.push_back(t = decoder.forward({t, p}));
    const std::vector<half> last_logits = decoder.logits();
    decoder.reset();
    const std::vector<int> got = decoder.generate(7, 40);
    CHECK(got == want);
    const std::vector<half> loop_logits = decoder.logits();  // the last step's, as after the forward loop
    std::size_t differ = 0;
    for (std::size_t i = 0; i < loop_logits.size(); ++i) differ += loop_logits[i].bits != last_logits[i].bits ? 1 : 0;
    CHECK(differ == 0);
    // Stopping early: the loop ends after the first occurrence of the stop token, which is returned.
    const int stop = want[12];
    const auto first = static_cast<std::size_t>(std::find(want.begin(), want.end(), stop) - want.begin());
    CHECK(decoder.generate(7, 40, stop) == std::vector<int>(want.begin(), want.begin() + static_cast<long>(first) + 1));
    // From a later position (after prefill, here the forward loop's first 10 steps), and n = 1.
    CHECK(decoder.generate(want[9], 30, -1, 10) == std::vector<int>(want.begin() + 10, want.end()));
    CHECK(decoder.generate(want[20], 1, -1, 21) == std::vector<int>{want[21]});
    CHECK_THROWS_AS((void)decoder.generate(7, 65), lg::UsageError);
    // Sampling: the same draws as the forward loop (they depend on seed, position and sequence only).
    decoder.set_sampling({0.9F, 20, 5});
    std::vector<int> sampled;
    t = 3;
    for (int p = 0; p < 24; ++p) sampled.push_back(t = decoder.forward({t, p}));
    CHECK(decoder.generate(3, 24) == sampled);
  }

  // generate's loop, small enough to bisect racecheck's crash in it (tests/sanitize_gpu.sh, racecheck_options): from
  // the step's kernels alone under a WHILE node to generate itself, shortest first.
  TEST_CASE(
      "a decode step as a WHILE body runs bound-many times, each as forward (generate's loop, small enough for "
      "racecheck)") {
    lazygraph::nn::Decoder decoder(lgtest::stream(), lgtest::nn_kernels(), small_decoder());
    (void)decoder.forward({5, 0});  // the io buffer now holds token 5 at position 0, which every iteration steps
    const std::vector<half> want = decoder.logits();
    const lg::LoopBound bound(lgtest::nn_kernels(), 2);
    lg::CudaGraph<> loop = lg::CudaGraph<>::scope(lgtest::stream(), [&](lg::Scope& sc) {
      const lg::Condition more = sc.condition(1);
      sc.record(lg::while_(more, decoder.step_op(), bound));  // the body never clears it: the bound stops the loop
    });
    loop.launch();
    CHECK(bound.iterations(lgtest::stream()) == 2);
    const std::vector<half> got = decoder.logits();  // the second iteration's: the same cache slot, the same logits
    REQUIRE(got.size() == want.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < got.size(); ++i) differ += got[i].bits != want[i].bits ? 1 : 0;
    CHECK(differ == 0);
  }

  TEST_CASE(
      "a decode step of ordinary launches as a WHILE body runs bound-many times (generate's loop, small enough for "
      "racecheck)") {
    // The case above with every kernel launched after the previous one ends: no programmatic edges in the body.
    lazygraph::nn::DecoderConfig config = small_decoder();
    config.early_launch = false;
    lazygraph::nn::Decoder decoder(lgtest::stream(), lgtest::nn_kernels(), config);
    (void)decoder.forward({5, 0});
    const std::vector<half> want = decoder.logits();
    const lg::LoopBound bound(lgtest::nn_kernels(), 2);
    lg::CudaGraph<> loop = lg::CudaGraph<>::scope(lgtest::stream(), [&](lg::Scope& sc) {
      const lg::Condition more = sc.condition(1);
      sc.record(lg::while_(more, decoder.step_op(), bound));
    });
    loop.launch();
    CHECK(bound.iterations(lgtest::stream()) == 2);
    const std::vector<half> got = decoder.logits();
    REQUIRE(got.size() == want.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < got.size(); ++i) differ += got[i].bits != want[i].bits ? 1 : 0;
    CHECK(differ == 0);
  }

  TEST_CASE("generate of 2 tokens gives the forward loop's tokens (generate's loop, small enough for racecheck)") {
    lazygraph::nn::Decoder decoder(lgtest::stream(), lgtest::nn_kernels(), small_decoder());
    std::vector<int> want;
    int t = 7;
    for (int p = 0; p < 2; ++p) want.push_back(t = decoder.forward({t, p}));
    decoder.reset();
    CHECK(decoder.generate(7, 2) == want);
  }

  TEST_CASE("generate of 8 tokens gives the forward loop's tokens (generate's loop, small enough for racecheck)") {
    lazygraph::nn::Decoder decoder(lgtest::stream(), lgtest::nn_kernels(), small_decoder());
    std::vector<int> want;
    int t = 7;
    for (int p = 0; p < 8; ++p) want.push_back(t = decoder.forward({t, p}));
    decoder.reset();
    CHECK(decoder.generate(7, 8) == want);
  }

  TEST_CASE("8 threads calling one MLP and one decoder at once each get the result of a call alone") {
    lazygraph::nn::MlpConfig mc;
    mc.d = 256;
    mc.ffn = 512;
    mc.layers = 2;
    lazygraph::nn::Mlp mlp(lgtest::stream(), lgtest::nn_kernels(), mc);
    lazygraph::nn::Decoder decoder(lgtest::stream(), lgtest::nn_kernels(), small_decoder());
    constexpr int kThreads = 8;
    std::vector<std::vector<half>> inputs;
    std::vector<std::vector<half>> alone;
    std::vector<std::vector<int>> alone_tokens;
    for (int t = 0; t < kThreads; ++t) {
      inputs.push_back(lgtest::random_halves(256));
      alone.push_back(mlp.forward(inputs.back()));
      alone_tokens.push_back(decoder.generate(10 + t, 12));  // from position 0: independent of earlier calls
    }
    std::vector<int> mlp_differ(kThreads, -1);
    std::vector<int> tokens_equal(kThreads, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        int differ = 0;
        bool same = true;
        for (int round = 0; round < 20; ++round) {
          const std::vector<half> y = mlp.forward(inputs[static_cast<std::size_t>(t)]);
          for (std::size_t i = 0; i < y.size(); ++i)
            differ += y[i].bits != alone[static_cast<std::size_t>(t)][i].bits ? 1 : 0;
          same = same && decoder.generate(10 + t, 12) == alone_tokens[static_cast<std::size_t>(t)];
        }
        mlp_differ[static_cast<std::size_t>(t)] = differ;
        tokens_equal[static_cast<std::size_t>(t)] = same ? 1 : 0;
      });
    }
    for (std::thread& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) {
      CAPTURE(t);
      CHECK(mlp_differ[static_cast<std::size_t>(t)] == 0);
      CHECK(tokens_equal[static_cast<std::size_t>(t)] == 1);
    }
  }

  TEST_CASE("a decoder refuses a batch or prompt beyond its limits and stays usable") {
    lazygraph::nn::DecoderConfig config = small_decoder();
    config.max_batch = 2;
    lazygraph::nn::Decoder d(lgtest::stream(), lgtest::nn_kernels(), config);
    CHECK_THROWS_AS(d.forward_batch(std::vector<lazygraph::nn::TokenAt>{{1, 0}, {2, 0}, {3, 0}}), lg::UsageError);
    CHECK_THROWS_AS(d.prefill(std::vector<int>{1, 2}, config.context - 1), lg::UsageError);
    CHECK_THROWS_WITH_AS((void)d.logits(1), doctest::Contains("row 1"), lg::UsageError);
    CHECK(d.prefill(std::vector<int>{1, 2, 3}) >= 0);
    CHECK(d.forward_batch(std::vector<lazygraph::nn::TokenAt>{{1, 3}, {2, 0}}).size() == 2);
  }
}
