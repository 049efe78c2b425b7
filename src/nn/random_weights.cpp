#include "lazygraph/nn/random_weights.hpp"

#include <algorithm>
#include <cmath>

namespace lazygraph::nn {

TensorSpec matrix_spec(std::uint32_t id, int rows, int cols) {
  return {id, static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols),
          static_cast<float>(1.0 / std::sqrt(static_cast<double>(cols))), 0.0F};
}

TensorSpec gain_spec(std::uint32_t id, int size) { return {id, static_cast<std::size_t>(size), 0.125F, 1.0F}; }

std::vector<half> host_tensor(std::uint32_t seed, const TensorSpec& spec) {
  const std::uint32_t key = tensor_key(seed, spec.id);
  std::vector<half> out(spec.size);
  for (std::size_t i = 0; i < spec.size; ++i) {
    // Two separately rounded float operations, as on the GPU (volatile keeps the compiler from fusing them).
    volatile float scaled = spec.scale * uniform(key, i);
    out[i] = half::from_float(spec.offset + scaled);
  }
  return out;
}

std::vector<double> host_tensor_f64(std::uint32_t seed, const TensorSpec& spec) {
  const std::vector<half> h = host_tensor(seed, spec);
  std::vector<double> out(h.size());
  std::transform(h.begin(), h.end(), out.begin(), [](half v) { return static_cast<double>(v.to_float()); });
  return out;
}

DeviceBuffer<half> device_tensor(const Stream& stream, const FillUniformKernel& fill, std::uint32_t seed,
                                 const TensorSpec& spec) {
  DeviceBuffer<half> out(stream.device(), spec.size);
  const LaunchConfig cfg{
      {static_cast<unsigned>(std::clamp<std::size_t>((spec.size + 255) / 256, 1, 8192)), 1, 1}, {256, 1, 1}, 0};
  fill(cfg, out.view(), static_cast<long long>(spec.size), tensor_key(seed, spec.id), spec.scale, spec.offset)
      .sync_on(stream);
  return out;
}

}  // namespace lazygraph::nn
