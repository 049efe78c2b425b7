#pragma once
/// \file
/// The foreign-function layer: every call into the CUDA driver goes through the functions declared here,
/// implemented in src/driver_api.cpp, the one file that loads libcuda.so.1 (at run time; it is never linked).
///
/// Each wrapper checks the result and throws CudaError naming the API, the result and the object, except the
/// `*_no_throw` forms, which destructors use: they report nothing and never throw. No policy lives here
/// (capture rules, lifetimes): that is the job of the layers above.

#include <cuda.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

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

inline void check(CUresult code, std::string_view api, std::string_view object) {
  if (code != CUDA_SUCCESS) [[unlikely]]
    throw_error(code, api, object);
}

int driver_version();
int device_count();
CUdevice device_get(int ordinal);
std::string device_name(CUdevice dev);
int device_attribute(CUdevice dev, CUdevice_attribute attr);
std::size_t device_total_memory(CUdevice dev);

CUcontext primary_context_retain(CUdevice dev);
void primary_context_release_no_throw(CUdevice dev) noexcept;
/// Makes `ctx` current on the calling thread (skipping the driver call when it already is, as far as this
/// library last set it).
void make_current(CUcontext ctx);
bool make_current_no_throw(CUcontext ctx) noexcept;
void context_synchronize(CUcontext ctx);
/// Free and total device memory, in bytes, of the context's device.
void memory_info(CUcontext ctx, std::size_t* free_bytes, std::size_t* total_bytes);

CUstream stream_create(CUcontext ctx);
void stream_destroy_no_throw(CUstream stream) noexcept;
void stream_synchronize(CUstream stream);
/// True when all work submitted to the stream has completed.
bool stream_query(CUstream stream);
void stream_wait_event(CUstream stream, CUevent event);

CUevent event_create(CUcontext ctx, unsigned flags);
void event_destroy_no_throw(CUevent event) noexcept;
void event_record(CUevent event, CUstream stream);
void event_synchronize(CUevent event);
float event_elapsed_ms(CUevent start, CUevent end);

CUdeviceptr memory_allocate(CUcontext ctx, std::size_t bytes, std::string_view object);
void memory_free_no_throw(CUcontext ctx, CUdeviceptr ptr) noexcept;
void* pinned_allocate(CUcontext ctx, std::size_t bytes, std::string_view object);
void pinned_free_no_throw(CUcontext ctx, void* ptr) noexcept;

void copy_host_to_device(CUdeviceptr dst, const void* src, std::size_t bytes, CUstream stream);
void copy_device_to_host(void* dst, CUdeviceptr src, std::size_t bytes, CUstream stream);
void copy_device_to_device(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream stream);
/// Fills `count` elements of `element_size` (1, 2 or 4) bytes with the low bytes of `pattern`.
void fill(CUdeviceptr dst, unsigned pattern, std::size_t element_size, std::size_t count, CUstream stream);

CUmodule module_load(CUcontext ctx, const void* image, std::string_view object);
void module_unload_no_throw(CUcontext ctx, CUmodule mod) noexcept;
/// The function, or nullptr when the module has none of that name.
CUfunction module_function(CUmodule mod, const std::string& name);
std::vector<std::string> module_function_names(CUmodule mod);
/// The size in bytes of parameters [0, count) of `fn` (count from the kernel's declaration: probing past the
/// last parameter is an API error that compute-sanitizer reports).
std::vector<std::size_t> function_parameter_sizes(CUfunction fn, std::size_t count, std::string_view name);
int function_attribute(CUfunction fn, CUfunction_attribute attr, std::string_view name);
void set_function_attribute(CUfunction fn, CUfunction_attribute attr, int value, std::string_view name);

struct LaunchShape {
  unsigned grid[3] = {};
  unsigned block[3] = {};
  unsigned shared_bytes = 0;
  bool early_launch = false;  ///< programmatic stream serialization (sm_90+)
};
void launch_kernel(CUfunction fn, const LaunchShape& shape, CUstream stream, void** args, std::string_view name);

void begin_capture(CUstream stream, CUstreamCaptureMode mode);
/// Ends a capture and returns its graph, which may be null when the capture was invalidated.
CUresult end_capture_no_throw(CUstream stream, CUgraph* graph) noexcept;
CUstreamCaptureStatus capture_status(CUstream stream);
/// As capture_status; a failed query reads as ACTIVE (callers use it to decide whether a stream is reusable).
CUstreamCaptureStatus capture_status_no_throw(CUstream stream) noexcept;
CUstreamCaptureMode exchange_capture_mode(CUstreamCaptureMode mode);

CUgraphExec graph_instantiate(CUgraph graph, std::string_view object);
void graph_upload(CUgraphExec exec, CUstream stream);
void graph_launch(CUgraphExec exec, CUstream stream);
void graph_destroy_no_throw(CUgraph graph) noexcept;
void graph_exec_destroy_no_throw(CUgraphExec exec) noexcept;
std::vector<CUgraphNode> graph_nodes(CUgraph graph);
CUgraphNodeType graph_node_type(CUgraphNode node);
struct GraphEdgeCounts {
  std::size_t total = 0;
  std::size_t programmatic = 0;
};
GraphEdgeCounts graph_edge_counts(CUgraph graph);
void graph_write_dot(CUgraph graph, const std::string& path);
/// Updates `exec` in place from `graph`; false when the topology changed and it must be re-instantiated.
bool graph_exec_update(CUgraphExec exec, CUgraph graph);

}  // namespace lazygraph::detail::driver
