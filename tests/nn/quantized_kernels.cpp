// The quantized kernels (kernels/nn/qgemv.cu) against float64 products of the dequantized weights
// (QuantizedWeight::dequantize, the host reference of the layout) and the same fp16- or bf16-rounded activations, for
// every format, both element types, batches of 1 to 8 and shapes whose rows are not a multiple of a tile; qdequantize
// against those values rounded to the element type, bit for bit. fp8, which lazygraph reads from checkpoints and does
// not quantize into, is random e4m3 bytes over the whole range with random scales.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/gpu.hpp"
#include "common/nn.hpp"
#include "common/quantized_formats.hpp"

#include <lazygraph/nn/quantized_kernels.hpp>

using namespace lazygraph;

namespace {

/// The formats the kernels read, with the scale type of T.
template <class T>
std::vector<nn::QuantizedFormat> kernel_formats() {
  const nn::ScaleType s = nn::scale_type_of<T>;
  return {{nn::WeightFormat::int8_channel, 0, false, s}, {nn::WeightFormat::int4_group, 32, false, s},
          {nn::WeightFormat::int4_group, 64, true, s},   {nn::WeightFormat::int4_group, 128, false, s},
          {nn::WeightFormat::int4_group, 128, true, s},  {nn::WeightFormat::fp8_block, 128, false, s}};
}

std::vector<float> random_values(std::size_t n, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

/// The weight of a case: quantized from random values, or, for fp8, random bytes and scales.
nn::QuantizedWeight case_weight(const nn::QuantizedFormat& format, const char* name, int rows, int cols,
                                unsigned seed) {
  if (format.kind == nn::WeightFormat::fp8_block) return lgtest::random_fp8(format, name, rows, cols, seed);
  return nn::quantize(format, name, rows, cols, random_values(std::size_t(rows) * std::size_t(cols), seed, 0.05F));
}

/// `w` with its columns stored in a random order of the inputs (seeded), as GPTQ's desc_act stores them: the same
/// bytes, whose stored column j now multiplies input order[j].
nn::QuantizedWeight reordered(const nn::QuantizedWeight& w, unsigned seed) {
  std::vector<std::int32_t> order(static_cast<std::size_t>(w.layout().cols()));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  return {w.layout(),
          {w.values().begin(), w.values().end()},
          {w.scale_bits().begin(), w.scale_bits().end()},
          {w.zeros().begin(), w.zeros().end()},
          std::move(order)};
}

template <class T>
std::vector<T> rounded(const std::vector<float>& f) {
  std::vector<T> out;
  out.reserve(f.size());
  for (const float v : f) out.push_back(T::from_float(v));
  return out;
}

using lgtest::widened;

/// ||got - ref|| / ||ref|| at most `tolerance`, and every element within tolerance * max |ref| (a NaN fails both).
template <class T>
void check_close(const std::vector<T>& got, const std::vector<double>& ref, double tolerance) {
  REQUIRE(got.size() == ref.size());
  double diff = 0;
  double norm = 0;
  double largest = 0;
  for (const double r : ref) largest = std::max(largest, std::abs(r));
  std::size_t outside = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = got[i].to_float();
    diff += (g - ref[i]) * (g - ref[i]);
    norm += ref[i] * ref[i];
    outside += std::abs(g - ref[i]) <= tolerance * largest ? 0 : 1;
  }
  CHECK(std::sqrt(diff / norm) <= tolerance);
  CHECK(outside == 0);
}

/// One case: a rows x cols weight (two for SwiGLU) in `format`, `batch` random vectors, a gain, a residual; with
/// `ordered`, both weights' columns stored in one random order of the inputs.
template <class T>
struct Case {
  Case(const nn::QuantizedFormat& format, int rows, int cols, int batch, unsigned seed, bool ordered)
      : rows(rows),
        cols(cols),
        batch(batch),
        q1(ordered ? reordered(case_weight(format, "w1", rows, cols, seed), seed + 5)
                   : case_weight(format, "w1", rows, cols, seed)),
        q3(ordered ? reordered(case_weight(format, "w3", rows, cols, seed + 1), seed + 5)
                   : case_weight(format, "w3", rows, cols, seed + 1)),
        w1(q1.dequantize()),
        w3(q3.dequantize()),
        x(rounded<T>(random_values(std::size_t(batch) * std::size_t(cols), seed + 2, 1.0F))),
        g(rounded<T>(random_values(std::size_t(cols), seed + 3, 1.0F))),
        residual(rounded<T>(random_values(std::size_t(batch) * std::size_t(rows), seed + 4, 1.0F))) {}

  int rows;
  int cols;
  int batch;
  nn::QuantizedWeight q1;
  nn::QuantizedWeight q3;
  std::vector<float> w1;
  std::vector<float> w3;
  std::vector<T> x;
  std::vector<T> g;
  std::vector<T> residual;

  /// h[b] = x[b] (times g / rms(x[b]) when `norm`), in float64.
  [[nodiscard]] std::vector<double> inputs(bool norm, double eps) const {
    std::vector<double> h = widened(x);
    if (!norm) return h;
    for (int b = 0; b < batch; ++b) {
      double squares = 0;
      for (int c = 0; c < cols; ++c) squares += h[std::size_t(b) * cols + c] * h[std::size_t(b) * cols + c];
      const double inv = 1.0 / std::sqrt(squares / cols + eps);
      for (int c = 0; c < cols; ++c) h[std::size_t(b) * cols + c] *= inv * g[std::size_t(c)].to_float();
    }
    return h;
  }
  /// W h[b] for every vector, [batch][rows].
  [[nodiscard]] std::vector<double> product(const std::vector<float>& w, const std::vector<double>& h) const {
    std::vector<double> out(std::size_t(batch) * std::size_t(rows));
    for (int b = 0; b < batch; ++b) {
      for (int r = 0; r < rows; ++r) {
        double sum = 0;
        for (int c = 0; c < cols; ++c) sum += double(w[std::size_t(r) * cols + c]) * h[std::size_t(b) * cols + c];
        out[std::size_t(b) * rows + r] = sum;
      }
    }
    return out;
  }
};

template <class T>
DeviceBuffer<T> poisoned(std::size_t n) {
  const std::uint16_t nan = std::same_as<T, half> ? 0x7e00 : 0x7fc0;  // a quiet NaN of T
  return lgtest::to_device(lgtest::stream(), std::vector<T>(n, T{nan}));
}

template <class T>
void check_every_kernel(const nn::BasicQuantizedKernels<T>& k, double tolerance) {
  Stream& s = lgtest::stream();
  constexpr float eps = 1e-5F;
  unsigned seed = 100;
  for (const nn::QuantizedFormat& format : kernel_formats<T>()) {
    // int4 with zero points also with its columns reordered (GPTQ's desc_act): the kernels gather x
    const bool orderable = format.kind == nn::WeightFormat::int4_group && format.asymmetric;
    for (const auto& [rows, cols, ordered] :
         {std::tuple{40, 256, false}, std::tuple{37, 512, false}, std::tuple{24, 384, false},
          std::tuple{72, 1024, false}, std::tuple{40, 256, true}, std::tuple{37, 512, true}}) {
      if (ordered && !orderable) continue;
      for (const int batch : {1, 3, 8}) {
        CAPTURE(nn::format_name(format));
        CAPTURE(rows);
        CAPTURE(cols);
        CAPTURE(ordered);
        CAPTURE(batch);
        const Case<T> c(format, rows, cols, batch, seed += 10, ordered);
        const nn::DeviceQuantizedWeight<T> w1(s, c.q1);
        const nn::DeviceQuantizedWeight<T> w3(s, c.q3);
        const auto x = lgtest::to_device(s, c.x);
        const auto g = lgtest::to_device(s, c.g);
        const std::size_t outputs = std::size_t(batch) * std::size_t(rows);
        const auto plain = c.inputs(false, eps);
        const auto normed = c.inputs(true, eps);

        auto out = poisoned<T>(outputs);
        k.qgemv(k.config(w1.matrix(), rows, cols), w1.matrix(), x.cview(), out.view(), rows, cols, batch).sync_on(s);
        check_close(lgtest::to_host(s, out.cview()), c.product(c.w1, plain), tolerance);

        // Any block of (32, K, R) with K * R <= 32 and any grid compute the same products (a grid of 2 walks the
        // tiles).
        for (const Dim3 block : {Dim3{32, 1, 16}, Dim3{32, 16, 1}, Dim3{32, 32, 1}, Dim3{32, 4, 8}, Dim3{32, 3, 5}}) {
          CAPTURE(block.y);
          out = poisoned<T>(outputs);
          LaunchConfig few{{2, 1, 1}, block, 0};
          k.qgemv(few, w1.matrix(), x.cview(), out.view(), rows, cols, batch).sync_on(s);
          check_close(lgtest::to_host(s, out.cview()), c.product(c.w1, plain), tolerance);
        }

        auto sum = lgtest::to_device(s, c.residual);
        k.qgemv_add(k.config(w1.matrix(), rows, cols), w1.matrix(), x.cview(), sum.view(), rows, cols, batch)
            .sync_on(s);
        std::vector<double> added = c.product(c.w1, plain);
        for (std::size_t i = 0; i < outputs; ++i) added[i] += c.residual[i].to_float();
        check_close(lgtest::to_host(s, sum.cview()), added, tolerance);

        if (batch == 1) {  // qdequantize: QuantizedWeight::dequantize's values rounded once to T, bit for bit
          auto dense = poisoned<T>(std::size_t(rows) * std::size_t(cols));
          k.qdequantize(k.dequantize_config(w1.matrix(), rows, cols), w1.matrix(), dense.view(), rows, cols).sync_on(s);
          const std::vector<T> got = lgtest::to_host(s, dense.cview());
          // Zeros may differ in sign only: e4m3's negative zero (0x80) dequantizes to -0 on the device, and the
          // host's integer q has no signed zero. The same weight either way.
          std::size_t differ = 0;
          std::size_t signed_zeros = 0;
          for (std::size_t i = 0; i < got.size(); ++i) {
            const T want = T::from_float(c.w1[i]);
            if (got[i].bits == want.bits) continue;
            if (got[i].to_float() == 0.0F && want.to_float() == 0.0F) {
              ++signed_zeros;
            } else {
              ++differ;
            }
          }
          CAPTURE(signed_zeros);
          CHECK(differ == 0);
        }

        out = poisoned<T>(outputs);
        k.rms_norm_qgemv(k.config(w1.matrix(), rows, cols), w1.matrix(), x.cview(), g.cview(), out.view(), rows, cols,
                         eps, batch)
            .sync_on(s);
        check_close(lgtest::to_host(s, out.cview()), c.product(c.w1, normed), tolerance);

        // q, k and v from one matrix (heads of 4, about half the rows q's, a quarter k's and v's, with and without
        // biases), RoPE turning q and k, k and v appended to caches of 3 slots of 64 positions: against float64
        // products turned by float64 rotations, and nothing else in the caches touched.
        {
          constexpr int head_dim = 4;
          constexpr int max_ctx = 64;
          const int n_slots = batch + 1;
          const int kv_rows = head_dim * std::max(1, rows / 16);
          const int q_rows = head_dim * ((rows - 2 * kv_rows) / head_dim);
          const int n_kv_heads = kv_rows / head_dim;
          const int used = q_rows + 2 * kv_rows;  // the matrix may have a few rows more
          const std::vector<float> frequencies = {1.0F, 0.07F};
          std::vector<int> positions, slots;
          for (int b = 0; b < batch; ++b) {
            positions.push_back((13 + 17 * b) % max_ctx);
            slots.push_back(batch - b);
          }
          const auto bias = lgtest::to_device(s, c.residual);  // any values of T, the first `used` of them
          const auto freq = lgtest::to_device(s, frequencies);
          const auto pos = lgtest::to_device(s, positions);
          const auto slot = lgtest::to_device(s, slots);
          const std::size_t cache_size = std::size_t(n_slots) * std::size_t(kv_rows) * max_ctx;
          const std::vector<T> sentinel = rounded<T>(random_values(cache_size, seed + 7, 1.0F));
          for (const bool with_bias : {false, true}) {
            CAPTURE(with_bias);
            auto q = poisoned<T>(std::size_t(batch) * std::size_t(q_rows));
            auto k_cache = lgtest::to_device(s, sentinel);
            auto v_cache = lgtest::to_device(s, sentinel);
            k.quantized_qkv_rope_append(k.config(w1.matrix(), used, cols), w1.matrix(),
                                        with_bias ? bias.cview() : DeviceSpan<const T>{}, x.cview(), g.cview(),
                                        q.view(), k_cache.view(), v_cache.view(), pos.cview(), slot.cview(), cols,
                                        q_rows, n_kv_heads, head_dim, max_ctx, n_slots, freq.cview(), eps, batch)
                .sync_on(s);
            const std::vector<double> all = c.product(c.w1, normed);  // [batch][rows]
            std::vector<double> want_q;
            std::vector<double> want_k = widened(sentinel);
            std::vector<double> want_v = want_k;
            for (int b = 0; b < batch; ++b) {
              const auto value = [&](int r) {
                return all[std::size_t(b) * rows + r] +
                       (with_bias ? double(c.residual[std::size_t(r)].to_float()) : 0.0);
              };
              for (int r = 0; r < used; ++r) {
                double v = value(r);
                const int local = r < q_rows ? r : (r < q_rows + kv_rows ? r - q_rows : r - q_rows - kv_rows);
                if (r < q_rows + kv_rows) {
                  const double angle =
                      double(float(positions[std::size_t(b)]) * frequencies[std::size_t(local % head_dim / 2)]);
                  const double other = value(r ^ 1);
                  v = local % 2 == 0 ? v * std::cos(angle) - other * std::sin(angle)
                                     : other * std::sin(angle) + v * std::cos(angle);
                }
                if (r < q_rows) {
                  want_q.push_back(v);
                  continue;
                }
                const std::size_t at =
                    ((std::size_t(slots[std::size_t(b)]) * n_kv_heads + std::size_t(local / head_dim)) * max_ctx +
                     std::size_t(positions[std::size_t(b)])) *
                        head_dim +
                    std::size_t(local % head_dim);
                (r < q_rows + kv_rows ? want_k : want_v)[at] = v;
              }
            }
            check_close(lgtest::to_host(s, q.cview()), want_q, tolerance);
            // The caches: every written element close to its reference, every other one its sentinel's bits.
            for (auto* cache : {&k_cache, &v_cache}) {
              const std::vector<double>& want = cache == &k_cache ? want_k : want_v;
              const std::vector<T> got = lgtest::to_host(s, cache->cview());
              std::vector<T> written_got;
              std::vector<double> written_want;
              std::size_t kept = 0;
              for (std::size_t i = 0; i < cache_size; ++i) {
                if (want[i] == double(sentinel[i].to_float())) {
                  kept += got[i].bits == sentinel[i].bits ? 1 : 0;
                } else {
                  written_got.push_back(got[i]);
                  written_want.push_back(want[i]);
                }
              }
              CHECK(written_want.size() == std::size_t(batch) * std::size_t(kv_rows));
              CHECK(kept == cache_size - written_want.size());
              check_close(written_got, written_want, tolerance);
            }
          }
        }

        out = poisoned<T>(outputs);
        k.rms_norm_qgemv_swiglu(k.config(w1.matrix(), rows, cols), w1.matrix(), w3.matrix(), x.cview(), g.cview(),
                                out.view(), rows, cols, eps, batch)
            .sync_on(s);
        const std::vector<double> gate = c.product(c.w1, normed);
        const std::vector<double> up = c.product(c.w3, normed);
        std::vector<double> swiglu(outputs);
        for (std::size_t i = 0; i < outputs; ++i) swiglu[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
        check_close(lgtest::to_host(s, out.cview()), swiglu, 2 * tolerance);
      }
    }
  }
}

}  // namespace

TEST_CASE("every quantized kernel handle matches its kernel's declared parameters, for both element types") {
  const KernelDeclarations d(nn::kernel_set().sources);
  for (const char* format : {"_int8", "_int4", "_int4z", "_fp8"}) {
    CAPTURE(format);
    for (const std::string element : {"", "_bf16"}) {
      const auto name = [&](const char* stem) { return stem + element + format; };
      if (element.empty()) {
        CHECK_NOTHROW(d.check<void(nn::QuantizedMatrix, const half*, half*, int, int, int)>(name("qgemv")));
        CHECK_NOTHROW(d.check<void(nn::QuantizedMatrix, const half*, half*, int, int, int)>(name("qgemv_add")));
        CHECK_NOTHROW(d.check<void(nn::QuantizedMatrix, const half*, const half*, half*, int, int, float, int)>(
            name("rms_norm_qgemv")));
        CHECK_NOTHROW(d.check<void(nn::QuantizedMatrix, nn::QuantizedMatrix, const half*, const half*, half*, int, int,
                                   float, int)>(name("rms_norm_qgemv_swiglu")));
        CHECK_NOTHROW(d.check<void(nn::QuantizedMatrix, const half*, const half*, const half*, half*, half*, half*,
                                   const int*, const int*, int, int, int, int, int, int, const float*, float, int)>(
            name("quantized_qkv_rope_append")));
        CHECK_NOTHROW(d.check<void(nn::QuantizedMatrix, half*, int, int)>(name("qdequantize")));
        CHECK_NOTHROW(d.check<void(nn::QuantizedMatrix, nn::QuantizedMatrix, const half*, const int*, half*, int, int,
                                   int, int, int)>(name("moe_qgate_up")));
        CHECK_NOTHROW(d.check<void(nn::QuantizedMatrix, const half*, const int*, const float*, float*, unsigned*, half*,
                                   int, int, int, int, int)>(name("moe_qdown")));
        // the persistent backend's tile functions (nn::BasicDecoderTiles), their kernels' parameters after the tile
        CHECK(d.require(name("qgemv_add_tile"), "kernels/nn/").tile);
        CHECK_NOTHROW(d.check<void(nn::QuantizedMatrix, const half*, half*, int, int, int)>(name("qgemv_add_tile")));
        CHECK_NOTHROW(d.check<void(nn::QuantizedMatrix, const half*, const half*, half*, int, int, float, int)>(
            name("rms_norm_qgemv_tile")));
        CHECK_NOTHROW(d.check<void(nn::QuantizedMatrix, nn::QuantizedMatrix, const half*, const half*, half*, int, int,
                                   float, int)>(name("rms_norm_qgemv_swiglu_tile")));
        CHECK_NOTHROW(d.check<void(nn::QuantizedMatrix, const half*, const half*, const half*, half*, half*, half*,
                                   const int*, const int*, int, int, int, int, int, int, const float*, float, int)>(
            name("quantized_qkv_rope_append_tile")));
      } else {
        CHECK_NOTHROW(d.check<void(nn::QuantizedMatrix, const bfloat16*, bfloat16*, int, int, int)>(name("qgemv")));
        CHECK_NOTHROW(d.check<void(nn::QuantizedMatrix, nn::QuantizedMatrix, const bfloat16*, const bfloat16*,
                                   bfloat16*, int, int, float, int)>(name("rms_norm_qgemv_swiglu")));
        CHECK_NOTHROW(d.check<void(nn::QuantizedMatrix, nn::QuantizedMatrix, const bfloat16*, const int*, bfloat16*,
                                   int, int, int, int, int)>(name("moe_qgate_up")));
        CHECK_NOTHROW(
            d.check<void(nn::QuantizedMatrix, const bfloat16*, bfloat16*, int, int, int)>(name("qgemv_add_tile")));
        CHECK_NOTHROW(d.check<void(nn::QuantizedMatrix, nn::QuantizedMatrix, const bfloat16*, const bfloat16*,
                                   bfloat16*, int, int, float, int)>(name("rms_norm_qgemv_swiglu_tile")));
        CHECK_NOTHROW(d.check<void(nn::QuantizedMatrix, const bfloat16*, const int*, const float*, float*, unsigned*,
                                   bfloat16*, int, int, int, int, int)>(name("moe_qdown")));
      }
    }
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("quantized kernels over fp16 match float64 products of the dequantized weights, every format and batch") {
    check_every_kernel(nn::BasicQuantizedKernels<half>(lgtest::nn_kernels()), 5e-3);
  }

  TEST_CASE("quantized kernels over bf16 match float64 products of the dequantized weights, every format and batch") {
    check_every_kernel(nn::BasicQuantizedKernels<bfloat16>(lgtest::nn_kernels()), 2e-2);
  }

  TEST_CASE("a quantized kernel gives each vector of a batch the bits a batch of one gives it") {
    Stream& s = lgtest::stream();
    const nn::QuantizedKernels k(lgtest::nn_kernels());
    for (const nn::QuantizedFormat& format : kernel_formats<half>()) {
      for (const bool ordered : {false, true}) {
        if (ordered && !(format.kind == nn::WeightFormat::int4_group && format.asymmetric)) continue;
        CAPTURE(nn::format_name(format));
        CAPTURE(ordered);
        constexpr int rows = 72;
        constexpr int cols = 768;
        const Case<half> c(format, rows, cols, 8, 7, ordered);
        const nn::DeviceQuantizedWeight<half> w(s, c.q1);
        const auto x = lgtest::to_device(s, c.x);
        auto out = poisoned<half>(8 * rows);
        k.qgemv(k.config(w.matrix(), rows, cols), w.matrix(), x.cview(), out.view(), rows, cols, 8).sync_on(s);
        const std::vector<half> all = lgtest::to_host(s, out.cview());
        for (int b = 0; b < 8; ++b) {
          auto one = poisoned<half>(rows);
          k.qgemv(k.config(w.matrix(), rows, cols), w.matrix(), x.cview().subspan(std::size_t(b) * cols, cols),
                  one.view(), rows, cols, 1)
              .sync_on(s);
          const std::vector<half> alone = lgtest::to_host(s, one.cview());
          for (int r = 0; r < rows; ++r) CHECK(alone[std::size_t(r)].bits == all[std::size_t(b) * rows + r].bits);
        }
      }
    }
  }

  TEST_CASE("a quantized weight whose scales are not of the kernels' element type is refused, naming it") {
    const nn::QuantizedWeight bf16_scales =
        nn::quantize({nn::WeightFormat::int4_group, 128, false, nn::ScaleType::bf16},
                     "model.layers.0.mlp.down_proj.weight", 8, 128, random_values(8 * 128, 1, 1.0F));
    CHECK_THROWS_WITH_AS(nn::DeviceQuantizedWeight<half>(lgtest::stream(), bf16_scales),
                         doctest::Contains("tensor model.layers.0.mlp.down_proj.weight: int4 g128, bf16 scales"),
                         UsageError);
    const nn::DeviceQuantizedWeight<bfloat16> fits(lgtest::stream(), bf16_scales);
    CHECK(fits.bytes() == bf16_scales.bytes());
    CHECK_THROWS_WITH_AS(nn::check_quantized(fits, 8, 256, 1),
                         doctest::Contains("a quantized weight of 8 x 128, where 8 x 256 is needed"), UsageError);
    CHECK_THROWS_WITH_AS(nn::check_quantized(fits, 8, 128, 9), doctest::Contains("batch 9 is outside 1..8"),
                         UsageError);
    CHECK_NOTHROW(nn::check_quantized(fits, 8, 128, 8));
  }
}
