#pragma once
/// \file
/// `bfloat16`: the top 16 bits of an IEEE 754 binary32 (sign, 8 exponent bits, 7 mantissa bits) as host-side
/// storage, the element type of bf16 device buffers.
///
/// Like `half`, it does no arithmetic: convert to float, compute, convert back. A kernel parameter declared
/// `const lg::bf16_t*` in kernels/ (kernels/include/lazygraph/bfloat16.cuh) is `const bfloat16*` in the host
/// signature. bfloat16 has float's range with 8 significant bits; half has 11 bits and a range to 65504.

#include <bit>
#include <cstdint>
#include <type_traits>

namespace lazygraph {

/// A bfloat16 value stored as its 16 bits: the host-side element type of bf16 buffers, converted to and from
/// float only (no arithmetic).
struct bfloat16 {      // NOLINT(readability-identifier-naming): named like the element type it stands for
  std::uint16_t bits;  ///< sign (1), exponent (8, bias 127), mantissa (7)

  /// The nearest bfloat16 to `f`, ties to even. Finite values past the largest bfloat16 round to infinity, as
  /// IEEE rounding says. Any NaN stays a NaN of the same sign: the top 7 payload bits are kept and the quiet bit is
  /// set, so a NaN whose payload lies only in the low 16 bits does not become infinity.
  [[nodiscard]] static constexpr bfloat16 from_float(float f) noexcept {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
    if ((x & 0x7fffffffU) > 0x7f800000U) return {static_cast<std::uint16_t>((x >> 16U) | 0x0040U)};  // NaN
    const std::uint32_t lsb = (x >> 16U) & 1U;
    return {static_cast<std::uint16_t>((x + 0x7fffU + lsb) >> 16U)};  // ties to even; cannot overflow 32 bits
  }

  /// The exact float value (every bfloat16 is a float); NaN stays NaN with its payload.
  [[nodiscard]] constexpr float to_float() const noexcept {
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16U);
  }
};

static_assert(sizeof(bfloat16) == 2 && alignof(bfloat16) == 2 && std::is_trivially_copyable_v<bfloat16>,
              "bfloat16 must be the 2-byte storage that device kernels see as lg::bf16_t");

}  // namespace lazygraph
