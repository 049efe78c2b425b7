#pragma once
/// \file
/// The generation_config.json of a Hugging Face model folder: the special tokens that start and end a generation,
/// for programs that generate text (tools/lazygraph-run). Read with config.json's rules (llama_config.hpp): at most
/// 16 MiB, a regular file, one JSON object nested at most 64 levels deep, no key twice in one object, token ids
/// checked; the messages name the file and the key.
///
/// Only bos_token_id and eos_token_id are read. The file's other keys (do_sample, temperature, top_k, top_p,
/// max_length, pad_token_id, ...) are defaults a caller may choose otherwise; they change nothing the model computes,
/// so they are neither read nor refused.

#include <filesystem>
#include <optional>
#include <string_view>
#include <vector>

#include <lazygraph/nn/llama_config.hpp>

namespace lazygraph::nn {

/// The tokens that start and end a generation.
struct SpecialTokens {
  std::optional<int> bos;  ///< the token put in front of a prompt; nullopt: none
  std::vector<int> eos;    ///< the tokens that end a generation; empty: none

  /// Whether both are equal.
  friend bool operator==(const SpecialTokens&, const SpecialTokens&) = default;
};

/// The generation_config.json of a model. A key the file has overrides config.json's, also when its value is null
/// (which says "none"); a key it lacks, or a folder without the file, leaves config.json's in force.
struct GenerationConfig {
  /// The file it was read from; empty when load() found no generation_config.json in the folder.
  std::filesystem::path source;
  /// bos_token_id: nullopt when the key is absent; a nullopt inside when it is null; else the id.
  std::optional<std::optional<int>> bos_token_id;
  /// eos_token_id (one id or a list): nullopt when the key is absent; empty when it is null; else the ids.
  std::optional<std::vector<int>> eos_token_ids;

  /// Parses the text of a generation_config.json; `source` names the file in errors. Throws CheckpointError naming
  /// `source` (and the key) when the text is not a JSON object (LlamaConfig::parse's rules: valid JSON, no NUL byte,
  /// nested at most 64 levels, no key twice in one object); bos_token_id is not null or one token id; eos_token_id is
  /// not null, a token id or a list of at most 1024 of them (a token id: an integer from 0 to 2^24).
  [[nodiscard]] static GenerationConfig parse(std::string_view json_text, const std::filesystem::path& source);

  /// Reads and parses `file_or_dir`: a folder means its generation_config.json, and a folder without one gives a
  /// config with neither key (config.json's tokens apply). Throws CheckpointError when the file cannot be read (with
  /// strerror; a file named explicitly that does not exist included), is not a regular file, is larger than 16 MiB,
  /// or parse() refuses it.
  [[nodiscard]] static GenerationConfig load(const std::filesystem::path& file_or_dir);

  /// The tokens a generation with `model` (the folder's config.json) uses: each of this file's keys where it has it,
  /// else `model`'s bos_token_id and eos_token_ids. Throws CheckpointError naming this file and the key when an id it
  /// gives is not below `model`'s vocab_size (config.json's own ids are LlamaConfig's to check).
  [[nodiscard]] SpecialTokens special_tokens(const LlamaConfig& model) const;

  /// Whether every field is equal.
  friend bool operator==(const GenerationConfig&, const GenerationConfig&) = default;
};

}  // namespace lazygraph::nn
