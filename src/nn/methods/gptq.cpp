// AutoGPTQ's and GPTQModel's 4-bit checkpoints (quant_method "gptq", checkpoint_format "gptq"): their
// quantization_config, read and written back, and their row of the methods' table. packed_int4.hpp reads their
// tensors (zero points stored minus 1, g_idx) into int4 with zero points.
#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>

#include "../packed_int4.hpp"
#include "packed_method.hpp"
#include "quantization_keys.hpp"

namespace lazygraph::nn::detail {

namespace {

using nlohmann::json;

/// Keys of a GPTQ config that record how it was quantized, or choose runtime kernels (transformers' GPTQConfig,
/// AutoGPTQ's and GPTQModel's quantize_config), not the stored bytes.
constexpr std::string_view kGptqHarmless[] = {
    "batch_size",
    "block_name_to_quantize",
    "cache_block_outputs",
    "damp_auto_increment",
    "damp_percent",
    "dataset",
    "exllama_config",
    "max_input_length",
    "meta",
    "model_file_base_name",
    "model_name_or_path",
    "model_seqlen",
    "module_name_preceding_first_block",
    "modules_in_block_to_quantize",
    "mse",
    "pad_token_id",
    "static_groups",
    "tokenizer",
    "true_sequential",
    "use_cuda_fp16",
    "use_exllama",
    "backend",
    "lm_head",
};

PackedQuantization read_gptq(const QuantizationKeys& keys, const LlamaConfig& /*config*/) {
  PackedQuantization p;
  p.method = PackedMethod::gptq;
  keys.four_bits();
  p.group = keys.group();
  p.symmetric = keys.boolean("sym", true);
  p.desc_act = keys.boolean("desc_act", false);
  for (const std::string_view key : {"checkpoint_format", "format"}) {
    if (const std::string format = keys.text(key, "gptq"); format != "gptq") {
      keys.fail(key, "is \"" + format +
                         "\": lazygraph reads GPTQ's own packing only (\"gptq\", zero points stored minus 1); gptq_v2, "
                         "marlin, bitblas and the others pack otherwise");
    }
  }
  if (const std::string pack = keys.text("pack_dtype", "int32"); pack != "int32" && pack != "torch.int32") {
    keys.fail("pack_dtype", "is \"" + pack + "\": lazygraph reads GPTQ values packed in int32 only");
  }
  if (const json* dynamic = keys.get("dynamic"); dynamic != nullptr && !(dynamic->is_object() && dynamic->empty())) {
    keys.fail("dynamic", "gives modules their own settings (" + describe_json(*dynamic) +
                             "), which lazygraph does not read: every packed module must have the config's");
  }
  constexpr std::string_view read[] = {"quant_method",      "bits",   "group_size", "sym",    "desc_act",
                                       "checkpoint_format", "format", "pack_dtype", "dynamic"};
  keys.only(read, kGptqHarmless);
  return p;
}

json write_gptq(const PackedQuantization& packed) {
  json out = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", packed.group}};
  out["sym"] = packed.symmetric;
  out["desc_act"] = packed.desc_act;
  out["checkpoint_format"] = "gptq";
  return out;
}

/// GPTQ's packing (checkpoint_format "gptq"): qweight I32 [K / 8, N], word (r, n) holding inputs 8r + i in nibble i;
/// qzeros word (gi, c) holding outputs 8c + i in nibble i as zero - 1; g_idx I32 [K], each input's group.
constexpr Int4Packing kGptqPacking{
    .words_hold_outputs = false, .nibble = {0, 1, 2, 3, 4, 5, 6, 7}, .zero_offset = 1, .g_idx = true};

PackedTensors require_gptq(const Checkpoint& checkpoint, const PackedQuantization& packed, const std::string& module,
                           int outputs, int inputs) {
  return require_packed(checkpoint, packed, module, outputs, inputs, kGptqPacking);
}

QuantizedWeight repack_gptq(const Checkpoint& checkpoint, const PackedQuantization& packed,
                            const QuantizedLayout& layout, std::span<const PackedPart> parts, int head_dim) {
  return repack(checkpoint, packed, layout, parts, head_dim, kGptqPacking);
}

}  // namespace

extern const PackedMethodRow gptq_method{
    .method = PackedMethod::gptq,
    .quant_method = "gptq",
    .name = "GPTQ",
    .read = read_gptq,
    .write = write_gptq,
    .format = int4_with_zeros,
    .packed_suffix = ".qweight",
    .packed_dtype = std::nullopt,
    .require = require_gptq,
    .repack = repack_gptq,
};

}  // namespace lazygraph::nn::detail
