#pragma once
/// \file
/// Private to src/nn: the architecture seam. Each architecture lazygraph runs is one file here, named after its
/// model_type (llama.cpp, mistral.cpp, qwen2.cpp, qwen3.cpp, qwen3_moe.cpp...), that declares what its config.json
/// holds beyond the keys every architecture shares (which config_json.cpp reads): those keys, read and checked, and the
/// block's features they set in LlamaConfig (q, k and v biases, q/k norms, the attention window). A key no file and no
/// shared list reads is refused by name (the model might compute something else without it). docs/adding.md has the
/// checklist for a new architecture.

#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <lazygraph/nn/llama_config.hpp>

#include "../detail/config_reader.hpp"

namespace lazygraph::nn::detail {

/// What one architecture's file declares.
struct Architecture {
  std::string_view model_type;             ///< config.json's model_type
  std::string_view class_name;             ///< the transformers class its `architectures` list names
  std::span<const std::string_view> keys;  ///< the config keys `read` reads, beyond the shared ones
  /// Reads those keys into `config`, which holds the shared ones already, and sets the block's features; refuses
  /// (reader.fail, naming the key) a value whose arithmetic lazygraph does not implement.
  void (*read)(const ConfigReader& reader, LlamaConfig& config);
  /// Whether `read` reads the RoPE keys itself (rope_parameters of another form: Gemma 3's per layer type) instead
  /// of the shared reader.
  bool reads_rope = false;
  /// Writes what `read` reads back into config.json's `root` (LlamaConfig::to_json), or null when the shared keys
  /// say it all.
  void (*write)(const LlamaConfig& config, nlohmann::json& root) = nullptr;
};

/// Every architecture lazygraph runs, in the order messages list them.
[[nodiscard]] std::span<const Architecture* const> architectures() noexcept;

/// The architecture of `model_type`, or null.
[[nodiscard]] const Architecture* find_architecture(std::string_view model_type) noexcept;

/// layer_types: per layer, whether it is sliding_attention (else full_attention; any other type refused by name);
/// nullopt when absent. \throws CheckpointError naming the key for a list of another length than the layers.
[[nodiscard]] std::optional<std::vector<bool>> read_layer_types(const ConfigReader& reader, const LlamaConfig& config);

/// The attention window of the files that have one: sliding_window on the layers layer_types marks sliding_attention,
/// or where it is absent on every layer (`always`, Mistral's), or with use_sliding_window on the layers from
/// max_window_layers on (Qwen's rule); none where no layer slides. Reads sliding_window, use_sliding_window,
/// max_window_layers and layer_types.
void read_window(const ConfigReader& reader, LlamaConfig& config, bool always);

/// One RoPE object of config.json, `object` at `key` (rope_parameters, rope_scaling, or a part of Gemma 3's
/// rope_parameters): its rope_type (default, linear or llama3) and parameters, each checked and any other refused by
/// name; rope_theta is one of its keys where `holds_theta` (read it apart).
[[nodiscard]] RopeScaling read_rope_object(const ConfigReader& reader, const nlohmann::json& object,
                                           std::string_view key, bool holds_theta);

/// Refuses attention_bias true: in this architecture it also gives o_proj a bias, which lazygraph does not implement.
void refuse_output_bias(const ConfigReader& reader, const LlamaConfig& config);

/// The most experts a mixture of experts' layer may have (num_experts).
inline constexpr int kMaxExperts = 1024;

/// The keys every mixture of experts' file reads: the expert count, num_experts or num_local_experts (transformers
/// writes either name for either class; both given must agree), and num_experts_per_tok (at most the experts), into
/// config.moe with `expert_width`; the file sets `normalize`. \throws CheckpointError naming the key.
void read_moe(const ConfigReader& reader, LlamaConfig& config, int expert_width);

/// Writes config.moe's counts back as read_moe reads them (num_experts, num_experts_per_tok), for `write`.
void write_moe(const LlamaConfig& config, nlohmann::json& root);

}  // namespace lazygraph::nn::detail
