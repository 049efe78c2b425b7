// The GPU quantizer (nn/device_quantizer.hpp, kernels/nn/quantize.cu) against the host quantizer (nn/quantized.hpp):
// the same bytes for every format, scale type, source type and clip setting, on random weights with outliers, an
// all-zero group and rows that are not whole tiles; and its refusals, which name the tensor as the host's do.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/gpu.hpp"
#include "common/nn.hpp"
#include "common/quantized_formats.hpp"

#include <lazygraph/nn/device_quantizer.hpp>

using namespace lazygraph;

namespace {

/// Every format whose scales are of T, fp8 (in blocks of 128 x 128) among them.
template <class T>
std::vector<nn::QuantizedFormat> formats_of() {
  std::vector<nn::QuantizedFormat> out;
  for (const nn::QuantizedFormat& f : lgtest::every_quantized_format()) {
    if (f.scale_type == nn::scale_type_of<T>) out.push_back(f);
  }
  out.push_back(lgtest::fp8(nn::scale_type_of<T>));
  return out;
}

/// rows x cols weights in [-scale, scale) exactly representable in S, with an outlier in every 7th row and an
/// all-zero first group in row 1.
template <class S>
std::vector<S> test_weights(int rows, int cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-0.05F, 0.05F);
  std::vector<S> out;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      float v = dist(rng);
      if (r % 7 == 3 && c == 5) v = 0.9F;  // an outlier: the clip search has something to do
      if (r == 1 && c < 128) v = 0.0F;     // an all-zero group for every group size
      if constexpr (std::same_as<S, float>) {
        out.push_back(v);
      } else {
        out.push_back(S::from_float(v));
      }
    }
  }
  return out;
}

template <class S>
std::vector<float> as_floats(const std::vector<S>& v) {
  std::vector<float> out;
  for (const S x : v) {
    if constexpr (std::same_as<S, float>) {
      out.push_back(x);
    } else {
      out.push_back(x.to_float());
    }
  }
  return out;
}

template <class T, class S>
void check_matches_host(const nn::DeviceQuantizer& quantizer) {
  Stream& s = lgtest::stream();
  unsigned seed = 7;
  for (const nn::QuantizedFormat& format : formats_of<T>()) {
    // fp8: blocks of 37, 16, 50 and 128 + 72 rows
    for (const auto& [rows, cols] :
         {std::pair{37, 256}, std::pair{16, 384}, std::pair{50, 1024}, std::pair{200, 256}}) {
      for (const bool clip : {false, true}) {
        CAPTURE(nn::format_name(format));
        CAPTURE(rows);
        CAPTURE(cols);
        CAPTURE(clip);
        const std::vector<S> w = test_weights<S>(rows, cols, seed++);
        const auto device_w = lgtest::to_device(s, w);
        const nn::QuantizedWeight host = nn::quantize(format, "w", rows, cols, as_floats(w), {.clip_search = clip});
        const nn::DeviceQuantizedWeight<T> device =
            quantizer.quantize<T, S>(s, format, "w", rows, cols, device_w.cview(), {.clip_search = clip});
        const nn::QuantizedWeight back = device.download(s);
        CHECK(back.layout().tiles() == host.layout().tiles());
        CHECK(std::equal(back.values().begin(), back.values().end(), host.values().begin(), host.values().end()));
        CHECK(std::equal(back.scale_bits().begin(), back.scale_bits().end(), host.scale_bits().begin(),
                         host.scale_bits().end()));
        CHECK(std::equal(back.zeros().begin(), back.zeros().end(), host.zeros().begin(), host.zeros().end()));
      }
    }
  }
}

}  // namespace

TEST_CASE("every device quantizer handle matches its kernel's declared parameters") {
  const KernelDeclarations d(nn::kernel_set().sources);
  CHECK_NOTHROW(d.check<void(const float*, int, int, int, int, int, int, int, int, std::int8_t*, std::uint16_t*,
                             std::uint8_t*, unsigned long long*)>("quantize_groups_f32"));
  CHECK_NOTHROW(d.check<void(const half*, int, int, int, int, int, int, int, int, std::int8_t*, std::uint16_t*,
                             std::uint8_t*, unsigned long long*)>("quantize_groups_f16"));
  CHECK_NOTHROW(d.check<void(const bfloat16*, int, int, int, int, int, int, int, int, std::int8_t*, std::uint16_t*,
                             std::uint8_t*, unsigned long long*)>("quantize_groups_bf16"));
  CHECK_NOTHROW(d.check<void(const std::int8_t*, int, int, std::uint8_t*)>("pack_int4"));
  CHECK_NOTHROW(d.check<void(const std::int8_t*, int, int, std::uint8_t*)>("pack_int8"));
  CHECK_NOTHROW(d.check<void(const std::int8_t*, int, int, std::uint8_t*)>("pack_fp8"));
  CHECK_NOTHROW(d.check<void(const float*, int, int, int, std::int8_t*, std::uint16_t*, unsigned long long*)>(
      "quantize_blocks_fp8_f32"));
  CHECK_NOTHROW(d.check<void(const half*, int, int, int, std::int8_t*, std::uint16_t*, unsigned long long*)>(
      "quantize_blocks_fp8_f16"));
  CHECK_NOTHROW(d.check<void(const bfloat16*, int, int, int, std::int8_t*, std::uint16_t*, unsigned long long*)>(
      "quantize_blocks_fp8_bf16"));
  CHECK_NOTHROW(
      d.check<void(const std::uint16_t*, const std::uint8_t*, int, int, std::uint16_t*, std::uint8_t*)>("pack_scales"));
}

TEST_SUITE("gpu") {
  TEST_CASE("the device quantizer writes the host quantizer's bytes, every format and source type") {
    const nn::DeviceQuantizer quantizer(lgtest::nn_kernels());
    check_matches_host<half, float>(quantizer);
    check_matches_host<half, half>(quantizer);
    check_matches_host<half, bfloat16>(quantizer);
    check_matches_host<bfloat16, float>(quantizer);
    check_matches_host<bfloat16, bfloat16>(quantizer);
  }

  TEST_CASE("the device quantizer refuses what the host quantizer refuses, naming the tensor") {
    Stream& s = lgtest::stream();
    const nn::DeviceQuantizer quantizer(lgtest::nn_kernels());
    const nn::QuantizedFormat g128{nn::WeightFormat::int4_group, 128, false, nn::ScaleType::f16};
    std::vector<float> w = test_weights<float>(20, 256, 3);
    w[5 * 256 + 77] = std::numeric_limits<float>::infinity();
    auto device_w = lgtest::to_device(s, w);
    CHECK_THROWS_WITH_AS((void)(quantizer.quantize<half, float>(s, g128, "mlp.up_proj", 20, 256, device_w.cview())),
                         "tensor mlp.up_proj: weight at row 5, column 77 is inf, not finite", UsageError);
    // 1e6 needs an int4 scale of 1e6 / 7, beyond fp16's largest 65504.
    w[5 * 256 + 77] = 1.0e6F;
    device_w = lgtest::to_device(s, w);
    CHECK_THROWS_WITH_AS((void)(quantizer.quantize<half, float>(s, g128, "mlp.up_proj", 20, 256, device_w.cview())),
                         "tensor mlp.up_proj: row 5, group 0 needs a scale beyond the range of fp16 (use bf16 scales)",
                         UsageError);
    CHECK_THROWS_WITH_AS((void)nn::quantize(g128, "mlp.up_proj", 20, 256, w),
                         "tensor mlp.up_proj: row 5, group 0 needs a scale beyond the range of fp16 (use bf16 scales)",
                         UsageError);
    CHECK_THROWS_WITH_AS((void)(quantizer.quantize<half, float>(s, g128, "mlp.up_proj", 20, 128, device_w.cview())),
                         doctest::Contains("5120 weights given for a 20 x 128 matrix"), UsageError);
    CHECK_THROWS_WITH_AS((void)(quantizer.quantize<bfloat16, float>(s, g128, "mlp.up_proj", 20, 256, device_w.cview())),
                         doctest::Contains("tensor mlp.up_proj: int4 g128, fp16 scales, but the kernels over bf16"),
                         UsageError);
    CHECK_THROWS_WITH_AS((void)(quantizer.quantize<half, float>(s, g128, "mlp.up_proj", 20, 192, device_w.cview())),
                         doctest::Contains("does not divide the input dimension (192)"), UsageError);
  }

  TEST_CASE("the device quantizer refuses fp8 weights as the host quantizer does, naming the element or the block") {
    Stream& s = lgtest::stream();
    const nn::DeviceQuantizer quantizer(lgtest::nn_kernels());
    std::vector<float> w = test_weights<float>(256, 256, 4);
    w[130 * 256 + 200] = -std::numeric_limits<float>::infinity();
    w[140 * 256 + 3] = std::numeric_limits<float>::quiet_NaN();
    auto device_w = lgtest::to_device(s, w);
    CHECK_THROWS_WITH_AS(
        (void)(quantizer.quantize<half, float>(s, lgtest::fp8(), "mlp.down_proj", 256, 256, device_w.cview())),
        "tensor mlp.down_proj: weight at row 130, column 200 is -inf, not finite", UsageError);
    // 2e5 needs a scale of 2e5 / 448 * 2^8, beyond fp16's 65504: the block of rows 128-255, columns 128-255.
    w[130 * 256 + 200] = 0.5F;
    w[140 * 256 + 3] = 0.5F;
    w[150 * 256 + 200] = 2.0e5F;
    device_w = lgtest::to_device(s, w);
    const char* beyond =
        "tensor mlp.down_proj: row 128, group 1 needs a scale beyond the range of fp16 (use bf16 scales)";
    CHECK_THROWS_WITH_AS(
        (void)(quantizer.quantize<half, float>(s, lgtest::fp8(), "mlp.down_proj", 256, 256, device_w.cview())), beyond,
        UsageError);
    CHECK_THROWS_WITH_AS((void)nn::quantize(lgtest::fp8(), "mlp.down_proj", 256, 256, w), beyond, UsageError);
  }
}
