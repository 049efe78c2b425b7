#pragma once
/// \file
/// bfloat16 <-> float conversions on the host, for reading and writing BF16 checkpoint tensors.
///
/// A bfloat16 is the top 16 bits of an IEEE 754 binary32: sign, 8 exponent bits, 7 mantissa bits. The values are
/// carried as raw `std::uint16_t` bits; there is no arithmetic here.

#include <bit>
#include <cstdint>

namespace lazygraph::nn {

/// The exact float value of the bfloat16 `bits` (every bfloat16 is a float); NaN stays NaN with its payload.
[[nodiscard]] constexpr float bf16_to_float(std::uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16U);
}

/// The nearest bfloat16 to `f`, ties to even. Finite values past the largest bfloat16 round to infinity, as IEEE
/// rounding says. Any NaN stays a NaN of the same sign: the top 7 payload bits are kept and the quiet bit is set,
/// so a NaN whose payload lies only in the low 16 bits does not become infinity.
[[nodiscard]] constexpr std::uint16_t float_to_bf16(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffU) > 0x7f800000U) return static_cast<std::uint16_t>((x >> 16U) | 0x0040U);  // NaN
  const std::uint32_t lsb = (x >> 16U) & 1U;
  return static_cast<std::uint16_t>((x + 0x7fffU + lsb) >> 16U);  // ties to even; cannot overflow 32 bits
}

}  // namespace lazygraph::nn
