#pragma once
/// \file
/// Layer 6, nn: quantized weights in safetensors files, saved in the layout they are uploaded in (quantized.hpp) and
/// read back bit for bit, so that a model is quantized once, not at every load.
///
/// A quantized weight named N is three or four tensors: `N.qformat` (I32 [6]: rows, cols, kind (1 int8 per channel,
/// 2 int4 in groups), group (cols for int8), asymmetric (0 or 1), scale type (0 fp16, 1 bf16)), `N.qvalues` (U8,
/// [value_bytes]), `N.qscales` (F16 or BF16 as the scale type, [scale_count]) and, when asymmetric, `N.qzeros` (U8,
/// [zero_bytes]), in the layout's order. The reader gives the layout it expects (from config.json, say) and the
/// file's own description must match it: padding makes byte counts alike for shapes that differ.

#include <cstdint>
#include <string>
#include <vector>

#include "lazygraph/nn/quantized.hpp"
#include "lazygraph/nn/safetensors.hpp"

namespace lazygraph::nn {

/// The tensors one quantized weight is saved as, viewing its bytes and owning its description: the weight and this
/// object must outlive the write_safetensors call the tensors are given to. Move-only (moving keeps the views valid).
class QuantizedTensors {
 public:
  /// The tensors of `weight`, named after its layout's name. \throws UsageError naming the tensor when its columns
  /// are stored in another order than its inputs (QuantizedWeight::input_order), which these tensors do not record.
  explicit QuantizedTensors(const QuantizedWeight& weight);
  /// Takes the other's tensors; their views stay valid.
  QuantizedTensors(QuantizedTensors&&) noexcept = default;
  /// Takes the other's tensors; their views stay valid.
  QuantizedTensors& operator=(QuantizedTensors&&) noexcept = default;
  QuantizedTensors(const QuantizedTensors&) = delete;
  QuantizedTensors& operator=(const QuantizedTensors&) = delete;
  ~QuantizedTensors() = default;

  /// The tensors, in the order of the file comment.
  [[nodiscard]] const std::vector<TensorToWrite>& tensors() const noexcept { return tensors_; }

  /// The names of weight `name`'s tensors: ".qformat", ".qvalues", ".qscales", ".qzeros" appended.
  [[nodiscard]] static std::string format_name_of(const std::string& name) { return name + ".qformat"; }
  /// See format_name_of.
  [[nodiscard]] static std::string values_name_of(const std::string& name) { return name + ".qvalues"; }
  /// See format_name_of.
  [[nodiscard]] static std::string scales_name_of(const std::string& name) { return name + ".qscales"; }
  /// See format_name_of.
  [[nodiscard]] static std::string zeros_name_of(const std::string& name) { return name + ".qzeros"; }

 private:
  std::vector<std::int32_t> description_;  // on the heap: its address survives moves
  std::vector<TensorToWrite> tensors_;
};

/// The tensors one quantized weight is saved as, found in a checkpoint.
struct QuantizedTensorInfo {
  const TensorInfo* format = nullptr;  ///< N.qformat, the description
  const TensorInfo* values = nullptr;  ///< N.qvalues
  const TensorInfo* scales = nullptr;  ///< N.qscales
  const TensorInfo* zeros = nullptr;   ///< N.qzeros; nullptr for a symmetric format
};

/// The tensors of the weight `layout` describes, named as its layout, checked as read_quantized checks them: present,
/// of the layout's dtypes and sizes, described as `layout`, no zero points for a symmetric format, and bytes that
/// keep the format's rules (QuantizedWeight's constructor: every scale finite and >= 0, a padding row's scales 0,
/// zero points at most 15, no int8 byte 0). Reads the bytes where the file is mapped and copies none, so that a
/// checkpoint is checked whole, on the host, before anything is allocated on a device: the scales and zero points
/// (a sixty-fourth of an int4 matrix's bytes for groups of 128), and an int8 matrix's values. \throws CheckpointError
/// as read_quantized.
[[nodiscard]] QuantizedTensorInfo require_quantized(const Checkpoint& checkpoint, const QuantizedLayout& layout);

/// Reads back the weight `layout` describes, named as its layout, from `checkpoint`: its tensors' bytes as they are.
/// \throws CheckpointError naming the file and the tensor when a part is missing, when the saved description is not
///         `layout`'s (a config.json whose format or shape does not match the tensors, say; the message gives both),
///         when a part has another dtype or size than the layout's, when zero points are present for a symmetric
///         format, or naming the part (N.qscales, N.qzeros, N.qvalues) and the element when its bytes break the
///         format's rules (a scale that is negative or not finite, a padding row's scale that is not 0, a zero point
///         above 15, an int8 byte 0). Nothing is kept then.
[[nodiscard]] QuantizedWeight read_quantized(const Checkpoint& checkpoint, const QuantizedLayout& layout);

}  // namespace lazygraph::nn
