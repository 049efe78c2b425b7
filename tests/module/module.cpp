// The Module concept and GraphModule (module/module.hpp): a forward pass by shape alone; a graph-backed
// module captured once, whose forward copies the input in, replays and copies the output out.
#include <doctest/doctest.h>

#include <algorithm>
#include <span>
#include <type_traits>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {

using lgtest::axpy;

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
    CHECK(module.graph().node_count() == 3);  // staging copy in, the op's copy, staging copy out
    std::vector<float> out(n_out);
    for (int round = 0; round < 2; ++round) {
      const auto x = lgtest::random_floats(n_in);
      module.forward_into(x, out);
      CHECK(std::equal(out.begin(), out.end(), x.begin() + 100));
      CHECK(lgtest::to_host(s, module.input()) == x);  // the device input buffer holds this round's input
      CHECK(lgtest::to_host(s, module.output()) == out);
    }
    std::vector<float> too_short(n_out - 1);
    CHECK_THROWS_WITH_AS(module.forward_into(lgtest::random_floats(n_in), too_short),
                         doctest::Contains("the output has 699 elements; the module's output has 700"), UsageError);
    CHECK_THROWS_WITH_AS(module.forward_into(lgtest::random_floats(n_in + 1), out),
                         doctest::Contains("the input has 2001 elements; the module's input has 2000"), UsageError);
  }

  TEST_CASE("GraphModule replays one graph per call whose staging copies it accounts for") {
    Stream& s = lgtest::stream();
    const int n_in = 1000;
    const int n_out = 300;
    GraphModule<float, float> module(s, n_in, n_out,
                                     [&](const DeviceSpan<const float>& in, const DeviceSpan<float>& out) {
                                       return copy(out, in.subspan(7, n_out));
                                     });
    std::vector<float> out(n_out);
    for (int round = 0; round < 4; ++round) module.forward_into(lgtest::random_floats(n_in), out);
    const TransferStats t = module.graph().transfers();
    CHECK(t.bytes_to_device_per_replay == n_in * sizeof(float));
    CHECK(t.bytes_to_host_per_replay == n_out * sizeof(float));
    CHECK(t.replays == 4);
    CHECK(t.bytes_to_device() == 4 * n_in * sizeof(float));
    CHECK(t.bytes_to_host() == 4 * n_out * sizeof(float));
  }

  TEST_CASE("forward_resident reads input already on the device, and follows the caller to another buffer") {
    Stream& s = lgtest::stream();
    const int n = 2500;
    const auto k = axpy();
    DeviceBuffer<float> bias = from_host(lgtest::random_floats(n)).sync_on(s);
    const auto bias_host = lgtest::to_host(s, bias.cview());
    GraphModule<float, float> module(s, n, n, [&](const DeviceSpan<const float>& in, const DeviceSpan<float>& out) {
      return copy(out, bias.cview()) >> k(grid_for(n, 256), 2.0F, in, out, n);
    });
    const auto check = [&](const std::vector<float>& x, const std::vector<float>& y) {
      std::vector<double> ref(n);
      for (int i = 0; i < n; ++i) ref[i] = 2.0 * x[i] + bias_host[i];
      CHECK(lgtest::relative_error(y, ref) < 1e-6);
    };
    std::vector<float> y(n);
    const auto x1 = lgtest::random_floats(n);
    const auto x2 = lgtest::random_floats(n);
    DeviceBuffer<float> d1 = from_host(x1).sync_on(s);
    DeviceBuffer<float> d2 = from_host(x2).sync_on(s);
    module.forward_resident(d1.cview(), y);
    check(x1, y);
    module.forward_resident(d2.cview(), y);  // another buffer: the graph is updated to read it
    check(x2, y);
    copy(d2.view(), x1).sync_on(s);  // the same buffer, new contents: read at the call
    module.forward_resident(d2.cview(), y);
    check(x1, y);
    module.forward_into(x2, y);  // the staged path still works alongside
    check(x2, y);
    CHECK_THROWS_WITH_AS(module.forward_resident(d1.cview().subspan(0, n - 1), y),
                         doctest::Contains("the input has 2499 elements"), UsageError);
  }

  TEST_CASE("a GraphModule whose forward pass records itself with scratch memory, in a pool") {
    Stream& s = lgtest::stream();
    const int n = 3000;
    const auto k = axpy();
    DeviceBuffer<float> bias = from_host(lgtest::random_floats(n)).sync_on(s);
    const auto bias_host = lgtest::to_host(s, bias.cview());
    GraphPool pool(lgtest::device());
    GraphOptions options;
    options.pool = pool;
    // out = 3 x + bias, through a scratch t = x + bias.
    GraphModule<float, float> module(
        s, n, n,
        [&](Scope& sc, const DeviceSpan<const float>& in, const DeviceSpan<float>& out) {
          DeviceSpan<float> t = sc.scratch<float>(static_cast<std::size_t>(n));
          sc.record(copy(t, bias.cview()) >> k(grid_for(n, 256), 1.0F, in, t, n) >> copy(out, t.as_const()) >>
                    k(grid_for(n, 256), 2.0F, in, out, n));
        },
        options);
    CHECK(module.graph().scratch_bytes() == n * sizeof(float));
    CHECK(pool.graph_count() == 1);
    const auto check = [&](const std::vector<float>& x, const std::vector<float>& y) {
      std::vector<double> ref(n);
      for (int i = 0; i < n; ++i) ref[i] = 3.0 * x[i] + bias_host[i];
      CHECK(lgtest::relative_error(y, ref) < 1e-6);
    };
    const auto x1 = lgtest::random_floats(n);
    check(x1, module.forward(x1));
    DeviceBuffer<float> d = from_host(lgtest::random_floats(n)).sync_on(s);
    std::vector<float> y(n);
    module.forward_resident(d.cview(), y);
    check(lgtest::to_host(s, d.cview()), y);
    CHECK(pool.graph_count() == 2);  // the resident graph joined the pool
  }
}
