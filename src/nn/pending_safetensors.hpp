#pragma once
/// \file
/// Private to src/nn: a safetensors file written and flushed under a temporary name, for the savers that rename
/// several files into place together (model_folder.hpp). Defined beside write_safetensors in safetensors.cpp. Not
/// installed.

#include <filesystem>
#include <map>
#include <span>
#include <string>

#include "pending_file.hpp"

namespace lazygraph::nn {
struct TensorToWrite;  // lazygraph/nn/safetensors.hpp
}  // namespace lazygraph::nn

namespace lazygraph::nn::detail {

/// The file write_safetensors writes as `path`, written under a temporary name and flushed to disk, not yet renamed
/// over `path`. \throws CheckpointError as write_safetensors does.
[[nodiscard]] PendingFile write_pending_safetensors(const std::filesystem::path& path,
                                                    std::span<const TensorToWrite> tensors,
                                                    const std::map<std::string, std::string>& metadata);

}  // namespace lazygraph::nn::detail
