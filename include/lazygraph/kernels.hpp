#pragma once
/// \file
/// Layer 3, kernels (above driver and ops): NVRTC compilation, the disk cache, the kernel library built from
/// `kernels/` with the host-side reading of kernel declarations, typed `Kernel<void(Params...)>` handles whose
/// arguments are checked at compile time, and their launch ops (`LaunchOp`); fused elementwise expressions generated
/// into one kernel each (`assign(out, silu(a) * b + 2.0F * c)`).

#include "lazygraph/detail/kernels/assign_op.hpp"
#include "lazygraph/detail/kernels/expression.hpp"
#include "lazygraph/detail/kernels/kernel.hpp"
#include "lazygraph/detail/kernels/kernel_arguments.hpp"
#include "lazygraph/detail/kernels/kernel_cache.hpp"
#include "lazygraph/detail/kernels/kernel_declaration.hpp"
#include "lazygraph/detail/kernels/kernel_library.hpp"
#include "lazygraph/detail/kernels/kernel_parameter_type.hpp"
#include "lazygraph/detail/kernels/kernel_set.hpp"
#include "lazygraph/detail/kernels/launch_config.hpp"
#include "lazygraph/detail/kernels/launch_op.hpp"
#include "lazygraph/detail/kernels/nvrtc.hpp"
#include "lazygraph/detail/kernels/staging_copier.hpp"
