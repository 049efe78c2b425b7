// Capture submission: the current stream is capturing, so every piece of work becomes a node of the graph being
// captured. What stream capture has no call for (an empty node, a child graph, a conditional node, the edges of a
// dataflow) is added to the capture through the driver layer's capture calls (detail/driver/capture.hpp).
#include <memory>
#include <optional>
#include <vector>

#include "lazygraph/detail/driver/capture.hpp"
#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/detail/ops/submission.hpp"
#include "lazygraph/driver/error.hpp"
#include "stream_submission.hpp"

namespace lazygraph::detail {
namespace {

class CaptureSubmission final : public StreamSubmission {
 public:
  using StreamSubmission::StreamSubmission;

  [[nodiscard]] bool recording() const noexcept override { return true; }

  void host_function(CUhostFn fn, void* data, std::string_view /*name*/) override {
    // A node: the graph keeps `data`'s owner.
    driver::launch_host_function(current_->device().context(), current_->get(), fn, data);
  }
  void join() override {
    CUgraphNodeParams params{};
    params.type = CU_GRAPH_NODE_TYPE_EMPTY;
    driver::capture_add_node(current_->device().context(), current_->get(), &params, "join");
  }
  void record_event(CUevent event) override {
    driver::event_record_with_flags(current_->device().context(), event, current_->get(), CU_EVENT_RECORD_EXTERNAL);
  }
  void wait_event(CUevent event) override {
    driver::stream_wait_event_with_flags(current_->device().context(), current_->get(), event, CU_EVENT_WAIT_EXTERNAL);
  }
  void child_graph(CUgraph graph) override {
    CUgraphNodeParams params{};
    params.type = CU_GRAPH_NODE_TYPE_GRAPH;
    params.graph.graph = graph;
    driver::capture_add_node(current_->device().context(), current_->get(), &params, "child graph");
  }
  void conditional(CUgraphConditionalHandle handle, CUgraphConditionalNodeType type, unsigned size,
                   const BodyRecorder& body) override;

  void begin_dataflow(std::size_t count) override;
  void enter_piece(std::span<const std::uint32_t> after) override;
  void leave_piece(std::size_t index) override;
  void end_dataflow(std::span<const std::vector<std::uint32_t>> after) override;

 protected:
  void forked(const Stream& side, bool reused) override {
    // A side stream an earlier fork of this capture used still depends on its last node there: start it from the
    // fork point alone, as a built graph does.
    if (reused) driver::capture_fork_from(current_->device().context(), current_->get(), side.get());
  }

 private:
  /// Where each piece of a run_dataflow ended.
  struct Dataflow {
    driver::CapturePoint start;              ///< where the capture stood before the first piece
    std::vector<driver::CapturePoint> ends;  ///< where each piece left it
  };
  std::vector<Dataflow> flows_;  ///< the dataflows in progress, innermost last
};

void CaptureSubmission::conditional(CUgraphConditionalHandle handle, CUgraphConditionalNodeType type, unsigned size,
                                    const BodyRecorder& body) {
  const CUcontext ctx = current_->device().context();
  const std::vector<CUgraph> bodies = driver::capture_add_conditional(ctx, current_->get(), handle, type, size);
  for (unsigned i = 0; i < size; ++i) {
    // Each body is captured on a stream of its own straight into the body graph (which belongs to the graph being
    // captured, so that a nested conditional may use its conditions). The body's submission outlives its capture:
    // its fork streams and events take part in it until it ends. The node owns the body graph: nothing here
    // destroys it, and a failed body leaves it to the enclosing capture, which fails too.
    const Stream side = Stream::pooled(current_->device());
    driver::capture_begin_to_graph(ctx, side.get(), bodies[i], CU_STREAM_CAPTURE_MODE_RELAXED);
    CUgraph captured = nullptr;
    std::optional<CaptureSubmission> inner;
    try {
      inner.emplace(side);
      body(i, *inner);
    } catch (...) {
      (void)driver::capture_end_no_throw(side.get(), &captured);
      throw;
    }
    const CUresult r = driver::capture_end_no_throw(side.get(), &captured);
    inner.reset();
    if (r != CUDA_SUCCESS || captured == nullptr) {
      driver::throw_error(r != CUDA_SUCCESS ? r : CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "cuStreamEndCapture",
                          "conditional body");
    }
    // A body may hold no event node, and lazygraph records none there (GraphRecording refuses them); a collective
    // brings NCCL's, which order its captured work against its eager work on the communicator. They become empty
    // nodes, and the stream the graph runs on orders that work instead (graph/conditional.hpp).
    (void)driver::graph_replace_event_nodes(bodies[i]);
  }
}

void CaptureSubmission::begin_dataflow(std::size_t count) {
  Dataflow& flow = flows_.emplace_back();
  flow.start = driver::capture_point(current_->device().context(), current_->get());
  flow.ends.resize(count);
}

void CaptureSubmission::enter_piece(std::span<const std::uint32_t> after) {
  const Dataflow& flow = flows_.back();
  driver::CapturePoint start;
  if (after.empty()) {
    start = flow.start;
  } else {
    for (const std::uint32_t p : after) start.merge(flow.ends[p]);
  }
  driver::capture_resume_from(current_->device().context(), current_->get(), start);
}

void CaptureSubmission::leave_piece(std::size_t index) {
  flows_.back().ends[index] = driver::capture_point(current_->device().context(), current_->get());
}

void CaptureSubmission::end_dataflow(std::span<const std::vector<std::uint32_t>> after) {
  const Dataflow flow = std::move(flows_.back());
  flows_.pop_back();
  if (after.empty()) return;
  const std::vector<bool> unfollowed = unfollowed_pieces(after);
  driver::CapturePoint end;
  for (std::size_t i = 0; i < after.size(); ++i) {
    if (unfollowed[i]) end.merge(flow.ends[i]);
  }
  driver::capture_resume_from(current_->device().context(), current_->get(), end);
}

}  // namespace

std::unique_ptr<Submission> capture_submission(const Stream& stream) {
  return std::make_unique<CaptureSubmission>(stream);
}

}  // namespace lazygraph::detail
