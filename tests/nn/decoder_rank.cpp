// A tensor-parallel rank of the decoder (nn/decoder_rank.hpp): how a config splits and which part of each tensor a
// rank holds (host); on the GPU, the ranks' shares of the seeded weights put back together give the whole, and a
// rank of one runs every path of the Decoder (steps, batches, prompts, generate, sampling, bf16, biases) with the
// single-GPU Decoder's bits.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn.hpp>
#include <lazygraph/nn/prefill.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "common/gpu.hpp"
#include "common/nccl.hpp"
#include "common/nn.hpp"
#include "common/small_decoder.hpp"

namespace lg = lazygraph;
using lg::half;

TEST_CASE("a decoder splits over ranks that divide its heads, kv heads and vocab and cut ffn into multiples of 8") {
  lg::nn::DecoderConfig c = lgtest::small_decoder(2);  // 4 heads, 2 kv heads, vocab 512, ffn 256
  CHECK_NOTHROW(lg::nn::check_tensor_split(c, 1));
  CHECK_NOTHROW(lg::nn::check_tensor_split(c, 2));
  CHECK_THROWS_WITH_AS(lg::nn::check_tensor_split(c, 4), doctest::Contains("kv heads 2 do not divide"), lg::UsageError);
  CHECK_THROWS_WITH_AS(lg::nn::check_tensor_split(c, 3), doctest::Contains("heads 4 do not divide"), lg::UsageError);
  CHECK_THROWS_WITH_AS(lg::nn::check_tensor_split(c, 0), doctest::Contains("at least one rank"), lg::UsageError);
  c.kv_heads = 0;
  c.vocab = 513;
  CHECK_THROWS_WITH_AS(lg::nn::check_tensor_split(c, 2), doctest::Contains("vocab 513 does not divide"),
                       lg::UsageError);
  c = lgtest::small_decoder();
  c.ffn = 264;  // 132 per rank: not a multiple of 8
  CHECK_THROWS_WITH_AS(lg::nn::check_tensor_split(c, 2), doctest::Contains("ffn 264"), lg::UsageError);
  c = lgtest::small_decoder(0, 4);  // batches split too
  CHECK_NOTHROW(lg::nn::check_tensor_split(c, 4));
  c.backend = lg::nn::DecoderBackend::persistent;
  CHECK_THROWS_WITH_AS(lg::nn::check_tensor_split(c, 2), doctest::Contains("graph backend"), lg::UsageError);
}

TEST_CASE("a rank's shapes are its share of heads, kv heads, ffn and vocabulary; each tensor's rows or columns") {
  lg::nn::DecoderConfig c = lgtest::small_decoder(2, 3);
  c.qkv_bias = true;
  const lg::nn::DecoderConfig s = lg::nn::shard_config(c, 2);
  CHECK(s.heads == 2);
  CHECK(s.kv_head_count() == 1);
  CHECK(s.head_dim() == c.head_dim());
  CHECK(s.ffn == 128);
  CHECK(s.vocab == 256);
  CHECK(s.d == c.d);
  CHECK(s.max_batch == 3);
  CHECK(s.context == c.context);
  const std::size_t hd = static_cast<std::size_t>(c.head_dim());
  for (const lg::nn::DecoderTensor& t : lg::nn::decoder_tensors(c)) {
    CAPTURE(t.name);
    const lg::nn::TensorShard first = lg::nn::tensor_shard(t, c, 1, 2);
    switch (t.role) {
      case lg::nn::DecoderTensorRole::embedding:
      case lg::nn::DecoderTensorRole::lm_head:
        CHECK((!first.columns && first.first == 256 && first.count == 256));
        break;
      case lg::nn::DecoderTensorRole::wq:
      case lg::nn::DecoderTensorRole::bq:
        CHECK((!first.columns && first.first == 2 * hd && first.count == 2 * hd));
        break;
      case lg::nn::DecoderTensorRole::wk:
      case lg::nn::DecoderTensorRole::wv:
      case lg::nn::DecoderTensorRole::bk:
      case lg::nn::DecoderTensorRole::bv:
        CHECK((!first.columns && first.first == hd && first.count == hd));
        break;
      case lg::nn::DecoderTensorRole::wo:
        CHECK((first.columns && first.first == 2 * hd && first.count == 2 * hd));
        break;
      case lg::nn::DecoderTensorRole::w1:
      case lg::nn::DecoderTensorRole::w3:
        CHECK((!first.columns && first.first == 128 && first.count == 128));
        break;
      case lg::nn::DecoderTensorRole::w2:
        CHECK((first.columns && first.first == 128 && first.count == 128));
        break;
      default:  // the gains: whole on every rank
        CHECK((!first.columns && first.first == 0 && first.count == static_cast<std::size_t>(t.rows)));
    }
  }
  const lg::nn::DecoderTensor& embedding = lg::nn::decoder_tensors(c).front();
  CHECK_THROWS_WITH_AS((void)lg::nn::tensor_shard(embedding, c, 2, 2), doctest::Contains("rank 2 is outside"),
                       lg::UsageError);
}

namespace {
template <class T>
std::vector<T> host(lg::DeviceSpan<const T> d) {
  std::vector<T> out(d.size());
  lg::copy(std::span<T>(out), d).sync_on(lgtest::stream());
  return out;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].bits != b[i].bits) return false;
  }
  return true;
}

/// The seeded weights of `c`, quantized on the device as `q` says.
template <class T>
lg::nn::BasicDecoderWeights<T> quantized_weights(const lg::nn::DecoderConfig& c, const lg::nn::DecoderQuantization& q) {
  const lg::nn::DeviceQuantizer quantizer(lgtest::nn_kernels());
  return lg::nn::quantize_decoder_weights(
      lgtest::stream(), quantizer,
      lg::nn::BasicDecoderWeights<T>::generate(lgtest::stream(), lg::nn::BasicKernels<T>(lgtest::nn_kernels()), c), c,
      q);
}

/// The 1-rank tensor-parallel decoder and the Decoder of `c` (its seeded weights, quantized as `q` says) give the same
/// tokens and logits bits on every path.
template <class T>
void check_one_rank_paths(const lg::nn::DecoderConfig& c, const lg::nn::DecoderQuantization& q = {}) {
  const std::vector<lg::Communicator> comms = lg::Communicator::create_all(std::vector<lg::Device>{lgtest::device()});
  const std::vector<const lg::KernelLibrary*> libraries{&lgtest::nn_kernels()};
  const auto tp_of = [&] {
    if (!q.any()) return lg::nn::BasicTensorParallelDecoder<T>(comms, libraries, c);
    std::vector<lg::nn::BasicDecoderWeights<T>> shares;
    shares.push_back(lg::nn::shard_decoder_weights(lgtest::stream(), quantized_weights<T>(c, q), c, 0, 1));
    return lg::nn::BasicTensorParallelDecoder<T>(comms, libraries, c, std::move(shares));
  };
  lg::nn::BasicTensorParallelDecoder<T> tp = tp_of();
  lg::nn::BasicDecoder<T> one =
      q.any() ? lg::nn::BasicDecoder<T>(lgtest::stream(), lgtest::nn_kernels(), c, quantized_weights<T>(c, q))
              : lg::nn::BasicDecoder<T>(lgtest::stream(), lgtest::nn_kernels(), c);
  REQUIRE(tp.rank(0).communicator() != nullptr);
  CHECK(one.communicator() == nullptr);
  int token = 7;
  for (int position = 0; position < 6; ++position) {  // steps
    CAPTURE(position);
    const int got = tp.forward({token, position});
    REQUIRE(got == one.forward({token, position}));
    REQUIRE(same_bits(tp.logits(), one.logits()));
    token = got;
  }
  if (c.max_batch >= 3) {  // a batch of three sequences, each at its own position
    const std::vector<lg::nn::TokenAt> rows{{3, 0}, {40, 1}, {511 % c.vocab, 2}};
    const std::vector<int> got = tp.forward_batch(rows);
    CHECK(got == one.forward_batch(rows));
    for (int r = 0; r < 3; ++r) REQUIRE(same_bits(tp.logits(r), one.logits(r)));
  }
  std::vector<int> prompt;
  for (int i = 0; i < 19; ++i) prompt.push_back((i * 37 + 11) % c.vocab);
  // On tensor cores where the config allows (16 rows, then 3 through the step graphs), else 8 rows at a time.
  CHECK(tp.rank(0).prefill_fallback_reason() == one.prefill_fallback_reason());
  CHECK(tp.prefill(prompt) == one.prefill(prompt));
  REQUIRE(same_bits(tp.logits(), one.logits()));
  CHECK(tp.generate(5, 12, -1, 19) == one.generate(5, 12, -1, 19));
  REQUIRE(same_bits(tp.logits(), one.logits()));
  const lg::nn::Sampling sampling{.temperature = 0.8F, .top_k = 40, .seed = 99U};
  tp.set_sampling(sampling);
  one.set_sampling(sampling);
  CHECK(tp.generate(9, 10, -1, 31) == one.generate(9, 10, -1, 31));
  CHECK(tp.forward({4, 41}) == one.forward({4, 41}));
  REQUIRE(same_bits(tp.logits(), one.logits()));
  CHECK_THROWS_AS(tp.forward({c.vocab, 0}), lg::UsageError);
  CHECK_THROWS_AS((void)tp.rank(0).step_op(), lg::UsageError);
}
}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("the ranks' shares of the seeded weights put back together are the whole weights") {
    lg::nn::DecoderConfig c = lgtest::small_decoder(2);
    c.qkv_bias = true;
    const lg::nn::DecoderWeights full =
        lg::nn::DecoderWeights::generate(lgtest::stream(), lg::nn::Kernels(lgtest::nn_kernels()), c);
    std::vector<lg::nn::DecoderWeights> shares;
    for (int r = 0; r < 2; ++r) shares.push_back(lg::nn::shard_decoder_weights(lgtest::stream(), full, c, r, 2));
    const auto d = static_cast<std::size_t>(c.d);
    // Rows: the embedding, the LM head, W1, q (and its bias): rank 0's rows, then rank 1's.
    const auto rows = [&](lg::DeviceSpan<const half> whole, lg::DeviceSpan<const half> a,
                          lg::DeviceSpan<const half> b) {
      std::vector<half> joined = host(a);
      const std::vector<half> second = host(b);
      joined.insert(joined.end(), second.begin(), second.end());
      return same_bits(joined, host(whole));
    };
    CHECK(rows(full.embedding.cview(), shares[0].embedding.cview(), shares[1].embedding.cview()));
    CHECK(rows(full.lm_head.dense(), shares[0].lm_head.dense(), shares[1].lm_head.dense()));
    const lg::nn::DecoderConfig s = lg::nn::shard_config(c, 2);
    for (std::size_t l = 0; l < 2; ++l) {
      CAPTURE(l);
      CHECK(rows(full.attention[l].wq(c).dense(), shares[0].attention[l].wq(s).dense(),
                 shares[1].attention[l].wq(s).dense()));
      CHECK(rows(full.attention[l].wk(c).dense(), shares[0].attention[l].wk(s).dense(),
                 shares[1].attention[l].wk(s).dense()));
      CHECK(rows(full.attention[l].bias_part(c, 2), shares[0].attention[l].bias_part(s, 2),
                 shares[1].attention[l].bias_part(s, 2)));
      CHECK(rows(full.mlp[l].w3.dense(), shares[0].mlp[l].w3.dense(), shares[1].mlp[l].w3.dense()));
      CHECK(same_bits(host(full.mlp[l].gain.cview()), host(shares[1].mlp[l].gain.cview())));
      // Columns: W2's row i is rank 0's row i, then rank 1's.
      const std::vector<half> whole = host(full.mlp[l].w2.dense());
      const std::vector<half> a = host(shares[0].mlp[l].w2.dense());
      const std::vector<half> b = host(shares[1].mlp[l].w2.dense());
      const std::size_t f = 128;
      bool columns = true;
      for (std::size_t i = 0; i < d; ++i) {
        for (std::size_t j = 0; j < f; ++j) {
          columns = columns && whole[i * 2 * f + j].bits == a[i * f + j].bits &&
                    whole[i * 2 * f + f + j].bits == b[i * f + j].bits;
        }
      }
      CHECK(columns);
    }
    CHECK_THROWS_WITH_AS((void)lg::nn::shard_decoder_weights(lgtest::stream(), full, c, 0, 3),
                         doctest::Contains("heads 4 do not divide"), lg::UsageError);
  }

  TEST_CASE("the ranks' shares of a mixture of experts put back together are its experts, its router whole") {
    lg::nn::DecoderConfig c = lgtest::small_decoder(2);
    c.moe = {4, 2, 64, true};
    const lg::nn::DecoderWeights full =
        lg::nn::DecoderWeights::generate(lgtest::stream(), lg::nn::Kernels(lgtest::nn_kernels()), c);
    std::vector<lg::nn::DecoderWeights> shares;
    for (int r = 0; r < 2; ++r) shares.push_back(lg::nn::shard_decoder_weights(lgtest::stream(), full, c, r, 2));
    const auto d = static_cast<std::size_t>(c.d);
    const std::size_t width = 64;
    const std::size_t half_width = 32;
    for (std::size_t l = 0; l < 2; ++l) {
      CAPTURE(l);
      CHECK(same_bits(host(full.moe[l].router.cview()), host(shares[1].moe[l].router.cview())));
      for (const bool up : {false, true}) {  // W1 and W3: expert e's rows [r 32, (r + 1) 32) of its 64
        const std::vector<half> whole = host((up ? full.moe[l].w3 : full.moe[l].w1).dense());
        bool split = true;
        for (int r = 0; r < 2; ++r) {
          const auto& share =
              up ? shares[static_cast<std::size_t>(r)].moe[l].w3 : shares[static_cast<std::size_t>(r)].moe[l].w1;
          const std::vector<half> part = host(share.dense());
          REQUIRE(part.size() == 4 * half_width * d);
          for (std::size_t e = 0; e < 4; ++e) {
            for (std::size_t i = 0; i < half_width * d; ++i) {
              split = split && part[e * half_width * d + i].bits ==
                                   whole[e * width * d + static_cast<std::size_t>(r) * half_width * d + i].bits;
            }
          }
        }
        CHECK(split);
      }
      // W2: expert e's row i holds rank 0's 32 columns, then rank 1's.
      const std::vector<half> whole = host(full.moe[l].w2.dense());
      bool columns = true;
      for (int r = 0; r < 2; ++r) {
        const std::vector<half> part = host(shares[static_cast<std::size_t>(r)].moe[l].w2.dense());
        REQUIRE(part.size() == 4 * d * half_width);
        for (std::size_t row = 0; row < 4 * d; ++row) {
          for (std::size_t j = 0; j < half_width; ++j) {
            columns = columns && part[row * half_width + j].bits ==
                                     whole[row * width + static_cast<std::size_t>(r) * half_width + j].bits;
          }
        }
      }
      CHECK(columns);
    }
  }

  TEST_CASE("a rank of one runs every path of the Decoder with its bits") {
    if (!lgtest::have_nccl()) return;
    lg::nn::DecoderConfig c = lgtest::small_decoder(2, 3);
    c.prefill_chunk = 0;  // the Decoder's prompts through the step graphs too, as a rank's
    SUBCASE("fp16, GQA, a batch of three") { check_one_rank_paths<half>(c); }
    SUBCASE("fp16, q/k/v biases, split attention, llama3 RoPE") {
      c.qkv_bias = true;
      c.attention_blocks = 4;
      c.rope_scaling = {.type = lg::nn::RopeType::llama3,
                        .factor = 8,
                        .low_freq_factor = 1,
                        .high_freq_factor = 4,
                        .original_max_position_embeddings = 32};
      check_one_rank_paths<half>(c);
    }
    SUBCASE("bf16") { check_one_rank_paths<lg::bfloat16>(c); }
    SUBCASE("prompts on tensor cores: head_dim 64, chunks of 16 rows") {
      c.heads = 2;
      c.kv_heads = 1;
      c.prefill_chunk = 16;
      std::string why;
      if (!lg::nn::prefill_on_tensor_cores(c, lgtest::device().compute_capability(), &why)) {
        MESSAGE("skipped: " << why);
        return;
      }
      check_one_rank_paths<half>(c);
      check_one_rank_paths<lg::bfloat16>(c);
    }
    SUBCASE("unfused attention") {
      c.fused = false;
      check_one_rank_paths<half>(c);
    }
    SUBCASE("Qwen3's q/k norms, a window of 8 on the second layer") {
      c.qk_norm = true;
      c.window = 8;
      c.sliding = {false, true};
      check_one_rank_paths<half>(c);
      check_one_rank_paths<lg::bfloat16>(c);
    }
    SUBCASE("Gemma 3's block: GeGLU, post-norms, scaled embedding and scores, soft-capping, local RoPE") {
      c.qk_norm = true;
      c.activation = lg::nn::GateActivation::gelu_tanh;
      c.post_norms = true;
      c.embedding_scale = std::sqrt(static_cast<float>(c.d));
      c.attention_scale = 0.125F;
      c.logit_softcap = 30.0F;
      c.window = 8;
      c.sliding = {true, false};
      c.local_theta = 10000.0F;
      c.theta = 1e6F;
      check_one_rank_paths<half>(c);
      check_one_rank_paths<lg::bfloat16>(c);
      c.heads = 2;  // head_dim 64: prompts on tensor cores, where the GPU has them
      c.kv_heads = 1;
      c.prefill_chunk = 16;
      if (lg::nn::prefill_on_tensor_cores(c, lgtest::device().compute_capability())) check_one_rank_paths<half>(c);
    }
    SUBCASE(
        "a mixture of experts: Qwen3-MoE's routing and q/k norms, dense and int8 experts; its prompts on tensor "
        "cores") {
      c.moe = {8, 2, 64, true};
      c.qk_norm = true;
      check_one_rank_paths<half>(c);
      check_one_rank_paths<lg::bfloat16>(c);
      lg::nn::DecoderQuantization experts;
      experts.mlp = lg::nn::QuantizedFormat{.kind = lg::nn::WeightFormat::int8_channel};
      check_one_rank_paths<half>(c, experts);
      c.heads = 2;  // head_dim 64: prompts on tensor cores (the grouped products), where the GPU has them
      c.kv_heads = 1;
      c.prefill_chunk = 16;
      if (lg::nn::prefill_on_tensor_cores(c, lgtest::device().compute_capability())) {
        check_one_rank_paths<half>(c);
        check_one_rank_paths<lg::bfloat16>(c);
      }
    }
    SUBCASE("quantized weights: int8 attention, int4 MLP, int4 LM head with zero points; bf16 int4 g64") {
      lg::nn::DecoderQuantization q;
      q.attention = lg::nn::QuantizedFormat{.kind = lg::nn::WeightFormat::int8_channel};
      q.mlp = lg::nn::QuantizedFormat{.kind = lg::nn::WeightFormat::int4_group, .group = 32};
      q.lm_head = lg::nn::QuantizedFormat{.kind = lg::nn::WeightFormat::int4_group, .group = 128, .asymmetric = true};
      check_one_rank_paths<half>(c, q);
      lg::nn::DecoderQuantization b;
      b.attention = b.mlp = lg::nn::QuantizedFormat{
          .kind = lg::nn::WeightFormat::int4_group, .group = 64, .scale_type = lg::nn::ScaleType::bf16};
      check_one_rank_paths<lg::bfloat16>(c, b);
    }
  }

  TEST_CASE("the ranks' shares of quantized weights dequantize to the parts of the whole model's") {
    lg::nn::DecoderConfig c = lgtest::small_decoder(2);
    c.qkv_bias = true;
    lg::nn::DecoderQuantization q;
    q.attention = lg::nn::QuantizedFormat{.kind = lg::nn::WeightFormat::int4_group, .group = 32, .asymmetric = true};
    q.mlp = lg::nn::QuantizedFormat{.kind = lg::nn::WeightFormat::int8_channel};
    q.lm_head = lg::nn::QuantizedFormat{.kind = lg::nn::WeightFormat::int8_channel};
    const lg::nn::DecoderWeights full = quantized_weights<half>(c, q);
    const lg::nn::DecoderConfig s = lg::nn::shard_config(c, 2);
    std::vector<lg::nn::DecoderWeights> shares;
    for (int r = 0; r < 2; ++r) shares.push_back(lg::nn::shard_decoder_weights(lgtest::stream(), full, c, r, 2));
    const auto host_matrix = [](const lg::nn::Weight<half>& w) {
      REQUIRE_FALSE(w.is_dense());
      return w.quantized().download(lgtest::stream());
    };
    // Element (row, col) of rank r's share is element (to_row(r, row), to_col(r, col)) of the whole.
    const auto same = [&](const lg::nn::QuantizedWeight& whole, int r, const lg::nn::QuantizedWeight& share,
                          const auto& to_row, const auto& to_col) {
      bool equal = true;
      for (int i = 0; i < share.layout().rows(); ++i) {
        for (int j = 0; j < share.layout().cols(); ++j) {
          equal = equal && share.dequantized(i, j) == whole.dequantized(to_row(r, i), to_col(r, j));
        }
      }
      return equal;
    };
    const auto same_col = [](int, int j) { return j; };
    const auto same_row = [](int, int i) { return i; };
    const int q_dim = c.q_dim();
    const int kv_dim = c.kv_dim();
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      for (std::size_t l = 0; l < 2; ++l) {
        CAPTURE(l);
        const lg::nn::AttentionWeights& a = full.attention[l];
        const lg::nn::AttentionWeights& ra = shares[static_cast<std::size_t>(r)].attention[l];
        // q, k and v stacked: the rank's q rows, then its k rows, then its v rows.
        const auto qkv_row = [&](int rank, int i) {
          if (i < s.q_dim()) return rank * s.q_dim() + i;
          if (i < s.q_dim() + s.kv_dim()) return q_dim + rank * s.kv_dim() + (i - s.q_dim());
          return q_dim + kv_dim + rank * s.kv_dim() + (i - s.q_dim() - s.kv_dim());
        };
        CHECK(same(host_matrix(a.qkv), r, host_matrix(ra.qkv), qkv_row, same_col));
        CHECK(same(host_matrix(a.wo), r, host_matrix(ra.wo), same_row,
                   [&](int rank, int j) { return rank * s.q_dim() + j; }));
        const auto ffn_row = [&](int rank, int i) { return rank * s.ffn + i; };
        const lg::nn::SwigluWeights& m = full.mlp[l];
        const lg::nn::SwigluWeights& rm = shares[static_cast<std::size_t>(r)].mlp[l];
        CHECK(same(host_matrix(m.w1), r, host_matrix(rm.w1), ffn_row, same_col));
        CHECK(same(host_matrix(m.w3), r, host_matrix(rm.w3), ffn_row, same_col));
        CHECK(same(host_matrix(m.w2), r, host_matrix(rm.w2), same_row, ffn_row));
        // The stacked biases: the rank's q, k and v parts.
        const std::vector<half> bias = host(a.bias.cview());
        const std::vector<half> mine = host(ra.bias.cview());
        REQUIRE(mine.size() == static_cast<std::size_t>(s.q_dim() + 2 * s.kv_dim()));
        bool biases = true;
        for (int i = 0; i < static_cast<int>(mine.size()); ++i) {
          biases =
              biases && mine[static_cast<std::size_t>(i)].bits == bias[static_cast<std::size_t>(qkv_row(r, i))].bits;
        }
        CHECK(biases);
      }
      CHECK(same(
          host_matrix(full.lm_head), r, host_matrix(shares[static_cast<std::size_t>(r)].lm_head),
          [&](int rank, int i) { return rank * s.vocab + i; }, same_col));
    }
  }

  TEST_CASE("the ranks' shares of quantized experts dequantize to the parts of the whole stacks") {
    lg::nn::DecoderConfig c = lgtest::small_decoder(2);
    c.moe = {4, 2, 256, true};  // each rank 128 rows of every expert: fp8's blocks of 128 whole
    for (const lg::nn::QuantizedFormat format :
         {lg::nn::QuantizedFormat{.kind = lg::nn::WeightFormat::int8_channel},
          lg::nn::QuantizedFormat{.kind = lg::nn::WeightFormat::int4_group, .group = 64, .asymmetric = true},
          lg::nn::QuantizedFormat{.kind = lg::nn::WeightFormat::fp8_block, .group = 128}}) {
      CAPTURE(lg::nn::format_name(format));
      lg::nn::DecoderQuantization q;
      q.mlp = format;
      const lg::nn::DecoderWeights full = quantized_weights<half>(c, q);
      const lg::nn::DecoderConfig s = lg::nn::shard_config(c, 2);
      const int width = c.moe.expert_width;
      const int part = s.moe.expert_width;
      for (int r = 0; r < 2; ++r) {
        CAPTURE(r);
        const lg::nn::DecoderWeights share = lg::nn::shard_decoder_weights(lgtest::stream(), full, c, r, 2);
        for (std::size_t l = 0; l < 2; ++l) {
          CAPTURE(l);
          const auto both = [&](const lg::nn::Weight<half>& whole_weight, const lg::nn::Weight<half>& share_weight,
                                const auto& to_row, const auto& to_col) {
            REQUIRE_FALSE(share_weight.is_dense());
            const lg::nn::QuantizedWeight whole = whole_weight.quantized().download(lgtest::stream());
            const lg::nn::QuantizedWeight mine = share_weight.quantized().download(lgtest::stream());
            bool equal = true;
            for (int i = 0; i < mine.layout().rows(); ++i) {
              for (int j = 0; j < mine.layout().cols(); ++j) {
                equal = equal && mine.dequantized(i, j) == whole.dequantized(to_row(i), to_col(j));
              }
            }
            return equal;
          };
          // W1 and W3: the rank's rows of each expert; W2: its columns of every expert's rows.
          const auto expert_row = [&](int i) { return (i / part) * width + r * part + i % part; };
          const auto same = [](int i) { return i; };
          CHECK(both(full.moe[l].w1, share.moe[l].w1, expert_row, same));
          CHECK(both(full.moe[l].w3, share.moe[l].w3, expert_row, same));
          CHECK(both(full.moe[l].w2, share.moe[l].w2, same, [&](int j) { return r * part + j; }));
        }
      }
    }
  }

  TEST_CASE("a rank refuses a quantization that does not split, and weights of the whole model") {
    if (!lgtest::have_nccl()) return;
    const lg::nn::DecoderConfig c = lgtest::small_decoder(2);
    const std::vector<lg::Communicator> comms = lg::Communicator::create_all(std::vector<lg::Device>{lgtest::device()});
    // A rank of one holds the whole model: weights of a two-way share are the wrong size for it.
    const lg::nn::DecoderWeights full =
        lg::nn::DecoderWeights::generate(lgtest::stream(), lg::nn::Kernels(lgtest::nn_kernels()), c);
    CHECK_THROWS_WITH_AS(
        lg::nn::Decoder(lgtest::stream(), lgtest::nn_kernels(), c,
                        lg::nn::shard_decoder_weights(lgtest::stream(), full, c, 0, 2), comms[0]),
        doctest::Contains("tensor model.embed_tokens.weight has 32768 elements, the config needs 65536"),
        lg::UsageError);
    // Each rank's 64 columns of Wo are not a group of 128; each rank's 260 rows of the LM head are not whole tiles.
    lg::nn::DecoderQuantization g128;
    g128.attention = lg::nn::QuantizedFormat{.kind = lg::nn::WeightFormat::int4_group, .group = 128};
    CHECK_THROWS_WITH_AS(
        (void)lg::nn::shard_decoder_weights(lgtest::stream(), quantized_weights<half>(c, g128), c, 0, 2),
        doctest::Contains("model.layers.0.self_attn.o_proj.weight"), lg::UsageError);
    lg::nn::DecoderConfig odd = c;
    odd.vocab = 520;
    lg::nn::DecoderQuantization head;
    head.lm_head = lg::nn::QuantizedFormat{.kind = lg::nn::WeightFormat::int8_channel};
    CHECK_THROWS_WITH_AS(
        (void)lg::nn::shard_decoder_weights(lgtest::stream(), quantized_weights<half>(odd, head), odd, 1, 2),
        doctest::Contains("each rank's 260 rows of it are not whole tiles of 16 rows"), lg::UsageError);
    CHECK_THROWS_WITH_AS(lg::nn::check_quantized_split(odd, head, 2), doctest::Contains("LM head quantized"),
                         lg::UsageError);
    CHECK_NOTHROW(lg::nn::check_quantized_split(odd, head, 1));
  }
}
