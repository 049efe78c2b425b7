#pragma once
/// \file
/// Kernels that call into the CUDA device runtime — `lg::set_condition` (kernels/include/lazygraph/condition.cuh)
/// sets a graph's conditional handle through `cudaGraphSetConditional` — cannot be loaded as NVRTC compiles them:
/// they are compiled relocatable (`-rdc=true`) and linked with the toolkit's libcudadevrt.a by nvJitLink (a
/// toolkit library, like NVRTC; no driver needed). KernelLibrary does this for every source that
/// `uses_device_runtime`; all other sources keep the direct path.

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lazygraph/detail/kernels/nvrtc.hpp"

namespace lazygraph {

/// True when `source` includes "lazygraph/condition.cuh" or names cudaGraphSetConditional: it is compiled
/// relocatable and linked with the device runtime. A plain text search; a mention in a comment counts too.
[[nodiscard]] bool uses_device_runtime(const KernelSource& source);

/// The path of libcudadevrt.a, fixed when lazygraph was configured (the toolkit's lib64).
[[nodiscard]] std::string device_runtime_library();

/// Links the relocatable CUBIN `cubin` that NVRTC made from `file` with libcudadevrt.a for sm_`arch`, and returns
/// the loadable CUBIN. \throws CompileError naming `file`, with nvJitLink's log, when linking fails (also when
/// libcudadevrt.a is missing).
[[nodiscard]] std::vector<char> link_device_runtime(std::string_view file, std::span<const char> cubin, int arch);

}  // namespace lazygraph
