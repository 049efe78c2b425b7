#include "lazygraph/nn/quantized_checkpoint.hpp"

#include <lazygraph/driver/bfloat16.hpp>
#include <lazygraph/driver/half.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <span>

#include "formats/storage_format.hpp"

namespace lazygraph::nn {

namespace {

DType scale_dtype(const QuantizedLayout& layout) {
  return layout.format().scale_type == ScaleType::f16 ? DType::f16 : DType::bf16;
}

/// The tensor `name` checked to be of `dtype` and `count` elements.
const TensorInfo& part(const Checkpoint& checkpoint, const std::string& name, DType dtype, std::size_t count) {
  const std::array<DType, 1> allowed = {dtype};
  const std::array<std::int64_t, 1> shape = {static_cast<std::int64_t>(count)};
  return checkpoint.require(name, allowed, shape);
}

/// The file comment's description of a layout.
std::vector<std::int32_t> description_of(const QuantizedLayout& layout) {
  const QuantizedFormat& f = layout.format();
  return {layout.rows(),  layout.cols(),        static_cast<std::int32_t>(f.kind),
          layout.group(), f.asymmetric ? 1 : 0, f.scale_type == ScaleType::bf16 ? 1 : 0};
}

/// "40 x 512, int4 g128, fp16 scales" for a description, or what is wrong with it.
std::string described(std::span<const std::int32_t> d) {
  QuantizedFormat format;
  format.kind = static_cast<WeightFormat>(d[2]);
  format.group = d[3];
  format.asymmetric = d[4] != 0;
  format.scale_type = d[5] == 0 ? ScaleType::f16 : ScaleType::bf16;
  const bool known =
      detail::find_storage_format(format.kind) != nullptr && (d[4] == 0 || d[4] == 1) && (d[5] == 0 || d[5] == 1);
  return std::to_string(d[0]) + " x " + std::to_string(d[1]) + ", " +
         (known ? format_name(format)
                : "an unknown format (" + std::to_string(d[2]) + ", " + std::to_string(d[4]) + ", " +
                      std::to_string(d[5]) + ")");
}

/// Throws CheckpointError naming the part at fault when the saved bytes break the rules that QuantizedWeight's
/// constructor enforces (quantized.hpp): a scale that is negative or not finite, a padding row's scale that is not 0,
/// a zero point above 15, an int8 byte 0 (-128). Reads the bytes where the file is mapped and copies none.
void check_saved_bytes(const Checkpoint& checkpoint, const QuantizedLayout& layout, const QuantizedTensorInfo& found) {
  const auto refuse = [&](const TensorInfo& part, const std::string& why) {
    throw CheckpointError(checkpoint.file_of(part).path(), part.name,
                          "holds bytes its format (" + format_name(layout.format()) + ") does not allow: " + why +
                              " (the file was changed after it was saved, or written by something else)");
  };
  const ScaleType type = layout.format().scale_type;
  const std::span<const std::byte> scales = checkpoint.data(*found.scales);
  const auto scale = [&](std::size_t i) {
    std::uint16_t bits = 0;
    std::memcpy(&bits, scales.data() + 2 * i, 2);  // little-endian, as the file and this host are
    return type == ScaleType::f16 ? half{bits}.to_float() : bfloat16{bits}.to_float();
  };
  for (std::size_t i = 0; i < layout.scale_count(); ++i) {
    if (const float s = scale(i); !(std::isfinite(s) && s >= 0)) {
      refuse(*found.scales, "scale " + std::to_string(i) + " is " + std::to_string(s) + ", not a finite number >= 0");
    }
  }
  for (int row = layout.rows(); row < layout.tiles() * QuantizedLayout::tile_rows; ++row) {
    for (int k = 0; k < layout.groups_per_row(); ++k) {
      const std::size_t i = layout.scale_index(row, k * layout.group());
      if (scale(i) != 0) {
        refuse(*found.scales, "scale " + std::to_string(i) + " belongs to padding row " + std::to_string(row) +
                                  " of the last tile and must be 0");
      }
    }
  }
  if (found.zeros != nullptr) {
    const std::span<const std::byte> zeros = checkpoint.data(*found.zeros);
    const auto it = std::find_if(zeros.begin(), zeros.end(), [](std::byte z) { return z > std::byte{15}; });
    if (it != zeros.end()) {
      refuse(*found.zeros, "zero point " + std::to_string(it - zeros.begin()) + " is " +
                               std::to_string(std::to_integer<int>(*it)) + ", above 15");
    }
  }
  if (const detail::StorageFormat& storage = layout.storage(); storage.forbidden_byte >= 0) {
    const std::span<const std::byte> values = checkpoint.data(*found.values);
    const auto at = std::find_if(values.begin(), values.end(), [&](std::byte b) {
      return detail::forbidden(storage, std::to_integer<std::uint8_t>(b));
    });
    if (at != values.end()) {
      refuse(*found.values, detail::forbidden_value_at(storage, static_cast<std::size_t>(at - values.begin()),
                                                       std::to_integer<std::uint8_t>(*at)));
    }
  }
}

template <class T>
std::vector<T> copied(std::span<const std::byte> bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));  // little-endian, as the file and this host are
  return out;
}

}  // namespace

QuantizedTensors::QuantizedTensors(const QuantizedWeight& weight) : description_(description_of(weight.layout())) {
  const QuantizedLayout& layout = weight.layout();
  const std::string& name = layout.name();
  if (!weight.input_order().empty()) {
    throw UsageError("tensor " + name +
                     ": its columns are stored in another order than its inputs (a GPTQ checkpoint with desc_act), "
                     "which lazygraph's quantized files do not record; keep the GPTQ checkpoint and load it as it is");
  }
  const auto length = [](std::size_t n) { return std::vector<std::int64_t>{static_cast<std::int64_t>(n)}; };
  tensors_.push_back({format_name_of(name), DType::i32, length(description_.size()),
                      std::as_bytes(std::span<const std::int32_t>(description_))});
  tensors_.push_back({values_name_of(name), DType::u8, length(weight.values().size()), std::as_bytes(weight.values())});
  tensors_.push_back({scales_name_of(name), scale_dtype(layout), length(weight.scale_bits().size()),
                      std::as_bytes(weight.scale_bits())});
  if (layout.format().asymmetric) {
    tensors_.push_back({zeros_name_of(name), DType::u8, length(weight.zeros().size()), std::as_bytes(weight.zeros())});
  }
}

QuantizedTensorInfo require_quantized(const Checkpoint& checkpoint, const QuantizedLayout& layout) {
  const std::string& name = layout.name();
  const std::vector<std::int32_t> expected = description_of(layout);
  const std::string description_name = QuantizedTensors::format_name_of(name);
  QuantizedTensorInfo found;
  found.format = &part(checkpoint, description_name, DType::i32, expected.size());
  const std::vector<std::int32_t> saved = copied<std::int32_t>(checkpoint.data(*found.format));
  if (saved != expected) {
    throw CheckpointError(checkpoint.file_of(*found.format).path(), description_name,
                          "saved as " + described(saved) + ", read as " + described(expected));
  }
  found.values = &part(checkpoint, QuantizedTensors::values_name_of(name), DType::u8, layout.value_bytes());
  found.scales = &part(checkpoint, QuantizedTensors::scales_name_of(name), scale_dtype(layout), layout.scale_count());
  const std::string zeros_name = QuantizedTensors::zeros_name_of(name);
  if (layout.format().asymmetric) {
    found.zeros = &part(checkpoint, zeros_name, DType::u8, layout.zero_bytes());
  } else if (const TensorInfo* stray = checkpoint.find(zeros_name)) {
    throw CheckpointError(checkpoint.file_of(*stray).path(), zeros_name,
                          "zero points for a symmetric format (" + format_name(layout.format()) + ")");
  }
  check_saved_bytes(checkpoint, layout, found);
  return found;
}

QuantizedWeight read_quantized(const Checkpoint& checkpoint, const QuantizedLayout& layout) {
  const QuantizedTensorInfo found = require_quantized(checkpoint, layout);
  std::vector<std::uint8_t> zeros;
  if (found.zeros != nullptr) zeros = copied<std::uint8_t>(checkpoint.data(*found.zeros));
  return {layout, copied<std::uint8_t>(checkpoint.data(*found.values)),
          copied<std::uint16_t>(checkpoint.data(*found.scales)), std::move(zeros)};
}

}  // namespace lazygraph::nn
