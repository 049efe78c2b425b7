// Host tests of the format table (lazygraph/nn/projection.hpp): one row per weight format in the enum's order, and the
// shape and batch checks every projection makes before it picks a kernel, naming the weight.
#include <doctest/doctest.h>

#include <lazygraph/nn/projection.hpp>

using namespace lazygraph;
using namespace lazygraph::nn;

TEST_CASE("the format table has a row per weight format, saying which kernel family projects it") {
  for (const WeightFormat f : {WeightFormat::dense, WeightFormat::int8_channel, WeightFormat::int4_group}) {
    CHECK(format_traits(f).format == f);
  }
  CHECK_FALSE(format_traits(WeightFormat::dense).quantized);
  CHECK(format_traits(WeightFormat::int8_channel).quantized);
  CHECK(format_traits(WeightFormat::int4_group).quantized);
}

TEST_CASE("a projection refuses a weight of another shape and a batch outside 1..8, naming the weight") {
  CHECK_NOTHROW(nn::detail::check_projection("project", "w", 64, 32, 64, 32, 8));
  CHECK_THROWS_WITH_AS(
      nn::detail::check_projection("project", "model.layers.1.mlp.down_proj.weight", 64, 32, 32, 64, 1),
      doctest::Contains("project: weight model.layers.1.mlp.down_proj.weight is 64 x 32, where 32 x "
                        "64 is needed"),
      UsageError);
  CHECK_THROWS_WITH_AS(nn::detail::check_projection("norm_project", "w", 64, 32, 64, 32, 9),
                       doctest::Contains("a batch of 9 rows is outside 1..8"), UsageError);
  CHECK_THROWS_AS(nn::detail::check_projection("norm_project", "w", 64, 32, 64, 32, 0), UsageError);
}
