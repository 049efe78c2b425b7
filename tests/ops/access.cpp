// Access sets: what each op reports, conflicts and their messages, the inferred DAG, and all()'s race check —
// all on the host (spans at made-up addresses; nothing runs).
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <string>
#include <vector>

using namespace lazygraph;

namespace {

using Deps = std::vector<std::vector<std::uint32_t>>;

// Three 256-byte "buffers" far apart, and a fourth.
DeviceSpan<float> buf(int i) { return {static_cast<CUdeviceptr>(0x100000 * (i + 1)), 64}; }

}  // namespace

TEST_CASE("copy, fill and value report what they read and write, byte ranges included") {
  const AccessSet c = accesses_of(copy(buf(0), buf(1).as_const()));
  REQUIRE(c.entries().size() == 2);
  CHECK_FALSE(c.is_opaque());
  CHECK(c.entries()[0].begin == buf(1).address());
  CHECK_FALSE(c.entries()[0].writes);
  CHECK(c.entries()[1].begin == buf(0).address());
  CHECK(c.entries()[1].bytes == 256);
  CHECK(c.entries()[1].writes);
  CHECK(c.entries()[1].op == "copy");

  const AccessSet f = accesses_of(fill(buf(2).subspan(8, 4), 1.0F));
  REQUIRE(f.entries().size() == 1);
  CHECK(f.entries()[0].begin == buf(2).address() + 32);
  CHECK(f.entries()[0].bytes == 16);
  CHECK(f.entries()[0].writes);

  CHECK(accesses_of(value(3)).empty());
  CHECK(accesses_of(fill(DeviceSpan<float>(), 1.0F)).empty());  // zero bytes touch nothing
}

TEST_CASE("composites report the union of their parts; choose only the chosen part") {
  const auto seq = fill(buf(0), 1.0F) >> copy(buf(1), buf(0).as_const());
  CHECK(accesses_of(seq).entries().size() == 3);
  CHECK(accesses_of(named("block", seq)).entries().size() == 3);
  CHECK(accesses_of(map(fill(buf(0), 1.0F), [] { return 1; })).entries().size() == 1);
  const AccessSet chosen = accesses_of(choose(false, fill(buf(0), 1.0F), fill(buf(1), 1.0F)));
  REQUIRE(chosen.entries().size() == 1);
  CHECK(chosen.entries()[0].begin == buf(1).address());
  std::vector<decltype(fill(buf(0), 1.0F))> fills{fill(buf(0), 1.0F), fill(buf(1), 2.0F), fill(buf(2), 3.0F)};
  CHECK(accesses_of(chain(std::move(fills))).entries().size() == 3);
}

TEST_CASE("an op that does not say what it touches is opaque, and names itself") {
  const AccessSet h = accesses_of(host_call("log", [] {}));
  CHECK(h.is_opaque());
  CHECK(h.opaque_op().find("HostCallOp") != std::string::npos);
  CHECK(accesses_of(join()).is_opaque());  // a barrier: dataflow orders everything around it
  AccessSet mixed = accesses_of(fill(buf(0), 1.0F) >> host_call("log", [] {}));
  CHECK(mixed.is_opaque());
  CHECK(mixed.entries().size() == 1);
}

TEST_CASE("kernel arguments: T* writes, const T* reads, scalars touch nothing, other pointer arguments are opaque") {
  const auto w = detail::argument_range<float*>(buf(0));
  CHECK(w.writes);
  CHECK(w.bytes == 256);
  CHECK(w.address == buf(0).address());
  const auto r = detail::argument_range<const float*>(buf(1));
  CHECK_FALSE(r.writes);
  CHECK_FALSE(r.opaque);
  const auto rc = detail::argument_range<const float*>(buf(1).as_const());
  CHECK_FALSE(rc.writes);
  const auto s = detail::argument_range<int>(7);
  CHECK(s.bytes == 0);
  CHECK_FALSE(s.opaque);
  struct Handle {
    const float* p;
  };
  CHECK(detail::argument_range<const float*>(Handle{nullptr}).opaque);
}

TEST_CASE("conflicts: RAW, WAR and WAW on overlapping bytes, never read-read or disjoint ranges") {
  const auto set = [](auto op) { return accesses_of(op); };
  const AccessSet write_a = set(fill(buf(0), 1.0F));
  const AccessSet read_a = set(copy(buf(1), buf(0).as_const()));
  const AccessSet read_a_too = set(copy(buf(2), buf(0).as_const()));
  CHECK(find_conflict(write_a, read_a)->kind() == "read-after-write");
  CHECK(find_conflict(read_a, write_a)->kind() == "write-after-read");
  CHECK(find_conflict(write_a, write_a)->kind() == "write-after-write");
  CHECK_FALSE(find_conflict(read_a, read_a_too).has_value());
  CHECK_FALSE(find_conflict(set(fill(buf(0).subspan(0, 32), 1.0F)), set(fill(buf(0).subspan(32, 32), 1.0F))));
  CHECK(find_conflict(set(fill(buf(0).subspan(0, 33), 1.0F)), set(fill(buf(0).subspan(32, 32), 1.0F))));
  const std::string text = find_conflict(write_a, read_a)->describe();
  INFO(text);
  CHECK(text.find("\"fill\" writes") != std::string::npos);
  CHECK(text.find("\"copy\" reads") != std::string::npos);
  CHECK(text.find("256 bytes at 0x100000") != std::string::npos);
}

TEST_CASE("all() refuses branches that race, naming both ops and the bytes; all_unchecked and disjoint ones pass") {
  CHECK_THROWS_WITH_AS((void)all(fill(buf(0), 1.0F), copy(buf(1), buf(0).as_const())),
                       doctest::Contains("branches 0 and 1 race: \"fill\" writes and \"copy\" reads the 256 bytes"),
                       UsageError);
  CHECK_THROWS_WITH_AS((void)all(value(1), fill(buf(0).subspan(0, 8), 1.0F), fill(buf(0).subspan(4, 8), 2.0F)),
                       doctest::Contains("branches 1 and 2 race"), UsageError);
  CHECK_THROWS_WITH_AS((void)all(fill(buf(0), 1.0F), fill(buf(1), 1.0F) >> copy(buf(2), buf(0).as_const())),
                       doctest::Contains("all_unchecked"), UsageError);
  const auto unchecked = all_unchecked(fill(buf(0), 1.0F), copy(buf(1), buf(0).as_const()));
  CHECK_FALSE(unchecked.checked());
  const auto fine = all(fill(buf(0).subspan(0, 32), 1.0F), fill(buf(0).subspan(32, 32), 2.0F),
                        copy(buf(1), buf(2).as_const()), copy(buf(3), buf(2).as_const()));
  CHECK(fine.checked());
  // Opaque branches cannot be looked into: not refused.
  CHECK_NOTHROW((void)all(fill(buf(0), 1.0F), host_call("log", [] {})));
}

TEST_CASE("the inferred DAG: only conflicting ops are ordered, and only directly") {
  SUBCASE("independent ops: no edges") {
    const auto op = dataflow(fill(buf(0), 1.0F), fill(buf(1), 2.0F), copy(buf(2), buf(3).as_const()));
    CHECK(op.dependencies() == Deps{{}, {}, {}});
  }
  SUBCASE("a diamond, without the edge implied through others") {
    // 0 writes a; 1 reads a writes b; 2 reads a writes c; 3 reads b and c writes a (after 1, 2; 0 only through them)
    const auto op = dataflow(fill(buf(0), 1.0F), copy(buf(1), buf(0).as_const()), copy(buf(2), buf(0).as_const()),
                             with_accesses("sum", value(0), reads(buf(1), buf(2)), writes(buf(0))));
    CHECK(op.dependencies() == Deps{{}, {0}, {0}, {1, 2}});
  }
  SUBCASE("write-after-read and write-after-write order too") {
    const auto op =
        dataflow(copy(buf(1), buf(0).as_const()), fill(buf(0), 1.0F), fill(buf(0), 2.0F), fill(buf(2), 3.0F));
    CHECK(op.dependencies() == Deps{{}, {0}, {1}, {}});
  }
  SUBCASE("an opaque op is a barrier") {
    const auto op = dataflow(fill(buf(0), 1.0F), fill(buf(1), 1.0F), join(), fill(buf(2), 1.0F), fill(buf(3), 1.0F));
    CHECK(op.dependencies() == Deps{{}, {}, {0, 1}, {2}, {2}});
  }
  SUBCASE("disjoint parts of one buffer are independent; overlapping ones are not") {
    const auto op = dataflow(fill(buf(0).subspan(0, 32), 1.0F), fill(buf(0).subspan(32, 32), 2.0F),
                             copy(buf(1).subspan(0, 16), buf(0).subspan(24, 16).as_const()));
    CHECK(op.dependencies() == Deps{{}, {}, {0, 1}});
  }
  SUBCASE("a composite is one unit") {
    const auto op = dataflow(fill(buf(0), 1.0F) >> fill(buf(1), 1.0F), fill(buf(2), 1.0F), fill(buf(1), 2.0F));
    CHECK(op.dependencies() == Deps{{}, {}, {0}});
  }
  SUBCASE("a run-time list: four interleaved chains") {
    std::vector<decltype(fill(buf(0), 1.0F))> ops;
    ops.reserve(12);
    for (int i = 0; i < 12; ++i) ops.push_back(fill(buf(i % 4), static_cast<float>(i)));
    const auto op = dataflow(std::move(ops));
    CHECK(op.size() == 12);
    for (std::size_t i = 0; i < 12; ++i) {
      CHECK(op.dependencies()[i] ==
            (i < 4 ? std::vector<std::uint32_t>{} : std::vector<std::uint32_t>{static_cast<std::uint32_t>(i - 4)}));
    }
  }
  SUBCASE("one join instead of two: a node after a join and another branch waits for the join alone") {
    // q, k, v from x; rope(q, k) joins q and k; append(k, v) after rope (k) and v; attend after append. Append's
    // wait for v moves into rope's join, as all(q, k, v) >> rope would write it.
    const DeviceSpan<float> x = buf(0);
    const auto op = dataflow(copy(buf(1), x.as_const()), copy(buf(2), x.as_const()), copy(buf(3), x.as_const()),
                             with_accesses("rope", value(0), writes(buf(1), buf(2))),
                             with_accesses("append", value(0), reads(buf(2), buf(3)), writes(buf(4))),
                             with_accesses("attend", value(0), reads(buf(1), buf(4)), writes(buf(5))));
    CHECK(op.dependencies() == Deps{{}, {}, {}, {0, 1, 2}, {3}, {4}});
  }
  SUBCASE("a chain: each op after the last") {
    const auto op = dataflow(fill(buf(0), 1.0F), copy(buf(1), buf(0).as_const()), copy(buf(2), buf(1).as_const()),
                             copy(buf(3), buf(2).as_const()));
    CHECK(op.dependencies() == Deps{{}, {0}, {1}, {2}});
  }
}

TEST_CASE("infer_dependencies on many ops stays exact (bit sets past 64 ops)") {
  std::vector<AccessSet> sets(150);
  for (std::size_t i = 0; i < sets.size(); ++i) {
    // op i writes slot i % 3; so op i follows op i - 3 only
    const CUdeviceptr slot = 0x1000 * (1 + i % 3);
    sets[i].write(slot, 16, "w");
  }
  const auto deps = detail::infer_dependencies(sets);
  for (std::size_t i = 0; i < sets.size(); ++i) {
    if (i < 3) {
      CHECK(deps[i].empty());
    } else {
      REQUIRE(deps[i].size() == 1);
      CHECK(deps[i][0] == i - 3);
    }
  }
}
