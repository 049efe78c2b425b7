#include "lazygraph/nn/random_weights.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace lazygraph::nn {

TensorSpec matrix_spec(std::uint32_t id, int rows, int cols) {
  return {id, static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols),
          static_cast<float>(1.0 / std::sqrt(static_cast<double>(cols))), 0.0F};
}

TensorSpec gain_spec(std::uint32_t id, int size) { return {id, static_cast<std::size_t>(size), 0.125F, 1.0F}; }

template <Element T>
std::vector<T> host_tensor(std::uint32_t seed, const TensorSpec& spec) {
  const std::uint32_t key = tensor_key(seed, spec.id);
  std::vector<T> out(spec.size);
  for (std::size_t i = 0; i < spec.size; ++i) {
    // Two separately rounded float operations, as on the GPU (volatile keeps the compiler from fusing them).
    volatile float scaled = spec.scale * uniform(key, i);
    out[i] = T::from_float(spec.offset + scaled);
  }
  return out;
}

template <Element T>
std::vector<double> host_tensor_f64(std::uint32_t seed, const TensorSpec& spec) {
  const std::vector<T> h = host_tensor<T>(seed, spec);
  std::vector<double> out(h.size());
  std::transform(h.begin(), h.end(), out.begin(), [](T v) { return static_cast<double>(v.to_float()); });
  return out;
}

template <Element T>
void fill_tensor(const Stream& stream, const FillUniformKernel<T>& fill, std::uint32_t seed, const TensorSpec& spec,
                 DeviceSpan<T> into) {
  if (into.size() != spec.size) {
    throw UsageError("fill_tensor: tensor " + std::to_string(spec.id) + " has " + std::to_string(spec.size) +
                     " elements, the span to fill " + std::to_string(into.size()));
  }
  const LaunchConfig cfg{
      {static_cast<unsigned>(std::clamp<std::size_t>((spec.size + 255) / 256, 1, 8192)), 1, 1}, {256, 1, 1}, 0};
  fill(cfg, into, static_cast<long long>(spec.size), tensor_key(seed, spec.id), spec.scale, spec.offset)
      .sync_on(stream);
}

template <Element T>
DeviceBuffer<T> device_tensor(const Stream& stream, const FillUniformKernel<T>& fill, std::uint32_t seed,
                              const TensorSpec& spec) {
  DeviceBuffer<T> out(stream.device(), spec.size);
  fill_tensor(stream, fill, seed, spec, out.view());
  return out;
}

template std::vector<half> host_tensor<half>(std::uint32_t, const TensorSpec&);
template std::vector<bfloat16> host_tensor<bfloat16>(std::uint32_t, const TensorSpec&);
template std::vector<double> host_tensor_f64<half>(std::uint32_t, const TensorSpec&);
template std::vector<double> host_tensor_f64<bfloat16>(std::uint32_t, const TensorSpec&);
template void fill_tensor<half>(const Stream&, const FillUniformKernel<half>&, std::uint32_t, const TensorSpec&,
                                DeviceSpan<half>);
template void fill_tensor<bfloat16>(const Stream&, const FillUniformKernel<bfloat16>&, std::uint32_t, const TensorSpec&,
                                    DeviceSpan<bfloat16>);
template DeviceBuffer<half> device_tensor<half>(const Stream&, const FillUniformKernel<half>&, std::uint32_t,
                                                const TensorSpec&);
template DeviceBuffer<bfloat16> device_tensor<bfloat16>(const Stream&, const FillUniformKernel<bfloat16>&,
                                                        std::uint32_t, const TensorSpec&);

}  // namespace lazygraph::nn
