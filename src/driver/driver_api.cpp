// The one file that talks to libcuda. It is loaded with dlopen at first use, never linked, so every binary
// starts on a machine without a driver. Entry points come from cuGetProcAddress, asked for the ABI of the
// cuda.h this library was built against (CUDA_VERSION), and are typed from that header's declarations.

#include "lazygraph/detail/driver/driver_api.hpp"

#include <dlfcn.h>
#include <link.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <type_traits>

#include "lazygraph/driver/error.hpp"
#include "lazygraph/driver/live_handles.hpp"

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
  X(cuCtxGetCurrent)                     \
  X(cuCtxSetCurrent)                     \
  X(cuCtxGetDevice)                      \
  X(cuCtxSynchronize)                    \
  X(cuDeviceCanAccessPeer)               \
  X(cuCtxEnablePeerAccess)               \
  X(cuIpcGetMemHandle)                   \
  X(cuIpcOpenMemHandle)                  \
  X(cuIpcCloseMemHandle)                 \
  X(cuMemGetInfo)                        \
  X(cuMemGetAddressRange)                \
  X(cuStreamCreate)                      \
  X(cuStreamDestroy)                     \
  X(cuStreamSynchronize)                 \
  X(cuStreamQuery)                       \
  X(cuStreamWaitEvent)                   \
  X(cuEventCreate)                       \
  X(cuEventDestroy)                      \
  X(cuEventRecord)                       \
  X(cuEventSynchronize)                  \
  X(cuEventQuery)                        \
  X(cuEventElapsedTime)                  \
  X(cuMemAlloc)                          \
  X(cuMemFree)                           \
  X(cuMemHostAlloc)                      \
  X(cuMemFreeHost)                       \
  X(cuMemcpyHtoDAsync)                   \
  X(cuMemcpyDtoHAsync)                   \
  X(cuMemcpyDtoDAsync)                   \
  X(cuMemcpy2DAsync)                     \
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
  X(cuGraphKernelNodeSetAttribute)       \
  X(cuGraphKernelNodeGetAttribute)       \
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
  X(cuGraphExecUpdate)                   \
  X(cuGraphCreate)                       \
  X(cuGraphAddNode)                      \
  X(cuGraphExecNodeSetParams)            \
  X(cuGraphNodeGetDependencies)          \
  X(cuGraphNodeGetDependentNodes)        \
  X(cuGraphAddDependencies)              \
  X(cuGraphDestroyNode)                  \
  X(cuGraphKernelNodeGetParams)          \
  X(cuGraphChildGraphNodeGetGraph)       \
  X(cuLaunchHostFunc)                    \
  X(cuEventRecordWithFlags)              \
  X(cuStreamGetCaptureInfo)              \
  X(cuStreamUpdateCaptureDependencies)   \
  X(cuMemAllocAsync)                     \
  X(cuMemFreeAsync)                      \
  X(cuDeviceGraphMemTrim)                \
  X(cuDeviceGetGraphMemAttribute)        \
  X(cuDeviceSetGraphMemAttribute)        \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor)

struct EntryPoints {
#define LAZYGRAPH_DECLARE(fn) decltype(&::fn) fn = nullptr;  // NOLINT(bugprone-macro-parentheses): a name
  LAZYGRAPH_DRIVER_ENTRY_POINTS(LAZYGRAPH_DECLARE)
#undef LAZYGRAPH_DECLARE
  /// Optional (drivers for CUDA 12.4 and later): null on older drivers, which then cannot make conditions (and
  /// need neither of the two after it: only conditional bodies use them).
  decltype(&::cuGraphConditionalHandleCreate) cuGraphConditionalHandleCreate = nullptr;
  decltype(&::cuStreamBeginCaptureToGraph) cuStreamBeginCaptureToGraph = nullptr;
  decltype(&::cuGraphNodeSetParams) cuGraphNodeSetParams = nullptr;
};

// The position of each entry point in the list, for fault injection.
enum EntryIndex : int {
#define LAZYGRAPH_INDEX(fn) index_##fn,
  LAZYGRAPH_DRIVER_ENTRY_POINTS(LAZYGRAPH_INDEX)
#undef LAZYGRAPH_INDEX
      entry_count
};

struct Driver {
  EntryPoints api;
  bool usable = false;
  bool has_device = false;
  std::string why;  // set when !usable
};

std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

/// Where the dynamic loader found `lib`, for messages.
std::string loaded_path(void* lib, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr && *map->l_name != '\0') {
    return map->l_name;
  }
  return fallback;
}

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
  const std::string path = loaded_path(lib, library);
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    d.why = "cannot load CUDA driver: " + path + " has no cuGetProcAddress_v2 (a driver older than CUDA 12.0)";
    return d;
  }
  {
    // The toolkit ships a stub libcuda (lib64/stubs) for linking only; every call into it fails with
    // CUDA_ERROR_STUB_LIBRARY. Say so, instead of listing every entry point as missing.
    void* p = nullptr;
    CUdriverProcAddressQueryResult status{};
    if (get_proc("cuInit", &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_ERROR_STUB_LIBRARY) {
      d.why = "cannot load CUDA driver: " + path +
              " is the CUDA toolkit's stub library, not a driver (every call fails with CUDA_ERROR_STUB_LIBRARY); "
              "take the toolkit's lib64/stubs folder out of LD_LIBRARY_PATH (or the loader configuration), or "
              "install the NVIDIA driver, whose libcuda.so.1 the loader then finds";
      return d;
    }
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
  const auto fetch_optional = [&](const char* name, auto& entry) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult status{};
    if (get_proc(name, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS) {
      entry = reinterpret_cast<std::remove_reference_t<decltype(entry)>>(p);
    }
  };
  // Asked for at CUDA 13's ABI, cuCtxSynchronize and cuCtxGetDevice are the variants that take a context
  // (cuCtxSynchronize_v2, cuCtxGetDevice_v2), although cuda.h declares them without one: ask for the 12.0 ABI, the
  // one declared.
  const auto fetch_at_12_0 = [&](const char* name, auto& entry) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult status{};
    if (get_proc(name, &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS && p != nullptr) {
      entry = reinterpret_cast<std::remove_reference_t<decltype(entry)>>(p);
    }
  };
  fetch_at_12_0("cuCtxSynchronize", d.api.cuCtxSynchronize);
  fetch_at_12_0("cuCtxGetDevice", d.api.cuCtxGetDevice);
  fetch_optional("cuGraphConditionalHandleCreate", d.api.cuGraphConditionalHandleCreate);
  fetch_optional("cuStreamBeginCaptureToGraph", d.api.cuStreamBeginCaptureToGraph);
  fetch_optional("cuGraphNodeSetParams", d.api.cuGraphNodeSetParams);
  if (d.api.cuStreamBeginCaptureToGraph == nullptr || d.api.cuGraphNodeSetParams == nullptr) {
    d.api.cuGraphConditionalHandleCreate = nullptr;  // conditions only where their bodies can be recorded too
  }
  if (!missing.empty()) {
    int version = 0;
    const bool have_version = d.api.cuDriverGetVersion != nullptr && d.api.cuDriverGetVersion(&version) == CUDA_SUCCESS;
    d.why = "cannot load CUDA driver: " + path + " lacks " + missing + " (lazygraph was built against CUDA " +
            version_text(CUDA_VERSION) + "; this driver supports CUDA " +
            (have_version ? version_text(version) : std::string("of an unknown version")) +
            ": install a driver for CUDA " + version_text(CUDA_VERSION) + " or newer)";
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
    d.why = "cannot initialise CUDA driver " + path + ": cuInit failed with " +
            (name != nullptr ? std::string(name) : std::to_string(init));
    return d;
  }
  d.usable = true;
  d.has_device = true;
  return d;
}

// Mutable only for InjectedFault, which swaps entries while no other thread calls the driver.
Driver& instance() {
  static Driver d = load();
  return d;
}

/// The entry points; throws DriverUnavailable when the driver could not be loaded.
const EntryPoints& api() {
  const Driver& d = instance();
  if (!d.usable) [[unlikely]]
    throw DriverUnavailable(d.why);
  return d.api;
}

struct Counters {
  std::atomic<long long> device_allocations{0};
  std::atomic<long long> device_bytes{0};
  std::atomic<long long> pinned_allocations{0};
  std::atomic<long long> pinned_bytes{0};
  std::atomic<long long> streams{0};
  std::atomic<long long> events{0};
  std::atomic<long long> modules{0};
  std::atomic<long long> graphs{0};
  std::atomic<long long> graph_execs{0};
};
Counters counters;  // NOLINT(cppcoreguidelines-avoid-non-const-global-variables): process-wide by nature

void count(std::atomic<long long>& counter, long long delta) noexcept {
  counter.fetch_add(delta, std::memory_order_relaxed);
}

/// Makes `ctx` current for the lifetime of this object. When the thread had another context current, that one
/// is current again afterwards; a thread that had none keeps `ctx` (nothing else relies on it having none).
/// A null `ctx` changes nothing.
class ContextScope {
 public:
  ContextScope(const EntryPoints& a, CUcontext ctx) : a_(a) {
    if (ctx == nullptr) return;
    CUcontext current = nullptr;
    check(a.cuCtxGetCurrent(&current), "cuCtxGetCurrent", "the calling thread");
    if (current == ctx) return;
    check(a.cuCtxSetCurrent(ctx), "cuCtxSetCurrent", "the device's primary context");
    previous_ = current;
  }
  /// The no-throw form: `ok()` says whether `ctx` is current.
  ContextScope(const EntryPoints& a, CUcontext ctx, std::nothrow_t /*unused*/) noexcept : a_(a) {
    if (ctx == nullptr) return;
    CUcontext current = nullptr;
    if (a.cuCtxGetCurrent(&current) != CUDA_SUCCESS) {
      ok_ = false;
      return;
    }
    if (current == ctx) return;
    ok_ = a.cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
    if (ok_) previous_ = current;
  }
  ~ContextScope() {
    if (previous_ != nullptr) (void)a_.cuCtxSetCurrent(previous_);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

  [[nodiscard]] bool ok() const noexcept { return ok_; }

 private:
  const EntryPoints& a_;
  CUcontext previous_ = nullptr;
  bool ok_ = true;
};

/// Runs `f(entry points)` with `ctx` current; for the no-throw wrappers (false when the driver is unusable or
/// the context could not be made current).
template <class F>
bool with_context_no_throw(CUcontext ctx, F&& f) noexcept {
  const Driver& d = instance();
  if (!d.usable) return false;
  const ContextScope scope(d.api, ctx, std::nothrow);
  if (!scope.ok()) return false;
  f(d.api);
  return true;
}

/// check() for calls about one device: the object's name is made only when the call failed.
void check_device(CUresult code, std::string_view api_name, int device) {
  if (code != CUDA_SUCCESS) [[unlikely]]
    throw_error(code, api_name, "device " + std::to_string(device));
}

/// check() for calls about one driver object: names the instance ("stream 0x7f3a0c001230 on device 0"), made only
/// when the call failed (with the object's context current, which says the device).
void check_instance(CUresult code, std::string_view api_name, std::string_view kind, const void* handle) {
  if (code != CUDA_SUCCESS) [[unlikely]]
    throw_error(code, api_name, describe_instance(kind, handle));
}

}  // namespace

std::string describe_instance(std::string_view kind, const void* handle) {
  std::array<char, 32> address{};
  std::snprintf(address.data(), address.size(), "%p", handle);
  std::string out = std::string(kind) + " " + address.data();
  const Driver& d = instance();
  CUdevice device = 0;
  if (d.usable && d.api.cuCtxGetDevice(&device) == CUDA_SUCCESS) out += " on device " + std::to_string(device);
  return out;
}

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
  throw CudaError(std::string(api_name), static_cast<int>(code), result_name(code), text, std::string(object));
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
  check_device(api().cuDeviceGet(&dev, ordinal), "cuDeviceGet", ordinal);
  return dev;
}

std::string device_name(CUdevice dev) {
  char buf[256] = {};
  check_device(api().cuDeviceGetName(buf, sizeof buf - 1, dev), "cuDeviceGetName", dev);
  return buf;
}

int device_attribute(CUdevice dev, CUdevice_attribute attr) {
  int v = 0;
  const CUresult r = api().cuDeviceGetAttribute(&v, attr, dev);
  if (r != CUDA_SUCCESS) [[unlikely]] {
    throw_error(r, "cuDeviceGetAttribute",
                "device " + std::to_string(dev) + " attribute " + std::to_string(static_cast<int>(attr)));
  }
  return v;
}

std::size_t device_total_memory(CUdevice dev) {
  std::size_t bytes = 0;
  check_device(api().cuDeviceTotalMem(&bytes, dev), "cuDeviceTotalMem", dev);
  return bytes;
}

CUcontext primary_context_retain(CUdevice dev) {
  CUcontext ctx = nullptr;
  check_device(api().cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain", dev);
  return ctx;
}

void primary_context_release_no_throw(CUdevice dev) noexcept {
  const Driver& d = instance();
  if (d.usable) (void)d.api.cuDevicePrimaryCtxRelease(dev);
}

CUcontext current_context() {
  CUcontext ctx = nullptr;
  check(api().cuCtxGetCurrent(&ctx), "cuCtxGetCurrent", "the calling thread");
  return ctx;
}

CurrentContext::CurrentContext(CUcontext ctx) {
  const EntryPoints& a = api();
  check(a.cuCtxGetCurrent(&previous_), "cuCtxGetCurrent", "the calling thread");
  if (previous_ == ctx) return;
  check(a.cuCtxSetCurrent(ctx), "cuCtxSetCurrent", "the device's primary context");
  restore_ = previous_ != nullptr;
}

CurrentContext::~CurrentContext() {
  if (restore_) (void)instance().api.cuCtxSetCurrent(previous_);
}

RelaxedCapture::RelaxedCapture() {
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  check(api().cuThreadExchangeStreamCaptureMode(&mode), "cuThreadExchangeStreamCaptureMode", "the calling thread");
  previous_ = mode;
}

RelaxedCapture::~RelaxedCapture() {
  CUstreamCaptureMode mode = previous_;
  (void)instance().api.cuThreadExchangeStreamCaptureMode(&mode);
}

void context_synchronize(CUcontext ctx) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  if (const CUresult r = a.cuCtxSynchronize(); r != CUDA_SUCCESS) [[unlikely]]
    throw_error(r, "cuCtxSynchronize", describe_instance("context", ctx));
}

bool device_can_access_peer(CUdevice dev, CUdevice peer) {
  int can = 0;
  check_device(api().cuDeviceCanAccessPeer(&can, dev, peer), "cuDeviceCanAccessPeer", dev);
  return can != 0;
}

void context_enable_peer_access(CUcontext ctx, CUcontext peer) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  const CUresult r = a.cuCtxEnablePeerAccess(peer, 0);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) [[unlikely]]
    throw_error(r, "cuCtxEnablePeerAccess", describe_instance("context", ctx));
}

CUipcMemHandle ipc_handle(CUcontext ctx, CUdeviceptr address, std::string_view object) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  CUipcMemHandle h{};
  check(a.cuIpcGetMemHandle(&h, address), "cuIpcGetMemHandle", object);
  return h;
}

CUdeviceptr ipc_open(CUcontext ctx, const CUipcMemHandle& handle, std::string_view object) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  CUdeviceptr p = 0;
  check(a.cuIpcOpenMemHandle(&p, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle", object);
  return p;
}

void ipc_close_no_throw(CUcontext ctx, CUdeviceptr address) noexcept {
  (void)with_context_no_throw(ctx, [&](const EntryPoints& a) { (void)a.cuIpcCloseMemHandle(address); });
}

std::size_t bytes_to_allocation_end(CUcontext ctx, CUdeviceptr address, std::string_view object) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  CUdeviceptr base = 0;
  std::size_t size = 0;
  check(a.cuMemGetAddressRange(&base, &size, address), "cuMemGetAddressRange", object);
  return address >= base && address - base <= size ? size - (address - base) : 0;
}

void memory_info(CUcontext ctx, std::size_t* free_bytes, std::size_t* total_bytes) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  check(a.cuMemGetInfo(free_bytes, total_bytes), "cuMemGetInfo", "device memory");
}

CUstream stream_create(CUcontext ctx) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  CUstream s = nullptr;
  check(a.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate", "Stream");
  count(counters.streams, 1);
  return s;
}

void stream_destroy_no_throw(CUcontext ctx, CUstream stream) noexcept {
  if (stream == nullptr) return;
  if (with_context_no_throw(ctx, [&](const EntryPoints& a) { (void)a.cuStreamDestroy(stream); })) {
    count(counters.streams, -1);
  }
}

void stream_synchronize(CUcontext ctx, CUstream stream) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  check_instance(a.cuStreamSynchronize(stream), "cuStreamSynchronize", "stream", stream);
}

bool stream_query(CUcontext ctx, CUstream stream) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  const CUresult r = a.cuStreamQuery(stream);
  if (r == CUDA_ERROR_NOT_READY) return false;
  check_instance(r, "cuStreamQuery", "stream", stream);
  return true;
}

void stream_wait_event(CUcontext ctx, CUstream stream, CUevent event) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  check_instance(a.cuStreamWaitEvent(stream, event, 0), "cuStreamWaitEvent", "stream", stream);
}

CUevent event_create(CUcontext ctx, unsigned flags) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  CUevent e = nullptr;
  check(a.cuEventCreate(&e, flags), "cuEventCreate", "Event");
  count(counters.events, 1);
  return e;
}

void event_destroy_no_throw(CUcontext ctx, CUevent event) noexcept {
  if (event == nullptr) return;
  if (with_context_no_throw(ctx, [&](const EntryPoints& a) { (void)a.cuEventDestroy(event); })) {
    count(counters.events, -1);
  }
}

void event_record(CUcontext ctx, CUevent event, CUstream stream) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  check_instance(a.cuEventRecord(event, stream), "cuEventRecord", "event", event);
}

void event_synchronize(CUcontext ctx, CUevent event) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  check_instance(a.cuEventSynchronize(event), "cuEventSynchronize", "event", event);
}

bool event_query(CUcontext ctx, CUevent event) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  const CUresult r = a.cuEventQuery(event);
  if (r == CUDA_ERROR_NOT_READY) return false;
  check_instance(r, "cuEventQuery", "event", event);
  return true;
}

bool event_query_no_throw(CUcontext ctx, CUevent event) noexcept {
  bool done = false;
  (void)with_context_no_throw(ctx, [&](const EntryPoints& a) { done = a.cuEventQuery(event) == CUDA_SUCCESS; });
  return done;
}

float event_elapsed_ms(CUcontext ctx, CUevent start, CUevent end) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  float ms = 0;
  check(a.cuEventElapsedTime(&ms, start, end), "cuEventElapsedTime", "Event pair");
  return ms;
}

CUdeviceptr memory_allocate(CUcontext ctx, std::size_t bytes, std::string_view object) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  CUdeviceptr p = 0;
  check(a.cuMemAlloc(&p, bytes), "cuMemAlloc", object);
  count(counters.device_allocations, 1);
  count(counters.device_bytes, static_cast<long long>(bytes));
  return p;
}

void memory_free_no_throw(CUcontext ctx, CUdeviceptr ptr, std::size_t bytes) noexcept {
  if (ptr == 0) return;
  if (with_context_no_throw(ctx, [&](const EntryPoints& a) { (void)a.cuMemFree(ptr); })) {
    count(counters.device_allocations, -1);
    count(counters.device_bytes, -static_cast<long long>(bytes));
  }
}

void* pinned_allocate(CUcontext ctx, std::size_t bytes, std::string_view object) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  void* p = nullptr;
  // Mapped as well: kernels may read and write it (HostIo's staging copies; with unified addressing, at the same
  // address).
  check(a.cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP), "cuMemHostAlloc", object);
  count(counters.pinned_allocations, 1);
  count(counters.pinned_bytes, static_cast<long long>(bytes));
  return p;
}

void pinned_free_no_throw(CUcontext ctx, void* ptr, std::size_t bytes) noexcept {
  if (ptr == nullptr) return;
  if (with_context_no_throw(ctx, [&](const EntryPoints& a) { (void)a.cuMemFreeHost(ptr); })) {
    count(counters.pinned_allocations, -1);
    count(counters.pinned_bytes, -static_cast<long long>(bytes));
  }
}

void copy_host_to_device(CUcontext ctx, CUdeviceptr dst, const void* src, std::size_t bytes, CUstream stream) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  const CUresult r = a.cuMemcpyHtoDAsync(dst, src, bytes, stream);
  if (r != CUDA_SUCCESS) [[unlikely]]
    throw_error(r, "cuMemcpyHtoDAsync", std::to_string(bytes) + " bytes host to device");
}

void copy_device_to_host(CUcontext ctx, void* dst, CUdeviceptr src, std::size_t bytes, CUstream stream) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  const CUresult r = a.cuMemcpyDtoHAsync(dst, src, bytes, stream);
  if (r != CUDA_SUCCESS) [[unlikely]]
    throw_error(r, "cuMemcpyDtoHAsync", std::to_string(bytes) + " bytes device to host");
}

void copy_device_to_device(CUcontext ctx, CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream stream) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  const CUresult r = a.cuMemcpyDtoDAsync(dst, src, bytes, stream);
  if (r != CUDA_SUCCESS) [[unlikely]]
    throw_error(r, "cuMemcpyDtoDAsync", std::to_string(bytes) + " bytes device to device");
}

void copy_device_to_device_2d(CUcontext ctx, CUdeviceptr dst, std::size_t dst_pitch, CUdeviceptr src,
                              std::size_t src_pitch, std::size_t width_bytes, std::size_t rows, CUstream stream) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  CUDA_MEMCPY2D copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = src;
  copy.srcPitch = src_pitch;
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.dstDevice = dst;
  copy.dstPitch = dst_pitch;
  copy.WidthInBytes = width_bytes;
  copy.Height = rows;
  const CUresult r = a.cuMemcpy2DAsync(&copy, stream);
  if (r != CUDA_SUCCESS) [[unlikely]]
    throw_error(r, "cuMemcpy2DAsync",
                std::to_string(rows) + " rows of " + std::to_string(width_bytes) + " bytes device to device");
}

void fill(CUcontext ctx, CUdeviceptr dst, unsigned pattern, std::size_t element_size, std::size_t count,
          CUstream stream) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
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
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  CUmodule m = nullptr;
  check(a.cuModuleLoadData(&m, image), "cuModuleLoadData", object);
  count(counters.modules, 1);
  return m;
}

void module_unload_no_throw(CUcontext ctx, CUmodule mod) noexcept {
  if (mod == nullptr) return;
  if (with_context_no_throw(ctx, [&](const EntryPoints& a) { (void)a.cuModuleUnload(mod); })) {
    count(counters.modules, -1);
  }
}

CUfunction module_function(CUcontext ctx, CUmodule mod, const std::string& name) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  CUfunction f = nullptr;
  const CUresult r = a.cuModuleGetFunction(&f, mod, name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND) return nullptr;
  check(r, "cuModuleGetFunction", "kernel " + name);
  return f;
}

std::vector<std::string> module_function_names(CUcontext ctx, CUmodule mod) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
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

std::vector<std::size_t> function_parameter_sizes(CUcontext ctx, CUfunction fn, std::size_t count,
                                                  std::string_view name) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  std::vector<std::size_t> sizes;
  sizes.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    std::size_t offset = 0;
    std::size_t size = 0;
    const CUresult r = a.cuFuncGetParamInfo(fn, i, &offset, &size);
    if (r != CUDA_SUCCESS) [[unlikely]]
      throw_error(r, "cuFuncGetParamInfo", "parameter " + std::to_string(i) + " of kernel " + std::string(name));
    sizes.push_back(size);
  }
  return sizes;
}

int function_attribute(CUcontext ctx, CUfunction fn, CUfunction_attribute attr, std::string_view name) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  int v = 0;
  const CUresult r = a.cuFuncGetAttribute(&v, attr, fn);
  if (r != CUDA_SUCCESS) [[unlikely]]
    throw_error(r, "cuFuncGetAttribute", std::string("kernel ").append(name));
  return v;
}

int max_active_blocks_per_sm(CUcontext ctx, CUfunction fn, int block_threads, std::size_t dynamic_shared,
                             std::string_view name) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  int blocks = 0;
  const CUresult r = a.cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fn, block_threads, dynamic_shared);
  if (r != CUDA_SUCCESS) [[unlikely]]
    throw_error(r, "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                std::string("kernel ").append(name) + " with blocks of " + std::to_string(block_threads) + " threads");
  return blocks;
}

void set_function_attribute(CUcontext ctx, CUfunction fn, CUfunction_attribute attr, int value, std::string_view name) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  const CUresult r = a.cuFuncSetAttribute(fn, attr, value);
  if (r != CUDA_SUCCESS) [[unlikely]]
    throw_error(r, "cuFuncSetAttribute", std::string("kernel ").append(name));
}

void launch_kernel(CUcontext ctx, CUfunction fn, const LaunchShape& shape, CUstream stream, void** args,
                   std::string_view name) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  if (!shape.early_launch && !shape.clustered() && shape.carveout < 0) {
    const CUresult r = a.cuLaunchKernel(fn, shape.grid[0], shape.grid[1], shape.grid[2], shape.block[0], shape.block[1],
                                        shape.block[2], shape.shared_bytes, stream, args, nullptr);
    if (r != CUDA_SUCCESS) [[unlikely]]
      throw_error(r, "cuLaunchKernel", std::string("kernel ").append(name));
    return;
  }
  CUlaunchAttribute attributes[3]{};
  unsigned count = 0;
  if (shape.early_launch) {
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attributes[count++].value.programmaticStreamSerializationAllowed = 1;
  }
  if (shape.clustered()) {
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attributes[count].value.clusterDim.x = shape.cluster[0];
    attributes[count].value.clusterDim.y = shape.cluster[1];
    attributes[count++].value.clusterDim.z = shape.cluster[2];
  }
  if (shape.carveout >= 0) {
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT;
    attributes[count++].value.sharedMemCarveout = static_cast<unsigned>(shape.carveout);
  }
  CUlaunchConfig config{};
  config.gridDimX = shape.grid[0];
  config.gridDimY = shape.grid[1];
  config.gridDimZ = shape.grid[2];
  config.blockDimX = shape.block[0];
  config.blockDimY = shape.block[1];
  config.blockDimZ = shape.block[2];
  config.sharedMemBytes = shape.shared_bytes;
  config.hStream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  const CUresult r = a.cuLaunchKernelEx(&config, fn, args, nullptr);
  if (r != CUDA_SUCCESS) [[unlikely]] {
    std::string how;
    if (shape.early_launch) how += ", programmatic dependent launch";
    if (shape.clustered()) how += ", clusters";
    if (shape.carveout >= 0) how += ", shared memory carveout";
    throw_error(r, "cuLaunchKernelEx (" + how.substr(2) + ")", std::string("kernel ").append(name));
  }
}

void graph_kernel_node_set_attributes(CUgraphNode node, const LaunchShape& shape, std::string_view object) {
  if (shape.clustered()) {
    CUlaunchAttributeValue value{};
    value.clusterDim.x = shape.cluster[0];
    value.clusterDim.y = shape.cluster[1];
    value.clusterDim.z = shape.cluster[2];
    const CUresult r = api().cuGraphKernelNodeSetAttribute(node, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &value);
    if (r != CUDA_SUCCESS) [[unlikely]]
      throw_error(r, "cuGraphKernelNodeSetAttribute (cluster dimension)", object);
  }
  if (shape.carveout >= 0) {
    CUlaunchAttributeValue value{};
    value.sharedMemCarveout = static_cast<unsigned>(shape.carveout);
    const CUresult r =
        api().cuGraphKernelNodeSetAttribute(node, CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, &value);
    if (r != CUDA_SUCCESS) [[unlikely]]
      throw_error(r, "cuGraphKernelNodeSetAttribute (shared memory carveout)", object);
  }
}

void begin_capture(CUcontext ctx, CUstream stream, CUstreamCaptureMode mode) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  check_instance(a.cuStreamBeginCapture(stream, mode), "cuStreamBeginCapture", "stream", stream);
}

void begin_capture_to_graph(CUcontext ctx, CUstream stream, CUgraph graph, CUstreamCaptureMode mode) {
  const EntryPoints& a = api();
  if (a.cuStreamBeginCaptureToGraph == nullptr) {
    throw UsageError(
        "capturing into a conditional body needs a CUDA driver for CUDA 12.4 or newer; this one supports "
        "CUDA " +
        version_text(driver_version()));
  }
  const ContextScope scope(a, ctx);
  check(a.cuStreamBeginCaptureToGraph(stream, graph, nullptr, nullptr, 0, mode), "cuStreamBeginCaptureToGraph",
        "conditional body");
}

CUresult end_capture_no_throw(CUcontext ctx, CUstream stream, CUgraph* graph, bool new_graph) noexcept {
  CUresult r = CUDA_ERROR_NOT_INITIALIZED;
  if (!with_context_no_throw(ctx, [&](const EntryPoints& a) { r = a.cuStreamEndCapture(stream, graph); })) {
    return r == CUDA_SUCCESS ? CUDA_ERROR_INVALID_CONTEXT : r;
  }
  if (new_graph && r == CUDA_SUCCESS && graph != nullptr && *graph != nullptr) count(counters.graphs, 1);
  return r;
}

CUstreamCaptureStatus capture_status(CUcontext ctx, CUstream stream) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_NONE;
  check_instance(a.cuStreamIsCapturing(stream, &s), "cuStreamIsCapturing", "stream", stream);
  return s;
}

CUstreamCaptureStatus capture_status_no_throw(CUcontext ctx, CUstream stream) noexcept {
  CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  bool answered = false;
  (void)with_context_no_throw(
      ctx, [&](const EntryPoints& a) { answered = a.cuStreamIsCapturing(stream, &s) == CUDA_SUCCESS; });
  return answered ? s : CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

CUgraphExec graph_instantiate(CUcontext ctx, CUgraph graph, unsigned long long flags, std::string_view object) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  CUgraphExec exec = nullptr;
  check(a.cuGraphInstantiateWithFlags(&exec, graph, flags), "cuGraphInstantiateWithFlags", object);
  count(counters.graph_execs, 1);
  return exec;
}

void graph_upload(CUcontext ctx, CUgraphExec exec, CUstream stream, std::string_view object) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  if (const CUresult r = a.cuGraphUpload(exec, stream); r != CUDA_SUCCESS) [[unlikely]]
    throw_error(r, "cuGraphUpload", std::string(object) + " (" + describe_instance("executable graph", exec) + ")");
}

void graph_launch(CUcontext ctx, CUgraphExec exec, CUstream stream, std::string_view object) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  if (const CUresult r = a.cuGraphLaunch(exec, stream); r != CUDA_SUCCESS) [[unlikely]]
    throw_error(r, "cuGraphLaunch", std::string(object) + " (" + describe_instance("executable graph", exec) + ")");
}

CUgraphConditionalHandle conditional_handle_create(CUcontext ctx, CUgraph graph, unsigned default_value) {
  const EntryPoints& a = api();
  if (a.cuGraphConditionalHandleCreate == nullptr) {
    throw UsageError(
        "graph conditions (if_, while_, switch_) need a CUDA driver for CUDA 12.4 or newer; this one "
        "supports CUDA " +
        version_text(driver_version()));
  }
  const ContextScope scope(a, ctx);
  CUgraphConditionalHandle handle = 0;
  check(a.cuGraphConditionalHandleCreate(&handle, graph, ctx, default_value, CU_GRAPH_COND_ASSIGN_DEFAULT),
        "cuGraphConditionalHandleCreate", "Condition");
  return handle;
}

void graph_destroy_no_throw(CUgraph graph) noexcept {
  if (graph == nullptr) return;  // before instance(): destroying an empty handle must not load the driver
  const Driver& d = instance();
  if (!d.usable) return;
  (void)d.api.cuGraphDestroy(graph);
  count(counters.graphs, -1);
}

void graph_exec_destroy_no_throw(CUcontext ctx, CUgraphExec exec) noexcept {
  if (exec == nullptr) return;
  if (with_context_no_throw(ctx, [&](const EntryPoints& a) { (void)a.cuGraphExecDestroy(exec); })) {
    count(counters.graph_execs, -1);
  }
}

std::vector<CUgraphNode> graph_nodes(CUgraph graph) {
  const EntryPoints& a = api();
  std::size_t n = 0;
  check(a.cuGraphGetNodes(graph, nullptr, &n), "cuGraphGetNodes", "CudaGraph");
  std::vector<CUgraphNode> nodes(n);
  if (n > 0) check(a.cuGraphGetNodes(graph, nodes.data(), &n), "cuGraphGetNodes", "CudaGraph");
  return nodes;
}

namespace {

void append_kernel_attributes(const EntryPoints& a, CUgraph graph, std::vector<KernelNodeAttributes>& out) {
  for (CUgraphNode node : graph_nodes(graph)) {
    CUgraphNodeType type{};
    check(a.cuGraphNodeGetType(node, &type), "cuGraphNodeGetType", "CudaGraph");
    if (type == CU_GRAPH_NODE_TYPE_GRAPH) {
      CUgraph child = nullptr;  // the node's own copy, which the node owns
      check(a.cuGraphChildGraphNodeGetGraph(node, &child), "cuGraphChildGraphNodeGetGraph", "child graph node");
      append_kernel_attributes(a, child, out);
      continue;
    }
    if (type != CU_GRAPH_NODE_TYPE_KERNEL) continue;
    CUlaunchAttributeValue value{};
    check(a.cuGraphKernelNodeGetAttribute(node, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &value),
          "cuGraphKernelNodeGetAttribute (cluster dimension)", "CudaGraph");
    // A node launched without clusters reads as 0 x 0 x 0 or 1 x 1 x 1: both are no cluster.
    const auto one = [](unsigned v) { return v == 0 ? 1U : v; };
    KernelNodeAttributes& node_attributes = out.emplace_back();
    node_attributes.cluster = {one(value.clusterDim.x), one(value.clusterDim.y), one(value.clusterDim.z)};
    value = {};
    check(a.cuGraphKernelNodeGetAttribute(node, CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, &value),
          "cuGraphKernelNodeGetAttribute (shared memory carveout)", "CudaGraph");
    node_attributes.carveout = value.sharedMemCarveout;
  }
}

}  // namespace

std::vector<KernelNodeAttributes> graph_kernel_attributes(CUgraph graph) {
  std::vector<KernelNodeAttributes> out;
  append_kernel_attributes(api(), graph, out);
  return out;
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

ExecUpdateOutcome graph_exec_update(CUcontext ctx, CUgraphExec exec, CUgraph graph) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  CUgraphExecUpdateResultInfo info{};
  const CUresult r = a.cuGraphExecUpdate(exec, graph, &info);
  if (r != CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) check(r, "cuGraphExecUpdate", "CudaGraph");
  return {r == CUDA_SUCCESS, info.result, info.errorNode};
}

CUgraph graph_create() {
  CUgraph graph = nullptr;
  check(api().cuGraphCreate(&graph, 0), "cuGraphCreate", "CudaGraph::build");
  count(counters.graphs, 1);
  return graph;
}

CUgraphNode graph_add_node(CUgraph graph, const CUgraphNode* dependencies, const CUgraphEdgeData* edges,
                           std::size_t count, CUgraphNodeParams* params, std::string_view object) {
  CUgraphNode node = nullptr;
  const CUresult r = api().cuGraphAddNode(&node, graph, dependencies, edges, count, params);
  if (r != CUDA_SUCCESS) [[unlikely]]
    throw_error(r, "cuGraphAddNode", object);
  return node;
}

void graph_exec_set_node_params(CUcontext ctx, CUgraphExec exec, CUgraphNode node, CUgraphNodeParams* params,
                                std::string_view object) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  const CUresult r = a.cuGraphExecNodeSetParams(exec, node, params);
  if (r != CUDA_SUCCESS) [[unlikely]]
    throw_error(r, "cuGraphExecNodeSetParams", object);
}

void graph_node_set_params(CUgraphNode node, CUgraphNodeParams* params, std::string_view object) {
  const EntryPoints& a = api();
  if (a.cuGraphNodeSetParams == nullptr) {
    throw UsageError("cuGraphNodeSetParams needs a CUDA driver for CUDA 12.2 or newer; this one supports CUDA " +
                     version_text(driver_version()));
  }
  const CUresult r = a.cuGraphNodeSetParams(node, params);
  if (r != CUDA_SUCCESS) [[unlikely]]
    throw_error(r, "cuGraphNodeSetParams", object);
}

CUdeviceptr memory_allocate_async(CUcontext ctx, std::size_t bytes, CUstream stream, std::string_view object) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  CUdeviceptr p = 0;
  check(a.cuMemAllocAsync(&p, bytes, stream), "cuMemAllocAsync", object);
  return p;
}

void memory_free_async(CUcontext ctx, CUdeviceptr ptr, CUstream stream, std::string_view object) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  check(a.cuMemFreeAsync(ptr, stream), "cuMemFreeAsync", object);
}

GraphMemory graph_memory(CUcontext ctx, CUdevice dev) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  GraphMemory m;
  const auto get = [&](CUgraphMem_attribute attr, std::size_t* out) {
    cuuint64_t v = 0;
    check(a.cuDeviceGetGraphMemAttribute(dev, attr, &v), "cuDeviceGetGraphMemAttribute", "GraphPool");
    *out = static_cast<std::size_t>(v);
  };
  get(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &m.used);
  get(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &m.used_peak);
  get(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &m.reserved);
  get(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &m.reserved_peak);
  return m;
}

void graph_memory_reset_peaks(CUcontext ctx, CUdevice dev) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  cuuint64_t zero = 0;
  check(a.cuDeviceSetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero), "cuDeviceSetGraphMemAttribute",
        "GraphPool");
  check(a.cuDeviceSetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &zero), "cuDeviceSetGraphMemAttribute",
        "GraphPool");
}

void graph_memory_trim(CUcontext ctx, CUdevice dev) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  check(a.cuDeviceGraphMemTrim(dev), "cuDeviceGraphMemTrim", "GraphPool");
}

namespace {

// A node's edges on one side: its dependencies (cuGraphNodeGetDependencies) or its dependents
// (cuGraphNodeGetDependentNodes), which the driver reports through the same two-call signature.
using EdgeQuery = decltype(&::cuGraphNodeGetDependencies);
static_assert(std::is_same_v<EdgeQuery, decltype(&::cuGraphNodeGetDependentNodes)>);

std::vector<NodeDependency> node_edges(EdgeQuery query, const char* api_name, CUgraphNode node) {
  std::size_t n = 0;
  check(query(node, nullptr, nullptr, &n), api_name, "CudaGraph node");
  std::vector<CUgraphNode> other(n);
  std::vector<CUgraphEdgeData> data(n);
  if (n > 0) check(query(node, other.data(), data.data(), &n), api_name, "CudaGraph node");
  std::vector<NodeDependency> edges(n);
  for (std::size_t i = 0; i < n; ++i) edges[i] = {other[i], data[i]};
  return edges;
}

}  // namespace

std::vector<NodeDependency> graph_node_dependencies(CUgraphNode node) {
  return node_edges(api().cuGraphNodeGetDependencies, "cuGraphNodeGetDependencies", node);
}

std::size_t graph_replace_event_nodes(CUgraph graph) {
  const EntryPoints& a = api();
  std::size_t replaced = 0;
  for (const CUgraphNode node : graph_nodes(graph)) {
    const CUgraphNodeType type = graph_node_type(node);
    if (type != CU_GRAPH_NODE_TYPE_EVENT_RECORD && type != CU_GRAPH_NODE_TYPE_WAIT_EVENT) continue;
    const std::vector<NodeDependency> before = graph_node_dependencies(node);
    const std::vector<NodeDependency> after =
        node_edges(a.cuGraphNodeGetDependentNodes, "cuGraphNodeGetDependentNodes", node);
    std::vector<CUgraphNode> from;
    std::vector<CUgraphEdgeData> from_edges;
    for (const NodeDependency& d : before) {
      from.push_back(d.node);
      from_edges.push_back(d.edge);
    }
    check(a.cuGraphDestroyNode(node), "cuGraphDestroyNode", "event node");
    CUgraphNodeParams params{};
    params.type = CU_GRAPH_NODE_TYPE_EMPTY;
    const CUgraphNode empty = graph_add_node(graph, from.data(), from_edges.data(), from.size(), &params,
                                             "empty node in place of an event node");
    for (const NodeDependency& d : after) {
      check(a.cuGraphAddDependencies(graph, &empty, &d.node, &d.edge, 1), "cuGraphAddDependencies",
            "empty node in place of an event node");
    }
    ++replaced;
  }
  return replaced;
}

CUfunction graph_kernel_node_function(CUgraphNode node) {
  CUDA_KERNEL_NODE_PARAMS params{};
  check(api().cuGraphKernelNodeGetParams(node, &params), "cuGraphKernelNodeGetParams", "CudaGraph node");
  return params.func;
}

void launch_host_function(CUcontext ctx, CUstream stream, CUhostFn fn, void* user_data) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  check_instance(a.cuLaunchHostFunc(stream, fn, user_data), "cuLaunchHostFunc", "host_call on stream", stream);
}

void event_record_with_flags(CUcontext ctx, CUevent event, CUstream stream, unsigned flags) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  check_instance(a.cuEventRecordWithFlags(event, stream, flags), "cuEventRecordWithFlags", "event", event);
}

void stream_wait_event_with_flags(CUcontext ctx, CUstream stream, CUevent event, unsigned flags) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  check_instance(a.cuStreamWaitEvent(stream, event, flags), "cuStreamWaitEvent", "stream", stream);
}

CaptureFrontier capture_frontier(CUcontext ctx, CUstream stream) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  CUstreamCaptureStatus status{};
  cuuint64_t id = 0;
  CaptureFrontier f;
  const CUgraphNode* deps = nullptr;
  const CUgraphEdgeData* edges = nullptr;
  std::size_t n = 0;
  check(a.cuStreamGetCaptureInfo(stream, &status, &id, &f.graph, &deps, &edges, &n), "cuStreamGetCaptureInfo",
        "Stream");
  if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
    throw_error(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "cuStreamGetCaptureInfo", "Stream");
  f.dependencies.assign(deps, deps + n);
  if (edges != nullptr) f.edges.assign(edges, edges + n);
  return f;
}

void capture_set_frontier(CUcontext ctx, CUstream stream, const CUgraphNode* nodes, const CUgraphEdgeData* edges,
                          std::size_t count) {
  const EntryPoints& a = api();
  const ContextScope scope(a, ctx);
  check(a.cuStreamUpdateCaptureDependencies(stream, const_cast<CUgraphNode*>(nodes), edges, count,
                                            CU_STREAM_SET_CAPTURE_DEPENDENCIES),
        "cuStreamUpdateCaptureDependencies", "Stream");
}

// ------------------------------------------------------------------------------------------------------------
// Fault injection: for each entry point, a function of the same type that returns the injected result.

namespace {

std::array<std::atomic<CUresult>, entry_count> injected_codes{};

template <int Index, class F>
struct Failing;
template <int Index, class... A>
struct Failing<Index, CUresult (*)(A...)> {
  static CUresult call(A... /*unused*/) { return injected_codes[Index].load(); }
};

struct Slot {
  std::string_view name;
  void* (*swap)(EntryPoints&, void*);
  void* failing;
};

// NOLINTBEGIN(bugprone-macro-parentheses): `fn` names a member, a type and a string
#define LAZYGRAPH_SLOT(fn)                           \
  Slot{#fn,                                          \
       [](EntryPoints& e, void* p) -> void* {        \
         void* old = reinterpret_cast<void*>(e.fn);  \
         e.fn = reinterpret_cast<decltype(e.fn)>(p); \
         return old;                                 \
       },                                            \
       reinterpret_cast<void*>(&Failing<index_##fn, decltype(&::fn)>::call)},
// NOLINTEND(bugprone-macro-parentheses)
const std::array<Slot, entry_count> slots = {LAZYGRAPH_DRIVER_ENTRY_POINTS(LAZYGRAPH_SLOT)};
#undef LAZYGRAPH_SLOT

}  // namespace

InjectedFault::InjectedFault(std::string_view api_name, CUresult code) : index_(-1), saved_(nullptr) {
  (void)api();
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].name == api_name) index_ = static_cast<int>(i);
  }
  if (index_ < 0) throw UsageError("InjectedFault: " + std::string(api_name) + " is not a driver entry point in use");
  injected_codes[static_cast<std::size_t>(index_)].store(code);
  saved_ =
      slots[static_cast<std::size_t>(index_)].swap(instance().api, slots[static_cast<std::size_t>(index_)].failing);
}

InjectedFault::~InjectedFault() { (void)slots[static_cast<std::size_t>(index_)].swap(instance().api, saved_); }

}  // namespace lazygraph::detail::driver

namespace lazygraph {

LiveHandles live_handles() noexcept {
  const auto get = [](const std::atomic<long long>& c) { return c.load(std::memory_order_relaxed); };
  return {get(detail::driver::counters.device_allocations),
          get(detail::driver::counters.device_bytes),
          get(detail::driver::counters.pinned_allocations),
          get(detail::driver::counters.pinned_bytes),
          get(detail::driver::counters.streams),
          get(detail::driver::counters.events),
          get(detail::driver::counters.modules),
          get(detail::driver::counters.graphs),
          get(detail::driver::counters.graph_execs)};
}

}  // namespace lazygraph
