#include "lazygraph/nn/mlp.hpp"

#include <string>

#include "lazygraph/nn/random_weights.hpp"

namespace lazygraph::nn {

void MlpConfig::validate() const {
  if (d <= 0 || d % 8 != 0 || ffn <= 0 || ffn % 8 != 0 || layers < 1) {
    throw UsageError("MlpConfig: d (" + std::to_string(d) + ") and ffn (" + std::to_string(ffn) +
                     ") must be positive multiples of 8 and layers (" + std::to_string(layers) + ") at least 1");
  }
}

std::size_t MlpConfig::weight_bytes() const {
  const auto per_layer = 3 * static_cast<std::size_t>(d) * static_cast<std::size_t>(ffn) + static_cast<std::size_t>(d);
  return per_layer * static_cast<std::size_t>(layers) * sizeof(half);
}

namespace {

template <Element T>
std::vector<BasicSwigluWeights<T>> generate_layers(const Stream& stream, const BasicKernels<T>& kernels,
                                                   const MlpConfig& config) {
  config.validate();
  std::vector<BasicSwigluWeights<T>> layers;
  layers.reserve(static_cast<std::size_t>(config.layers));
  for (int l = 0; l < config.layers; ++l) {
    layers.push_back(generate_swiglu_weights(stream, kernels, config.seed, l, config.d, config.ffn));
  }
  return layers;
}

}  // namespace

template <Element T>
BasicMlp<T>::BasicMlp(const Stream& stream, const KernelLibrary& library, const MlpConfig& config)
    : config_(config),
      kernels_(library, {.early_launch = config.early_launch, .tensor_cores = config.tensor_cores}),
      layers_(generate_layers(stream, kernels_, config_)),
      act_(stream.device(), static_cast<std::size_t>(config_.ffn)),
      stack_(stream, kernels_, layers_, config_.d, config_.ffn, config_.eps, config_.split),
      module_(stream, HostIo<T, T>(library, static_cast<std::size_t>(config_.d), static_cast<std::size_t>(config_.d)),
              // Kept by the module (forward_resident records it again): it holds what it reads by value, so that it
              // outlives a move of this Mlp (the layers' storage moves with the vector, unchanged).
              [k = kernels_, layers = std::span<const BasicSwigluWeights<T>>(layers_), c = config_, act = act_.view(),
               stack = stack_](Scope& s, DeviceSpan<const T> in, DeviceSpan<T> out) {
                if (c.persistent) {
                  s.record(copy(out, in) >> stack.op(out, act));
                } else {
                  s.record(mlp_forward(k, layers, c, std::move(in), std::move(out), act));
                }
              }) {}

template class BasicMlp<half>;
template class BasicMlp<bfloat16>;

}  // namespace lazygraph::nn
