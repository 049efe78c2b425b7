#include <doctest/doctest.h>

#include <lazygraph/kernels.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace lazygraph;

namespace {
const KernelSource good{"good.cu",
                        "extern \"C\" __global__ void scale(float* p, float s, int n) {\n"
                        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                        "  if (i < n) p[i] *= s;\n}\n"};
}

TEST_CASE("NVRTC compiles a kernel to PTX without a GPU") {
  const auto opts = nvrtc_options(90, false);
  const CompileResult r = nvrtc_compile(good, {}, opts, false);
  REQUIRE(r.succeeded());
  CHECK_FALSE(r.is_cubin());
  const std::string ptx(r.image().data());
  CHECK(ptx.find(".entry scale") != std::string::npos);
  CHECK(ptx.find(".target sm_90") != std::string::npos);
}

TEST_CASE("NVRTC compiles a kernel to CUBIN for sm_90") {
  const auto opts = nvrtc_options(90, true);
  const CompileResult r = nvrtc_compile(good, {}, opts, true);
  REQUIRE(r.succeeded());
  CHECK(r.is_cubin());
  REQUIRE(r.image().size() > 4);
  CHECK(std::memcmp(r.image().data(),
                    "\x7f"
                    "ELF",
                    4) == 0);  // a CUBIN is an ELF image
}

TEST_CASE("LAZYGRAPH_NVRTC_LINEINFO adds source lines to the code, for compute-sanitizer's reports") {
  const char* before = std::getenv("LAZYGRAPH_NVRTC_LINEINFO");
  const std::string saved = before != nullptr ? before : "";
  const auto has_lineinfo = [] {
    const auto opts = nvrtc_options(90, false);
    return std::find(opts.begin(), opts.end(), "-lineinfo") != opts.end();
  };
  ::unsetenv("LAZYGRAPH_NVRTC_LINEINFO");
  CHECK_FALSE(has_lineinfo());
  const CompileResult plain = nvrtc_compile(good, {}, nvrtc_options(90, false), false);
  REQUIRE(plain.succeeded());
  CHECK(std::string(plain.image().data()).find(".loc") == std::string::npos);
  ::setenv("LAZYGRAPH_NVRTC_LINEINFO", "0", 1);
  CHECK_FALSE(has_lineinfo());
  ::setenv("LAZYGRAPH_NVRTC_LINEINFO", "1", 1);
  CHECK(has_lineinfo());
  // The PTX then carries the source file and its lines.
  const CompileResult r = nvrtc_compile(good, {}, nvrtc_options(90, false), false);
  REQUIRE(r.succeeded());
  const std::string ptx(r.image().data());
  CHECK(ptx.find(".file") != std::string::npos);
  CHECK(ptx.find(".loc") != std::string::npos);
  if (before != nullptr) {
    ::setenv("LAZYGRAPH_NVRTC_LINEINFO", saved.c_str(), 1);
  } else {
    ::unsetenv("LAZYGRAPH_NVRTC_LINEINFO");
  }
}

TEST_CASE("a source that does not compile is a failed result with the log, and its image throws CompileError") {
  const KernelSource bad{"broken.cu", "extern \"C\" __global__ void k(float* p) { p[0] = undefined_name; }\n"};
  const auto opts = nvrtc_options(90, true);
  const CompileResult r = nvrtc_compile(bad, {}, opts, true);
  CHECK_FALSE(r.succeeded());
  CHECK(r.log().find("undefined_name") != std::string::npos);
  CHECK_THROWS_WITH_AS((void)r.image(), doctest::Contains("broken.cu"), CompileError);
  try {
    (void)r.image();
  } catch (const CompileError& e) {
    CHECK(e.file() == "broken.cu");
    CHECK(std::string(e.what()).find("undefined_name") != std::string::npos);
  }
}

TEST_CASE("kernel sources include headers by name") {
  const KernelSource header{"lib/twice.cuh", "__device__ inline float twice(float x) { return 2.0f * x; }\n"};
  const KernelSource src{"uses.cu",
                         "#include \"lib/twice.cuh\"\n"
                         "extern \"C\" __global__ void k(float* p) { p[0] = twice(p[0]); }\n"};
  const auto opts = nvrtc_options(90, false);
  const CompileResult r = nvrtc_compile(src, std::span(&header, 1), opts, false);
  CHECK(r.succeeded());
  const CompileResult missing = nvrtc_compile(src, {}, opts, false);
  CHECK_FALSE(missing.succeeded());
  CHECK(missing.log().find("lib/twice.cuh") != std::string::npos);
}

TEST_CASE("the target architecture is the device's own, or the newest NVRTC knows below it") {
  CHECK(nvrtc_target_architecture(90) == 90);
  CHECK(nvrtc_target_architecture(80) == 80);
  CHECK(nvrtc_target_architecture(91) == 90);  // unknown to NVRTC: fall back to PTX for 9.0
  CHECK(nvrtc_target_architecture(10) == 0);   // older than anything supported
  CHECK_FALSE(nvrtc_version().empty());
}

TEST_CASE("every core kernel in kernels/ compiles for sm_90") {
  const auto& sources = core_kernels().sources;
  const auto headers = core_kernel_headers();
  REQUIRE(sources.size() >= 3);
  REQUIRE_FALSE(headers.empty());
  const auto opts = nvrtc_options(90, true);
  for (const KernelSource& s : sources) {
    CAPTURE(s.name);
    const CompileResult r = nvrtc_compile(s, headers, opts, true);
    CHECK_MESSAGE(r.succeeded(), r.log());
  }
}
