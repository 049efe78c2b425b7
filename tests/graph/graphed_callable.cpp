// make_graphed (graph/graphed_callable.hpp): warm-up calls run eagerly, the next captures, later ones replay; a
// failed capture leaves the stream usable and is tried again (gpu).
#include <doctest/doctest.h>

#include <functional>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

using lgtest::axpy;

TEST_SUITE("gpu") {
  TEST_CASE("make_graphed runs the warm-up eagerly, then captures once and replays, with the same results") {
    Stream& s = lgtest::stream();
    const int n = 5000;
    const auto hx = lgtest::random_floats(n);
    const auto hy = lgtest::random_floats(n);
    const auto x = lgtest::to_device(s, hx);
    auto y = lgtest::to_device(s, hy);
    GraphedCallable step = make_graphed(s, [&](ExecContext& ctx) {
      axpy()(grid_for(n, 256), 2.0F, x.cview(), y.view(), n).execute(ctx);  // y += 2 x
    });
    step();
    step();
    CHECK_FALSE(step.captured());
    CHECK_THROWS_AS((void)step.graph(), UsageError);
    CHECK(lgtest::relative_error(lgtest::to_host(s, y.cview()), lgtest::axpy_reference(2.0F, hx, hy, 2)) < 1e-6);
    for (int i = 0; i < 3; ++i) step();
    CHECK(step.captured());
    step.synchronize();
    CHECK(lgtest::relative_error(lgtest::to_host(s, y.cview()), lgtest::axpy_reference(2.0F, hx, hy, 5)) < 1e-6);
    CHECK(step.graph().replay_count() == 3);
    CHECK(step.graph().node_count() == 1);
    CHECK(step.calls() == 5);
  }

  TEST_CASE("a capture that fails passes the error on, leaves the stream usable, and is tried again") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> b(lgtest::device(), 64);
    bool wait_inside = true;
    GraphedCallable f = make_graphed(
        s,
        [&](ExecContext& ctx) {
          fill(b.view(), 4.0F).execute(ctx);
          if (wait_inside) ctx.stream().synchronize();  // illegal while capturing
        },
        GraphedOptions{.warmup = 1});
    f();  // eager: waiting is fine
    CHECK_THROWS_AS(f(), CaptureError);
    CHECK_FALSE(f.captured());
    fill(b.view(), 1.0F).sync_on(s);  // the stream still works
    CHECK(lgtest::to_host(s, b.cview())[63] == 1.0F);
    wait_inside = false;
    f();
    CHECK(f.captured());
    f.synchronize();
    CHECK(lgtest::to_host(s, b.cview())[63] == 4.0F);
    CHECK_THROWS_AS(make_graphed(s, std::function<void(ExecContext&)>{}), UsageError);
  }
}
