// The compile-time rules matching launch arguments to kernel parameters (kernels/kernel_arguments.hpp):
// spans become device pointers, scalars pass unchanged, and KernelArgumentTraits admits a user's own types.
// What does not compile is in tests/compile_fail/ (read_only_span_for_writable_parameter, wrong_scalar_type, ...).
#include <doctest/doctest.h>

#include <lazygraph/kernels.hpp>

#include <cstdint>

using namespace lazygraph;

namespace {
struct Strided {
  DeviceSpan<float> span;
};
}  // namespace

template <>
struct lazygraph::KernelArgumentTraits<float*, Strided> {
  static float* convert(const Strided& s) { return s.span.data() + 1; }
};

static_assert(detail::is_device_span_v<DeviceSpan<float>> && detail::is_device_span_v<DeviceSpan<const float>>);
static_assert(!detail::is_device_span_v<float*> && !detail::is_device_span_v<Strided>);
static_assert(detail::HasCustomArgumentTraits<float*, Strided> && !detail::HasCustomArgumentTraits<float*, int>);

// The checks that name a broken rule's argument (kernel argument N) accept what the rules allow; what they refuse
// is in tests/compile_fail/ with the diagnostics naming the argument and both types.
template <int N, class Param, class Arg>
constexpr bool accepted =
    detail::KernelArgument<N>::template ForParameterType<Param>::template GivenType<Arg>::accepted;
static_assert(accepted<1, float*, DeviceSpan<float>> && accepted<2, const float*, DeviceSpan<float>> &&
              accepted<3, const float*, DeviceSpan<const float>> && accepted<4, int, int> &&
              accepted<5, float*, Strided>);

TEST_CASE("kernel arguments: spans become device pointers, scalars pass unchanged") {
  const DeviceSpan<float> w(0x1000, 4);
  const DeviceSpan<const float> r(0x2000, 4);
  CHECK(detail::convert_argument<float*, 1>(w) == reinterpret_cast<float*>(0x1000));
  CHECK(detail::convert_argument<const float*, 1>(w) == reinterpret_cast<const float*>(0x1000));
  CHECK(detail::convert_argument<const float*, 1>(r) == reinterpret_cast<const float*>(0x2000));
  CHECK(detail::convert_argument<int, 1>(7) == 7);
  CHECK(detail::convert_argument<float, 1>(2.5F) == 2.5F);
}

TEST_CASE("KernelArgumentTraits lets a user pass their own argument type") {
  const Strided s{DeviceSpan<float>(0x1000, 4)};
  CHECK(detail::convert_argument<float*, 1>(s) == reinterpret_cast<float*>(0x1000) + 1);
}

TEST_CASE("convert_argument works at compile time and keeps a span's offset and every scalar bit") {
  constexpr std::uint64_t big = 0x8000'0000'0000'0001ULL;
  static_assert(detail::convert_argument<std::uint64_t, 1>(big) == big);
  static_assert(detail::convert_argument<double, 1>(-0.1) == -0.1);
  const DeviceSpan<float> whole(0x10000, 64);
  CHECK(detail::convert_argument<const float*, 1>(whole.subspan(5, 10)) == reinterpret_cast<const float*>(0x10000) + 5);
  CHECK(detail::convert_argument<float*, 1>(whole.subspan(63, 1)) == reinterpret_cast<float*>(0x10000) + 63);
  const half h = half::from_float(-3.5F);
  CHECK(detail::convert_argument<half, 1>(h).bits == h.bits);
}
