// Conditions and conditional ops (graph/condition.hpp, graph/conditional.hpp): IF, IF/ELSE, WHILE and SWITCH nodes
// run their bodies as the device decides, and the bound of while_ stops a runaway loop (gpu).
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <string>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {

// Test kernels: each sets the condition from device memory, so a test decides on the device what the graph does.
const char* const kSource = R"(#include "lazygraph/condition.cuh"
// Sets c to *value.
extern "C" __global__ void set_from(lg::Condition c, const unsigned* value) { lg::set_condition(c, *value); }
// Counts one more iteration in *hits; continues (c = 1) while *hits < *target.
extern "C" __global__ void count_to(lg::Condition c, unsigned* hits, const unsigned* target) {
  *hits += 1;
  lg::set_condition(c, *hits < *target ? 1u : 0u);
}
// Adds `amount` to *x.
extern "C" __global__ void add(unsigned* x, unsigned amount) { *x += amount; }
)";

KernelLibrary& library() {
  static KernelLibrary lib = [] {
    KernelLibraryOptions opts;
    opts.kernel_sets = {core_kernels(), KernelSet{"test", {{"conditions.cu", kSource}}, {}}};
    return KernelLibrary(lgtest::device(), std::move(opts));
  }();
  return lib;
}

std::vector<unsigned> read(const DeviceBuffer<unsigned>& b) { return lgtest::to_host(lgtest::stream(), b.cview()); }

}  // namespace

TEST_CASE("the core while_guard kernel takes a Condition, checked like any argument") {
  const KernelDeclarations d(core_kernels().sources);
  CHECK_NOTHROW(d.check<void(Condition, unsigned*, unsigned)>("while_guard"));
  CHECK_THROWS_AS(d.check<void(unsigned long long, unsigned*, unsigned)>("while_guard"), UsageError);
}

TEST_SUITE("gpu") {
  TEST_CASE("if_ runs its body only when a kernel set the condition, replay by replay") {
    Stream& s = lgtest::stream();
    const auto set_from = library().get<void(Condition, const unsigned*)>("set_from");
    const auto add = library().get<void(unsigned*, unsigned)>("add");
    auto flag = lgtest::to_device(s, std::vector<unsigned>{0});
    auto x = lgtest::to_device(s, std::vector<unsigned>{0});
    const LaunchConfig one{{1, 1, 1}, {1, 1, 1}, 0};
    auto g = CudaGraph<>::scope(s, [&](Scope& sc) {
      const Condition c = sc.condition();
      sc.record(set_from(one, c, flag.cview()) >> if_(c, add(one, x.view(), 1U)) >> add(one, x.view(), 100U));
    });
    g.launch_on(s);
    CHECK(read(x)[0] == 100);  // the IF was false: its body did nothing
    copy_async(s, flag.view(), std::span<const unsigned>(std::vector<unsigned>{1}));
    g.launch_on(s);
    g.launch_on(s);
    CHECK(read(x)[0] == 302);
  }

  TEST_CASE("if_else takes one of two bodies and switch_ the body its value names") {
    Stream& s = lgtest::stream();
    if (detail::driver::driver_version() < 12080) {
      MESSAGE("skipped: if_else and switch_ need a driver for CUDA 12.8");
      return;
    }
    const auto set_from = library().get<void(Condition, const unsigned*)>("set_from");
    const auto add = library().get<void(unsigned*, unsigned)>("add");
    auto value = lgtest::to_device(s, std::vector<unsigned>{0});
    auto x = lgtest::to_device(s, std::vector<unsigned>{0});
    const LaunchConfig one{{1, 1, 1}, {1, 1, 1}, 0};
    auto g = CudaGraph<>::scope(s, [&](Scope& sc) {
      const Condition c = sc.condition();
      const Condition d = sc.condition();
      sc.record(set_from(one, c, value.cview()) >> if_else(c, add(one, x.view(), 1U), add(one, x.view(), 10U)) >>
                set_from(one, d, value.cview()) >>
                switch_(d, add(one, x.view(), 100U), add(one, x.view(), 1000U), add(one, x.view(), 10000U)));
    });
    const std::vector<std::pair<unsigned, unsigned>> cases{{0, 110}, {1, 1001}, {2, 10001}, {7, 1}};
    for (const auto& [v, want] : cases) {
      CAPTURE(v);
      copy_async(s, value.view(), std::span<const unsigned>(std::vector<unsigned>{v}));
      fill(x.view(), 0U).sync_on(s);
      g.launch_on(s);
      CHECK(read(x)[0] == want);
    }
  }

  TEST_CASE("while_ runs its body exactly until the body clears the condition, anew every replay") {
    Stream& s = lgtest::stream();
    const auto count_to = library().get<void(Condition, unsigned*, const unsigned*)>("count_to");
    auto hits = lgtest::to_device(s, std::vector<unsigned>{0});
    auto target = lgtest::to_device(s, std::vector<unsigned>{5});
    const LaunchConfig one{{1, 1, 1}, {1, 1, 1}, 0};
    const LoopBound bound(library(), 1000);
    auto g = CudaGraph<>::scope(s, [&](Scope& sc) {
      const Condition c = sc.condition(1);  // enter the loop
      sc.record(fill(hits.view(), 0U) >> while_(c, count_to(one, c, hits.view(), target.cview()), bound));
    });
    for (const unsigned k : {5U, 1U, 37U}) {
      CAPTURE(k);
      copy_async(s, target.view(), std::span<const unsigned>(std::vector<unsigned>{k}));
      g.launch_on(s);
      CHECK(read(hits)[0] == k);
      CHECK(bound.iterations(s) == k);
      CHECK_FALSE(bound.reached(s));
    }
  }

  TEST_CASE("the bound stops a loop whose body never clears its condition, and reports it") {
    Stream& s = lgtest::stream();
    const auto add = library().get<void(unsigned*, unsigned)>("add");
    auto x = lgtest::to_device(s, std::vector<unsigned>{0});
    const LaunchConfig one{{1, 1, 1}, {1, 1, 1}, 0};
    const LoopBound bound(library(), 64);
    auto g = CudaGraph<>::scope(s, [&](Scope& sc) {
      const Condition c = sc.condition(1);
      sc.record(fill(x.view(), 0U) >> while_(c, add(one, x.view(), 1U), bound));  // never clears c
    });
    g.launch_on(s);
    CHECK(read(x)[0] == 64);
    CHECK(bound.iterations(s) == 64);
    CHECK(bound.reached(s));
    // A condition that starts at 0 runs no iteration.
    auto none = CudaGraph<>::scope(s, [&](Scope& sc) {
      const Condition c = sc.condition(0);
      sc.record(fill(x.view(), 0U) >> while_(c, add(one, x.view(), 1U), bound));
    });
    none.launch_on(s);
    CHECK(read(x)[0] == 0);
    CHECK(bound.iterations(s) == 0);
    CHECK_FALSE(bound.reached(s));
  }

  TEST_CASE("a condition no conditional op uses fails the capture with a UsageError, and the stream stays usable") {
    Stream& s = lgtest::stream();
    const auto set_from = library().get<void(Condition, const unsigned*)>("set_from");
    auto flag = lgtest::to_device(s, std::vector<unsigned>{0});
    const LaunchConfig one{{1, 1, 1}, {1, 1, 1}, 0};
    const LiveHandles before = live_handles();
    CHECK_THROWS_WITH_AS((void)CudaGraph<>::scope(s,
                                                  [&](Scope& sc) {
                                                    const Condition c = sc.condition();
                                                    sc.record(set_from(one, c, flag.cview()));
                                                  }),
                         doctest::Contains("steer no if_"), UsageError);
    CHECK(live_handles().graphs == before.graphs);
    fill(flag.view(), 3U).sync_on(s);
    CHECK(read(flag)[0] == 3);
  }

  TEST_CASE("a body may fork with all(), and refuses host calls and nested conditional ops with a UsageError") {
    Stream& s = lgtest::stream();
    const auto set_from = library().get<void(Condition, const unsigned*)>("set_from");
    const auto add = library().get<void(unsigned*, unsigned)>("add");
    auto flag = lgtest::to_device(s, std::vector<unsigned>{1});
    auto x = lgtest::to_device(s, std::vector<unsigned>{0});
    auto y = lgtest::to_device(s, std::vector<unsigned>{0});
    const LaunchConfig one{{1, 1, 1}, {1, 1, 1}, 0};
    auto g = CudaGraph<>::scope(s, [&](Scope& sc) {
      const Condition c = sc.condition();
      sc.record(set_from(one, c, flag.cview()) >> if_(c, all(add(one, x.view(), 1U), add(one, y.view(), 2U))));
    });
    g.launch_on(s);
    g.launch_on(s);
    CHECK(read(x)[0] == 2);
    CHECK(read(y)[0] == 4);
    CHECK_THROWS_WITH_AS((void)CudaGraph<>::scope(s,
                                                  [&](Scope& sc) {
                                                    const Condition c = sc.condition(1);
                                                    sc.record(if_(c, allow_in_graph(host_call("h", [] {}))));
                                                  }),
                         doctest::Contains("a host call inside the body of if_"), UsageError);
    CHECK_THROWS_WITH_AS((void)CudaGraph<>::scope(s,
                                                  [&](Scope& sc) {
                                                    const Condition c = sc.condition(1);
                                                    const Condition d = sc.condition(1);
                                                    sc.record(if_(c, if_(d, add(one, x.view(), 1U))));
                                                  }),
                         doctest::Contains("nesting is not supported"), UsageError);
    add(one, x.view(), 1U).sync_on(s);  // the stream is usable after the failed captures
    CHECK(read(x)[0] == 3);
  }

  TEST_CASE("conditional ops refuse to run eagerly, and LoopBound refuses a zero bound") {
    Stream& s = lgtest::stream();
    const auto add = library().get<void(unsigned*, unsigned)>("add");
    auto x = lgtest::to_device(s, std::vector<unsigned>{0});
    const LaunchConfig one{{1, 1, 1}, {1, 1, 1}, 0};
    CHECK_THROWS_WITH_AS(if_(Condition{}, add(one, x.view(), 1U)).sync_on(s),
                         doctest::Contains("nodes of a captured graph"), UsageError);
    CHECK_THROWS_AS(LoopBound(library(), 0), UsageError);
    CHECK(read(x)[0] == 0);
    // The stream is still usable.
    add(one, x.view(), 2U).sync_on(s);
    CHECK(read(x)[0] == 2);
  }
}
