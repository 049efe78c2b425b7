#pragma once
/// \file
/// The real models' shapes the benchmarks time decoders at (seeded weights of these shapes, not the models').

#include <lazygraph/nn/decoder.hpp>

#include <string>

namespace bench {

/// A decoder shape of a benchmark: its command-line name and its config.
struct ModelShape {
  std::string name;
  lazygraph::nn::DecoderConfig config;
};

/// TinyLlama 1.1B's shape: d 2048, 32 heads over 4 kv heads (head_dim 64), 22 layers, ffn 5632, vocab 32000.
inline ModelShape tinyllama() {
  lazygraph::nn::DecoderConfig c;
  c.d = 2048;
  c.heads = 32;
  c.kv_heads = 4;
  c.layers = 22;
  c.ffn = 5632;
  c.vocab = 32000;
  c.theta = 10000.0F;
  return {"tinyllama", c};
}

/// Llama 3.2 1B's shape: d 2048, 32 heads over 8 kv heads (head_dim 64), 16 layers, ffn 8192, vocab 128256, RoPE
/// llama3 (theta 500000, factor 32). Its own LM head (the real model ties it to the embedding: the same bytes read).
inline ModelShape llama32_1b() {
  lazygraph::nn::DecoderConfig c;
  c.d = 2048;
  c.heads = 32;
  c.kv_heads = 8;
  c.layers = 16;
  c.ffn = 8192;
  c.vocab = 128256;
  c.theta = 500000.0F;
  c.rope_scaling = {.type = lazygraph::nn::RopeType::llama3,
                    .factor = 32.0,
                    .low_freq_factor = 1.0,
                    .high_freq_factor = 4.0,
                    .original_max_position_embeddings = 8192};
  return {"llama32-1b", c};
}

/// A 7B-class shape (Llama 2 7B's): d 4096, 32 heads (head_dim 128, no grouping), 32 layers, ffn 11008, vocab 32000:
/// 13.2 GB in fp16.
inline ModelShape seven_b_class() {
  lazygraph::nn::DecoderConfig c;
  c.d = 4096;
  c.heads = 32;
  c.layers = 32;
  c.ffn = 11008;
  c.vocab = 32000;
  return {"7b-class", c};
}

}  // namespace bench
