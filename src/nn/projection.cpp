#include "lazygraph/nn/projection.hpp"

#include <string>

namespace lazygraph::nn::detail {

void check_projection(const char* what, const std::string& weight, int weight_rows, int weight_cols, int rows, int cols,
                      int batch) {
  if (weight_rows != rows || weight_cols != cols) {
    throw UsageError(std::string(what) + ": weight " + weight + " is " + std::to_string(weight_rows) + " x " +
                     std::to_string(weight_cols) + ", where " + std::to_string(rows) + " x " + std::to_string(cols) +
                     " is needed");
  }
  if (batch < 1 || batch > 8) {
    throw UsageError(std::string(what) + ": weight " + weight + ": a batch of " + std::to_string(batch) +
                     " rows is outside 1..8");
  }
}

void check_experts(const char* what, const std::string& weight, int weight_rows, int weight_cols, bool quantized,
                   int experts, int rows, int cols, int batch) {
  check_projection(what, weight, weight_rows, weight_cols, experts * rows, cols, batch);
  if (quantized && rows % QuantizedLayout::tile_rows != 0) {
    throw UsageError(std::string(what) + ": weight " + weight + " stacks " + std::to_string(experts) +
                     " quantized experts of " + std::to_string(rows) + " rows; a quantized expert is whole tiles of " +
                     std::to_string(QuantizedLayout::tile_rows) +
                     " rows (quantized.hpp), so its rows must be a multiple of 16");
  }
}

}  // namespace lazygraph::nn::detail
