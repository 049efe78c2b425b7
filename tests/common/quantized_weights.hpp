#pragma once
// The quantized matrices of decoder weights, downloaded for comparison (nn/decoder_quantization.hpp).

#include <lazygraph/nn/decoder.hpp>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

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

/// Whether `a` and `b` have the same shape, format and bytes.
inline bool same_bytes(const lazygraph::nn::QuantizedWeight& a, const lazygraph::nn::QuantizedWeight& b) {
  return a.layout().rows() == b.layout().rows() && a.layout().cols() == b.layout().cols() &&
         a.layout().format() == b.layout().format() && std::ranges::equal(a.values(), b.values()) &&
         std::ranges::equal(a.scale_bits(), b.scale_bits()) && std::ranges::equal(a.zeros(), b.zeros());
}

}  // namespace lgtest
