// The methods' table (packed_method.hpp) and what every method does the same way through its row: reading and writing
// quantization_config, naming and finding a module's packed tensor. What changes the weights' meaning is checked,
// what only described how they were made (calibration data, damping) or which kernels a runtime picks is passed over,
// and any other key refused by name, as config.json's other keys are (each method's file says which keys are which).
#include <algorithm>
#include <string>
#include <string_view>

#include "packed_method.hpp"
#include "quantization_keys.hpp"

namespace lazygraph::nn {

namespace detail {

extern const PackedMethodRow awq_method;
extern const PackedMethodRow gptq_method;
extern const PackedMethodRow fp8_method;
extern const PackedMethodRow compressed_tensors_method;

std::span<const PackedMethodRow* const> packed_methods() noexcept {
  static const PackedMethodRow* const all[] = {&awq_method, &gptq_method, &fp8_method, &compressed_tensors_method};
  return all;
}

const PackedMethodRow& find_packed_method(PackedMethod method) noexcept {
  const auto all = packed_methods();
  return **std::find_if(all.begin(), all.end(), [&](const PackedMethodRow* m) { return m->method == method; });
}

const PackedMethodRow* find_packed_method(std::string_view quant_method) noexcept {
  const auto all = packed_methods();
  const auto found =
      std::find_if(all.begin(), all.end(), [&](const PackedMethodRow* m) { return m->quant_method == quant_method; });
  return found == all.end() ? nullptr : *found;
}

std::string_view packed_methods_read() noexcept {
  return "4-bit AWQ (\"awq\") and GPTQ (\"gptq\") ones and FP8 e4m3 ones (\"fp8\", \"compressed-tensors\")";
}

void read_packed_config(LlamaConfig& config, const nlohmann::json& q, const PackedMethodRow& row,
                        const ConfigReader& reader) {
  const QuantizationKeys keys(q, reader, std::string(row.name));
  const PackedQuantization packed = row.read(keys, config);
  DecoderQuantization quantization;
  quantization.attention = quantization.mlp = quantization.lm_head = packed.format();
  config.quantization = quantization;
  config.packed = packed;
}

nlohmann::json packed_config_json(const PackedQuantization& packed) {
  return find_packed_method(packed.method).write(packed);
}

std::string module_of(std::string_view weight_name) {
  constexpr std::string_view suffix = ".weight";
  if (weight_name.ends_with(suffix)) weight_name.remove_suffix(suffix.size());
  return std::string(weight_name);
}

std::string packed_name(const PackedQuantization& packed, const std::string& module) {
  return module + std::string(find_packed_method(packed.method).packed_suffix);
}

std::string packed_dtype_note(const PackedQuantization& packed) {
  const std::optional<DType> dtype = find_packed_method(packed.method).packed_dtype;
  return dtype ? " of dtype " + std::string(dtype_name(*dtype)) : "";
}

bool holds_packed(const Checkpoint& checkpoint, const PackedQuantization& packed, const std::string& module) {
  const std::optional<DType> dtype = find_packed_method(packed.method).packed_dtype;
  const TensorInfo* found = checkpoint.find(packed_name(packed, module));
  return found != nullptr && (!dtype || found->dtype == *dtype);
}

}  // namespace detail

std::string packed_method_name(PackedMethod method) { return std::string(detail::find_packed_method(method).name); }

QuantizedFormat PackedQuantization::format() const { return detail::find_packed_method(method).format(*this); }

}  // namespace lazygraph::nn
