#pragma once
/// \file
/// Private to src/nn: the checkpoint-method seam. Each quantized checkpoint lazygraph reads as another tool wrote it
/// (a quant_method other than "lazygraph") is one file here, named after its PackedMethod (awq.cpp, gptq.cpp, fp8.cpp,
/// compressed_tensors.cpp), that defines its row of the methods' table: its quant_method, its name in messages, how
/// its quantization_config is read and written back, which tensor says a module is packed, and how its tensors are
/// checked and repacked (by the readers the methods share: packed_int4.hpp's 4-bit one, packed_fp8.hpp's FP8 one).
/// Every other file asks the table (find_packed_method) and never compares PackedMethods. docs/adding.md: "A weight
/// format".

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "../detail/config_reader.hpp"
#include "../packed_int4.hpp"
#include "lazygraph/nn/llama_config.hpp"
#include "lazygraph/nn/quantization_config.hpp"
#include "lazygraph/nn/safetensors.hpp"

namespace lazygraph::nn::detail {

class QuantizationKeys;  // quantization_keys.hpp

/// One checkpoint method's row of the methods' table.
struct PackedMethodRow {
  PackedMethod method;            ///< the method
  std::string_view quant_method;  ///< its quantization_config.quant_method: "awq", "compressed-tensors"
  std::string_view name;          ///< its name in messages: "AWQ", "compressed-tensors FP8"
  /// Reads its quantization_config (`keys`) of a model whose other keys `config` holds. \throws CheckpointError
  /// through `keys` naming the key and the value it refuses.
  PackedQuantization (*read)(const QuantizationKeys& keys, const LlamaConfig& config);
  /// `packed` as quantization_config, which `read` reads back equal.
  nlohmann::json (*write)(const PackedQuantization& packed);
  /// The format its matrices are repacked into (PackedQuantization::format()).
  QuantizedFormat (*format)(const PackedQuantization& packed);
  /// The suffix, after the module's name, of the tensor that says a module is packed: ".qweight", ".weight".
  std::string_view packed_suffix;
  /// The dtype that tensor must have to say so (a `.weight` of another dtype is a dense matrix); nullopt: any.
  std::optional<DType> packed_dtype;
  /// Checks the tensors of `module`, an `outputs` x `inputs` matrix (require_packed, or require_fp8_tensors with
  /// the method's scale suffix).
  PackedTensors (*require)(const Checkpoint& checkpoint, const PackedQuantization& packed, const std::string& module,
                           int outputs, int inputs);
  /// Repacks a matrix from its parts, which `require` checked (repack, repack_fp8).
  QuantizedWeight (*repack)(const Checkpoint& checkpoint, const PackedQuantization& packed,
                            const QuantizedLayout& layout, std::span<const PackedPart> parts, int head_dim);
  /// Whether a mixture of experts' experts are read packed by it (each layer's experts of a kind repacked as one
  /// stack, `repack`'s parts); a checkpoint of another method that packs them is refused naming the first.
  bool experts = false;
};

/// Every checkpoint method, in the order of their PackedMethods.
[[nodiscard]] std::span<const PackedMethodRow* const> packed_methods() noexcept;

/// The row of `method` (every PackedMethod has one).
[[nodiscard]] const PackedMethodRow& find_packed_method(PackedMethod method) noexcept;

/// The row whose quant_method is `quant_method`, or null.
[[nodiscard]] const PackedMethodRow* find_packed_method(std::string_view quant_method) noexcept;

/// The methods config.json's quant_method may name besides "lazygraph", for messages: "4-bit AWQ (\"awq\") and ...".
[[nodiscard]] std::string_view packed_methods_read() noexcept;

/// Reads quantization_config `q` of `row`'s method into config.packed, and config.quantization with every class in
/// its format. \throws CheckpointError through `reader` naming the key and the value it refuses.
void read_packed_config(LlamaConfig& config, const nlohmann::json& q, const PackedMethodRow& row,
                        const ConfigReader& reader);

/// `packed` as quantization_config, which read_packed_config reads back equal.
[[nodiscard]] nlohmann::json packed_config_json(const PackedQuantization& packed);

/// "model.layers.0.self_attn.q_proj" of "model.layers.0.self_attn.q_proj.weight".
[[nodiscard]] std::string module_of(std::string_view weight_name);

/// The tensor that says `module` is packed (`<module>` + the row's packed_suffix).
[[nodiscard]] std::string packed_name(const PackedQuantization& packed, const std::string& module);

/// " of dtype F8_E4M3" where the method's packed tensor must have a dtype (for messages), else "".
[[nodiscard]] std::string packed_dtype_note(const PackedQuantization& packed);

/// Whether `checkpoint` holds `module` packed (its packed_name, of the row's packed_dtype where it has one).
[[nodiscard]] bool holds_packed(const Checkpoint& checkpoint, const PackedQuantization& packed,
                                const std::string& module);

}  // namespace lazygraph::nn::detail
