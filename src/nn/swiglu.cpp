#include "lazygraph/nn/swiglu.hpp"

#include "lazygraph/nn/random_weights.hpp"

namespace lazygraph::nn {

template <Element T>
BasicSwigluWeights<T> generate_swiglu_weights(const Stream& stream, const BasicKernels<T>& kernels, std::uint32_t seed,
                                              int layer, int d, int ffn) {
  const auto id = [&](std::uint32_t slot) { return 16U * static_cast<std::uint32_t>(layer) + slot; };
  const auto matrix = [&](std::uint32_t slot, int rows, int cols) {
    return Weight<T>(device_tensor(stream, kernels.fill_uniform, seed, matrix_spec(id(slot), rows, cols)), rows, cols);
  };
  return {device_tensor(stream, kernels.fill_uniform, seed, gain_spec(id(6), d)), matrix(7, ffn, d), matrix(8, ffn, d),
          matrix(9, d, ffn), DeviceBuffer<T>(stream.device(), 0)};
}

template BasicSwigluWeights<half> generate_swiglu_weights(const Stream&, const BasicKernels<half>&, std::uint32_t, int,
                                                          int, int);
template BasicSwigluWeights<bfloat16> generate_swiglu_weights(const Stream&, const BasicKernels<bfloat16>&,
                                                              std::uint32_t, int, int, int);

}  // namespace lazygraph::nn
