#pragma once
/// \file
/// Layer 6, nn: weight-only quantization on the GPU (kernels/nn/quantize.cu). It computes what the host quantizer
/// (quantized.hpp's `quantize`) computes, bit for bit, from weights already on the device, so that a checkpoint can
/// be quantized while it is uploaded instead of on one host core.

#include <optional>
#include <string_view>
#include <vector>

#include "lazygraph/nn/quantized.hpp"
#include "lazygraph/nn/quantized_kernels.hpp"

namespace lazygraph::nn {

/// The element types a DeviceQuantizer reads: a checkpoint's F32, F16 and BF16 tensors as they are.
template <class S>
concept QuantizerSource = std::same_as<S, float> || std::same_as<S, half> || std::same_as<S, bfloat16>;

/// Typed handles to the quantizer's kernels. Cheap to copy; safe to use from several threads.
class DeviceQuantizer {
 public:
  /// Looks the kernels up. \throws UsageError as KernelLibrary::get does (the library needs nn::kernel_set()).
  explicit DeviceQuantizer(const KernelLibrary& library);

  /// Quantizes the `rows` x `cols` row-major `weights` of tensor `name` into `format` on `stream` and waits for it:
  /// the same bytes as `quantize(format, name, rows, cols, weights, options)` on the host, for kernels over
  /// activations of T (fp8: one block of threads per 128 x 128 block of weights). Temporary device memory: one byte
  /// per weight, plus the scales.
  /// \throws UsageError naming the tensor, before anything is allocated, as QuantizedLayout does, when weights.size()
  ///         is not rows * cols, or when the format's scale type is not T's; after the kernels ran (nothing stays
  ///         allocated then), at the first weight that is not finite, with its row, column and value, or at the
  ///         first group whose scale is beyond the scale type's range, as `quantize` does.
  template <Element T, QuantizerSource S>
  [[nodiscard]] DeviceQuantizedWeight<T> quantize(const Stream& stream, const QuantizedFormat& format,
                                                  std::string_view name, int rows, int cols,
                                                  DeviceSpan<const S> weights,
                                                  const QuantizeOptions& options = {}) const;

 private:
  template <class S>
  using GroupsKernel = Kernel<void(const S*, int, int, int, int, int, int, int, int, std::int8_t*, std::uint16_t*,
                                   std::uint8_t*, unsigned long long*)>;
  GroupsKernel<float> groups_f32_;
  GroupsKernel<half> groups_f16_;
  GroupsKernel<bfloat16> groups_bf16_;
  template <class S>
  using BlocksKernel = Kernel<void(const S*, int, int, int, std::int8_t*, std::uint16_t*, unsigned long long*)>;
  /// A format's kernels that choose one scale per block of rows, over weights of each type.
  struct BlocksKernels {
    BlocksKernel<float> f32;
    BlocksKernel<half> f16;
    BlocksKernel<bfloat16> bf16;
  };
  /// The kernels of each format that chooses one scale per block of rows (its block_quantize_kernel: fp8's
  /// quantize_blocks_fp8 in kernels/nn/quantize.cu), in the order of the storage table (src/nn/formats/); nullopt for
  /// the formats that quantize_groups quantizes.
  std::vector<std::optional<BlocksKernels>> blocks_;
  /// Each quantized format's packing kernel, in the order of the storage table (src/nn/formats/).
  std::vector<Kernel<void(const std::int8_t*, int, int, std::uint8_t*)>> pack_;
  Kernel<void(const std::uint16_t*, const std::uint8_t*, int, int, std::uint16_t*, std::uint8_t*)> pack_scales_;
};

}  // namespace lazygraph::nn
