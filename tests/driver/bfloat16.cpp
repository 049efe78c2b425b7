#include <doctest/doctest.h>

#include <lazygraph/driver.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

using lazygraph::bfloat16;

namespace {

std::uint16_t bits_of(float f) { return bfloat16::from_float(f).bits; }

}  // namespace

static_assert(bfloat16::from_float(1.0F).bits == 0x3f80);
static_assert(bfloat16{0xc000}.to_float() == -2.0F);

TEST_CASE("bfloat16 rounds to nearest even, keeps NaN, and is exact for every bfloat16 value") {
  CHECK(bits_of(1.0F) == 0x3f80);
  CHECK(bits_of(-2.0F) == 0xc000);
  CHECK(bits_of(1.0F + 0x1p-8F) == 0x3f80);                     // halfway, even stays
  CHECK(bits_of(1.0F + 3 * 0x1p-8F) == 0x3f82);                 // halfway, rounds up to even
  CHECK(bits_of(1.0F + 0x1p-8F + 0x1p-20F) == 0x3f81);          // just above halfway
  CHECK(bits_of(std::numeric_limits<float>::max()) == 0x7f80);  // rounds to infinity
  CHECK(bits_of(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(std::isnan(bfloat16::from_float(std::bit_cast<float>(0x7f800001U)).to_float()));  // payload only in low bits
  CHECK(bits_of(std::bit_cast<float>(0xffc00000U)) == 0xffc0);                            // sign kept
  int mismatches = 0;
  for (std::uint32_t bits = 0; bits <= 0xffffU; ++bits) {
    const bfloat16 b{static_cast<std::uint16_t>(bits)};
    const float f = b.to_float();
    if (std::isnan(f) ? !std::isnan(bfloat16::from_float(f).to_float()) : bits_of(f) != b.bits) ++mismatches;
  }
  CHECK(mismatches == 0);
}
