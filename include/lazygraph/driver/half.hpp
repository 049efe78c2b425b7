#pragma once
/// \file
/// `half`: IEEE 754 binary16 as host-side storage, the element type of fp16 device buffers.
///
/// It does no arithmetic: convert to float, compute, convert back. A kernel parameter declared
/// `const lg::half_t*` in kernels/ (see kernels/include/lazygraph/half.cuh) is `const half*` in the host
/// signature, so `Kernel<void(const half*, half*, int)>` takes `DeviceSpan<const half>` / `DeviceSpan<half>`.
/// Conversions are exact in software (no F16C instructions assumed) and constexpr.

#include <bit>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

namespace lazygraph {

/// An IEEE 754 binary16 value, stored as its 16 bits: the host-side element type of fp16 buffers, converted to
/// and from float only (no arithmetic).
struct half {          // NOLINT(readability-identifier-naming): named like CUDA's half, which it stands for
  std::uint16_t bits;  ///< sign (1), exponent (5, bias 15), mantissa (10)

  /// The nearest half to `f`, ties to even; values from 65520 up become infinity; values below the smallest
  /// subnormal round to (signed) zero or to it. Any NaN becomes a quiet NaN of the same sign (0x7e00 | sign):
  /// the payload is not kept.
  [[nodiscard]] static constexpr half from_float(float f) noexcept {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
    const auto sign = static_cast<std::uint16_t>((x >> 16U) & 0x8000U);
    const std::uint32_t magnitude = x & 0x7fffffffU;
    if (magnitude > 0x7f800000U) return {static_cast<std::uint16_t>(sign | 0x7e00U)};   // NaN
    if (magnitude >= 0x477ff000U) return {static_cast<std::uint16_t>(sign | 0x7c00U)};  // >= 65520: infinity
    if (magnitude >= 0x38800000U) {  // normal half (>= 2^-14): rebias the exponent, round the mantissa
      std::uint32_t h = (magnitude - 0x38000000U) >> 13U;
      const std::uint32_t rest = magnitude & 0x1fffU;
      if (rest > 0x1000U || (rest == 0x1000U && (h & 1U) != 0)) ++h;  // a carry into the exponent is right
      return {static_cast<std::uint16_t>(sign | h)};
    }
    if (magnitude < 0x33000000U) return {sign};  // below 2^-25 (half the smallest subnormal): zero
    // Subnormal half: the value in units of 2^-24, rounded. The float is normal here (>= 2^-25).
    const std::uint32_t mantissa = (magnitude & 0x7fffffU) | 0x800000U;
    const std::uint32_t shift = 126U - (magnitude >> 23U);  // 14..24
    std::uint32_t h = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1U << shift) - 1U);
    const std::uint32_t halfway = 1U << (shift - 1U);
    if (rest > halfway || (rest == halfway && (h & 1U) != 0)) ++h;  // may reach 0x400, the smallest normal
    return {static_cast<std::uint16_t>(sign | h)};
  }

  /// The exact float value (every half is a float); NaN stays NaN with its payload.
  [[nodiscard]] constexpr float to_float() const noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000U) << 16U;
    const std::uint32_t exponent = (bits >> 10U) & 0x1fU;
    const std::uint32_t mantissa = bits & 0x3ffU;
    if (exponent == 0x1fU) return std::bit_cast<float>(sign | 0x7f800000U | (mantissa << 13U));
    if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112U) << 23U) | (mantissa << 13U));
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24F;  // zero or subnormal, exact
    return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(magnitude));
  }
};

static_assert(sizeof(half) == 2 && alignof(half) == 2 && std::is_trivially_copyable_v<half>,
              "half must be the 2-byte storage that device kernels see as lg::half_t");

/// Each float rounded to half (half::from_float).
[[nodiscard]] inline std::vector<half> to_half(std::span<const float> values) {
  std::vector<half> out;
  out.reserve(values.size());
  for (const float v : values) out.push_back(half::from_float(v));
  return out;
}

/// Each half as float (exact).
[[nodiscard]] inline std::vector<float> to_float(std::span<const half> values) {
  std::vector<float> out;
  out.reserve(values.size());
  for (const half v : values) out.push_back(v.to_float());
  return out;
}

}  // namespace lazygraph
