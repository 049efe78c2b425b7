// GPU tests of lazygraph-info (meson test 'lazygraph-info-gpu', suite gpu): the tool's report against what the
// library itself reads from the driver. The tool is $LAZYGRAPH_INFO. Without a GPU: prints why, exits 77.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <lazygraph/detail/driver/driver_api.hpp>
#include <lazygraph/driver.hpp>
#include <lazygraph/kernels.hpp>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace lazygraph;

namespace {

struct Run {
  int status;
  std::string output;
};

/// Runs lazygraph-info with the environment of this test and returns its exit status and standard output.
Run run_info() {
  const char* tool = std::getenv("LAZYGRAPH_INFO");
  REQUIRE_MESSAGE(tool != nullptr, "LAZYGRAPH_INFO must name the lazygraph-info binary (tests/meson.build sets it)");
  FILE* pipe = ::popen(("'" + std::string(tool) + "'").c_str(), "r");
  REQUIRE(pipe != nullptr);
  Run r{0, {}};
  std::array<char, 4096> buf{};
  for (std::size_t n = 0; (n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0;) r.output.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("lazygraph-info lists every GPU with its name, compute capability and SM count") {
  const Run r = run_info();
  INFO(r.output);
  CHECK(r.status == 0);
  const int n = Device::count();
  REQUIRE(n > 0);
  CHECK(contains(r.output, "\nGPUs: " + std::to_string(n) + "\n"));
  for (int i = 0; i < n; ++i) {
    const Device d = Device::get(i);
    const ComputeCapability cc = d.compute_capability();
    CHECK(contains(r.output, "  GPU " + std::to_string(i) + ": " + d.name() + " (compute capability " +
                                 std::to_string(cc.major) + "." + std::to_string(cc.minor) + ", " +
                                 std::to_string(d.sm_count()) + " SMs)\n"));
    CHECK(contains(r.output, std::to_string(d.total_memory()) + " bytes"));
  }
  CHECK(contains(r.output, "Summary: ready for GPU work on " + std::to_string(n) + (n == 1 ? " GPU.\n" : " GPUs.\n")));
}

TEST_CASE("lazygraph-info names the loaded driver, its version and the conditional nodes it supports") {
  const Run r = run_info();
  INFO(r.output);
  CHECK(contains(r.output, "status:             loaded\n"));
  CHECK(contains(r.output, "libcuda.so"));
  const int v = detail::driver::driver_version();
  CHECK(contains(r.output, "CUDA " + version_text(v) + " (" + std::to_string(v) + ")"));
  CHECK(contains(r.output, std::string("IF and WHILE ") + (v >= 12040 ? "yes" : "no")));
  CHECK(contains(r.output, std::string("SWITCH and IF/ELSE ") + (v >= 12080 ? "yes" : "no")));
}

TEST_CASE("lazygraph-info gives each GPU's kernel architecture, CUBIN or PTX, and early launch support") {
  const Run r = run_info();
  INFO(r.output);
  std::string early;
  for (int i = 0; i < Device::count(); ++i) {
    const int cc = Device::get(i).compute_capability().as_int();
    const int arch = nvrtc_target_architecture(cc);
    REQUIRE(arch != 0);
    CHECK(contains(r.output, arch == cc ? "sm_" + std::to_string(arch) + " as CUBIN"
                                        : "compute_" + std::to_string(arch) + " as PTX"));
    early += (early.empty() ? "" : ", ") + std::string(cc >= 90 ? "yes" : "no") + " on GPU " + std::to_string(i);
  }
  CHECK(contains(r.output, "early launch:       " + early + " ("));
}

int main(int argc, char** argv) {
  std::string why;
  if (!gpu_available(&why)) {
    std::printf("lazygraph-info gpu tests skipped: %s\n", why.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
