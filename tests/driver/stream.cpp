// Stream and Event (driver/stream.hpp): move-only handles, usable from any thread; a stream waits for an
// event, refuses to synchronize while it captures, and two timing events measure the work between them.
// (Pooled streams: stream_pool.cpp.)
#include <doctest/doctest.h>

#include <lazygraph/detail/driver/driver_api.hpp>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/gate.hpp"
#include "common/gpu.hpp"

using namespace lazygraph;
namespace drv = lazygraph::detail::driver;

namespace {

using lgtest::axpy;

/// Submits `op` to `stream` without waiting for it.
template <class Op>
void submit(const Stream& stream, const Op& op) {
  ExecContext ctx(stream, false);
  op.execute(ctx);
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("a moved-from stream or event throws UsageError on use") {
    Stream a(lgtest::device());
    Stream b = std::move(a);
    CHECK_FALSE(static_cast<bool>(a));  // NOLINT(bugprone-use-after-move)
    CHECK_THROWS_WITH_AS(a.synchronize(), doctest::Contains("moved-from"), UsageError);  // NOLINT
    b.synchronize();
    CHECK(b.query());
    Event e(lgtest::device());
    Event f = std::move(e);
    CHECK_THROWS_AS(e.record(b), UsageError);  // NOLINT(bugprone-use-after-move)
    f.record(b);
    f.synchronize();
  }

  TEST_CASE("a stream made on one thread captures and replays on another") {
    Stream s(lgtest::device());  // made here, used only by the worker
    const int n = 1000;
    DeviceBuffer<float> y = zeros<float>(n).sync_on(s);
    DeviceBuffer<float> x = ones<float>(n).sync_on(s);
    const auto k = axpy();
    std::string error;
    std::thread worker([&] {
      try {
        auto graph = CudaGraph<>::capture(s, k(grid_for(n, 128), 1.0F, x.cview(), y.view(), n));
        for (int i = 0; i < 3; ++i) graph.launch();
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
    worker.join();
    CHECK(error.empty());
    CHECK(lgtest::to_host(s, y.cview())[n - 1] == 3.0F);
  }

  TEST_CASE("synchronizing the capturing stream fails with an error naming the capture") {
    Stream& s = lgtest::stream();
    CHECK_THROWS_WITH_AS(CudaGraph<>::scope(s, [&](Scope&) { s.synchronize(); }),
                         doctest::Contains("capturing a graph"), CaptureError);
    CHECK_THROWS_WITH_AS(CudaGraph<>::scope(s, [&](Scope&) { (void)value(1).sync_on(s); }),
                         doctest::Contains("capturing a graph"), CaptureError);
    CHECK(capture_status(s) == CaptureStatus::none);
    s.synchronize();
  }

  TEST_CASE("a stream that waits for an event runs its later work only after the work the event recorded") {
    const Device& dev = lgtest::device();
    const Stream producer(dev);
    const Stream consumer(dev);
    const int n = 1 << 16;
    DeviceBuffer<float> src = lgtest::to_device(lgtest::stream(), lgtest::random_floats(n));
    DeviceBuffer<float> dst = lgtest::to_device(lgtest::stream(), lgtest::random_floats(n));
    const float v = lgtest::random_floats(1)[0] + 2.0F;
    const Event done(dev, false);
    {
      lgtest::Gate gate;
      gate.close_on(producer);
      submit(producer, fill(src.view(), v));
      done.record(producer);
      consumer.wait(done);
      copy_async(consumer, dst.view(), src.cview());
      CHECK_FALSE(done.query());
      CHECK_FALSE(producer.query());
      // The consumer's copy waits for the producer's fill, which waits at the gate.
      CHECK_FALSE(lgtest::becomes_true_within([&] { return consumer.query(); }, std::chrono::milliseconds(200)));
      gate.open();
      consumer.synchronize();
      CHECK(done.query());
    }
    const auto got = lgtest::to_host(lgtest::stream(), dst.cview());
    CHECK(std::all_of(got.begin(), got.end(), [&](float x) { return x == v; }));
  }

  TEST_CASE("a stream is capturing only inside the capture") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> b = zeros<float>(16).sync_on(s);
    CHECK_FALSE(s.is_capturing());
    bool inside = false;
    auto graph = CudaGraph<>::scope(s, [&](Scope& sc) {
      inside = s.is_capturing();
      sc.record(fill(b.view(), 1.0F));
    });
    CHECK(inside);
    CHECK_FALSE(s.is_capturing());
  }

  TEST_CASE("two timing events measure the work between them; events made without timing cannot be timed") {
    const Device& dev = lgtest::device();
    Stream& s = lgtest::stream();
    DeviceBuffer<float> big(dev, 1 << 24);
    const Event start(dev);
    const Event end(dev);
    start.record(s);
    for (int i = 0; i < 10; ++i) submit(s, fill(big.view(), static_cast<float>(i)));
    end.record(s);
    end.synchronize();
    CHECK(end.query());
    const float ms = Event::elapsed_ms(start, end);
    CHECK(ms > 0.0F);
    CHECK(ms < 10'000.0F);
    CHECK(lgtest::to_host(s, big.cview().subspan(0, 4)) == std::vector<float>(4, 9.0F));

    const Event light_a(dev, false);
    const Event light_b(dev, false);
    light_a.record(s);
    light_b.record(s);
    s.synchronize();
    CHECK_THROWS_WITH_AS((void)Event::elapsed_ms(light_a, light_b), doctest::Contains("cuEventElapsedTime"), CudaError);
  }

  TEST_CASE("release hands the raw stream to the caller and reset gives it up now; both leave the handle null") {
    const Device& dev = lgtest::device();
    const LiveHandles before = live_handles();
    Stream a(dev);
    CHECK(live_handles().streams == before.streams + 1);
    const CUstream raw = a.release();
    REQUIRE(raw != nullptr);
    CHECK_FALSE(static_cast<bool>(a));
    CHECK_THROWS_AS((void)a.get(), UsageError);
    CHECK(live_handles().streams == before.streams + 1);  // still alive: it is the caller's now
    drv::stream_destroy_no_throw(dev.context(), raw);
    CHECK(live_handles().streams == before.streams);

    Stream b(dev);
    b.reset();
    CHECK_FALSE(static_cast<bool>(b));
    CHECK(b.device() == dev);  // a null stream still names its device
    CHECK(live_handles().streams == before.streams);
    Event e(dev);
    e.reset();
    CHECK_FALSE(static_cast<bool>(e));
    CHECK_THROWS_AS((void)e.get(), UsageError);
    CHECK(live_handles() == before);
  }
}
