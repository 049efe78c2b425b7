#include "lazygraph/detail/graph/graph_recording.hpp"

#include <algorithm>
#include <string>

#include "lazygraph/detail/driver/capture.hpp"
#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/driver/error.hpp"

namespace lazygraph::detail {

namespace {

void check_conditional_supported(CUgraphConditionalNodeType type, unsigned size) {
  const bool needs_12_8 = type == CU_GRAPH_COND_TYPE_SWITCH || size > 1;
  if (!needs_12_8) return;
  const int version = driver::driver_version();
  if (version < 12080) {
    throw UsageError("if_else and switch_ need a CUDA driver for CUDA 12.8 or newer; this one supports CUDA " +
                     std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10));
  }
}

const char* conditional_name(CUgraphConditionalNodeType type) {
  return type == CU_GRAPH_COND_TYPE_WHILE ? "while_" : type == CU_GRAPH_COND_TYPE_SWITCH ? "switch_" : "if_";
}

}  // namespace

GraphRecording::GraphRecording(ExecContext& ctx) noexcept : ctx_(ctx) { ExecContextAccess::attach(ctx, this); }

GraphRecording::GraphRecording(ExecContext& ctx, GraphRecording& root, const char* body_of) noexcept
    : ctx_(ctx), root_(&root), body_of_(body_of) {
  ExecContextAccess::attach(ctx, this);
}

GraphRecording::~GraphRecording() {
  if (ExecContextAccess::hooks(ctx_) == this) ExecContextAccess::attach(ctx_, nullptr);
}

GraphRecording& GraphRecording::of(ExecContext& ctx, std::string_view what) {
  auto* recording = dynamic_cast<GraphRecording*>(ExecContextAccess::hooks(ctx));
  if (recording == nullptr) {
    throw UsageError(std::string(what) +
                     ", not work to run eagerly: record it with CudaGraph::scope, capture or build");
  }
  return *recording;
}

CUgraphConditionalHandle GraphRecording::make_condition(unsigned default_value) {
  if (body_of_ != nullptr) {
    throw UsageError(std::string("Scope::condition inside the body of ") + body_of_ +
                     ": make every condition before the conditional ops, in the scope itself");
  }
  const CUcontext context = ctx_.stream().device().context();
  CUgraphConditionalHandle handle = 0;
  if (NodePlan* plan = ExecContextAccess::submission(ctx_).plan(); plan != nullptr) {
    const std::size_t k = plan->conditions.size();
    if (graph_ != nullptr) {
      handle = driver::conditional_handle_create(context, graph_, default_value);
    } else if (reused_conditions_ != nullptr) {
      if (k < reused_conditions_->size() && (*reused_conditions_)[k].default_value == default_value) {
        handle = (*reused_conditions_)[k].handle;
      }
    } else {
      throw UsageError("GraphRecording::make_condition: this plan has no graph to make conditions for");
    }
    plan->conditions.push_back({handle, default_value});
  } else {
    handle =
        driver::conditional_handle_create(context, driver::capture_graph(context, ctx_.stream().get()), default_value);
  }
  unconsumed_conditions_.push_back(handle);
  ++conditions_made_;
  return handle;
}

void GraphRecording::check_conditions_consumed() const {
  if (!unconsumed_conditions_.empty()) {
    throw UsageError(std::to_string(unconsumed_conditions_.size()) +
                     " condition(s) made by Scope::condition steer no if_, if_else, while_ or switch_ of the graph; "
                     "CUDA cannot instantiate a graph with an unused condition: record the conditional op, or make "
                     "no condition");
  }
}

ScratchAllocation GraphRecording::scratch(std::size_t bytes) {
  if (body_of_ != nullptr) {
    throw UsageError(std::string("Scope::scratch inside the body of ") + body_of_ +
                     ": CUDA allows no memory nodes there; ask for scratch memory in the scope itself");
  }
  if (bytes == 0) throw UsageError("Scope::scratch of 0 elements: a graph allocation needs at least one byte");
  const Stream& stream = ctx_.stream();
  CUdeviceptr address = 0;
  if (NodePlan* plan = ExecContextAccess::submission(ctx_).plan(); plan != nullptr) {
    const std::size_t k = plan->scratch.size();
    PlannedScratch planned;
    planned.bytes = bytes;
    if (reused_scratch_ != nullptr) {
      if (k < reused_scratch_->size() && (*reused_scratch_)[k].bytes == bytes) planned = (*reused_scratch_)[k];
    } else if (graph_ != nullptr) {
      CUgraphNodeParams p{};
      p.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
      p.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
      p.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      p.alloc.poolProps.location.id = stream.device().ordinal();
      p.alloc.bytesize = bytes;
      planned.node = driver::graph_add_node(graph_, nullptr, nullptr, 0, &p, "scratch");
      planned.address = p.alloc.dptr;
    } else {
      throw UsageError("GraphRecording::scratch: this plan has no graph to allocate in");
    }
    plan->scratch.push_back(planned);
    address = planned.address;
  } else {
    address = driver::memory_allocate_async(stream.device().context(), bytes, stream.get(), "scratch");
    scratch_to_free_.push_back(address);
  }
  if (!scratch_tag_) scratch_tag_ = std::make_shared<const int>(0);
  scratch_bytes_ += bytes;
  return {address, std::shared_ptr<const void>(scratch_tag_, &scratch_marker)};
}

void GraphRecording::finish_scratch() {
  const Stream& stream = ctx_.stream();
  while (!scratch_to_free_.empty()) {
    driver::memory_free_async(stream.device().context(), scratch_to_free_.back(), stream.get(), "scratch");
    scratch_to_free_.pop_back();
  }
}

void GraphRecording::child_graph(CUgraph graph) { ExecContextAccess::submission(ctx_).child_graph(graph); }

void GraphRecording::conditional(CUgraphConditionalHandle handle, CUgraphConditionalNodeType type, unsigned size,
                                 const std::function<void(unsigned, ExecContext&)>& body) {
  check_conditional_supported(type, size);
  std::erase(root_->unconsumed_conditions_, handle);
  ExecContextAccess::submission(ctx_).conditional(handle, type, size, [&](unsigned index, Submission& submission) {
    ExecContext inner = ExecContextAccess::over(submission, ctx_.host_errors());
    const GraphRecording recording(inner, *root_, conditional_name(type));
    body(index, inner);
    for (const auto& owner : inner.take_owners()) ctx_.keep_alive(owner);
  });
}

void GraphRecording::check_scratch(const std::shared_ptr<const void>& owner) const {
  const auto& mine = root_->scratch_tag_;
  if (!mine || owner.owner_before(mine) || mine.owner_before(owner)) {
    throw UsageError(
        "an op recorded into this graph uses scratch memory of another graph (Scope::scratch): scratch memory "
        "belongs to the graph whose scope made it; ask for it in this scope, or use a DeviceBuffer");
  }
}

void GraphRecording::count_host_transfer(std::size_t to_device, std::size_t to_host) noexcept {
  if (body_of_ != nullptr) return;
  bytes_to_device_ += to_device;
  bytes_to_host_ += to_host;
}

void GraphRecording::check_submittable(std::string_view what) const {
  if (body_of_ != nullptr) {
    throw UsageError(std::string(what) + " inside the body of " + body_of_ +
                     ": a conditional body may hold kernels, copies, fills and child graphs only");
  }
}

}  // namespace lazygraph::detail
