#include "lazygraph/detail/graph/graph_state.hpp"

#include <algorithm>
#include <array>
#include <string>

#include "lazygraph/detail/driver/capture.hpp"
#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/detail/graph/graph_build.hpp"
#include "lazygraph/driver/error.hpp"

#include <nvtx3/nvToolsExt.h>

namespace lazygraph {

namespace drv = detail::driver;

namespace {
/// An NVTX range for the life of the scope: Nsight Systems shows capture, instantiation, upload and each replay.
struct NvtxRange {
  explicit NvtxRange(const char* name) noexcept { nvtxRangePushA(name); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
  ~NvtxRange() { nvtxRangePop(); }
};
}  // namespace

namespace detail {

namespace {

CUstreamCaptureMode to_driver(CaptureMode mode) {
  switch (mode) {
    case CaptureMode::global:
      return CU_STREAM_CAPTURE_MODE_GLOBAL;
    case CaptureMode::relaxed:
      return CU_STREAM_CAPTURE_MODE_RELAXED;
    case CaptureMode::this_thread:
      break;
  }
  return CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
}

NodeKind to_kind(CUgraphNodeType t) {
  switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      return NodeKind::kernel;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return NodeKind::memcpy;
    case CU_GRAPH_NODE_TYPE_MEMSET:
      return NodeKind::memset;
    case CU_GRAPH_NODE_TYPE_HOST:
      return NodeKind::host;
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return NodeKind::child_graph;
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return NodeKind::empty;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return NodeKind::wait_event;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return NodeKind::event_record;
    default:
      return NodeKind::other;
  }
}

}  // namespace

CaptureSession::CaptureSession(const Stream& stream, CaptureMode mode) : stream_(stream.get()) {
  if (stream.is_capturing()) {
    throw CaptureError(
        "CudaGraph capture: the stream is already capturing a graph; captures do not nest: record "
        "the ops into the outer Scope instead");
  }
  drv::capture_begin(stream.device().context(), stream_, to_driver(mode));
  active_ = true;
  nvtxRangePushA("lazygraph capture");  // popped when the capture ends (finish or abort)
}

CaptureSession::~CaptureSession() { abort(); }

void CaptureSession::abort() noexcept {
  if (!active_) return;
  active_ = false;
  nvtxRangePop();
  CUgraph graph = nullptr;
  (void)drv::capture_end_no_throw(stream_, &graph);  // ends the capture whatever state it is in
  drv::graph_destroy_no_throw(graph);
}

drv::Graph CaptureSession::finish() {
  active_ = false;
  nvtxRangePop();
  CUgraph raw = nullptr;
  const CUresult r = drv::capture_end_no_throw(stream_, &raw);
  drv::Graph graph(raw);
  if (r == CUDA_ERROR_STREAM_CAPTURE_UNMATCHED) {
    throw CaptureError(
        "CudaGraph capture failed: the Stream being captured was destroyed during the capture, which ended it; "
        "keep the Stream alive (and in place) until CudaGraph::scope returns");
  }
  if (r != CUDA_SUCCESS || !graph) {
    throw CaptureError("CudaGraph capture failed at cuStreamEndCapture with " + drv::result_name(r) +
                       ": a call during the capture was illegal there (a synchronization, an allocation, a module "
                       "load, or work on another stream that was never joined back); record only GraphNode ops "
                       "through Scope::record and do the rest before or after the capture");
  }
  return graph;
}

void retire_failed_scope(std::shared_ptr<const void> scope) noexcept {
  thread_local std::array<std::shared_ptr<const void>, 16> recent;
  thread_local std::size_t next = 0;
  recent[next] = std::move(scope);
  next = (next + 1) % recent.size();
}

namespace {

/// Gives back the graph memory that no graph uses (after a graph failed to map its scratch memory: what the failed
/// mapping reserved would otherwise stay cached for graphs, and ordinary allocations after it would fail too).
void trim_graph_memory_no_throw(const Device& device) noexcept {
  try {
    drv::graph_memory_trim(device.context(), device.state()->device);
  } catch (...) {  // NOLINT(bugprone-empty-catch): the out-of-memory error is the one to report
  }
}

/// Refuses a graph whose scratch memory cannot be mapped: the driver (CUDA 13.0 on the H100) keeps all of the
/// device's memory reserved for graphs after a mapping fails, trim or not, so every later allocation fails too.
/// `bytes` is an upper bound (allocations with disjoint lifetimes share memory); what graphs reserved and do not use
/// counts as available.
void scratch_fits_or_throw(const Device& device, std::size_t bytes) {
  if (bytes == 0) return;
  const drv::GraphMemory m = drv::graph_memory(device.context(), device.state()->device);
  const std::size_t available = device.free_memory() + (m.reserved > m.used ? m.reserved - m.used : 0);
  if (bytes > available) {
    throw CudaError(
        "cuGraphUpload", CUDA_ERROR_OUT_OF_MEMORY, drv::result_name(CUDA_ERROR_OUT_OF_MEMORY), "out of memory",
        "CudaGraph with " + std::to_string(bytes) + " bytes of scratch memory, " + std::to_string(available) +
            " bytes available (checked before mapping it: a failed mapping would keep the device's memory)");
  }
}

/// Runs a graph upload or launch; when it runs out of memory, trims the graph memory before passing the error on.
template <class F>
void mapping_graph_memory(const Device& device, F&& call) {
  try {
    call();
  } catch (const CudaError& e) {
    if (e.code() == CUDA_ERROR_OUT_OF_MEMORY) trim_graph_memory_no_throw(device);
    throw;
  }
}

unsigned long long instantiate_flags(const GraphOptions& o) {
  unsigned long long flags = 0;
  if (o.auto_free_on_launch) flags |= CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH;
  if (o.use_node_priority) flags |= CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  return flags;
}

UpdateStatus to_status(CUgraphExecUpdateResult r) {
  switch (r) {
    case CU_GRAPH_EXEC_UPDATE_SUCCESS:
      return UpdateStatus::applied;
    case CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED:
      return UpdateStatus::topology_changed;
    case CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED:
      return UpdateStatus::node_type_changed;
    case CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED:
    case CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE:
      return UpdateStatus::function_changed;
    case CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED:
      return UpdateStatus::parameters_changed;
    case CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED:
      return UpdateStatus::attributes_changed;
    default:
      return UpdateStatus::not_supported;
  }
}

}  // namespace

GraphState::GraphState(std::shared_ptr<Stream> stream, Recorded recorded, const GraphOptions& options,
                       std::shared_ptr<HostCallErrors> host_errors)
    : owned_stream_(std::move(stream)),
      stream_(*owned_stream_),
      pool_(options.pool ? options.pool->state() : nullptr),
      options_(options),
      graph_(std::move(recorded.graph)),
      plan_(std::move(recorded.plan)),
      nodes_(std::move(recorded.nodes)),
      captured_conditions_(recorded.captured_conditions),
      captured_scratch_(recorded.captured_scratch),
      scratch_tag_(std::move(recorded.scratch_tag)),
      bytes_to_device_(recorded.bytes_to_device),
      bytes_to_host_(recorded.bytes_to_host),
      owners_(std::make_shared<const Owners>(std::move(recorded.owners))),
      scope_(std::move(recorded.scope)),
      host_errors_(host_errors ? std::move(host_errors) : std::make_shared<HostCallErrors>()) {
  options_.pool.reset();  // pool_ is what the graph uses; the options need not keep a second reference
  check_scratch_fits(recorded.scratch_bytes);
  try {
    instantiate();
  } catch (const CudaError& e) {
    if (e.code() == CUDA_ERROR_OUT_OF_MEMORY) {
      // The executable graph holds what its failed upload mapped: let it go first, then give the memory back.
      exec_.reset();
      graph_.reset();
      trim_graph_memory_no_throw(stream_.device());
    }
    throw;
  }
  set_scratch_bytes(recorded.scratch_bytes);
}

void GraphState::check_scratch_fits(std::size_t bytes) const { scratch_fits_or_throw(stream_.device(), bytes); }

void GraphState::set_scratch_bytes(std::size_t bytes) {
  scratch_bytes_ = bytes;
  if (pool_) {
    const std::lock_guard<std::mutex> lock(pool_->accounts_mutex);
    pool_->scratch_bytes[this] = bytes;
  }
}

std::size_t GraphState::scratch_bytes() const {
  const auto lock = guard();
  return scratch_bytes_;
}

void GraphState::instantiate() {
  const NvtxRange range("lazygraph instantiate and upload");
  exec_ = drv::GraphExec::instantiate(graph_, stream_.device().context(), "CudaGraph", instantiate_flags(options_));
  if (options_.upload) {
    mapping_graph_memory(stream_.device(), [&] {
      drv::graph_upload(exec_.context(), exec_.native_handle(), stream_.get(), "CudaGraph");
    });
    stream_.synchronize();
    uploaded_ = true;
  }
}

GraphState::~GraphState() {
  // The stream's destructor does not wait; replays still in flight must finish before the owners let go of
  // the memory they use. Launches of one graph run in order, so the last replay on another stream finishing
  // means every earlier one has.
  try {
    stream_.synchronize();
    if (launched_elsewhere_ && last_replay_elsewhere_) last_replay_elsewhere_->synchronize();
  } catch (...) {  // NOLINT(bugprone-empty-catch): destructors never throw; nothing better to do
  }
  held_.release_all();
  if (pool_) {
    const std::lock_guard<std::mutex> lock(pool_->accounts_mutex);
    pool_->scratch_bytes.erase(this);
  }
}

std::unique_lock<std::mutex> GraphState::guard() const {
  if (recording_thread_.load() == std::this_thread::get_id()) [[unlikely]] {
    throw UsageError(
        "CudaGraph: the op given to update or update_from uses the graph being updated (child_graph of itself, or "
        "a call on it from the callback); a graph cannot take part in its own update");
  }
  return std::unique_lock<std::mutex>(mutex_);
}

void GraphState::order_after_replays_elsewhere() {
  if (replay_elsewhere_pending_) {
    stream_.wait(*last_replay_elsewhere_);
    replay_elsewhere_pending_ = false;
  }
}

void GraphState::hold_no_throw(DeferredRelease::Owners owners) noexcept {
  try {
    held_.hold(stream_, std::move(owners));
    updates_pending_ = true;
  } catch (...) {  // NOLINT(bugprone-empty-catch): hold keeps the owners until release_all when it fails
  }
}

void GraphState::release_after_replays(DeferredRelease::Owners owners) {
  // Replays already queued (on any stream) still use what `owners` keep; the graph's stream passes this point
  // only after all of them.
  order_after_replays_elsewhere();
  held_.hold(stream_, std::move(owners));
  held_.collect();
}

void GraphState::launch_on(const Stream& stream) {
  const NvtxRange range("lazygraph replay");
  host_errors_->rethrow_pending();
  const auto lock = guard();
  CUcontext ctx = exec_.context();
  // The graphs of a pool queue their replays one at a time, so that the pool's stream orders all of them.
  std::unique_lock<std::mutex> pool_lock;
  if (pool_) pool_lock = std::unique_lock<std::mutex>(pool_->launch_mutex);
  if (stream.get() == stream_.get()) {
    mapping_graph_memory(stream_.device(),
                         [&] { drv::graph_launch(ctx, exec_.native_handle(), stream_.get(), "CudaGraph"); });
  } else if (pool_) {
    // A graph of a pool replays on the pool's stream, always: CUDA shares physical memory between graphs launched
    // into one stream. Linked to `stream` both ways, it runs after the work queued there and before the work
    // queued there later, as a replay on `stream` would.
    if (!caller_ready_) caller_ready_.emplace(stream_.device(), false);
    if (!updates_done_) updates_done_.emplace(stream_.device(), false);
    caller_ready_->record(stream);
    stream_.wait(*caller_ready_);
    mapping_graph_memory(stream_.device(),
                         [&] { drv::graph_launch(ctx, exec_.native_handle(), stream_.get(), "CudaGraph"); });
    updates_done_->record(stream_);
    stream.wait(*updates_done_);
  } else {
    // Updates queued on the graph's stream come first; later updates wait for this replay (update() makes the
    // graph's stream wait on last_replay_elsewhere_).
    if (updates_pending_) {
      if (!updates_done_) updates_done_.emplace(stream_.device(), false);
      updates_done_->record(stream_);
      stream.wait(*updates_done_);
    }
    mapping_graph_memory(stream_.device(),
                         [&] { drv::graph_launch(ctx, exec_.native_handle(), stream.get(), "CudaGraph"); });
    if (!last_replay_elsewhere_) last_replay_elsewhere_.emplace(stream_.device(), false);
    last_replay_elsewhere_->record(stream);
    replay_elsewhere_pending_ = true;
    launched_elsewhere_ = true;
  }
  ++replays_;
  updates_pending_ = false;
  held_.collect();
}

void GraphState::launch_and_wait() {
  const NvtxRange range("lazygraph replay and wait");
  host_errors_->rethrow_pending();
  {
    const auto lock = guard();
    std::unique_lock<std::mutex> pool_lock;
    if (pool_) pool_lock = std::unique_lock<std::mutex>(pool_->launch_mutex);
    mapping_graph_memory(stream_.device(), [&] {
      drv::graph_launch(exec_.context(), exec_.native_handle(), stream_.get(), "CudaGraph");
    });
    ++replays_;
    updates_pending_ = false;
  }
  stream_.synchronize();
  {
    const auto lock = guard();
    held_.collect();
  }
  host_errors_->rethrow_pending();
}

void GraphState::synchronize() {
  stream_.synchronize();
  {
    const auto lock = guard();
    if (launched_elsewhere_ && last_replay_elsewhere_) last_replay_elsewhere_->synchronize();
    held_.collect();
  }
  host_errors_->rethrow_pending();
}

void GraphState::upload(const Stream& stream) {
  const NvtxRange range("lazygraph upload");
  const auto lock = guard();
  mapping_graph_memory(stream_.device(),
                       [&] { drv::graph_upload(exec_.context(), exec_.native_handle(), stream.get(), "CudaGraph"); });
  uploaded_ = true;
}

UpdateResult GraphState::replace_plan(NodePlan plan, Owners owners, const UpdateOptions& options) {
  if (std::optional<UpdateResult> mismatch = plan_mismatch(*plan_, plan)) {
    if (!options.reinstantiate_on_mismatch) return std::move(*mismatch);
    drv::Graph graph(drv::graph_create());
    return reinstantiate_built(std::move(graph), std::move(plan), std::move(owners), std::move(*mismatch));
  }
  std::size_t changed = 0;
  UpdateResult r = apply_plan(exec_.native_handle(), nodes_, *plan_, plan, &changed);
  if (!r.ok()) return r;
  plan_ = std::move(plan);
  // Only the executable graph changed (unless the plan has conditions: see apply_plan); a copy of the template
  // with these parameters is made if one is asked for (template_graph()).
  if (changed > 0 && plan_->conditions.empty() && plan_->scratch.empty()) {
    template_stale_ = true;
    current_template_.reset();
  }
  Owners old = *owners_;
  owners_ = std::make_shared<const Owners>(std::move(owners));
  release_after_replays(std::move(old));
  return r;
}

UpdateResult GraphState::reinstantiate_built(drv::Graph graph, NodePlan plan, Owners owners, UpdateResult why) {
  std::vector<CUgraphNode> nodes;
  materialize_into(graph.native_handle(), plan, nodes);
  UpdateResult r = reinstantiate(std::move(graph), std::move(owners), std::move(why));
  plan_ = std::move(plan);
  nodes_ = std::move(nodes);
  return r;
}

UpdateResult GraphState::replace_graph(drv::Graph graph, Owners owners, const UpdateOptions& options) {
  // cuGraphExecUpdate accepts a capture whose kernels launch in other clusters but keeps the old ones (H200, driver
  // 580), and takes one whose kernels prefer another shared memory carveout (whether it applies it is not
  // documented): compared here first, kernel by kernel (other kernel counts are its to refuse, as another topology).
  // A carveout of 0 and none read the same, so a change between them goes unseen: both leave the split to the driver
  // or ask for the most L1, a difference in speed only. A child graph's kernels are read in its node's place; a
  // captured graph with conditional bodies never comes here (update_from makes it anew).
  const auto now = drv::graph_kernel_attributes(graph_.native_handle());
  const auto next = drv::graph_kernel_attributes(graph.native_handle());
  if (now.size() == next.size() && now != next) {
    const bool clusters = !std::equal(now.begin(), now.end(), next.begin(),
                                      [](const auto& x, const auto& y) { return x.cluster == y.cluster; });
    UpdateResult why{UpdateStatus::parameters_changed, std::nullopt,
                     clusters
                         ? "a kernel of the new capture launches its blocks in other clusters, which an update in "
                           "place would not apply"
                         : "a kernel of the new capture prefers another shared memory carveout, which an update in "
                           "place might not apply"};
    if (!options.reinstantiate_on_mismatch) return why;
    return reinstantiate(std::move(graph), std::move(owners), std::move(why));
  }
  const drv::ExecUpdateOutcome outcome =
      drv::graph_exec_update(exec_.context(), exec_.native_handle(), graph.native_handle());
  if (!outcome.applied) {
    UpdateResult why{to_status(outcome.result), std::nullopt, {}};
    if (outcome.error_node != nullptr) {
      const std::vector<CUgraphNode> nodes = drv::graph_nodes(graph.native_handle());
      const auto it = std::find(nodes.begin(), nodes.end(), outcome.error_node);
      if (it != nodes.end()) why.node = static_cast<std::size_t>(it - nodes.begin());
    }
    why.message = std::string("cuGraphExecUpdate refused the new capture: ") + to_string(why.status) +
                  (why.node ? " at node " + std::to_string(*why.node) : std::string());
    if (!options.reinstantiate_on_mismatch) return why;
    return reinstantiate(std::move(graph), std::move(owners), std::move(why));
  }
  graph_ = std::move(graph);
  Owners old = *owners_;
  owners_ = std::make_shared<const Owners>(std::move(owners));
  release_after_replays(std::move(old));
  return {};
}

UpdateResult GraphState::reinstantiate(drv::Graph graph, Owners owners, UpdateResult why) {
  drv::GraphExec exec =
      drv::GraphExec::instantiate(graph, stream_.device().context(), "CudaGraph", instantiate_flags(options_));
  if (options_.upload) {
    mapping_graph_memory(stream_.device(),
                         [&] { drv::graph_upload(exec.context(), exec.native_handle(), stream_.get(), "CudaGraph"); });
    updates_pending_ = true;  // a replay on another stream waits for the upload, as for an update
  }
  // Replays already queued still run the old executable graph and read the old buffers: both go once they are
  // done.
  Owners old = *owners_;
  old.push_back(std::make_shared<drv::GraphExec>(std::exchange(exec_, std::move(exec))));
  old.push_back(std::make_shared<drv::Graph>(std::exchange(graph_, std::move(graph))));
  owners_ = std::make_shared<const Owners>(std::move(owners));
  release_after_replays(std::move(old));
  template_stale_ = false;
  current_template_.reset();
  return {UpdateStatus::reinstantiated, why.node, std::move(why.message)};
}

std::uint64_t GraphState::replay_count() const {
  const auto lock = guard();
  return replays_;
}

TransferStats GraphState::transfers() const {
  const auto lock = guard();
  return {bytes_to_device_, bytes_to_host_, replays_};
}

std::size_t GraphState::owner_count() const {
  const auto lock = guard();
  return owners_->size();
}

bool GraphState::uploaded() const {
  const auto lock = guard();
  return uploaded_;
}

std::shared_ptr<const GraphState::Owners> GraphState::owners() const {
  const auto lock = guard();
  return owners_;
}

CUgraph GraphState::template_graph() const {
  const auto lock = guard();
  return template_graph_locked();
}

CUgraph GraphState::template_graph_locked() const {
  if (!template_stale_) return current_template_ ? current_template_.native_handle() : graph_.native_handle();
  // A built graph updated node by node: graph_ still holds the parameters it was built with.
  std::vector<CUgraphNode> nodes;
  current_template_ = materialize(*plan_, nodes);
  template_stale_ = false;
  return current_template_.native_handle();
}

std::size_t GraphState::node_count() const {
  const auto lock = guard();
  return drv::graph_nodes(graph_.native_handle()).size();
}

std::vector<NodeKind> GraphState::node_kinds() const {
  const auto lock = guard();
  std::vector<NodeKind> kinds;
  for (CUgraphNode n : drv::graph_nodes(graph_.native_handle())) kinds.push_back(to_kind(drv::graph_node_type(n)));
  return kinds;
}

std::vector<std::vector<std::size_t>> GraphState::dependencies() const {
  const auto lock = guard();
  const std::vector<CUgraphNode> nodes = drv::graph_nodes(graph_.native_handle());
  std::vector<std::vector<std::size_t>> deps(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    for (const drv::NodeDependency& d : drv::graph_node_dependencies(nodes[i])) {
      const auto it = std::find(nodes.begin(), nodes.end(), d.node);
      deps[i].push_back(static_cast<std::size_t>(it - nodes.begin()));
    }
    std::sort(deps[i].begin(), deps[i].end());
  }
  return deps;
}

EdgeCounts GraphState::edge_counts() const {
  const auto lock = guard();
  const drv::GraphEdgeCounts e = drv::graph_edge_counts(graph_.native_handle());
  return {e.total - e.programmatic, e.programmatic};
}

void GraphState::write_dot(const std::filesystem::path& path) const {
  const auto lock = guard();
  drv::graph_write_dot(template_graph_locked(), path.string());
}

}  // namespace detail
}  // namespace lazygraph
