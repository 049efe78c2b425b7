#include <doctest/doctest.h>

#include <lazygraph/driver.hpp>

#include <type_traits>

using namespace lazygraph;

TEST_CASE("a CudaError message names the API, the result and the object") {
  const CudaError e("cuMemAlloc", 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory", "DeviceBuffer<float> of 8 bytes");
  const std::string msg = e.what();
  CHECK(msg == "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory) [DeviceBuffer<float> of 8 bytes]");
  CHECK(e.api() == "cuMemAlloc");
  CHECK(e.code() == 2);
  CHECK(e.code_name() == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(e.object() == "DeviceBuffer<float> of 8 bytes");
}

TEST_CASE("an NvrtcError carries the API, the result's name and the object") {
  const NvrtcError e("nvrtcCreateProgram", 5, "NVRTC_ERROR_INVALID_INPUT", "axpy.cu");
  CHECK(std::string(e.what()) == "nvrtcCreateProgram failed: NVRTC_ERROR_INVALID_INPUT [axpy.cu]");
  CHECK(e.code() == 5);
}

TEST_CASE("a CompileError message holds the file and the whole compiler log") {
  const CompileError e("bad.cu", "bad.cu(3): error: expected a \";\"\n1 error detected");
  const std::string msg = e.what();
  CHECK(msg.find("bad.cu") != std::string::npos);
  CHECK(msg.find("expected a \";\"") != std::string::npos);
  CHECK(msg.find("1 error detected") != std::string::npos);
  CHECK(e.log() == "bad.cu(3): error: expected a \";\"\n1 error detected");
}

TEST_CASE("every lazygraph exception derives from lazygraph::Error") {
  CHECK_THROWS_AS(throw UsageError("x"), Error);
  static_assert(std::is_base_of_v<Error, CudaError>);
  static_assert(std::is_base_of_v<Error, NvrtcError>);
  static_assert(std::is_base_of_v<Error, CompileError>);
  static_assert(std::is_base_of_v<Error, DriverUnavailable>);
  static_assert(std::is_base_of_v<Error, NoDevice>);
  static_assert(std::is_base_of_v<Error, UsageError>);
  static_assert(std::is_base_of_v<Error, CaptureError>);
  static_assert(std::is_base_of_v<std::runtime_error, Error>);
}
