#pragma once
/// \file
/// The foreign-function layer: every call into the CUDA driver goes through the functions declared here,
/// implemented in src/driver/driver_api.cpp, the one file that loads libcuda.so.1 (at run time; it is never linked).
///
/// Each wrapper checks the result and throws CudaError naming the API, the result and the object, except the
/// `*_no_throw` forms, which destructors use: they report nothing and never throw. No policy lives here
/// (capture rules, lifetimes): that is the job of the layers above.
///
/// Contexts: every wrapper that acts within a context takes it as its first parameter and makes it current for
/// the call itself, so any thread may use any object whatever context (if any) that thread has current — a
/// worker thread, or one where other code (PyTorch, cuBLAS, cudaSetDevice) switched contexts. When the calling
/// thread had another context current, it is current again when the wrapper returns; a thread that had none is
/// left with this one. Nothing is cached: the driver is asked which context is current (cuCtxGetCurrent, a
/// thread-local read) on every call.

#include <cuda.h>

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "lazygraph/detail/driver/launch_shape.hpp"

namespace lazygraph::detail::driver {

/// Loads the driver and calls cuInit once per process; later calls are cheap.
/// \throws DriverUnavailable when libcuda.so.1 is missing or cuInit fails, saying which.
void ensure_loaded();

/// Like ensure_loaded, but reports instead of throwing: returns true when the driver is usable, otherwise
/// false with the reason in `why` (when not null).
bool try_load(std::string* why) noexcept;

/// The result's enumerator name ("CUDA_ERROR_OUT_OF_MEMORY"), or "CUresult <n>" when the driver is not loaded.
std::string result_name(CUresult code);

/// Throws CudaError for a failed result. Cold: callers test the result first.
[[noreturn]] void throw_error(CUresult code, std::string_view api, std::string_view object);

/// What a failed call acted on, naming the instance: "stream 0x7f3a0c001230 on device 0" (the device of the context
/// current on this thread, when there is one). For error messages: made only on the failure path.
std::string describe_instance(std::string_view kind, const void* handle);

inline void check(CUresult code, std::string_view api, std::string_view object) {
  if (code != CUDA_SUCCESS) [[unlikely]]
    throw_error(code, api, object);
}

// LiveHandles and live_handles(): lazygraph/driver/live_handles.hpp (the counts are kept in driver_api.cpp).

int driver_version();
int device_count();
CUdevice device_get(int ordinal);
std::string device_name(CUdevice dev);
int device_attribute(CUdevice dev, CUdevice_attribute attr);
std::size_t device_total_memory(CUdevice dev);

CUcontext primary_context_retain(CUdevice dev);
void primary_context_release_no_throw(CUdevice dev) noexcept;
/// The context current on the calling thread (null when none).
CUcontext current_context();
void context_synchronize(CUcontext ctx);
/// Whether `dev` can read and write `peer`'s memory directly (cuDeviceCanAccessPeer).
bool device_can_access_peer(CUdevice dev, CUdevice peer);
/// Lets kernels in `ctx` read and write memory of `peer`'s device (cuCtxEnablePeerAccess); enabled already is fine.
void context_enable_peer_access(CUcontext ctx, CUcontext peer);
/// The handle another process opens `address` (the start of a cuMemAlloc allocation of `ctx`) with
/// (cuIpcGetMemHandle); `object` names it in the error.
CUipcMemHandle ipc_handle(CUcontext ctx, CUdeviceptr address, std::string_view object);
/// Maps another process's allocation into `ctx`, with peer access to its device (cuIpcOpenMemHandle); `object` names
/// it in the error. Not for an allocation of this process (the driver refuses it).
CUdeviceptr ipc_open(CUcontext ctx, const CUipcMemHandle& handle, std::string_view object);
/// Unmaps what ipc_open mapped (cuIpcCloseMemHandle); errors are ignored.
void ipc_close_no_throw(CUcontext ctx, CUdeviceptr address) noexcept;
/// The bytes from `address` to the end of the allocation that holds it, in `ctx`'s address space (cuMemGetAddressRange:
/// also of a mapping ipc_open made); `object` names it in the error.
std::size_t bytes_to_allocation_end(CUcontext ctx, CUdeviceptr address, std::string_view object);
/// Free and total device memory, in bytes, of the context's device.
void memory_info(CUcontext ctx, std::size_t* free_bytes, std::size_t* total_bytes);

CUstream stream_create(CUcontext ctx);
void stream_destroy_no_throw(CUcontext ctx, CUstream stream) noexcept;
void stream_synchronize(CUcontext ctx, CUstream stream);
/// True when all work submitted to the stream has completed.
bool stream_query(CUcontext ctx, CUstream stream);
void stream_wait_event(CUcontext ctx, CUstream stream, CUevent event);

CUevent event_create(CUcontext ctx, unsigned flags);
void event_destroy_no_throw(CUcontext ctx, CUevent event) noexcept;
void event_record(CUcontext ctx, CUevent event, CUstream stream);
void event_synchronize(CUcontext ctx, CUevent event);
/// True when the work the event last recorded has completed (or it never recorded any).
bool event_query(CUcontext ctx, CUevent event);
/// As event_query; an error reads as "not complete".
bool event_query_no_throw(CUcontext ctx, CUevent event) noexcept;
float event_elapsed_ms(CUcontext ctx, CUevent start, CUevent end);

CUdeviceptr memory_allocate(CUcontext ctx, std::size_t bytes, std::string_view object);
void memory_free_no_throw(CUcontext ctx, CUdeviceptr ptr, std::size_t bytes) noexcept;
void* pinned_allocate(CUcontext ctx, std::size_t bytes, std::string_view object);
void pinned_free_no_throw(CUcontext ctx, void* ptr, std::size_t bytes) noexcept;

void copy_host_to_device(CUcontext ctx, CUdeviceptr dst, const void* src, std::size_t bytes, CUstream stream);
void copy_device_to_host(CUcontext ctx, void* dst, CUdeviceptr src, std::size_t bytes, CUstream stream);
void copy_device_to_device(CUcontext ctx, CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream stream);
/// `rows` rows of `width_bytes` bytes, rows `src_pitch` bytes apart in the source and `dst_pitch` in the destination
/// (a block of columns out of a row-major matrix, or into one).
void copy_device_to_device_2d(CUcontext ctx, CUdeviceptr dst, std::size_t dst_pitch, CUdeviceptr src,
                              std::size_t src_pitch, std::size_t width_bytes, std::size_t rows, CUstream stream);
/// Fills `count` elements of `element_size` (1, 2 or 4) bytes with the low bytes of `pattern`.
void fill(CUcontext ctx, CUdeviceptr dst, unsigned pattern, std::size_t element_size, std::size_t count,
          CUstream stream);

CUmodule module_load(CUcontext ctx, const void* image, std::string_view object);
void module_unload_no_throw(CUcontext ctx, CUmodule mod) noexcept;
/// The function, or nullptr when the module has none of that name.
CUfunction module_function(CUcontext ctx, CUmodule mod, const std::string& name);
std::vector<std::string> module_function_names(CUcontext ctx, CUmodule mod);
/// The size in bytes of each of the first `count` parameters of `fn`, in order. Only indices below `count` are
/// asked for: probing past the last parameter is an API error (compute-sanitizer reports each one).
std::vector<std::size_t> function_parameter_sizes(CUcontext ctx, CUfunction fn, std::size_t count,
                                                  std::string_view name);
int function_attribute(CUcontext ctx, CUfunction fn, CUfunction_attribute attr, std::string_view name);
void set_function_attribute(CUcontext ctx, CUfunction fn, CUfunction_attribute attr, int value, std::string_view name);
/// How many blocks of `block_threads` threads (and `dynamic_shared` bytes) of `fn` one multiprocessor holds at once.
int max_active_blocks_per_sm(CUcontext ctx, CUfunction fn, int block_threads, std::size_t dynamic_shared,
                             std::string_view name);

void launch_kernel(CUcontext ctx, CUfunction fn, const LaunchShape& shape, CUstream stream, void** args,
                   std::string_view name);

/// The raw capture calls. Policy (which captures are in progress, what they forbid) lives in capture.hpp,
/// the one home of capture; only it calls these.
void begin_capture(CUcontext ctx, CUstream stream, CUstreamCaptureMode mode);
/// Begins capturing `stream` into the existing `graph` (a conditional node's body). \throws UsageError on a driver
/// older than CUDA 12.4.
void begin_capture_to_graph(CUcontext ctx, CUstream stream, CUgraph graph, CUstreamCaptureMode mode);
/// Ends a capture and returns its graph, which may be null when the capture was invalidated. `new_graph`: false for
/// a capture into an existing graph (which is what it returns, and counts nothing new).
CUresult end_capture_no_throw(CUcontext ctx, CUstream stream, CUgraph* graph, bool new_graph = true) noexcept;
CUstreamCaptureStatus capture_status(CUcontext ctx, CUstream stream);
/// As capture_status; a failed query reads as ACTIVE (callers use it to decide whether a stream is reusable).
CUstreamCaptureStatus capture_status_no_throw(CUcontext ctx, CUstream stream) noexcept;

/// `flags`: CUDA_GRAPH_INSTANTIATE_FLAG_* (auto-free on launch, use node priority).
CUgraphExec graph_instantiate(CUcontext ctx, CUgraph graph, unsigned long long flags, std::string_view object);
void graph_upload(CUcontext ctx, CUgraphExec exec, CUstream stream, std::string_view object);
void graph_launch(CUcontext ctx, CUgraphExec exec, CUstream stream, std::string_view object);
void graph_destroy_no_throw(CUgraph graph) noexcept;
void graph_exec_destroy_no_throw(CUcontext ctx, CUgraphExec exec) noexcept;
std::vector<CUgraphNode> graph_nodes(CUgraph graph);
/// A kernel node's launch attributes that its parameters do not hold.
struct KernelNodeAttributes {
  std::array<unsigned, 3> cluster{1, 1, 1};  ///< its thread block cluster (1 x 1 x 1 for none)
  /// Its preferred shared memory carveout in percent; the driver reads a node launched without one as 0, like one
  /// that asked for 0.
  unsigned carveout = 0;
  bool operator==(const KernelNodeAttributes&) const = default;
};
/// The attributes of each kernel node of `graph`, in graph_nodes' order, a child graph node's kernels in its place
/// (recursively). A conditional node's bodies are not read: CUDA 13.0 has no call that lists them.
std::vector<KernelNodeAttributes> graph_kernel_attributes(CUgraph graph);
CUgraphNodeType graph_node_type(CUgraphNode node);
struct GraphEdgeCounts {
  std::size_t total = 0;
  std::size_t programmatic = 0;
};
GraphEdgeCounts graph_edge_counts(CUgraph graph);
void graph_write_dot(CUgraph graph, const std::string& path);
/// What cuGraphExecUpdate said: `applied`, or why not and at which node of the new graph (may be null).
struct ExecUpdateOutcome {
  bool applied = false;
  CUgraphExecUpdateResult result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  CUgraphNode error_node = nullptr;
};
/// Updates `exec` in place from `graph` (all or nothing: a refused update leaves `exec` as it was).
/// \throws CudaError for a failure other than a refused update.
ExecUpdateOutcome graph_exec_update(CUcontext ctx, CUgraphExec exec, CUgraph graph);

/// An empty graph, to add nodes to.
CUgraph graph_create();
/// A conditional handle of `graph` whose value every launch of the graph starts from `default_value`.
/// \throws UsageError naming the driver's CUDA version when it is older than 12.4 (no conditional nodes).
CUgraphConditionalHandle conditional_handle_create(CUcontext ctx, CUgraph graph, unsigned default_value);
/// Adds a node after `count` dependencies (with their edge data; null for full dependencies). `object`
/// names the node in errors.
CUgraphNode graph_add_node(CUgraph graph, const CUgraphNode* dependencies, const CUgraphEdgeData* edges,
                           std::size_t count, CUgraphNodeParams* params, std::string_view object);
/// Gives kernel node `node` the thread block clusters and the shared memory carveout of `shape` (nothing for what it
/// has none of): a node's parameters do not hold them.
void graph_kernel_node_set_attributes(CUgraphNode node, const LaunchShape& shape, std::string_view object);
/// Sets the parameters of `node` (of the graph `exec` was instantiated from) in `exec`, for later launches.
void graph_exec_set_node_params(CUcontext ctx, CUgraphExec exec, CUgraphNode node, CUgraphNodeParams* params,
                                std::string_view object);
/// Sets the parameters of `node` in its (not instantiated) graph.
void graph_node_set_params(CUgraphNode node, CUgraphNodeParams* params, std::string_view object);
/// cuMemAllocAsync: on a capturing stream, a memory allocation node of the graph (which owns the memory).
CUdeviceptr memory_allocate_async(CUcontext ctx, std::size_t bytes, CUstream stream, std::string_view object);
/// cuMemFreeAsync: on a capturing stream, a memory free node.
void memory_free_async(CUcontext ctx, CUdeviceptr ptr, CUstream stream, std::string_view object);
/// The device's memory for graph allocations (cuDeviceGetGraphMemAttribute), in bytes.
struct GraphMemory {
  std::size_t used = 0;           ///< backing allocations in use by graphs now
  std::size_t used_peak = 0;      ///< the most in use since the peaks were last reset
  std::size_t reserved = 0;       ///< physical memory reserved for graphs now
  std::size_t reserved_peak = 0;  ///< the most reserved since the peaks were last reset
};
GraphMemory graph_memory(CUcontext ctx, CUdevice dev);
/// Resets used_peak and reserved_peak to the current values.
void graph_memory_reset_peaks(CUcontext ctx, CUdevice dev);
/// cuDeviceGraphMemTrim: gives back to the system the graph memory no executing or queued graph uses.
void graph_memory_trim(CUcontext ctx, CUdevice dev);
struct NodeDependency {
  CUgraphNode node = nullptr;
  CUgraphEdgeData edge{};
};
/// The nodes `node` depends on, with their edges' data, in the driver's order.
std::vector<NodeDependency> graph_node_dependencies(CUgraphNode node);
/// Replaces every event record and event wait node of `graph` (not of its child graphs) by an empty node with the
/// same dependencies and dependents, and returns how many it replaced. For conditional bodies, which may not hold
/// event nodes: the ordering those events gave against work outside the graph is gone.
std::size_t graph_replace_event_nodes(CUgraph graph);
/// The function a kernel node launches.
CUfunction graph_kernel_node_function(CUgraphNode node);

/// Calls `fn(user_data)` on a driver thread once the stream reaches this point.
void launch_host_function(CUcontext ctx, CUstream stream, CUhostFn fn, void* user_data);
/// cuEventRecordWithFlags (CU_EVENT_RECORD_EXTERNAL: a record node when capturing).
void event_record_with_flags(CUcontext ctx, CUevent event, CUstream stream, unsigned flags);
/// cuStreamWaitEvent with flags (CU_EVENT_WAIT_EXTERNAL: a wait node when capturing).
void stream_wait_event_with_flags(CUcontext ctx, CUstream stream, CUevent event, unsigned flags);

/// The graph a capturing stream records into and the nodes its next work will depend on.
struct CaptureFrontier {
  CUgraph graph = nullptr;
  std::vector<CUgraphNode> dependencies;
  std::vector<CUgraphEdgeData> edges;  ///< empty when all are full dependencies
};
/// For capture.cpp only. \throws CudaError when `stream` is not capturing.
CaptureFrontier capture_frontier(CUcontext ctx, CUstream stream);
/// Makes `nodes` (with their edge data; null for full dependencies) exactly what the capturing stream's next
/// work depends on. For capture.cpp only.
void capture_set_frontier(CUcontext ctx, CUstream stream, const CUgraphNode* nodes, const CUgraphEdgeData* edges,
                          std::size_t count);

/// Makes `ctx` current on the calling thread while it lives, as every wrapper here does for its own call, for code
/// that calls another library which works in the current context (NCCL, through its CUDA runtime): that library
/// then acts on `ctx`'s device. The thread's previous context is current again afterwards.
/// \throws CudaError when the context cannot be made current.
class CurrentContext {
 public:
  explicit CurrentContext(CUcontext ctx);
  ~CurrentContext();
  CurrentContext(const CurrentContext&) = delete;
  CurrentContext& operator=(const CurrentContext&) = delete;

 private:
  CUcontext previous_ = nullptr;
  bool restore_ = false;
};

/// While it lives, the calling thread may make the calls that stream capture otherwise forbids it (allocation,
/// enabling peer access, synchronising other streams), also while one of its streams captures; its previous
/// capture mode is restored afterwards. For another library that sets itself up on first use, which may be
/// inside a capture: NCCL connects a communicator's ranks, enabling peer access between their GPUs, at the first
/// collective of each kind. The work it enqueues on the capturing stream is still captured.
/// \throws CudaError when the driver refuses the mode.
class RelaxedCapture {
 public:
  RelaxedCapture();
  ~RelaxedCapture();
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  CUstreamCaptureMode previous_ = CU_STREAM_CAPTURE_MODE_RELAXED;
};

/// For tests of failure paths on a real GPU: while an InjectedFault lives, every call of the driver function
/// `api` (e.g. "cuStreamCreate") made through these wrappers returns `code` instead of running, so a test can
/// check that lazygraph cleans up and reports the failure. Costs nothing when unused (it swaps one entry in
/// the table of entry points). Not thread-safe: no other thread may call the driver while one is created or
/// destroyed. \throws UsageError for an unknown `api`, or when the driver is not loaded.
class InjectedFault {
 public:
  InjectedFault(std::string_view api, CUresult code);
  ~InjectedFault();
  InjectedFault(const InjectedFault&) = delete;
  InjectedFault& operator=(const InjectedFault&) = delete;

 private:
  int index_;
  void* saved_;
};

}  // namespace lazygraph::detail::driver
