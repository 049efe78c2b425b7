// OLMoE (OlmoeForCausalLM): Llama's block with q_norm and k_norm over the whole q and k projections (RMSNorm of
// hidden_size and of kv_heads * head_dim elements, not per head, as transformers' modeling_olmoe has them) and a
// mixture of experts in place of every layer's MLP: num_experts SwiGLU experts of width intermediate_size, the top
// num_experts_per_tok of the router's softmax, renormalized where norm_topk_prob. clip_qkv (clipping q, k and v) and
// an attention_bias (which biases o_proj too) are refused by name; output_router_logits and router_aux_loss_coef are
// training-only.
#include "architecture.hpp"

namespace lazygraph::nn::detail {

namespace {
constexpr std::string_view kOlmoeKeys[] = {
    "attention_bias",      "clip_qkv",       "num_experts",          "num_local_experts",
    "num_experts_per_tok", "norm_topk_prob", "output_router_logits", "router_aux_loss_coef"};

void read_olmoe(const ConfigReader& reader, LlamaConfig& config) {
  refuse_output_bias(reader, config);
  if (const nlohmann::json* clip = reader.get("clip_qkv"); clip != nullptr) {
    reader.fail("clip_qkv", "is " + describe_json(*clip) + ": clipping q, k and v is not implemented");
  }
  // q_norm's gains span hidden_size, which is the width of q only when each head is hidden_size / heads wide.
  if (config.head_dim.has_value() && *config.head_dim * config.num_attention_heads != config.hidden_size) {
    reader.fail("head_dim", "(" + std::to_string(*config.head_dim) +
                                ") times num_attention_heads is not hidden_size, the width OLMoE's q_norm spans");
  }
  config.qk_norm = true;
  config.qk_norm_whole = true;
  read_moe(reader, config, config.intermediate_size);
  config.moe->normalize = reader.boolean("norm_topk_prob", false);
}

void write_olmoe(const LlamaConfig& config, nlohmann::json& root) {
  write_moe(config, root);
  if (config.moe) root["norm_topk_prob"] = config.moe->normalize;
}
}  // namespace

extern const Architecture olmoe_architecture{"olmoe", "OlmoeForCausalLM", kOlmoeKeys, read_olmoe, false, write_olmoe};

}  // namespace lazygraph::nn::detail
