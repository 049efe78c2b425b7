#pragma once
/// \file
/// Layer 2, kernels: NVRTC compilation, the disk cache, the kernel library built from `kernels/`, and typed
/// `Kernel<void(Params...)>` handles whose arguments are checked at compile time.

#include "lazygraph/detail/kernels/kernel.hpp"
#include "lazygraph/detail/kernels/kernel_arguments.hpp"
#include "lazygraph/detail/kernels/kernel_cache.hpp"
#include "lazygraph/detail/kernels/kernel_declaration.hpp"
#include "lazygraph/detail/kernels/kernel_library.hpp"
#include "lazygraph/detail/kernels/kernel_parameter_type.hpp"
#include "lazygraph/detail/kernels/launch_config.hpp"
#include "lazygraph/detail/kernels/nvrtc.hpp"
