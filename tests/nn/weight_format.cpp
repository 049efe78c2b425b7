// Host tests of lazygraph::nn::WeightFormat and QuantizedFormat: the projections' table (projection.hpp) and the
// storage table (src/nn/formats/) know the same quantized formats.
#include <doctest/doctest.h>

#include <lazygraph/nn/projection.hpp>
#include <lazygraph/nn/quantized.hpp>

#include <string>

using namespace lazygraph;
using namespace lazygraph::nn;

TEST_CASE("a default quantized format is int4 in groups of 128, symmetric, with fp16 scales") {
  const QuantizedFormat f;
  CHECK(f.kind == format_traits(f.kind).format);
  CHECK(format_traits(f.kind).quantized);
  CHECK(format_name(f) == "int4 g128, fp16 scales");
}

TEST_CASE("every quantized format of the projections' table has a storage row, and dense has none") {
  int quantized = 0;
  for (const WeightFormatTraits& row : kWeightFormats) {
    CAPTURE(std::string(row.name));
    const QuantizedFormat format{row.format, 128, false, ScaleType::bf16};
    if (!row.quantized) {
      CHECK_THROWS_WITH_AS((void)QuantizedLayout("w", format, 16, 128),
                           "tensor w: format 'dense' is not a quantized format", UsageError);
      CHECK(format_name(format) == "dense (not quantized)");
      continue;
    }
    ++quantized;
    const QuantizedLayout layout("w", format, 16, 128);  // a row whose checks allow 128 columns in groups of 128
    CHECK(layout.group() >= 1);
    CHECK(layout.q_range()[0] < 0);
    CHECK(layout.q_range()[1] > 0);
    CHECK(layout.value_bytes() >= 16U * 128U / 8U);
    const std::string name = format_name(format);
    CHECK(name.ends_with(", bf16 scales"));
    CHECK(name.size() > std::string(", bf16 scales").size());
  }
  CHECK(quantized == 3);
}

TEST_CASE("a weight format the tables do not know is refused by the layout, naming the tensor") {
  const QuantizedFormat unknown{static_cast<WeightFormat>(7), 128, false, ScaleType::f16};
  CHECK_THROWS_WITH_AS((void)QuantizedLayout("model.norm.weight", unknown, 16, 128),
                       "tensor model.norm.weight: unknown weight format", UsageError);
}
