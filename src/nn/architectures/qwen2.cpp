// Qwen2 (Qwen2ForCausalLM): Llama's block with q, k and v biases (always: o_proj has none), and an attention window
// where use_sliding_window or layer_types says so.
#include "architecture.hpp"

namespace lazygraph::nn::detail {

namespace {
constexpr std::string_view kQwen2Keys[] = {"attention_bias", "sliding_window", "use_sliding_window", "layer_types",
                                           "max_window_layers"};

void read_qwen2(const ConfigReader& reader, LlamaConfig& config) {
  config.attention_bias = reader.boolean("attention_bias", true);
  if (!config.attention_bias) reader.fail("attention_bias", "is false, but Qwen2 always has q, k and v biases");
  read_window(reader, config, false);
}
}  // namespace

extern const Architecture qwen2_architecture{"qwen2", "Qwen2ForCausalLM", kQwen2Keys, read_qwen2};

}  // namespace lazygraph::nn::detail
