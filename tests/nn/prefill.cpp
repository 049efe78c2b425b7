// Decoder::prefill on tensor cores (nn/prefill.hpp): buckets, the io layout and the checks without a GPU; on a GPU the
// row-wise kernels of kernels/nn/prefill.cu against float64, and the decoder's prefill against the token-by-token path
// (logits within rounding, the same next token where the top-two margin is clear, decode continuing alike), against
// the float64 reference, with the padded rows of a bucket never touching the KV cache, and its UsageErrors before any
// GPU work, fp16 and bf16.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/decoder_tensors.hpp>
#include <lazygraph/nn/prefill.hpp>
#include <lazygraph/nn/reference.hpp>
#include "common/gpu.hpp"
#include "common/nn.hpp"
#include "common/small_decoder.hpp"

using namespace lazygraph;

namespace {

static_assert(nn::PrefillIo::start == nn::PrefillChunkLayout::start &&
                  nn::PrefillIo::rows == nn::PrefillChunkLayout::rows &&
                  nn::PrefillIo::slot == nn::PrefillChunkLayout::slot,
              "a prefill chunk's io starts with the chunk as flash attention reads it");

}  // namespace

TEST_CASE("prefill's buckets double from 16 up to the chunk, or to the smallest that holds a shorter context") {
  nn::DecoderConfig c;  // context 1024, prefill_chunk 2048
  CHECK(nn::prefill_buckets(c) == std::vector<int>{16, 32, 64, 128, 256, 512, 1024});
  c.prefill_chunk = 512;
  CHECK(nn::prefill_buckets(c) == std::vector<int>{16, 32, 64, 128, 256, 512});
  c.prefill_chunk = 64;
  CHECK(nn::prefill_buckets(c) == std::vector<int>{16, 32, 64});
  c.prefill_chunk = 16;
  CHECK(nn::prefill_buckets(c) == std::vector<int>{16});
  c.prefill_chunk = 0;
  CHECK(nn::prefill_buckets(c).empty());
  nn::DecoderConfig small = lgtest::small_decoder();  // context 64
  CHECK(nn::prefill_buckets(small) == std::vector<int>{16, 32, 64});
  small.context = 40;
  CHECK(nn::prefill_buckets(small) == std::vector<int>{16, 32, 64});
  small.context = 15;
  CHECK(nn::prefill_buckets(small).empty());
}

TEST_CASE(
    "prefill cuts a prompt into chunks of the largest bucket, a large rest at the bucket below it, a small one padded "
    "up, and leaves fewer than 16 rows to the step graphs") {
  const std::vector<int> up_to_2048{16, 32, 64, 128, 256, 512, 1024, 2048};
  CHECK(nn::prefill_chunk_rows(2048, up_to_2048) == std::vector<int>{2048});
  CHECK(nn::prefill_chunk_rows(5000, up_to_2048) == std::vector<int>{2048, 2048, 512, 256, 136});
  CHECK(nn::prefill_chunk_rows(1100, up_to_2048) == std::vector<int>{1024, 76});
  CHECK(nn::prefill_chunk_rows(1030, up_to_2048) == std::vector<int>{1024});  // 6 rows left for the step graphs
  CHECK(nn::prefill_chunk_rows(300, up_to_2048) == std::vector<int>{256, 44});
  CHECK(nn::prefill_chunk_rows(255, up_to_2048) == std::vector<int>{255});  // padded up to 256
  CHECK(nn::prefill_chunk_rows(100, up_to_2048) == std::vector<int>{100});
  CHECK(nn::prefill_chunk_rows(15, up_to_2048).empty());
  CHECK(nn::prefill_chunk_rows(37, {16, 32, 64}) == std::vector<int>{37});
  CHECK(nn::prefill_chunk_rows(100, {16, 32, 64}) == std::vector<int>{64, 36});
  CHECK(nn::prefill_chunk_rows(100, {}).empty());
  for (const std::size_t n : {16U, 17U, 511U, 513U, 777U, 4097U, 8191U}) {  // every row once, each chunk fits
    CAPTURE(n);
    std::size_t total = 0;
    for (const int rows : nn::prefill_chunk_rows(n, up_to_2048)) {
      CHECK(rows >= nn::kPrefillMinRows);
      CHECK(rows <= 2048);
      total += static_cast<std::size_t>(rows);
    }
    CHECK(n - total < static_cast<std::size_t>(nn::kPrefillMinRows));
  }
}

TEST_CASE("a decoder config refuses a prefill_chunk that is neither 0 nor a power of two from 16 to 8192") {
  nn::DecoderConfig c = lgtest::small_decoder();
  for (const int chunk : {0, 16, 512, 8192}) {
    CAPTURE(chunk);
    c.prefill_chunk = chunk;
    CHECK_NOTHROW(c.validate());
  }
  for (const int chunk : {8, 24, -16, 16384}) {
    CAPTURE(chunk);
    c.prefill_chunk = chunk;
    const std::string expected = "prefill_chunk (" + std::to_string(chunk) + ")";
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains(expected.c_str()), UsageError);
  }
}

TEST_CASE(
    "prefill runs on tensor cores only for head_dim 64 and 128, on sm_80 or newer, with cuBLASLt, saying why not") {
  nn::DecoderConfig c = lgtest::small_decoder();  // head_dim 32
  std::string why;
  CHECK_FALSE(nn::prefill_on_tensor_cores(c, {9, 0}, &why));
  CHECK(why.find("head_dim 32") != std::string::npos);
  c.heads = 2;  // head_dim 64
  CHECK_FALSE(nn::prefill_on_tensor_cores(c, {7, 5}, &why));
  CHECK(why.find("compute capability 7.5") != std::string::npos);
  c.prefill_chunk = 0;
  CHECK_FALSE(nn::prefill_on_tensor_cores(c, {9, 0}, &why));
  CHECK(why.find("prefill_chunk is 0") != std::string::npos);
  c.prefill_chunk = 512;
  std::string cublas;
  const bool with_cublas = cublaslt_available(&cublas);
  CHECK(nn::prefill_on_tensor_cores(c, {9, 0}, &why) == with_cublas);
  if (!with_cublas) CHECK(why.find("cuBLASLt") != std::string::npos);
}

TEST_CASE("prefill's memory is what its file comment says: 102 MiB for 2048 rows of a TinyLlama shape in fp16") {
  nn::DecoderConfig c;
  c.d = 2048;
  c.heads = 32;
  c.kv_heads = 4;
  c.ffn = 5632;
  const std::size_t bytes = nn::BasicPrefillBuffers<half>::bytes(c, 2048);
  // The io: a packed chunk's, the larger of the two layouts (header, 8 parts' segments, last rows, their positions
  // and slots, then each row's token and position).
  // The MLP's 3 ffn: the activation, and W1's and W3's products side by side (gemm_layer's stacked product).
  CHECK(bytes == 2048U * (2 * 2048 + 2 * 2048 + 4 * 256 + 3 * 5632) * 2 + (4 + 17 + 3 * 8 + 2 * 2048) * sizeof(int));
  CHECK(static_cast<double>(bytes) / (1 << 20) == doctest::Approx(102).epsilon(0.01));
  CHECK(nn::PrefillIo::input_size(2048) == 4 + 2048);
  CHECK(nn::PackedPrefillIo::input_size(2048) == 4 + 17 + 3 * 8 + 2 * 2048);
  CHECK(nn::PackedPrefillIo::positions(2048) == 4 + 17 + 3 * 8 + 2048);
}

namespace {

template <class T>
constexpr double tolerance = std::same_as<T, half> ? 1e-2 : 3e-2;

template <class T>
constexpr nn::DType dtype = std::same_as<T, half> ? nn::DType::f16 : nn::DType::bf16;

/// A decoder on which prompts of up to 512 tokens run: width 256, 4 heads of 64 over 2 kv heads, 2 layers.
nn::DecoderConfig prefill_config() {
  nn::DecoderConfig c = lgtest::small_decoder(2);
  c.d = 256;
  c.ffn = 512;
  c.context = 512;
  return c;
}

/// A prompt of `n` tokens spread over the vocabulary.
std::vector<int> prompt_of(int n, int vocab, int salt = 0) {
  std::vector<int> p;
  for (int i = 0; i < n; ++i) p.push_back((37 * i + 11 * salt + 5) % vocab);
  return p;
}

using lgtest::widened;

using lgtest::clear_margin;

/// Feeds `prompt` at positions start.. one token at a time into sequence 0 of `d`; returns the last step's token.
template <class T>
int one_by_one(nn::BasicDecoder<T>& d, std::span<const int> prompt, int start) {
  int next = -1;
  for (std::size_t i = 0; i < prompt.size(); ++i) next = d.forward({prompt[i], start + static_cast<int>(i)});
  return next;
}

/// Elements of `v` whose bits differ from `sentinel`'s.
template <class T>
std::size_t not_sentinel(std::span<const T> v, T sentinel) {
  return static_cast<std::size_t>(std::count_if(v.begin(), v.end(), [&](T x) { return x.bits != sentinel.bits; }));
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("a layer's dense W1 and W3 lie stacked, so that the GEMM layers take them as one product") {
    const nn::DecoderConfig c = prefill_config();
    const auto fill_nothing = [](const nn::DecoderTensor&, DeviceSpan<half>) {};
    const nn::BasicDecoderWeights<half> dense = nn::assemble_decoder_weights<half>(lgtest::device(), c, fill_nothing);
    for (const nn::BasicSwigluWeights<half>& m : dense.mlp) {
      const nn::Weight<half> both = nn::stacked_rows(m.w1, m.w3);
      REQUIRE_FALSE(both.empty());
      CHECK(both.rows() == 2 * c.ffn);
      CHECK(both.dense().address() == m.w1.dense().address());
      CHECK(m.w3.dense().address() == m.w1.dense().address() + m.w1.bytes());
    }
    // W3 held elsewhere (quantized as it loads, say): W1 keeps a buffer of its own, and the layers take two products.
    const nn::BasicDecoderWeights<half> apart = nn::assemble_decoder_weights<half>(
        lgtest::device(), c, [](const nn::DecoderTensor& t) { return t.role != nn::DecoderTensorRole::w3; },
        fill_nothing);
    CHECK(nn::stacked_rows(apart.mlp[0].w1, apart.mlp[0].w3).empty());
    CHECK(apart.mlp[0].w3.empty());
  }

  TEST_CASE_TEMPLATE(
      "prefill_rms_norm, prefill_qkv_rope, prefill_silu_mul and prefill_last_row work on the chunk's rows only, its "
      "start read from device memory",
      T, half, bfloat16) {
    Stream& s = lgtest::stream();
    const nn::BasicKernels<T> k(lgtest::nn_kernels());
    const int max_rows = 32;
    const int rows = 21;
    const int start = 70;
    const int heads = 4;
    const int kv_heads = 2;
    const int head_dim = 64;
    const int q_width = heads * head_dim;
    const int kv_width = kv_heads * head_dim;
    const int qkv_width = q_width + 2 * kv_width;
    const auto random = [](std::size_t n, float scale) {
      std::vector<T> out;
      for (const float f : lgtest::random_floats(n)) out.push_back(T::from_float(scale * f));
      return out;
    };
    const double bound = std::same_as<T, half> ? 2e-3 : 1e-2;
    const auto chunk = lgtest::to_device(s, std::vector<int>{start, rows, 1});

    // rms_norm over the chunk's rows (more rows than blocks, more eighths than threads); the padding keeps its bits.
    const int d = 520;
    const std::vector<T> x = random(static_cast<std::size_t>(max_rows) * d, 3.0F);
    const std::vector<T> gain = random(d, 1.0F);
    const std::vector<T> before = random(x.size(), 1.0F);
    const auto dx = lgtest::to_device(s, x);
    const auto dgain = lgtest::to_device(s, gain);
    auto dnormed = lgtest::to_device(s, before);
    k.prefill_rms_norm.launch(s, LaunchConfig{{5, 1, 1}, {64, 1, 1}, 0}, dx.cview(), dgain.cview(), dnormed.view(),
                              chunk.cview(), d, 1e-5F, max_rows);
    {
      const std::vector<T> got = lgtest::to_host(s, dnormed.cview());
      double err = 0;
      double top = 0;
      std::size_t padding_changed = 0;
      for (int r = 0; r < max_rows; ++r) {
        const std::size_t row = static_cast<std::size_t>(r) * d;
        if (r >= rows) {
          for (int i = 0; i < d; ++i) padding_changed += got[row + i].bits != before[row + i].bits ? 1 : 0;
          continue;
        }
        double ss = 0;
        for (int i = 0; i < d; ++i) ss += static_cast<double>(x[row + i].to_float()) * x[row + i].to_float();
        const double inv = 1 / std::sqrt(ss / d + 1e-5);
        for (int i = 0; i < d; ++i) {
          const double want = x[row + i].to_float() * inv * gain[i].to_float();
          err = std::max(err, std::abs(got[row + i].to_float() - want));
          top = std::max(top, std::abs(want));
        }
      }
      CHECK(padding_changed == 0);
      CHECK(err / top < bound);
    }

    // qkv_rope: the stacked rows split into q, k and v, biased, q and k rotated; the outputs' padding keeps its bits.
    const std::vector<T> qkv = random(static_cast<std::size_t>(max_rows) * qkv_width, 2.0F);
    const std::vector<T> bq = random(q_width, 0.5F);
    const std::vector<T> bk = random(kv_width, 0.5F);
    const std::vector<T> bv = random(kv_width, 0.5F);
    const std::vector<T> q = random(static_cast<std::size_t>(max_rows) * q_width, 1.0F);  // what the outputs held
    const std::vector<T> kk = random(static_cast<std::size_t>(max_rows) * kv_width, 1.0F);
    const std::vector<T> v = random(static_cast<std::size_t>(max_rows) * kv_width, 1.0F);
    const std::vector<double> f64 = nn::rope_frequencies(500000.0, nn::RopeScaling{}, head_dim);
    const std::vector<float> freq(f64.begin(), f64.end());
    const auto dqkv = lgtest::to_device(s, qkv);
    auto dq = lgtest::to_device(s, q);
    auto dk = lgtest::to_device(s, kk);
    auto dv = lgtest::to_device(s, v);
    const auto dbq = lgtest::to_device(s, bq);
    const auto dbk = lgtest::to_device(s, bk);
    const auto dbv = lgtest::to_device(s, bv);
    const auto dfreq = lgtest::to_device(s, freq);
    k.prefill_qkv_rope.launch(s, LaunchConfig{{3, 1, 1}, {64, 1, 1}, 0}, dqkv.cview(), dbq.cview(), dbk.cview(),
                              dbv.cview(), dq.view(), dk.view(), dv.view(), chunk.cview(), DeviceSpan<const int>{},
                              heads, kv_heads, head_dim, dfreq.cview(), max_rows);
    std::vector<int> at_position(static_cast<std::size_t>(max_rows));  // each row's position: start + r first
    for (int r = 0; r < max_rows; ++r) at_position[static_cast<std::size_t>(r)] = start + r;
    // The part of the stacked rows at column `from`, `width` wide, against what `got` holds (`held` before the launch).
    const auto expect = [&](int from, const std::vector<T>& bias, int width, bool rotate, const std::vector<T>& held,
                            const std::vector<T>& got) {
      double err = 0;
      double top = 0;
      std::size_t padding_changed = 0;
      for (int r = 0; r < max_rows; ++r) {
        for (int i = 0; i < width; i += 2) {
          const std::size_t at = static_cast<std::size_t>(r) * width + i;
          if (r >= rows) {
            padding_changed += (got[at].bits != held[at].bits) + (got[at + 1].bits != held[at + 1].bits);
            continue;
          }
          const std::size_t in = static_cast<std::size_t>(r) * qkv_width + from + i;
          const double x0 = qkv[in].to_float() + static_cast<double>(bias[i].to_float());
          const double x1 = qkv[in + 1].to_float() + static_cast<double>(bias[i + 1].to_float());
          double y0 = x0;
          double y1 = x1;
          if (rotate) {
            const double angle = static_cast<double>(static_cast<float>(at_position[static_cast<std::size_t>(r)]) *
                                                     freq[(i % head_dim) / 2]);
            y0 = x0 * std::cos(angle) - x1 * std::sin(angle);
            y1 = x0 * std::sin(angle) + x1 * std::cos(angle);
          }
          err = std::max({err, std::abs(got[at].to_float() - y0), std::abs(got[at + 1].to_float() - y1)});
          top = std::max({top, std::abs(y0), std::abs(y1)});
        }
      }
      CHECK(padding_changed == 0);
      CHECK(err / top < bound);
    };
    expect(0, bq, q_width, true, q, lgtest::to_host(s, dq.cview()));
    expect(q_width, bk, kv_width, true, kk, lgtest::to_host(s, dk.cview()));
    expect(q_width + kv_width, bv, kv_width, false, v, lgtest::to_host(s, dv.cview()));
    // Again with each row's own position (a packed chunk's rows: several sequences at unrelated positions).
    std::mt19937 positions_rng(11);
    for (int& p : at_position) p = std::uniform_int_distribution<int>(0, 9000)(positions_rng);
    const auto dpositions = lgtest::to_device(s, at_position);
    const std::vector<T> q_before = lgtest::to_host(s, dq.cview());
    const std::vector<T> k_before = lgtest::to_host(s, dk.cview());
    const std::vector<T> v_before = lgtest::to_host(s, dv.cview());
    k.prefill_qkv_rope.launch(s, LaunchConfig{{3, 1, 1}, {64, 1, 1}, 0}, dqkv.cview(), dbq.cview(), dbk.cview(),
                              dbv.cview(), dq.view(), dk.view(), dv.view(), chunk.cview(), dpositions.cview(), heads,
                              kv_heads, head_dim, dfreq.cview(), max_rows);
    expect(0, bq, q_width, true, q_before, lgtest::to_host(s, dq.cview()));
    expect(q_width, bk, kv_width, true, k_before, lgtest::to_host(s, dk.cview()));
    expect(q_width + kv_width, bv, kv_width, false, v_before, lgtest::to_host(s, dv.cview()));

    // silu_mul in place over the chunk's rows; the padding keeps the gate.
    const int width = 136;
    const std::vector<T> gate = random(static_cast<std::size_t>(max_rows) * width, 6.0F);
    const std::vector<T> up = random(gate.size(), 1.0F);
    auto dgate = lgtest::to_device(s, gate);
    const auto dup = lgtest::to_device(s, up);
    k.prefill_silu_mul.launch(s, LaunchConfig{{2, 1, 1}, {64, 1, 1}, 0}, dgate.cview(), dup.cview(), dgate.view(),
                              chunk.cview(), width, width, max_rows);
    // The same rows as one product over W1 and W3 stacked would leave them: each row's gate then its up, 2 width
    // apart, into an output of its own.
    std::vector<T> stacked(2 * gate.size());
    for (std::size_t i = 0; i < gate.size(); ++i) {
      const std::size_t row = i / width;
      stacked[2 * row * width + i % width] = gate[i];
      stacked[(2 * row + 1) * width + i % width] = up[i];
    }
    const auto dstacked = lgtest::to_device(s, stacked);
    auto dout = lgtest::to_device(s, gate);
    k.prefill_silu_mul.launch(s, LaunchConfig{{2, 1, 1}, {64, 1, 1}, 0}, dstacked.cview(),
                              dstacked.cview().subspan(width, stacked.size() - width), dout.view(), chunk.cview(),
                              width, 2 * width, max_rows);
    for (const DeviceBuffer<T>* result : {&dgate, &dout}) {
      const std::vector<T> act = lgtest::to_host(s, result->cview());
      double err = 0;
      double top = 0;
      std::size_t padding_changed = 0;
      for (std::size_t i = 0; i < gate.size(); ++i) {
        if (i >= static_cast<std::size_t>(rows) * width) {
          padding_changed += act[i].bits != gate[i].bits ? 1 : 0;
          continue;
        }
        const double a = gate[i].to_float();
        const double want = a / (1 + std::exp(-a)) * up[i].to_float();
        err = std::max(err, std::abs(act[i].to_float() - want));
        top = std::max(top, std::abs(want));
      }
      CHECK(padding_changed == 0);
      CHECK(err / top < (std::same_as<T, half> ? 2e-3 : 1e-2));
    }
    const std::vector<T> in_place = lgtest::to_host(s, dgate.cview());
    const std::vector<T> from_stacked = lgtest::to_host(s, dout.cview());
    std::size_t differing = 0;  // the same bits either way
    for (std::size_t i = 0; i < in_place.size(); ++i) differing += in_place[i].bits != from_stacked[i].bits ? 1 : 0;
    CHECK(differing == 0);

    // last_row: row rows - 1 of x.
    const std::vector<T> residual = random(static_cast<std::size_t>(max_rows) * 256, 1.0F);
    const auto dresidual = lgtest::to_device(s, residual);
    DeviceBuffer<T> last(lgtest::device(), 256);
    k.prefill_last_row.launch(s, grid_for(256, 128), dresidual.cview(), chunk.cview(), last.view(), 256, max_rows);
    const std::vector<T> got = lgtest::to_host(s, last.cview());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < 256; ++i) differ += got[i].bits != residual[(rows - 1) * 256 + i].bits ? 1 : 0;
    CHECK(differ == 0);
  }

  TEST_CASE_TEMPLATE(
      "prefill on tensor cores gives the last prompt token's logits of the token-by-token path within rounding, and "
      "its next token where the top-two margin is clear, for 16, 37, 100 and 300 tokens, a continuation from start > "
      "0, "
      "chunks of 64 and a rest on the step graphs",
      T, half, bfloat16) {
    nn::DecoderConfig config = prefill_config();
    SUBCASE("the default chunk (300 tokens: 256 + 44)") {}
    SUBCASE("chunks of up to 64 rows") { config.prefill_chunk = 64; }
    CAPTURE(config.prefill_chunk);
    nn::BasicDecoder<T> fast(lgtest::stream(), lgtest::nn_kernels(), config);
    if (const std::string why = fast.prefill_fallback_reason(); !why.empty()) {
      MESSAGE("skipped: prefill does not run on tensor cores here: " << why);
      return;
    }
    nn::DecoderConfig step_config = config;
    step_config.prefill_chunk = 0;
    nn::BasicDecoder<T> steps(lgtest::stream(), lgtest::nn_kernels(), step_config);
    int judged = 0;
    int clear = 0;
    const auto compare = [&](int got, int want) {
      const std::vector<double> a = widened(fast.logits());
      const std::vector<double> b = widened(steps.logits());
      const double err = nn::relative_error(a, b);
      CAPTURE(err);
      CHECK(err < tolerance<T>);
      ++judged;
      if (clear_margin(b, tolerance<T>)) {
        ++clear;
        CHECK(got == want);
      }
    };
    for (const int n : {16, 37, 100, 140, 300}) {  // 140: with chunks of 64, 64 + 64 + a rest of 12 on the step graphs
      CAPTURE(n);
      const std::vector<int> prompt = prompt_of(n, config.vocab, n);
      const int got = fast.prefill(prompt);
      const int want = one_by_one(steps, prompt, 0);
      compare(got, want);
    }
    // A continuation: 37 tokens, then 50 more from position 37 (both on tensor cores), against 87 one by one.
    const std::vector<int> all = prompt_of(87, config.vocab, 3);
    (void)fast.prefill(std::span<const int>(all).first(37));
    const int got = fast.prefill(std::span<const int>(all).subspan(37), 37);
    const int want = one_by_one(steps, all, 0);
    compare(got, want);
    MESSAGE(clear << " of " << judged << " prompts had a clear top-two margin (their next tokens compared)");
  }

  TEST_CASE_TEMPLATE(
      "prefill on tensor cores matches the float64 reference: GQA with head_dim 64, and head_dim 128 with q wider than "
      "the model, q, k and v biases and llama3 RoPE scaling, and q/k norms",
      T, half, bfloat16) {
    nn::DecoderConfig config = lgtest::small_decoder(2);  // d 128, context 64
    config.heads = 2;                                     // head_dim 64
    SUBCASE("head_dim 64, 2 heads sharing 2 kv heads") {}
    SUBCASE("head_dim 128 over a width of 128 (q 512 wide), biases, llama3 scaling, theta 500000") {
      config.heads = 4;
      config.head_width = 128;
      config.qkv_bias = true;
      config.theta = 500000.0F;
      config.rope_scaling = {.type = nn::RopeType::llama3,
                             .factor = 8,
                             .low_freq_factor = 1,
                             .high_freq_factor = 4,
                             .original_max_position_embeddings = 16};
    }
    SUBCASE("q/k norms (Qwen3's), head_dim 64, theta 1e6") {
      config.qk_norm = true;
      config.theta = 1e6F;
    }
    SUBCASE("q/k norms over the whole projection (OLMoE's), head_dim 64") {
      config.qk_norm = config.qk_norm_whole = true;
    }
    SUBCASE("Gemma 3's block on tensor cores: GeGLU, post-norms, q/k norms, scales, a window of 20 on layer 0") {
      config.qk_norm = config.post_norms = true;
      config.activation = nn::GateActivation::gelu_tanh;
      config.embedding_scale = 11.3125F;
      config.attention_scale = 0.1F;
      config.logit_softcap = 3.0F;
      config.window = 20;
      config.sliding = {true, false};
      config.local_theta = 500.0F;
    }
    SUBCASE("q/k norms with head_dim 128 and q, k and v biases") {
      config.heads = 4;
      config.head_width = 128;
      config.qk_norm = true;
      config.qkv_bias = true;
    }
    CAPTURE(config.head_dim());
    CAPTURE(config.qk_norm);
    CAPTURE(config.qk_norm_whole);
    nn::BasicDecoder<T> decoder(lgtest::stream(), lgtest::nn_kernels(), config);
    if (const std::string why = decoder.prefill_fallback_reason(); !why.empty()) {
      MESSAGE("skipped: prefill does not run on tensor cores here: " << why);
      return;
    }
    nn::DecoderReference reference(config, dtype<T>);
    const std::vector<int> prompt = prompt_of(45, config.vocab);  // the bucket of 64 rows, 19 of them padding
    std::vector<double> want;
    for (std::size_t i = 0; i < prompt.size(); ++i) want = reference.step(prompt[i], static_cast<int>(i));
    const int next = decoder.prefill(prompt);
    const std::vector<double> got = widened(decoder.logits());
    const double err = nn::relative_error(got, want);
    CAPTURE(err);
    CHECK(err < tolerance<T>);
    if (clear_margin(want, tolerance<T>)) CHECK(next == nn::argmax(want));
  }

  TEST_CASE_TEMPLATE("decode after prefill on tensor cores continues as decode after feeding the prompt token by token",
                     T, half, bfloat16) {
    const nn::DecoderConfig config = prefill_config();
    nn::BasicDecoder<T> fast(lgtest::stream(), lgtest::nn_kernels(), config);
    if (const std::string why = fast.prefill_fallback_reason(); !why.empty()) {
      MESSAGE("skipped: prefill does not run on tensor cores here: " << why);
      return;
    }
    nn::BasicDecoder<T> steps(lgtest::stream(), lgtest::nn_kernels(), config);
    const std::vector<int> prompt = prompt_of(100, config.vocab, 7);
    const int n = static_cast<int>(prompt.size());
    const int first = fast.prefill(prompt);
    const std::vector<int> generated = fast.generate(first, 8, -1, n);  // from the cache the prefill wrote
    int token = one_by_one(steps, prompt, 0);
    std::vector<int> want{token};
    std::vector<bool> clear{clear_margin(widened(steps.logits()), tolerance<T>)};
    for (int p = n; p < n + 8; ++p) {
      want.push_back(token = steps.forward({token, p}));
      clear.push_back(clear_margin(widened(steps.logits()), tolerance<T>));
    }
    std::vector<int> got{first};
    got.insert(got.end(), generated.begin(), generated.end());
    REQUIRE(got.size() == want.size());
    int compared = 0;
    for (std::size_t i = 0; i < want.size() && clear[i]; ++i) {  // up to the first near tie: after it, paths may part
      CAPTURE(i);
      CHECK(got[i] == want[i]);
      ++compared;
    }
    MESSAGE(compared << " of " << want.size() << " generated tokens compared (up to the first unclear margin)");
    // Teacher-forced, every step is compared: both decoders step on the token-by-token path's tokens, fast over the
    // cache its prefill wrote (the positions generate wrote are written again, in order, as it goes).
    for (int i = 0; i < 8; ++i) {
      CAPTURE(i);
      const int fast_next = fast.forward({want[static_cast<std::size_t>(i)], n + i});
      const int steps_next = steps.forward({want[static_cast<std::size_t>(i)], n + i});
      const std::vector<double> a = widened(fast.logits());
      const std::vector<double> b = widened(steps.logits());
      const double err = nn::relative_error(a, b);
      CAPTURE(err);
      CHECK(err < tolerance<T>);
      if (clear_margin(b, tolerance<T>)) CHECK(fast_next == steps_next);
    }
  }

  TEST_CASE_TEMPLATE(
      "prefill on tensor cores writes exactly the prompt's positions of its slot's cache, within rounding of the "
      "token-by-token path, and padded rows touch nothing",
      T, half, bfloat16) {
    nn::DecoderConfig config = prefill_config();
    config.context = 128;
    config.max_batch = 2;
    int start = 0;
    int length = 0;
    int slot = 0;
    SUBCASE("20 tokens from position 5 in slot 1: the bucket of 32, 12 rows of padding") {
      start = 5;
      length = 20;
      slot = 1;
    }
    SUBCASE("40 tokens in chunks of 16: 16, 16 and a rest of 8 on the step graphs") {
      config.prefill_chunk = 16;
      length = 40;
    }
    SUBCASE("100 tokens from position 3: the bucket of 128, more rows than the context has left") {
      start = 3;
      length = 100;
    }
    CAPTURE(start);
    CAPTURE(length);
    nn::BasicDecoder<T> fast(lgtest::stream(), lgtest::nn_kernels(), config);
    if (const std::string why = fast.prefill_fallback_reason(); !why.empty()) {
      MESSAGE("skipped: prefill does not run on tensor cores here: " << why);
      return;
    }
    Stream& s = lgtest::stream();
    // Both decoders start from the same cache, a sentinel everywhere (also the positions before `start`, which the
    // prompt attends): the token-by-token one then steps the prompt's positions in the same slot (forward_batch, the
    // other sequence idle at position 0 of its own slot), the other prefills them.
    nn::BasicDecoder<T> steps(lgtest::stream(), lgtest::nn_kernels(), config);
    const T sentinel = T::from_float(-7.0F);
    (fill(fast.k_cache(), sentinel) >> fill(fast.v_cache(), sentinel) >> fill(steps.k_cache(), sentinel) >>
     fill(steps.v_cache(), sentinel))
        .sync_on(s);
    const std::vector<int> prompt = prompt_of(length, config.vocab, 1);
    (void)fast.prefill(prompt, start, slot);
    for (int i = 0; i < length; ++i) {
      std::vector<nn::TokenAt> both{{0, 0}, {0, 0}};
      both[static_cast<std::size_t>(slot)] = {prompt[static_cast<std::size_t>(i)], start + i};
      (void)steps.forward_batch(both);
    }
    const std::size_t head_dim = static_cast<std::size_t>(config.head_dim());
    const std::size_t positions = static_cast<std::size_t>(config.context);
    for (const bool keys : {true, false}) {
      CAPTURE(keys);
      const std::vector<T> got = lgtest::to_host(s, keys ? fast.k_cache().as_const() : fast.v_cache().as_const());
      const std::vector<T> want = lgtest::to_host(s, keys ? steps.k_cache().as_const() : steps.v_cache().as_const());
      // [layers][slots][kv_heads][context][head_dim]: every run of head_dim elements is one position of one head.
      std::size_t stray = 0;
      std::size_t unwritten = 0;
      double err = 0;
      double top = 0;
      for (std::size_t run = 0; run * head_dim < got.size(); ++run) {
        const auto position = static_cast<int>(run % positions);
        const auto run_slot = static_cast<int>(run / positions / static_cast<std::size_t>(config.kv_head_count()) %
                                               static_cast<std::size_t>(config.max_batch));
        const std::span<const T> g = std::span<const T>(got).subspan(run * head_dim, head_dim);
        const bool prompt_position = run_slot == slot && position >= start && position < start + length;
        if (!prompt_position) {
          // (The step decoder's idle sequence writes position 0 of the other slot: only the fast one is judged here.)
          stray += not_sentinel(g, sentinel);
          continue;
        }
        unwritten += head_dim - not_sentinel(g, sentinel);
        for (std::size_t i = 0; i < head_dim; ++i) {
          const double w = want[run * head_dim + i].to_float();
          err = std::max(err, std::abs(static_cast<double>(g[i].to_float()) - w));
          top = std::max(top, std::abs(w));
        }
      }
      CHECK(stray == 0);
      CHECK(unwritten == 0);
      CAPTURE(err / top);
      CHECK(err / top < 2 * tolerance<T>);
    }
  }

  TEST_CASE_TEMPLATE(
      "prefill refuses an empty prompt, a prompt past the context, a token outside the vocabulary and a bad slot "
      "before any GPU work, leaving the cache unchanged",
      T, half, bfloat16) {
    nn::DecoderConfig config = prefill_config();
    config.context = 64;
    config.max_batch = 2;
    nn::BasicDecoder<T> decoder(lgtest::stream(), lgtest::nn_kernels(), config);
    Stream& s = lgtest::stream();
    const T sentinel = T::from_float(3.0F);
    (fill(decoder.k_cache(), sentinel) >> fill(decoder.v_cache(), sentinel)).sync_on(s);
    std::vector<int> bad_token = prompt_of(20, config.vocab);
    bad_token[17] = config.vocab;
    CHECK_THROWS_WITH_AS(decoder.prefill(std::vector<int>{}), doctest::Contains("empty"), UsageError);
    CHECK_THROWS_WITH_AS(decoder.prefill(prompt_of(65, config.vocab)), doctest::Contains("does not fit the context"),
                         UsageError);
    CHECK_THROWS_WITH_AS(decoder.prefill(prompt_of(20, config.vocab), 50), doctest::Contains("from position 50"),
                         UsageError);
    CHECK_THROWS_WITH_AS(decoder.prefill(bad_token), doctest::Contains("prompt token 17 (512)"), UsageError);
    CHECK_THROWS_WITH_AS(decoder.prefill(prompt_of(20, config.vocab), 0, 2), doctest::Contains("slot 2"), UsageError);
    CHECK_THROWS_WITH_AS(decoder.prefill(prompt_of(20, config.vocab), 0, -1), doctest::Contains("slot -1"), UsageError);
    for (const DeviceSpan<T>& cache : {decoder.k_cache(), decoder.v_cache()}) {
      const std::vector<T> after = lgtest::to_host(s, cache.as_const());
      CHECK(not_sentinel(std::span<const T>(after), sentinel) == 0);
    }
    // Still usable: a 64-token prompt (the whole context) runs.
    const int next = decoder.prefill(prompt_of(64, config.vocab));
    CHECK(next >= 0);
    CHECK(next < config.vocab);
  }
}
