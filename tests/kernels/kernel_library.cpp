#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

TEST_SUITE("gpu") {
  TEST_CASE("the kernel library compiles every kernel once, then loads them from the cache") {
    KernelLibraryOptions opts;
    opts.cache_directory = lgtest::scratch_directory("library");
    const KernelLibrary cold(lgtest::device(), opts);
    CHECK(cold.stats().modules == core_kernels().sources.size());
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

  TEST_CASE("a declared signature that disagrees with the kernel's declaration is an error naming the kernel") {
    // axpy is (float, const float*, float*, int): one parameter too few, then a double where a float is.
    CHECK_THROWS_WITH_AS((void)lgtest::kernels().get<void(float, const float*, float*)>("axpy"),
                         doctest::Contains("kernel axpy (axpy.cu:4): the signature"), UsageError);
    CHECK_THROWS_WITH_AS((void)lgtest::kernels().get<void(double, const float*, float*, int)>("axpy"),
                         doctest::Contains("parameter 0 is declared `float`"), UsageError);
  }

  TEST_CASE("a signature with the right sizes but the wrong pointer constness is rejected at lookup") {
    // x and y swapped: every size agrees, but the read-only x would be written.
    CHECK_THROWS_WITH_AS((void)lgtest::kernels().get<void(float, float*, const float*, int)>("axpy"),
                         doctest::Contains("parameter 1 is declared `const float*` in axpy.cu, but the signature "
                                           "void(float, float*, const float*, int) has `float*`"),
                         UsageError);
  }

  TEST_CASE("a compiled kernel whose declaration cannot be found is an error saying how to declare kernels") {
    const KernelLibraryOptions opts =
        lgtest::own_kernels({{"macro.cu",
                              "#define KERNEL(name) extern \"C\" __global__ void name(float* p)\n"
                              "KERNEL(hidden) { p[0] = 1.0f; }\n"}});
    const KernelLibrary lib(lgtest::device(), opts);
    // Exactly the core set's kernels (kernels/*.cu: every library compiles them) and this file's one, sorted.
    const std::vector<std::string> expected{"add_inplace", "axpy",     "axpy_scalar",  "fill_f32", "hidden",
                                            "iota_f32",    "silu_mul", "staging_copy", "sum_f32",  "while_guard"};
    REQUIRE(lib.kernel_names() == expected);
    CHECK_THROWS_WITH_AS((void)lib.get<void(float*)>("hidden"),
                         doctest::Contains("kernel hidden (in module macro.cu): no declaration"), UsageError);
    CHECK_THROWS_WITH_AS((void)lib.get<void(float*)>("hidden"), doctest::Contains("extern \"C\" __global__ void NAME("),
                         UsageError);
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

  TEST_CASE("a cached image that passes its checksum but that the driver rejects is replaced by a fresh one") {
    const KernelSource source{"evict.cu",
                              "extern \"C\" __global__ void add_one(float* p, int n) {\n"
                              "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                              "  if (i < n) p[i] += 1.0f;\n}\n"};
    const auto dir = lgtest::scratch_directory("evict");
    const KernelCache cache(dir);
    // The key KernelLibrary computes for this source on this device.
    const int cc = lgtest::device().compute_capability().as_int();
    const int arch = nvrtc_target_architecture(cc);
    const bool cubin = arch == cc;
    // Every set compiles with the core headers, so they are part of the key.
    const std::string key =
        KernelCache::key(source, core_kernel_headers(), nvrtc_options(arch, cubin), nvrtc_version());
    KernelCache::Entry garbage;
    garbage.is_cubin = cubin;
    garbage.image.assign(4096, 'x');
    garbage.image.back() = '\0';  // PTX-shaped, so the cache accepts it whatever `cubin` is
    REQUIRE(cache.store(key, garbage));
    REQUIRE(cache.load(key).has_value());  // a valid entry as far as the cache can tell

    const KernelLibraryOptions opts = lgtest::own_kernels({source}, dir);
    std::optional<KernelLibrary> lib;
    REQUIRE_NOTHROW(lib.emplace(lgtest::device(), opts));  // threw CudaError (cuModuleLoadData) on every run
    CHECK(lib->stats().compiled == core_kernels().sources.size() + 1);  // the core set is compiled too
    CHECK(lib->stats().cache_hits == 0);
    const auto replaced = cache.load(key);
    REQUIRE(replaced.has_value());
    CHECK(replaced->image != garbage.image);

    Stream& s = lgtest::stream();
    DeviceBuffer<float> b = lgtest::to_device(s, std::vector<float>(1000, 2.0F));
    lib->get<void(float*, int)>("add_one").launch(s, grid_for(1000, 256), b.view(), 1000);
    const auto got = lgtest::to_host(s, b.cview());
    CHECK(std::all_of(got.begin(), got.end(), [](float v) { return v == 3.0F; }));

    const KernelLibrary warm(lgtest::device(), opts);  // and the replacement is a hit from now on
    CHECK(warm.stats().cache_hits == core_kernels().sources.size() + 1);
  }

  TEST_CASE("a library given only its own kernel set still has the core kernels: LoopBound's while_guard runs") {
    // LoopBound looks up the core kernel while_guard; a library of only the listed sets compiled, then failed here.
    const KernelLibrary lib(
        lgtest::device(),
        lgtest::own_kernels({{"bump.cu", "extern \"C\" __global__ void bump(unsigned* x) { *x += 1u; }\n"}}));
    CHECK_NOTHROW((void)lib.get<void(Condition, unsigned*, unsigned)>("while_guard"));
    CHECK_NOTHROW((void)lib.get<void(float, const float*, float*, int)>("axpy"));
    Stream& s = lgtest::stream();
    const auto bump = lib.get<void(unsigned*)>("bump");
    auto x = lgtest::to_device(s, std::vector<unsigned>{0});
    const LoopBound bound(lib, 4);
    auto g = CudaGraph<>::build(lgtest::device(), [&](Scope& sc) {
      const Condition c = sc.condition(1);
      sc.record(fill(x.view(), 0U) >> while_(c, bump({{1, 1, 1}, {1, 1, 1}, 0}, x.view()), bound));  // never clears c
    });
    g.launch_on(s);
    CHECK(lgtest::to_host(s, x.cview())[0] == 4);
    CHECK(bound.iterations(s) == 4);
    CHECK(bound.reached(s));
  }

  TEST_CASE("a kernel source that does not compile fails the library with the file and the log") {
    const KernelLibraryOptions opts =
        lgtest::own_kernels({{"typo.cu", "extern \"C\" __global__ void k() { int x = ; }\n"}});
    CHECK_THROWS_WITH_AS(KernelLibrary(lgtest::device(), opts), doctest::Contains("typo.cu"), CompileError);
  }

  TEST_CASE("two kernel files defining one kernel name are rejected") {
    const KernelLibraryOptions opts = lgtest::own_kernels({{"one.cu", "extern \"C\" __global__ void same() {}\n"},
                                                           {"two.cu", "extern \"C\" __global__ void same() {}\n"}});
    CHECK_THROWS_WITH_AS(KernelLibrary(lgtest::device(), opts), doctest::Contains("defined in both"), UsageError);
  }
}
