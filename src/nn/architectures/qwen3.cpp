// Qwen3 (Qwen3ForCausalLM): Llama's block with a per-head RMSNorm of q and of k before RoPE (q_norm and k_norm, each
// [head_dim], shared by the heads), head_dim given apart from hidden_size, and an attention window where
// use_sliding_window or layer_types says so. Its attention_bias would bias o_proj too, which is not implemented.
#include "architecture.hpp"

namespace lazygraph::nn::detail {

namespace {
constexpr std::string_view kQwen3Keys[] = {"attention_bias", "sliding_window", "use_sliding_window", "layer_types",
                                           "max_window_layers"};

void read_qwen3(const ConfigReader& reader, LlamaConfig& config) {
  refuse_output_bias(reader, config);
  config.qk_norm = true;
  read_window(reader, config, false);
}
}  // namespace

extern const Architecture qwen3_architecture{"qwen3", "Qwen3ForCausalLM", kQwen3Keys, read_qwen3};

}  // namespace lazygraph::nn::detail
