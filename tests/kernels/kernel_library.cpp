#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "common/gpu.hpp"

using namespace lazygraph;

TEST_SUITE("gpu") {
  TEST_CASE("the kernel library compiles every kernel once, then loads them from the cache") {
    KernelLibraryOptions opts;
    opts.cache_directory = lgtest::scratch_directory("library");
    const KernelLibrary cold(lgtest::device(), opts);
    CHECK(cold.stats().modules == embedded_kernel_sources().size());
    CHECK(cold.stats().compiled == cold.stats().modules);
    CHECK(cold.stats().cache_hits == 0);
    const KernelLibrary warm(lgtest::device(), opts);
    CHECK(warm.stats().compiled == 0);
    CHECK(warm.stats().cache_hits == warm.stats().modules);
    CHECK(warm.kernel_names() == cold.kernel_names());
    MESSAGE("kernel library: cold " << cold.stats().milliseconds << " ms, warm " << warm.stats().milliseconds
                                    << " ms, sm_" << cold.stats().architecture
                                    << std::string(cold.stats().cubin ? " CUBIN" : " PTX"));
  }

  TEST_CASE("an unknown kernel name is an error listing the kernels that exist") {
    CHECK_THROWS_WITH_AS((void)lgtest::kernels().get<void(float*, int)>("no_such_kernel"),
                         doctest::Contains("unknown kernel \"no_such_kernel\""), UsageError);
    CHECK_THROWS_WITH_AS((void)lgtest::kernels().get<void(float*, int)>("no_such_kernel"), doctest::Contains("axpy"),
                         UsageError);
  }

  TEST_CASE("a declared signature that disagrees with the compiled kernel is an error naming the kernel") {
    // axpy is (float, const float*, float*, int): one parameter too few, then a double where a float is.
    CHECK_THROWS_WITH_AS((void)lgtest::kernels().get<void(float, const float*, float*)>("axpy"),
                         doctest::Contains("kernel axpy: the declared signature"), UsageError);
    CHECK_THROWS_WITH_AS((void)lgtest::kernels().get<void(double, const float*, float*, int)>("axpy"),
                         doctest::Contains("sizes (8, 8, 8, 4)"), UsageError);
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

  TEST_CASE("axpy matches a float64 reference on random data") {
    Stream& s = lgtest::stream();
    const auto axpy = lgtest::kernels().get<void(float, const float*, float*, int)>("axpy");
    const int n = 1'000'003;
    const auto x = lgtest::random_floats(n);
    const auto y = lgtest::random_floats(n);
    const DeviceBuffer<float> dx = lgtest::to_device(s, x);
    DeviceBuffer<float> dy = lgtest::to_device(s, y);
    const float a = 1.75F;
    axpy.launch(s, grid_for(n, 256), a, dx.cview(), dy.view(), n);
    const auto got = lgtest::to_host(s, dy.cview());
    std::vector<double> ref(n);
    for (int i = 0; i < n; ++i) ref[i] = double(a) * x[i] + y[i];
    CHECK(lgtest::relative_error(got, ref) < 1e-6);
  }

  TEST_CASE("fill and iota write every element") {
    Stream& s = lgtest::stream();
    const int n = 70'001;
    DeviceBuffer<float> b(lgtest::device(), n);
    lgtest::kernels().get<void(float*, float, int)>("fill_f32").launch(s, grid_for(n, 128), b.view(), 3.5F, n);
    auto got = lgtest::to_host(s, b.cview());
    CHECK(std::all_of(got.begin(), got.end(), [](float v) { return v == 3.5F; }));
    lgtest::kernels()
        .get<void(float*, float, float, int)>("iota_f32")
        .launch(s, {{64, 1, 1}, {256, 1, 1}, 0}, b.view(), -2.0F, 0.5F, n);  // grid-stride: fewer threads than n
    got = lgtest::to_host(s, b.cview());
    bool all = true;
    for (int i = 0; i < n; ++i) all = all && got[i] == -2.0F + 0.5F * static_cast<float>(i);
    CHECK(all);
  }

  TEST_CASE("sum_f32 matches a float64 reference on random data") {
    Stream& s = lgtest::stream();
    const int n = 3'000'017;
    const auto x = lgtest::random_floats(n);
    const DeviceBuffer<float> dx = lgtest::to_device(s, x);
    DeviceBuffer<float> out = lgtest::to_device(s, std::vector<float>{0.0F});
    lgtest::kernels().get<void(const float*, float*, int)>("sum_f32").launch(s, {{1024, 1, 1}, {256, 1, 1}, 0},
                                                                             dx.cview(), out.view(), n);
    const double ref = std::accumulate(x.begin(), x.end(), 0.0);
    double abs_sum = 0;
    for (float v : x) abs_sum += std::abs(v);
    const float got = lgtest::to_host(s, out.cview())[0];
    CHECK(std::abs(got - ref) / abs_sum < 1e-5);
  }

  TEST_CASE("a kernel may use more dynamic shared memory than the default once it opts in") {
    KernelLibraryOptions opts;
    opts.cache_directory = std::filesystem::path{};
    opts.sources = std::vector<KernelSource>{
        {"smem.cu",
         "extern \"C\" __global__ void reverse_smem(const float* in, float* out, int n) {\n"
         "  extern __shared__ float tile[];\n"
         "  for (int i = threadIdx.x; i < n; i += blockDim.x) tile[i] = in[i];\n"
         "  __syncthreads();\n"
         "  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = tile[n - 1 - i];\n}\n"}};
    const KernelLibrary lib(lgtest::device(), opts);
    CHECK(lib.stats().compiled == 1);
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

  TEST_CASE("a kernel source that does not compile fails the library with the file and the log") {
    KernelLibraryOptions opts;
    opts.cache_directory = std::filesystem::path{};
    opts.sources = std::vector<KernelSource>{{"typo.cu", "extern \"C\" __global__ void k() { int x = ; }\n"}};
    CHECK_THROWS_WITH_AS(KernelLibrary(lgtest::device(), opts), doctest::Contains("typo.cu"), CompileError);
  }

  TEST_CASE("two kernel files defining one kernel name are rejected") {
    KernelLibraryOptions opts;
    opts.cache_directory = std::filesystem::path{};
    opts.sources = std::vector<KernelSource>{{"one.cu", "extern \"C\" __global__ void same() {}\n"},
                                             {"two.cu", "extern \"C\" __global__ void same() {}\n"}};
    CHECK_THROWS_WITH_AS(KernelLibrary(lgtest::device(), opts), doctest::Contains("defined in both"), UsageError);
  }
}
