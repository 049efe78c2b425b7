// Llama (LlamaForCausalLM): the block every other file here starts from. Pre-norm RMSNorm, grouped-query attention
// with RoPE, a SwiGLU MLP, no biases.
#include "architecture.hpp"

namespace lazygraph::nn::detail {

namespace {
// The window keys as every architecture had them before each had its file (a Llama config never sets them).
constexpr std::string_view kLlamaKeys[] = {"attention_bias", "sliding_window", "use_sliding_window", "layer_types",
                                           "max_window_layers"};

void read_llama(const ConfigReader& reader, LlamaConfig& config) {
  refuse_output_bias(reader, config);
  read_window(reader, config, false);
}
}  // namespace

extern const Architecture llama_architecture{"llama", "LlamaForCausalLM", kLlamaKeys, read_llama};

}  // namespace lazygraph::nn::detail
