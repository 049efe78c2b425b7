#pragma once
/// \file
/// GraphRecording: what only a graph being recorded has, next to the ExecContext that records it: its conditions
/// (Scope::condition), its scratch memory (Scope::scratch), the bytes its host copies move per replay, and the
/// nodes ops cannot submit through an ExecContext alone (child graphs, conditional nodes and their bodies).
/// CudaGraph makes one for each recording (captured or planned) and attaches it to the context; Scope and the
/// graph layer's ops find it there (of). A conditional body's context has one of its own that refers to the
/// outermost one (conditions and scratch memory belong to the whole graph).

#include <cuda.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "lazygraph/detail/ops/graph_access.hpp"
#include "lazygraph/detail/ops/node_plan.hpp"
#include "lazygraph/ops/exec_context.hpp"

namespace lazygraph::detail {

/// Memory that belongs to the graph being recorded (GraphRecording::scratch): its address, and the owner that marks
/// a span of it as scratch of this graph.
struct ScratchAllocation {
  /// The device address, fixed for the graph's life; the memory is valid only while the graph runs.
  CUdeviceptr address = 0;
  /// Give it to the spans of this memory (DeviceSpan's owner): ops that use them are checked against the graph.
  std::shared_ptr<const void> owner;
};

/// The graph-only state of one recording (see the file comment). Not copyable; lives no longer than its context.
class GraphRecording final : public GraphHooks {
 public:
  /// Records the graph `ctx` (capturing or planning) makes; `ctx` reports to this until it is destroyed.
  explicit GraphRecording(ExecContext& ctx) noexcept;
  GraphRecording(const GraphRecording&) = delete;
  GraphRecording& operator=(const GraphRecording&) = delete;
  ~GraphRecording();

  /// The recording `ctx` reports to. \throws UsageError starting with `what` (such as "if_ is a node of a graph")
  /// when it reports to none (an eager context).
  static GraphRecording& of(ExecContext& ctx, std::string_view what);

  /// A new condition of the graph, starting every launch at `default_value` (Scope::condition). Captured: made for
  /// the capture's graph. Planned: made for the graph given to make_conditions_in, or, when re-planning a built
  /// graph (reuse_conditions), the graph's own condition of the same position. Until a conditional node consumes
  /// it, check_conditions_consumed throws.
  /// \throws UsageError inside a conditional body, or in plan mode with neither of the two set.
  CUgraphConditionalHandle make_condition(unsigned default_value);
  /// Plan mode: conditions and scratch memory are made for `graph` (the graph that materialize will fill).
  void make_conditions_in(CUgraph graph) noexcept { graph_ = graph; }
  /// Plan mode, re-planning a built graph: condition k is `existing[k]` when its default value matches; otherwise a
  /// null handle that the plan's comparison reports (more conditions, or another default, need a new graph).
  void reuse_conditions(const std::vector<PlannedCondition>& existing) noexcept { reused_conditions_ = &existing; }
  /// \throws UsageError when a condition made for this graph steers no conditional node (CUDA refuses to
  /// instantiate such a graph).
  void check_conditions_consumed() const;
  /// How many conditions make_condition made.
  [[nodiscard]] std::size_t conditions_made() const noexcept { return conditions_made_; }

  /// `bytes` bytes of memory that belong to the graph (Scope::scratch): an allocation node before the work
  /// recorded after this call and a free node after all of it (captured: cuMemAllocAsync now, cuMemFreeAsync at
  /// finish_scratch; planned: an allocation node added to the graph given to make_conditions_in, or, re-planning a
  /// built graph, the graph's own scratch of the same position and size). Spans of it carry `owner`: an op that
  /// uses one eagerly, or in another graph, throws UsageError (ExecContext::keep_alive asks check_scratch).
  /// \throws UsageError inside a conditional body, for 0 bytes, or in plan mode with no graph to add to.
  ScratchAllocation scratch(std::size_t bytes);
  /// Plan mode, re-planning a built graph: scratch k is `existing[k]` when its size matches (otherwise address 0,
  /// which the plan's comparison reports), and spans of it are recognised by the graph's `tag`.
  void reuse_scratch(const std::vector<PlannedScratch>& existing, std::shared_ptr<const void> tag) noexcept {
    reused_scratch_ = &existing;
    scratch_tag_ = std::move(tag);
  }
  /// Capture mode: frees the scratch memory captured so far, after all the work captured so far (call it once the
  /// recording is complete, before the capture ends). Nothing in plan mode.
  void finish_scratch();
  /// What identifies this recording's scratch memory (null when it made none and reuses none).
  [[nodiscard]] const std::shared_ptr<const void>& scratch_tag() const noexcept { return scratch_tag_; }
  /// The bytes of scratch memory made (or reused).
  [[nodiscard]] std::size_t scratch_bytes() const noexcept { return scratch_bytes_; }

  /// The bytes the host copies recorded so far move per replay, host to device (copies inside conditional bodies,
  /// which may run any number of times, not counted).
  [[nodiscard]] std::size_t bytes_to_device() const noexcept { return bytes_to_device_; }
  /// See bytes_to_device.
  [[nodiscard]] std::size_t bytes_to_host() const noexcept { return bytes_to_host_; }

  /// Embeds a copy of `graph` as one node.
  void child_graph(CUgraph graph);
  /// A conditional node: IF, WHILE or SWITCH with `size` bodies, steered by the graph's condition `handle`.
  /// `body(i, ctx)` records body i through `ctx`, which captures into that body graph (on a stream of its own) or,
  /// when planning, writes it down as a plan nested in this one; what it keeps alive, the enclosing context keeps.
  /// A body may hold conditional nodes itself (their conditions are the outermost graph's, like every condition).
  /// \throws UsageError for a driver too old for `type` and `size` (naming its version).
  void conditional(CUgraphConditionalHandle handle, CUgraphConditionalNodeType type, unsigned size,
                   const std::function<void(unsigned, ExecContext&)>& body);

  void check_scratch(const std::shared_ptr<const void>& owner) const override;
  void count_host_transfer(std::size_t to_device, std::size_t to_host) noexcept override;
  void check_submittable(std::string_view what) const override;

 private:
  /// A conditional body's recording: `body_of` names the conditional op.
  GraphRecording(ExecContext& ctx, GraphRecording& root, const char* body_of) noexcept;

  ExecContext& ctx_;
  GraphRecording* root_ = this;    ///< the outermost recording (bodies' point to it)
  const char* body_of_ = nullptr;  ///< set for a conditional body: what CUDA refuses there is a UsageError
  CUgraph graph_ = nullptr;        ///< plan mode: where conditions and scratch memory are made
  const std::vector<PlannedCondition>* reused_conditions_ = nullptr;  ///< plan mode: a built graph's
  const std::vector<PlannedScratch>* reused_scratch_ = nullptr;       ///< plan mode: a built graph's
  std::vector<CUgraphConditionalHandle> unconsumed_conditions_;
  std::shared_ptr<const void> scratch_tag_;   ///< identifies the graph's scratch (its control block)
  std::vector<CUdeviceptr> scratch_to_free_;  ///< capture mode: until finish_scratch
  std::size_t scratch_bytes_ = 0;
  std::size_t conditions_made_ = 0;
  std::size_t bytes_to_device_ = 0;
  std::size_t bytes_to_host_ = 0;
};

}  // namespace lazygraph::detail
