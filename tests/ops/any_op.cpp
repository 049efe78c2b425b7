// AnyOp (ops/any_op.hpp): a GraphNode of any type behind one type, which records, runs and reports the accesses of the
// op it holds; allocating ops and ops with an output do not fit in one.
#include <doctest/doctest.h>

#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

static_assert(GraphNode<AnyOp>);
static_assert(!is_buildable_v<AnyOp>, "what an AnyOp holds cannot say in its type that it builds without capture");
static_assert(std::is_constructible_v<AnyOp, FillOp<float>>);
static_assert(!std::is_constructible_v<AnyOp, decltype(zeros<float>(1))>, "an allocation is not a GraphNode");
static_assert(!std::is_constructible_v<AnyOp, decltype(value(1))>, "an AnyOp has no output");

namespace {
/// A 256-byte "buffer" at a made-up address.
DeviceSpan<float> any_op_buffer(int i) { return {static_cast<CUdeviceptr>(0x200000 * (i + 1)), 64}; }
}  // namespace

TEST_CASE("an AnyOp reports what the op it holds reads and writes, and copies share it") {
  const AnyOp held(copy(any_op_buffer(0), any_op_buffer(1).as_const()) >> fill(any_op_buffer(2), 1.0F));
  const AnyOp copied = held;
  for (const AnyOp* op : {&held, &copied}) {
    const AccessSet a = accesses_of(*op);
    REQUIRE(a.entries().size() == 3);
    CHECK(a.entries()[0].begin == any_op_buffer(1).address());
    CHECK_FALSE(a.entries()[0].writes);
    CHECK(a.entries()[1].begin == any_op_buffer(0).address());
    CHECK(a.entries()[2].begin == any_op_buffer(2).address());
    CHECK(a.entries()[2].writes);
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("an AnyOp runs, and records into a graph that replays, the op it holds") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> a(lgtest::device(), 1000);
    DeviceBuffer<float> b(lgtest::device(), 1000);
    const AnyOp op(fill(a.view(), 2.5F) >> copy(b.view(), a.cview()));
    op.sync_on(s);
    CHECK(lgtest::to_host(s, b.cview()) == std::vector<float>(1000, 2.5F));
    fill(b.view(), 0.0F).sync_on(s);
    CudaGraph<> graph = CudaGraph<>::capture(s, op);
    graph.launch();
    CHECK(lgtest::to_host(s, b.cview()) == std::vector<float>(1000, 2.5F));
  }
}
