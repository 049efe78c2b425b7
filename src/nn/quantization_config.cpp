#include "lazygraph/nn/quantization_config.hpp"

#include "lazygraph/nn/decoder_tensors.hpp"

#include "formats/storage_format.hpp"

namespace lazygraph::nn {

QuantizationClass quantization_class(DecoderTensorRole role) noexcept {
  using Role = DecoderTensorRole;
  switch (role) {
    case Role::wq:
    case Role::wk:
    case Role::wv:
    case Role::wo:
      return QuantizationClass::attention;
    case Role::w1:
    case Role::w3:
    case Role::w2:
    case Role::moe_w1:
    case Role::moe_w3:
    case Role::moe_w2:
      return QuantizationClass::mlp;
    case Role::lm_head:
      return QuantizationClass::lm_head;
    default:
      return QuantizationClass::none;
  }
}

std::optional<QuantizedFormat> DecoderQuantization::format_of(DecoderTensorRole role) const noexcept {
  switch (quantization_class(role)) {
    case QuantizationClass::attention:
      return attention;
    case QuantizationClass::mlp:
      return mlp;
    case QuantizationClass::lm_head:
      return lm_head;
    default:
      return std::nullopt;
  }
}

namespace {

/// Whether `a` and `b` store weights alike: a format with one scale per row (int8) ignores the group.
bool same_storage(const std::optional<QuantizedFormat>& a, const std::optional<QuantizedFormat>& b) noexcept {
  if (!a || !b) return a.has_value() == b.has_value();
  const detail::StorageFormat* storage = detail::find_storage_format(a->kind);
  return a->kind == b->kind && a->asymmetric == b->asymmetric && a->scale_type == b->scale_type &&
         ((storage != nullptr && storage->scale_per_row()) || a->group == b->group);
}

}  // namespace

bool operator==(const DecoderQuantization& a, const DecoderQuantization& b) noexcept {
  return same_storage(a.attention, b.attention) && same_storage(a.mlp, b.mlp) && same_storage(a.lm_head, b.lm_head) &&
         a.options == b.options;
}

std::string quantization_name(const DecoderQuantization& quantization) {
  if (!quantization.any()) return "nothing quantized";
  const auto one = [](const char* what, const std::optional<QuantizedFormat>& f) {
    return std::string(what) + " " + (f ? format_name(*f) : std::string("dense"));
  };
  return one("attention", quantization.attention) + "; " + one("MLP", quantization.mlp) + "; " +
         one("LM head", quantization.lm_head) + (quantization.options.clip_search ? ", with the clipping search" : "");
}

}  // namespace lazygraph::nn
