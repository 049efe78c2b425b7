// Host tests of lazygraph::nn::Weight: a dense matrix's shape and views of its rows, and the errors that name the
// weight. The spans are raw addresses (never dereferenced on the host), so no GPU is needed.
#include <doctest/doctest.h>

#include <memory>

#include <lazygraph/nn/weight.hpp>

using namespace lazygraph;
using namespace lazygraph::nn;

namespace {
/// A span of `n` halves at a made-up device address.
DeviceSpan<half> span_of(std::size_t n) { return {CUdeviceptr{0x10000}, n}; }
}  // namespace

TEST_CASE("a dense weight has the shape it was given, its bytes, and its values as a read-only span") {
  const Weight<half> w(span_of(256 * 128), 256, 128, "model.layers.0.self_attn.qkv_proj.weight");
  CHECK(w.rows() == 256);
  CHECK(w.cols() == 128);
  CHECK(w.format() == WeightFormat::dense);
  CHECK(w.is_dense());
  CHECK_FALSE(w.empty());
  CHECK(w.bytes() == 256U * 128U * 2U);
  CHECK(w.dense().address() == 0x10000);
  CHECK(w.dense().size() == 256U * 128U);
  CHECK(w.describe() == "model.layers.0.self_attn.qkv_proj.weight");
}

TEST_CASE("a weight without a matrix is empty and has no name in messages") {
  const Weight<half> none;
  CHECK(none.empty());
  CHECK(none.rows() == 0);
  CHECK(none.describe() == "(unnamed)");
}

TEST_CASE("a view of a dense weight's rows shares its memory from the first row's element on") {
  const Weight<half> w(span_of(256 * 128), 256, 128, "qkv");
  const Weight<half> k = w.rows_view(128, 64, "k");
  CHECK(k.rows() == 64);
  CHECK(k.cols() == 128);
  CHECK(k.name() == "k");
  CHECK(k.dense().address() == 0x10000 + 128U * 128U * 2U);
  CHECK(k.dense().size() == 64U * 128U);
  CHECK(w.rows_view(0, 256).name() == "qkv");
}

TEST_CASE("two dense weights stack only where the second's values follow the first's in one allocation") {
  const auto owner = std::make_shared<int>(0);
  const DeviceSpan<half> both(CUdeviceptr{0x10000}, 2 * 64 * 128, owner);
  const Weight<half> w1(both.subspan(0, 64 * 128), 64, 128, "gate_proj");
  const Weight<half> w3(both.subspan(64 * 128, 64 * 128), 64, 128, "up_proj");
  const Weight<half> gate_up = stacked_rows(w1, w3, "gate_up");
  CHECK(gate_up.rows() == 128);
  CHECK(gate_up.cols() == 128);
  CHECK(gate_up.name() == "gate_up");
  CHECK(gate_up.dense().address() == 0x10000);
  CHECK(gate_up.dense().size() == 2U * 64U * 128U);
  CHECK(gate_up.owner() == owner);  // it keeps the allocation alive as the two do
  // Not stacked: the wrong order, a gap, another allocation, no owner, another shape, an empty weight.
  CHECK(stacked_rows(w3, w1).empty());
  const DeviceSpan<half> gapped(CUdeviceptr{0x10000}, 3 * 64 * 128, owner);
  CHECK(stacked_rows(Weight<half>(gapped.subspan(0, 64 * 128), 64, 128),
                     Weight<half>(gapped.subspan(2 * 64 * 128, 64 * 128), 64, 128))
            .empty());
  const DeviceSpan<half> elsewhere(CUdeviceptr{0x10000 + 64 * 128 * 2}, 64 * 128, std::make_shared<int>(1));
  CHECK(stacked_rows(w1, Weight<half>(elsewhere, 64, 128)).empty());
  CHECK(stacked_rows(Weight<half>(span_of(64 * 128), 64, 128),
                     Weight<half>(DeviceSpan<half>(CUdeviceptr{0x10000 + 64 * 128 * 2}, 64 * 128), 64, 128))
            .empty());
  CHECK(stacked_rows(w1, Weight<half>(both.subspan(64 * 128, 64 * 128), 128, 64)).empty());
  CHECK(stacked_rows(w1, Weight<half>()).empty());
  CHECK(stacked_rows(w1, Weight<half>(both.subspan(64 * 128, 32 * 128), 32, 128)).empty());  // fewer rows
}

TEST_CASE("rows outside the weight, and values of another size, are refused naming the weight") {
  const Weight<half> w(span_of(256 * 128), 256, 128, "qkv");
  CHECK_THROWS_WITH_AS((void)w.rows_view(200, 64),
                       doctest::Contains("weight qkv: rows [200, 264) are not inside its 256"), UsageError);
  CHECK_THROWS_AS((void)w.rows_view(-1, 8), UsageError);
  CHECK_THROWS_AS((void)w.rows_view(0, 0), UsageError);
  CHECK_THROWS_WITH_AS(Weight<half>(span_of(100), 16, 8, "w2"), doctest::Contains("weight w2: 100 elements for 16 x 8"),
                       UsageError);
}

TEST_CASE("asking a dense weight for its quantized form names it") {
  const Weight<half> w(span_of(64), 8, 8, "lm_head.weight");
  CHECK_THROWS_WITH_AS((void)w.quantized(), doctest::Contains("weight lm_head.weight is dense, not quantized"),
                       UsageError);
  CHECK_THROWS_AS((void)w.matrix(), UsageError);
  CHECK_THROWS_WITH_AS(Weight<half>(std::shared_ptr<const DeviceQuantizedWeight<half>>()),
                       doctest::Contains("may not be null"), UsageError);
}
