// Conditions and conditional ops (graph/condition.hpp, graph/conditional.hpp): IF, IF/ELSE, WHILE and SWITCH nodes
// run their bodies as the device decides, and the bound of while_ stops a runaway loop (gpu).
#include <doctest/doctest.h>

#include <lazygraph/detail/driver/driver_api.hpp>
#include <lazygraph/lazygraph.hpp>

#include <string>
#include <utility>
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
// Adds *x to *total.
extern "C" __global__ void accumulate(unsigned* total, const unsigned* x) { *total += *x; }
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

void set(Stream& s, DeviceBuffer<unsigned>& b, unsigned value) {
  copy_async(s, b.view(), std::span<const unsigned>(std::vector<unsigned>{value}));
}

// What `callback` records: captured on `s`, or with `built`, added by CudaGraph::build (the same semantics).
template <class F>
CudaGraph<> record(bool built, Stream& s, F&& callback) {
  if (built) return CudaGraph<>::build(lgtest::device(), callback);
  return CudaGraph<>::scope(s, callback);
}

const LaunchConfig one{{1, 1, 1}, {1, 1, 1}, 0};

}  // namespace

// A conditional op is a BuildableNode exactly when its bodies are (CudaGraph::build adds it).
static_assert(BuildableNode<ConditionalOp<decltype(fill(std::declval<DeviceSpan<unsigned>>(), 0U))>>);

TEST_CASE("the core while_guard kernel takes a Condition, checked like any argument") {
  const KernelDeclarations d(core_kernels().sources);
  CHECK_NOTHROW(d.check<void(Condition, unsigned*, unsigned)>("while_guard"));
  CHECK_THROWS_AS(d.check<void(unsigned long long, unsigned*, unsigned)>("while_guard"), UsageError);
}

TEST_SUITE("gpu") {
  TEST_CASE("if_ runs its body only when a kernel set the condition, replay by replay, captured or built") {
    Stream& s = lgtest::stream();
    const auto set_from = library().get<void(Condition, const unsigned*)>("set_from");
    const auto add = library().get<void(unsigned*, unsigned)>("add");
    for (const bool built : {false, true}) {
      CAPTURE(built);
      auto flag = lgtest::to_device(s, std::vector<unsigned>{0});
      auto x = lgtest::to_device(s, std::vector<unsigned>{0});
      auto g = record(built, s, [&](Scope& sc) {
        const Condition c = sc.condition();
        sc.record(set_from(one, c, flag.cview()) >> if_(c, add(one, x.view(), 1U)) >> add(one, x.view(), 100U));
      });
      g.launch_on(s);
      CHECK(read(x)[0] == 100);  // the IF was false: its body did nothing
      set(s, flag, 1);
      g.launch_on(s);
      g.launch_on(s);
      CHECK(read(x)[0] == 302);
    }
  }

  TEST_CASE("if_else takes one of two bodies and switch_ the body its value names") {
    Stream& s = lgtest::stream();
    if (detail::driver::driver_version() < 12080) {
      MESSAGE("skipped: if_else and switch_ need a driver for CUDA 12.8");
      return;
    }
    const auto set_from = library().get<void(Condition, const unsigned*)>("set_from");
    const auto add = library().get<void(unsigned*, unsigned)>("add");
    for (const bool built : {false, true}) {
      CAPTURE(built);
      auto value = lgtest::to_device(s, std::vector<unsigned>{0});
      auto x = lgtest::to_device(s, std::vector<unsigned>{0});
      auto g = record(built, s, [&](Scope& sc) {
        const Condition c = sc.condition();
        const Condition d = sc.condition();
        sc.record(set_from(one, c, value.cview()) >> if_else(c, add(one, x.view(), 1U), add(one, x.view(), 10U)) >>
                  set_from(one, d, value.cview()) >>
                  switch_(d, add(one, x.view(), 100U), add(one, x.view(), 1000U), add(one, x.view(), 10000U)));
      });
      const std::vector<std::pair<unsigned, unsigned>> cases{{0, 110}, {1, 1001}, {2, 10001}, {7, 1}};
      for (const auto& [v, want] : cases) {
        CAPTURE(v);
        set(s, value, v);
        fill(x.view(), 0U).sync_on(s);
        g.launch_on(s);
        CHECK(read(x)[0] == want);
      }
    }
  }

  TEST_CASE("while_ runs its body exactly until the body clears the condition, anew every replay") {
    Stream& s = lgtest::stream();
    const auto count_to = library().get<void(Condition, unsigned*, const unsigned*)>("count_to");
    for (const bool built : {false, true}) {
      CAPTURE(built);
      auto hits = lgtest::to_device(s, std::vector<unsigned>{0});
      auto target = lgtest::to_device(s, std::vector<unsigned>{5});
      const LoopBound bound(library(), 1000);
      auto g = record(built, s, [&](Scope& sc) {
        const Condition c = sc.condition(1);  // enter the loop
        sc.record(fill(hits.view(), 0U) >> while_(c, count_to(one, c, hits.view(), target.cview()), bound));
      });
      for (const unsigned k : {5U, 1U, 37U}) {
        CAPTURE(k);
        set(s, target, k);
        g.launch_on(s);
        CHECK(read(hits)[0] == k);
        CHECK(bound.iterations(s) == k);
        CHECK_FALSE(bound.reached(s));
      }
    }
  }

  TEST_CASE("a while_ body may hold a kernel that synchronizes its blocks: each iteration sums the input once") {
    Stream& s = lgtest::stream();
    const auto count_to = library().get<void(Condition, unsigned*, const unsigned*)>("count_to");
    const auto sum = library().get<void(const float*, float*, int)>("sum_f32");  // __syncthreads between warps
    const int n = 4096;
    std::vector<float> in(n);
    double want = 0;
    const auto r = lgtest::random_floats(n);
    for (int i = 0; i < n; ++i) {
      in[i] = static_cast<float>(static_cast<int>(r[i] * 8.0F));  // small integers: every sum is exact in float
      want += in[i];
    }
    const DeviceBuffer<float> x = lgtest::to_device(s, in);
    DeviceBuffer<float> total = zeros<float>(1).sync_on(s);
    auto hits = lgtest::to_device(s, std::vector<unsigned>{0});
    auto target = lgtest::to_device(s, std::vector<unsigned>{3});
    const LoopBound bound(library(), 100);
    for (const bool built : {false, true}) {
      CAPTURE(built);
      auto g = record(built, s, [&](Scope& sc) {
        const Condition c = sc.condition(1);
        sc.record(fill(total.view(), 0.0F) >> fill(hits.view(), 0U) >>
                  while_(c,
                         sum(LaunchConfig{{4, 1, 1}, {256, 1, 1}, 0}, x.cview(), total.view(), n) >>
                             count_to(one, c, hits.view(), target.cview()),
                         bound));
      });
      g.launch_on(s);
      CHECK(read(hits)[0] == 3);
      CHECK(static_cast<double>(lgtest::to_host(s, total.cview())[0]) == 3 * want);
    }
  }

  TEST_CASE("the bound stops a loop whose body never clears its condition, and reports it") {
    Stream& s = lgtest::stream();
    const auto add = library().get<void(unsigned*, unsigned)>("add");
    auto x = lgtest::to_device(s, std::vector<unsigned>{0});
    const LoopBound bound(library(), 64);
    auto g = CudaGraph<>::build(lgtest::device(), [&](Scope& sc) {
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
    const LiveHandles before = live_handles();
    for (const bool built : {false, true}) {
      CAPTURE(built);
      CHECK_THROWS_WITH_AS((void)record(built, s,
                                        [&](Scope& sc) {
                                          const Condition c = sc.condition();
                                          sc.record(set_from(one, c, flag.cview()));
                                        }),
                           doctest::Contains("steer no if_"), UsageError);
      CHECK(live_handles().graphs == before.graphs);
    }
    fill(flag.view(), 3U).sync_on(s);
    CHECK(read(flag)[0] == 3);
  }

  TEST_CASE("a body may fork with all() and refuses host calls with a UsageError, captured or built") {
    Stream& s = lgtest::stream();
    const auto set_from = library().get<void(Condition, const unsigned*)>("set_from");
    const auto add = library().get<void(unsigned*, unsigned)>("add");
    for (const bool built : {false, true}) {
      CAPTURE(built);
      auto flag = lgtest::to_device(s, std::vector<unsigned>{1});
      auto x = lgtest::to_device(s, std::vector<unsigned>{0});
      auto y = lgtest::to_device(s, std::vector<unsigned>{0});
      auto g = record(built, s, [&](Scope& sc) {
        const Condition c = sc.condition();
        sc.record(set_from(one, c, flag.cview()) >> if_(c, all(add(one, x.view(), 1U), add(one, y.view(), 2U))));
      });
      g.launch_on(s);
      g.launch_on(s);
      CHECK(read(x)[0] == 2);
      CHECK(read(y)[0] == 4);
      const LiveHandles before = live_handles();
      CHECK_THROWS_WITH_AS((void)record(built, s,
                                        [&](Scope& sc) {
                                          const Condition c = sc.condition(1);
                                          sc.record(if_(c, allow_in_graph(host_call("h", [] {}))));
                                        }),
                           doctest::Contains("a host call inside the body of if_"), UsageError);
      CHECK(live_handles().graphs == before.graphs);
      add(one, x.view(), 1U).sync_on(s);  // the stream is usable after the failed recording
      CHECK(read(x)[0] == 3);
    }
  }

  TEST_CASE("conditional ops nest: an IF around a WHILE, and a WHILE inside a WHILE, captured or built") {
    Stream& s = lgtest::stream();
    const auto set_from = library().get<void(Condition, const unsigned*)>("set_from");
    const auto count_to = library().get<void(Condition, unsigned*, const unsigned*)>("count_to");
    const auto accumulate = library().get<void(unsigned*, const unsigned*)>("accumulate");
    for (const bool built : {false, true}) {
      CAPTURE(built);
      auto flag = lgtest::to_device(s, std::vector<unsigned>{0});
      auto yes = lgtest::to_device(s, std::vector<unsigned>{1});
      auto hits = lgtest::to_device(s, std::vector<unsigned>{77});
      auto target = lgtest::to_device(s, std::vector<unsigned>{6});
      const LoopBound bound(library(), 100);
      auto if_while = record(built, s, [&](Scope& sc) {
        const Condition c = sc.condition();
        const Condition d = sc.condition(1);
        sc.record(set_from(one, c, flag.cview()) >>
                  if_(c, fill(hits.view(), 0U) >> while_(d, count_to(one, d, hits.view(), target.cview()), bound)));
      });
      if_while.launch_on(s);
      CHECK(read(hits)[0] == 77);  // the IF was false: the loop inside it did not run
      set(s, flag, 1);
      if_while.launch_on(s);
      CHECK(read(hits)[0] == 6);
      CHECK(bound.iterations(s) == 6);

      // Outer loop: `outer_target` iterations; each runs an inner loop of `inner_target` iterations (its condition
      // set again on entry: a default applies once per launch) and adds the inner count to `total`.
      auto outer = lgtest::to_device(s, std::vector<unsigned>{0});
      auto inner = lgtest::to_device(s, std::vector<unsigned>{0});
      auto total = lgtest::to_device(s, std::vector<unsigned>{0});
      auto outer_target = lgtest::to_device(s, std::vector<unsigned>{3});
      auto inner_target = lgtest::to_device(s, std::vector<unsigned>{4});
      const LoopBound outer_bound(library(), 50);
      const LoopBound inner_bound(library(), 50);
      auto loops = record(built, s, [&](Scope& sc) {
        const Condition c = sc.condition(1);
        const Condition d = sc.condition();
        sc.record(fill(outer.view(), 0U) >> fill(total.view(), 0U) >>
                  while_(c,
                         fill(inner.view(), 0U) >> set_from(one, d, yes.cview()) >>
                             while_(d, count_to(one, d, inner.view(), inner_target.cview()), inner_bound) >>
                             accumulate(one, total.view(), inner.cview()) >>
                             count_to(one, c, outer.view(), outer_target.cview()),
                         outer_bound));
      });
      loops.launch_on(s);
      CHECK(read(outer)[0] == 3);
      CHECK(read(total)[0] == 12);
      set(s, outer_target, 5);
      set(s, inner_target, 7);
      loops.launch_on(s);
      CHECK(read(outer)[0] == 5);
      CHECK(read(total)[0] == 35);
      CHECK(outer_bound.iterations(s) == 5);
      CHECK(inner_bound.iterations(s) == 7);  // the last inner loop's
    }
  }

  TEST_CASE("a built graph with conditions updates kernels in its bodies in place, and re-instantiates on request") {
    Stream& s = lgtest::stream();
    const auto set_from = library().get<void(Condition, const unsigned*)>("set_from");
    const auto add = library().get<void(unsigned*, unsigned)>("add");
    auto flag = lgtest::to_device(s, std::vector<unsigned>{1});
    auto x = lgtest::to_device(s, std::vector<unsigned>{0});
    const auto body = [&](unsigned amount, bool twice) {
      return [&, amount, twice](Scope& sc) {
        const Condition c = sc.condition();
        if (twice) {
          sc.record(set_from(one, c, flag.cview()) >> if_(c, add(one, x.view(), amount) >> add(one, x.view(), amount)));
        } else {
          sc.record(set_from(one, c, flag.cview()) >> if_(c, add(one, x.view(), amount)));
        }
      };
    };
    auto g = CudaGraph<>::build(lgtest::device(), body(1, false));
    g.launch_on(s);
    CHECK(read(x)[0] == 1);
    const UpdateResult applied = g.update_from(body(10, false));
    CHECK_MESSAGE(applied.status == UpdateStatus::applied, applied.message);
    g.launch_on(s);
    CHECK(read(x)[0] == 11);  // the kernel inside the IF body took the new argument
    const UpdateResult refused = g.update_from(body(100, true));
    CHECK(refused.status == UpdateStatus::topology_changed);
    CHECK_MESSAGE(refused.message.find("body 0") != std::string::npos, refused.message);
    g.launch_on(s);
    CHECK(read(x)[0] == 21);  // refused: the graph is as it was
    UpdateOptions again;
    again.reinstantiate_on_mismatch = true;
    const UpdateResult remade = g.update_from(body(100, true), again);
    CHECK(remade.status == UpdateStatus::reinstantiated);
    g.launch_on(s);
    CHECK(read(x)[0] == 221);
    set(s, flag, 0);
    g.launch_on(s);
    CHECK(read(x)[0] == 221);  // the new graph's IF reads its own, new condition

    // An op that carries the graph's condition (recorded with no Scope) updates in place too.
    Condition kept;
    auto h = CudaGraph<>::build(lgtest::device(), [&](Scope& sc) {
      kept = sc.condition(1);
      sc.record(if_(kept, add(one, x.view(), 1U)));
    });
    h.launch_on(s);
    CHECK(read(x)[0] == 222);
    const UpdateResult op_applied = h.update_from(if_(kept, add(one, x.view(), 5U)));
    CHECK_MESSAGE(op_applied.status == UpdateStatus::applied, op_applied.message);
    h.launch_on(s);
    CHECK(read(x)[0] == 227);
    const UpdateResult op_refused = h.update_from(if_(kept, add(one, x.view(), 5U) >> add(one, x.view(), 5U)), again);
    CHECK(op_refused.status == UpdateStatus::topology_changed);
    CHECK_MESSAGE(op_refused.message.find("Scope::condition") != std::string::npos, op_refused.message);
    h.launch_on(s);
    CHECK(read(x)[0] == 232);
  }

  TEST_CASE("a captured graph with conditions is never updated in place, only re-instantiated when asked") {
    Stream& s = lgtest::stream();
    const auto add = library().get<void(unsigned*, unsigned)>("add");
    auto x = lgtest::to_device(s, std::vector<unsigned>{0});
    const auto body = [&](unsigned amount) {
      return [&, amount](Scope& sc) {
        const Condition c = sc.condition(1);
        sc.record(if_(c, add(one, x.view(), amount)));
      };
    };
    auto g = CudaGraph<>::scope(s, body(1));
    const UpdateResult refused = g.update_from(body(10));
    CHECK(refused.status == UpdateStatus::not_supported);
    g.launch_on(s);
    CHECK(read(x)[0] == 1);
    UpdateOptions again;
    again.reinstantiate_on_mismatch = true;
    CHECK(g.update_from(body(10), again).status == UpdateStatus::reinstantiated);
    g.launch_on(s);
    CHECK(read(x)[0] == 11);
  }

  TEST_CASE("conditional ops refuse to run eagerly, and LoopBound refuses a zero bound") {
    Stream& s = lgtest::stream();
    const auto add = library().get<void(unsigned*, unsigned)>("add");
    auto x = lgtest::to_device(s, std::vector<unsigned>{0});
    CHECK_THROWS_WITH_AS(if_(Condition{}, add(one, x.view(), 1U)).sync_on(s), doctest::Contains("nodes of a graph"),
                         UsageError);
    CHECK_THROWS_AS(LoopBound(library(), 0), UsageError);
    CHECK(read(x)[0] == 0);
    // The stream is still usable.
    add(one, x.view(), 2U).sync_on(s);
    CHECK(read(x)[0] == 2);
  }
}
