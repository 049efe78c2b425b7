#pragma once
/// \file
/// CheckpointError: what every reader of a model's files (safetensors, index, config.json, generation_config.json,
/// tokenizer files) throws for a file that is missing, unreadable or malformed.

#include <filesystem>
#include <string>
#include <string_view>

#include "lazygraph/driver/error.hpp"

namespace lazygraph::nn {

/// A checkpoint file (safetensors, index or config.json) is missing, unreadable or malformed, or lacks a tensor,
/// or a tensor has another dtype or shape than the caller required. The message names the file, the tensor (if the
/// problem is about one) and what was expected against what was found.
class CheckpointError : public Error {
 public:
  /// Builds the message "file <file>: tensor <tensor>: <problem>" ("file <file>: <problem>" when `tensor` is
  /// empty). Control characters of `tensor` (a name from a file may hold any) are written as `\xNN` in the message,
  /// so that it is not cut at a NUL; tensor() returns the name as given.
  CheckpointError(std::filesystem::path file, std::string tensor, std::string_view problem);

  /// The file the problem is in.
  [[nodiscard]] const std::filesystem::path& file() const noexcept { return file_; }
  /// The tensor the problem is about; empty when it is not about one tensor.
  [[nodiscard]] const std::string& tensor() const noexcept { return tensor_; }

 private:
  std::filesystem::path file_;
  std::string tensor_;
};

}  // namespace lazygraph::nn
