#pragma once
/// \file
/// Deterministic model weights: every element is a function of (seed, tensor id, index), computed the same
/// way on the CPU (for the float64 references), on the GPU (kernels `fill_uniform_f16` and `fill_uniform_bf16`) and in
/// PyTorch, rounded to fp16 or bf16. The
/// formula and the table of tensor ids are in docs/nn.md.

#include <lazygraph/lazygraph.hpp>

#include "lazygraph/nn/element.hpp"

#include <cstdint>
#include <vector>

namespace lazygraph::nn {

/// The 32-bit integer hash of docs/nn.md.
constexpr std::uint32_t mix(std::uint32_t x) noexcept {
  x ^= x >> 16U;
  x *= 0x7feb352dU;
  x ^= x >> 15U;
  x *= 0x846ca68bU;
  x ^= x >> 16U;
  return x;
}

/// The key of tensor `tensor` under `seed`: mix(seed ^ mix(tensor)).
constexpr std::uint32_t tensor_key(std::uint32_t seed, std::uint32_t tensor) noexcept {
  return mix(seed ^ mix(tensor));
}

/// u(i), uniform over [-1, 1), exactly as the GPU kernel computes it.
inline float uniform(std::uint32_t key, std::uint64_t index) noexcept {
  const std::uint32_t h = mix(key + static_cast<std::uint32_t>(index));
  return static_cast<float>(h >> 8U) * (1.0F / 8388608.0F) - 1.0F;
}

/// What to generate for one tensor: element = round(offset + scale * u(i)), to the element type.
struct TensorSpec {
  std::uint32_t id = 0;  ///< the tensor id of docs/nn.md
  std::size_t size = 0;  ///< elements
  float scale = 1.0F;    ///< multiplies u(i)
  float offset = 0.0F;   ///< added after scaling
};

/// A weight matrix with `cols` inputs: scale 1/sqrt(cols), computed in float64 and rounded once.
TensorSpec matrix_spec(std::uint32_t id, int rows, int cols);
/// A norm gain: 1 + u/8.
TensorSpec gain_spec(std::uint32_t id, int size);

/// The tensor's elements on the host, rounded to T (fp16 by default).
template <Element T = half>
std::vector<T> host_tensor(std::uint32_t seed, const TensorSpec& spec);
/// The same elements as doubles (what the float64 references compute with).
template <Element T = half>
std::vector<double> host_tensor_f64(std::uint32_t seed, const TensorSpec& spec);

/// Kernel handle for fill_uniform_f16 (T = half) or fill_uniform_bf16.
template <Element T>
using FillUniformKernel = Kernel<void(T*, long long, unsigned, float, float)>;

/// A device buffer holding the tensor, generated on the GPU (eagerly: it allocates) and bit-identical to
/// host_tensor<T>. Waits for the fill before returning.
template <Element T>
DeviceBuffer<T> device_tensor(const Stream& stream, const FillUniformKernel<T>& fill, std::uint32_t seed,
                              const TensorSpec& spec);

/// device_tensor into memory the caller holds: generates the tensor into `into` (e.g. its rows of a larger buffer),
/// eagerly, and waits for the fill. \throws UsageError when `into` does not hold exactly spec.size elements.
template <Element T>
void fill_tensor(const Stream& stream, const FillUniformKernel<T>& fill, std::uint32_t seed, const TensorSpec& spec,
                 DeviceSpan<T> into);

}  // namespace lazygraph::nn
