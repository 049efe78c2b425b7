// The Module concept and GraphModule (detail/module/module.hpp): a forward pass by shape alone; a graph-backed
// module captured once, whose forward copies the input in, replays and copies the output out.
#include <doctest/doctest.h>

#include <algorithm>
#include <span>
#include <type_traits>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {

using Axpy = Kernel<void(float, const float*, float*, int)>;
Axpy axpy() { return lgtest::kernels().get<void(float, const float*, float*, int)>("axpy"); }

/// A module of a user's own: it qualifies by its shape, with no opt-in.
struct Doubler {
  using Input = int;
  using Output = long;
  Output forward(Input x) { return 2L * x; }
};
/// forward returns something other than Output.
struct WrongOutput {
  using Input = int;
  using Output = long;
  int forward(Input x) { return x; }
};
/// No Input type.
struct NoInput {
  using Output = long;
  Output forward(int x) { return x; }
};

}  // namespace

static_assert(Module<GraphModule<float, float>>);
static_assert(Module<GraphModule<half, float>>);
static_assert(std::is_same_v<GraphModule<half, float>::Input, std::span<const half>>);
static_assert(std::is_same_v<GraphModule<half, float>::Output, std::vector<float>>);
static_assert(Module<Doubler>);
static_assert(!Module<WrongOutput> && !Module<NoInput> && !Module<int>);

TEST_CASE("a type with Input, Output and forward(Input) -> Output is a Module") {
  Doubler d;
  CHECK(d.forward(21) == 42L);
}

TEST_SUITE("gpu") {
  TEST_CASE("a GraphModule copies the input in, replays, and returns the output") {
    Stream& s = lgtest::stream();
    const int n = 3000;
    const auto k = axpy();
    DeviceBuffer<float> bias = from_host(lgtest::random_floats(n)).sync_on(s);
    const auto bias_host = lgtest::to_host(s, bias.cview());
    GraphModule<float, float> module(s, n, n, [&](const DeviceSpan<const float>& in, const DeviceSpan<float>& out) {
      return copy(out, bias.cview()) >> k(grid_for(n, 256), 3.0F, in, out, n);
    });
    static_assert(Module<decltype(module)>);
    for (int round = 0; round < 3; ++round) {
      const auto x = lgtest::random_floats(n);
      const auto y = module.forward(x);
      std::vector<double> ref(n);
      for (int i = 0; i < n; ++i) ref[i] = 3.0 * x[i] + bias_host[i];
      CHECK(lgtest::relative_error(y, ref) < 1e-6);
    }
    const std::vector<float> wrong(n + 1);
    CHECK_THROWS_AS((void)module.forward(wrong), UsageError);
  }

  TEST_CASE("GraphModule::forward_into writes the caller's span, and its buffers and graph are what it replays") {
    Stream& s = lgtest::stream();
    const int n_in = 2000;
    const int n_out = 700;
    GraphModule<float, float> module(s, n_in, n_out,
                                     [&](const DeviceSpan<const float>& in, const DeviceSpan<float>& out) {
                                       return copy(out, in.subspan(100, n_out));
                                     });
    CHECK(module.input().size() == static_cast<std::size_t>(n_in));
    CHECK(module.output().size() == static_cast<std::size_t>(n_out));
    CHECK(module.graph().node_count() == 1);
    std::vector<float> out(n_out);
    for (int round = 0; round < 2; ++round) {
      const auto x = lgtest::random_floats(n_in);
      module.forward_into(x, out);
      CHECK(std::equal(out.begin(), out.end(), x.begin() + 100));
      CHECK(lgtest::to_host(s, module.input()) == x);  // the device input buffer holds this round's input
      CHECK(lgtest::to_host(s, module.output()) == out);
    }
    std::vector<float> too_short(n_out - 1);
    CHECK_THROWS_AS(module.forward_into(lgtest::random_floats(n_in), too_short), UsageError);
  }
}
