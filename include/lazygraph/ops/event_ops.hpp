#pragma once
/// \file
/// record_event(e) and wait_event(e) as ops: order a graph (or a stream) against work outside it. Recorded,
/// they become event record and event wait nodes; run eagerly, cuEventRecord and cuStreamWaitEvent.
///
/// The ops share ownership of the event, so a graph that records one keeps it alive.

#include <memory>
#include <utility>

#include "lazygraph/driver/error.hpp"
#include "lazygraph/driver/stream.hpp"
#include "lazygraph/ops/concepts.hpp"

namespace lazygraph {

/// Records or waits for an event (see the file comment). A GraphNode.
template <bool Wait>
class [[nodiscard]] EventOp : public OpBase<EventOp<Wait>> {
 public:
  /// No output.
  using Output = void;
  /// A GraphNode: an event node allocates nothing and touches no host memory.
  static constexpr bool is_graph_node = true;
  /// Submits through the ExecContext.
  static constexpr bool builds_without_capture = true;

  /// \throws UsageError for a null event.
  explicit EventOp(std::shared_ptr<const Event> event) : event_(std::move(event)) {
    if (!event_ || event_->get() == nullptr) {
      throw UsageError(Wait ? "wait_event: the event is null or moved-from"
                            : "record_event: the event is null or moved-from");
    }
  }
  /// Submits the record or the wait.
  void execute(ExecContext& ctx) const {
    ctx.keep_alive(event_);
    if constexpr (Wait) {
      ctx.wait_event(event_->get());
    } else {
      ctx.record_event(event_->get());
    }
  }

 private:
  std::shared_ptr<const Event> event_;
};

/// Records `event` when the work before this op has completed (an event record node in a graph).
[[nodiscard]] inline EventOp<false> record_event(std::shared_ptr<const Event> event) {
  return EventOp<false>(std::move(event));
}
/// Makes the work after this op wait for what `event` last recorded (an event wait node in a graph).
[[nodiscard]] inline EventOp<true> wait_event(std::shared_ptr<const Event> event) {
  return EventOp<true>(std::move(event));
}

}  // namespace lazygraph
