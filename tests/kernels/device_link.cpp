// Linking with the CUDA device runtime (kernels/device_link.hpp): host only, NVRTC and nvJitLink need no driver.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <string>
#include <vector>

using namespace lazygraph;

namespace {

const char* const kSource = R"(#include "lazygraph/condition.cuh"
// Sets c to *value.
extern "C" __global__ void set_from(lg::Condition c, const unsigned* value) { lg::set_condition(c, *value); }
// Counts one more iteration in *hits; continues (c = 1) while *hits < *target.
extern "C" __global__ void count_to(lg::Condition c, unsigned* hits, const unsigned* target) {
  *hits += 1;
  lg::set_condition(c, *hits < *target ? 1u : 0u);
}
// Adds `amount` to *x.
extern "C" __global__ void add(unsigned* x, unsigned amount) { *x += amount; }
)";

}  // namespace

TEST_CASE("a kernel that sets a condition is compiled relocatable and linked with the device runtime") {
  const KernelSource source{"conditions.cu", kSource};
  CHECK(uses_device_runtime(source));
  CHECK_FALSE(uses_device_runtime({"plain.cu", "extern \"C\" __global__ void k() {}\n"}));
  const std::span<const KernelSource> headers = core_kernel_headers();
  std::vector<std::string> options = nvrtc_options(90, true);
  // Without -rdc=true the device runtime call does not compile: the link path is needed, not decoration.
  const CompileResult whole = nvrtc_compile(source, headers, options, true);
  CHECK_FALSE(whole.succeeded());
  options.emplace_back("-rdc=true");
  const CompileResult relocatable = nvrtc_compile(source, headers, options, true);
  REQUIRE_MESSAGE(relocatable.succeeded(), relocatable.log());
  const std::vector<char> linked = link_device_runtime(source.name, relocatable.image(), 90);
  CHECK(linked.size() > relocatable.image().size());  // cudaGraphSetConditional came from libcudadevrt.a
  CHECK_THROWS_WITH_AS((void)link_device_runtime("broken.cu", std::vector<char>(64, 'x'), 90),
                       doctest::Contains("broken.cu"), CompileError);
}
