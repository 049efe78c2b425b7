#include "lazygraph/nn/checkpoint_error.hpp"

#include <utility>

#include "printable.hpp"

namespace lazygraph::nn {

namespace {
std::string checkpoint_message(const std::filesystem::path& file, const std::string& tensor, std::string_view problem) {
  std::string message = "file " + file.string() + ": ";
  if (!tensor.empty()) message += "tensor " + detail::printable(tensor) + ": ";  // what() ends at a NUL
  message += problem;
  return message;
}
}  // namespace

CheckpointError::CheckpointError(std::filesystem::path file, std::string tensor, std::string_view problem)
    : Error(checkpoint_message(file, tensor, problem)), file_(std::move(file)), tensor_(std::move(tensor)) {}

}  // namespace lazygraph::nn
