#include <doctest/doctest.h>

#include <lazygraph/driver.hpp>
#include <lazygraph/ops.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using lazygraph::half;

namespace {

std::uint16_t half_bits(float f) { return half::from_float(f).bits; }

}  // namespace

// The conversions are constexpr: a few facts hold at compile time too.
static_assert(half::from_float(1.0F).bits == 0x3c00);
static_assert(half{0xc000}.to_float() == -2.0F);

TEST_CASE("every finite half converts to float and back unchanged") {
  int checked = 0;
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const half h{static_cast<std::uint16_t>(b)};
    if ((b & 0x7c00U) == 0x7c00U) continue;  // infinities and NaNs: below
    const float f = h.to_float();
    CHECK_MESSAGE(half::from_float(f).bits == b, "bits 0x" << std::hex << b);
    ++checked;
  }
  CHECK(checked == 63488);  // 2^16 minus the 2048 patterns with an all-ones exponent
}

TEST_CASE("half values convert to the floats they name") {
  CHECK(half{0x3c00}.to_float() == 1.0F);
  CHECK(half{0x3555}.to_float() == 0.333251953125F);
  CHECK(half{0x7bff}.to_float() == 65504.0F);         // the largest half
  CHECK(half{0x0400}.to_float() == 0x1p-14F);         // the smallest normal
  CHECK(half{0x0001}.to_float() == 0x1p-24F);         // the smallest subnormal
  CHECK(half{0x03ff}.to_float() == 1023 * 0x1p-24F);  // the largest subnormal
  CHECK(std::signbit(half{0x8000}.to_float()));       // -0
  CHECK(half{0x8000}.to_float() == 0.0F);
}

TEST_CASE("conversion to half rounds to the nearest value, ties to even") {
  // Between 1 and 2 halves are 2^-10 apart.
  CHECK(half_bits(1.0F + 0x1p-11F) == 0x3c00);               // tie: down to the even 1.0
  CHECK(half_bits(1.0F + 3 * 0x1p-11F) == 0x3c02);           // tie: up to the even 1 + 2^-9
  CHECK(half_bits(1.0F + 0x1p-11F + 0x1p-20F) == 0x3c01);    // just above the tie: up
  CHECK(half_bits(1.0F + 0x1p-11F - 0x1p-20F) == 0x3c00);    // just below the tie: down
  CHECK(half_bits(-(1.0F + 3 * 0x1p-11F)) == 0xbc02);        // the sign does not change the rounding
  CHECK(half_bits(2047.0F / 1024.0F + 0x1p-11F) == 0x4000);  // the carry reaches the exponent: 2.0
  CHECK(half_bits(0.1F) == 0x2e66);
}

TEST_CASE("conversion to half overflows to infinity from 65520 up") {
  CHECK(half_bits(65504.0F) == 0x7bff);
  CHECK(half_bits(65519.996F) == 0x7bff);  // below the tie with 65536
  CHECK(half_bits(65520.0F) == 0x7c00);    // the tie rounds to even, which is infinity
  CHECK(half_bits(1e10F) == 0x7c00);
  CHECK(half_bits(-1e10F) == 0xfc00);
  CHECK(half_bits(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(half_bits(-std::numeric_limits<float>::infinity()) == 0xfc00);
  CHECK(std::isinf(half{0x7c00}.to_float()));
  CHECK(half{0xfc00}.to_float() < 0);
}

TEST_CASE("NaN converts to a quiet NaN both ways") {
  const std::uint16_t h = half_bits(std::numeric_limits<float>::quiet_NaN());
  CHECK((h & 0x7c00) == 0x7c00);
  CHECK((h & 0x03ff) != 0);
  CHECK(half_bits(-std::numeric_limits<float>::quiet_NaN()) == (h | 0x8000));
  CHECK(half_bits(std::numeric_limits<float>::signaling_NaN()) == h);  // quietened
  CHECK(std::isnan(half{0x7e00}.to_float()));
  CHECK(std::isnan(half{0x7c01}.to_float()));  // a signalling half NaN is still a NaN, not infinity
}

TEST_CASE("conversion to half rounds into and out of the subnormal range") {
  CHECK(half_bits(0x1p-24F) == 0x0001);
  CHECK(half_bits(0x1p-25F) == 0x0000);             // half the smallest subnormal: ties to zero
  CHECK(half_bits(0x1p-25F + 0x1p-40F) == 0x0001);  // just above: up
  CHECK(half_bits(3 * 0x1p-25F) == 0x0002);         // 1.5 units: tie, to the even 2
  CHECK(half_bits(5 * 0x1p-25F) == 0x0002);         // 2.5 units: tie, to the even 2
  CHECK(half_bits(1e-10F) == 0x0000);               // far below: zero
  CHECK(half_bits(-1e-10F) == 0x8000);              // keeps the sign
  CHECK(half_bits(0x1p-14F - 0x1p-25F) == 0x0400);  // the largest subnormal's tie: up to the smallest normal
  CHECK(half_bits(0x1p-14F - 0x1p-24F) == 0x03ff);  // exactly the largest subnormal
  CHECK(half_bits(std::numeric_limits<float>::denorm_min()) == 0x0000);
}

TEST_CASE("conversion to half is the nearest half for random floats") {
  // Brute force against the ordered list of all finite positive halves.
  std::vector<float> values;
  for (std::uint32_t b = 0; b < 0x7c00; ++b) values.push_back(half{static_cast<std::uint16_t>(b)}.to_float());
  std::uint32_t state = 12345;
  for (int n = 0; n < 20000; ++n) {
    state = state * 1664525U + 1013904223U;
    const float f = std::ldexp(static_cast<float>(state >> 8U) / 16777216.0F, static_cast<int>(state % 40) - 28);
    const std::uint16_t got = half_bits(f);
    REQUIRE(got < 0x7c00);
    const float h = values[got];
    const double error = std::abs(static_cast<double>(h) - f);
    // No other half is nearer (on a tie, the chosen one is even).
    if (got > 0) {
      const double previous = std::abs(static_cast<double>(values[got - 1U]) - f);
      CHECK(error <= previous);
      if (error == previous) CHECK((got & 1U) == 0);
    }
    if (got + 1U < values.size()) {
      const double next = std::abs(static_cast<double>(values[got + 1U]) - f);
      CHECK(error <= next);
      if (error == next) CHECK((got & 1U) == 0);
    }
  }
}

TEST_CASE("vector helpers convert element by element") {
  const std::vector<float> f{1.0F, -0.5F, 65504.0F, 0x1p-24F};
  const std::vector<half> h = lazygraph::to_half(f);
  REQUIRE(h.size() == 4);
  CHECK(h[0].bits == 0x3c00);
  CHECK(h[1].bits == 0xb800);
  CHECK(lazygraph::to_float(h) == f);
}
