#pragma once
// Shared by the test files of both test programs: the device and kernel library the gpu suite runs on, opened once
// by main (common/main.cpp). Nothing here involves the nn layer: its tests add common/nn.hpp.

#include <lazygraph/lazygraph.hpp>

#include <filesystem>
#include <functional>
#include <random>
#include <vector>

namespace lgtest {

/// The device under test. Only valid in the gpu suite (main skips it when there is none).
lazygraph::Device& device();
/// The embedded kernel library, built once for the device, cached under the build directory.
lazygraph::KernelLibrary& kernels();
/// A stream for the test to use.
lazygraph::Stream& stream();
/// Runs `release` when main ends, before the stream, the kernel library and the device are let go (the latest
/// registered first): for what a helper made for device() on first use (common/nn.cpp's kernel library).
void at_teardown(std::function<void()> release);
/// A fresh, empty directory under the build tree, unique to this call.
std::filesystem::path scratch_directory(const std::string& label);

/// Options for a KernelLibrary of the test's own kernel sources (no headers), cached in `cache` (empty: no
/// disk cache).
lazygraph::KernelLibraryOptions own_kernels(std::vector<lazygraph::KernelSource> sources,
                                            std::filesystem::path cache = {});

/// Whether the tests run under NVIDIA's compute-sanitizer (which sets NV_SANITIZER_INJECTION_PORT_BASE in the
/// program's environment): it instruments every module as it loads and may run each kernel launch to completion
/// before the call returns, so a test of concurrency must not rely on timing there.
bool under_compute_sanitizer();

/// `n` random floats in [-1, 1) from a generator seeded freshly per call (never zeros).
std::vector<float> random_floats(std::size_t n);
/// random_floats rounded to fp16.
std::vector<lazygraph::half> random_halves(std::size_t n);

/// Copies a device span to a host vector and waits.
template <class T>
std::vector<std::remove_const_t<T>> to_host(const lazygraph::Stream& s, lazygraph::DeviceSpan<T> src) {
  std::vector<std::remove_const_t<T>> out(src.size());
  lazygraph::copy_async(s, std::span<std::remove_const_t<T>>(out),
                        lazygraph::DeviceSpan<const std::remove_const_t<T>>(src));
  s.synchronize();
  return out;
}

/// A device buffer holding `values`.
template <class T>
lazygraph::DeviceBuffer<T> to_device(const lazygraph::Stream& s, const std::vector<T>& values) {
  lazygraph::DeviceBuffer<T> b(s.device(), values.size());
  lazygraph::copy_async(s, b.view(), std::span<const T>(values));
  s.synchronize();
  return b;
}

/// The core axpy kernel (y = a x + y), which many tests replay.
using Axpy = lazygraph::Kernel<void(float, const float*, float*, int)>;
/// axpy from the embedded kernel library (gpu suite only).
inline Axpy axpy() { return kernels().get<void(float, const float*, float*, int)>("axpy"); }

/// y0 after `times` steps of y = a * x + y, in float64 with each step rounded to float as the axpy kernels
/// round it: the reference for tests replaying axpy.
std::vector<double> axpy_reference(float a, const std::vector<float>& x, const std::vector<float>& y0, int times);

/// max_i |a_i - b_i| / max(max_i |b_i|, tiny): the error of `a` relative to the reference `b`'s scale.
double relative_error(const std::vector<float>& a, const std::vector<double>& b);

}  // namespace lgtest
