#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "architecture.hpp"

namespace lazygraph::nn::detail {

extern const Architecture llama_architecture;
extern const Architecture mistral_architecture;
extern const Architecture qwen2_architecture;
extern const Architecture qwen3_architecture;
extern const Architecture gemma3_architecture;
extern const Architecture qwen3_moe_architecture;
extern const Architecture olmoe_architecture;
extern const Architecture mixtral_architecture;

std::span<const Architecture* const> architectures() noexcept {
  static const Architecture* const all[] = {&llama_architecture, &mistral_architecture, &qwen2_architecture,
                                            &qwen3_architecture, &gemma3_architecture,  &qwen3_moe_architecture,
                                            &olmoe_architecture, &mixtral_architecture};
  return all;
}

const Architecture* find_architecture(std::string_view model_type) noexcept {
  const auto all = architectures();
  const auto found =
      std::find_if(all.begin(), all.end(), [&](const Architecture* a) { return a->model_type == model_type; });
  return found == all.end() ? nullptr : *found;
}

std::optional<std::vector<bool>> read_layer_types(const ConfigReader& reader, const LlamaConfig& config) {
  const nlohmann::json* types = reader.get("layer_types");
  if (types == nullptr) return std::nullopt;
  if (!types->is_array()) reader.fail("layer_types", "must be a list, found " + describe_json(*types));
  if (types->size() != static_cast<std::size_t>(config.num_hidden_layers)) {
    reader.fail("layer_types", "lists " + std::to_string(types->size()) + " layers, not num_hidden_layers (" +
                                   std::to_string(config.num_hidden_layers) + ")");
  }
  std::vector<bool> sliding;
  for (const nlohmann::json& t : *types) {
    if (t != "sliding_attention" && t != "full_attention") {
      reader.fail("layer_types",
                  "holds " + describe_json(t) + " (lazygraph implements full_attention and sliding_attention)");
    }
    sliding.push_back(t == "sliding_attention");
  }
  return sliding;
}

void read_window(const ConfigReader& reader, LlamaConfig& config, bool always) {
  const std::optional<int> window = reader.optional_positive_int("sliding_window", std::numeric_limits<int>::max());
  const bool use = reader.boolean("use_sliding_window", false);
  int first_sliding = 0;  // max_window_layers: a count of layers, 0 allowed
  if (const nlohmann::json* m = reader.get("max_window_layers"); m != nullptr) {
    if (!m->is_number_unsigned()) {
      reader.fail("max_window_layers", "must be a count of layers, found " + describe_json(*m));
    }
    first_sliding = static_cast<int>(std::min<std::uint64_t>(m->get<std::uint64_t>(), 1U << 20U));
  }
  std::vector<bool> sliding;
  if (std::optional<std::vector<bool>> types = read_layer_types(reader, config)) {
    sliding = std::move(*types);
  } else if (!always && use) {  // Qwen's rule where layer_types is absent: the layers from max_window_layers on
    for (int l = 0; l < config.num_hidden_layers; ++l) sliding.push_back(l >= first_sliding);
  } else if (always) {
    sliding.assign(static_cast<std::size_t>(config.num_hidden_layers), true);
  }
  if (!window.has_value() || std::none_of(sliding.begin(), sliding.end(), [](bool s) { return s; })) return;
  config.sliding_window = window;
  // Every layer sliding: the empty list says so (as a config without layer_types reads back).
  if (std::all_of(sliding.begin(), sliding.end(), [](bool s) { return s; })) sliding.clear();
  config.sliding_layers = std::move(sliding);
}

void refuse_output_bias(const ConfigReader& reader, const LlamaConfig& config) {
  if (reader.boolean("attention_bias", false)) {
    reader.fail("attention_bias", "is true, which in a " + config.model_type +
                                      " model also gives o_proj a bias, and that is not implemented (q, k and v "
                                      "biases are, as Qwen2 has them)");
  }
}

void read_moe(const ConfigReader& reader, LlamaConfig& config, int expert_width) {
  const std::optional<int> experts = reader.optional_positive_int("num_experts", kMaxExperts);
  const std::optional<int> local = reader.optional_positive_int("num_local_experts", kMaxExperts);
  if (experts && local && *experts != *local) {
    reader.fail("num_local_experts", "(" + std::to_string(*local) + ") disagrees with num_experts (" +
                                         std::to_string(*experts) + "): they name the same count");
  }
  if (!experts && !local) reader.fail("num_experts", "is missing (nor is num_local_experts given)");
  MoeShape moe;
  moe.experts = experts.value_or(local.value_or(0));
  moe.experts_per_token = reader.positive_int("num_experts_per_tok", kMaxExperts);
  if (moe.experts_per_token > moe.experts) {
    reader.fail("num_experts_per_tok", "(" + std::to_string(moe.experts_per_token) +
                                           ") is more than the experts a layer has (" + std::to_string(moe.experts) +
                                           ")");
  }
  moe.expert_width = expert_width;
  config.moe = moe;
}

void write_moe(const LlamaConfig& config, nlohmann::json& root) {
  if (!config.moe) return;
  root["num_experts"] = config.moe->experts;
  root["num_experts_per_tok"] = config.moe->experts_per_token;
}

}  // namespace lazygraph::nn::detail
