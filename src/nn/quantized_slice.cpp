#include "lazygraph/nn/quantized_slice.hpp"

#include <optional>
#include <string>

#include "formats/storage_format.hpp"
#include "lazygraph/driver/memcpy.hpp"

namespace lazygraph::nn {

namespace {
[[noreturn]] void refuse(const QuantizedLayout& l, const std::string& why) {
  throw UsageError("tensor " + l.name() + " (" + std::to_string(l.rows()) + " x " + std::to_string(l.cols()) + ", " +
                   format_name(l.format()) + "): " + why);
}

std::string range(int first, int count) {
  return "[" + std::to_string(first) + ", " + std::to_string(first + count) + ")";
}

/// Copies `tiles` tiles of `per_tile` elements from tile `from` of `src` to tile `to` of `dst`.
template <class E>
void copy_tiles(const Stream& stream, DeviceSpan<E> dst, DeviceSpan<const E> src, std::size_t per_tile,
                std::size_t from, std::size_t to, std::size_t tiles) {
  copy_async(stream, dst.subspan(to * per_tile, tiles * per_tile), src.subspan(from * per_tile, tiles * per_tile));
}

/// Copies, from each of `tiles` tiles of `src` (`src_pitch` elements each), `width` elements from `offset` into the
/// tiles of `dst` (`width` elements each).
template <class E>
void copy_tile_columns(const Stream& stream, DeviceSpan<E> dst, DeviceSpan<const E> src, std::size_t src_pitch,
                       std::size_t offset, std::size_t width, std::size_t tiles) {
  copy_2d_async(stream, dst, width, src.subspan(offset, src.size() - offset), src_pitch, width, tiles);
}
}  // namespace

template <Element T>
DeviceQuantizedWeight<T> quantized_rows(const Stream& stream, const DeviceQuantizedWeight<T>& w,
                                        std::span<const QuantizedRowBlock> blocks) {
  const QuantizedLayout& l = w.layout();
  constexpr int tile = QuantizedLayout::tile_rows;
  if (blocks.empty()) refuse(l, "no rows asked for");
  int rows = 0;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const QuantizedRowBlock& block = blocks[b];
    const std::string which = "rows " + range(block.first, block.count);
    if (block.count < 1 || block.first < 0 || block.first > l.rows() - block.count) {
      refuse(l, which + " are empty or outside its rows");
    }
    const bool last = b + 1 == blocks.size();
    if (block.first % tile != 0 || (block.count % tile != 0 && !(last && block.first + block.count == l.rows()))) {
      refuse(l, which + " do not start and end on a tile of 16 rows (only the last block may end at the last row)");
    }
    rows += block.count;
  }
  QuantizedLayout part(l.name(), l.format(), rows, l.cols());
  const Device& device = stream.device();
  DeviceBuffer<std::uint8_t> values(device, part.value_bytes());
  DeviceBuffer<std::uint16_t> scales(device, part.scale_count());
  std::optional<DeviceBuffer<std::uint8_t>> zeros;
  if (l.format().asymmetric) zeros.emplace(device, part.zero_bytes());
  const std::size_t tile_bytes = static_cast<std::size_t>(tile) * l.row_value_bytes();
  const std::size_t tile_scales = static_cast<std::size_t>(tile) * static_cast<std::size_t>(l.groups_per_row());
  std::size_t to = 0;  // the next tile of the part
  for (const QuantizedRowBlock& block : blocks) {
    const auto from = static_cast<std::size_t>(block.first / tile);
    const auto tiles = static_cast<std::size_t>((block.count + tile - 1) / tile);
    copy_tiles(stream, values.view(), w.values(), tile_bytes, from, to, tiles);
    copy_tiles(stream, scales.view(), w.scales(), tile_scales, from, to, tiles);
    if (zeros) copy_tiles(stream, zeros->view(), w.zeros(), tile_scales, from, to, tiles);
    to += tiles;
  }
  std::optional<DeviceBuffer<std::int32_t>> order;  // every row's: the same columns
  if (!w.order_buffer().empty()) {
    order.emplace(device, w.order_buffer().size());
    copy_async(stream, order->view(), w.order_buffer());
  }
  stream.synchronize();
  return {std::move(part), std::move(values), std::move(scales), std::move(zeros), std::move(order)};
}

template <Element T>
DeviceQuantizedWeight<T> quantized_columns(const Stream& stream, const DeviceQuantizedWeight<T>& w, int first,
                                           int count) {
  const QuantizedLayout& l = w.layout();
  const std::string which = "columns " + range(first, count);
  if (count < 1 || first < 0 || first > l.cols() - count) refuse(l, which + " are empty or outside its columns");
  if (!w.input_order().empty()) {
    refuse(l, which +
                  ": its columns are stored in another order than its inputs (a GPTQ checkpoint with desc_act), "
                  "so a range of inputs is no range of its stored columns and groups");
  }
  const detail::StorageFormat& storage = l.storage();
  const int step = storage.step_columns;
  if (first % step != 0 || count % step != 0) {
    refuse(l, which + " do not start and end on a step of " + std::to_string(step) + " columns");
  }
  const bool groups = !storage.scale_per_row();
  if (groups && (first % l.group() != 0 || count % l.group() != 0)) {
    refuse(l, which + " do not start and end on a group of " + std::to_string(l.group()) + " columns");
  }
  QuantizedLayout part(l.name(), l.format(), l.rows(), count);
  const Device& device = stream.device();
  DeviceBuffer<std::uint8_t> values(device, part.value_bytes());
  DeviceBuffer<std::uint16_t> scales(device, part.scale_count());
  std::optional<DeviceBuffer<std::uint8_t>> zeros;
  if (l.format().asymmetric) zeros.emplace(device, part.zero_bytes());
  constexpr auto tile = static_cast<std::size_t>(QuantizedLayout::tile_rows);
  const auto tiles = static_cast<std::size_t>(l.tiles());
  // A tile's values are its steps along the columns, 16 rows' bytes of each in turn: the part's are one run per tile.
  const auto tile_value_bytes = [&](int columns) {
    return tile * static_cast<std::size_t>(columns) * static_cast<std::size_t>(storage.value_bits) / 8;
  };
  copy_tile_columns(stream, values.view(), w.values(), tile * l.row_value_bytes(), tile_value_bytes(first),
                    tile_value_bytes(count), tiles);
  if (groups) {  // a tile's scales (and zero points) are its groups in turn, 16 rows' each
    const auto per_group = tile;
    const auto scales_of = [&](int columns) { return per_group * static_cast<std::size_t>(columns / l.group()); };
    const std::size_t pitch = scales_of(l.cols());
    copy_tile_columns(stream, scales.view(), w.scales(), pitch, scales_of(first), scales_of(count), tiles);
    if (zeros) copy_tile_columns(stream, zeros->view(), w.zeros(), pitch, scales_of(first), scales_of(count), tiles);
  } else {  // one scale per row, chosen over the whole row: kept
    copy_async(stream, scales.view(), w.scales());
  }
  stream.synchronize();
  return {std::move(part), std::move(values), std::move(scales), std::move(zeros)};
}

template DeviceQuantizedWeight<half> quantized_rows(const Stream&, const DeviceQuantizedWeight<half>&,
                                                    std::span<const QuantizedRowBlock>);
template DeviceQuantizedWeight<bfloat16> quantized_rows(const Stream&, const DeviceQuantizedWeight<bfloat16>&,
                                                        std::span<const QuantizedRowBlock>);
template DeviceQuantizedWeight<half> quantized_columns(const Stream&, const DeviceQuantizedWeight<half>&, int, int);
template DeviceQuantizedWeight<bfloat16> quantized_columns(const Stream&, const DeviceQuantizedWeight<bfloat16>&, int,
                                                           int);

}  // namespace lazygraph::nn
