// Plan submission: nothing is submitted; each piece of work becomes a NodePlan node that depends on the frontier
// (the nodes the work before it ended with), as stream capture would record it. fork_join's branches all start
// from the fork point and the join depends on each branch's last nodes; a dataflow piece starts from the last
// nodes of the pieces it follows.
#include <algorithm>
#include <memory>
#include <vector>

#include "lazygraph/detail/ops/node_plan.hpp"
#include "lazygraph/detail/ops/submission.hpp"
#include "lazygraph/ops/exec_context.hpp"

namespace lazygraph::detail {
namespace {

/// Appends `nodes` to `into`, each once.
void add_unique(std::vector<std::uint32_t>& into, std::span<const std::uint32_t> nodes) {
  for (const std::uint32_t n : nodes) {
    if (std::find(into.begin(), into.end(), n) == into.end()) into.push_back(n);
  }
}

class PlanSubmission final : public Submission {
 public:
  PlanSubmission(const Stream& stream, NodePlan& plan) : Submission(stream), plan_(&plan) {
    plan.context = stream.device().context();
  }

  [[nodiscard]] bool recording() const noexcept override { return true; }
  [[nodiscard]] NodePlan* plan() noexcept override { return plan_; }

  void launch(const KernelSubmission& k) override {
    PlannedNode node = of_type(CU_GRAPH_NODE_TYPE_KERNEL);
    node.function = k.function;
    node.shape = k.shape;
    node.name = k.name;
    plan_->store_arguments(node, k.args, k.arg_sizes, k.arg_count);
    add(node);
  }
  void copy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) override {
    PlannedNode node = of_type(CU_GRAPH_NODE_TYPE_MEMCPY);
    node.dst = dst;
    node.src = src;
    node.bytes = bytes;
    add(node);
  }
  void copy_2d(const Copy2d& c) override {
    PlannedNode node = of_type(CU_GRAPH_NODE_TYPE_MEMCPY);
    node.dst = c.dst;
    node.dst_pitch = c.dst_pitch;
    node.src = c.src;
    node.src_pitch = c.src_pitch;
    node.bytes = c.width;
    node.rows = c.rows;
    add(node);
  }
  void copy_to_device(CUdeviceptr dst, const void* host, std::size_t bytes) override {
    PlannedNode node = of_type(CU_GRAPH_NODE_TYPE_MEMCPY);
    node.dst = dst;
    node.host = const_cast<void*>(host);  // NOLINT(cppcoreguidelines-pro-type-const-cast): the driver's field
    node.host_is_source = true;
    node.bytes = bytes;
    add(node);
  }
  void copy_to_host(void* host, CUdeviceptr src, std::size_t bytes) override {
    PlannedNode node = of_type(CU_GRAPH_NODE_TYPE_MEMCPY);
    node.src = src;
    node.host = host;
    node.bytes = bytes;
    add(node);
  }
  void fill(CUdeviceptr dst, unsigned pattern, std::size_t element_size, std::size_t count) override {
    PlannedNode node = of_type(CU_GRAPH_NODE_TYPE_MEMSET);
    node.dst = dst;
    node.pattern = pattern;
    node.element_size = static_cast<unsigned>(element_size);
    node.bytes = count;
    add(node);
  }
  void host_function(CUhostFn fn, void* data, std::string_view name) override {
    PlannedNode node = of_type(CU_GRAPH_NODE_TYPE_HOST);
    node.host_function = fn;
    node.host_data = data;
    node.name = name;
    add(node);
  }
  void join() override { add(of_type(CU_GRAPH_NODE_TYPE_EMPTY)); }
  void record_event(CUevent event) override {
    PlannedNode node = of_type(CU_GRAPH_NODE_TYPE_EVENT_RECORD);
    node.event = event;
    add(node);
  }
  void wait_event(CUevent event) override {
    PlannedNode node = of_type(CU_GRAPH_NODE_TYPE_WAIT_EVENT);
    node.event = event;
    add(node);
  }
  void child_graph(CUgraph graph) override {
    PlannedNode node = of_type(CU_GRAPH_NODE_TYPE_GRAPH);
    node.child = graph;
    add(node);
  }
  void conditional(CUgraphConditionalHandle handle, CUgraphConditionalNodeType type, unsigned size,
                   const BodyRecorder& body) override {
    PlannedNode node = of_type(CU_GRAPH_NODE_TYPE_CONDITIONAL);
    node.condition = handle;
    node.condition_type = type;
    node.first_body = static_cast<std::uint32_t>(plan_->bodies.size());
    node.body_count = size;
    // Each body's plan is an element of this plan's `bodies`, which does not grow while the body is recorded (a
    // nested conditional grows the body's own).
    plan_->bodies.resize(plan_->bodies.size() + size);
    for (unsigned i = 0; i < size; ++i) {
      PlanSubmission inner(*origin_, plan_->bodies[node.first_body + i]);
      body(i, inner);
    }
    add(node);
  }

  void begin_fork(std::size_t /*count*/) override { forks_.push_back({frontier_, {}}); }
  void enter_branch(std::size_t /*index*/) override { frontier_ = forks_.back().start; }
  void leave_branch() override { add_unique(forks_.back().joined, frontier_); }
  void end_fork() override {
    // The join depends on each branch's last nodes (a branch that added none contributes the fork point), as
    // stream capture's fork and join events make it.
    frontier_ = std::move(forks_.back().joined);
    forks_.pop_back();
  }

  void begin_dataflow(std::size_t count) override { flows_.push_back({frontier_, std::vector<Frontier>(count)}); }
  void enter_piece(std::span<const std::uint32_t> after) override {
    const Dataflow& flow = flows_.back();
    if (after.empty()) {
      frontier_ = flow.start;
      return;
    }
    frontier_.clear();
    for (const std::uint32_t p : after) add_unique(frontier_, flow.ends[p]);
  }
  void leave_piece(std::size_t index) override { flows_.back().ends[index] = frontier_; }
  void end_dataflow(std::span<const std::vector<std::uint32_t>> after) override {
    const Dataflow flow = std::move(flows_.back());
    flows_.pop_back();
    if (after.empty()) return;
    const std::vector<bool> unfollowed = unfollowed_pieces(after);
    frontier_.clear();
    for (std::size_t i = 0; i < after.size(); ++i) {
      if (unfollowed[i]) add_unique(frontier_, flow.ends[i]);
    }
  }

 private:
  using Frontier = std::vector<std::uint32_t>;
  struct Fork {
    Frontier start;   ///< the frontier every branch starts from
    Frontier joined;  ///< the union of the branches' frontiers
  };
  struct Dataflow {
    Frontier start;              ///< the frontier before the first piece
    std::vector<Frontier> ends;  ///< each piece's last nodes
  };

  static PlannedNode of_type(CUgraphNodeType type) {
    PlannedNode node;
    node.type = type;
    return node;
  }
  void add(const PlannedNode& node) { frontier_.assign(1, plan_->add(node, frontier_)); }

  NodePlan* plan_;
  Frontier frontier_;  ///< the nodes the next node depends on
  std::vector<Fork> forks_;
  std::vector<Dataflow> flows_;
};

}  // namespace

std::unique_ptr<Submission> plan_submission(const Stream& stream, NodePlan& plan) {
  return std::make_unique<PlanSubmission>(stream, plan);
}

}  // namespace lazygraph::detail
