// Scratch memory (Scope::scratch) and graph pools (graph/graph_pool.hpp): memory that belongs to a graph, checked
// against misuse, updated with the graph, and shared between the graphs of one pool, which never run at once
// (gpu).
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {

using lgtest::axpy;

constexpr std::size_t mib = std::size_t{1} << 20;

// out = x + 0.5 * (2 x + y), through a scratch intermediate t = 2 x + y.
void record_two_steps(Scope& s, const DeviceSpan<const float>& x, const DeviceSpan<const float>& y,
                      const DeviceSpan<float>& out) {
  const int n = static_cast<int>(x.size());
  DeviceSpan<float> t = s.scratch<float>(x.size());
  s.record(copy(t, y) >> axpy()(grid_for(n, 256), 2.0F, x, t, n) >> copy(out, x) >>
           axpy()(grid_for(n, 256), 0.5F, t.as_const(), out, n));
}

std::vector<double> two_steps_reference(const std::vector<float>& x, const std::vector<float>& y) {
  std::vector<double> r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double t = 2.0 * x[i] + y[i];
    r[i] = x[i] + 0.5 * t;
  }
  return r;
}

template <class F>
CudaGraph<> record(bool built, const Stream& s, F&& callback, const GraphOptions& options = {}) {
  if (built) return CudaGraph<>::build(lgtest::device(), callback, options);
  return CudaGraph<>::scope(s, callback, options);
}

// A graph that fills `bytes` of scratch with `value` and copies its last element to out[slot].
CudaGraph<> filler(std::size_t bytes, float value, const DeviceSpan<float>& out, std::size_t slot,
                   const GraphPool* pool) {
  GraphOptions options;
  if (pool != nullptr) options.pool = *pool;
  return CudaGraph<>::build(
      lgtest::device(),
      [&](Scope& s) {
        DeviceSpan<float> t = s.scratch<float>(bytes / sizeof(float));
        s.record(fill(t, value) >> copy(out.subspan(slot, 1), t.subspan(t.size() - 1, 1).as_const()));
      },
      options);
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("Scope::scratch holds intermediate results inside the graph, captured or built, and is no allocation") {
    Stream& s = lgtest::stream();
    (void)axpy();  // the kernel library loads before the capture, also when this test runs alone
    const std::size_t n = 10000;
    const auto hx = lgtest::random_floats(n);
    const auto hy = lgtest::random_floats(n);
    const auto x = lgtest::to_device(s, hx);
    const auto y = lgtest::to_device(s, hy);
    for (const bool built : {false, true}) {
      CAPTURE(built);
      DeviceBuffer<float> out(lgtest::device(), n);
      const auto before = live_handles();
      CudaGraph<> g = record(built, s, [&](Scope& sc) { record_two_steps(sc, x.cview(), y.cview(), out.view()); });
      CHECK(live_handles().device_allocations == before.device_allocations);
      CHECK(g.scratch_bytes() == n * sizeof(float));
      for (int replay = 0; replay < 3; ++replay) {
        g.launch();
        CHECK(lgtest::relative_error(lgtest::to_host(s, out.cview()), two_steps_reference(hx, hy)) < 1e-6);
      }
      // The allocation comes before every node and the free after them: 4 work nodes and 2 memory nodes.
      const auto kinds = g.node_kinds();
      CHECK(kinds.size() == 6);
      CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::other) == 2);
    }
  }

  TEST_CASE("scratch memory used outside its graph, or misused inside, is refused with UsageError") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> out(lgtest::device(), 16);
    DeviceSpan<float> kept;
    CudaGraph<> g = CudaGraph<>::scope(s, [&](Scope& sc) {
      kept = sc.scratch<float>(16);
      sc.record(fill(kept, 1.0F) >> copy(out.view(), kept.as_const()));
    });
    g.launch();
    CHECK_THROWS_AS(fill(kept, 2.0F).sync_on(s), UsageError);  // eagerly
    CHECK_THROWS_AS(g.update(fill(kept, 2.0F)), UsageError);   // eagerly, before a replay
    // In another graph.
    CHECK_THROWS_AS((void)CudaGraph<>::capture(s, fill(kept, 2.0F)), UsageError);
    CHECK_THROWS_AS((void)CudaGraph<>::build(lgtest::device(), fill(kept, 2.0F)), UsageError);
    // As a child: CUDA embeds no graph with memory nodes.
    CHECK_THROWS_AS((void)CudaGraph<>::capture(s, child_graph(g)), UsageError);
    // Zero elements, and a scratch inside a conditional body's recording is impossible (bodies are ops).
    CHECK_THROWS_AS((void)CudaGraph<>::scope(s, [&](Scope& sc) { (void)sc.scratch<float>(0); }), UsageError);
    // The stream and the graph still work.
    g.launch();
    CHECK(lgtest::to_host(s, out.cview()) == std::vector<float>(16, 1.0F));
  }

  TEST_CASE("a built graph with scratch updates in place; a captured one re-instantiates only when asked") {
    Stream& s = lgtest::stream();
    const std::size_t n = 4096;
    const auto hx = lgtest::random_floats(n);
    const auto hx2 = lgtest::random_floats(n);
    const auto hy = lgtest::random_floats(n);
    const auto x = lgtest::to_device(s, hx);
    const auto x2 = lgtest::to_device(s, hx2);
    const auto y = lgtest::to_device(s, hy);
    DeviceBuffer<float> out(lgtest::device(), n);
    const auto with = [&](const DeviceBuffer<float>& in) {
      return [&](Scope& sc) { record_two_steps(sc, in.cview(), y.cview(), out.view()); };
    };
    CudaGraph<> built = CudaGraph<>::build(lgtest::device(), with(x));
    const UpdateResult r = built.update_from(with(x2));
    CHECK(r.status == UpdateStatus::applied);
    built.launch();
    CHECK(lgtest::relative_error(lgtest::to_host(s, out.cview()), two_steps_reference(hx2, hy)) < 1e-6);
    // More scratch than the graph has: a mismatch, or a new graph when asked.
    const auto bigger = [&](Scope& sc) {
      record_two_steps(sc, x.cview(), y.cview(), out.view());
      (void)sc.scratch<float>(8);
    };
    CHECK(built.update_from(bigger).status == UpdateStatus::topology_changed);
    UpdateOptions again;
    again.reinstantiate_on_mismatch = true;
    CHECK(built.update_from(bigger, again).status == UpdateStatus::reinstantiated);
    built.launch();
    CHECK(lgtest::relative_error(lgtest::to_host(s, out.cview()), two_steps_reference(hx, hy)) < 1e-6);
    CHECK(built.scratch_bytes() == n * sizeof(float) + 8 * sizeof(float));

    CudaGraph<> captured = CudaGraph<>::scope(s, with(x));
    CHECK(captured.update_from(with(x2)).status == UpdateStatus::not_supported);
    captured.launch();
    CHECK(lgtest::relative_error(lgtest::to_host(s, out.cview()), two_steps_reference(hx, hy)) < 1e-6);
    CHECK(captured.update_from(with(x2), again).status == UpdateStatus::reinstantiated);
    captured.launch();
    CHECK(lgtest::relative_error(lgtest::to_host(s, out.cview()), two_steps_reference(hx2, hy)) < 1e-6);
  }

  TEST_CASE("16 graphs of one pool use about the scratch memory of the largest, from one thread or eight") {
    GraphPool pool(lgtest::device());
    DeviceBuffer<float> out(lgtest::device(), 16);
    std::vector<CudaGraph<>> graphs;
    std::size_t largest = 0;
    for (std::size_t i = 0; i < 16; ++i) {
      const std::size_t bytes = (32 + 2 * i) * mib;
      largest = std::max(largest, bytes);
      graphs.push_back(filler(bytes, static_cast<float>(i + 1), out.view(), i, &pool));
    }
    CHECK(pool.graph_count() == 16);
    CHECK(pool.largest_scratch_bytes() == largest);
    CHECK(pool.total_scratch_bytes() == mib * (16 * 32 + 2 * (15 * 16 / 2)));
    pool.trim();
    pool.reset_peaks();
    for (auto& g : graphs) g.launch_on(pool.stream());
    pool.stream().synchronize();
    std::vector<float> expected(16);
    for (std::size_t i = 0; i < 16; ++i) expected[i] = static_cast<float>(i + 1);
    CHECK(lgtest::to_host(lgtest::stream(), out.cview()) == expected);
    const GraphMemoryUsage one = pool.usage();
    MESSAGE("16 pooled graphs, largest " << largest / mib << " MiB, sum " << pool.total_scratch_bytes() / mib
                                         << " MiB: reserved " << one.reserved / mib << " MiB");
    CHECK(one.reserved >= largest);
    CHECK(static_cast<double>(one.reserved_peak) <= 1.2 * static_cast<double>(largest));

    // Eight threads replaying them on streams of their own: serialised through the pool, so no more memory.
    fill(out.view(), 0.0F).sync_on(lgtest::stream());
    std::vector<std::thread> threads;
    threads.reserve(8);
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        const Stream mine = lgtest::device().create_stream();
        for (int k = 0; k < 4; ++k) graphs[static_cast<std::size_t>((t * 2 + k) % 16)].launch_on(mine);
        mine.synchronize();  // launch_on(mine) orders the replay before later work on mine
      });
    }
    for (auto& th : threads) th.join();
    CHECK(lgtest::to_host(lgtest::stream(), out.cview()) == expected);  // every graph ran at least once
    const GraphMemoryUsage eight = pool.usage();
    MESSAGE("from 8 threads: reserved peak " << eight.reserved_peak / mib << " MiB");
    CHECK(static_cast<double>(eight.reserved_peak) <= 1.2 * static_cast<double>(largest));

    graphs.erase(graphs.begin() + 4, graphs.end());
    CHECK(pool.graph_count() == 4);
    graphs.clear();
    pool.trim();
    CHECK(pool.usage().reserved < largest);
  }

  TEST_CASE("a GraphCache with a pool gives it to every graph it makes") {
    // Set, since the check reads all of it and the graphs write only 1 to 4 (initcheck saw the rest read unset).
    auto out = lgtest::to_device(lgtest::stream(), std::vector<float>(8, -1.0F));
    GraphCache<std::size_t> cache(3, GraphPool(lgtest::device()), [&](const std::size_t& key, const GraphPool& pool) {
      return filler(key * mib, static_cast<float>(key), out.view(), key, &pool);
    });
    REQUIRE(cache.pool() != nullptr);
    for (std::size_t key = 1; key <= 4; ++key) cache.get(key).launch();
    CHECK(cache.pool()->graph_count() == 3);  // one evicted
    CHECK(cache.pool()->largest_scratch_bytes() == 4 * mib);
    const auto got = lgtest::to_host(lgtest::stream(), out.cview());
    for (std::size_t key = 1; key <= 4; ++key) CHECK(got[key] == static_cast<float>(key));
  }

  TEST_CASE("out of memory while making a cache entry: a CudaError, and the cache and its graphs keep working") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> out(lgtest::device(), 4);
    const std::size_t total = lgtest::device().total_memory();
    GraphCache<std::size_t> cache(4, GraphPool(lgtest::device()), [&](const std::size_t& key, const GraphPool& pool) {
      // Key 0 fits; key 1 asks for more scratch than the GPU has; key 2 for a buffer that does not fit.
      if (key == 2) {
        DeviceBuffer<float> huge(lgtest::device(), total / sizeof(float) + 1);
        return filler(mib, 2.0F, out.view(), 2, &pool);
      }
      return filler(key == 1 ? total + mib : mib, static_cast<float>(key + 1), out.view(), key, &pool);
    });
    cache.get(0).launch();
    for (const std::size_t key : {std::size_t{1}, std::size_t{2}}) {
      CAPTURE(key);
      bool failed = false;
      try {
        cache.get(key).launch();
      } catch (const CudaError& e) {
        failed = true;
        MESSAGE("key " << key << ": " << std::string(e.what()));
        CHECK(e.code_name() == "CUDA_ERROR_OUT_OF_MEMORY");
      }
      CHECK(failed);
    }
    CHECK(cache.contains(0));
    MESSAGE("after the failures: graph memory reserved " << graph_memory_usage(lgtest::device()).reserved / mib
                                                         << " MiB, device free " << lgtest::device().free_memory() / mib
                                                         << " MiB");
    // What the failed mapping reserved went back: ordinary allocations work after it.
    CHECK_NOTHROW(DeviceBuffer<float>(lgtest::device(), (std::size_t{1} << 30) / sizeof(float)));
    // The failed entries are not kept, or kept but refused again — either way the cache and key 0 work.
    fill(out.view(), 0.0F).sync_on(s);
    cache.get(0).launch();
    CHECK(lgtest::to_host(s, out.cview())[0] == 1.0F);
  }
}
