// FP8 checkpoints' matrices (packed_fp8.hpp): checked where the files are mapped, then placed byte for byte into
// quantized.hpp's fp8 layout, with no copy of the matrix in floats.
#include "packed_fp8.hpp"

#include <lazygraph/driver/bfloat16.hpp>
#include <lazygraph/driver/half.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "formats/storage_format.hpp"
#include "lazygraph/nn/checkpoint_error.hpp"
#include "lazygraph/nn/decoder_tensors.hpp"

namespace lazygraph::nn::detail {

namespace {

constexpr std::array<DType, 1> kF8 = {DType::f8_e4m3};
constexpr std::array<DType, 3> kScaleTypes = {DType::f32, DType::bf16, DType::f16};

constexpr int kBlock = 128;

/// Element `i` of a scale tensor (F32, BF16 or F16), as a float.
float scale_at(std::span<const std::byte> bytes, DType dtype, std::size_t i) {
  if (dtype == DType::f32) {
    float f = 0;
    std::memcpy(&f, bytes.data() + 4 * i, 4);
    return f;
  }
  std::uint16_t bits = 0;
  std::memcpy(&bits, bytes.data() + 2 * i, 2);
  return dtype == DType::bf16 ? bfloat16{bits}.to_float() : half{bits}.to_float();
}

/// The bits of `scale` times 2^8 rounded to `type` (exact: a power of two, then one rounding).
std::uint16_t stored_scale_bits(float scale, ScaleType type) {
  const float shifted = scale * 256.0F;
  return type == ScaleType::f16 ? half::from_float(shifted).bits : bfloat16::from_float(shifted).bits;
}

float stored_scale(std::uint16_t bits, ScaleType type) {
  return type == ScaleType::f16 ? half{bits}.to_float() : bfloat16{bits}.to_float();
}

/// The smallest normal number of `type`.
float smallest_normal(ScaleType type) { return type == ScaleType::f16 ? 0x1p-14F : 0x1p-126F; }

int blocks_of(int n) { return (n + kBlock - 1) / kBlock; }

}  // namespace

ScaleType fp8_scale_type(const LlamaConfig& config) {
  return config.torch_dtype == "float16" ? ScaleType::f16 : ScaleType::bf16;
}

QuantizedFormat fp8_format(const PackedQuantization& packed) {
  // the storage table's row read from checkpoints as they are, 8 bits a value: e4m3 bytes
  const auto rows = storage_formats();
  const auto fp8_row = std::find_if(rows.begin(), rows.end(), [](const StorageFormat* f) { return f->e4m3_values; });
  return {.kind = (*fp8_row)->kind, .group = 128, .asymmetric = false, .scale_type = packed.scale_type};
}

PackedTensors require_fp8_tensors(const Checkpoint& checkpoint, const PackedQuantization& packed,
                                  const std::string& module, int outputs, int inputs, std::string_view scale_suffix) {
  const auto refuse = [&](const TensorInfo& t, const std::string& why) {
    throw CheckpointError(checkpoint.file_of(t).path(), t.name, why);
  };
  const std::int64_t n = outputs;
  const std::int64_t k = inputs;
  PackedTensors t;
  t.outputs = outputs;
  t.inputs = inputs;
  t.qweight = &checkpoint.require(module + ".weight", kF8, std::array<std::int64_t, 2>{n, k});
  if (inputs % kBlock != 0) {
    refuse(*t.qweight, "has " + std::to_string(inputs) +
                           " inputs, not whole groups of 128: lazygraph's fp8 layout keeps one scale per 128 inputs");
  }
  const std::string scale_name = module + std::string(scale_suffix);
  if (checkpoint.find(scale_name) == nullptr) {
    refuse(*t.qweight, "is FP8 (F8_E4M3) but the checkpoint has no " + scale_name + ", its scale");
  }
  const std::array<std::int64_t, 2> scale_shape =
      packed.per_channel ? std::array<std::int64_t, 2>{n, 1}
                         : std::array<std::int64_t, 2>{blocks_of(outputs), blocks_of(inputs)};
  t.scales = &checkpoint.require(scale_name, kScaleTypes, scale_shape);
  const std::span<const std::byte> scales = checkpoint.data(*t.scales);
  const auto count = static_cast<std::size_t>(scale_shape[0] * scale_shape[1]);
  const ScaleType type = packed.scale_type;
  const std::string outside = std::string(" times 2^8 (how lazygraph stores it) is outside ") +
                              (type == ScaleType::f16 ? "fp16" : "bf16") +
                              "'s normal range, the model's element type (torch_dtype)";
  for (std::size_t i = 0; i < count; ++i) {
    const float s = scale_at(scales, t.scales->dtype, i);
    const std::string which = "scale " + std::to_string(i) + " (" + std::to_string(s) + ")";
    if (!(std::isfinite(s) && s > 0)) refuse(*t.scales, which + " is not a finite number > 0");
    const float stored = stored_scale(stored_scale_bits(s, type), type);
    if (!std::isfinite(stored) || stored < smallest_normal(type)) {
      refuse(*t.scales, which + outside);
    }
  }
  const std::span<const std::byte> values = checkpoint.data(*t.qweight);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if ((std::to_integer<unsigned>(values[i]) & 0x7FU) != 0x7FU) continue;
    refuse(*t.qweight, "value at row " + std::to_string(i / static_cast<std::size_t>(inputs)) + ", column " +
                           std::to_string(i % static_cast<std::size_t>(inputs)) + " is byte " +
                           std::to_string(std::to_integer<unsigned>(values[i])) + ", an e4m3 NaN");
  }
  return t;
}

QuantizedWeight repack_fp8(const Checkpoint& checkpoint, const PackedQuantization& packed,
                           const QuantizedLayout& layout, std::span<const PackedPart> parts, int head_dim) {
  std::vector<std::uint8_t> values(layout.value_bytes());   // padding rows: byte 0, +0
  std::vector<std::uint16_t> scales(layout.scale_count());  // padding rows' scales 0
  const int cols = layout.cols();
  const int groups = layout.groups_per_row();
  // Where element (r, k) of a tile lies in the tile's bytes, r in 0..15: the same for every tile.
  std::vector<std::uint32_t> place(static_cast<std::size_t>(QuantizedLayout::tile_rows) *
                                   static_cast<std::size_t>(cols));
  for (int r = 0; r < QuantizedLayout::tile_rows; ++r) {
    for (int k = 0; k < cols; ++k) {
      place[static_cast<std::size_t>(r) * static_cast<std::size_t>(cols) + static_cast<std::size_t>(k)] =
          static_cast<std::uint32_t>(layout.value_position(r, k).byte);
    }
  }
  const std::size_t tile_bytes = QuantizedLayout::tile_rows * layout.row_value_bytes();
  int first_row = 0;  // of the part in the matrix
  for (const PackedPart& part : parts) {
    const PackedTensors& t = part.tensors;
    const std::span<const std::byte> bytes = checkpoint.data(*t.qweight);
    const std::span<const std::byte> scale_bytes = checkpoint.data(*t.scales);
    std::vector<int> row_of(static_cast<std::size_t>(t.outputs));  // the matrix row of each output of the tensor
    for (int r = 0; r < t.outputs; ++r) {
      row_of[static_cast<std::size_t>(part.rope_rows ? rotate_half_row(r, head_dim) : r)] = first_row + r;
    }
    for (int n = 0; n < t.outputs; ++n) {
      const auto row = static_cast<std::size_t>(row_of[static_cast<std::size_t>(n)]);
      const std::size_t tile = row / QuantizedLayout::tile_rows * tile_bytes;
      const std::uint32_t* row_place =
          place.data() + (row % QuantizedLayout::tile_rows) * static_cast<std::size_t>(cols);
      const std::byte* in = bytes.data() + static_cast<std::size_t>(n) * static_cast<std::size_t>(cols);
      for (int k = 0; k < cols; ++k) values[tile + row_place[k]] = std::to_integer<std::uint8_t>(in[k]);
      for (int g = 0; g < groups; ++g) {
        const std::size_t at = packed.per_channel
                                   ? static_cast<std::size_t>(n)
                                   : static_cast<std::size_t>(n / kBlock) * static_cast<std::size_t>(blocks_of(cols)) +
                                         static_cast<std::size_t>(g);
        scales[layout.scale_index(static_cast<int>(row), g * kBlock)] =
            stored_scale_bits(scale_at(scale_bytes, t.scales->dtype, at), packed.scale_type);
      }
    }
    first_row += t.outputs;
  }
  return {layout, std::move(values), std::move(scales), {}};
}

}  // namespace lazygraph::nn::detail
