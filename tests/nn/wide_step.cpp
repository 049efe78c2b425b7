// The wide decode step of a paged decoder (nn/wide_step.hpp): its config checks, buckets and io layout on the host;
// on a GPU, N rows of one step (9 to 256, each at its own position through its own shuffled table) against the same
// rows stepped one at a time on the narrow 1-row graph of the same decoder and cache (logits within the GEMMs'
// rounding, the same token where the top-two margin is clear, the keys and values appended within rounding, and not
// one other element of the pools touched), and the engine stepping 48 requests at once over a decoder of max_batch 64.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <lazygraph/nn.hpp>
#include <lazygraph/nn/wide_step.hpp>

#include "common/gpu.hpp"
#include "common/nn.hpp"
#include "common/quantized_formats.hpp"
#include "common/small_decoder.hpp"

using namespace lazygraph;
using namespace lazygraph::nn;

namespace {

/// A paged decoder of `max_batch` rows: width 256, 4 heads of 64 over 2 kv heads, 2 layers, 128 positions per
/// sequence in blocks of 16, a pool with room for every row's whole table and some to spare.
DecoderConfig wide_config(int max_batch) {
  DecoderConfig c;
  c.d = 256;
  c.heads = 4;
  c.kv_heads = 2;
  c.layers = 2;
  c.ffn = 512;
  c.vocab = 512;
  c.context = 128;
  c.max_batch = max_batch;
  c.prefill_chunk = 0;
  c.attention_blocks = 1;
  c.kv_block_size = 16;
  c.kv_blocks = max_batch * (c.context / c.kv_block_size) + 7;
  return c;
}

std::string refusal(const DecoderConfig& c) {
  try {
    c.validate();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("max_batch above 8 is accepted with a paged cache up to 256 and refused otherwise naming the limit") {
  DecoderConfig c = wide_config(256);
  CHECK(refusal(c) == "(accepted)");
  c.max_batch = 257;
  CHECK(refusal(c).find("max_batch (257) must be 1 to 8, or with a paged cache (kv_block_size) 1 to 256") !=
        std::string::npos);
  DecoderConfig contiguous = lgtest::small_decoder(2);
  contiguous.max_batch = 9;
  CHECK(refusal(contiguous).find("max_batch (9) must be 1 to 8") != std::string::npos);
  contiguous.max_batch = 8;
  CHECK(refusal(contiguous) == "(accepted)");
}

TEST_CASE(
    "the wide step takes a mixture of experts and q/k norms, and refuses by name what the paged cache does not run") {
  DecoderConfig c = wide_config(64);
  c.moe = {.experts = 8, .experts_per_token = 2, .expert_width = 64};
  CHECK(refusal(c) == "(accepted)");
  c.moe.experts = 12;  // the wide step's router GEMM stores rows of 16-byte multiples
  CHECK(refusal(c).find("moe.experts (12) must be a multiple of 8") != std::string::npos);
  DecoderConfig q = wide_config(64);
  q.qk_norm = true;
  CHECK(refusal(q) == "(accepted)");
  DecoderConfig p = wide_config(64);
  p.backend = DecoderBackend::persistent;
  CHECK(refusal(p).find("does not run on the persistent backend") != std::string::npos);
}

TEST_CASE("the wide step's buckets run from 16 to the smallest power of two that holds max_batch and are none to 8") {
  CHECK(wide_buckets(wide_config(8)).empty());
  CHECK(wide_buckets(wide_config(9)) == std::vector<int>{16});
  CHECK(wide_buckets(wide_config(16)) == std::vector<int>{16});
  CHECK(wide_buckets(wide_config(33)) == std::vector<int>{16, 32, 64});
  CHECK(wide_buckets(wide_config(100)) == std::vector<int>{16, 32, 64, 128});
  CHECK(wide_buckets(wide_config(256)) == std::vector<int>{16, 32, 64, 128, 256});
  CHECK_THROWS_AS((void)wide_buckets(wide_config(300)), UsageError);
}

TEST_CASE("the wide step says why it does not run on a GPU before compute capability 8.0") {
  std::string why;
  CHECK_FALSE(wide_step_available({7, 5}, &why));
  CHECK(why.find("compute capability 7.5") != std::string::npos);
  std::string cublas;
  const bool with_cublas = cublaslt_available(&cublas);
  CHECK(wide_step_available({9, 0}, &why) == with_cublas);
  if (!with_cublas) CHECK(why.find("cuBLASLt") != std::string::npos);
}

TEST_CASE("the wide step's io lays out the chunk then each row's token position and slot then the tables") {
  CHECK(WideIo::count == 1);  // the chunk's rows, where the row-wise kernels and rope_append read the real rows
  CHECK(WideIo::tokens == 3);
  CHECK(WideIo::positions(256) == 3 + 256);
  CHECK(WideIo::slots(256) == 3 + 512);
  CHECK(WideIo::tables(256) == 3 + 768);
  CHECK(WideIo::size(256, 8192) == 3 + 768 + 256 * 8192);
}

TEST_CASE("check_paged_batch refuses among 256 rows a written block another row holds at another entry") {
  const DecoderConfig c = wide_config(256);
  const int width = c.kv_table_width();
  std::vector<TokenAt> steps;
  std::vector<int> tables;
  for (int r = 0; r < 256; ++r) {
    steps.push_back({.token = r % c.vocab, .position = 40 + r % 50});  // entries 0 .. 2 to 0 .. 5
    for (int i = 0; i < width; ++i) tables.push_back(r * width + i);
  }
  CHECK_NOTHROW(check_paged_batch(c, steps, tables));
  // Rows 3 and 4 share their written block at the same entry (one sequence's prefix): allowed.
  const auto last = [&](int r) { return steps[static_cast<std::size_t>(r)].position / c.kv_block_size; };
  std::vector<int> shared = tables;
  steps[4].position = steps[3].position;
  shared[static_cast<std::size_t>(4 * width + last(4))] = shared[static_cast<std::size_t>(3 * width + last(3))];
  CHECK_NOTHROW(check_paged_batch(c, steps, shared));
  // Row 200 holds row 7's written block at entry 0: refused, naming both.
  std::vector<int> bad = tables;
  const int written = bad[static_cast<std::size_t>(7 * width + last(7))];
  bad[static_cast<std::size_t>(200 * width)] = written;
  const std::string message =
      "sequence 7 writes block " + std::to_string(written) + ", which sequence 200's table holds at entry 0";
  CHECK_THROWS_WITH_AS(check_paged_batch(c, steps, bad), doctest::Contains(message.c_str()), UsageError);
  // Two rows write one block at one entry and one of them holds it at another too: refused.
  std::vector<int> twice = shared;
  twice[static_cast<std::size_t>(3 * width)] = shared[static_cast<std::size_t>(3 * width + last(3))];
  CHECK_THROWS_WITH_AS(check_paged_batch(c, steps, twice), doctest::Contains("sequence 4 writes block"), UsageError);
}

namespace {

template <class T>
constexpr double tolerance = std::same_as<T, half> ? 1e-2 : 3e-2;

using lgtest::clear_margin;

/// The tables of `rows` rows of `width` blocks each, from the ids 0 .. pool - 1 shuffled (row after row).
std::vector<int> shuffled_tables(int rows, int width, int pool, unsigned seed) {
  std::vector<int> ids(static_cast<std::size_t>(pool));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  ids.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(width));
  return ids;
}

/// `n` values of T in [-1, 1) from `seed`.
template <class T>
std::vector<T> random_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0F, 1.0F);
  std::vector<T> out(n);
  for (T& x : out) x = T::from_float(u(rng));
  return out;
}

/// Pools of random keys and values (every position of every block: each row's history) in `decoder`, put back before
/// each comparison.
template <class T>
struct RandomHistory {
  explicit RandomHistory(BasicDecoder<T>& decoder)
      : k(random_values<T>(decoder.k_cache().size(), 5U)), v(random_values<T>(decoder.v_cache().size(), 6U)) {}
  void restore(BasicDecoder<T>& decoder) const {
    copy_async(lgtest::stream(), decoder.k_cache(), std::span<const T>(k));
    copy_async(lgtest::stream(), decoder.v_cache(), std::span<const T>(v));
    lgtest::stream().synchronize();
  }
  std::vector<T> k;
  std::vector<T> v;
};

/// The wide step of `n` rows (positions differing, tables shuffled over the pool) over `history`, then the pool put
/// back and each row stepped alone on the 1-row graph of the same decoder: logits within the GEMMs' rounding, the same
/// token where the top-two margin is clear (counted in `judged` and `clear`); the keys and values at each row's
/// position within rounding; every other element of the pools unchanged, bit for bit (the bucket's padding rows write
/// nothing).
template <class T>
void check_wide_against_alone(BasicDecoder<T>& decoder, const RandomHistory<T>& history, int n, int& judged,
                              int& clear) {
  CAPTURE(n);
  const DecoderConfig& c = decoder.config();
  const int width = decoder.table_width();
  const std::vector<T>& k0 = history.k;
  const std::vector<T>& v0 = history.v;
  const auto kv_heads = static_cast<std::size_t>(c.kv_head_count());
  const auto dim = static_cast<std::size_t>(c.head_dim());
  const auto bs = static_cast<std::size_t>(c.kv_block_size);
  const auto restore = [&] { history.restore(decoder); };
  std::vector<TokenAt> steps;
  for (int r = 0; r < n; ++r) steps.push_back({.token = (7 * r + 3 * n) % c.vocab, .position = (53 * r + n) % 128});
  const std::vector<int> tables = shuffled_tables(n, width, c.kv_blocks, 17U + static_cast<unsigned>(n));
  const auto table_of = [&](int r) {
    return std::span<const int>(tables).subspan(static_cast<std::size_t>(r * width), static_cast<std::size_t>(width));
  };
  restore();
  const std::vector<int> wide = decoder.forward_batch(steps, tables);
  REQUIRE(wide.size() == static_cast<std::size_t>(n));
  std::vector<std::vector<double>> wide_logits;
  for (int r = 0; r < n; ++r) wide_logits.push_back(lgtest::widened(decoder.logits(r)));
  const std::vector<T> k1 = lgtest::to_host(lgtest::stream(), decoder.k_cache().as_const());
  const std::vector<T> v1 = lgtest::to_host(lgtest::stream(), decoder.v_cache().as_const());
  restore();
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    const std::vector<int> alone =
        decoder.forward_batch(std::span<const TokenAt>(steps).subspan(static_cast<std::size_t>(r), 1), table_of(r));
    const std::vector<double> want = lgtest::widened(decoder.logits(0));
    const double err = relative_error(wide_logits[static_cast<std::size_t>(r)], want);
    CAPTURE(err);
    CHECK(err < tolerance<T>);
    ++judged;
    if (clear_margin(want, tolerance<T>)) {
      ++clear;
      CHECK(wide[static_cast<std::size_t>(r)] == alone[0]);
    }
  }
  const std::vector<T> k2 = lgtest::to_host(lgtest::stream(), decoder.k_cache().as_const());
  const std::vector<T> v2 = lgtest::to_host(lgtest::stream(), decoder.v_cache().as_const());
  // Each row's appended vectors (every layer and kv head): the wide step's against the 1-row step's.
  std::vector<bool> appended(k0.size(), false);
  double worst = 0;
  for (std::size_t l = 0; l < static_cast<std::size_t>(c.layers); ++l) {
    for (int r = 0; r < n; ++r) {
      const auto p = static_cast<std::size_t>(steps[static_cast<std::size_t>(r)].position);
      const auto block = static_cast<std::size_t>(table_of(r)[p / bs]);
      for (std::size_t g = 0; g < kv_heads; ++g) {
        const std::size_t at =
            (((l * static_cast<std::size_t>(c.kv_blocks) + block) * kv_heads + g) * bs + p % bs) * dim;
        std::vector<double> kw;
        std::vector<double> kg;
        std::vector<double> vw;
        std::vector<double> vg;
        for (std::size_t i = 0; i < dim; ++i) {
          appended[at + i] = true;
          kw.push_back(k2[at + i].to_float());
          kg.push_back(k1[at + i].to_float());
          vw.push_back(v2[at + i].to_float());
          vg.push_back(v1[at + i].to_float());
        }
        worst = std::max({worst, relative_error(kg, kw), relative_error(vg, vw)});
      }
    }
  }
  CAPTURE(worst);
  CHECK(worst < tolerance<T>);
  std::size_t touched = 0;
  std::size_t missed = 0;
  for (std::size_t i = 0; i < k0.size(); ++i) {
    if (appended[i]) {
      missed += k1[i].bits == k0[i].bits && v1[i].bits == v0[i].bits ? 1 : 0;  // random history: never equal
    } else {
      touched += k1[i].bits != k0[i].bits || v1[i].bits != v0[i].bits ? 1 : 0;
      touched += k2[i].bits != k0[i].bits || v2[i].bits != v0[i].bits ? 1 : 0;
    }
  }
  CHECK(touched == 0);
  CHECK(missed < dim);  // an appended value equal to the random one it replaced is rare; a row not written is not
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE_TEMPLATE(
      "a wide step of 9 16 33 100 and 256 rows gives each row the logits and the appended keys and values of the row "
      "stepped alone within rounding",
      T, half, bfloat16) {
    // One decoder of max_batch 256 and one pool of random history; for each N, check_wide_against_alone.
    std::string why;
    if (!wide_step_available(lgtest::device().compute_capability(), &why)) {
      MESSAGE("skipped: " << why);
      return;
    }
    BasicDecoder<T> decoder(lgtest::stream(), lgtest::nn_kernels(), wide_config(256));
    const RandomHistory<T> history(decoder);
    int judged = 0;
    int clear = 0;
    for (const int n : {9, 16, 33, 100, 256}) check_wide_against_alone(decoder, history, n, judged, clear);
    MESSAGE(clear << " of " << judged << " rows had a clear top-two margin (their next tokens compared)");
    // A bucket is captured when a step first needs it, once: N = 9 and 16 share 16, 33 takes 64, and 32 is never
    // captured. Each says what its capture took.
    const std::vector<WideBucketReport> report = decoder.wide_step_report();
    std::vector<int> captured;
    for (const WideBucketReport& b : report) captured.push_back(b.rows);
    CHECK(captured == std::vector<int>{16, 64, 128, 256});
    for (const WideBucketReport& b : report) {
      CAPTURE(b.rows);
      CHECK(b.capture_seconds > 0);
      MESSAGE("bucket " << b.rows << ": captured in " << b.capture_seconds * 1e3 << " ms, graph " << b.graph_bytes
                        << " bytes, GEMM workspaces " << b.gemm_workspace_bytes << " bytes");
    }
  }

  TEST_CASE_TEMPLATE(
      "a wide step of a block with biases post-norms GeGLU soft-capping a scaled embedding sliding layers and split "
      "attention gives each row what it gets stepped alone within rounding",
      T, half, bfloat16) {
    // Gemma 3's block features and Qwen2's biases, as the wide step's kernels and gemm_layer run them: layer 0 sliding
    // (a window of 40, its own RoPE table), layer 1 global; 20 and 64 rows. Attention split in 4 (attend_split, which
    // the wide step takes where paged_attention_splits splits, e.g. 16 rows of the 1B shape at 4096 positions): its
    // partials and counters sized for the buckets, the counters back at zero for the next layer and the next replay.
    std::string why;
    if (!wide_step_available(lgtest::device().compute_capability(), &why)) {
      MESSAGE("skipped: " << why);
      return;
    }
    DecoderConfig c = wide_config(64);
    c.qkv_bias = true;
    c.post_norms = true;
    c.activation = GateActivation::gelu_tanh;
    c.logit_softcap = 30.0F;
    c.embedding_scale = 16.0F;
    c.attention_scale = 0.1F;
    c.window = 40;
    c.sliding = {true, false};
    c.local_theta = 10000.0F;
    c.theta = 1000000.0F;
    c.attention_blocks = 4;  // 32 positions a split: rows up to position 127 use all four
    BasicDecoder<T> decoder(lgtest::stream(), lgtest::nn_kernels(), c);
    const RandomHistory<T> history(decoder);
    int judged = 0;
    int clear = 0;
    for (const int n : {20, 64}) check_wide_against_alone(decoder, history, n, judged, clear);
    MESSAGE(clear << " of " << judged << " rows had a clear top-two margin (their next tokens compared)");
  }

  TEST_CASE_TEMPLATE(
      "a wide step of a mixture of experts and of q/k norms gives each row what it gets stepped alone within rounding",
      T, half, bfloat16) {
    // The experts as grouped products over the rows that chose them (nn/prefill_moe.hpp) against the step's expert
    // kernels; every expert chosen (top 8 of 8, renormalized: the wide step's router GEMM takes experts in multiples of
    // 8), so that no near tie between two experts can route a row otherwise on the two paths, and 100 rows: 100 of an
    // expert, two tiles each. q/k norms through PagedAttention::qk_norm_rope_append: each head's (Qwen3-MoE's block),
    // or the whole q's and k's (OLMoE's).
    std::string why;
    if (!wide_step_available(lgtest::device().compute_capability(), &why)) {
      MESSAGE("skipped: " << why);
      return;
    }
    DecoderConfig c = wide_config(100);
    c.moe = {.experts = 8, .experts_per_token = 8, .expert_width = 64, .normalize = true};
    c.qk_norm = true;
    SUBCASE("a mixture of experts with q/k norms of each head") {}
    SUBCASE("a mixture of experts with q/k norms over the whole projection") { c.qk_norm_whole = true; }
    SUBCASE("q/k norms of each head and a dense MLP") { c.moe = {}; }
    CAPTURE(c.qk_norm_whole);
    CAPTURE(c.moe.experts);
    BasicDecoder<T> decoder(lgtest::stream(), lgtest::nn_kernels(), c);
    const RandomHistory<T> history(decoder);
    int judged = 0;
    int clear = 0;
    for (const int n : {9, 100}) check_wide_against_alone(decoder, history, n, judged, clear);
    MESSAGE(clear << " of " << judged << " rows had a clear top-two margin (their next tokens compared)");
  }

  TEST_CASE_TEMPLATE("a wide step's graph replays new tokens positions and tables without a capture", T, half,
                     bfloat16) {
    // Two steps of 20 rows with other tokens, positions and tables: one bucket captured, and the second step's logits
    // are those of its rows alone (so nothing of the first step's inputs stayed in the graph).
    std::string why;
    if (!wide_step_available(lgtest::device().compute_capability(), &why)) {
      MESSAGE("skipped: " << why);
      return;
    }
    const DecoderConfig c = wide_config(32);
    BasicDecoder<T> decoder(lgtest::stream(), lgtest::nn_kernels(), c);
    const int width = decoder.table_width();
    for (const unsigned seed : {1U, 2U}) {
      CAPTURE(seed);
      std::vector<TokenAt> steps;
      for (int r = 0; r < 20; ++r) {
        steps.push_back({.token = static_cast<int>((11 * r + 5 * seed) % 512), .position = static_cast<int>(seed) + r});
      }
      const std::vector<int> tables = shuffled_tables(20, width, c.kv_blocks, seed);
      const std::vector<int> wide = decoder.forward_batch(steps, tables);
      std::vector<std::vector<double>> wide_logits;
      for (int r = 0; r < 20; ++r) wide_logits.push_back(lgtest::widened(decoder.logits(r)));
      for (int r = 0; r < 20; ++r) {
        CAPTURE(r);
        (void)decoder.forward_batch(
            std::span<const TokenAt>(steps).subspan(static_cast<std::size_t>(r), 1),
            std::span<const int>(tables).subspan(static_cast<std::size_t>(r * width), static_cast<std::size_t>(width)));
        CHECK(relative_error(wide_logits[static_cast<std::size_t>(r)], lgtest::widened(decoder.logits(0))) <
              tolerance<T>);
      }
    }
    CHECK(decoder.wide_step_report().size() == 1);
    decoder.capture_wide_steps();  // the rest at once: 16 and 32 rows
    CHECK(decoder.wide_step_report().size() == 2);
    decoder.set_sampling(decoder.sampling());  // drops the graphs, and so their report
    CHECK(decoder.wide_step_report().empty());
  }

  TEST_CASE_TEMPLATE(
      "a wide step of quantized weights gives each row what it gets stepped alone within rounding, and quantized "
      "experts and a GPU without the wide step are refused by name",
      T, half, bfloat16) {
    // The GEMMs read each quantized matrix dequantized into the layer buffers' scratch (gemm_operand), the LM head's
    // too; the rows alone run the narrow paged step on the quantized kernels (q, k and v through s.qkv and
    // PagedAttention::rope_append): int8 attention, int4 MLP with zero points, int8 LM head. Quantized experts are
    // refused by name (the wide step would dequantize every stack at every step).
    DecoderConfig c = wide_config(64);
    std::string why;
    if (!wide_step_available(lgtest::device().compute_capability(), &why)) {
      CHECK_THROWS_WITH_AS(Decoder(lgtest::stream(), lgtest::nn_kernels(), c),
                           doctest::Contains("runs steps of more than 8 rows as the wide step"), UsageError);
      return;
    }
    const BasicKernels<T> k(lgtest::nn_kernels());
    {
      DecoderConfig moe = c;
      moe.moe = {.experts = 8, .experts_per_token = 2, .expert_width = 128, .normalize = true};
      DecoderQuantization experts;
      experts.mlp = QuantizedFormat{WeightFormat::fp8_block, 128, false, scale_type_of<T>};
      CHECK_THROWS_WITH_AS(
          BasicDecoder<T>(
              lgtest::stream(), lgtest::nn_kernels(), moe,
              quantize_decoder_weights(lgtest::stream(), BasicDecoderWeights<T>::generate(lgtest::stream(), k, moe),
                                       moe, experts)),
          doctest::Contains("whose grouped products read dense experts"), UsageError);
    }
    DecoderQuantization q;
    q.attention = lgtest::int8(scale_type_of<T>);
    q.mlp = lgtest::int4(32, true, scale_type_of<T>);
    q.lm_head = lgtest::int8(scale_type_of<T>);
    BasicDecoderWeights<T> weights =
        quantize_decoder_weights(lgtest::stream(), BasicDecoderWeights<T>::generate(lgtest::stream(), k, c), c, q);
    CHECK(wide_dequantized_elements(weights) > 0);
    BasicDecoder<T> decoder(lgtest::stream(), lgtest::nn_kernels(), c, std::move(weights));
    const RandomHistory<T> history(decoder);
    int judged = 0;
    int clear = 0;
    for (const int n : {9, 64}) check_wide_against_alone(decoder, history, n, judged, clear);
    MESSAGE(clear << " of " << judged << " rows had a clear top-two margin (their next tokens compared)");
  }

  TEST_CASE_TEMPLATE(
      "the engine steps 48 requests at once over a paged decoder of max_batch 64 greedy and sampled giving each all "
      "its tokens and returning every block",
      T, half, bfloat16) {
    std::string why;
    if (!wide_step_available(lgtest::device().compute_capability(), &why)) {
      MESSAGE("skipped: " << why);
      return;
    }
    DecoderConfig c = wide_config(64);
    c.kv_blocks = 64 * 4;  // 64 sequences of up to 64 positions
    BasicDecoder<T> decoder(lgtest::stream(), lgtest::nn_kernels(), c);
    std::map<RequestId, std::vector<int>> made;
    std::map<RequestId, int> wanted;
    {
      BasicDecoderStepModel<T> model(decoder);
      Engine engine(model, {.kv_blocks = 0, .block_size = 16, .max_queue = 64});
      for (int i = 0; i < 48; ++i) {
        GenerationRequest r;
        for (int t = 0; t <= (i * 3) % 11; ++t) r.prompt.push_back((i * 89 + t * 37) % c.vocab);
        r.max_tokens = 20 + i % 7;
        if (i % 3 == 1) {  // drawn on the host from the row's logits of the wide step (DecoderStepModel::sampled)
          r.sampling = {.temperature = 0.8F, .top_k = 20, .seed = static_cast<std::uint32_t>(i)};
        }
        r.on_event = [&](const GenerationEvent& e) {
          if (e.token.has_value()) made[e.id].push_back(*e.token);
        };
        const int max_tokens = r.max_tokens;
        const std::optional<RequestId> id = engine.submit(std::move(r));
        REQUIRE(id.has_value());
        wanted[*id] = max_tokens;
      }
      int most = 0;
      while (engine.step()) most = std::max(most, engine.stats().running);
      CHECK(most == 48);
      CHECK(engine.pool().used_blocks() == 0);
      CHECK(engine.pool().sequences() == 0);
      CHECK(engine.stats().preemptions == 0);
    }
    CHECK_FALSE(decoder.wide_step_report().empty());  // the steps of 48 rows ran wide
    for (const auto& [id, n] : wanted) {
      CAPTURE(id);
      CHECK(made[id].size() == static_cast<std::size_t>(n));
    }
  }
}
