#pragma once
/// \file
/// Private to src/nn: the architecture seam. Each architecture lazygraph runs is one file here, named after its
/// model_type (llama.cpp, mistral.cpp, qwen2.cpp, qwen3.cpp), that declares what its config.json holds beyond the keys
/// every architecture shares (which llama_config.cpp reads): those keys, read and checked, and the block's features
/// they set in LlamaConfig (q, k and v biases, q/k norms, the attention window). A key no file and no shared list
/// reads is refused by name (the model might compute something else without it). docs/adding.md has the checklist
/// for a new architecture.

#include <span>
#include <string_view>

#include <lazygraph/nn/llama_config.hpp>

#include "../detail/config_reader.hpp"

namespace lazygraph::nn::detail {

/// What one architecture's file declares.
struct Architecture {
  std::string_view model_type;              ///< config.json's model_type
  std::string_view class_name;              ///< the transformers class its `architectures` list names
  std::span<const std::string_view> keys;   ///< the config keys `read` reads, beyond the shared ones
  /// Reads those keys into `config`, which holds the shared ones already, and sets the block's features; refuses
  /// (reader.fail, naming the key) a value whose arithmetic lazygraph does not implement.
  void (*read)(const ConfigReader& reader, LlamaConfig& config);
};

/// Every architecture lazygraph runs, in the order messages list them.
[[nodiscard]] std::span<const Architecture* const> architectures() noexcept;

/// The architecture of `model_type`, or null.
[[nodiscard]] const Architecture* find_architecture(std::string_view model_type) noexcept;

/// The attention window of the files that have one: `sliding_window` when it applies (`always`, as Mistral's does;
/// else when `use_sliding_window` is true or `layer_types` names sliding_attention), checking layer_types; nullopt
/// otherwise. Reads sliding_window, use_sliding_window and layer_types.
void read_window(const ConfigReader& reader, LlamaConfig& config, bool always);

/// Refuses attention_bias true: in this architecture it also gives o_proj a bias, which lazygraph does not implement.
void refuse_output_bias(const ConfigReader& reader, const LlamaConfig& config);

}  // namespace lazygraph::nn::detail
