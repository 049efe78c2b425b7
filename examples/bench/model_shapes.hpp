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

/// Qwen3-30B-A3B's shape (its config.json): d 2048, 48 layers, 32 heads over 4 kv heads of 128, q/k norms, 128
/// experts of width 768, top 8 renormalized (norm_topk_prob), vocab 151936, theta 1e6, eps 1e-6.
inline ModelShape qwen3_30b_a3b() {
  lazygraph::nn::DecoderConfig c;
  c.d = 2048;
  c.heads = 32;
  c.kv_heads = 4;
  c.head_width = 128;
  c.layers = 48;
  c.vocab = 151936;
  c.theta = 1e6F;
  c.eps = 1e-6F;
  c.qk_norm = true;
  c.moe = {128, 8, 768, true};
  return {"qwen3-30b-a3b", c};
}

/// OLMoE-1B-7B's shape (allenai/OLMoE-1B-7B-0924's config.json): d 2048, 16 layers, 16 heads of 128 (no grouping),
/// 64 experts of width 1024, top 8 as the softmax gives them (norm_topk_prob false), vocab 50304, theta 10000, eps
/// 1e-5, q and k normed over their whole width (qk_norm_whole: gains of 2048 each).
inline ModelShape olmoe_1b_7b() {
  lazygraph::nn::DecoderConfig c;
  c.d = 2048;
  c.heads = 16;
  c.kv_heads = 16;
  c.head_width = 128;
  c.layers = 16;
  c.vocab = 50304;
  c.theta = 10000.0F;
  c.eps = 1e-5F;
  c.qk_norm = true;
  c.qk_norm_whole = true;
  c.moe = {64, 8, 1024, false};
  return {"olmoe-1b-7b", c};
}

/// Mixtral-8x7B's shape (mistralai/Mixtral-8x7B-v0.1's config.json): d 4096, 32 layers, 32 heads over 8 kv heads of
/// 128, 8 experts of width 14336, top 2 (the softmax over the two chosen logits: renormalized), vocab 32000, theta
/// 1e6, eps 1e-5, no window; 93 GB in 16 bits.
inline ModelShape mixtral_8x7b() {
  lazygraph::nn::DecoderConfig c;
  c.d = 4096;
  c.heads = 32;
  c.kv_heads = 8;
  c.layers = 32;
  c.vocab = 32000;
  c.theta = 1e6F;
  c.eps = 1e-5F;
  c.moe = {8, 2, 14336, true};
  c.moe.names = lazygraph::nn::MoeTensorNames::block_sparse_moe;
  return {"mixtral-8x7b", c};
}

}  // namespace bench
