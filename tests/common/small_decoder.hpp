#pragma once
// The decoder config the nn tests share: small enough for a quick float64 check (d 128, 4 heads, 2 layers, ffn
// 256, vocab 512, context 64), with every feature of the default one.

#include <lazygraph/nn/decoder.hpp>

#include <cstdint>

namespace lgtest {

inline lazygraph::nn::DecoderConfig small_decoder(int kv_heads = 0, int max_batch = 1, std::uint32_t seed = 1234) {
  lazygraph::nn::DecoderConfig c;
  c.d = 128;
  c.heads = 4;
  c.kv_heads = kv_heads;
  c.layers = 2;
  c.ffn = 256;
  c.vocab = 512;
  c.context = 64;
  c.max_batch = max_batch;
  c.seed = seed;
  return c;
}

}  // namespace lgtest
