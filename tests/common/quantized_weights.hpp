#pragma once
// The quantized matrices of decoder weights, downloaded for comparison (nn/decoder_quantization.hpp).

#include <lazygraph/nn/decoder.hpp>

#include <algorithm>
#include <memory>
#include <vector>

namespace lgtest {

/// Every quantized matrix of `w` downloaded, in quantized_layouts order (gpu suite).
template <class T>
std::vector<lazygraph::nn::QuantizedWeight> downloaded(const lazygraph::Stream& s,
                                                       const lazygraph::nn::BasicDecoderWeights<T>& w) {
  std::vector<lazygraph::nn::QuantizedWeight> out;
  for (const lazygraph::nn::Weight<T>* m : w.matrices()) {
    if (!m->is_dense()) out.push_back(m->quantized().download(s));
  }
  return out;
}

/// Whether `a` and `b` have the same shape, format and bytes.
inline bool same_bytes(const lazygraph::nn::QuantizedWeight& a, const lazygraph::nn::QuantizedWeight& b) {
  return a.layout().rows() == b.layout().rows() && a.layout().cols() == b.layout().cols() &&
         a.layout().format() == b.layout().format() && std::ranges::equal(a.values(), b.values()) &&
         std::ranges::equal(a.scale_bits(), b.scale_bits()) && std::ranges::equal(a.zeros(), b.zeros());
}

}  // namespace lgtest
