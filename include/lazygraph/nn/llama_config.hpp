#pragma once
/// \file
/// The hyperparameters of a Hugging Face Llama model, read from its config.json, for the lazygraph::nn layer.
///
/// Only what a plain Llama decoder needs is read; keys lazygraph cannot honour (rope_scaling, an activation other
/// than silu) are refused rather than ignored, so a model never loads with silently wrong arithmetic.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <lazygraph/nn/safetensors.hpp>

namespace lazygraph::nn {

/// The config.json of a Llama model. Every count is positive once parse() or load() returned it.
struct LlamaConfig {
  int hidden_size = 0;                 ///< width of the residual stream (required key)
  int num_attention_heads = 0;         ///< query heads (required key)
  int num_key_value_heads = 0;         ///< key/value heads; num_attention_heads when the key is absent
  int num_hidden_layers = 0;           ///< decoder layers (required key)
  int intermediate_size = 0;           ///< width of the MLP (required key)
  int vocab_size = 0;                  ///< rows of the embedding (required key)
  int max_position_embeddings = 2048;  ///< longest sequence; 2048 (the transformers default) when absent
  double rope_theta = 10000;           ///< RoPE base; 10000 when absent
  double rms_norm_eps = 1e-5;          ///< RMSNorm epsilon; 1e-5 when absent
  std::string torch_dtype;             ///< e.g. "bfloat16"; empty when absent or null
  bool tie_word_embeddings = false;    ///< whether lm_head shares the embedding's weights
  std::string hidden_act = "silu";     ///< the MLP activation; only "silu" is accepted
  std::optional<int> head_dim;         ///< per-head width when given; else hidden_size / num_attention_heads

  /// The per-head width: head_dim when set, else hidden_size / num_attention_heads. Precondition: the config
  /// is valid (num_attention_heads > 0), as parse() and load() return it.
  [[nodiscard]] int head_dimension() const noexcept {
    return head_dim.has_value() ? *head_dim : hidden_size / num_attention_heads;
  }

  /// Parses the text of a config.json; `source` only names the file in errors. Throws CheckpointError naming
  /// `source` and the key when the text is not a JSON object, a required key (hidden_size, num_attention_heads,
  /// num_hidden_layers, intermediate_size, vocab_size) is missing, a count is not a positive integer that fits an
  /// int, rope_theta or rms_norm_eps is not a positive number, torch_dtype or hidden_act is not a string,
  /// tie_word_embeddings is not a boolean, hidden_act is not "silu", rope_scaling is present and not null,
  /// num_attention_heads is not a multiple of num_key_value_heads, or (without head_dim) hidden_size is not a
  /// multiple of num_attention_heads. Other keys are ignored.
  [[nodiscard]] static LlamaConfig parse(std::string_view json_text, const std::filesystem::path& source);

  /// Reads and parses `file_or_dir` (a folder means its config.json). Throws CheckpointError when the file cannot
  /// be read (with strerror) or parse() refuses it.
  [[nodiscard]] static LlamaConfig load(const std::filesystem::path& file_or_dir);

  /// This config as config.json text (model_type "llama", indented), which parse() reads back to an equal config.
  /// head_dim is written only when set, torch_dtype only when not empty.
  [[nodiscard]] std::string to_json() const;

  /// Whether every field is equal.
  friend bool operator==(const LlamaConfig&, const LlamaConfig&) = default;
};

}  // namespace lazygraph::nn
