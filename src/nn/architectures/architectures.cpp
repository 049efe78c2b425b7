#include <algorithm>

#include "architecture.hpp"

namespace lazygraph::nn::detail {

extern const Architecture llama_architecture;
extern const Architecture mistral_architecture;
extern const Architecture qwen2_architecture;
extern const Architecture qwen3_architecture;

std::span<const Architecture* const> architectures() noexcept {
  static const Architecture* const all[] = {&llama_architecture, &mistral_architecture, &qwen2_architecture,
                                            &qwen3_architecture};
  return all;
}

const Architecture* find_architecture(std::string_view model_type) noexcept {
  const auto all = architectures();
  const auto found =
      std::find_if(all.begin(), all.end(), [&](const Architecture* a) { return a->model_type == model_type; });
  return found == all.end() ? nullptr : *found;
}

void read_window(const ConfigReader& reader, LlamaConfig& config, bool always) {
  const std::optional<int> window = reader.optional_positive_int("sliding_window", std::numeric_limits<int>::max());
  bool applies = always || reader.boolean("use_sliding_window", false);
  if (const nlohmann::json* types = reader.get("layer_types"); types != nullptr) {
    if (!types->is_array()) reader.fail("layer_types", "must be a list, found " + describe_json(*types));
    for (const nlohmann::json& t : *types) {
      if (t == "sliding_attention") {
        applies = true;
      } else if (t != "full_attention") {
        reader.fail("layer_types", "holds " + describe_json(t) +
                                       " (lazygraph implements full_attention and, with a window at least the "
                                       "context, sliding_attention)");
      }
    }
    if (types->size() != static_cast<std::size_t>(config.num_hidden_layers)) {
      reader.fail("layer_types", "lists " + std::to_string(types->size()) + " layers, not num_hidden_layers (" +
                                     std::to_string(config.num_hidden_layers) + ")");
    }
  }
  if (applies && window.has_value()) config.sliding_window = window;
}

void refuse_output_bias(const ConfigReader& reader, const LlamaConfig& config) {
  if (reader.boolean("attention_bias", false)) {
    reader.fail("attention_bias", "is true, which in a " + config.model_type +
                                      " model also gives o_proj a bias, and that is not implemented (q, k and v "
                                      "biases are, as Qwen2 has them)");
  }
}

}  // namespace lazygraph::nn::detail
