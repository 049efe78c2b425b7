// Fused elementwise expressions (kernels/expression.hpp): element types of results, lengths checked when built, and
// the generated source (content, determinism, what changes it and what does not, and that NVRTC compiles it).
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <string>
#include <type_traits>
#include <vector>

using namespace lazygraph;

namespace {

// Spans of raw addresses: building expressions touches no GPU, so no memory is needed.
template <class T>
DeviceSpan<T> raw_span(CUdeviceptr address, std::size_t n) {
  return {address, n};
}

constexpr CUdeviceptr a_address = 0x100000;
constexpr CUdeviceptr b_address = 0x200000;
constexpr CUdeviceptr c_address = 0x300000;
constexpr CUdeviceptr out_address = 0x400000;

// The element types of results, checked at compile time.
using F = DeviceSpan<const float>;
using H = DeviceSpan<const half>;
using B = DeviceSpan<bfloat16>;
template <class E>
using ValueOf = typename E::value_type;
static_assert(std::is_same_v<ValueOf<decltype(std::declval<F>() + std::declval<F>())>, float>);
static_assert(std::is_same_v<ValueOf<decltype(2.0F * std::declval<H>())>, half>);  // a number takes the other's type
static_assert(std::is_same_v<ValueOf<decltype(std::declval<B>() - 1)>, bfloat16>);
static_assert(std::is_same_v<ValueOf<decltype(std::declval<H>() < std::declval<H>())>, bool>);
static_assert(std::is_same_v<ValueOf<decltype(silu(std::declval<H>()) * std::declval<H>())>, half>);
static_assert(std::is_same_v<ValueOf<decltype(select(std::declval<F>() > 0.0F, std::declval<F>(), 0.0F))>, float>);
static_assert(std::is_same_v<ValueOf<decltype(cast<half>(std::declval<F>()))>, half>);
static_assert(std::is_same_v<ValueOf<decltype(cast<float>(std::declval<F>() < 1.0F))>, float>);
static_assert(std::is_same_v<ValueOf<decltype((std::declval<F>() < 1.0F) && !(std::declval<F>() > 2.0F))>, bool>);
static_assert(std::is_same_v<ValueOf<decltype((std::declval<F>() < 1.0F) == (std::declval<F>() > 2.0F))>, bool>);
static_assert(Expression<decltype(exp(std::declval<F>()))>);
static_assert(ExpressionOperand<DeviceSpan<half>> && ExpressionOperand<float> && ExpressionOperand<double>);
static_assert(!ExpressionOperand<bool> && !ExpressionOperand<std::string> && !ExpressionOperand<half>);
static_assert(ExpressionOperand<DeviceScalar<float>> && !ExpressionOperand<DeviceScalar<int>>);

/// The source of `out = e`.
template <class T, class E>
std::string source_of(DeviceSpan<T> out, const E& e) {
  return assign(out, e).source();
}

/// NVRTC compiles `source` (with the options of the expression cache: nvrtc_options and -minimal) for sm_90 CUBIN;
/// the log when it does not.
std::string compile_log_for_sm90(const std::string& name, const std::string& source) {
  auto options = nvrtc_options(90, true);
  options.emplace_back("-minimal");
  const CompileResult r = nvrtc_compile({name + ".cu", source}, core_kernel_headers(), options, true);
  return r.succeeded() ? std::string() : r.log() + "\n" + source;
}

}  // namespace

TEST_CASE("an expression's generated source holds its operations, operand types and the 16-byte path") {
  const auto a = raw_span<const half>(a_address, 1000);
  const auto b = raw_span<const half>(b_address, 1000);
  const auto c = raw_span<const half>(c_address, 1000);
  const auto out = raw_span<half>(out_address, 1000);
  const auto op = assign(out, silu(a) * b + 2.0F * c);
  const std::string& s = op.source();
  CHECK(op.description() == "out = silu(x0) * x1 + s2 * x3");
  CHECK(s.find("// out = silu(x0) * x1 + s2 * x3") != std::string::npos);
  CHECK(s.find("lg::expr::silu(x0)") != std::string::npos);
  CHECK(s.find("#include \"lazygraph/expression.cuh\"") != std::string::npos);
  CHECK(s.find("const lg::half_t* in0, const lg::half_t* in1, float s2, const lg::half_t* in3, lg::half_t* out, "
               "long long n, int vectorized") != std::string::npos);
  CHECK(s.find("constexpr int v = 8;") != std::string::npos);  // 8 halves per 16-byte access
  CHECK(s.find("extern \"C\" __global__ void __launch_bounds__(256) " + op.kernel_name() + "(") != std::string::npos);
  CHECK(op.kernel_name().starts_with("lg_expr_"));
  CHECK(op.kernel_name().size() == std::string("lg_expr_").size() + 16);
  CHECK(s.find("2.0") == std::string::npos);  // the number is an argument, not part of the source
  for (const char ch : s) CHECK_MESSAGE(static_cast<unsigned char>(ch) < 128, "kernel sources are pure ASCII");
}

TEST_CASE("a generated source includes the helpers of the 16-bit types it uses only, and keeps its loops rolled") {
  const auto f = raw_span<const float>(a_address, 64);
  const auto h = raw_span<const half>(b_address, 64);
  const auto bf = raw_span<const bfloat16>(c_address, 64);
  const std::string float_only = source_of(raw_span<float>(out_address, 64), exp(f) * f);
  CHECK(float_only.find("#define LG_EXPR_") == std::string::npos);
  const std::string half_out = source_of(raw_span<half>(out_address, 64), cast<half>(f));
  CHECK(half_out.find("#define LG_EXPR_HALF\n") != std::string::npos);
  CHECK(half_out.find("#define LG_EXPR_BF16") == std::string::npos);
  const std::string bf16_in = source_of(raw_span<float>(out_address, 64), cast<float>(bf) + 1.0F);
  CHECK(bf16_in.find("#define LG_EXPR_BF16\n") != std::string::npos);
  CHECK(bf16_in.find("#define LG_EXPR_HALF") == std::string::npos);
  // A rounding alone (float in, float out) needs the type's helpers too.
  const std::string rounding = source_of(raw_span<float>(out_address, 64), cast<float>(cast<bfloat16>(f)));
  CHECK(rounding.find("#define LG_EXPR_BF16\n") != std::string::npos);
  const std::string both = source_of(raw_span<half>(out_address, 64), h + cast<half>(bf));
  CHECK(both.find("#define LG_EXPR_HALF\n#define LG_EXPR_BF16\n#include \"lazygraph/expression.cuh\"") !=
        std::string::npos);
  // Unrolling either loop would compile the body again for each copy (see src/kernels/expression.cpp).
  std::size_t rolled = 0;
  for (std::size_t at = float_only.find("#pragma unroll 1\n"); at != std::string::npos;
       at = float_only.find("#pragma unroll 1\n", at + 1)) {
    ++rolled;
  }
  CHECK(rolled == 2);
}

TEST_CASE("the same structure and types give the same source, whatever the numbers, addresses and lengths") {
  const auto a = raw_span<const float>(a_address, 100);
  const auto b = raw_span<const float>(b_address, 100);
  const auto out = raw_span<float>(out_address, 100);
  const std::string first = source_of(out, a * 3.0F + b);
  CHECK(first == source_of(out, a * 3.0F + b));  // deterministic
  CHECK(first == source_of(out, a * -7.5F + b));
  CHECK(first == source_of(raw_span<float>(0x900000, 5),
                           raw_span<const float>(0x500000, 5) * 1 + raw_span<const float>(0x600000, 5)));
  CHECK(assign(out, a * 3.0F + b).kernel_name() == assign(out, a * 0.5F + b).kernel_name());
}

TEST_CASE("another structure, element type or output type gives another source and kernel name") {
  const auto a = raw_span<const float>(a_address, 64);
  const auto b = raw_span<const float>(b_address, 64);
  const auto out = raw_span<float>(out_address, 64);
  const auto ha = raw_span<const half>(a_address, 64);
  const auto hb = raw_span<const half>(b_address, 64);
  const auto hout = raw_span<half>(out_address, 64);
  const auto bfa = raw_span<const bfloat16>(a_address, 64);
  const auto bfb = raw_span<const bfloat16>(b_address, 64);
  const auto bfout = raw_span<bfloat16>(out_address, 64);
  const std::vector<std::string> sources{source_of(out, a * b),
                                         source_of(out, a + b),
                                         source_of(out, b * a * 1.0F),
                                         source_of(out, exp(a) * b),
                                         source_of(hout, ha * hb),
                                         source_of(bfout, bfa * bfb),
                                         source_of(hout, cast<half>(a * b)),
                                         source_of(out, cast<float>(ha * hb))};
  for (std::size_t i = 0; i < sources.size(); ++i) {
    for (std::size_t j = i + 1; j < sources.size(); ++j) {
      CAPTURE(i);
      CAPTURE(j);
      CHECK(sources[i] != sources[j]);
    }
  }
  CHECK(assign(out, a * b).kernel_name() != assign(out, a + b).kernel_name());
  CHECK(source_of(out, a * b).find("constexpr int v = 4;") != std::string::npos);  // 4 floats per 16 bytes
  CHECK(source_of(out, cast<float>(ha * hb)).find("constexpr int v = 8;") != std::string::npos);
}

TEST_CASE("descriptions keep the order of operations with as few parentheses as it takes") {
  const auto a = raw_span<const float>(a_address, 8);
  const auto b = raw_span<const float>(b_address, 8);
  const auto out = raw_span<float>(out_address, 8);
  CHECK(assign(out, (a + b) * 2.0F).description() == "out = (x0 + x1) * s2");
  CHECK(assign(out, a - (b - 1.0F)).description() == "out = x0 - (x1 - s2)");
  CHECK(assign(out, a - b - 1.0F).description() == "out = x0 - x1 - s2");
  CHECK(assign(out, -(a + b)).description() == "out = -(x0 + x1)");
  CHECK(assign(out, select(a < b && !(a > 0.5F), max(a, b), min(abs(a), 1.0F))).description() ==
        "out = select(x0 < x1 && !(x2 > s3), max(x4, x5), min(abs(x6), s7))");
  CHECK(assign(out, rsqrt(sqrt(tanh(a)))).description() == "out = rsqrt(sqrt(tanh(x0)))");
  CHECK(assign(out, cast<float>(cast<half>(a))).description() == "out = cast<float>(cast<half>(x0))");
  CHECK(assign(out, 1.5F).description() == "out = s0");
}

TEST_CASE("spans of different lengths are refused when the expression is built, naming both lengths") {
  const auto a = raw_span<const float>(a_address, 1000);
  const auto b = raw_span<const float>(b_address, 999);
  CHECK_THROWS_WITH_AS((void)(a + b), doctest::Contains("1000 and 999 elements"), UsageError);
  CHECK_THROWS_WITH_AS((void)(exp(a) * 2.0F - b),
                       doctest::Contains("`-` combines spans of different lengths, 1000 and 999"), UsageError);
  CHECK_THROWS_WITH_AS((void)select(a > 0.0F, a, b), doctest::Contains("select"), UsageError);
  CHECK_NOTHROW((void)(a * 2.0F + broadcast(raw_span<const float>(c_address, 1))));  // a broadcast fits any length
}

TEST_CASE("broadcast reads one element; any other length is refused") {
  CHECK_THROWS_WITH_AS((void)broadcast(raw_span<const float>(c_address, 3)),
                       doctest::Contains("exactly one element (such as a DeviceScalar's cview()), not 3"), UsageError);
  const auto op = assign(raw_span<float>(out_address, 10),
                         raw_span<const float>(a_address, 10) * broadcast(raw_span<float>(c_address, 1)));
  CHECK(op.description() == "out = x0 * b1");
  CHECK(op.source().find("const float b1 = lg::expr::load(in1);") != std::string::npos);
}

TEST_CASE("generated sources compile with NVRTC for sm_90, in float, half and bfloat16") {
  const std::size_t n = 77;
  const auto f = [&](CUdeviceptr at) { return raw_span<const float>(at, n); };
  const auto h = [&](CUdeviceptr at) { return raw_span<const half>(at, n); };
  const auto bf = [&](CUdeviceptr at) { return raw_span<const bfloat16>(at, n); };
  const auto fo = raw_span<float>(out_address, n);
  const auto ho = raw_span<half>(out_address, n);
  const auto bo = raw_span<bfloat16>(out_address, n);
  const auto scalar = broadcast(raw_span<const half>(0x700000, 1));
  const std::vector<std::pair<std::string, std::string>> programs{
      {assign(ho, silu(h(a_address)) * h(b_address) + 2.0F * h(c_address)).kernel_name(),
       assign(ho, silu(h(a_address)) * h(b_address) + 2.0F * h(c_address)).source()},
      {assign(fo,
              select(f(a_address) < f(b_address) || f(c_address) == 0.0F, exp(f(a_address)), tanh(f(b_address)) / 3))
           .kernel_name(),
       assign(fo,
              select(f(a_address) < f(b_address) || f(c_address) == 0.0F, exp(f(a_address)), tanh(f(b_address)) / 3))
           .source()},
      {assign(bo, max(bf(a_address), -bf(b_address)) * rsqrt(abs(bf(c_address)) + 1.0F)).kernel_name(),
       assign(bo, max(bf(a_address), -bf(b_address)) * rsqrt(abs(bf(c_address)) + 1.0F)).source()},
      {assign(ho, cast<half>(sqrt(abs(f(a_address)))) * scalar + cast<half>(bf(b_address) >= 0.5F)).kernel_name(),
       assign(ho, cast<half>(sqrt(abs(f(a_address)))) * scalar + cast<half>(bf(b_address) >= 0.5F)).source()},
      {assign(fo, cast<float>(cast<bfloat16>(f(a_address)) != cast<bfloat16>(f(b_address)))).kernel_name(),
       assign(fo, cast<float>(cast<bfloat16>(f(a_address)) != cast<bfloat16>(f(b_address)))).source()},
      {assign(fo, 0.25).kernel_name(), assign(fo, 0.25).source()},
  };
  for (const auto& p : programs) {
    CAPTURE(p.first);
    CHECK(compile_log_for_sm90(p.first, p.second).empty());
  }
}

TEST_CASE(
    "compile_expression compiles a program to CUBIN, and a source NVRTC rejects is a CompileError with the "
    "source and the log") {
  const auto op = assign(raw_span<float>(out_address, 4), raw_span<const float>(a_address, 4) * 2.0F);
  detail::ExpressionProgram program{op.source(), op.kernel_name(), op.description(), 4, {"x0"}};
  const auto options = nvrtc_options(90, true);
  const KernelCache::Entry entry = detail::compile_expression(program, options, true);
  CHECK(entry.is_cubin);
  CHECK(entry.image.size() > 4);
  // PTX, as the library loads them (the driver compiles it): NUL-terminated text naming the kernel.
  const KernelCache::Entry ptx = detail::compile_expression(program, nvrtc_options(90, false), false);
  CHECK_FALSE(ptx.is_cubin);
  REQUIRE_FALSE(ptx.image.empty());
  CHECK(ptx.image.back() == '\0');
  CHECK(std::string(ptx.image.data()).find(op.kernel_name()) != std::string::npos);

  program.source.replace(program.source.find("return"), 6, "return undefined_name +");
  try {
    (void)detail::compile_expression(program, options, true);
    FAIL("a broken source compiled");
  } catch (const CompileError& e) {
    const std::string what = e.what();
    CHECK(e.file() == op.kernel_name() + ".cu");
    CHECK(what.find("undefined_name") != std::string::npos);  // NVRTC's log
    CHECK(what.find("generated source of the fused expression `out = x0 * s1`") != std::string::npos);
    CHECK(what.find("lg_expr_body(float x0, float s1)") != std::string::npos);  // the source itself
  }
}
