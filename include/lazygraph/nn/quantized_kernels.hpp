#pragma once
/// \file
/// Layer 6, nn: weight-only quantized weights on the device and the kernels that read them (kernels/nn/qgemv.cu):
/// a QuantizedWeight (quantized.hpp) is uploaded as a DeviceQuantizedWeight and handed to a kernel as a
/// QuantizedMatrix; BasicQuantizedKernels holds the typed handles, each picking the kernel of the weight's format.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "lazygraph/kernels/tile_function.hpp"
#include "lazygraph/nn/detail/quantized_variant.hpp"
#include "lazygraph/nn/kernels.hpp"
#include "lazygraph/nn/quantized.hpp"

namespace lazygraph::nn {

/// A quantized weight as the kernels take it, by value: the device addresses of its parts (kernels/nn/include/
/// lazygraph/nn/qgemv_core.cuh declares the same struct). It owns nothing: the DeviceQuantizedWeight it came from
/// must outlive every launch and graph that uses it (a launch op keeps DeviceSpan arguments' buffers alive, not
/// these), and a launch's access set does not list these reads (weights are never written while a step runs).
struct QuantizedMatrix {
  CUdeviceptr values = 0;  ///< the packed values in tiles (quantized.hpp), 16-byte aligned
  CUdeviceptr scales = 0;  ///< the scales of the element type in tiles, 4-byte aligned
  CUdeviceptr zeros = 0;   ///< the zero points at the scales' indices, or 0 when symmetric
  /// I32 [2 cols]: the input each stored column multiplies (QuantizedWeight::input_order), then the stored column of
  /// each input (its inverse, which qdequantize reads); or 0.
  CUdeviceptr order = 0;
  int kind = 0;   ///< a quantized WeightFormat (each format's file in src/nn/formats/ checks the kernels agree)
  int group = 0;  ///< columns per scale: cols for int8
};
static_assert(sizeof(QuantizedMatrix) == 40 && std::is_trivially_copyable_v<QuantizedMatrix>,
              "QuantizedMatrix is a kernel parameter, read by the kernels' struct of the same layout");

/// A quantized weight on the device, its parts uploaded as they are (each its own allocation, so 16-byte aligned).
/// Its scales must be of the kernels' element type T: fp16 scales for fp16 activations, bf16 for bf16.
template <Element T>
class DeviceQuantizedWeight {
 public:
  /// Uploads `weight` on `stream` and waits for the copies. \throws UsageError naming the tensor when its scale
  /// type is not T's.
  DeviceQuantizedWeight(const Stream& stream, const QuantizedWeight& weight);
  /// A weight whose parts are on the device already, in `layout`'s order (DeviceQuantizer makes these), and its
  /// input order (QuantizedWeight::input_order) followed by its inverse (order_buffer()'s), if it has one. \throws
  /// UsageError naming the tensor when the scale type is not T's, a part's size is not the layout's, zero points are
  /// given for a symmetric format or missing for an asymmetric one, or an order is given for another format than int4
  /// with zero points.
  DeviceQuantizedWeight(QuantizedLayout layout, DeviceBuffer<std::uint8_t> values, DeviceBuffer<std::uint16_t> scales,
                        std::optional<DeviceBuffer<std::uint8_t>> zeros,
                        std::optional<DeviceBuffer<std::int32_t>> order = std::nullopt);

  /// The parts copied back to the host (waits for the copies on `stream`). \throws UsageError as QuantizedWeight's
  /// constructor for parts that break the format's rules.
  [[nodiscard]] QuantizedWeight download(const Stream& stream) const;

  /// The shape and format.
  [[nodiscard]] const QuantizedLayout& layout() const noexcept { return layout_; }
  /// The kernels' argument for it.
  [[nodiscard]] QuantizedMatrix matrix() const;
  /// Device bytes a kernel reads: values, scales, zero points and the input order.
  [[nodiscard]] std::size_t bytes() const noexcept { return layout_.bytes() + (order_ ? 4 * order_->size() : 0); }
  /// The input order then its inverse (2 cols entries, the stored column of each input), as the kernels read them;
  /// empty when the columns are x's own.
  [[nodiscard]] DeviceSpan<const std::int32_t> order_buffer() const noexcept {
    return order_ ? order_->cview() : DeviceSpan<const std::int32_t>{};
  }
  /// The packed values on the device, in the layout's order.
  [[nodiscard]] DeviceSpan<const std::uint8_t> values() const noexcept { return values_.cview(); }
  /// The scales' bits on the device, in the layout's order.
  [[nodiscard]] DeviceSpan<const std::uint16_t> scales() const noexcept { return scales_.cview(); }
  /// The zero points on the device, or an empty span when symmetric.
  [[nodiscard]] DeviceSpan<const std::uint8_t> zeros() const noexcept {
    return zeros_ ? zeros_->cview() : DeviceSpan<const std::uint8_t>{};
  }
  /// The input order on the device (QuantizedWeight::input_order), or an empty span when the columns are x's own.
  [[nodiscard]] DeviceSpan<const std::int32_t> input_order() const noexcept {
    return order_ ? order_->cview().subspan(0, order_->size() / 2) : DeviceSpan<const std::int32_t>{};
  }

 private:
  QuantizedLayout layout_;
  DeviceBuffer<std::uint8_t> values_;
  DeviceBuffer<std::uint16_t> scales_;
  std::optional<DeviceBuffer<std::uint8_t>> zeros_;
  std::optional<DeviceBuffer<std::int32_t>> order_;
};

/// The scale type that goes with the element type T (f16 for half, bf16 for bfloat16).
template <Element T>
inline constexpr ScaleType scale_type_of = std::same_as<T, half> ? ScaleType::f16 : ScaleType::bf16;

/// The kernels of one quantized operation, one per format of the storage table and per zero points (NAME_int8,
/// NAME_int4 symmetric and NAME_int4z with zero points), called like one Kernel whose first parameter is the
/// QuantizedMatrix: the call picks the kernel of its format.
template <class Signature>
class QuantizedKernel;

/// See the primary template.
template <class... Rest>
class QuantizedKernel<void(QuantizedMatrix, Rest...)> {
 public:
  /// Looks up the kernels. \throws UsageError as KernelLibrary::get does.
  QuantizedKernel(const KernelLibrary& library, const std::string& name) {
    for (const std::string& suffix : detail::quantized_kernel_suffixes()) {
      kernels_.push_back(library.get<void(QuantizedMatrix, Rest...)>(name + suffix));
    }
  }

  /// The kernel for `w`'s format. \throws UsageError for a kind that is no quantized format.
  [[nodiscard]] const Kernel<void(QuantizedMatrix, Rest...)>& variant(const QuantizedMatrix& w) const {
    return kernels_[detail::quantized_kernel_variant(kernels_.front().name(), w.kind, w.zeros != 0)];
  }

  /// The launch op of the kernel for `w`'s format.
  template <class... Args>
  [[nodiscard]] LaunchOp<QuantizedMatrix, Rest...> operator()(const LaunchConfig& config, const QuantizedMatrix& w,
                                                              const Args&... args) const {
    return variant(w)(config, w, args...);
  }

 private:
  std::vector<Kernel<void(QuantizedMatrix, Rest...)>> kernels_;  // in quantized_kernel_suffixes()' order
};

/// The tile functions of one quantized operation for persistent programs (kernels/nn/qgemv.cu's `tile` lines), one
/// per format as QuantizedKernel's kernels, called like one TileFunction whose first parameter is the QuantizedMatrix:
/// the call picks the function of its format. A call's tiles share out the matrix's tiles of 16 rows (any count of
/// them); each needs quantized_tile_shared_bytes of the call's shared memory, or it traps.
template <class Signature>
class QuantizedTile;

/// See the primary template.
template <class... Rest>
class QuantizedTile<void(QuantizedMatrix, Rest...)> {
 public:
  /// Looks up the functions. \throws UsageError as KernelLibrary::tile does.
  QuantizedTile(const KernelLibrary& library, const std::string& name) {
    for (const std::string& suffix : detail::quantized_kernel_suffixes()) {
      functions_.push_back(library.tile<void(QuantizedMatrix, Rest...)>(name + suffix));
    }
  }

  /// The call of the function for `w`'s format. \throws UsageError for a kind that is no quantized format, and as
  /// TileFunction's call.
  template <class... Args>
  [[nodiscard]] TileCall operator()(const TileConfig& config, const QuantizedMatrix& w, const Args&... args) const {
    return functions_[detail::quantized_kernel_variant(functions_.front().name(), w.kind, w.zeros != 0)](config, w,
                                                                                                         args...);
  }

 private:
  std::vector<TileFunction<void(QuantizedMatrix, Rest...)>> functions_;  // in quantized_kernel_suffixes()' order
};

/// Bytes of a call's shared memory each tile of a QuantizedTile takes on blocks of `threads` threads over `matrices`
/// matrices (2 for gate and up): its warps' partial sums (kernels/nn/include/lazygraph/nn/qgemv_core.cuh's
/// quantized_tile_shared_bytes, the same formula).
[[nodiscard]] constexpr unsigned quantized_tile_shared_bytes(int matrices, unsigned threads) noexcept {
  return 4U * (threads / 32U) * (static_cast<unsigned>(matrices) * 16U * 8U + 8U);
}

/// Typed handles to the quantized kernels over activations of T (kernels/nn/qgemv.cu; bf16: the _bf16 kernels).
/// Each runs 1 to 8 vectors on tensor cores (compute capability 8.0 or newer). W, W1 and W3 are rows x cols; x
/// [batch][cols]; out [batch][rows]. The kernels trap on arguments they cannot read (a trap is reported at the next
/// synchronisation); check_quantized checks a weight's shape and the batch on the host first.
template <Element T>
struct BasicQuantizedKernels {
  /// The handles. \throws UsageError on a GPU without tensor cores (check_tensor_cores).
  explicit BasicQuantizedKernels(const KernelLibrary& library);

  /// qgemv(W, x, out, rows, cols, batch): out[b] = W x[b].
  QuantizedKernel<void(QuantizedMatrix, const T*, T*, int, int, int)> qgemv;
  /// qgemv_add(W, x, out, rows, cols, batch): out[b] += W x[b].
  QuantizedKernel<void(QuantizedMatrix, const T*, T*, int, int, int)> qgemv_add;
  /// rms_norm_qgemv(W, x, g, out, rows, cols, eps, batch): out[b] = W (rmsnorm(x[b]) * g).
  QuantizedKernel<void(QuantizedMatrix, const T*, const T*, T*, int, int, float, int)> rms_norm_qgemv;
  /// rms_norm_qgemv_swiglu(W1, W3, x, g, out, rows, cols, eps, batch): out[b] = silu(W1 h) * (W3 h),
  /// h = rmsnorm(x[b]) * g; W1 and W3 of one format.
  QuantizedKernel<void(QuantizedMatrix, QuantizedMatrix, const T*, const T*, T*, int, int, float, int)>
      rms_norm_qgemv_swiglu;
  /// rms_norm_qgemv_geglu(W1, W3, x, g, out, rows, cols, eps, batch): rms_norm_qgemv_swiglu with gelu_tanh (GeGLU).
  QuantizedKernel<void(QuantizedMatrix, QuantizedMatrix, const T*, const T*, T*, int, int, float, int)>
      rms_norm_qgemv_geglu;
  /// quantized_qkv_rope_append(W, bias, x, g, q, k_cache, v_cache, positions, slots, d, q_rows, n_kv_heads, head_dim,
  /// max_ctx, n_slots, frequencies, eps, batch): BasicKernels::qkv_rope_append over one quantized matrix of the q, k
  /// and v projections' rows stacked (q_rows + 2 n_kv_heads head_dim rows of d), h = rmsnorm(x[b]) * g,
  /// [q | k | v][b] = W h + bias (bias stacked the same way, or null), RoPE on q and k, k and v written to the caches
  /// at (slots[b], positions[b]). Launched early, it reads positions and slots before it waits, as that kernel does.
  QuantizedKernel<void(QuantizedMatrix, const T*, const T*, const T*, T*, T*, T*, const int*, const int*, int, int, int,
                       int, int, int, const float*, float, int)>
      quantized_qkv_rope_append;
  /// qdequantize(W, out, rows, cols): out [rows][cols] = W, each element (q - zero) * scale rounded once to T
  /// (QuantizedWeight::dequantize's values, rounded): what prompts multiply on tensor cores. Launch with
  /// dequantize_config.
  QuantizedKernel<void(QuantizedMatrix, T*, int, int)> qdequantize;
  /// qgemv_all_reduce(W, a, x, sum_table, counters, rank, ranks, rows, cols, batch) (kernels/nn/peer_all_reduce.cu):
  /// x[b] += the sum over the ranks of their W a[b], W the rank's share of a row-parallel projection; call it through
  /// nn::qgemv_all_reduce (nn/peer_all_reduce.hpp), which passes a PeerExchange's tables. Launch with config.
  QuantizedKernel<void(QuantizedMatrix, const T*, T*, const unsigned long long*, unsigned*, int, int, int, int, int)>
      qgemv_all_reduce;
  /// moe_qgate_up(W1, W3, h, plan, act, experts, width, d, top_k, batch) (kernels/nn/qmoe.cu): BasicKernels::
  /// moe_gate_up over quantized experts, W1 and W3 each the experts' matrices stacked as one of experts * width rows
  /// of d (width a multiple of 16: each expert whole tiles); only the plan's experts' bytes are read. Launch with
  /// moe_config(W1, width, d, distinct).
  QuantizedKernel<void(QuantizedMatrix, QuantizedMatrix, const T*, const int*, T*, int, int, int, int, int)>
      moe_qgate_up;
  /// moe_qdown(W2, act, plan, weights, partial, counters, x, experts, width, d, top_k, batch) (kernels/nn/qmoe.cu):
  /// BasicKernels::moe_down over quantized experts, W2 the experts' matrices stacked as one of experts * d rows of
  /// width (d a multiple of 16). Launch with moe_config(W2, d, width, distinct).
  QuantizedKernel<void(QuantizedMatrix, const T*, const int*, const float*, float*, unsigned*, T*, int, int, int, int,
                       int)>
      moe_qdown;

  /// Whether launches are early (as BasicKernels::step_config).
  bool early_launch = true;
  /// The device's multiprocessors, which config() fills.
  int multiprocessors = 1;

  /// Launch shape of qdequantize for `rows` x `cols` weights of `w`'s format: a thread per 16 bytes of values, up to
  /// 8 blocks of 256 per multiprocessor (the rest grid-stride), launched early.
  [[nodiscard]] LaunchConfig dequantize_config(const QuantizedMatrix& w, int rows, int cols) const {
    const long long chunks =
        static_cast<long long>((rows + 15) / 16) * (cols / detail::quantized_step_columns(w.kind)) * 32;
    const long long blocks = std::clamp<long long>((chunks + 255) / 256, 1, 8LL * std::max(1, multiprocessors));
    LaunchConfig c{{static_cast<unsigned>(blocks), 1, 1}, {256, 1, 1}, 0};
    c.early_launch = early_launch;
    return c;
  }

  /// Launch shape of a kernel here for `rows` x `cols` weights of `w`'s format (one or two matrices per row alike):
  /// 32 warps per multiprocessor, as two blocks of 16 or one of 32, each block walking its share of the tiles of 16
  /// rows R at a time with K warps per tile sharing out its steps (a warp's 512 bytes: 64 columns of int4, 32 of
  /// int8; qgemv_core.cuh). Of the shapes, the one whose busiest block has the fewest tiles per warp, or within 10% of
  /// that the one with blocks of 16 warps and the most tiles at a time (more steps per warp, fewer tile ends, whose
  /// sums go through shared memory). Blocks of 32 warps serve matrices of fewer tiles than multiprocessors.
  [[nodiscard]] LaunchConfig config(const QuantizedMatrix& w, int rows, int cols) const {
    const int steps = cols / detail::quantized_step_columns(w.kind);
    const int tiles = (rows + 15) / 16;
    const int sms = std::max(1, multiprocessors);
    struct Shape {
      int warps, per_block, grid;
      double cost;  // tiles of the busiest block per warp of it
    };
    std::vector<Shape> shapes;
    for (const int warps : {16, 32}) {
      for (int r = warps; r >= 1; r /= 2) {
        // K past half the steps leaves a warp less than its two loads in flight (measured: 2048 x 2048 int4 took
        // 3.5 us with K = 32, 2.3 with K = 16).
        if (r != warps && 2 * (warps / r) > steps) break;
        const int groups = (tiles + r - 1) / r;
        const int grid = std::min(groups, sms * (32 / warps));
        const int busiest = (groups + grid - 1) / grid * r;
        shapes.push_back({warps, r, grid, static_cast<double>(busiest) / warps});
      }
    }
    double least = shapes.front().cost;
    for (const Shape& s : shapes) least = std::min(least, s.cost);
    const Shape* best = nullptr;
    for (const Shape& s : shapes) {  // in order: 16 warps first, the most tiles at a time first
      if (s.cost <= 1.1 * least) {
        best = &s;
        break;
      }
    }
    const int k = std::max(1, std::min(best->warps / best->per_block, steps));
    LaunchConfig c{{static_cast<unsigned>(best->grid), 1, 1},
                   {32, static_cast<unsigned>(k), static_cast<unsigned>(best->per_block)},
                   0};
    c.early_launch = early_launch;
    return c;
  }

  /// Launch shape of moe_qgate_up and moe_qdown for experts of `rows` x `cols` weights of `w`'s format, up to
  /// `distinct` of them chosen (min(batch * top k, experts)): config()'s block shape for the chosen experts' rows
  /// together, its blocks shared out over the experts (grid.y, one expert each; grid.x at least one, at most what one
  /// expert's tiles fill), so that a step of many small experts still fills the multiprocessors once.
  [[nodiscard]] LaunchConfig moe_config(const QuantizedMatrix& w, int rows, int cols, int distinct) const {
    const int experts = std::max(1, distinct);
    LaunchConfig c = config(w, rows * experts, cols);
    const auto tiles = static_cast<unsigned>((rows + 15) / 16);
    const unsigned fill = (tiles + c.block.z - 1) / c.block.z;  // blocks one expert's tiles give work to
    const unsigned share = (c.grid.x + static_cast<unsigned>(experts) - 1) / static_cast<unsigned>(experts);
    c.grid.x = std::clamp(share, 1U, std::max(1U, fill));
    c.grid.y = static_cast<unsigned>(experts);
    return c;
  }
};

/// Checks on the host what a quantized kernel needs of `w` for a rows x cols product with activations of T: its
/// shape, its scale type, a batch of 1 to 8. \throws UsageError naming the tensor and what differs.
template <Element T>
void check_quantized(const DeviceQuantizedWeight<T>& w, int rows, int cols, int batch);

/// The quantized kernels over fp16 activations.
using QuantizedKernels = BasicQuantizedKernels<half>;

extern template class DeviceQuantizedWeight<half>;
extern template class DeviceQuantizedWeight<bfloat16>;
extern template struct BasicQuantizedKernels<half>;
extern template struct BasicQuantizedKernels<bfloat16>;

}  // namespace lazygraph::nn
