// The one file that talks to libcuda. It is loaded with dlopen at first use, never linked, so every binary
// starts on a machine without a driver. Entry points come from cuGetProcAddress, asked for the ABI of the
// cuda.h this library was built against (CUDA_VERSION), and are typed from that header's declarations.

#include "lazygraph/detail/driver/driver_api.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "lazygraph/detail/driver/error.hpp"

namespace lazygraph::detail::driver {

namespace {

// Each entry: the name the function is looked up by, which the cuda.h macros map to the versioned symbol
// whose type we take.
#define LAZYGRAPH_DRIVER_ENTRY_POINTS(X) \
  X(cuInit)                              \
  X(cuDriverGetVersion)                  \
  X(cuGetErrorName)                      \
  X(cuGetErrorString)                    \
  X(cuDeviceGetCount)                    \
  X(cuDeviceGet)                         \
  X(cuDeviceGetName)                     \
  X(cuDeviceGetAttribute)                \
  X(cuDeviceTotalMem)                    \
  X(cuDevicePrimaryCtxRetain)            \
  X(cuDevicePrimaryCtxRelease)           \
  X(cuCtxSetCurrent)                     \
  X(cuCtxSynchronize)                    \
  X(cuMemGetInfo)                        \
  X(cuStreamCreate)                      \
  X(cuStreamDestroy)                     \
  X(cuStreamSynchronize)                 \
  X(cuStreamQuery)                       \
  X(cuStreamWaitEvent)                   \
  X(cuEventCreate)                       \
  X(cuEventDestroy)                      \
  X(cuEventRecord)                       \
  X(cuEventSynchronize)                  \
  X(cuEventElapsedTime)                  \
  X(cuMemAlloc)                          \
  X(cuMemFree)                           \
  X(cuMemHostAlloc)                      \
  X(cuMemFreeHost)                       \
  X(cuMemcpyHtoDAsync)                   \
  X(cuMemcpyDtoHAsync)                   \
  X(cuMemcpyDtoDAsync)                   \
  X(cuMemsetD8Async)                     \
  X(cuMemsetD16Async)                    \
  X(cuMemsetD32Async)                    \
  X(cuModuleLoadData)                    \
  X(cuModuleUnload)                      \
  X(cuModuleGetFunction)                 \
  X(cuModuleGetFunctionCount)            \
  X(cuModuleEnumerateFunctions)          \
  X(cuFuncGetName)                       \
  X(cuFuncGetParamInfo)                  \
  X(cuFuncGetAttribute)                  \
  X(cuFuncSetAttribute)                  \
  X(cuLaunchKernel)                      \
  X(cuLaunchKernelEx)                    \
  X(cuStreamBeginCapture)                \
  X(cuStreamEndCapture)                  \
  X(cuStreamIsCapturing)                 \
  X(cuThreadExchangeStreamCaptureMode)   \
  X(cuGraphInstantiateWithFlags)         \
  X(cuGraphUpload)                       \
  X(cuGraphLaunch)                       \
  X(cuGraphDestroy)                      \
  X(cuGraphExecDestroy)                  \
  X(cuGraphGetNodes)                     \
  X(cuGraphNodeGetType)                  \
  X(cuGraphGetEdges)                     \
  X(cuGraphDebugDotPrint)                \
  X(cuGraphExecUpdate)

struct EntryPoints {
#define LAZYGRAPH_DECLARE(fn) decltype(&::fn) fn = nullptr;  // NOLINT(bugprone-macro-parentheses): a name
  LAZYGRAPH_DRIVER_ENTRY_POINTS(LAZYGRAPH_DECLARE)
#undef LAZYGRAPH_DECLARE
};

struct Driver {
  EntryPoints api;
  bool usable = false;
  bool has_device = false;
  std::string why;  // set when !usable
};

Driver load() {
  Driver d;
  // Never "libcuda.so": on these machines that name finds the toolkit's stub, which fails every call.
  // LAZYGRAPH_CUDA_DRIVER names another file (a specific driver, or a missing one to test the no-driver path).
  const char* override_path = std::getenv("LAZYGRAPH_CUDA_DRIVER");
  const std::string library = override_path != nullptr && *override_path != '\0' ? override_path : "libcuda.so.1";
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    d.why = "cannot load CUDA driver (" + library + "): " + (err != nullptr ? err : "not found") +
            "; install the NVIDIA driver to run GPU work";
    return d;
  }
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    d.why = "cannot load CUDA driver: libcuda.so.1 has no cuGetProcAddress_v2 (driver older than CUDA 12.0)";
    return d;
  }
  std::string missing;
  // `fn` names a member and a string; it cannot be parenthesised.
  // NOLINTBEGIN(bugprone-macro-parentheses)
#define LAZYGRAPH_FETCH(fn)                                                                                      \
  {                                                                                                              \
    void* p = nullptr;                                                                                           \
    CUdriverProcAddressQueryResult status{};                                                                     \
    if (get_proc(#fn, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS && p != nullptr) { \
      d.api.fn = reinterpret_cast<decltype(d.api.fn)>(p);                                                        \
    } else {                                                                                                     \
      missing += missing.empty() ? #fn : ", " #fn;                                                               \
    }                                                                                                            \
  }
  // NOLINTEND(bugprone-macro-parentheses)
  LAZYGRAPH_DRIVER_ENTRY_POINTS(LAZYGRAPH_FETCH)
#undef LAZYGRAPH_FETCH
  if (!missing.empty()) {
    d.why = "cannot load CUDA driver: libcuda.so.1 lacks " + missing + " (driver older than CUDA " +
            std::to_string(CUDA_VERSION / 1000) + "." + std::to_string(CUDA_VERSION % 1000 / 10) + "?)";
    return d;
  }
  const CUresult init = d.api.cuInit(0);
  if (init == CUDA_ERROR_NO_DEVICE) {
    d.usable = true;  // the driver works; there is simply no GPU
    return d;
  }
  if (init != CUDA_SUCCESS) {
    const char* name = nullptr;
    d.api.cuGetErrorName(init, &name);
    d.why = std::string("cannot initialise CUDA driver: cuInit failed with ") +
            (name != nullptr ? name : std::to_string(init));
    return d;
  }
  d.usable = true;
  d.has_device = true;
  return d;
}

const Driver& instance() {
  static const Driver d = load();
  return d;
}

/// The entry points; throws DriverUnavailable when the driver could not be loaded.
const EntryPoints& api() {
  const Driver& d = instance();
  if (!d.usable) [[unlikely]]
    throw DriverUnavailable(d.why);
  return d.api;
}

// The context this library last made current on this thread.
thread_local CUcontext current_context = nullptr;

}  // namespace

void ensure_loaded() { (void)api(); }

bool try_load(std::string* why) noexcept {
  const Driver& d = instance();
  if (!d.usable && why != nullptr) *why = d.why;
  return d.usable;
}

std::string result_name(CUresult code) {
  const Driver& d = instance();
  const char* name = nullptr;
  if (d.usable && d.api.cuGetErrorName(code, &name) == CUDA_SUCCESS && name != nullptr) return name;
  return "CUresult " + std::to_string(static_cast<int>(code));
}

void throw_error(CUresult code, std::string_view api_name, std::string_view object) {
  std::string text;
  const Driver& d = instance();
  const char* str = nullptr;
  if (d.usable && d.api.cuGetErrorString(code, &str) == CUDA_SUCCESS && str != nullptr) text = str;
  throw CudaError(std::string(api_name), static_cast<int>(code), result_name(code), std::move(text),
                  std::string(object));
}

int driver_version() {
  int v = 0;
  check(api().cuDriverGetVersion(&v), "cuDriverGetVersion", "driver");
  return v;
}

int device_count() {
  const EntryPoints& a = api();
  if (!instance().has_device) return 0;
  int n = 0;
  check(a.cuDeviceGetCount(&n), "cuDeviceGetCount", "driver");
  return n;
}

CUdevice device_get(int ordinal) {
  CUdevice dev = 0;
  check(api().cuDeviceGet(&dev, ordinal), "cuDeviceGet", "device " + std::to_string(ordinal));
  return dev;
}

std::string device_name(CUdevice dev) {
  char buf[256] = {};
  check(api().cuDeviceGetName(buf, sizeof buf - 1, dev), "cuDeviceGetName", "device " + std::to_string(dev));
  return buf;
}

int device_attribute(CUdevice dev, CUdevice_attribute attr) {
  int v = 0;
  check(api().cuDeviceGetAttribute(&v, attr, dev), "cuDeviceGetAttribute",
        "device " + std::to_string(dev) + " attribute " + std::to_string(static_cast<int>(attr)));
  return v;
}

std::size_t device_total_memory(CUdevice dev) {
  std::size_t bytes = 0;
  check(api().cuDeviceTotalMem(&bytes, dev), "cuDeviceTotalMem", "device " + std::to_string(dev));
  return bytes;
}

CUcontext primary_context_retain(CUdevice dev) {
  CUcontext ctx = nullptr;
  check(api().cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain", "device " + std::to_string(dev));
  return ctx;
}

void primary_context_release_no_throw(CUdevice dev) noexcept {
  const Driver& d = instance();
  if (d.usable) (void)d.api.cuDevicePrimaryCtxRelease(dev);
}

void make_current(CUcontext ctx) {
  if (current_context == ctx) return;
  check(api().cuCtxSetCurrent(ctx), "cuCtxSetCurrent", "primary context");
  current_context = ctx;
}

bool make_current_no_throw(CUcontext ctx) noexcept {
  if (current_context == ctx) return true;
  const Driver& d = instance();
  if (!d.usable || d.api.cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return false;
  current_context = ctx;
  return true;
}

void context_synchronize(CUcontext ctx) {
  make_current(ctx);
  check(api().cuCtxSynchronize(), "cuCtxSynchronize", "device");
}

void memory_info(CUcontext ctx, std::size_t* free_bytes, std::size_t* total_bytes) {
  make_current(ctx);
  check(api().cuMemGetInfo(free_bytes, total_bytes), "cuMemGetInfo", "device memory");
}

CUstream stream_create(CUcontext ctx) {
  make_current(ctx);
  CUstream s = nullptr;
  check(api().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate", "Stream");
  return s;
}

void stream_destroy_no_throw(CUstream stream) noexcept {
  const Driver& d = instance();
  if (d.usable && stream != nullptr) (void)d.api.cuStreamDestroy(stream);
}

void stream_synchronize(CUstream stream) { check(api().cuStreamSynchronize(stream), "cuStreamSynchronize", "Stream"); }

bool stream_query(CUstream stream) {
  const CUresult r = api().cuStreamQuery(stream);
  if (r == CUDA_ERROR_NOT_READY) return false;
  check(r, "cuStreamQuery", "Stream");
  return true;
}

void stream_wait_event(CUstream stream, CUevent event) {
  check(api().cuStreamWaitEvent(stream, event, 0), "cuStreamWaitEvent", "Stream");
}

CUevent event_create(CUcontext ctx, unsigned flags) {
  make_current(ctx);
  CUevent e = nullptr;
  check(api().cuEventCreate(&e, flags), "cuEventCreate", "Event");
  return e;
}

void event_destroy_no_throw(CUevent event) noexcept {
  const Driver& d = instance();
  if (d.usable && event != nullptr) (void)d.api.cuEventDestroy(event);
}

void event_record(CUevent event, CUstream stream) {
  check(api().cuEventRecord(event, stream), "cuEventRecord", "Event");
}

void event_synchronize(CUevent event) { check(api().cuEventSynchronize(event), "cuEventSynchronize", "Event"); }

float event_elapsed_ms(CUevent start, CUevent end) {
  float ms = 0;
  check(api().cuEventElapsedTime(&ms, start, end), "cuEventElapsedTime", "Event pair");
  return ms;
}

CUdeviceptr memory_allocate(CUcontext ctx, std::size_t bytes, std::string_view object) {
  make_current(ctx);
  CUdeviceptr p = 0;
  check(api().cuMemAlloc(&p, bytes), "cuMemAlloc", object);
  return p;
}

void memory_free_no_throw(CUcontext ctx, CUdeviceptr ptr) noexcept {
  if (ptr != 0 && make_current_no_throw(ctx)) (void)instance().api.cuMemFree(ptr);
}

void* pinned_allocate(CUcontext ctx, std::size_t bytes, std::string_view object) {
  make_current(ctx);
  void* p = nullptr;
  check(api().cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc", object);
  return p;
}

void pinned_free_no_throw(CUcontext ctx, void* ptr) noexcept {
  if (ptr != nullptr && make_current_no_throw(ctx)) (void)instance().api.cuMemFreeHost(ptr);
}

void copy_host_to_device(CUdeviceptr dst, const void* src, std::size_t bytes, CUstream stream) {
  check(api().cuMemcpyHtoDAsync(dst, src, bytes, stream), "cuMemcpyHtoDAsync", std::to_string(bytes) + " bytes");
}

void copy_device_to_host(void* dst, CUdeviceptr src, std::size_t bytes, CUstream stream) {
  check(api().cuMemcpyDtoHAsync(dst, src, bytes, stream), "cuMemcpyDtoHAsync", std::to_string(bytes) + " bytes");
}

void copy_device_to_device(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream stream) {
  check(api().cuMemcpyDtoDAsync(dst, src, bytes, stream), "cuMemcpyDtoDAsync", std::to_string(bytes) + " bytes");
}

void fill(CUdeviceptr dst, unsigned pattern, std::size_t element_size, std::size_t count, CUstream stream) {
  const EntryPoints& a = api();
  const std::string_view what = "fill";
  switch (element_size) {
    case 1:
      check(a.cuMemsetD8Async(dst, static_cast<unsigned char>(pattern), count, stream), "cuMemsetD8Async", what);
      return;
    case 2:
      check(a.cuMemsetD16Async(dst, static_cast<unsigned short>(pattern), count, stream), "cuMemsetD16Async", what);
      return;
    case 4:
      check(a.cuMemsetD32Async(dst, pattern, count, stream), "cuMemsetD32Async", what);
      return;
    default:
      throw UsageError("fill: element size " + std::to_string(element_size) + " is not 1, 2 or 4 bytes");
  }
}

CUmodule module_load(CUcontext ctx, const void* image, std::string_view object) {
  make_current(ctx);
  CUmodule m = nullptr;
  check(api().cuModuleLoadData(&m, image), "cuModuleLoadData", object);
  return m;
}

void module_unload_no_throw(CUcontext ctx, CUmodule mod) noexcept {
  if (mod != nullptr && make_current_no_throw(ctx)) (void)instance().api.cuModuleUnload(mod);
}

CUfunction module_function(CUmodule mod, const std::string& name) {
  CUfunction f = nullptr;
  const CUresult r = api().cuModuleGetFunction(&f, mod, name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND) return nullptr;
  check(r, "cuModuleGetFunction", "kernel " + name);
  return f;
}

std::vector<std::string> module_function_names(CUmodule mod) {
  const EntryPoints& a = api();
  unsigned n = 0;
  check(a.cuModuleGetFunctionCount(&n, mod), "cuModuleGetFunctionCount", "module");
  std::vector<CUfunction> fns(n);
  if (n > 0) check(a.cuModuleEnumerateFunctions(fns.data(), n, mod), "cuModuleEnumerateFunctions", "module");
  std::vector<std::string> names;
  names.reserve(n);
  for (CUfunction f : fns) {
    const char* name = nullptr;
    check(a.cuFuncGetName(&name, f), "cuFuncGetName", "module");
    names.emplace_back(name != nullptr ? name : "");
  }
  return names;
}

std::vector<std::size_t> function_parameter_sizes(CUfunction fn, std::size_t count, std::string_view name) {
  const EntryPoints& a = api();
  std::vector<std::size_t> sizes(count);
  for (std::size_t i = 0; i < count; ++i) {
    std::size_t offset = 0;
    check(a.cuFuncGetParamInfo(fn, i, &offset, &sizes[i]), "cuFuncGetParamInfo", std::string("kernel ").append(name));
  }
  return sizes;
}

int function_attribute(CUfunction fn, CUfunction_attribute attr, std::string_view name) {
  int v = 0;
  check(api().cuFuncGetAttribute(&v, attr, fn), "cuFuncGetAttribute", std::string("kernel ").append(name));
  return v;
}

void set_function_attribute(CUfunction fn, CUfunction_attribute attr, int value, std::string_view name) {
  check(api().cuFuncSetAttribute(fn, attr, value), "cuFuncSetAttribute", std::string("kernel ").append(name));
}

void launch_kernel(CUfunction fn, const LaunchShape& shape, CUstream stream, void** args, std::string_view name) {
  if (!shape.early_launch) {
    const CUresult r = api().cuLaunchKernel(fn, shape.grid[0], shape.grid[1], shape.grid[2], shape.block[0],
                                            shape.block[1], shape.block[2], shape.shared_bytes, stream, args, nullptr);
    if (r != CUDA_SUCCESS) [[unlikely]]
      throw_error(r, "cuLaunchKernel", std::string("kernel ").append(name));
    return;
  }
  CUlaunchAttribute attribute{};
  attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attribute.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config{};
  config.gridDimX = shape.grid[0];
  config.gridDimY = shape.grid[1];
  config.gridDimZ = shape.grid[2];
  config.blockDimX = shape.block[0];
  config.blockDimY = shape.block[1];
  config.blockDimZ = shape.block[2];
  config.sharedMemBytes = shape.shared_bytes;
  config.hStream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  const CUresult r = api().cuLaunchKernelEx(&config, fn, args, nullptr);
  if (r != CUDA_SUCCESS) [[unlikely]]
    throw_error(r, "cuLaunchKernelEx (programmatic dependent launch)", std::string("kernel ").append(name));
}

void begin_capture(CUstream stream, CUstreamCaptureMode mode) {
  check(api().cuStreamBeginCapture(stream, mode), "cuStreamBeginCapture", "Stream");
}

CUresult end_capture_no_throw(CUstream stream, CUgraph* graph) noexcept {
  const Driver& d = instance();
  if (!d.usable) return CUDA_ERROR_NOT_INITIALIZED;
  return d.api.cuStreamEndCapture(stream, graph);
}

CUstreamCaptureStatus capture_status(CUstream stream) {
  CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_NONE;
  check(api().cuStreamIsCapturing(stream, &s), "cuStreamIsCapturing", "Stream");
  return s;
}

CUstreamCaptureStatus capture_status_no_throw(CUstream stream) noexcept {
  const Driver& d = instance();
  CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (!d.usable || d.api.cuStreamIsCapturing(stream, &s) != CUDA_SUCCESS) return CU_STREAM_CAPTURE_STATUS_ACTIVE;
  return s;
}

CUstreamCaptureMode exchange_capture_mode(CUstreamCaptureMode mode) {
  check(api().cuThreadExchangeStreamCaptureMode(&mode), "cuThreadExchangeStreamCaptureMode", "thread");
  return mode;
}

CUgraphExec graph_instantiate(CUgraph graph, std::string_view object) {
  CUgraphExec exec = nullptr;
  check(api().cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags", object);
  return exec;
}

void graph_upload(CUgraphExec exec, CUstream stream) {
  check(api().cuGraphUpload(exec, stream), "cuGraphUpload", "CudaGraph");
}

void graph_launch(CUgraphExec exec, CUstream stream) {
  check(api().cuGraphLaunch(exec, stream), "cuGraphLaunch", "CudaGraph");
}

void graph_destroy_no_throw(CUgraph graph) noexcept {
  const Driver& d = instance();
  if (d.usable && graph != nullptr) (void)d.api.cuGraphDestroy(graph);
}

void graph_exec_destroy_no_throw(CUgraphExec exec) noexcept {
  const Driver& d = instance();
  if (d.usable && exec != nullptr) (void)d.api.cuGraphExecDestroy(exec);
}

std::vector<CUgraphNode> graph_nodes(CUgraph graph) {
  const EntryPoints& a = api();
  std::size_t n = 0;
  check(a.cuGraphGetNodes(graph, nullptr, &n), "cuGraphGetNodes", "CudaGraph");
  std::vector<CUgraphNode> nodes(n);
  if (n > 0) check(a.cuGraphGetNodes(graph, nodes.data(), &n), "cuGraphGetNodes", "CudaGraph");
  return nodes;
}

GraphEdgeCounts graph_edge_counts(CUgraph graph) {
  const EntryPoints& a = api();
  std::size_t n = 0;
  check(a.cuGraphGetEdges(graph, nullptr, nullptr, nullptr, &n), "cuGraphGetEdges", "CudaGraph");
  std::vector<CUgraphNode> from(n);
  std::vector<CUgraphNode> to(n);
  std::vector<CUgraphEdgeData> data(n);
  if (n > 0) check(a.cuGraphGetEdges(graph, from.data(), to.data(), data.data(), &n), "cuGraphGetEdges", "CudaGraph");
  GraphEdgeCounts counts{n, 0};
  for (std::size_t i = 0; i < n; ++i)
    counts.programmatic += data[i].type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC ? 1 : 0;
  return counts;
}

CUgraphNodeType graph_node_type(CUgraphNode node) {
  CUgraphNodeType t{};
  check(api().cuGraphNodeGetType(node, &t), "cuGraphNodeGetType", "CudaGraph node");
  return t;
}

void graph_write_dot(CUgraph graph, const std::string& path) {
  check(api().cuGraphDebugDotPrint(graph, path.c_str(), CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE), "cuGraphDebugDotPrint",
        path);
}

bool graph_exec_update(CUgraphExec exec, CUgraph graph) {
  CUgraphExecUpdateResultInfo info{};
  const CUresult r = api().cuGraphExecUpdate(exec, graph, &info);
  if (r == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) return false;
  check(r, "cuGraphExecUpdate", "CudaGraph");
  return true;
}

}  // namespace lazygraph::detail::driver
