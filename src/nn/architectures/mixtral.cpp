// Mixtral (MixtralForCausalLM): Mistral's block (an attention window on every layer where sliding_window is set) with a
// mixture of experts in place of every layer's MLP: num_local_experts SwiGLU experts of width intermediate_size, the
// top num_experts_per_tok of the router's softmax, always renormalized over the chosen ones (the softmax of their
// logits). router_jitter_noise (noise on the logits in training), output_router_logits and router_aux_loss_coef are
// training-only.
#include "architecture.hpp"

namespace lazygraph::nn::detail {

namespace {
constexpr std::string_view kMixtralKeys[] = {"sliding_window",      "num_local_experts",    "num_experts",
                                             "num_experts_per_tok", "output_router_logits", "router_aux_loss_coef",
                                             "router_jitter_noise", "layer_types"};

void read_mixtral(const ConfigReader& reader, LlamaConfig& config) {
  read_window(reader, config, true);
  read_moe(reader, config, config.intermediate_size);
  config.moe->normalize = true;
  config.moe->names = MoeTensorNames::block_sparse_moe;
}

void write_mixtral(const LlamaConfig& config, nlohmann::json& root) {
  root.erase("attention_bias");  // not keys of Mixtral's: its window is on every layer where set
  root.erase("use_sliding_window");
  write_moe(config, root);
  if (config.moe) {  // Mixtral's own name for the count
    root["num_local_experts"] = root["num_experts"];
    root.erase("num_experts");
  }
}
}  // namespace

extern const Architecture mixtral_architecture{"mixtral", "MixtralForCausalLM", kMixtralKeys, read_mixtral,
                                               false,     write_mixtral};

}  // namespace lazygraph::nn::detail
