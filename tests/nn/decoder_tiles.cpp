// The decoder's persistent backend (DecoderBackend::persistent, nn/decoder_tiles.hpp): the configs it refuses, and on
// the GPU its steps against float64, against the graph backend (dense and quantized weights), against its own program's
// graph form, and its batch, generate and sampling against its own single steps.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/decoder_quantization.hpp>
#include <lazygraph/nn/decoder_tiles.hpp>
#include <lazygraph/nn/reference.hpp>
#include "common/gpu.hpp"
#include "common/nn.hpp"
#include "common/quantized_formats.hpp"
#include "common/small_decoder.hpp"

namespace lg = lazygraph;
using lg::bfloat16;
using lg::half;
using lg::nn::DecoderBackend;
using lg::nn::DecoderConfig;

namespace {

DecoderConfig persistent_decoder(int kv_heads = 2, int max_batch = 1) {
  DecoderConfig c = lgtest::small_decoder(kv_heads, max_batch);
  c.backend = DecoderBackend::persistent;
  return c;
}

template <class T>
std::size_t differing(const std::vector<T>& a, const std::vector<T>& b) {
  std::size_t n = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += a[i].bits != b[i].bits ? 1 : 0;
  return n;
}

/// Every attention and MLP matrix of `w` (int4 with zero points; the LM head too where it is) with its columns stored
/// in a random order of its inputs, gate and up in one order, the bytes as they are: what a GPTQ desc_act checkpoint
/// loads as.
void reorder_inputs(lg::nn::DecoderWeights& w) {
  const auto reordered = [](const lg::nn::Weight<half>& m, unsigned seed) {
    const lg::nn::QuantizedWeight q = m.quantized().download(lgtest::stream());
    std::vector<std::int32_t> order(static_cast<std::size_t>(q.layout().cols()));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(seed));
    return lg::nn::Weight<half>(lg::nn::DeviceQuantizedWeight<half>(
        lgtest::stream(), lg::nn::QuantizedWeight(q.layout(), {q.values().begin(), q.values().end()},
                                                  {q.scale_bits().begin(), q.scale_bits().end()},
                                                  {q.zeros().begin(), q.zeros().end()}, std::move(order))));
  };
  for (std::size_t l = 0; l < w.attention.size(); ++l) {
    const auto seed = static_cast<unsigned>(4 * l + 1);
    w.attention[l].qkv = reordered(w.attention[l].qkv, seed);
    w.attention[l].wo = reordered(w.attention[l].wo, seed + 1);
    w.mlp[l].w1 = reordered(w.mlp[l].w1, seed + 2);
    w.mlp[l].w3 = reordered(w.mlp[l].w3, seed + 2);
    w.mlp[l].w2 = reordered(w.mlp[l].w2, seed + 3);
  }
  if (!w.lm_head.is_dense()) w.lm_head = reordered(w.lm_head, 99);
}

/// Steps a persistent decoder and a graph decoder of the same weights through 10 positions, each against float64.
template <class T>
void check_against_reference_and_graph(DecoderConfig config, lg::nn::DType dtype, double bound) {
  lg::nn::BasicDecoder<T> persistent(lgtest::stream(), lgtest::nn_kernels(), config);
  DecoderConfig graph_config = config;
  graph_config.backend = DecoderBackend::graph;
  lg::nn::BasicDecoder<T> graph(lgtest::stream(), lgtest::nn_kernels(), graph_config);
  lg::nn::DecoderReference reference(config, dtype);
  double worst = 0;
  double worst_graph = 0;
  int token = 7;
  for (int p = 0; p < 10; ++p) {
    CAPTURE(p);
    const int next = persistent.forward({token, p});
    (void)graph.forward({token, p});  // the same token at every step, so that both caches hold the same sequence
    const std::vector<double> got = lg::nn::widen(persistent.logits());
    const std::vector<double> want = reference.step(token, p);
    const double err = lg::nn::relative_error(got, want);
    const double err_graph = lg::nn::relative_error(got, lg::nn::widen(graph.logits()));
    worst = std::max(worst, err);
    worst_graph = std::max(worst_graph, err_graph);
    CHECK(err < bound);
    CHECK(err_graph < bound);
    REQUIRE(next >= 0);
    REQUIRE(next < config.vocab);
    CHECK(next == lg::nn::argmax(got));  // the greedy choice over chunks of the vocabulary: its own logits' argmax
    const int best = lg::nn::argmax(want);
    CHECK((next == best || want[static_cast<std::size_t>(best)] - want[static_cast<std::size_t>(next)] < bound));
    token = next;
  }
  MESSAGE("persistent decoder logits, largest error relative to float64: " << worst << ", to the graph backend: "
                                                                           << worst_graph);
}

}  // namespace

TEST_CASE("the persistent backend refuses a config it does not run, naming the field") {
  const auto refused = [](DecoderConfig c, const std::string& what) {
    CAPTURE(what);
    try {
      c.validate();
      FAIL("validate accepted the config");
    } catch (const lg::UsageError& e) {
      CHECK(std::string(e.what()).find(what) != std::string::npos);
    }
  };
  DecoderConfig c = persistent_decoder();
  CHECK_NOTHROW(c.validate());
  c.fused = false;
  refused(c, "fused");
  c = persistent_decoder();
  c.attention_blocks = 4;
  refused(c, "attention_blocks to 1, not 4");
  c = persistent_decoder();
  c.attention_blocks = 0;  // by context: 2 blocks for a context of 64
  refused(c, "attention_blocks to 1, not 0");
  c = persistent_decoder();
  c.persistent.threads = 512;
  refused(c, "persistent.threads (512)");
  c.persistent.threads = 48;
  refused(c, "persistent.threads (48)");
  c.persistent.threads = 32;  // the q/k/v tile's 8 rows of 8 vectors need 64 threads
  refused(c, "persistent.threads (32) must be a multiple of 32 from 64 to 256");
  c = persistent_decoder();
  c.persistent_tile_rows = 12;
  refused(c, "persistent_tile_rows (12)");
  c.persistent_tile_rows = -8;
  refused(c, "persistent_tile_rows (-8)");
  // The graph backend ignores the persistent options.
  c.backend = DecoderBackend::graph;
  CHECK_NOTHROW(c.validate());
}

TEST_SUITE("gpu") {
  TEST_CASE("the persistent decoder matches float64 and the graph backend step by step, through its KV cache") {
    DecoderConfig config = persistent_decoder();
    SUBCASE("grouped-query, 2 kv heads for 4 query heads") {}
    SUBCASE("multi-head") { config.kv_heads = 0; }
    SUBCASE("multi-query, head_dim 256") {
      config.kv_heads = 1;
      config.head_width = 256;
    }
    SUBCASE("head_dim 64 over a width of 128, llama3 RoPE scaling, theta 500000") {
      config.head_width = 64;
      config.theta = 500000.0F;
      config.rope_scaling = {.type = lg::nn::RopeType::llama3,
                             .factor = 8,
                             .low_freq_factor = 1,
                             .high_freq_factor = 4,
                             .original_max_position_embeddings = 64};
    }
    SUBCASE("q, k and v biases (Qwen2's), theta 1e6") {
      config.qkv_bias = true;
      config.theta = 1e6F;
    }
    SUBCASE("blocks of 128 threads") { config.persistent.threads = 128; }
    SUBCASE("a vocabulary of 8200: the greedy choice over 4 chunks, the last one shorter") { config.vocab = 8200; }
    SUBCASE("two blocks per multiprocessor") { config.persistent.min_blocks_per_sm = 2; }
    CAPTURE(config.kv_heads);
    CAPTURE(config.head_dim());
    CAPTURE(config.persistent.threads);
    check_against_reference_and_graph<half>(config, lg::nn::DType::f16, 1e-2);
  }

  TEST_CASE("the bf16 persistent decoder matches float64 and the bf16 graph backend step by step") {
    check_against_reference_and_graph<bfloat16>(persistent_decoder(), lg::nn::DType::bf16, 4e-2);
  }

  TEST_CASE("a persistent step and its program's graph form (the same tiles as kernels) give the same bits") {
    lg::nn::Decoder decoder(lgtest::stream(), lgtest::nn_kernels(), persistent_decoder());
    int token = 5;
    for (int p = 0; p < 4; ++p) {
      CAPTURE(p);
      token = decoder.forward({token, p});
      const std::vector<half> persistent = decoder.logits();
      // The io buffer still holds this step's row; the graph form rewrites the cache at p with the same values.
      decoder.persistent_program(1).graph_op().sync_on(lgtest::stream());
      CHECK(differing(persistent, decoder.logits()) == 0);
    }
    // One persistent kernel per step: the step graph holds its counter fill and its launch; the program the
    // embedding, five calls per layer, the LM head and the greedy choice's two.
    CHECK(decoder.graph().node_count() == 2);
    CHECK(decoder.persistent_program(1).calls().size() == 4 + 5 * static_cast<std::size_t>(decoder.config().layers));
  }

  TEST_CASE("the persistent step's bits do not depend on how its projections are cut into tiles") {
    DecoderConfig per_block = persistent_decoder();  // a tile per block, of 5
    per_block.persistent.blocks = 5;
    DecoderConfig per_group = persistent_decoder();
    per_group.persistent_tile_rows = 8;
    DecoderConfig per_two = persistent_decoder();
    per_two.persistent_tile_rows = 16;
    per_two.persistent.blocks = 3;  // few blocks, each running many tiles
    std::vector<std::unique_ptr<lg::nn::Decoder>> decoders;
    for (const DecoderConfig& c : {per_block, per_group, per_two}) {
      decoders.push_back(std::make_unique<lg::nn::Decoder>(lgtest::stream(), lgtest::nn_kernels(), c));
    }
    // The first layer's q, k and v: (q 128 + k, v 64 each) / 8 = 32 groups of 8 rows.
    CHECK(decoders[0]->persistent_program(1).calls()[1].tiles() == 5);
    CHECK(decoders[1]->persistent_program(1).calls()[1].tiles() == 32);
    CHECK(decoders[2]->persistent_program(1).calls()[1].tiles() == 16);
    CHECK(decoders[2]->persistent_program(1).blocks() == 3);
    int t[3] = {21, 21, 21};
    for (int p = 0; p < 4; ++p) {
      CAPTURE(p);
      for (int i = 0; i < 3; ++i) t[i] = decoders[static_cast<std::size_t>(i)]->forward({t[i], p});
      CHECK(t[0] == t[1]);
      CHECK(t[0] == t[2]);
      CHECK(differing(decoders[0]->logits(), decoders[1]->logits()) == 0);
      CHECK(differing(decoders[0]->logits(), decoders[2]->logits()) == 0);
    }
  }

  TEST_CASE("persistent forward_batch gives each sequence the bits of stepping it alone") {
    const DecoderConfig config = persistent_decoder(2, 3);
    lg::nn::Decoder batched(lgtest::stream(), lgtest::nn_kernels(), config);
    const std::vector<int> starts{3, 77, 511};
    std::vector<int> tokens = starts;
    std::vector<std::vector<int>> batched_tokens(tokens.size());
    std::vector<std::vector<half>> batched_logits;
    for (int p = 0; p < 5; ++p) {
      std::vector<lg::nn::TokenAt> steps;
      for (const int t : tokens) steps.push_back({t, p});
      tokens = batched.forward_batch(steps);
      for (std::size_t r = 0; r < tokens.size(); ++r) batched_tokens[r].push_back(tokens[r]);
    }
    for (int r = 0; r < 3; ++r) batched_logits.push_back(batched.logits(r));
    lg::nn::Decoder single(lgtest::stream(), lgtest::nn_kernels(), persistent_decoder(2, 1));
    for (std::size_t r = 0; r < starts.size(); ++r) {
      CAPTURE(r);
      single.reset();
      int t = starts[r];
      for (int p = 0; p < 5; ++p) {
        t = single.forward({t, p});
        CHECK(t == batched_tokens[r][static_cast<std::size_t>(p)]);
      }
      CHECK(differing(single.logits(), batched_logits[r]) == 0);
    }
  }

  TEST_CASE("a persistent decoder of quantized weights, every format, matches the graph backend on the same weights") {
    struct Case {
      const char* name;
      lg::nn::DecoderQuantization quantization;
      bool reordered = false;
    };
    const std::vector<Case> cases = {
        // a dense LM head beside quantized layers, as AWQ and GPTQ checkpoints keep it: one program, both families
        {"int8 attention, int4 g32 MLP, dense LM head", {lgtest::int8(), lgtest::int4(32), {}, {}}},
        {"int4 g64 with zero points, the LM head too",
         {lgtest::int4(64, true), lgtest::int4(64, true), lgtest::int4(64, true), {}}},
        {"fp8 everywhere", {lgtest::fp8(), lgtest::fp8(), lgtest::fp8(), {}}},
        {"int4 g128 with zero points, inputs reordered (GPTQ desc_act), dense LM head",
         {lgtest::int4(128, true), lgtest::int4(128, true), {}, {}},
         true},
    };
    for (const Case& c : cases) {
      CAPTURE(c.name);
      const DecoderConfig config = persistent_decoder();
      DecoderConfig graph_config = config;
      graph_config.backend = DecoderBackend::graph;
      const auto weights = [&] {
        lg::nn::DecoderWeights w = lg::nn::quantize_decoder_weights(
            lgtest::stream(),
            lg::nn::DecoderWeights::generate(lgtest::stream(), lg::nn::BasicKernels<half>(lgtest::nn_kernels()),
                                             graph_config),
            graph_config, c.quantization);
        if (c.reordered) reorder_inputs(w);
        return w;
      };
      lg::nn::Decoder persistent(lgtest::stream(), lgtest::nn_kernels(), config, weights());
      lg::nn::Decoder graph(lgtest::stream(), lgtest::nn_kernels(), graph_config, weights());
      double worst = 0;
      int token = 7;
      for (int p = 0; p < 8; ++p) {
        CAPTURE(p);
        const int next = persistent.forward({token, p});
        (void)graph.forward({token, p});  // the same token for both: the caches hold one sequence
        const std::vector<double> got = lg::nn::widen(persistent.logits());
        const std::vector<double> want = lg::nn::widen(graph.logits());
        const double err = lg::nn::relative_error(got, want);
        worst = std::max(worst, err);
        CHECK(err < 1e-2);
        CHECK(next == lg::nn::argmax(got));
        // The program's graph form (each call's tiles as a kernel) gives the program's bits.
        const std::vector<half> program = persistent.logits();
        persistent.persistent_program(1).graph_op().sync_on(lgtest::stream());
        CHECK(differing(program, persistent.logits()) == 0);
        token = next;
      }
      MESSAGE(c.name << ": persistent logits within " << worst << " of the graph backend's");
    }
  }

  TEST_CASE("persistent generate gives the tokens of forward step by step, greedy and sampled") {
    lg::nn::Decoder decoder(lgtest::stream(), lgtest::nn_kernels(), persistent_decoder());
    SUBCASE("greedy") {}
    SUBCASE("sampled: temperature 0.8, top_k 40, top_p 0.9") {
      decoder.set_sampling({.temperature = 0.8F, .top_k = 40, .seed = 17, .top_p = 0.9F});
    }
    const std::vector<int> generated = decoder.generate(9, 12);
    REQUIRE(generated.size() == 12);
    const std::vector<half> last = decoder.logits();
    decoder.reset();
    int token = 9;
    for (int p = 0; p < 12; ++p) {
      CAPTURE(p);
      token = decoder.forward({token, p});
      CHECK(token == generated[static_cast<std::size_t>(p)]);
    }
    CHECK(differing(last, decoder.logits()) == 0);
  }
}
