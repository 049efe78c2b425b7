// with_accesses: an op's accesses declared by hand replace what it reports (on the host: spans at made-up
// addresses; nothing runs).
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

using namespace lazygraph;

namespace {

DeviceSpan<float> fake_buffer(int i) { return {static_cast<CUdeviceptr>(0x100000 * (i + 1)), 64}; }

}  // namespace

TEST_CASE("with_accesses replaces what the op reports") {
  const auto op = with_accesses("row 3", fill(fake_buffer(0), 1.0F), writes(fake_buffer(0).subspan(48, 16)));
  const AccessSet s = accesses_of(op);
  REQUIRE(s.entries().size() == 1);
  CHECK(s.entries()[0].begin == fake_buffer(0).address() + 192);
  CHECK(s.entries()[0].op == "row 3");
  static_assert(GraphNode<decltype(op)>);
  // Declared rows of one buffer may run as all() branches.
  CHECK_NOTHROW(
      (void)all(op, with_accesses("row 0", fill(fake_buffer(0), 2.0F), writes(fake_buffer(0).subspan(0, 16)))));
  // An opaque op made transparent.
  CHECK_FALSE(accesses_of(with_accesses("log", host_call("log", [] {}), reads(fake_buffer(1)))).is_opaque());
}

TEST_CASE("reads and writes take spans of any element types; the lists keep their byte ranges") {
  const DeviceSpan<const int> ints(0x500000, 10);
  const AccessList r = reads(fake_buffer(0).as_const(), ints);
  CHECK_FALSE(r.writes);
  REQUIRE(r.ranges.size() == 2);
  CHECK(r.ranges[1].begin == 0x500000);
  CHECK(r.ranges[1].bytes == 40);
  const AccessList w = writes(fake_buffer(1));
  CHECK(w.writes);
  CHECK(w.ranges[0].bytes == 256);
  // Declared reads of one buffer and writes of another order a dataflow by the declaration.
  const auto op = dataflow(fill(fake_buffer(0), 1.0F),
                           with_accesses("reader", value(0), reads(fake_buffer(0)), writes(fake_buffer(2))));
  CHECK(op.dependencies() == std::vector<std::vector<std::uint32_t>>{{}, {0}});
}
