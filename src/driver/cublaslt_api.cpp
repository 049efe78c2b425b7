// The one file that talks to cuBLASLt. libcublasLt.so.<major> is opened with dlopen on first use, never linked: a
// program without cuBLASLt starts, runs everything but GEMMs, and gets CublasUnavailable only when it plans one.

#include "lazygraph/detail/driver/cublaslt_api.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/driver/error.hpp"

namespace lazygraph::detail::cublaslt {

namespace {

// Each entry point, typed from cublasLt.h's declaration and fetched by its name.
#define LAZYGRAPH_CUBLASLT_ENTRY_POINTS(X) \
  X(cublasLtGetVersion)                    \
  X(cublasLtGetStatusString)               \
  X(cublasLtCreate)                        \
  X(cublasLtDestroy)                       \
  X(cublasLtMatmulDescCreate)              \
  X(cublasLtMatmulDescDestroy)             \
  X(cublasLtMatmulDescSetAttribute)        \
  X(cublasLtMatrixLayoutCreate)            \
  X(cublasLtMatrixLayoutDestroy)           \
  X(cublasLtMatmulPreferenceCreate)        \
  X(cublasLtMatmulPreferenceDestroy)       \
  X(cublasLtMatmulPreferenceSetAttribute)  \
  X(cublasLtMatmulAlgoGetHeuristic)        \
  X(cublasLtMatmul)

struct EntryPoints {
#define LAZYGRAPH_DECLARE(fn) decltype(&::fn) fn = nullptr;  // NOLINT(bugprone-macro-parentheses): a name
  LAZYGRAPH_CUBLASLT_ENTRY_POINTS(LAZYGRAPH_DECLARE)
#undef LAZYGRAPH_DECLARE
};

struct Library {
  EntryPoints api;
  void* handle = nullptr;  // the dlopen handle (never closed once usable: captured graphs run its kernels)
  bool usable = false;
  std::string path;
  std::string why;  // when not usable
  std::size_t version = 0;
};

// NOLINTBEGIN(cppcoreguidelines-avoid-non-const-global-variables): one cuBLASLt per process, loaded once
std::mutex load_mutex;
std::optional<std::string> chosen_path;  // set_library_path
std::optional<Library> loaded;
// NOLINTEND(cppcoreguidelines-avoid-non-const-global-variables)

std::string where_loaded(void* lib, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr && *map->l_name != '\0') {
    return map->l_name;
  }
  return fallback;
}

constexpr const char* how_to_point =
    "; install cuBLAS (the CUDA toolkit's libcublas package, or the nvidia-cublas wheel) or point lazygraph at "
    "libcublasLt with LAZYGRAPH_CUBLASLT_LIBRARY=/path/to/libcublasLt.so.N or lazygraph::set_cublaslt_library";

/// Opens `name` and fetches every entry point; the result says why it cannot be used, or holds the open library.
Library open(const std::string& name, std::string_view asked_by) {
  Library l;
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    const std::string reason = err != nullptr ? err : "not found";
    if (asked_by.empty()) {
      l.why =
          "cannot load cuBLASLt: the loader's search (LD_LIBRARY_PATH, the CUDA toolkit's lib64 in liblazygraph's "
          "RPATH, the loader cache) found no " +
          name + " (" + reason + ")" + how_to_point;
    } else {
      l.why = "cannot load cuBLASLt (" + name + ", as " + std::string(asked_by) + " asks): " + reason + how_to_point;
    }
    return l;
  }
  l.handle = lib;
  l.path = where_loaded(lib, name);
  std::string missing;
  const auto fetch = [&](const char* fn, auto& entry) {
    void* p = dlsym(lib, fn);
    entry = reinterpret_cast<std::remove_reference_t<decltype(entry)>>(p);
    if (p == nullptr) missing += missing.empty() ? fn : std::string(", ") + fn;
  };
#define LAZYGRAPH_FETCH(fn) fetch(#fn, l.api.fn);  // NOLINT(bugprone-macro-parentheses): a name
  LAZYGRAPH_CUBLASLT_ENTRY_POINTS(LAZYGRAPH_FETCH)
#undef LAZYGRAPH_FETCH
  if (!missing.empty()) {
    l.why = "cannot use cuBLASLt " + l.path + ": it lacks " + missing + " (is it libcublasLt?)" + how_to_point;
    return l;
  }
  l.version = l.api.cublasLtGetVersion();
  if (l.version / 10000 != CUBLAS_VER_MAJOR) {
    l.why = "cannot use cuBLASLt " + l.path + ": it is version " + version_text(l.version) + ", and lazygraph was " +
            "built against cuBLASLt " + std::to_string(CUBLAS_VER_MAJOR) + " (" + default_library_name() + ")" +
            how_to_point;
    return l;
  }
  l.usable = true;
  return l;
}

void close(Library& l) noexcept {
  if (l.handle != nullptr) (void)dlclose(l.handle);
  l.handle = nullptr;
}

Library load() {
  if (chosen_path) return open(*chosen_path, "set_cublaslt_library");
  if (const char* env = std::getenv("LAZYGRAPH_CUBLASLT_LIBRARY"); env != nullptr && *env != '\0') {
    return open(env, "LAZYGRAPH_CUBLASLT_LIBRARY");
  }
  return open(default_library_name(), "");
}

const Library& library() {
  const std::lock_guard lock(load_mutex);
  if (!loaded) {
    loaded = load();
    if (!loaded->usable) close(*loaded);  // a wrong library is not kept open
  }
  return *loaded;
}

const EntryPoints& api() {
  const Library& l = library();
  if (!l.usable) [[unlikely]]
    throw CublasUnavailable(l.why);
  return l.api;
}

void check(cublasStatus_t status, std::string_view api_name, std::string_view object) {
  if (status != CUBLAS_STATUS_SUCCESS) [[unlikely]]
    throw_error(static_cast<int>(status), api_name, object);
}

}  // namespace

std::string default_library_name() { return "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR); }

void set_library_path(std::string path) {
  const std::lock_guard lock(load_mutex);
  if (loaded && loaded->usable && loaded->path != path) {
    throw UsageError("set_cublaslt_library(" + path + "): cuBLASLt is already loaded from " + loaded->path +
                     "; call it before the first Gemm plan");
  }
  if (loaded && !loaded->usable) loaded.reset();  // try again with the new path
  chosen_path = std::move(path);
}

void ensure_loaded() { (void)api(); }

bool try_load(std::string* why) noexcept {
  try {
    const Library& l = library();
    if (!l.usable && why != nullptr) *why = l.why;
    return l.usable;
  } catch (const std::exception& e) {
    if (why != nullptr) *why = e.what();
    return false;
  }
}

std::string library_path() {
  (void)api();
  return library().path;
}

std::size_t version() {
  (void)api();
  return library().version;
}

std::string version_text(std::size_t code) {
  return std::to_string(code / 10000) + "." + std::to_string(code % 10000 / 100) + "." + std::to_string(code % 100);
}

std::string probe(const std::string& path, std::string_view asked_by) {
  Library l = open(path, asked_by);
  close(l);
  return l.usable ? std::string() : l.why;
}

std::string status_name(int code) {
  switch (code) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
    default:
      return "cublasStatus_t " + std::to_string(code);
  }
}

void throw_error(int code, std::string_view api_name, std::string_view object) {
  std::string detail;
  {
    const std::lock_guard lock(load_mutex);
    if (loaded && loaded->usable) {
      if (const char* text = loaded->api.cublasLtGetStatusString(static_cast<cublasStatus_t>(code)); text != nullptr) {
        detail = text;
      }
    }
  }
  throw CublasError(std::string(api_name), code, status_name(code), detail, std::string(object));
}

cublasLtHandle_t create(CUcontext ctx, std::string_view object) {
  const EntryPoints& a = api();
  const driver::CurrentContext current(ctx);
  cublasLtHandle_t handle = nullptr;
  check(a.cublasLtCreate(&handle), "cublasLtCreate", object);
  return handle;
}

void destroy_no_throw(CUcontext ctx, cublasLtHandle_t handle) noexcept {
  if (handle == nullptr || !loaded || !loaded->usable) return;
  try {
    const driver::CurrentContext current(ctx);
    (void)loaded->api.cublasLtDestroy(handle);
  } catch (...) {  // NOLINT(bugprone-empty-catch): the context cannot be made current (the driver is gone)
  }
}

cublasLtMatmulDesc_t matmul_desc_create(cublasComputeType_t compute, cudaDataType_t scale, std::string_view object) {
  cublasLtMatmulDesc_t desc = nullptr;
  check(api().cublasLtMatmulDescCreate(&desc, compute, scale), "cublasLtMatmulDescCreate", object);
  return desc;
}

void matmul_desc_set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const void* value,
                     std::size_t bytes, std::string_view object) {
  check(api().cublasLtMatmulDescSetAttribute(desc, attribute, value, bytes), "cublasLtMatmulDescSetAttribute", object);
}

void matmul_desc_destroy_no_throw(cublasLtMatmulDesc_t desc) noexcept {
  if (desc == nullptr || !loaded || !loaded->usable) return;
  (void)loaded->api.cublasLtMatmulDescDestroy(desc);
}

cublasLtMatrixLayout_t layout_create(cudaDataType_t type, std::uint64_t rows, std::uint64_t cols, std::int64_t ld,
                                     std::string_view object) {
  cublasLtMatrixLayout_t layout = nullptr;
  check(api().cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld), "cublasLtMatrixLayoutCreate", object);
  return layout;
}

void layout_destroy_no_throw(cublasLtMatrixLayout_t layout) noexcept {
  if (layout == nullptr || !loaded || !loaded->usable) return;
  (void)loaded->api.cublasLtMatrixLayoutDestroy(layout);
}

cublasLtMatmulPreference_t preference_create(std::string_view object) {
  cublasLtMatmulPreference_t preference = nullptr;
  check(api().cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate", object);
  return preference;
}

void preference_set(cublasLtMatmulPreference_t preference, cublasLtMatmulPreferenceAttributes_t attribute,
                    const void* value, std::size_t bytes, std::string_view object) {
  check(api().cublasLtMatmulPreferenceSetAttribute(preference, attribute, value, bytes),
        "cublasLtMatmulPreferenceSetAttribute", object);
}

void preference_destroy_no_throw(cublasLtMatmulPreference_t preference) noexcept {
  if (preference == nullptr || !loaded || !loaded->usable) return;
  (void)loaded->api.cublasLtMatmulPreferenceDestroy(preference);
}

int heuristics(CUcontext ctx, cublasLtHandle_t handle, const MatmulDescriptors& descriptors,
               cublasLtMatmulPreference_t preference, std::span<cublasLtMatmulHeuristicResult_t> results,
               std::string_view object) {
  if (results.empty()) return 0;
  const EntryPoints& a = api();
  const driver::CurrentContext current(ctx);
  int count = 0;
  const cublasStatus_t status = a.cublasLtMatmulAlgoGetHeuristic(
      handle, descriptors.operation, descriptors.a, descriptors.b, descriptors.c, descriptors.d, preference,
      static_cast<int>(results.size()), results.data(), &count);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return 0;  // no heuristic for this configuration
  check(status, "cublasLtMatmulAlgoGetHeuristic", object);
  int good = 0;  // keep those cuBLASLt says it can run, in its order
  for (int i = 0; i < count && i < static_cast<int>(results.size()); ++i) {
    if (results[static_cast<std::size_t>(i)].state == CUBLAS_STATUS_SUCCESS) {
      results[static_cast<std::size_t>(good++)] = results[static_cast<std::size_t>(i)];
    }
  }
  return good;
}

void matmul(CUcontext ctx, cublasLtHandle_t handle, const MatmulDescriptors& descriptors,
            const MatmulOperands& operands, const cublasLtMatmulAlgo_t* algorithm, CUstream stream,
            std::string_view object) {
  const EntryPoints& a = api();
  const driver::CurrentContext current(ctx);
  check(a.cublasLtMatmul(handle, descriptors.operation, operands.alpha, operands.a, descriptors.a, operands.b,
                         descriptors.b, operands.beta, operands.c, descriptors.c, operands.d, descriptors.d, algorithm,
                         operands.workspace, operands.workspace_bytes, stream),
        "cublasLtMatmul", object);
}

}  // namespace lazygraph::detail::cublaslt
