#include "lazygraph/nn/device_quantizer.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>

#include "formats/storage_format.hpp"

namespace lazygraph::nn {

namespace {

constexpr unsigned block_threads = 256;

/// The packing kernel of every format, in the storage table's order.
std::vector<Kernel<void(const std::int8_t*, int, int, std::uint8_t*)>> pack_kernels(const KernelLibrary& library) {
  std::vector<Kernel<void(const std::int8_t*, int, int, std::uint8_t*)>> out;
  for (const detail::StorageFormat* f : detail::storage_formats()) {
    out.push_back(library.get<void(const std::int8_t*, int, int, std::uint8_t*)>(std::string(f->pack_kernel)));
  }
  return out;
}

LaunchConfig threads_for(std::size_t n) { return grid_for(n, block_threads); }

template <class S>
float widened(S v) {
  if constexpr (std::same_as<S, float>) {
    return v;
  } else {
    return v.to_float();
  }
}

}  // namespace

DeviceQuantizer::DeviceQuantizer(const KernelLibrary& library)
    : groups_f32_(library.get<void(const float*, int, int, int, int, int, int, int, int, std::int8_t*, std::uint16_t*,
                                   std::uint8_t*, unsigned long long*)>("quantize_groups_f32")),
      groups_f16_(library.get<void(const half*, int, int, int, int, int, int, int, int, std::int8_t*, std::uint16_t*,
                                   std::uint8_t*, unsigned long long*)>("quantize_groups_f16")),
      groups_bf16_(library.get<void(const bfloat16*, int, int, int, int, int, int, int, int, std::int8_t*,
                                    std::uint16_t*, std::uint8_t*, unsigned long long*)>("quantize_groups_bf16")),
      pack_(pack_kernels(library)),
      pack_scales_(
          library.get<void(const std::uint16_t*, const std::uint8_t*, int, int, std::uint16_t*, std::uint8_t*)>(
              "pack_scales")) {
  for (const detail::StorageFormat* f : detail::storage_formats()) {
    if (f->block_quantize_kernel.empty()) {
      blocks_.emplace_back();
      continue;
    }
    const std::string name(f->block_quantize_kernel);
    const std::string f32 = name + "_f32";
    const std::string f16 = name + "_f16";
    const std::string bf16 = name + "_bf16";
    blocks_.push_back(BlocksKernels{
        .f32 = library.get<void(const float*, int, int, int, std::int8_t*, std::uint16_t*, unsigned long long*)>(f32),
        .f16 = library.get<void(const half*, int, int, int, std::int8_t*, std::uint16_t*, unsigned long long*)>(f16),
        .bf16 =
            library.get<void(const bfloat16*, int, int, int, std::int8_t*, std::uint16_t*, unsigned long long*)>(bf16),
    });
  }
}

template <Element T, QuantizerSource S>
DeviceQuantizedWeight<T> DeviceQuantizer::quantize(const Stream& stream, const QuantizedFormat& format,
                                                   std::string_view name, int rows, int cols,
                                                   DeviceSpan<const S> weights, const QuantizeOptions& options) const {
  QuantizedLayout layout(std::string(name), format, rows, cols);
  const auto fail = [&](const std::string& problem) { throw UsageError("tensor " + layout.name() + ": " + problem); };
  const std::size_t count = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  if (weights.size() != count) {
    fail(std::to_string(weights.size()) + " weights given for a " + std::to_string(rows) + " x " +
         std::to_string(cols) + " matrix (" + std::to_string(count) + ")");
  }
  if (format.scale_type != scale_type_of<T>) {
    fail(format_name(format) + ", but the kernels over " + std::string(element_name<T>) + " activations read " +
         std::string(element_name<T>) + " scales");
  }
  const Device& device = stream.device();
  const int groups = layout.groups_per_row();
  const std::size_t group_count = static_cast<std::size_t>(rows) * static_cast<std::size_t>(groups);
  DeviceBuffer<std::int8_t> q(device, count);
  DeviceBuffer<std::uint16_t> scales_rm(device, group_count);
  DeviceBuffer<std::uint8_t> zeros_rm(device, group_count);
  DeviceBuffer<unsigned long long> problems(device, 2);
  const std::array<unsigned long long, 2> none = {std::numeric_limits<unsigned long long>::max(),
                                                  std::numeric_limits<unsigned long long>::max()};
  copy_async(stream, problems.view(), std::span<const unsigned long long>(none));

  const std::array<int, 2> q_range = layout.q_range();  // no structured binding: the lambda below captures them
  const int q_min = q_range[0];
  const int q_max = q_range[1];
  const int ratios = options.clip_search ? static_cast<int>(clip_ratios.size()) : 1;
  const int bf16_scales = format.scale_type == ScaleType::bf16 ? 1 : 0;
  const auto formats = detail::storage_formats();  // the format's index in the kernel vectors
  const auto row =
      static_cast<std::size_t>(std::find(formats.begin(), formats.end(), &layout.storage()) - formats.begin());
  const std::optional<BlocksKernels>& block_kernels = blocks_[row];
  if (!block_kernels) {                                            // one scale per row's group
    const LaunchConfig per_group = threads_for(group_count * 32);  // a warp per group
    const auto launch_groups = [&](const auto& kernel) {
      kernel.launch(stream, per_group, weights, rows, cols, layout.group(), q_min, q_max, format.asymmetric ? 1 : 0,
                    bf16_scales, ratios, q.view(), scales_rm.view(), zeros_rm.view(), problems.view());
    };
    if constexpr (std::same_as<S, float>) {
      launch_groups(groups_f32_);
    } else if constexpr (std::same_as<S, half>) {
      launch_groups(groups_f16_);
    } else {
      launch_groups(groups_bf16_);
    }
  } else {  // a block of threads per block of rows x group, which rounds to nearest (no clip ratios)
    const int block_rows = layout.storage().quantize_rows;
    const auto blocks = static_cast<unsigned>((rows + block_rows - 1) / block_rows * groups);
    const LaunchConfig per_block{.grid = {blocks, 1, 1}, .block = {block_threads, 1, 1}};
    const auto launch_blocks = [&](const auto& kernel) {
      kernel.launch(stream, per_block, weights, rows, cols, bf16_scales, q.view(), scales_rm.view(), problems.view());
    };
    if constexpr (std::same_as<S, float>) {
      launch_blocks(block_kernels->f32);
    } else if constexpr (std::same_as<S, half>) {
      launch_blocks(block_kernels->f16);
    } else {
      launch_blocks(block_kernels->bf16);
    }
  }
  std::array<unsigned long long, 2> found{};
  copy_async(stream, std::span<unsigned long long>(found), problems.cview());
  stream.synchronize();
  if (found[0] != none[0]) {
    S bad{};
    copy_async(stream, std::span<S>(&bad, 1), weights.subspan(static_cast<std::size_t>(found[0]), 1));
    stream.synchronize();
    const auto k = static_cast<unsigned long long>(cols);
    fail("weight at row " + std::to_string(found[0] / k) + ", column " + std::to_string(found[0] % k) + " is " +
         std::to_string(widened(bad)) + ", not finite");
  }
  if (found[1] != none[1]) {
    const auto g = static_cast<unsigned long long>(groups);
    fail("row " + std::to_string(found[1] / g) + ", group " + std::to_string(found[1] % g) +
         " needs a scale beyond the range of " + (format.scale_type == ScaleType::f16 ? "fp16" : "bf16") +
         " (use bf16 scales)");
  }

  DeviceBuffer<std::uint8_t> values(device, layout.value_bytes());
  DeviceBuffer<std::uint16_t> scales(device, layout.scale_count());
  std::optional<DeviceBuffer<std::uint8_t>> zeros;
  if (format.asymmetric) zeros.emplace(device, layout.zero_bytes());
  const auto& pack = pack_[row];
  pack.launch(stream, threads_for(layout.value_bytes() / 4), q.cview(), rows, cols, values.view());
  pack_scales_.launch(stream, threads_for(layout.scale_count()), scales_rm.cview(), zeros_rm.cview(), rows, groups,
                      scales.view(), zeros ? zeros->view() : DeviceSpan<std::uint8_t>{});
  stream.synchronize();  // the temporaries are freed on return
  return DeviceQuantizedWeight<T>(std::move(layout), std::move(values), std::move(scales), std::move(zeros));
}

template DeviceQuantizedWeight<half> DeviceQuantizer::quantize<half, float>(const Stream&, const QuantizedFormat&,
                                                                            std::string_view, int, int,
                                                                            DeviceSpan<const float>,
                                                                            const QuantizeOptions&) const;
template DeviceQuantizedWeight<half> DeviceQuantizer::quantize<half, half>(const Stream&, const QuantizedFormat&,
                                                                           std::string_view, int, int,
                                                                           DeviceSpan<const half>,
                                                                           const QuantizeOptions&) const;
template DeviceQuantizedWeight<half> DeviceQuantizer::quantize<half, bfloat16>(const Stream&, const QuantizedFormat&,
                                                                               std::string_view, int, int,
                                                                               DeviceSpan<const bfloat16>,
                                                                               const QuantizeOptions&) const;
template DeviceQuantizedWeight<bfloat16> DeviceQuantizer::quantize<bfloat16, float>(const Stream&,
                                                                                    const QuantizedFormat&,
                                                                                    std::string_view, int, int,
                                                                                    DeviceSpan<const float>,
                                                                                    const QuantizeOptions&) const;
template DeviceQuantizedWeight<bfloat16> DeviceQuantizer::quantize<bfloat16, half>(const Stream&,
                                                                                   const QuantizedFormat&,
                                                                                   std::string_view, int, int,
                                                                                   DeviceSpan<const half>,
                                                                                   const QuantizeOptions&) const;
template DeviceQuantizedWeight<bfloat16> DeviceQuantizer::quantize<bfloat16, bfloat16>(const Stream&,
                                                                                       const QuantizedFormat&,
                                                                                       std::string_view, int, int,
                                                                                       DeviceSpan<const bfloat16>,
                                                                                       const QuantizeOptions&) const;

}  // namespace lazygraph::nn
