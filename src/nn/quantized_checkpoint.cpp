#include "lazygraph/nn/quantized_checkpoint.hpp"

#include <array>
#include <cstring>
#include <span>

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
  const bool known = (d[2] == 1 || d[2] == 2) && (d[4] == 0 || d[4] == 1) && (d[5] == 0 || d[5] == 1);
  return std::to_string(d[0]) + " x " + std::to_string(d[1]) + ", " +
         (known ? format_name(format)
                : "an unknown format (" + std::to_string(d[2]) + ", " + std::to_string(d[4]) + ", " +
                      std::to_string(d[5]) + ")");
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
