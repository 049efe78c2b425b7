#pragma once
// The quantized matrices of decoder weights, downloaded for comparison (nn/decoder_quantization.hpp).

#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/kernels.hpp>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

#include "common/gpu.hpp"

namespace lgtest {

/// Every quantized matrix of `w` downloaded, in quantized_layouts order (gpu suite).
template <class T>
std::vector<lazygraph::nn::QuantizedWeight> downloaded(const lazygraph::Stream& s,
                                                       const lazygraph::nn::BasicDecoderWeights<T>& w) {
  std::vector<lazygraph::nn::QuantizedWeight> out;
  const auto add = [&](const lazygraph::nn::Weight<T>& m) {
    if (!m.is_dense()) out.push_back(m.quantized().download(s));
  };
  for (std::size_t l = 0; l < w.attention.size(); ++l) {  // a layer's experts in place of its MLP's matrices
    add(w.attention[l].qkv);
    add(w.attention[l].wo);
    const bool experts = l < w.moe.size();
    add(experts ? w.moe[l].w1 : w.mlp[l].w1);
    add(experts ? w.moe[l].w3 : w.mlp[l].w3);
    add(experts ? w.moe[l].w2 : w.mlp[l].w2);
  }
  add(w.lm_head);
  return out;
}

/// The twin of `quantized` (the seeded weights of `c` with quantized experts): the same seeded weights, each expert
/// stack replaced by the quantized one's values dequantized on the host and rounded to T, dense (gpu suite).
template <class T>
lazygraph::nn::BasicDecoderWeights<T> with_dequantized_experts(const lazygraph::Stream& s,
                                                               const lazygraph::nn::BasicKernels<T>& k,
                                                               const lazygraph::nn::DecoderConfig& c,
                                                               const lazygraph::nn::BasicDecoderWeights<T>& quantized) {
  lazygraph::nn::BasicDecoderWeights<T> twin = lazygraph::nn::BasicDecoderWeights<T>::generate(s, k, c);
  const auto dequantized = [&](const lazygraph::nn::Weight<T>& from) {
    const std::vector<float> f = from.quantized().download(s).dequantize();
    std::vector<T> v;
    v.reserve(f.size());
    for (const float x : f) v.push_back(T::from_float(x));
    return lazygraph::nn::Weight<T>(to_device(s, v), from.rows(), from.cols(), from.name());
  };
  for (std::size_t l = 0; l < twin.moe.size(); ++l) {
    twin.moe[l].w1 = dequantized(quantized.moe[l].w1);
    twin.moe[l].w3 = dequantized(quantized.moe[l].w3);
    twin.moe[l].w2 = dequantized(quantized.moe[l].w2);
  }
  return twin;
}

/// Whether `a` and `b` have the same shape, format and bytes.
inline bool same_bytes(const lazygraph::nn::QuantizedWeight& a, const lazygraph::nn::QuantizedWeight& b) {
  return a.layout().rows() == b.layout().rows() && a.layout().cols() == b.layout().cols() &&
         a.layout().format() == b.layout().format() && std::ranges::equal(a.values(), b.values()) &&
         std::ranges::equal(a.scale_bits(), b.scale_bits()) && std::ranges::equal(a.zeros(), b.zeros());
}

}  // namespace lgtest
