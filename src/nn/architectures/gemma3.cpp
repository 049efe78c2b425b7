// Gemma 3 text (Gemma3ForCausalLM, model_type gemma3_text): q/k norms as Qwen3's; four norms per layer (the attention
// and MLP outputs normed again before their residual adds); RMSNorm weights stored as w meaning 1 + w; a GeGLU MLP
// (gelu_pytorch_tanh); the embedded rows times sqrt(hidden_size); the scores scaled by query_pre_attn_scalar^-1/2;
// sliding-window attention on the layers layer_types names (five of six) with a RoPE base of their own; final logit
// soft-capping where set. Attention-score soft-capping and bidirectional attention are refused by name.
#include <cmath>
#include <string>

#include "architecture.hpp"

namespace lazygraph::nn::detail {

namespace {
constexpr std::string_view kGemma3Keys[] = {"attention_bias",
                                            "sliding_window",
                                            "layer_types",
                                            "_sliding_window_pattern",
                                            "sliding_window_pattern",
                                            "hidden_activation",
                                            "query_pre_attn_scalar",
                                            "final_logit_softcapping",
                                            "attn_logit_softcapping",
                                            "use_bidirectional_attention",
                                            "rope_local_base_freq",
                                            "cache_implementation"};

/// RoPE: transformers 5's rope_parameters per layer type {full_attention: {...}, sliding_attention: {...}}, or the
/// older rope_theta (and rope_scaling) of the full layers with rope_local_base_freq of the sliding ones.
void read_gemma3_rope(const ConfigReader& reader, LlamaConfig& config) {
  const nlohmann::json* parameters = reader.get("rope_parameters");
  double local = 10000;
  if (parameters != nullptr) {
    if (!parameters->is_object()) {
      reader.fail("rope_parameters", "must be an object of layer types, found " + describe_json(*parameters));
    }
    for (const auto& [type, value] : parameters->items()) {
      if (type != "full_attention" && type != "sliding_attention") {
        reader.fail("rope_parameters." + type, "is not a layer type of Gemma 3 (full_attention, sliding_attention)");
      }
    }
    const auto theta_of = [&](const nlohmann::json& part, const std::string& where) {
      const auto it = part.find("rope_theta");
      if (it == part.end() || it->is_null()) reader.fail(where + ".rope_theta", "is missing");
      return reader.float_value(where + ".rope_theta", *it);
    };
    const auto part = [&](const char* type) -> const nlohmann::json& {
      const auto it = parameters->find(type);
      if (it == parameters->end() || it->is_null()) reader.fail("rope_parameters." + std::string(type), "is missing");
      return *it;
    };
    config.rope_scaling = read_rope_object(reader, part("full_attention"), "rope_parameters.full_attention", true);
    config.rope_theta = theta_of(part("full_attention"), "rope_parameters.full_attention");
    const RopeScaling sliding =
        read_rope_object(reader, part("sliding_attention"), "rope_parameters.sliding_attention", true);
    if (sliding.type != RopeType::standard) {
      reader.fail("rope_parameters.sliding_attention.rope_type",
                  "is not default: the sliding layers' RoPE is implemented without scaling");
    }
    local = theta_of(part("sliding_attention"), "rope_parameters.sliding_attention");
    if (reader.get("rope_theta") != nullptr || reader.get("rope_scaling") != nullptr ||
        reader.get("rope_local_base_freq") != nullptr) {
      reader.fail("rope_parameters", "is given beside rope_theta, rope_scaling or rope_local_base_freq: one form only");
    }
  } else {
    config.rope_theta = reader.float_number("rope_theta", 1e6);
    if (const nlohmann::json* scaling = reader.get("rope_scaling"); scaling != nullptr) {
      config.rope_scaling = read_rope_object(reader, *scaling, "rope_scaling", false);
    }
    local = reader.float_number("rope_local_base_freq", 10000);
  }
  config.local_rope_theta = local;
}

void read_gemma3(const ConfigReader& reader, LlamaConfig& config) {
  refuse_output_bias(reader, config);
  const std::string activation = reader.string("hidden_activation", "gelu_pytorch_tanh");
  if (activation != "gelu_pytorch_tanh") {
    reader.fail("hidden_activation", "'" + activation + "' is not implemented (Gemma 3's gelu_pytorch_tanh is)");
  }
  if (reader.get("attn_logit_softcapping") != nullptr) {
    reader.fail("attn_logit_softcapping", "is set: soft-capping the attention scores is not implemented");
  }
  if (reader.boolean("use_bidirectional_attention", false)) {
    reader.fail("use_bidirectional_attention", "is true: lazygraph's attention is causal");
  }
  config.activation = GateActivation::gelu_tanh;
  config.qk_norm = true;
  config.post_norms = true;
  config.gain_offset = 1;
  config.embedding_scale = std::sqrt(static_cast<double>(config.hidden_size));
  config.tie_word_embeddings = reader.boolean("tie_word_embeddings", true);  // Gemma 3's default
  config.rms_norm_eps = reader.float_number("rms_norm_eps", 1e-6);
  config.query_pre_attn_scalar = reader.float_number("query_pre_attn_scalar", 256);
  if (const nlohmann::json* cap = reader.get("final_logit_softcapping"); cap != nullptr) {
    config.final_logit_softcapping = reader.float_value("final_logit_softcapping", *cap);
  }
  // The window: sliding_window on the layers layer_types names, or where it is absent every layer but each
  // sliding_window_pattern-th (Gemma 3's 5:1).
  const int window = reader.optional_positive_int("sliding_window", std::numeric_limits<int>::max()).value_or(4096);
  std::vector<bool> sliding;
  if (std::optional<std::vector<bool>> types = read_layer_types(reader, config)) {
    sliding = std::move(*types);
  } else {
    const int pattern = reader.optional_positive_int("sliding_window_pattern", 1 << 20)
                            .value_or(reader.optional_positive_int("_sliding_window_pattern", 1 << 20).value_or(6));
    for (int l = 0; l < config.num_hidden_layers; ++l) sliding.push_back((l + 1) % pattern != 0);
  }
  read_gemma3_rope(reader, config);
  if (std::none_of(sliding.begin(), sliding.end(), [](bool s) { return s; })) {
    config.local_rope_theta.reset();
    return;
  }
  config.sliding_window = window;
  config.sliding_layers = std::move(sliding);
}

void write_gemma3(const LlamaConfig& config, nlohmann::json& root) {
  root.erase("hidden_act");
  root.erase("use_sliding_window");
  root.erase("rope_theta");
  root["hidden_activation"] = "gelu_pytorch_tanh";
  if (config.query_pre_attn_scalar) root["query_pre_attn_scalar"] = *config.query_pre_attn_scalar;
  if (config.final_logit_softcapping) root["final_logit_softcapping"] = *config.final_logit_softcapping;
  nlohmann::json full = root["rope_parameters"];
  root["rope_parameters"] = {
      {"full_attention", full},
      {"sliding_attention",
       {{"rope_type", "default"}, {"rope_theta", config.local_rope_theta.value_or(config.rope_theta)}}}};
  if (!config.sliding_window) {  // no layer slides: layer_types says so
    nlohmann::json types = nlohmann::json::array();
    for (int l = 0; l < config.num_hidden_layers; ++l) types.push_back("full_attention");
    root["layer_types"] = types;
  } else if (config.sliding_layers.empty()) {  // every layer slides
    nlohmann::json types = nlohmann::json::array();
    for (int l = 0; l < config.num_hidden_layers; ++l) types.push_back("sliding_attention");
    root["layer_types"] = types;
  }
}
}  // namespace

extern const Architecture gemma3_architecture{"gemma3_text", "Gemma3ForCausalLM", kGemma3Keys, read_gemma3,
                                              true,          write_gemma3};

}  // namespace lazygraph::nn::detail
