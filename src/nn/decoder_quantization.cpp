#include "lazygraph/nn/decoder_quantization.hpp"

#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <utility>

namespace lazygraph::nn {

namespace {

/// "model.layers.L.self_attn.qkv_proj.weight" from q_proj's name: the stacked matrix's name.
std::string stacked_qkv_name(const std::string& q_name) {
  std::string name = q_name;
  const std::size_t at = name.find("q_proj");
  return at == std::string::npos ? name + ".qkv" : name.replace(at, 1, "qkv");
}

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

std::vector<QuantizedLayout> layouts_of(const DecoderConfig& config, const std::vector<DecoderTensor>& tensors,
                                        const DecoderQuantization& quantization) {
  std::vector<QuantizedLayout> out;
  const int qkv_rows = config.q_dim() + 2 * config.kv_dim();
  for (const DecoderTensor& t : tensors) {
    const std::optional<QuantizedFormat> format = quantization.format_of(t.role);
    if (!format || t.role == DecoderTensorRole::wk || t.role == DecoderTensorRole::wv) continue;
    if (t.role == DecoderTensorRole::wq) {
      out.emplace_back(stacked_qkv_name(t.name), *format, qkv_rows, t.cols);
    } else {
      out.emplace_back(t.name, *format, t.rows, t.cols);
    }
  }
  return out;
}

}  // namespace

std::vector<QuantizedLayout> quantized_layouts(const DecoderConfig& config, const DecoderQuantization& quantization) {
  const std::vector<DecoderTensor> tensors = decoder_tensors(config);
  check_each(tensors, quantization, std::nullopt);
  return layouts_of(config, tensors, quantization);
}

void check_quantization(const DecoderConfig& config, const DecoderQuantization& quantization, ScaleType scales) {
  check_each(decoder_tensors(config), quantization, scales);
}

std::size_t decoder_device_bytes(const DecoderConfig& config, const DecoderQuantization& quantization) {
  const std::vector<DecoderTensor> tensors = decoder_tensors(config);
  check_each(tensors, quantization, std::nullopt);
  std::size_t bytes = 0;
  for (const DecoderTensor& t : tensors) {
    if (!quantization.format_of(t.role)) bytes += t.elements() * 2;  // fp16 and bf16 alike
  }
  for (const QuantizedLayout& l : layouts_of(config, tensors, quantization)) bytes += l.bytes();
  return bytes;
}

namespace {

/// Throws unless `b` holds the `elements` of dense tensor `name`.
template <Element T>
void check_dense(const DeviceBuffer<T>& b, std::size_t elements, const std::string& name) {
  if (!b.valid() || b.size() != elements) {
    throw UsageError("quantize_decoder_weights: weight " + name + " has " + std::to_string(b.size()) +
                     " dense elements, the config needs " + std::to_string(elements) +
                     (b.valid() ? std::string() : std::string(" (the buffer was moved from)")));
  }
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
  // Every chosen matrix (and the biases that stack with q, k and v) must be dense and of its shape before any GPU work.
  const std::size_t qkv_elements =
      static_cast<std::size_t>(config.q_dim() + 2 * config.kv_dim()) * static_cast<std::size_t>(config.d);
  for (const DecoderTensor& t : tensors) {
    using Role = DecoderTensorRole;
    const bool bias = t.role == Role::bq || t.role == Role::bk || t.role == Role::bv;
    if (!quantization.format_of(t.role) && !(bias && quantization.attention)) continue;
    if (t.role == Role::wk || t.role == Role::wv) continue;  // in wqkv, checked with Wq
    if (t.role == Role::lm_head) {
      if (weights.quantized_lm_head != nullptr)
        throw UsageError("quantize_decoder_weights: " + t.name + " is quantized already");
      check_dense(weights.lm_head, t.elements(), t.name);
      continue;
    }
    const BasicAttentionWeights<T>& a = weights.attention[static_cast<std::size_t>(t.layer)];
    const BasicSwigluWeights<T>& m = weights.mlp[static_cast<std::size_t>(t.layer)];
    const std::pair<const DeviceBuffer<T>*, bool> held =  // the dense buffer, and whether it is quantized already
        t.role == Role::wq   ? std::pair{&a.wqkv, a.quantized_qkv.has_value()}
        : t.role == Role::bq ? std::pair{&a.bq, a.quantized_qkv.has_value()}
        : t.role == Role::bk ? std::pair{&a.bk, a.quantized_qkv.has_value()}
        : t.role == Role::bv ? std::pair{&a.bv, a.quantized_qkv.has_value()}
        : t.role == Role::wo ? std::pair{&a.wo, a.quantized_wo != nullptr}
        : t.role == Role::w1 ? std::pair{&m.w1, m.quantized_w1 != nullptr}
        : t.role == Role::w3 ? std::pair{&m.w3, m.quantized_w3 != nullptr}
                             : std::pair{&m.w2, m.quantized_w2 != nullptr};
    const std::string name = t.role == Role::wq ? stacked_qkv_name(t.name) : t.name;
    if (held.second) throw UsageError("quantize_decoder_weights: " + name + " is quantized already");
    check_dense(*held.first, t.role == Role::wq ? qkv_elements : t.elements(), name);
  }

  // Each chosen matrix (q, k and v together: wqkv) quantized, on the device or downloaded and quantized on the host
  // and uploaded, its dense buffer freed.
  const Device& device = stream.device();
  const std::vector<QuantizedLayout> layouts = layouts_of(config, tensors, quantization);
  std::vector<DeviceQuantizedWeight<T>> matrices;
  matrices.reserve(layouts.size());
  const auto quantize_from = [&](DeviceBuffer<T>& dense) {
    const QuantizedLayout& layout = layouts[matrices.size()];
    if (quantizer != nullptr) {
      matrices.push_back(quantizer->template quantize<T, T>(stream, layout.format(), layout.name(), layout.rows(),
                                                            layout.cols(), dense.cview(), quantization.options));
      dense = DeviceBuffer<T>(device, 0);
      return;
    }
    std::vector<T> host(dense.size());
    copy_async(stream, std::span<T>(host), dense.cview());
    stream.synchronize();
    dense = DeviceBuffer<T>(device, 0);
    std::vector<float> values;
    values.reserve(host.size());
    for (const T v : host) values.push_back(v.to_float());
    matrices.emplace_back(
        stream, quantize(layout.format(), layout.name(), layout.rows(), layout.cols(), values, quantization.options));
  };
  for (std::size_t l = 0; l < weights.attention.size(); ++l) {
    BasicAttentionWeights<T>& a = weights.attention[l];
    BasicSwigluWeights<T>& m = weights.mlp[l];
    if (quantization.attention) {
      quantize_from(a.wqkv);
      quantize_from(a.wo);
    }
    if (quantization.mlp) {
      quantize_from(m.w1);
      quantize_from(m.w3);
      quantize_from(m.w2);
    }
  }
  if (quantization.lm_head) quantize_from(weights.lm_head);
  adopt_quantized(stream, weights, config, quantization, std::move(matrices));
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
  const Device& device = stream.device();
  const auto empty = [&] { return DeviceBuffer<T>(device, 0); };
  auto next = matrices.begin();
  // The next matrix, shared (the graphs that read it keep it alive).
  const auto take = [&] { return std::make_shared<const DeviceQuantizedWeight<T>>(std::move(*next++)); };
  for (std::size_t l = 0; l < weights.attention.size(); ++l) {
    BasicAttentionWeights<T>& a = weights.attention[l];
    BasicSwigluWeights<T>& m = weights.mlp[l];
    if (quantization.attention) {
      DeviceBuffer<T> bias = empty();
      if (config.qkv_bias) {
        const auto q_dim = static_cast<std::size_t>(config.q_dim());
        const auto kv_dim = static_cast<std::size_t>(config.kv_dim());
        if (!a.bq.valid() || !a.bk.valid() || !a.bv.valid() || a.bq.size() != q_dim || a.bk.size() != kv_dim ||
            a.bv.size() != kv_dim) {
          throw UsageError("adopt_quantized: layer " + std::to_string(l) + "'s q, k and v biases have " +
                           std::to_string(a.bq.size()) + ", " + std::to_string(a.bk.size()) + " and " +
                           std::to_string(a.bv.size()) + " elements, the config needs " + std::to_string(q_dim) + ", " +
                           std::to_string(kv_dim) + " and " + std::to_string(kv_dim));
        }
        bias = DeviceBuffer<T>(device, a.bq.size() + a.bk.size() + a.bv.size());
        const DeviceSpan<T> to = bias.view();
        (copy(to.subspan(0, a.bq.size()), a.bq.cview()) >> copy(to.subspan(a.bq.size(), a.bk.size()), a.bk.cview()) >>
         copy(to.subspan(a.bq.size() + a.bk.size(), a.bv.size()), a.bv.cview()))
            .sync_on(stream);
      }
      a.quantized_qkv = BasicQuantizedQkv<T>{take(), std::move(bias)};
      a.quantized_wo = take();
      for (DeviceBuffer<T>* b : {&a.wqkv, &a.wo, &a.bq, &a.bk, &a.bv}) *b = empty();
    }
    if (quantization.mlp) {
      m.quantized_w1 = take();
      m.quantized_w3 = take();
      m.quantized_w2 = take();
      for (DeviceBuffer<T>* b : {&m.w1, &m.w3, &m.w2}) *b = empty();
    }
  }
  if (quantization.lm_head) {
    weights.quantized_lm_head = take();
    weights.lm_head = empty();
  }
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
  const auto format = [](const std::shared_ptr<const DeviceQuantizedWeight<T>>& w) {
    return w ? std::optional<QuantizedFormat>(w->layout().format()) : std::nullopt;
  };
  out.attention = each_layer("attention", [&](std::size_t l) {
    const BasicAttentionWeights<T>& a = weights.attention[l];
    const std::optional<QuantizedFormat> qkv = a.quantized_qkv ? format(a.quantized_qkv->weight) : std::nullopt;
    if (qkv != format(a.quantized_wo)) {
      throw UsageError("quantization_of: layer " + std::to_string(l) +
                       "'s q, k and v and its Wo are not quantized alike (one class)");
    }
    return qkv;
  });
  out.mlp = each_layer("MLP", [&](std::size_t l) {
    const BasicSwigluWeights<T>& m = weights.mlp[l];
    const std::optional<QuantizedFormat> w1 = format(m.quantized_w1);
    if (w1 != format(m.quantized_w3) || w1 != format(m.quantized_w2)) {
      throw UsageError("quantization_of: layer " + std::to_string(l) +
                       "'s W1, W3 and W2 are not quantized alike (one class)");
    }
    return w1;
  });
  out.lm_head = format(weights.quantized_lm_head);
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
