// Parts of a quantized matrix cut out on the device (nn/quantized_slice.hpp): every element of a part dequantizes to
// the same element of the whole (its integer, scale and zero point kept), for every format and both scale types,
// and where quantizing is per row and group (int4 everywhere, int8 by rows) the part's bytes are those of quantizing
// the same part of the dense weights; refusals of parts that do not lie on tiles, steps or groups, naming the tensor.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "common/gpu.hpp"
#include "common/quantized_formats.hpp"
#include "common/quantized_weights.hpp"

#include <lazygraph/nn/quantized_slice.hpp>

using namespace lazygraph;

namespace {

std::vector<float> random_weights(int rows, int cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<float> out(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
  for (float& v : out) v = dist(rng);
  return out;
}

/// Rows [first, first + count) of a rows x cols matrix, all columns, or all rows of columns [c0, c0 + n).
std::vector<float> part(const std::vector<float>& w, int cols, int r0, int rows, int c0, int n) {
  std::vector<float> out;
  for (int r = r0; r < r0 + rows; ++r) {
    for (int c = c0; c < c0 + n; ++c)
      out.push_back(w[static_cast<std::size_t>(r) * static_cast<std::size_t>(cols) + c]);
  }
  return out;
}

using lgtest::same_bytes;

template <class T>
void check_format(const nn::QuantizedFormat& format) {
  CAPTURE(nn::format_name(format));
  const Stream& s = lgtest::stream();
  constexpr int rows = 72;  // four whole tiles and a half one
  constexpr int cols = 512;
  const std::vector<float> dense = random_weights(rows, cols, 11);
  const nn::QuantizedWeight host = nn::quantize(format, "w", rows, cols, dense);
  const nn::DeviceQuantizedWeight<T> whole(s, host);
  const bool int4 = format.kind == nn::WeightFormat::int4_group;

  // Rows 16..47 then 64..71 (the half tile at the end).
  const std::vector<nn::QuantizedRowBlock> blocks{{16, 32}, {64, 8}};
  const nn::QuantizedWeight rows_part = nn::quantized_rows(s, whole, blocks).download(s);
  REQUIRE(rows_part.layout().rows() == 40);
  REQUIRE(rows_part.layout().cols() == cols);
  bool equal = true;
  for (int r = 0; r < 40; ++r) {
    const int from = r < 32 ? 16 + r : 64 + (r - 32);
    for (int c = 0; c < cols; ++c) equal = equal && rows_part.dequantized(r, c) == host.dequantized(from, c);
  }
  CHECK(equal);
  std::vector<float> stacked = part(dense, cols, 16, 32, 0, cols);
  const std::vector<float> tail = part(dense, cols, 64, 8, 0, cols);
  stacked.insert(stacked.end(), tail.begin(), tail.end());
  CHECK(same_bytes(rows_part, nn::quantize(format, "w", 40, cols, stacked)));  // quantized per row: the same bytes

  // Columns 256..383 (two steps of int4, four of int8; one group of 128).
  const nn::QuantizedWeight cols_part = nn::quantized_columns(s, whole, 256, 128).download(s);
  REQUIRE(cols_part.layout().rows() == rows);
  REQUIRE(cols_part.layout().cols() == 128);
  equal = true;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < 128; ++c) equal = equal && cols_part.dequantized(r, c) == host.dequantized(r, 256 + c);
  }
  CHECK(equal);
  if (int4) {  // groups along the columns quantize alone: the same bytes as quantizing those columns
    CHECK(same_bytes(cols_part, nn::quantize(format, "w", rows, 128, part(dense, cols, 0, rows, 256, 128))));
  } else {  // int8 keeps each row's scale, chosen over the whole row
    for (int r = 0; r < rows; ++r) REQUIRE(cols_part.scale(r, 0) == host.scale(r, 0));
  }
  // The whole matrix as one block ending at its last row.
  const std::vector<nn::QuantizedRowBlock> all{{0, rows}};
  CHECK(same_bytes(nn::quantized_rows(s, whole, all).download(s), host));
}
}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("a part of a quantized matrix cut out on the device dequantizes to the same part of the whole") {
    for (const nn::QuantizedFormat& f :
         {nn::QuantizedFormat{nn::WeightFormat::int8_channel, 0, false, nn::ScaleType::f16},
          nn::QuantizedFormat{nn::WeightFormat::int4_group, 32, false, nn::ScaleType::f16},
          nn::QuantizedFormat{nn::WeightFormat::int4_group, 64, true, nn::ScaleType::f16},
          nn::QuantizedFormat{nn::WeightFormat::int4_group, 128, false, nn::ScaleType::f16}}) {
      check_format<half>(f);
    }
    for (const nn::QuantizedFormat& f :
         {nn::QuantizedFormat{nn::WeightFormat::int8_channel, 0, false, nn::ScaleType::bf16},
          nn::QuantizedFormat{nn::WeightFormat::int4_group, 128, true, nn::ScaleType::bf16}}) {
      check_format<bfloat16>(f);
    }
  }

  TEST_CASE("a part of an fp8 matrix cut out on the device dequantizes to the same part of the whole") {
    // fp8 is read from checkpoints, not quantized: random bytes and scales, as a tensor-parallel rank cuts them.
    const Stream& s = lgtest::stream();
    for (const nn::ScaleType type : {nn::ScaleType::f16, nn::ScaleType::bf16}) {
      constexpr int rows = 72;
      constexpr int cols = 512;
      const nn::QuantizedWeight host =
          lgtest::random_fp8({nn::WeightFormat::fp8_block, 128, false, type}, "w", rows, cols, 5);
      const auto check = [&](const nn::QuantizedWeight& got, int r0, int c0) {
        bool equal = true;
        for (int r = 0; r < got.layout().rows(); ++r) {
          const int from = r0 < 0 ? (r < 32 ? 16 + r : 64 + (r - 32)) : r0 + r;
          for (int c = 0; c < got.layout().cols(); ++c) {
            equal = equal && got.dequantized(r, c) == host.dequantized(from, c0 + c);
          }
        }
        CHECK(equal);
      };
      if (type == nn::ScaleType::f16) {
        const nn::DeviceQuantizedWeight<half> whole(s, host);
        check(nn::quantized_rows(s, whole, std::vector<nn::QuantizedRowBlock>{{16, 32}, {64, 8}}).download(s), -1, 0);
        check(nn::quantized_columns(s, whole, 256, 128).download(s), 0, 256);
        CHECK_THROWS_AS((void)nn::quantized_columns(s, whole, 32, 128), UsageError);  // off its groups of 128
      } else {
        const nn::DeviceQuantizedWeight<bfloat16> whole(s, host);
        check(nn::quantized_rows(s, whole, std::vector<nn::QuantizedRowBlock>{{16, 32}, {64, 8}}).download(s), -1, 0);
        check(nn::quantized_columns(s, whole, 128, 256).download(s), 0, 128);
      }
    }
  }

  TEST_CASE("a part of a quantized matrix off its tiles, steps or groups is refused, naming the tensor") {
    const Stream& s = lgtest::stream();
    const nn::QuantizedFormat g128{nn::WeightFormat::int4_group, 128, false, nn::ScaleType::f16};
    const nn::DeviceQuantizedWeight<half> w(s, nn::quantize(g128, "model.w", 72, 512, random_weights(72, 512, 3)));
    const auto rows = [&](std::vector<nn::QuantizedRowBlock> blocks) { (void)nn::quantized_rows(s, w, blocks); };
    CHECK_THROWS_WITH_AS(rows({}), doctest::Contains("tensor model.w (72 x 512, int4 g128"), UsageError);
    CHECK_THROWS_WITH_AS(rows({{8, 16}}), doctest::Contains("rows [8, 24) do not start and end on a tile"), UsageError);
    CHECK_THROWS_WITH_AS(rows({{0, 8}, {16, 16}}), doctest::Contains("rows [0, 8) do not start and end on a tile"),
                         UsageError);
    CHECK_THROWS_WITH_AS(rows({{64, 16}}), doctest::Contains("rows [64, 80) are empty or outside its rows"),
                         UsageError);
    CHECK_THROWS_WITH_AS(rows({{16, 0}}), doctest::Contains("are empty or outside"), UsageError);
    CHECK_NOTHROW(rows({{64, 8}}));  // the last block may end at the last row
    CHECK_THROWS_WITH_AS((void)nn::quantized_columns(s, w, 64, 128),
                         doctest::Contains("columns [64, 192) do not start and end on a group of 128 columns"),
                         UsageError);
    CHECK_THROWS_WITH_AS((void)nn::quantized_columns(s, w, 384, 256),
                         doctest::Contains("columns [384, 640) are empty or outside its columns"), UsageError);
    const nn::DeviceQuantizedWeight<half> int8(
        s, nn::quantize({nn::WeightFormat::int8_channel, 0, false, nn::ScaleType::f16}, "model.v", 16, 128,
                        random_weights(16, 128, 4)));
    CHECK_THROWS_WITH_AS((void)nn::quantized_columns(s, int8, 16, 32),
                         doctest::Contains("columns [16, 48) do not start and end on a step of 32 columns"),
                         UsageError);
    CHECK_NOTHROW((void)nn::quantized_columns(s, int8, 32, 64));
  }
}
