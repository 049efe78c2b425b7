// Kernel<void(Params...)> (kernels/kernel.hpp): a typed handle to a compiled kernel; `launch` runs now,
// `operator()` only describes the launch; a handle is a copy, never a move.
#include <doctest/doctest.h>

#include <type_traits>
#include <vector>

#include <lazygraph/detail/driver/driver_api.hpp>
#include "common/gpu.hpp"

using namespace lazygraph;

namespace {
using AxpySignature = void(float, const float*, float*, int);
// A handle is copied, never moved from (a "move" leaves the source valid), and its launch op has the
// signature's parameter types.
static_assert(std::is_copy_constructible_v<Kernel<AxpySignature>> && std::is_copy_assignable_v<Kernel<AxpySignature>>);
static_assert(std::is_same_v<decltype(std::declval<const Kernel<AxpySignature>&>()(
                                 LaunchConfig{}, 1.0F, std::declval<DeviceSpan<const float>>(),
                                 std::declval<DeviceSpan<float>>(), 1)),
                             LaunchOp<float, const float*, float*, int>>);
}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("a moved-from Kernel handle is still the same, usable kernel") {
    auto a = lgtest::kernels().get<void(float, const float*, float*, int)>("axpy");
    const auto b = std::move(a);
    CHECK(a.name() == "axpy");    // NOLINT(bugprone-use-after-move): moving a Kernel copies it
    CHECK(a.info() == b.info());  // NOLINT(bugprone-use-after-move)
    Stream& s = lgtest::stream();
    DeviceBuffer<float> x = ones<float>(8).sync_on(s);
    DeviceBuffer<float> y = zeros<float>(8).sync_on(s);
    a(grid_for(8, 32), 3.0F, x.cview(), y.view(), 8).sync_on(s);  // NOLINT(bugprone-use-after-move)
    CHECK(lgtest::to_host(s, y.cview())[7] == 3.0F);
  }

  TEST_CASE("Kernel::launch runs now; the call operator builds an op that runs nothing until executed") {
    Stream& s = lgtest::stream();
    const auto k = lgtest::kernels().get<AxpySignature>("axpy");
    CHECK(k.name() == "axpy");
    CHECK(k.device() == lgtest::device());
    const int n = 20'000;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    const auto a = lgtest::random_floats(2);
    DeviceBuffer<float> dx = lgtest::to_device(s, x);
    DeviceBuffer<float> dy = lgtest::to_device(s, y0);

    auto op = k(grid_for(n, 256), a[1], dx.cview(), dy.view(), n);
    s.synchronize();
    CHECK(lgtest::to_host(s, dy.cview()) == y0);  // built: nothing ran

    k.launch(s, grid_for(n, 256), a[0], dx.cview(), dy.view(), n);
    const auto once = lgtest::axpy_reference(a[0], x, y0, 1);
    CHECK(lgtest::relative_error(lgtest::to_host(s, dy.cview()), once) < 1e-6);

    op.sync_on(s);
    std::vector<float> once_f(once.begin(), once.end());
    CHECK(lgtest::relative_error(lgtest::to_host(s, dy.cview()), lgtest::axpy_reference(a[1], x, once_f, 1)) < 1e-6);
  }

  TEST_CASE("a kernel's shared memory carveout is a percentage or the driver's default, and it runs as before") {
    Stream& s = lgtest::stream();
    const auto k = lgtest::kernels().get<AxpySignature>("axpy");
    CHECK_THROWS_WITH_AS(k.prefer_shared_carveout(101), doctest::Contains("axpy"), UsageError);
    CHECK_THROWS_WITH_AS(k.prefer_shared_carveout(-2), doctest::Contains("-2"), UsageError);
    for (const int percent : {100, 0, 37}) {
      k.prefer_shared_carveout(percent);
      CHECK(detail::driver::function_attribute(k.device().context(), k.info()->function,
                                               CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                               k.name()) == percent);
      const int n = 4096;
      const auto x = lgtest::random_floats(n);
      const auto y0 = lgtest::random_floats(n);
      DeviceBuffer<float> dx = lgtest::to_device(s, x);
      DeviceBuffer<float> dy = lgtest::to_device(s, y0);
      k.launch(s, grid_for(n, 256), 1.5F, dx.cview(), dy.view(), n);
      CHECK(lgtest::relative_error(lgtest::to_host(s, dy.cview()), lgtest::axpy_reference(1.5F, x, y0, 1)) < 1e-6);
    }
    k.prefer_shared_carveout(-1);  // back to the driver's choice for the other tests
  }

  TEST_CASE("a multiprocessor holds at least one block of a kernel, and no more of 1024 threads than of 256") {
    const auto k = lgtest::kernels().get<AxpySignature>("axpy");
    const int of_256 = k.max_active_blocks_per_sm(256);
    const int of_1024 = k.max_active_blocks_per_sm(1024);
    CHECK(of_256 >= 1);
    CHECK(of_1024 >= 1);  // axpy uses few registers: a block of the most threads fits
    CHECK(of_1024 <= of_256);
  }
}
