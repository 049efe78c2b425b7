// transformers' FineGrainedFP8 checkpoints (quant_method "fp8": e4m3 weights, weight_block_size [128, 128], each
// matrix's scale `<module>.weight_scale_inv`): their quantization_config, read and written back, and their row of the
// methods' table. packed_fp8.hpp reads their tensors into the fp8 format.
#include <string>
#include <string_view>

#include "../packed_fp8.hpp"
#include "packed_method.hpp"
#include "quantization_keys.hpp"

namespace lazygraph::nn::detail {

namespace {

using nlohmann::json;

/// transformers' FineGrainedFP8Config: {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
/// "weight_block_size": [128, 128], "modules_to_not_convert": [...]}.
PackedQuantization read_fp8(const QuantizationKeys& keys, const LlamaConfig& config) {
  PackedQuantization p;
  p.method = PackedMethod::fp8;
  if (const std::string fmt = keys.text("fmt", "e4m3"); fmt != "e4m3") {
    keys.fail("fmt", "is \"" + fmt + "\": lazygraph reads FP8 weights of e4m3 only");
  }
  // Dynamic activation quantization is a runtime's choice made per token as it runs, not part of the stored
  // weights: lazygraph multiplies the activations in the decoder's element type instead (docs/models.md).
  if (const std::string scheme = keys.text("activation_scheme", "dynamic"); scheme != "dynamic") {
    keys.fail("activation_scheme", "is \"" + scheme +
                                       "\": lazygraph reads FP8 weights only, with activations in the decoder's "
                                       "element type; a static scheme's activation scales would be ignored");
  }
  require_blocks_of_128(keys, "weight_block_size", keys.get("weight_block_size"));
  p.modules_to_not_convert = keys.names("modules_to_not_convert");
  constexpr std::string_view read[] = {"quant_method", "fmt", "activation_scheme", "weight_block_size",
                                       "modules_to_not_convert"};
  keys.only(read, {});
  p.scale_type = fp8_scale_type(config);
  return p;
}

json write_fp8(const PackedQuantization& packed) {
  const json skipped = packed.modules_to_not_convert.empty() ? json(nullptr) : json(packed.modules_to_not_convert);
  return {{"quant_method", "fp8"},
          {"fmt", "e4m3"},
          {"activation_scheme", "dynamic"},
          {"weight_block_size", {128, 128}},
          {"modules_to_not_convert", skipped}};
}

PackedTensors require_fp8(const Checkpoint& checkpoint, const PackedQuantization& packed, const std::string& module,
                          int outputs, int inputs) {
  return require_fp8_tensors(checkpoint, packed, module, outputs, inputs, ".weight_scale_inv");
}

}  // namespace

extern const PackedMethodRow fp8_method{
    .method = PackedMethod::fp8,
    .quant_method = "fp8",
    .name = "FP8",
    .read = read_fp8,
    .write = write_fp8,
    .format = fp8_format,
    .packed_suffix = ".weight",
    .packed_dtype = DType::f8_e4m3,
    .require = require_fp8,
    .repack = repack_fp8,
    .experts = true,
};

}  // namespace lazygraph::nn::detail
