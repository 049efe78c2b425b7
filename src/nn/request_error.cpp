#include "lazygraph/nn/request_error.hpp"

#include <utility>

namespace lazygraph::nn {

RequestError::RequestError(std::string field, std::string_view problem)
    : Error(field + ": " + std::string(problem)), field_(std::move(field)) {}

}  // namespace lazygraph::nn
