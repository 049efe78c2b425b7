// KernelSet: reading a directory of kernel files and adding the core set to a library's sets (host), and a library
// compiling several sets (gpu).
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {

void write(const std::filesystem::path& file, const std::string& text) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

/// A user directory: one kernel that includes its own header and a core header.
std::filesystem::path user_kernel_directory() {
  const auto dir = lgtest::scratch_directory("user-kernels");
  write(dir / "scale.cu",
        "#include \"mine/factor.cuh\"\n#include \"lazygraph/kernel_common.cuh\"\n"
        "extern \"C\" __global__ void user_scale(float* x, int n) {\n"
        "  for (long long i = lg::global_index(); i < n; i += lg::grid_stride()) x[i] *= kFactor;\n}\n");
  write(dir / "include" / "mine" / "factor.cuh", "#pragma once\nconstexpr float kFactor = 3.0f;\n");
  write(dir / "notes.txt", "not a kernel");
  return dir;
}

}  // namespace

TEST_CASE("KernelSet::from_directory reads the .cu files and the headers below include/, in name order") {
  const auto dir = user_kernel_directory();
  write(dir / "another.cu", "extern \"C\" __global__ void other(int* p) {}\n");
  const KernelSet set = KernelSet::from_directory(dir, "mine");
  CHECK(set.name == "mine");
  REQUIRE(set.sources.size() == 2);
  CHECK(set.sources[0].name == "mine/another.cu");
  CHECK(set.sources[1].name == "mine/scale.cu");
  CHECK(set.sources[1].text.find("user_scale") != std::string::npos);
  REQUIRE(set.headers.size() == 1);
  CHECK(set.headers[0].name == "mine/factor.cuh");
  CHECK(KernelSet::from_directory(dir).name == dir.filename().string());  // the directory's name by default
}

TEST_CASE("KernelSet::from_directory names the directory when it is missing or holds no kernel file") {
  const auto empty = lgtest::scratch_directory("no-kernels");
  write(empty / "include" / "x.cuh", "");
  CHECK_THROWS_WITH_AS(KernelSet::from_directory(empty), doctest::Contains("holds no .cu file"), UsageError);
  CHECK_THROWS_WITH_AS(KernelSet::from_directory(empty / "nope"), doctest::Contains("is not a directory"), UsageError);
}

TEST_CASE("the core set is kernels/*.cu with the kernels/include headers, and no model kernels") {
  const KernelSet& core = core_kernels();
  CHECK(core.name == "core");
  CHECK_FALSE(core.sources.empty());
  CHECK(core.headers.size() == core_kernel_headers().size());
  for (const KernelSource& s : core.sources) {
    CAPTURE(s.name);
    CHECK(s.name.find('/') == std::string::npos);
    CHECK(s.text.find("gemv") == std::string::npos);
    CHECK(s.text.find("attention") == std::string::npos);
  }
}

TEST_CASE("a library's sets are the listed ones with the core set first, unless the core set is listed") {
  const KernelSet mine{"mine", {{"mine/a.cu", "extern \"C\" __global__ void a() {}\n"}}, {}};
  const KernelSet theirs{"theirs", {{"theirs/b.cu", "extern \"C\" __global__ void b() {}\n"}}, {}};
  const KernelSet& core = core_kernels();
  CHECK(detail::with_core_kernels({}) == std::vector<KernelSet>{core});
  CHECK(detail::with_core_kernels({mine, theirs}) == std::vector<KernelSet>{core, mine, theirs});
  // Listed: left where it is, and not added a second time.
  CHECK(detail::with_core_kernels({core}) == std::vector<KernelSet>{core});
  CHECK(detail::with_core_kernels({mine, core, theirs}) == std::vector<KernelSet>{mine, core, theirs});
}

TEST_CASE("a set named like the core set that is not it is an error: the core set cannot be replaced") {
  KernelSet patched = core_kernels();
  patched.sources.front().text += "\n// patched\n";
  CHECK_THROWS_WITH_AS((void)detail::with_core_kernels({patched}),
                       doctest::Contains("kernel set core differs from core_kernels()"), UsageError);
  const KernelSet named_core{"core", {{"core/mine.cu", "extern \"C\" __global__ void mine() {}\n"}}, {}};
  CHECK_THROWS_WITH_AS((void)detail::with_core_kernels({named_core}), doctest::Contains("give this set another name"),
                       UsageError);
}

TEST_SUITE("gpu") {
  TEST_CASE("a library compiles the sets it is given and the core set: a user directory's kernel runs") {
    KernelLibraryOptions opts;
    opts.cache_directory = lgtest::scratch_directory("sets-cache");
    opts.kernel_sets = {core_kernels(), KernelSet::from_directory(user_kernel_directory(), "mine")};
    const KernelLibrary lib(lgtest::device(), opts);
    CHECK(lib.stats().modules == core_kernels().sources.size() + 1);
    const auto scale = lib.get<void(float*, int)>("user_scale");
    const std::vector<float> x = lgtest::random_floats(1000);
    auto dx = lgtest::to_device(lgtest::stream(), x);
    scale.launch(lgtest::stream(), grid_for(x.size(), 256), dx.view(), static_cast<int>(x.size()));
    const std::vector<float> got = lgtest::to_host(lgtest::stream(), dx.cview());
    for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(got[i] == 3.0F * x[i]);
    CHECK_NOTHROW((void)lib.get<void(float, const float*, float*, int)>("axpy"));

    // Not listing the core set changes nothing: it is compiled all the same.
    KernelLibraryOptions user_only = opts;
    user_only.kernel_sets = {KernelSet::from_directory(user_kernel_directory(), "mine")};
    const KernelLibrary just_mine(lgtest::device(), user_only);
    CHECK(just_mine.stats().modules == lib.stats().modules);
    CHECK(just_mine.kernel_names() == lib.kernel_names());
  }

  TEST_CASE("a file in two sets, or a set header named like a core header, is an error naming both") {
    KernelLibraryOptions opts;
    opts.cache_directory = std::filesystem::path{};
    const KernelSet mine = KernelSet::from_directory(user_kernel_directory(), "mine");
    opts.kernel_sets = {mine, mine};
    CHECK_THROWS_WITH_AS(KernelLibrary(lgtest::device(), opts),
                         doctest::Contains("kernel file mine/scale.cu is in both kernel sets mine and mine"),
                         UsageError);
    KernelSet clash = mine;
    clash.headers.push_back({"lazygraph/half.cuh", "// not the core one\n"});
    opts.kernel_sets = {clash};
    CHECK_THROWS_WITH_AS(KernelLibrary(lgtest::device(), opts),
                         doctest::Contains("its header lazygraph/half.cuh has the name of a core header"), UsageError);
  }
}
