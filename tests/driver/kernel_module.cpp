// LoadedModule (driver/kernel_module.hpp): a CUBIN or PTX image loaded into a device's context, move-only,
// unloaded once; loading during a capture is refused with an error that says what to do.
#include <doctest/doctest.h>

#include <lazygraph/detail/driver/driver_api.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;
namespace drv = lazygraph::detail::driver;

namespace {

const KernelSource scale_source{"scale_module.cu",
                                "extern \"C\" __global__ void scale_module(float* p, float s, int n) {\n"
                                "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                "  if (i < n) p[i] *= s;\n}\n"
                                "extern \"C\" __global__ void second_kernel() {}\n"};

/// scale_source compiled for the device under test.
std::vector<char> image_for_device() {
  const int cc = lgtest::device().compute_capability().as_int();
  const int arch = nvrtc_target_architecture(cc);
  const bool cubin = arch == cc;
  const CompileResult r = nvrtc_compile(scale_source, {}, nvrtc_options(arch, cubin), cubin);
  REQUIRE(r.succeeded());
  return r.image();
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("loading a kernel module during a capture fails with an error saying to load it before") {
    Stream& s = lgtest::stream();
    const KernelLibraryOptions opts = lgtest::own_kernels({{"late.cu", "extern \"C\" __global__ void late() {}\n"}});
    CHECK_THROWS_WITH_AS(CudaGraph<>::scope(s, [&](Scope&) { KernelLibrary late(lgtest::device(), opts); }),
                         doctest::Contains("before CudaGraph::scope"), CaptureError);
    s.synchronize();
  }

  TEST_CASE("a LoadedModule finds its kernels by name, and the function it finds runs") {
    const std::vector<char> image = image_for_device();
    (void)lgtest::stream();  // made on first use: not part of what this test must give back
    const LiveHandles before = live_handles();
    {
      const LoadedModule m(lgtest::device(), image.data(), "scale_module.cu");
      CHECK(live_handles().modules == before.modules + 1);
      CHECK(m.name() == "scale_module.cu");
      CHECK(m.device() == lgtest::device());
      CHECK(m.get() != nullptr);
      CHECK(m.function("no_such_kernel") == nullptr);
      auto names = m.function_names();
      std::sort(names.begin(), names.end());
      CHECK(names == std::vector<std::string>{"scale_module", "second_kernel"});
      const CUfunction fn = m.function("scale_module");
      REQUIRE(fn != nullptr);

      Stream& s = lgtest::stream();
      int n = 10'000;
      const auto x = lgtest::random_floats(static_cast<std::size_t>(n));
      DeviceBuffer<float> b = lgtest::to_device(s, x);
      CUdeviceptr p = b.view().address();
      float factor = -1.25F;
      void* args[] = {&p, &factor, &n, nullptr};
      drv::LaunchShape shape;
      shape.grid[0] = static_cast<unsigned>((n + 255) / 256);
      shape.grid[1] = shape.grid[2] = 1;
      shape.block[0] = 256;
      shape.block[1] = shape.block[2] = 1;
      drv::launch_kernel(lgtest::device().context(), fn, shape, s.get(), args, "scale_module");
      std::vector<double> ref(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) ref[i] = double(factor) * x[i];
      CHECK(lgtest::relative_error(lgtest::to_host(s, b.cview()), ref) < 1e-6);
    }
    CHECK(live_handles() == before);  // unloaded with the LoadedModule
  }

  TEST_CASE("a moved-from LoadedModule throws UsageError, and the module is unloaded once, by its last owner") {
    const std::vector<char> image = image_for_device();
    const LiveHandles before = live_handles();
    {
      LoadedModule a(lgtest::device(), image.data(), "scale_module.cu");
      const CUmodule raw = a.get();
      LoadedModule b = std::move(a);
      CHECK_THROWS_WITH_AS((void)a.get(), doctest::Contains("moved-from LoadedModule"),  // NOLINT
                           UsageError);
      CHECK_THROWS_AS((void)a.function("scale_module"), UsageError);  // NOLINT(bugprone-use-after-move)
      CHECK(b.get() == raw);
      CHECK(b.function("scale_module") != nullptr);
      CHECK(live_handles().modules == before.modules + 1);

      LoadedModule c(lgtest::device(), image.data(), "second copy");
      CHECK(live_handles().modules == before.modules + 2);
      c = std::move(b);  // c's own module is unloaded, b's taken
      CHECK(live_handles().modules == before.modules + 1);
      CHECK(c.get() == raw);
      CHECK(c.name() == "scale_module.cu");
      CHECK_THROWS_AS((void)b.get(), UsageError);  // NOLINT(bugprone-use-after-move)
    }
    CHECK(live_handles() == before);
  }

  TEST_CASE("an image the driver cannot load throws CudaError naming the module, and leaks nothing") {
    (void)lgtest::device();
    const LiveHandles before = live_handles();
    const std::string junk = "this is neither PTX nor CUBIN";
    try {
      const LoadedModule m(lgtest::device(), junk.c_str(), "junk.cu");
      FAIL("a junk image loaded");
    } catch (const CudaError& e) {
      CHECK(e.api() == "cuModuleLoadData");
      CHECK(e.object() == "module junk.cu");
    }
    CHECK(live_handles() == before);
  }
}
