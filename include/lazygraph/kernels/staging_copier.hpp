#pragma once
/// \file
/// KernelStagingCopier: staging copies (ops/copy.hpp) as launches of the core kernel `staging_copy`
/// (kernels/fill.cu), which reads or writes the pinned memory through unified addressing. In a graph that replays
/// often a kernel node costs less than a memcpy node (bench_graph, "host I/O inside a graph"); HostIo copies this
/// way.

#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <memory>

#include "lazygraph/kernels/kernel.hpp"
#include "lazygraph/kernels/kernel_library.hpp"
#include "lazygraph/ops/copy.hpp"

namespace lazygraph {

/// The core kernel that KernelStagingCopier launches.
using StagingCopyKernel = Kernel<void(const unsigned*, unsigned*, int)>;

/// Copies whole 4-byte words at 4-byte aligned addresses with the staging kernel; leaves anything else to a memcpy.
class KernelStagingCopier final : public StagingCopier {
 public:
  /// With the kernel already looked up.
  explicit KernelStagingCopier(StagingCopyKernel kernel) : kernel_(std::move(kernel)) {}
  /// Looks `staging_copy` up in `library` (every library has the core kernels). \throws UsageError as
  /// KernelLibrary::get.
  explicit KernelStagingCopier(const KernelLibrary& library)
      : KernelStagingCopier(library.get<void(const unsigned*, unsigned*, int)>("staging_copy")) {}

  /// Launches the kernel when `bytes`, `src` and `dst` are whole words (and fewer than 2^31 of them).
  bool copy(ExecContext& ctx, CUdeviceptr src, CUdeviceptr dst, std::size_t bytes) const override {
    if (bytes % 4 != 0 || src % 4 != 0 || dst % 4 != 0 || bytes / 4 > 0x7fffffff) return false;
    const auto words = static_cast<int>(bytes / 4);
    const LaunchConfig cfg{{static_cast<unsigned>(std::min(1024, (words + 255) / 256)), 1, 1}, {256, 1, 1}, 0};
    kernel_(cfg, DeviceSpan<const unsigned>(src, static_cast<std::size_t>(words)),
            DeviceSpan<unsigned>(dst, static_cast<std::size_t>(words)), words)
        .execute(ctx);
    return true;
  }

 private:
  StagingCopyKernel kernel_;
};

}  // namespace lazygraph
