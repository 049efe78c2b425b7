// The public face of cuBLASLt's loading (kernels/gemm.hpp): whether it loads, which version, from where; and the
// shared workspace. The plan itself is src/kernels/gemm_plan.cpp; the calls into cuBLASLt are
// src/driver/cublaslt_api.cpp.

#include "lazygraph/kernels/gemm.hpp"

#include <cstddef>
#include <string>
#include <utility>

#include "lazygraph/detail/driver/cublaslt_api.hpp"

namespace lazygraph {

namespace {
std::size_t nonzero(std::size_t bytes) {
  if (bytes == 0) {
    throw UsageError("SharedGemmWorkspace of 0 bytes: plans whose algorithms need no workspace need none to share");
  }
  return bytes;
}
}  // namespace

SharedGemmWorkspace::SharedGemmWorkspace(const Device& device, std::size_t bytes)
    : ordinal_(device.ordinal()), buffer_(device, nonzero(bytes)) {}

bool cublaslt_available(std::string* why) noexcept { return detail::cublaslt::try_load(why); }

std::string cublaslt_version() { return detail::cublaslt::version_text(detail::cublaslt::version()); }

std::string cublaslt_library() { return detail::cublaslt::library_path(); }

void set_cublaslt_library(std::string path) { detail::cublaslt::set_library_path(std::move(path)); }

}  // namespace lazygraph
