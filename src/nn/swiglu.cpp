#include "lazygraph/nn/swiglu.hpp"

#include "lazygraph/nn/random_weights.hpp"

namespace lazygraph::nn {

template <Element T>
BasicSwigluWeights<T> generate_swiglu_weights(const Stream& stream, const BasicKernels<T>& kernels, std::uint32_t seed,
                                              int layer, int d, int ffn) {
  const auto id = [&](std::uint32_t slot) { return 16U * static_cast<std::uint32_t>(layer) + slot; };
  return {device_tensor(stream, kernels.fill_uniform, seed, gain_spec(id(6), d)),
          device_tensor(stream, kernels.fill_uniform, seed, matrix_spec(id(7), ffn, d)),
          device_tensor(stream, kernels.fill_uniform, seed, matrix_spec(id(8), ffn, d)),
          device_tensor(stream, kernels.fill_uniform, seed, matrix_spec(id(9), d, ffn))};
}

template BasicSwigluWeights<half> generate_swiglu_weights(const Stream&, const BasicKernels<half>&, std::uint32_t, int,
                                                          int, int);
template BasicSwigluWeights<bfloat16> generate_swiglu_weights(const Stream&, const BasicKernels<bfloat16>&,
                                                              std::uint32_t, int, int, int);

}  // namespace lazygraph::nn
