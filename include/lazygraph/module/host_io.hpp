#pragma once
/// \file
/// HostIo: the host side of a graph-backed module — pinned input and output staging that the module's graph copies
/// from and to as its first and last nodes — and the one way such a module runs: write the input staging, replay
/// once and wait once (the copies are in the graph), read the output staging. GraphModule and nn::Decoder both run
/// this way.
///
/// The copies are the ops `copy(dst, staging.cview())` and `copy(staging.view(), src)` make (ops/copy.hpp), with a
/// KernelStagingCopier when the module has a kernel library with it: kernel nodes where the sizes and addresses are
/// whole 4-byte words, memcpy nodes otherwise.
///
/// Not thread-safe by itself: the module that owns it serialises its calls (an execution lock), since the staging
/// is shared by every call.

#include <cuda.h>

#include <cstddef>
#include <memory>
#include <span>
#include <utility>

#include "lazygraph/driver/device.hpp"
#include "lazygraph/driver/device_span.hpp"
#include "lazygraph/driver/staging_buffer.hpp"
#include "lazygraph/graph/cuda_graph.hpp"
#include "lazygraph/kernels/kernel_library.hpp"
#include "lazygraph/kernels/staging_copier.hpp"
#include "lazygraph/ops/copy.hpp"

namespace lazygraph {

/// Pinned staging for `In[input_size]` in and `Out[output_size]` out, and the copies a graph records to use it.
template <class In, class Out>
class HostIo {
 public:
  /// Copies with memcpy nodes. \throws CudaError when the driver cannot pin the memory.
  HostIo(const Device& device, std::size_t input_size, std::size_t output_size)
      : in_(device, input_size), out_(device, output_size) {}
  /// Copies with `library`'s staging kernel (the core kernel staging_copy, which every library has).
  HostIo(const KernelLibrary& library, std::size_t input_size, std::size_t output_size)
      : HostIo(library.device(), input_size, output_size) {
    copier_ = std::make_shared<const KernelStagingCopier>(library);
  }

  /// The input staging, for the host to fill before run().
  [[nodiscard]] std::span<In> input() const noexcept { return in_.span(); }
  /// The output staging, which run() leaves the graph's output in.
  [[nodiscard]] std::span<const Out> output() const noexcept { return out_.span(); }
  /// True when the copies are kernel nodes (see the file comment).
  [[nodiscard]] bool copies_with_kernel() const noexcept { return copier_ != nullptr; }

  /// The op that copies input staging [offset, offset + dst.size()) to `dst` (the graph's first node).
  /// \throws UsageError when it does not fit.
  [[nodiscard]] StagedUploadOp<In> copy_in(DeviceSpan<In> dst, std::size_t offset = 0) const {
    PinnedSpan<const In> src = in_.cview().subspan(offset, dst.size());
    return {std::move(dst), std::move(src), copier_};
  }
  /// The op that copies `src` to output staging [offset, offset + src.size()) (the graph's last node).
  /// \throws UsageError when it does not fit.
  [[nodiscard]] StagedDownloadOp<Out> copy_out(DeviceSpan<const Out> src, std::size_t offset = 0) const {
    PinnedSpan<Out> dst = out_.view().subspan(offset, src.size());
    return {std::move(dst), std::move(src), copier_};
  }

  /// Replays `graph` (recorded with copy_in and copy_out) on its own stream and waits for it: the output staging
  /// then holds its output. \throws HostCallError as CudaGraph::launch.
  static void run(CudaGraph<>& graph) { graph.launch(); }

 private:
  StagingBuffer<In> in_;
  StagingBuffer<Out> out_;
  std::shared_ptr<const StagingCopier> copier_;  ///< null: memcpy nodes
};

}  // namespace lazygraph
