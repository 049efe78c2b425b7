#pragma once
/// \file
/// The cuBLASLt foreign-function layer: every call into cuBLASLt goes through the functions declared here, implemented
/// in src/driver/cublaslt_api.cpp, the one file that loads libcublasLt.so.13 (at run time, on first use; it is never
/// linked, so a program without cuBLASLt starts and runs everything else). Like driver_api.hpp, each wrapper checks
/// the status and throws CublasError naming the function, the status and the object; `*_no_throw` forms never throw.
/// No policy lives here (which handle, which algorithm, capture rules): that is the kernels layer's Gemm.
///
/// Where cuBLASLt is looked for, in order: the path given to set_library_path (before first use), the environment
/// variable LAZYGRAPH_CUBLASLT_LIBRARY, then the loader's search for "libcublasLt.so.<major>" of the cublasLt.h
/// lazygraph was built against (LD_LIBRARY_PATH, the RPATH of liblazygraph, which names the toolkit's lib64, and the
/// loader cache). An explicit path (the first two) is used alone: when it does not load, nothing else is tried.
///
/// cublasLt.h is included for its types and enumerators only: nothing here calls a function it declares, each entry
/// point is fetched by name with dlsym and typed from the header's declaration.
///
/// Contexts: cuBLASLt works in the context current on the calling thread (through its CUDA runtime). Every wrapper
/// that acts on a device takes the context as its first parameter and makes it current for the call, as
/// driver_api.hpp's wrappers do.

#include <cublasLt.h>
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace lazygraph::detail::cublaslt {

/// The file name the loader's search asks for: "libcublasLt.so.13" for the cublasLt.h of CUDA 13.
std::string default_library_name();
/// Uses the cuBLASLt library at `path` instead of LAZYGRAPH_CUBLASLT_LIBRARY and the search. \throws UsageError once
/// cuBLASLt has been loaded from another file.
void set_library_path(std::string path);
/// Loads cuBLASLt once per process; later calls are cheap. \throws CublasUnavailable saying where it looked.
void ensure_loaded();
/// ensure_loaded without throwing: false with the reason in `why` (when not null).
bool try_load(std::string* why) noexcept;
/// The file cuBLASLt was loaded from. \throws CublasUnavailable.
std::string library_path();
/// cublasLtGetVersion: e.g. 130100 for 13.1.0. \throws CublasUnavailable.
std::size_t version();
/// "13.1.0" for 130100.
std::string version_text(std::size_t code);
/// Why the library at `path` (a path or a name for dlopen) could not be used, in the words CublasUnavailable would
/// use (`asked_by` says who named it, e.g. "LAZYGRAPH_CUBLASLT_LIBRARY"); empty when it could. Opens and closes it
/// without touching what this process has loaded, so a test can check the messages of a missing or wrong library.
std::string probe(const std::string& path, std::string_view asked_by);

/// The name of a status, e.g. "CUBLAS_STATUS_NOT_SUPPORTED" ("cublasStatus_t <n>" for one this header does not know).
/// Needs no library.
std::string status_name(int code);
/// Throws CublasError for a failed status, with cuBLASLt's description of it when the library is loaded.
[[noreturn]] void throw_error(int code, std::string_view api, std::string_view object);

/// cublasLtCreate with `ctx` current: the handle works on `ctx`'s device.
cublasLtHandle_t create(CUcontext ctx, std::string_view object);
/// cublasLtDestroy with `ctx` current.
void destroy_no_throw(CUcontext ctx, cublasLtHandle_t handle) noexcept;

/// cublasLtMatmulDescCreate.
cublasLtMatmulDesc_t matmul_desc_create(cublasComputeType_t compute, cudaDataType_t scale, std::string_view object);
/// cublasLtMatmulDescSetAttribute with `bytes` bytes at `value`.
void matmul_desc_set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const void* value,
                     std::size_t bytes, std::string_view object);
/// cublasLtMatmulDescDestroy (host memory only).
void matmul_desc_destroy_no_throw(cublasLtMatmulDesc_t desc) noexcept;

/// cublasLtMatrixLayoutCreate: `rows` x `cols` elements of `type`, column-major, columns `ld` elements apart.
cublasLtMatrixLayout_t layout_create(cudaDataType_t type, std::uint64_t rows, std::uint64_t cols, std::int64_t ld,
                                     std::string_view object);
/// cublasLtMatrixLayoutDestroy (host memory only).
void layout_destroy_no_throw(cublasLtMatrixLayout_t layout) noexcept;

/// cublasLtMatmulPreferenceCreate.
cublasLtMatmulPreference_t preference_create(std::string_view object);
/// cublasLtMatmulPreferenceSetAttribute with `bytes` bytes at `value`.
void preference_set(cublasLtMatmulPreference_t preference, cublasLtMatmulPreferenceAttributes_t attribute,
                    const void* value, std::size_t bytes, std::string_view object);
/// cublasLtMatmulPreferenceDestroy (host memory only).
void preference_destroy_no_throw(cublasLtMatmulPreference_t preference) noexcept;

/// The operation and its four layouts, as cublasLtMatmulAlgoGetHeuristic and cublasLtMatmul take them.
struct MatmulDescriptors {
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t a = nullptr;
  cublasLtMatrixLayout_t b = nullptr;
  cublasLtMatrixLayout_t c = nullptr;
  cublasLtMatrixLayout_t d = nullptr;
};

/// cublasLtMatmulAlgoGetHeuristic with `ctx` current, asking for up to results.size() algorithms, best first: how
/// many it gave whose `state` is CUBLAS_STATUS_SUCCESS (those come first in `results`), 0 when cuBLASLt has none for
/// these descriptors and preferences. \throws CublasError when the query itself fails.
int heuristics(CUcontext ctx, cublasLtHandle_t handle, const MatmulDescriptors& descriptors,
               cublasLtMatmulPreference_t preference, std::span<cublasLtMatmulHeuristicResult_t> results,
               std::string_view object);

/// The pointers of one cublasLtMatmul: D = alpha op(A) op(B) + beta C, alpha and beta in host memory (read during
/// the call), the workspace in device memory.
struct MatmulOperands {
  const void* alpha = nullptr;
  const void* a = nullptr;
  const void* b = nullptr;
  const void* beta = nullptr;
  const void* c = nullptr;
  void* d = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

/// cublasLtMatmul with `ctx` current, enqueued on `stream` (captured, when it captures).
void matmul(CUcontext ctx, cublasLtHandle_t handle, const MatmulDescriptors& descriptors,
            const MatmulOperands& operands, const cublasLtMatmulAlgo_t* algorithm, CUstream stream,
            std::string_view object);

}  // namespace lazygraph::detail::cublaslt
