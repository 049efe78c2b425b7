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

}  // namespace lazygraph::nn::detail
