#include "lazygraph/graph/node_kind.hpp"

namespace lazygraph {

const char* to_string(NodeKind kind) noexcept {
  switch (kind) {
    case NodeKind::kernel:
      return "kernel";
    case NodeKind::memcpy:
      return "memcpy";
    case NodeKind::memset:
      return "memset";
    case NodeKind::host:
      return "host";
    case NodeKind::child_graph:
      return "child_graph";
    case NodeKind::empty:
      return "empty";
    case NodeKind::wait_event:
      return "wait_event";
    case NodeKind::event_record:
      return "event_record";
    case NodeKind::other:
      return "other";
  }
  return "other";
}

}  // namespace lazygraph
