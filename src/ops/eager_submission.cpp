// Eager submission: every piece of work runs on the current stream (sync_on, CudaGraph::update). Joins and
// dataflow orderings need nothing: one stream orders the work, and run_dataflow runs its pieces in order.
#include <memory>

#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/detail/ops/submission.hpp"
#include "lazygraph/driver/error.hpp"
#include "stream_submission.hpp"

namespace lazygraph::detail {
namespace {

class EagerSubmission final : public StreamSubmission {
 public:
  using StreamSubmission::StreamSubmission;

  [[nodiscard]] bool recording() const noexcept override { return false; }
  [[nodiscard]] bool submitted_host_calls() const noexcept override { return host_calls_; }

  void host_function(CUhostFn fn, void* data, std::string_view /*name*/) override {
    driver::launch_host_function(current_->device().context(), current_->get(), fn, data);
    host_calls_ = true;
  }
  void join() override {}
  void record_event(CUevent event) override {
    driver::event_record(current_->device().context(), event, current_->get());
  }
  void wait_event(CUevent event) override {
    driver::stream_wait_event_with_flags(current_->device().context(), current_->get(), event, 0);
  }
  void child_graph(CUgraph /*graph*/) override {
    throw UsageError("a child graph is a node of another graph; launch it instead");
  }
  void conditional(CUgraphConditionalHandle /*handle*/, CUgraphConditionalNodeType /*type*/, unsigned /*size*/,
                   const BodyRecorder& /*body*/) override {
    throw UsageError("a conditional node belongs to a graph; record it with CudaGraph::scope, capture or build");
  }
  void begin_dataflow(std::size_t /*count*/) override {}
  void enter_piece(std::span<const std::uint32_t> /*after*/) override {}
  void leave_piece(std::size_t /*index*/) override {}
  void end_dataflow(std::span<const std::vector<std::uint32_t>> /*after*/) override {}

 private:
  bool host_calls_ = false;
};

}  // namespace

std::unique_ptr<Submission> eager_submission(const Stream& stream) { return std::make_unique<EagerSubmission>(stream); }

}  // namespace lazygraph::detail
