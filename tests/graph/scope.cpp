// Scope (graph/scope.hpp): the recorder a capture callback receives. It records GraphNodes and returns
// their outputs, cannot be copied or moved, and refuses to record once its callback has returned.
#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

// Scope can be neither copied nor moved.
static_assert(!std::is_copy_constructible_v<Scope> && !std::is_move_constructible_v<Scope>);
static_assert(!std::is_copy_assignable_v<Scope> && !std::is_move_assignable_v<Scope>);

TEST_SUITE("gpu") {
  TEST_CASE("a Scope used after its capture callback returned throws UsageError while the graph lives") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> b = zeros<float>(16).sync_on(s);
    Scope* kept = nullptr;
    auto graph = CudaGraph<>::scope(s, [&](Scope& sc) {
      kept = &sc;
      sc.record(fill(b.view(), 1.0F));
    });
    CHECK_THROWS_WITH_AS(kept->record(fill(b.view(), 2.0F)), doctest::Contains("after the capture callback returned"),
                         UsageError);
    graph.launch();
    CHECK(lgtest::to_host(s, b.cview())[0] == 1.0F);
  }

  TEST_CASE("a Scope kept from a capture that threw also throws UsageError") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> b = zeros<float>(16).sync_on(s);
    Scope* kept = nullptr;
    CHECK_THROWS_AS(CudaGraph<>::scope(s,
                                       [&](Scope& sc) {
                                         kept = &sc;
                                         throw std::runtime_error("no");
                                       }),
                    std::runtime_error);
    CHECK_THROWS_AS(kept->record(fill(b.view(), 2.0F)), UsageError);
  }

  TEST_CASE("Scope::record turns ops into nodes that run on replay, not while recording, and returns outputs") {
    Stream& s = lgtest::stream();
    const int n = 5000;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    DeviceBuffer<float> dx = lgtest::to_device(s, x);
    DeviceBuffer<float> dy = lgtest::to_device(s, y0);
    const auto k = lgtest::kernels().get<void(float, const float*, float*, int)>("axpy");
    const float a = lgtest::random_floats(1)[0];
    std::string returned;
    std::size_t size = 0;
    bool capturing = false;
    auto graph = CudaGraph<>::scope(s, [&](Scope& sc) {
      capturing = sc.stream().is_capturing();
      sc.record(k(grid_for(n, 256), a, dx.cview(), dy.view(), n));
      returned = sc.record(value(std::string("from the scope")));
      size = sc.record(map(value(dy.cview()), [](const DeviceSpan<const float>& v) { return v.size(); }));
    });
    CHECK(capturing);
    CHECK(returned == "from the scope");
    CHECK(size == static_cast<std::size_t>(n));
    CHECK(lgtest::to_host(s, dy.cview()) == y0);  // recording ran nothing
    graph.launch();
    graph.launch();
    CHECK(lgtest::relative_error(lgtest::to_host(s, dy.cview()), lgtest::axpy_reference(a, x, y0, 2)) < 1e-6);
  }
}
