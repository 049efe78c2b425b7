#pragma once
/// \file
/// The exception types of lazygraph. Every CUDA driver and NVRTC failure becomes one of these, carrying the
/// API that failed, the result's name and the object involved, so a log line alone says what went wrong.

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace lazygraph {

/// Base of every exception lazygraph throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The CUDA driver library (libcuda.so.1) could not be loaded or initialised: no driver on this machine.
class DriverUnavailable : public Error {
 public:
  using Error::Error;
};

/// The driver loaded but reports no CUDA device.
class NoDevice : public Error {
 public:
  using Error::Error;
};

/// A call into a library lazygraph drives (the CUDA driver, NVRTC, NCCL, cuBLASLt) failed: the function, its result as
/// a number and by name, and the object it acted on. CudaError, NvrtcError, NcclError and CublasError say which
/// library.
class ApiError : public Error {
 public:
  /// \param api        the function, e.g. "cuMemAlloc"
  /// \param code       the result it returned, as an int (so this header needs no library header)
  /// \param code_name  the result's name, e.g. "CUDA_ERROR_OUT_OF_MEMORY"
  /// \param detail     the library's description of the result, when it has one (may be empty)
  /// \param object     what the call acted on, e.g. "DeviceBuffer<float> of 4096 bytes"
  ApiError(std::string api, int code, std::string code_name, std::string_view detail, std::string object);

  /// The function that failed, e.g. "cuMemAlloc".
  [[nodiscard]] const std::string& api() const noexcept { return api_; }
  /// The result it returned, as an int.
  [[nodiscard]] int code() const noexcept { return code_; }
  /// The result's name, e.g. "CUDA_ERROR_OUT_OF_MEMORY".
  [[nodiscard]] const std::string& code_name() const noexcept { return code_name_; }
  /// What the call acted on.
  [[nodiscard]] const std::string& object() const noexcept { return object_; }

 private:
  std::string api_;
  int code_;
  std::string code_name_;
  std::string object_;
};

/// A CUDA driver API call failed (`code` is the CUresult, `detail` the driver's description of it).
class CudaError : public ApiError {
 public:
  using ApiError::ApiError;
};

/// An NVRTC API call failed (a source that does not compile is a CompileError instead).
class NvrtcError : public ApiError {
 public:
  /// \param api        the NVRTC function, e.g. "nvrtcCreateProgram"
  /// \param code       the nvrtcResult it returned, as an int
  /// \param code_name  the result's name, e.g. "NVRTC_ERROR_OUT_OF_MEMORY"
  /// \param object     what the call acted on, e.g. the kernel file
  NvrtcError(std::string api, int code, std::string code_name, std::string object)
      : ApiError(std::move(api), code, std::move(code_name), {}, std::move(object)) {}
};

/// NVRTC rejected a kernel source; the message holds the file name and the whole compiler log.
class CompileError : public Error {
 public:
  /// `file` is the kernel source's name, `log` NVRTC's whole log.
  CompileError(std::string file, std::string log);

  /// The kernel source that did not compile, e.g. "axpy.cu".
  [[nodiscard]] const std::string& file() const noexcept { return file_; }
  /// NVRTC's compile log, whole.
  [[nodiscard]] const std::string& log() const noexcept { return log_; }

 private:
  std::string file_;
  std::string log_;
};

/// NCCL (libnccl.so.2) could not be loaded: not installed, not found where lazygraph looked, or too old. The message
/// lists where it looked and how to point lazygraph at a copy (LAZYGRAPH_NCCL_LIBRARY, set_nccl_library).
class NcclUnavailable : public Error {
 public:
  using Error::Error;
};

/// An NCCL call failed, or a communicator reported an asynchronous error (a peer failed, a connection broke):
/// `code` is the ncclResult_t, `detail` NCCL's description and its last error message for the communicator.
class NcclError : public ApiError {
 public:
  using ApiError::ApiError;
};

/// cuBLASLt (libcublasLt.so.N, N the cuBLAS major version lazygraph was built against: 13 for CUDA 13) did not load
/// when a Gemm plan needed it: not installed, not found where lazygraph looked, or another major version. The message
/// says where it looked and how to point lazygraph at a copy (LAZYGRAPH_CUBLASLT_LIBRARY, set_cublaslt_library).
class CublasUnavailable : public Error {
 public:
  using Error::Error;
};

/// A cuBLASLt call failed: `code` is the cublasStatus_t, `detail` cuBLASLt's description of it, `object` what the
/// call acted on (e.g. the Gemm plan's shape and element type).
class CublasError : public ApiError {
 public:
  using ApiError::ApiError;
};

/// A bounded wait ran out: the work did not finish in the time given (a collective whose peers never came, a
/// hung kernel). What was waited for has been aborted where the message says so.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

/// The library was used against its rules: a moved-from handle, mismatched copy sizes, an unknown kernel,
/// a launch configuration outside the device's limits. The message names the rule and the object.
class UsageError : public Error {
 public:
  using Error::Error;
};

/// Work that is illegal while a stream captures a graph was attempted; the message says what to do instead.
class CaptureError : public Error {
 public:
  using Error::Error;
};

/// A host function (host_call) threw while a graph or stream ran it. It ran on a driver thread, so the error
/// surfaces at the next launch or synchronize instead; the message names the host call and the original error.
class HostCallError : public Error {
 public:
  using Error::Error;
};

}  // namespace lazygraph
