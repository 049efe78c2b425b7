// Mistral (MistralForCausalLM): Llama's block with an attention window (sliding_window) on every layer.
#include "architecture.hpp"

namespace lazygraph::nn::detail {

namespace {
constexpr std::string_view kMistralKeys[] = {"attention_bias", "sliding_window", "use_sliding_window", "layer_types",
                                             "max_window_layers"};

void read_mistral(const ConfigReader& reader, LlamaConfig& config) {
  refuse_output_bias(reader, config);
  read_window(reader, config, true);
}
}  // namespace

extern const Architecture mistral_architecture{"mistral", "MistralForCausalLM", kMistralKeys, read_mistral};

}  // namespace lazygraph::nn::detail
