// Qwen3-MoE (Qwen3MoeForCausalLM): Qwen3's attention (per-head q/k norms, head_dim apart, the window keys) with a
// mixture of experts in place of every layer's MLP: num_experts SwiGLU experts of width moe_intermediate_size, the
// top num_experts_per_tok of the router's softmax, renormalized where norm_topk_prob. Dense layers among the sparse
// ones (decoder_sparse_step other than 1, mlp_only_layers) are refused by name; output_router_logits and
// router_aux_loss_coef are training-only.
#include "architecture.hpp"

namespace lazygraph::nn::detail {

namespace {
constexpr std::string_view kQwen3MoeKeys[] = {
    "attention_bias",      "sliding_window",    "use_sliding_window",   "layer_types",           "max_window_layers",
    "num_experts",         "num_local_experts", "num_experts_per_tok",  "moe_intermediate_size", "norm_topk_prob",
    "decoder_sparse_step", "mlp_only_layers",   "output_router_logits", "router_aux_loss_coef"};

void read_qwen3_moe(const ConfigReader& reader, LlamaConfig& config) {
  refuse_output_bias(reader, config);
  config.qk_norm = true;
  read_window(reader, config, false);
  read_moe(reader, config, reader.positive_int("moe_intermediate_size", 1 << 20));
  config.moe->normalize = reader.boolean("norm_topk_prob", false);
  if (const std::optional<int> step = reader.optional_positive_int("decoder_sparse_step", 1 << 20);
      step.has_value() && *step != 1) {
    reader.fail("decoder_sparse_step", "is " + std::to_string(*step) +
                                           ": a dense MLP in the layers between the mixtures of experts is not "
                                           "implemented (1, every layer a mixture, is)");
  }
  if (const nlohmann::json* dense = reader.get("mlp_only_layers"); dense != nullptr) {
    if (!dense->is_array()) reader.fail("mlp_only_layers", "must be a list of layers, found " + describe_json(*dense));
    if (!dense->empty()) {
      reader.fail("mlp_only_layers", "lists " + describe_json(*dense) +
                                         ": a dense MLP in place of a layer's mixture of experts is not implemented");
    }
  }
}

void write_qwen3_moe(const LlamaConfig& config, nlohmann::json& root) {
  write_moe(config, root);
  if (!config.moe) return;
  root["moe_intermediate_size"] = config.moe->expert_width;
  root["norm_topk_prob"] = config.moe->normalize;
}
}  // namespace

extern const Architecture qwen3_moe_architecture{"qwen3_moe", "Qwen3MoeForCausalLM", kQwen3MoeKeys, read_qwen3_moe,
                                                 false,       write_qwen3_moe};

}  // namespace lazygraph::nn::detail
