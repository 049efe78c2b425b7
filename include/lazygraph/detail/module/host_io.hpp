#pragma once
/// \file
/// HostIo: the host side of a graph-backed module — pinned input and output staging that the module's graph copies
/// from and to as its first and last nodes — and the one way such a module runs: write the input staging, replay
/// once and wait once (the copies are in the graph), read the output staging. GraphModule and nn::Decoder both run
/// this way.
///
/// The copies are kernel nodes (the core kernel `staging_copy`, reading or writing the pinned memory through
/// unified addressing) when the module has a kernel library with it and the sizes and addresses are whole 4-byte
/// words; memcpy nodes otherwise. On the H100 the kernel pair adds 3.3 µs to a replay for 1 KB each way, the memcpy
/// pair 7.6 µs (bench_graph, "host I/O inside a graph").
///
/// Not thread-safe by itself: the module that owns it serialises its calls (an execution lock), since the staging
/// is shared by every call.

#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "lazygraph/detail/driver/device.hpp"
#include "lazygraph/detail/driver/device_span.hpp"
#include "lazygraph/detail/driver/staging_buffer.hpp"
#include "lazygraph/detail/graph/cuda_graph.hpp"
#include "lazygraph/detail/kernels/kernel.hpp"
#include "lazygraph/detail/kernels/kernel_library.hpp"
#include "lazygraph/detail/ops/access.hpp"
#include "lazygraph/detail/ops/concepts.hpp"
#include "lazygraph/detail/ops/exec_context.hpp"

namespace lazygraph {

/// The core kernel that HostIo copies with (kernels/fill.cu).
using StagingCopyKernel = Kernel<void(const unsigned*, unsigned*, int)>;

/// One staging copy between pinned host memory and the device, made by HostIo::copy_in / copy_out: a GraphNode
/// that keeps both sides alive and copies with the staging kernel where it can, a memcpy node where it cannot.
class [[nodiscard]] StagingCopyOp : public OpBase<StagingCopyOp> {
 public:
  /// No output.
  using Output = void;
  /// A GraphNode: the host side is pinned memory the graph owns a share of.
  static constexpr bool is_graph_node = true;
  /// Submits through the ExecContext.
  static constexpr bool builds_without_capture = true;

  /// Host to device (`to_device`) or device to host, `bytes` bytes between `host` and `device`.
  StagingCopyOp(bool to_device, void* host, CUdeviceptr device, std::size_t bytes,
                std::shared_ptr<const void> host_owner, std::shared_ptr<const void> device_owner,
                std::optional<StagingCopyKernel> kernel)
      : to_device_(to_device),
        host_(host),
        device_(device),
        bytes_(bytes),
        host_owner_(std::move(host_owner)),
        device_owner_(std::move(device_owner)),
        kernel_(std::move(kernel)) {}

  /// Records (or runs) the copy.
  void execute(ExecContext& ctx) const {
    if (bytes_ == 0) return;
    ctx.keep_alive(host_owner_);
    ctx.keep_alive(device_owner_);
    const auto host = static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(host_));
    if (kernel_ && bytes_ % 4 == 0 && host % 4 == 0 && device_ % 4 == 0 && bytes_ / 4 <= 0x7fffffff) {
      const auto words = static_cast<int>(bytes_ / 4);
      const LaunchConfig cfg{{static_cast<unsigned>(std::min(1024, (words + 255) / 256)), 1, 1}, {256, 1, 1}, 0};
      const CUdeviceptr src = to_device_ ? host : device_;
      const CUdeviceptr dst = to_device_ ? device_ : host;
      (*kernel_)(cfg, DeviceSpan<const unsigned>(src, static_cast<std::size_t>(words)),
                 DeviceSpan<unsigned>(dst, static_cast<std::size_t>(words)), words)
          .execute(ctx);
      ctx.count_host_transfer(to_device_ ? bytes_ : 0, to_device_ ? 0 : bytes_);
    } else if (to_device_) {
      ctx.copy_to_device(device_, host_, bytes_);
    } else {
      ctx.copy_to_host(host_, device_, bytes_);
    }
  }
  /// Reads one side, writes the other (the host side is pinned memory).
  void accesses(AccessSet& out) const {
    const CUdeviceptr host = detail::host_address(host_);
    out.read(to_device_ ? host : device_, bytes_, "staging copy");
    out.write(to_device_ ? device_ : host, bytes_, "staging copy");
  }

 private:
  bool to_device_;
  void* host_;
  CUdeviceptr device_;
  std::size_t bytes_;
  std::shared_ptr<const void> host_owner_;
  std::shared_ptr<const void> device_owner_;
  std::optional<StagingCopyKernel> kernel_;
};

/// Pinned staging for `In[input_size]` in and `Out[output_size]` out, and the copies a graph records to use it.
template <class In, class Out>
class HostIo {
 public:
  /// Copies with memcpy nodes. \throws CudaError when the driver cannot pin the memory.
  HostIo(const Device& device, std::size_t input_size, std::size_t output_size)
      : in_(device, input_size), out_(device, output_size) {}
  /// Copies with `library`'s staging kernel (core kernels; memcpy nodes when the library lacks them).
  HostIo(const KernelLibrary& library, std::size_t input_size, std::size_t output_size)
      : HostIo(library.device(), input_size, output_size) {
    const std::vector<std::string> names = library.kernel_names();
    if (std::find(names.begin(), names.end(), "staging_copy") != names.end()) {
      kernel_.emplace(library.get<void(const unsigned*, unsigned*, int)>("staging_copy"));
    }
  }

  /// The input staging, for the host to fill before run().
  [[nodiscard]] std::span<In> input() const noexcept { return in_.span(); }
  /// The output staging, which run() leaves the graph's output in.
  [[nodiscard]] std::span<const Out> output() const noexcept { return out_.span(); }
  /// True when the copies are kernel nodes (see the file comment).
  [[nodiscard]] bool copies_with_kernel() const noexcept { return kernel_.has_value(); }

  /// The op that copies input staging [offset, offset + dst.size()) to `dst` (the graph's first node).
  /// \throws UsageError when it does not fit.
  [[nodiscard]] StagingCopyOp copy_in(DeviceSpan<In> dst, std::size_t offset = 0) const {
    const PinnedSpan<const In> src = in_.cview().subspan(offset, dst.size());
    return {true, const_cast<In*>(src.data()), dst.address(), dst.size_bytes(), src.owner(), dst.owner(), kernel_};
  }
  /// The op that copies `src` to output staging [offset, offset + src.size()) (the graph's last node).
  /// \throws UsageError when it does not fit.
  [[nodiscard]] StagingCopyOp copy_out(DeviceSpan<const Out> src, std::size_t offset = 0) const {
    const PinnedSpan<Out> dst = out_.view().subspan(offset, src.size());
    return {false, dst.data(), src.address(), dst.size_bytes(), dst.owner(), src.owner(), kernel_};
  }

  /// Replays `graph` (recorded with copy_in and copy_out) on its own stream and waits for it: the output staging
  /// then holds its output. \throws HostCallError as CudaGraph::launch.
  static void run(CudaGraph<>& graph) { graph.launch(); }

 private:
  StagingBuffer<In> in_;
  StagingBuffer<Out> out_;
  std::optional<StagingCopyKernel> kernel_;
};

}  // namespace lazygraph
