// The host-side reader of kernel declarations (kernel_declaration.hpp): no GPU needed. The canonical spelling
// of host parameter types (kernel_parameter_type.hpp) is tested in kernel_parameter_type.cpp.
#include <doctest/doctest.h>

#include <lazygraph/kernels.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/user_types.hpp"

using namespace lazygraph;

namespace {

std::vector<std::string> types_of(const std::vector<KernelDeclaration>& found, std::string_view name) {
  for (const KernelDeclaration& d : found) {
    if (d.name == name) return d.parameter_types;
  }
  FAIL("no declaration of " << name);
  return {};
}

std::size_t count_occurrences(std::string_view text, std::string_view what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string_view::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

using Types = std::vector<std::string>;

}  // namespace

TEST_CASE("parameter declarations are spelled canonically") {
  CHECK(canonical_parameter_type("int n") == "int");
  CHECK(canonical_parameter_type("const int n") == "int");  // top-level const: the caller passes an int
  CHECK(canonical_parameter_type("int const") == "int");
  CHECK(canonical_parameter_type("unsigned") == "unsigned int");
  CHECK(canonical_parameter_type("unsigned key") == "unsigned int");
  CHECK(canonical_parameter_type("unsigned int key") == "unsigned int");
  CHECK(canonical_parameter_type("signed") == "int");
  CHECK(canonical_parameter_type("long long n") == "long long");
  CHECK(canonical_parameter_type("long long int n") == "long long");
  CHECK(canonical_parameter_type("unsigned long long int") == "unsigned long long");
  CHECK(canonical_parameter_type("short int s") == "short");
  CHECK(canonical_parameter_type("signed char c") == "signed char");
  CHECK(canonical_parameter_type("char c") == "char");
  CHECK(canonical_parameter_type("long double x") == "long double");
  CHECK(canonical_parameter_type("size_t n") == "unsigned long");
  CHECK(canonical_parameter_type("std::size_t n") == "unsigned long");
  CHECK(canonical_parameter_type("int32_t n") == "int");
  CHECK(canonical_parameter_type("uint32_t n") == "unsigned int");
  CHECK(canonical_parameter_type("int64_t n") == "long");
  CHECK(canonical_parameter_type("::uint64_t n") == "unsigned long");
  CHECK(canonical_parameter_type("const float* x") == "const float*");
  CHECK(canonical_parameter_type("float const* x") == "const float*");
  CHECK(canonical_parameter_type("float* const x") == "float*");  // a const pointer: still written through
  CHECK(canonical_parameter_type("const float* const __restrict__ x") == "const float*");
  CHECK(canonical_parameter_type("float* __restrict__") == "float*");
  CHECK(canonical_parameter_type("const float* const* rows") == "const float* const*");
  CHECK(canonical_parameter_type("float** rows") == "float**");
  CHECK(canonical_parameter_type("const lg::half_t* __restrict__ x") == "const half_t*");
  CHECK(canonical_parameter_type("lg :: half_t* out") == "half_t*");
  CHECK(canonical_parameter_type("half_t h") == "half_t");
  CHECK(canonical_parameter_type("const __half* h") == "const half_t*");
  CHECK(canonical_parameter_type("__grid_constant__ const dev::Params p") == "Params");
  CHECK(canonical_parameter_type("struct Params p") == "Params");
  CHECK(canonical_parameter_type("Params") == "Params");
  CHECK(canonical_parameter_type("int n = 4") == "int");
  CHECK_THROWS_WITH_AS(canonical_parameter_type("float& x"), doctest::Contains("reference"), UsageError);
  CHECK_THROWS_WITH_AS(canonical_parameter_type("float x[4]"), doctest::Contains("array"), UsageError);
  CHECK_THROWS_WITH_AS(canonical_parameter_type("void (*f)(int)"), doctest::Contains("function pointer"), UsageError);
  CHECK_THROWS_AS(canonical_parameter_type(""), UsageError);
}

TEST_CASE("declarations are found through comments, attributes, line breaks and extern \"C\" blocks") {
  const std::string source = R"cu(
#include "lazygraph/half.cuh"
#define FAKE extern "C" __global__ void from_a_macro(int n)
// extern "C" __global__ void commented_out(int n) {}
/* extern "C" __global__ void
   also_commented_out(float x) {} */
const char* text = "extern \"C\" __global__ void in_a_string(int n)";
namespace { __device__ int helper(int x) { return x; } }
__global__ void not_extern_c(float* p) {}

extern "C" __global__ void __launch_bounds__(256, 3)
    bounded(const lg::half_t* __restrict__ W,   // the weights
            lg::half_t* out, /* rows: */ int rows,
            const unsigned cols) {
  if (rows > 0) { out[0] = W[0]; }
}

extern "C" __global__ void prototype(float, const float*, long long);
extern "C" __global__ void prototype(float a, const float* x, long long n) { (void)a; (void)x; (void)n; }

extern "C" {
__global__ void in_block(size_t n, int64_t m, uint32_t k) {}
__device__ void block_device_function(int) {}
__global__ void no_parameters() {}
__global__ void void_parameters(void) {}
}

extern "C" __global__ void after_block(float* const p, const float* const* rows, std::uint64_t n) {}
extern "C" __launch_bounds__(128) __global__ void bounds_first(unsigned short s, signed char c) {}
extern "C" __global__ void unreadable(float& x) {}
)cu";
  const std::vector<KernelDeclaration> found = parse_kernel_declarations(source, "tricky.cu");
  std::vector<std::string> names;
  for (const KernelDeclaration& d : found) names.push_back(d.name);
  CHECK(names == Types{"bounded", "prototype", "prototype", "in_block", "no_parameters", "void_parameters",
                       "after_block", "bounds_first", "unreadable"});
  CHECK(types_of(found, "bounded") == Types{"const half_t*", "half_t*", "int", "unsigned int"});
  CHECK(types_of(found, "prototype") == Types{"float", "const float*", "long long"});
  CHECK(found[2].parameter_types == found[1].parameter_types);
  CHECK(types_of(found, "in_block") == Types{"unsigned long", "long", "unsigned int"});
  CHECK(types_of(found, "no_parameters").empty());
  CHECK(types_of(found, "void_parameters").empty());
  CHECK(types_of(found, "after_block") == Types{"float*", "const float* const*", "unsigned long"});
  CHECK(types_of(found, "bounds_first") == Types{"unsigned short", "signed char"});
  CHECK(found[0].file == "tricky.cu");
  CHECK(found[0].line == 12);  // where the name stands, after the attribute's line
  CHECK(found[0].problem.empty());
  CHECK(found.back().problem.find("parameter 0") != std::string::npos);
  CHECK(found.back().problem.find("reference") != std::string::npos);
  CHECK(found.back().problem.find("`float & x`") != std::string::npos);
}

TEST_CASE("every core kernel embedded from kernels/ has a declaration the reader understands") {
  std::size_t declared = 0;
  std::size_t found = 0;
  for (const KernelSource& s : core_kernels().sources) {
    CAPTURE(s.name);
    declared += count_occurrences(s.text, "extern \"C\" __global__");
    const auto kernels = parse_kernel_declarations(s.text, s.name);
    found += kernels.size();
    for (const KernelDeclaration& d : kernels) {
      CAPTURE(d.name);
      CHECK(d.problem.empty());
      CHECK(d.file == s.name);
      CHECK(d.line > 0);
    }
  }
  for (const KernelSource& h : core_kernel_headers()) {
    CAPTURE(h.name);
    CHECK(parse_kernel_declarations(h.text, h.name).empty());  // headers hold no kernels
    CHECK(count_occurrences(h.text, "__global__") == 0);
  }
  CHECK(declared >= 7);
  CHECK(found == declared);
  const KernelDeclarations all(core_kernels().sources);
  CHECK(all.size() == declared);  // and no name twice
  REQUIRE(all.find("axpy") != nullptr);
  CHECK(all.find("axpy")->parameter_types == Types{"float", "const float*", "float*", "int"});
  CHECK(all.find("axpy")->file == "axpy.cu");
}

TEST_CASE("a declaration with __launch_bounds__ between void and the name, and wide integer types, is read") {
  const std::vector<KernelSource> sources{
      {"bounds.cu",
       "extern \"C\" __global__ void __launch_bounds__(256, 3)\n"
       "    gemv(const lg::half_t* W, const lg::half_t* x, lg::half_t* out, int rows, int cols) {}\n"
       "extern \"C\" __global__ void fill(lg::half_t* out, long long n, unsigned key, float a, float b) {}\n"}};
  const KernelDeclarations all(sources);
  REQUIRE(all.find("gemv") != nullptr);
  CHECK(all.find("gemv")->parameter_types == Types{"const half_t*", "const half_t*", "half_t*", "int", "int"});
  REQUIRE(all.find("fill") != nullptr);
  CHECK(all.find("fill")->parameter_types == Types{"half_t*", "long long", "unsigned int", "float", "float"});
  CHECK_THROWS_WITH_AS(all.check<void(half*, long, unsigned, float, float)>("fill"),
                       doctest::Contains("parameter 1 is declared `long long`"), UsageError);
}

TEST_CASE("a #line directive numbers the lines after it, as the compiler does") {
  const std::string source =
      "#include \"lazygraph/half.cuh\"\n"                     // 1
      "#line 40\n"                                            // 2
      "extern \"C\" __global__ void forty(int n) {}\n"        // 40
      "#  line 7 \"nn/other.cu\"\n"                           // 41
      "\n"                                                    // 7
      "extern \"C\" __global__ void eight(int n) {}\n"        // 8
      "# 100\n"                                               // 9, the GNU form
      "extern \"C\" __global__ void hundred(int n) {}\n"      // 100
      "#if 1\n"                                               // 101, not a #line
      "extern \"C\" __global__ void hundred_two(int n) {}\n"  // 102
      "#endif\n";
  const std::vector<KernelDeclaration> found = parse_kernel_declarations(source, "lines.cu");
  REQUIRE(found.size() == 4);
  CHECK(found[0].line == 40);
  CHECK(found[1].line == 8);
  CHECK(found[2].line == 100);
  CHECK(found[3].line == 102);
  CHECK(found[1].file == "lines.cu");  // the file name a directive gives is not used
}

TEST_CASE("a signature whose parameter types differ from the declaration is an error naming the parameter") {
  const KernelDeclarations all(core_kernels().sources);
  CHECK_NOTHROW(all.check<void(float, const float*, float*, int)>("axpy"));
  // The review's case: the same sizes, but x and y swapped, so the read-only x would be written.
  CHECK_THROWS_WITH_AS(all.check<void(float, float*, const float*, int)>("axpy"),
                       doctest::Contains("kernel axpy (axpy.cu:4): parameter 1 is declared `const float*` in "
                                         "axpy.cu, but the signature void(float, float*, const float*, int) has "
                                         "`float*`"),
                       UsageError);
  CHECK_THROWS_WITH_AS(all.check<void(double, const float*, float*, int)>("axpy"),
                       doctest::Contains("parameter 0 is declared `float`"), UsageError);
  CHECK_THROWS_WITH_AS(all.check<void(float, const float*, float*, unsigned)>("axpy"),
                       doctest::Contains("has `unsigned int`"), UsageError);
  CHECK_THROWS_WITH_AS(all.check<void(float, const float*, float*)>("axpy"),
                       doctest::Contains("has 3 parameters, but axpy.cu declares 4: (float, const float*, float*, "
                                         "int)"),
                       UsageError);
  CHECK_THROWS_WITH_AS(all.check<void(float*, int)>("no_such_kernel"),
                       doctest::Contains("extern \"C\" __global__ void NAME("), UsageError);
}

TEST_CASE("a kernel whose declaration cannot be read fails the check with the reason") {
  const std::vector<KernelSource> sources{{"ref.cu", "extern \"C\" __global__ void by_ref(float& x) {}\n"}};
  const KernelDeclarations d(sources);
  CHECK_THROWS_WITH_AS(d.check<void(float*)>("by_ref"), doctest::Contains("kernel by_ref (ref.cu:1)"), UsageError);
  CHECK_THROWS_WITH_AS(d.check<void(float*)>("by_ref"), doctest::Contains("reference parameters"), UsageError);
}

TEST_CASE("user kernel sources are checked with class types by their unqualified names") {
  const std::vector<KernelSource> sources{
      {"user.cu",
       "namespace dev { struct Params { int n; float scale; }; }\n"
       "extern \"C\" __global__ void with_params(__grid_constant__ const dev::Params p, float* out) {}\n"}};
  const KernelDeclarations d(sources);
  CHECK_NOTHROW(d.check<void(user::Params, float*)>("with_params"));
  CHECK_THROWS_WITH_AS(d.check<void(user::HostOnlyName, float*)>("with_params"),
                       doctest::Contains("parameter 0 is declared `Params`"), UsageError);
}

TEST_CASE("a tile function is read without its lg::Tile; a device function without one is not a declaration") {
  const auto found = parse_kernel_declarations(R"(
#include "lazygraph/tile.cuh"
extern "C" __device__ void scale(lg::Tile tile, const float* x, float* y, int n) { tile.wait(); }
extern "C" __device__ __forceinline__ void
    inlined(lg::Tile tile,
            lg::half_t* out) {}
extern "C" __device__ void helper(unsigned long long handle, unsigned value);
__device__ void not_extern_c(lg::Tile tile, int n) {}
extern "C" {
__device__ void in_block(lg::Tile t) {}
__global__ void kernel(int n) {}
}
)",
                                               "tiles.cu");
  REQUIRE(found.size() == 4);
  CHECK(found[0].name == "scale");
  CHECK(found[0].tile);
  CHECK(found[0].parameter_types == std::vector<std::string>{"const float*", "float*", "int"});
  CHECK(found[1].name == "inlined");
  CHECK(found[1].tile);
  CHECK(found[1].parameter_types == std::vector<std::string>{"half_t*"});
  CHECK(found[2].name == "in_block");
  CHECK(found[2].tile);
  CHECK(found[2].parameter_types.empty());
  CHECK(found[3].name == "kernel");
  CHECK_FALSE(found[3].tile);
}
