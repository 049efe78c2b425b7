// KernelInfo and the host-side launch checks (detail/kernels/kernel_info.hpp): one KernelInfo per loaded
// function, shared by every handle; launch configurations checked against the kernel's and the device's limits;
// the dynamic shared memory limit raised on demand and never lowered; the owners a launch keeps alive.
#include <doctest/doctest.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

TEST_CASE("owner_of gives a span's owner, and null for spans without one and for scalars") {
  const auto owner = std::make_shared<const int>(7);
  const DeviceSpan<float> owned(0x1000, 4, owner);
  CHECK(detail::owner_of(owned) == owner);
  CHECK(detail::owner_of(owned.as_const()) == owner);
  CHECK(detail::owner_of(DeviceSpan<float>(0x1000, 4)) == nullptr);
  CHECK(detail::owner_of(3.0F) == nullptr);
  CHECK(detail::owner_of(42) == nullptr);
}

TEST_SUITE("gpu") {
  TEST_CASE("every handle to one kernel shares one KernelInfo") {
    const auto a = lgtest::kernels().get<void(float, const float*, float*, int)>("axpy");
    const auto b = lgtest::kernels().get<void(float, const float*, float*, int)>("axpy");
    CHECK(a.info() == b.info());
  }

  TEST_CASE("launch configurations outside the device's limits are rejected before launch") {
    const auto fill = lgtest::kernels().get<void(float*, float, int)>("fill_f32");
    DeviceBuffer<float> b(lgtest::device(), 16);
    Stream& s = lgtest::stream();
    CHECK_THROWS_WITH_AS(fill.launch(s, {{1, 1, 1}, {2048, 1, 1}, 0}, b.view(), 1.0F, 16),
                         doctest::Contains("block dimension 0 exceeds"), UsageError);
    CHECK_THROWS_WITH_AS(fill.launch(s, {{1, 1, 1}, {32, 32, 2}, 0}, b.view(), 1.0F, 16),
                         doctest::Contains("2048 threads per block exceed this kernel's limit"), UsageError);
    CHECK_THROWS_WITH_AS(fill.launch(s, {{0, 1, 1}, {32, 1, 1}, 0}, b.view(), 1.0F, 16),
                         doctest::Contains("grid dimension is zero"), UsageError);
    CHECK_THROWS_WITH_AS(fill.launch(s, {{1, 70000, 1}, {32, 1, 1}, 0}, b.view(), 1.0F, 16),
                         doctest::Contains("grid dimension 1"), UsageError);
    CHECK_THROWS_WITH_AS(fill.launch(s, {{1, 1, 1}, {32, 1, 1}, 1U << 30U}, b.view(), 1.0F, 16),
                         doctest::Contains("dynamic shared memory"), UsageError);
    s.synchronize();  // nothing was launched, nothing broke
  }

  TEST_CASE("a kernel may use more dynamic shared memory than the default once it opts in") {
    const KernelLibraryOptions opts =
        lgtest::own_kernels({{"smem.cu",
                              "extern \"C\" __global__ void reverse_smem(const float* in, float* out, int n) {\n"
                              "  extern __shared__ float tile[];\n"
                              "  for (int i = threadIdx.x; i < n; i += blockDim.x) tile[i] = in[i];\n"
                              "  __syncthreads();\n"
                              "  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = tile[n - 1 - i];\n}\n"}});
    const KernelLibrary lib(lgtest::device(), opts);
    CHECK(lib.stats().compiled == core_kernels().sources.size() + 1);  // the core set is compiled too
    const int n = 20'000;  // 80 KB of shared memory: above the 48 KB default
    const unsigned bytes = n * sizeof(float);
    REQUIRE(static_cast<int>(bytes) <= lgtest::device().limits().max_shared_per_block_optin);
    Stream& s = lgtest::stream();
    const auto x = lgtest::random_floats(n);
    const DeviceBuffer<float> in = lgtest::to_device(s, x);
    DeviceBuffer<float> out(lgtest::device(), n);
    lib.get<void(const float*, float*, int)>("reverse_smem")
        .launch(s, {{1, 1, 1}, {256, 1, 1}, bytes}, in.cview(), out.view(), n);
    const auto got = lgtest::to_host(s, out.cview());
    CHECK(std::equal(got.begin(), got.end(), x.rbegin()));
  }

  TEST_CASE("a second handle's smaller dynamic shared memory launch does not lower the first handle's limit") {
    // Each handle used to keep its own record of the limit: handle 2 set the function's limit to 60 KB while
    // handle 1 believed it was still 100 KB, and handle 1's next 100 KB launch failed (CUDA_ERROR_INVALID_VALUE).
    const KernelLibraryOptions opts = lgtest::own_kernels(
        {{"smem2.cu",
          "extern \"C\" __global__ void reverse_through_smem(const float* in, float* out, int n) {\n"
          "  extern __shared__ float tile[];\n"
          "  for (int i = threadIdx.x; i < n; i += blockDim.x) tile[i] = in[i];\n"
          "  __syncthreads();\n"
          "  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = tile[n - 1 - i];\n}\n"}},
        lgtest::scratch_directory("smem-handles"));
    const KernelLibrary lib(lgtest::device(), opts);
    constexpr int big = 25'600;    // 100 KB of floats
    constexpr int small = 15'360;  // 60 KB: still above the 48 KB default, so handle 2 sets the attribute too
    REQUIRE(big * static_cast<int>(sizeof(float)) <= lgtest::device().limits().max_shared_per_block_optin);
    using Reverse = void(const float*, float*, int);
    const auto first = lib.get<Reverse>("reverse_through_smem");
    const auto second = lib.get<Reverse>("reverse_through_smem");
    Stream& s = lgtest::stream();
    const auto x = lgtest::random_floats(big);
    const DeviceBuffer<float> in = lgtest::to_device(s, x);
    const auto run = [&](const Kernel<Reverse>& k, int n) {
      DeviceBuffer<float> out(lgtest::device(), static_cast<std::size_t>(n));
      k.launch(s, {{1, 1, 1}, {256, 1, 1}, static_cast<unsigned>(n * sizeof(float))}, in.cview(), out.view(), n);
      const auto got = lgtest::to_host(s, out.cview());
      return std::equal(got.begin(), got.end(), std::make_reverse_iterator(x.begin() + n));
    };
    CHECK(run(first, big));
    CHECK(run(second, small));
    CHECK(run(first, big));  // failed with CUDA_ERROR_INVALID_VALUE before
    CHECK(run(second, small));
    CHECK(first.info()->dynamic_shared_limit.load() >= big * static_cast<int>(sizeof(float)));
  }
}
