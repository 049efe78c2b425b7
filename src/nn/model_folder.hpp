#pragma once
/// \file
/// Private to src/nn: saving a model folder (weights and config.json) so that no crash can leave it silently mixed.
/// save_quantized_checkpoint and save_seeded_checkpoint write through save_model_folder, write_safetensors_folder
/// too (without a config.json). Not installed.

#include <cstddef>
#include <map>
#include <optional>
#include <span>
#include <string>

#include <lazygraph/nn/safetensors.hpp>

#include "pending_file.hpp"
#include "pending_safetensors.hpp"

namespace lazygraph::nn::detail {

/// A new save identifier: 16 random lowercase hex digits.
[[nodiscard]] std::string new_save_id();

/// Writes `tensors` as write_safetensors_folder describes, each safetensors file's "__metadata__" and the index's
/// "metadata" holding kSaveIdKey: `save_id`, and, when `config_json` is given, config.json with that text (which
/// should hold the same id under kSaveIdKey: LlamaConfig::save_id). Every file is written under a temporary name
/// and flushed before any is renamed into place; safetensors.hpp's write_safetensors_folder says in which order
/// and why. \throws as write_safetensors_folder; UsageError when `metadata` holds kSaveIdKey.
void save_model_folder(const std::filesystem::path& directory, std::span<const TensorToWrite> tensors,
                       std::size_t max_shard_bytes, std::map<std::string, std::string> metadata,
                       const std::string& save_id, const std::optional<std::string>& config_json);

}  // namespace lazygraph::nn::detail
