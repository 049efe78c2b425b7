#pragma once
/// \file
/// Layer 3, kernels (above driver and ops): NVRTC compilation, the disk cache, the kernel library built from
/// `kernels/` with the host-side reading of kernel declarations, typed `Kernel<void(Params...)>` handles whose
/// arguments are checked at compile time (your own types through KernelArgumentTraits and KernelParameterTypeName),
/// and their launch ops (`LaunchOp`); staging copies by kernel (KernelStagingCopier); fused elementwise expressions
/// generated into one kernel each (`assign(out, silu(a) * b + 2.0F * c)`); matrix products by cuBLASLt, loaded at run
/// time
/// (`Gemm<T>` plans and their `GemmOp`s).

#include "lazygraph/kernels/assign_op.hpp"
#include "lazygraph/kernels/expression.hpp"
#include "lazygraph/kernels/gemm.hpp"
#include "lazygraph/kernels/kernel.hpp"
#include "lazygraph/kernels/kernel_arguments.hpp"
#include "lazygraph/kernels/kernel_cache.hpp"
#include "lazygraph/kernels/kernel_declaration.hpp"
#include "lazygraph/kernels/kernel_library.hpp"
#include "lazygraph/kernels/kernel_parameter_type.hpp"
#include "lazygraph/kernels/kernel_set.hpp"
#include "lazygraph/kernels/launch_config.hpp"
#include "lazygraph/kernels/launch_op.hpp"
#include "lazygraph/kernels/nvrtc.hpp"
#include "lazygraph/kernels/optional_launch.hpp"
#include "lazygraph/kernels/persistent_program.hpp"
#include "lazygraph/kernels/staging_copier.hpp"
#include "lazygraph/kernels/tile_function.hpp"
