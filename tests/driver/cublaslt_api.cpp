// cuBLASLt loaded at run time (detail/driver/cublaslt_api.hpp): status names, version text, the messages of a missing
// library and of one that is not cuBLASLt (probed without touching what the process loaded), CublasError's message.
// Loading the real one (cublaslt_available) is tested with the Gemm that uses it, tests/kernels/gemm.cpp.
//
// No `using namespace lazygraph` here: cublasLt.h declares CUDA's global `half`, which lazygraph::half would make
// ambiguous.
#include <doctest/doctest.h>

#include <string>

#include "lazygraph/detail/driver/cublaslt_api.hpp"
#include "lazygraph/driver/error.hpp"

namespace lt = lazygraph::detail::cublaslt;
using lazygraph::ApiError;
using lazygraph::CublasError;

TEST_CASE("cuBLASLt statuses are named as cublas_api.h names them, unknown ones by number, without the library") {
  CHECK(lt::status_name(0) == "CUBLAS_STATUS_SUCCESS");
  CHECK(lt::status_name(7) == "CUBLAS_STATUS_INVALID_VALUE");
  CHECK(lt::status_name(15) == "CUBLAS_STATUS_NOT_SUPPORTED");
  CHECK(lt::status_name(42) == "cublasStatus_t 42");
  CHECK(lt::version_text(130100) == "13.1.0");
  CHECK(lt::version_text(120903) == "12.9.3");
  CHECK(lt::default_library_name() == "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
}

TEST_CASE("CublasError carries the function, the status and the object in its message") {
  const CublasError e("cublasLtMatmul", 15, "CUBLAS_STATUS_NOT_SUPPORTED",
                      "the functionality requested is not supported", "gemm (M=3, N=64, K=64) of half on device 0");
  CHECK(e.api() == "cublasLtMatmul");
  CHECK(e.code() == 15);
  CHECK(e.code_name() == "CUBLAS_STATUS_NOT_SUPPORTED");
  CHECK(std::string(e.what()) ==
        "cublasLtMatmul failed: CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is not supported) "
        "[gemm (M=3, N=64, K=64) of half on device 0]");
  const ApiError& base = e;  // caught as every library's call failure
  CHECK(base.code() == 15);
}

TEST_CASE("a missing cuBLASLt is reported with the path, who named it, and how to point lazygraph at one") {
  const std::string named = lt::probe("/nonexistent/libcublasLt.so.13", "LAZYGRAPH_CUBLASLT_LIBRARY");
  CHECK(named.find("cannot load cuBLASLt (/nonexistent/libcublasLt.so.13, as LAZYGRAPH_CUBLASLT_LIBRARY asks)") !=
        std::string::npos);
  CHECK(named.find("set_cublaslt_library") != std::string::npos);
  const std::string searched = lt::probe("libcublasLt.so.nonexistent", "");
  CHECK(searched.find("the loader's search") != std::string::npos);
  CHECK(searched.find("libcublasLt.so.nonexistent") != std::string::npos);
  CHECK(searched.find("LAZYGRAPH_CUBLASLT_LIBRARY") != std::string::npos);
}

TEST_CASE("a library that is not cuBLASLt is refused, naming the entry points it lacks") {
  const std::string why = lt::probe("libc.so.6", "set_cublaslt_library");
  CHECK(why.find("cannot use cuBLASLt") != std::string::npos);
  CHECK(why.find("lacks cublasLtGetVersion") != std::string::npos);
}
