#include "lazygraph/graph/graph_options.hpp"

namespace lazygraph {

const char* to_string(UpdateStatus status) noexcept {
  switch (status) {
    case UpdateStatus::applied:
      return "applied";
    case UpdateStatus::reinstantiated:
      return "reinstantiated";
    case UpdateStatus::topology_changed:
      return "topology_changed";
    case UpdateStatus::node_type_changed:
      return "node_type_changed";
    case UpdateStatus::function_changed:
      return "function_changed";
    case UpdateStatus::parameters_changed:
      return "parameters_changed";
    case UpdateStatus::attributes_changed:
      return "attributes_changed";
    case UpdateStatus::not_supported:
      return "not_supported";
  }
  return "not_supported";
}

}  // namespace lazygraph
