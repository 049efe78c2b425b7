#include "lazygraph/ops/exec_context.hpp"

#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "lazygraph/detail/driver/capture.hpp"
#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/driver/error.hpp"

namespace lazygraph {

namespace drv = detail::driver;

void HostCallErrors::report(std::string_view name, std::exception_ptr error) noexcept {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (error_) return;
  error_ = std::move(error);
  try {
    name_.assign(name);
  } catch (...) {  // NOLINT(bugprone-empty-catch): the error itself is kept; only its label is lost
  }
  pending_.store(true, std::memory_order_release);
}

void HostCallErrors::watch(std::shared_ptr<HostCallErrors> other) {
  if (!other || other.get() == this) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& w : watched_) {
    if (w == other) return;
  }
  watched_.push_back(std::move(other));
  watching_.store(true, std::memory_order_release);
}

void HostCallErrors::rethrow_pending() {
  // Every replay asks: the common answer (nothing pending, no child graphs) costs two atomic loads, no lock.
  if (watching_.load(std::memory_order_acquire)) {
    std::vector<std::shared_ptr<HostCallErrors>> watched;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      watched = watched_;
    }
    for (const auto& w : watched) w->rethrow_pending();
  }
  if (!pending_.load(std::memory_order_acquire)) return;
  std::exception_ptr error;
  std::string name;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) return;
    error = std::exchange(error_, nullptr);
    name = std::move(name_);
    pending_.store(false, std::memory_order_relaxed);
  }
  std::string what = "an exception that is not a std::exception";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {  // NOLINT(bugprone-empty-catch): described above
  }
  throw HostCallError("host_call \"" + name + "\" threw while the stream or graph ran it: " + what);
}

ExecContext::ExecContext(const Stream& stream, bool recording, std::shared_ptr<HostCallErrors> host_errors)
    : current_(&stream), origin_(&stream), recording_(recording), host_errors_(std::move(host_errors)) {}

ExecContext::ExecContext(const Stream& stream, detail::NodePlan& plan, std::shared_ptr<HostCallErrors> host_errors)
    : current_(&stream), origin_(&stream), recording_(true), plan_(&plan), host_errors_(std::move(host_errors)) {
  plan.context = stream.device().context();
}

ExecContext::~ExecContext() {
  if (!eager_host_calls_ || owners_.empty()) return;
  try {
    origin_->synchronize();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a failed stream has stopped running its work, host calls included
  }
}

const std::shared_ptr<HostCallErrors>& ExecContext::host_errors() {
  if (!host_errors_) host_errors_ = std::make_shared<HostCallErrors>();
  return host_errors_;
}

void ExecContext::keep_alive(const std::shared_ptr<const void>& owner) {
  if (!owner) return;
  if (owner.get() == &detail::scratch_marker) [[unlikely]] {
    const auto& mine = root_->scratch_tag_;
    if (!recording_ || !mine || owner.owner_before(mine) || mine.owner_before(owner)) refuse_scratch();
  }
  // Consecutive ops mostly touch the same few buffers: skip owners among the last few kept (a cheap check that
  // keeps a long recording's list near the number of distinct buffers; duplicates further back are harmless).
  const std::size_t n = owners_.size();
  for (std::size_t i = n; i > 0 && i + 8 > n; --i) {
    if (owners_[i - 1] == owner) return;
  }
  owners_.push_back(owner);
}

void ExecContext::add_planned(detail::PlannedNode node) {
  const std::uint32_t index = plan_->add(node, frontier_);
  frontier_.assign(1, index);
}

void ExecContext::launch(const KernelSubmission& k) {
  if (plan_ != nullptr) {
    detail::PlannedNode node;
    node.type = CU_GRAPH_NODE_TYPE_KERNEL;
    node.function = k.function;
    node.shape = k.shape;
    node.name = k.name;
    plan_->store_arguments(node, k.args, k.arg_sizes, k.arg_count);
    add_planned(node);
    return;
  }
  if (observer_ != nullptr && !recording_) observer_->before(k, *current_, labels_);
  drv::launch_kernel(current_->device().context(), k.function, k.shape, current_->get(), k.args, k.name);
  if (observer_ != nullptr && !recording_) observer_->after(k, *current_);
}

void ExecContext::push_label(const std::string& label) {
  nvtxRangePushA(label.c_str());
  labels_.emplace_back(label);
}

void ExecContext::pop_label() noexcept {
  if (labels_.empty()) return;
  labels_.pop_back();
  nvtxRangePop();
}

void ExecContext::copy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) {
  if (bytes == 0) return;
  if (plan_ != nullptr) {
    detail::PlannedNode node;
    node.type = CU_GRAPH_NODE_TYPE_MEMCPY;
    node.dst = dst;
    node.src = src;
    node.bytes = bytes;
    add_planned(node);
    return;
  }
  drv::copy_device_to_device(current_->device().context(), dst, src, bytes, current_->get());
}

void ExecContext::copy_to_device(CUdeviceptr dst, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  count_host_transfer(bytes, 0);
  if (plan_ != nullptr) {
    detail::PlannedNode node;
    node.type = CU_GRAPH_NODE_TYPE_MEMCPY;
    node.dst = dst;
    node.host = const_cast<void*>(host);  // NOLINT(cppcoreguidelines-pro-type-const-cast): the driver's field
    node.host_is_source = true;
    node.bytes = bytes;
    add_planned(node);
    return;
  }
  drv::copy_host_to_device(current_->device().context(), dst, host, bytes, current_->get());
}

void ExecContext::copy_to_host(void* host, CUdeviceptr src, std::size_t bytes) {
  if (bytes == 0) return;
  count_host_transfer(0, bytes);
  if (plan_ != nullptr) {
    detail::PlannedNode node;
    node.type = CU_GRAPH_NODE_TYPE_MEMCPY;
    node.src = src;
    node.host = host;
    node.bytes = bytes;
    add_planned(node);
    return;
  }
  drv::copy_device_to_host(current_->device().context(), host, src, bytes, current_->get());
}

void ExecContext::fill(CUdeviceptr dst, unsigned pattern, std::size_t element_size, std::size_t count) {
  if (count == 0) return;
  if (plan_ != nullptr) {
    detail::PlannedNode node;
    node.type = CU_GRAPH_NODE_TYPE_MEMSET;
    node.dst = dst;
    node.pattern = pattern;
    node.element_size = static_cast<unsigned>(element_size);
    node.bytes = count;
    add_planned(node);
    return;
  }
  drv::fill(current_->device().context(), dst, pattern, element_size, count, current_->get());
}

void ExecContext::host_function(CUhostFn fn, void* data, std::string_view name) {
  refuse_in_body("a host call");
  if (plan_ != nullptr) {
    detail::PlannedNode node;
    node.type = CU_GRAPH_NODE_TYPE_HOST;
    node.host_function = fn;
    node.host_data = data;
    node.name = name;
    add_planned(node);
    return;
  }
  drv::launch_host_function(current_->device().context(), current_->get(), fn, data);
  if (!recording_) eager_host_calls_ = true;  // captured, it is a node: the graph keeps `data`'s owner
}

void ExecContext::child_graph(CUgraph graph) {
  if (plan_ != nullptr) {
    detail::PlannedNode node;
    node.type = CU_GRAPH_NODE_TYPE_GRAPH;
    node.child = graph;
    add_planned(node);
    return;
  }
  if (!recording_) {
    throw UsageError("ExecContext::child_graph: a child graph is a node of another graph; launch it instead");
  }
  CUgraphNodeParams params{};
  params.type = CU_GRAPH_NODE_TYPE_GRAPH;
  params.graph.graph = graph;
  drv::capture_add_node(current_->device().context(), current_->get(), &params, "child graph");
}

void ExecContext::check_conditional_supported(CUgraphConditionalNodeType type, unsigned size) const {
  if (!recording_) {
    throw UsageError(
        "run eagerly: if_, if_else, while_ and switch_ are nodes of a graph; record them with CudaGraph::scope, "
        "capture or build");
  }
  const bool needs_12_8 = type == CU_GRAPH_COND_TYPE_SWITCH || size > 1;
  if (needs_12_8) {
    const int version = drv::driver_version();
    if (version < 12080) {
      throw UsageError("if_else and switch_ need a CUDA driver for CUDA 12.8 or newer; this one supports CUDA " +
                       std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10));
    }
  }
}

void ExecContext::record_body(unsigned index, CUgraphConditionalNodeType type, ExecContext& inner,
                              const std::function<void(unsigned, ExecContext&)>& body) {
  inner.root_ = root_;
  inner.body_of_ = type == CU_GRAPH_COND_TYPE_WHILE ? "while_" : type == CU_GRAPH_COND_TYPE_SWITCH ? "switch_" : "if_";
  body(index, inner);
  for (const auto& owner : inner.take_owners()) keep_alive(owner);
}

void ExecContext::conditional(CUgraphConditionalHandle handle, CUgraphConditionalNodeType type, unsigned size,
                              const std::function<void(unsigned, ExecContext&)>& body) {
  check_conditional_supported(type, size);
  std::erase(root_->unconsumed_conditions_, handle);
  if (plan_ != nullptr) {
    detail::PlannedNode node;
    node.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    node.condition = handle;
    node.condition_type = type;
    node.first_body = static_cast<std::uint32_t>(plan_->bodies.size());
    node.body_count = size;
    // Each body's plan is an element of this plan's `bodies`, which does not grow while the body is recorded (a
    // nested conditional grows the body's own).
    plan_->bodies.resize(plan_->bodies.size() + size);
    for (unsigned i = 0; i < size; ++i) {
      ExecContext inner(*current_, plan_->bodies[node.first_body + i], host_errors());
      record_body(i, type, inner, body);
    }
    add_planned(node);
    return;
  }
  const CUcontext ctx = current_->device().context();
  const std::vector<CUgraph> bodies = drv::capture_add_conditional(ctx, current_->get(), handle, type, size);
  for (unsigned i = 0; i < size; ++i) {
    // Each body is captured on a stream of its own straight into the body graph (which belongs to the graph being
    // captured, so that a nested conditional may use its conditions). The body's context outlives its capture:
    // its fork streams and events take part in it until it ends. The node owns the body graph: nothing here
    // destroys it, and a failed body leaves it to the enclosing capture, which fails too.
    const Stream side = Stream::pooled(current_->device());
    drv::capture_begin_to_graph(ctx, side.get(), bodies[i], CU_STREAM_CAPTURE_MODE_RELAXED);
    CUgraph captured = nullptr;
    std::optional<ExecContext> inner;
    try {
      inner.emplace(side, true, host_errors());
      record_body(i, type, *inner, body);
    } catch (...) {
      (void)drv::capture_end_no_throw(side.get(), &captured);
      throw;
    }
    const CUresult r = drv::capture_end_no_throw(side.get(), &captured);
    inner.reset();
    if (r != CUDA_SUCCESS || captured == nullptr) {
      drv::throw_error(r != CUDA_SUCCESS ? r : CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "cuStreamEndCapture",
                       "conditional body");
    }
  }
}

CUgraphConditionalHandle ExecContext::make_condition(unsigned default_value) {
  if (body_of_ != nullptr) {
    throw UsageError(std::string("Scope::condition inside the body of ") + body_of_ +
                     ": make every condition before the conditional ops, in the scope itself");
  }
  if (!recording_) throw UsageError("a condition belongs to a graph; make it with Scope::condition while recording");
  const CUcontext ctx = current_->device().context();
  CUgraphConditionalHandle handle = 0;
  if (plan_ != nullptr) {
    const std::size_t k = plan_->conditions.size();
    if (condition_graph_ != nullptr) {
      handle = drv::conditional_handle_create(ctx, condition_graph_, default_value);
    } else if (reused_conditions_ != nullptr) {
      if (k < reused_conditions_->size() && (*reused_conditions_)[k].default_value == default_value) {
        handle = (*reused_conditions_)[k].handle;
      }
    } else {
      throw UsageError("ExecContext::make_condition: this plan has no graph to make conditions for");
    }
    plan_->conditions.push_back({handle, default_value});
  } else {
    handle = drv::conditional_handle_create(ctx, drv::capture_graph(ctx, current_->get()), default_value);
  }
  unconsumed_conditions_.push_back(handle);
  ++conditions_made_;
  return handle;
}

ScratchAllocation ExecContext::scratch(std::size_t bytes) {
  if (body_of_ != nullptr) {
    throw UsageError(std::string("Scope::scratch inside the body of ") + body_of_ +
                     ": CUDA allows no memory nodes there; ask for scratch memory in the scope itself");
  }
  if (!recording_) {
    throw UsageError("scratch memory belongs to a graph; ask for it with Scope::scratch while recording");
  }
  if (bytes == 0) throw UsageError("Scope::scratch of 0 elements: a graph allocation needs at least one byte");
  const CUcontext ctx = current_->device().context();
  CUdeviceptr address = 0;
  if (plan_ != nullptr) {
    const std::size_t k = plan_->scratch.size();
    detail::PlannedScratch planned;
    planned.bytes = bytes;
    if (reused_scratch_ != nullptr) {
      if (k < reused_scratch_->size() && (*reused_scratch_)[k].bytes == bytes) planned = (*reused_scratch_)[k];
    } else if (condition_graph_ != nullptr) {
      CUgraphNodeParams p{};
      p.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
      p.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
      p.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      p.alloc.poolProps.location.id = current_->device().ordinal();
      p.alloc.bytesize = bytes;
      planned.node = drv::graph_add_node(condition_graph_, nullptr, nullptr, 0, &p, "scratch");
      planned.address = p.alloc.dptr;
    } else {
      throw UsageError("ExecContext::scratch: this plan has no graph to allocate in");
    }
    plan_->scratch.push_back(planned);
    address = planned.address;
  } else {
    address = drv::memory_allocate_async(ctx, bytes, current_->get(), "scratch");
    scratch_to_free_.push_back(address);
  }
  if (!scratch_tag_) scratch_tag_ = std::make_shared<const int>(0);
  scratch_bytes_ += bytes;
  return {address, std::shared_ptr<const void>(scratch_tag_, &detail::scratch_marker)};
}

void ExecContext::finish_scratch() {
  const CUcontext ctx = current_->device().context();
  while (!scratch_to_free_.empty()) {
    drv::memory_free_async(ctx, scratch_to_free_.back(), current_->get(), "scratch");
    scratch_to_free_.pop_back();
  }
}

void ExecContext::refuse_scratch() const {
  if (!recording_) {
    throw UsageError(
        "an op uses scratch memory of a graph (Scope::scratch) outside that graph: scratch memory exists only while "
        "its graph runs; record the op in the same scope, or use a DeviceBuffer");
  }
  throw UsageError(
      "an op recorded into this graph uses scratch memory of another graph (Scope::scratch): scratch memory belongs "
      "to the graph whose scope made it; ask for it in this scope, or use a DeviceBuffer");
}

void ExecContext::refuse_in_body(std::string_view what) const {
  if (body_of_ != nullptr) {
    throw UsageError(std::string(what) + " inside the body of " + body_of_ +
                     ": a conditional body may hold kernels, copies, fills and child graphs only");
  }
}

void ExecContext::check_conditions_consumed() const {
  if (!root_->unconsumed_conditions_.empty()) {
    throw UsageError(std::to_string(root_->unconsumed_conditions_.size()) +
                     " condition(s) made by Scope::condition steer no if_, if_else, while_ or switch_ of the graph; "
                     "CUDA cannot instantiate a graph with an unused condition: record the conditional op, or make "
                     "no condition");
  }
}

void ExecContext::join() {
  if (plan_ != nullptr) {
    detail::PlannedNode node;
    node.type = CU_GRAPH_NODE_TYPE_EMPTY;
    add_planned(node);
    return;
  }
  if (!recording_) return;
  CUgraphNodeParams params{};
  params.type = CU_GRAPH_NODE_TYPE_EMPTY;
  drv::capture_add_node(current_->device().context(), current_->get(), &params, "join");
}

void ExecContext::record_event(CUevent event) {
  refuse_in_body("an event record");
  if (plan_ != nullptr) {
    detail::PlannedNode node;
    node.type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
    node.event = event;
    add_planned(node);
    return;
  }
  if (recording_) {
    drv::event_record_with_flags(current_->device().context(), event, current_->get(), CU_EVENT_RECORD_EXTERNAL);
  } else {
    drv::event_record(current_->device().context(), event, current_->get());
  }
}

void ExecContext::wait_event(CUevent event) {
  refuse_in_body("an event wait");
  if (plan_ != nullptr) {
    detail::PlannedNode node;
    node.type = CU_GRAPH_NODE_TYPE_WAIT_EVENT;
    node.event = event;
    add_planned(node);
    return;
  }
  drv::stream_wait_event_with_flags(current_->device().context(), current_->get(), event,
                                    recording_ ? CU_EVENT_WAIT_EXTERNAL : 0);
}

const Stream& ExecContext::side_stream(std::size_t index) {
  while (side_streams_.size() <= index) {
    side_streams_.push_back(std::make_unique<Stream>(Stream::pooled(current_->device())));
  }
  return *side_streams_[index];
}

ExecContext::Fork ExecContext::begin_fork(std::size_t count) {
  Fork fork{current_, side_streams_in_use_, count, {}, {}};
  if (plan_ != nullptr) {
    // Every branch starts from the nodes so far; the join depends on each branch's last nodes (a branch that
    // added none contributes the start), as stream capture's fork and join events make it.
    fork.start = frontier_;
    return fork;
  }
  side_streams_in_use_ += count - 1;
  const std::size_t existing = side_streams_.size();
  // The side streams start after everything already submitted to the origin (when recording, this wait is
  // what pulls them into the capture).
  Event& forked = events_.emplace_back(current_->device(), false);
  forked.record(*current_);
  for (std::size_t i = 1; i < count; ++i) {
    const std::size_t index = fork.first_side + i - 1;
    const Stream& side = side_stream(index);
    side.wait(forked);
    // A side stream an earlier fork of this capture used still depends on its last node there: start it from
    // the fork point alone, as a built graph does.
    if (recording_ && index < existing) {
      drv::capture_fork_from(current_->device().context(), current_->get(), side.get());
    }
  }
  return fork;
}

void ExecContext::enter_branch(Fork& fork, std::size_t index) {
  if (plan_ != nullptr) {
    frontier_ = fork.start;
    return;
  }
  current_ = index == 0 ? fork.origin : &side_stream(fork.first_side + index - 1);
}

void ExecContext::leave_branch(Fork& fork) {
  if (plan_ == nullptr) return;
  for (const std::uint32_t n : frontier_) {
    if (std::find(fork.joined.begin(), fork.joined.end(), n) == fork.joined.end()) fork.joined.push_back(n);
  }
}

void ExecContext::end_fork(Fork& fork) {
  if (plan_ != nullptr) {
    frontier_ = std::move(fork.joined);
    return;
  }
  // The origin continues only after every branch (when recording, this joins the branches back).
  for (std::size_t i = 1; i < fork.count; ++i) {
    Event& joined = events_.emplace_back(current_->device(), false);
    joined.record(side_stream(fork.first_side + i - 1));
    fork.origin->wait(joined);
  }
  side_streams_in_use_ = fork.first_side;
}

ExecContext::Dataflow ExecContext::begin_dataflow(std::size_t count) {
  Dataflow flow;
  if (plan_ != nullptr) {
    flow.planned_start = frontier_;
    flow.planned_ends.resize(count);
  } else {
    flow.captured_start = drv::capture_point(current_->device().context(), current_->get());
    flow.captured_ends.resize(count);
  }
  return flow;
}

void ExecContext::enter_piece(Dataflow& flow, std::span<const std::uint32_t> after) {
  if (plan_ != nullptr) {
    if (after.empty()) {
      frontier_ = flow.planned_start;
      return;
    }
    frontier_.clear();
    for (const std::uint32_t p : after) {
      for (const std::uint32_t n : flow.planned_ends[p]) {
        if (std::find(frontier_.begin(), frontier_.end(), n) == frontier_.end()) frontier_.push_back(n);
      }
    }
    return;
  }
  drv::CapturePoint start;
  if (after.empty()) {
    start = flow.captured_start;
  } else {
    for (const std::uint32_t p : after) start.merge(flow.captured_ends[p]);
  }
  drv::capture_resume_from(current_->device().context(), current_->get(), start);
}

void ExecContext::leave_piece(Dataflow& flow, std::size_t index) {
  if (plan_ != nullptr) {
    flow.planned_ends[index] = frontier_;
  } else {
    flow.captured_ends[index] = drv::capture_point(current_->device().context(), current_->get());
  }
}

void ExecContext::end_dataflow(Dataflow& flow, std::span<const std::vector<std::uint32_t>> after) {
  if (after.empty()) return;
  // The work after follows every piece no other piece follows (the others it follows through those).
  std::vector<bool> followed(after.size(), false);
  for (const auto& list : after) {
    for (const std::uint32_t p : list) followed[p] = true;
  }
  if (plan_ != nullptr) {
    frontier_.clear();
    for (std::size_t i = 0; i < after.size(); ++i) {
      if (followed[i]) continue;
      for (const std::uint32_t n : flow.planned_ends[i]) {
        if (std::find(frontier_.begin(), frontier_.end(), n) == frontier_.end()) frontier_.push_back(n);
      }
    }
    return;
  }
  drv::CapturePoint end;
  for (std::size_t i = 0; i < after.size(); ++i) {
    if (!followed[i]) end.merge(flow.captured_ends[i]);
  }
  drv::capture_resume_from(current_->device().context(), current_->get(), end);
}

}  // namespace lazygraph
