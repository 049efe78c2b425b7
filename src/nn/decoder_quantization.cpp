#include "lazygraph/nn/decoder_quantization.hpp"

#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <utility>

namespace lazygraph::nn {

namespace {

std::string_view scale_type_text(ScaleType t) { return t == ScaleType::f16 ? "fp16" : "bf16"; }

/// Checks every tensor `quantization` quantizes under its own name (QuantizedLayout's checks and, when `scales` is
/// given, the scale type), in decoder_tensors() order.
void check_each(const std::vector<DecoderTensor>& tensors, const DecoderQuantization& quantization,
                const std::optional<ScaleType>& scales) {
  for (const DecoderTensor& t : tensors) {
    const std::optional<QuantizedFormat> format = quantization.format_of(t.role);
    if (!format) continue;
    if (scales && format->scale_type != *scales) {
      throw UsageError("tensor " + t.name + ": " + format_name(*format) + ", but a decoder over " +
                       std::string(scale_type_text(*scales)) + " reads " + std::string(scale_type_text(*scales)) +
                       " scales (QuantizedFormat::scale_type)");
    }
    (void)QuantizedLayout(t.name, *format, t.rows, t.cols);
  }
}

/// The layouts of the quantized matrices, one per stack of tensors (stacked_with_next): the stacked q, k and v, a
/// layer's experts of one kind, or a tensor alone, each named as the decoder holds it. A stacked expert is whole tiles
/// of 16 rows, as the expert kernels need, whenever check_each passed: its rows (expert_width, or d for the down
/// projection) are the input dimension of another expert matrix, which every format needs to be a multiple of 32.
std::vector<QuantizedLayout> layouts_of(const std::vector<DecoderTensor>& tensors,
                                        const DecoderQuantization& quantization) {
  std::vector<QuantizedLayout> out;
  int rows = 0;
  const DecoderTensor* first = nullptr;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const DecoderTensor& t = tensors[i];
    const std::optional<QuantizedFormat> format = quantization.format_of(t.role);
    if (!format) continue;
    if (first == nullptr) first = &t;
    rows += t.rows;
    if (stacked_with_next(tensors, i)) continue;
    const DecoderTensorRole role = first->role;
    const bool experts =
        role == DecoderTensorRole::moe_w1 || role == DecoderTensorRole::moe_w3 || role == DecoderTensorRole::moe_w2;
    const std::string name = role == DecoderTensorRole::wq ? stacked_qkv_name(first->name)
                             : experts                     ? stacked_experts_name(first->name)
                                                           : first->name;
    out.emplace_back(name, *format, rows, t.cols);
    rows = 0;
    first = nullptr;
  }
  return out;
}

}  // namespace

std::vector<QuantizedLayout> quantized_layouts(const DecoderConfig& config, const DecoderQuantization& quantization) {
  const std::vector<DecoderTensor> tensors = decoder_tensors(config);
  check_each(tensors, quantization, std::nullopt);
  return layouts_of(tensors, quantization);
}

void check_quantization(const DecoderConfig& config, const DecoderQuantization& quantization, ScaleType scales) {
  const std::vector<DecoderTensor> tensors = decoder_tensors(config);
  check_each(tensors, quantization, scales);
}

std::size_t decoder_device_bytes(const DecoderConfig& config, const DecoderQuantization& quantization) {
  const std::vector<DecoderTensor> tensors = decoder_tensors(config);
  check_each(tensors, quantization, std::nullopt);
  std::size_t bytes = 0;
  for (const DecoderTensor& t : tensors) {
    if (!quantization.format_of(t.role)) bytes += t.elements() * 2;  // fp16 and bf16 alike
  }
  for (const QuantizedLayout& l : layouts_of(tensors, quantization)) bytes += l.bytes();
  return bytes;
}

namespace {

/// Throws unless `w` is a dense [rows x cols] matrix, naming it `name`.
template <Element T>
void check_dense(const Weight<T>& w, int rows, int cols, const std::string& name) {
  if (!w.is_dense()) throw UsageError("quantize_decoder_weights: " + name + " is quantized already");
  if (w.rows() != rows || w.cols() != cols) {
    throw UsageError("quantize_decoder_weights: weight " + name + " has " +
                     std::to_string(static_cast<std::size_t>(w.rows()) * static_cast<std::size_t>(w.cols())) +
                     " dense elements, the config needs " +
                     std::to_string(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols)));
  }
}

/// The matrices of `weights` that `quantization` quantizes, in quantized_layouts() order: per layer the stacked q, k
/// and v and Wo (attention), W1, W3 and W2 (MLP; a mixture of experts' stacked experts' instead), then the LM head.
template <Element T>
std::vector<Weight<T>*> chosen_matrices(BasicDecoderWeights<T>& weights, const DecoderQuantization& quantization) {
  std::vector<Weight<T>*> out;
  for (std::size_t l = 0; l < weights.attention.size() && l < weights.mlp.size(); ++l) {
    if (quantization.attention) out.insert(out.end(), {&weights.attention[l].qkv, &weights.attention[l].wo});
    if (quantization.mlp && l < weights.moe.size()) {
      out.insert(out.end(), {&weights.moe[l].w1, &weights.moe[l].w3, &weights.moe[l].w2});
    } else if (quantization.mlp) {
      out.insert(out.end(), {&weights.mlp[l].w1, &weights.mlp[l].w3, &weights.mlp[l].w2});
    }
  }
  if (quantization.lm_head) out.push_back(&weights.lm_head);
  return out;
}

/// quantize_decoder_weights on the host (`quantizer` null) or on the device.
template <Element T>
BasicDecoderWeights<T> quantize_weights(const Stream& stream, const DeviceQuantizer* quantizer,
                                        BasicDecoderWeights<T> weights, const DecoderConfig& config,
                                        const DecoderQuantization& quantization) {
  const std::vector<DecoderTensor> tensors = decoder_tensors(config);
  check_each(tensors, quantization, scale_type_of<T>);
  if (weights.attention.size() != static_cast<std::size_t>(config.layers) ||
      weights.mlp.size() != weights.attention.size()) {
    throw UsageError("quantize_decoder_weights: the weights have " + std::to_string(weights.attention.size()) +
                     " layers, the config " + std::to_string(config.layers));
  }
  // Every chosen matrix must be dense and of its shape before any GPU work.
  const std::vector<QuantizedLayout> layouts = layouts_of(tensors, quantization);
  const std::vector<Weight<T>*> chosen = chosen_matrices(weights, quantization);
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    check_dense(*chosen[i], layouts[i].rows(), layouts[i].cols(), layouts[i].name());
  }
  // Each chosen matrix quantized, on the device or downloaded and quantized on the host and uploaded, its dense
  // memory freed with its Weight (unless another copy still shares it).
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    const QuantizedLayout& layout = layouts[i];
    const DeviceSpan<const T> dense = chosen[i]->dense();
    if (quantizer != nullptr) {
      *chosen[i] = Weight<T>(quantizer->template quantize<T, T>(stream, layout.format(), layout.name(), layout.rows(),
                                                                layout.cols(), dense, quantization.options));
      continue;
    }
    std::vector<T> host(dense.size());
    copy_async(stream, std::span<T>(host), dense);
    stream.synchronize();
    std::vector<float> values;
    values.reserve(host.size());
    for (const T v : host) values.push_back(v.to_float());
    *chosen[i] = Weight<T>(DeviceQuantizedWeight<T>(
        stream, quantize(layout.format(), layout.name(), layout.rows(), layout.cols(), values, quantization.options)));
  }
  return weights;
}

}  // namespace

template <Element T>
BasicDecoderWeights<T> quantize_decoder_weights(const Stream& stream, BasicDecoderWeights<T> weights,
                                                const DecoderConfig& config, const DecoderQuantization& quantization) {
  return quantize_weights<T>(stream, nullptr, std::move(weights), config, quantization);
}

template <Element T>
BasicDecoderWeights<T> quantize_decoder_weights(const Stream& stream, const DeviceQuantizer& quantizer,
                                                BasicDecoderWeights<T> weights, const DecoderConfig& config,
                                                const DecoderQuantization& quantization) {
  return quantize_weights<T>(stream, &quantizer, std::move(weights), config, quantization);
}

template <Element T>
void adopt_quantized(const Stream& stream, BasicDecoderWeights<T>& weights, const DecoderConfig& config,
                     const DecoderQuantization& quantization, std::vector<DeviceQuantizedWeight<T>> matrices) {
  (void)stream;
  const std::vector<QuantizedLayout> layouts = quantized_layouts(config, quantization);
  if (matrices.size() != layouts.size() || weights.attention.size() != static_cast<std::size_t>(config.layers) ||
      weights.mlp.size() != weights.attention.size()) {
    throw UsageError("adopt_quantized: " + std::to_string(matrices.size()) + " matrices for " +
                     std::to_string(layouts.size()) + " quantized ones and " +
                     std::to_string(weights.attention.size()) + " layers for " + std::to_string(config.layers));
  }
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    const QuantizedLayout& want = layouts[i];
    const QuantizedLayout& got = matrices[i].layout();
    if (got.rows() != want.rows() || got.cols() != want.cols() || !(got.format() == want.format())) {
      throw UsageError("adopt_quantized: matrix " + std::to_string(i) + " (" + got.name() + ", " +
                       std::to_string(got.rows()) + " x " + std::to_string(got.cols()) + ", " +
                       format_name(got.format()) + ") is not " + want.name() + " (" + std::to_string(want.rows()) +
                       " x " + std::to_string(want.cols()) + ", " + format_name(want.format()) + ")");
    }
  }
  const std::vector<Weight<T>*> chosen = chosen_matrices(weights, quantization);
  for (std::size_t i = 0; i < chosen.size(); ++i) *chosen[i] = Weight<T>(std::move(matrices[i]));
}

template <Element T>
DecoderQuantization quantization_of(const BasicDecoderWeights<T>& weights) {
  DecoderQuantization out;
  // One class's format, checked the same in every layer: `of(l)` is layer l's format, or none.
  const auto each_layer = [&](std::string_view name, const auto& of) {
    std::optional<QuantizedFormat> first;
    for (std::size_t l = 0; l < weights.attention.size(); ++l) {
      const std::optional<QuantizedFormat> f = of(l);
      if (l == 0) first = f;
      if (f.has_value() != first.has_value() || (f && !(*f == *first))) {
        const auto text = [](const std::optional<QuantizedFormat>& q) { return q ? format_name(*q) : "dense"; };
        throw UsageError("quantization_of: layer " + std::to_string(l) + "'s " + std::string(name) + " is " + text(f) +
                         ", layer 0's " + text(first) + ": a class is quantized alike in every layer");
      }
    }
    return first;
  };
  const auto format = [](const Weight<T>& w) {
    return w.is_dense() ? std::nullopt : std::optional<QuantizedFormat>(w.quantized().layout().format());
  };
  out.attention = each_layer("attention", [&](std::size_t l) {
    const BasicAttentionWeights<T>& a = weights.attention[l];
    const std::optional<QuantizedFormat> qkv = format(a.qkv);
    if (qkv != format(a.wo)) {
      throw UsageError("quantization_of: layer " + std::to_string(l) +
                       "'s q, k and v and its Wo are not quantized alike (one class)");
    }
    return qkv;
  });
  out.mlp = each_layer("MLP", [&](std::size_t l) {
    const bool experts = l < weights.moe.size();
    const Weight<T>& m1 = experts ? weights.moe[l].w1 : weights.mlp[l].w1;
    const Weight<T>& m3 = experts ? weights.moe[l].w3 : weights.mlp[l].w3;
    const Weight<T>& m2 = experts ? weights.moe[l].w2 : weights.mlp[l].w2;
    const std::optional<QuantizedFormat> w1 = format(m1);
    if (w1 != format(m3) || w1 != format(m2)) {
      throw UsageError("quantization_of: layer " + std::to_string(l) +
                       "'s W1, W3 and W2 are not quantized alike (one class)");
    }
    return w1;
  });
  out.lm_head = format(weights.lm_head);
  return out;
}

template DecoderQuantization quantization_of(const BasicDecoderWeights<half>&);
template DecoderQuantization quantization_of(const BasicDecoderWeights<bfloat16>&);
template BasicDecoderWeights<half> quantize_decoder_weights(const Stream&, BasicDecoderWeights<half>,
                                                            const DecoderConfig&, const DecoderQuantization&);
template BasicDecoderWeights<bfloat16> quantize_decoder_weights(const Stream&, BasicDecoderWeights<bfloat16>,
                                                                const DecoderConfig&, const DecoderQuantization&);
template BasicDecoderWeights<half> quantize_decoder_weights(const Stream&, const DeviceQuantizer&,
                                                            BasicDecoderWeights<half>, const DecoderConfig&,
                                                            const DecoderQuantization&);
template BasicDecoderWeights<bfloat16> quantize_decoder_weights(const Stream&, const DeviceQuantizer&,
                                                                BasicDecoderWeights<bfloat16>, const DecoderConfig&,
                                                                const DecoderQuantization&);
template void adopt_quantized(const Stream&, BasicDecoderWeights<half>&, const DecoderConfig&,
                              const DecoderQuantization&, std::vector<DeviceQuantizedWeight<half>>);
template void adopt_quantized(const Stream&, BasicDecoderWeights<bfloat16>&, const DecoderConfig&,
                              const DecoderQuantization&, std::vector<DeviceQuantizedWeight<bfloat16>>);

}  // namespace lazygraph::nn
