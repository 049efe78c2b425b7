#pragma once
// Two decoders that must compute the same bits: both decode greedily from one token, each step's logits compared bit
// for bit (gpu suite).

#include <doctest/doctest.h>

#include <lazygraph/nn/decoder.hpp>

#include <cstddef>
#include <vector>

namespace lgtest {

/// Decodes `steps` tokens greedily from `token` at position 0 with both decoders, checking at each step that every
/// logit has the same bits and that both pick the same next token.
template <class T>
void check_same_decoding(lazygraph::nn::BasicDecoder<T>& a, lazygraph::nn::BasicDecoder<T>& b, int token,
                         int steps = 6) {
  int x = token;
  int y = token;
  for (int p = 0; p < steps; ++p) {
    CAPTURE(p);
    x = a.forward({x, p});
    y = b.forward({y, p});
    const std::vector<T> lx = a.logits();
    const std::vector<T> ly = b.logits();
    REQUIRE(lx.size() == ly.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < lx.size(); ++i) differ += lx[i].bits != ly[i].bits ? 1 : 0;
    CHECK(differ == 0);
    REQUIRE(x == y);
  }
}

}  // namespace lgtest
