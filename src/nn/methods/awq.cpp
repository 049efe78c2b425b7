// AutoAWQ's 4-bit checkpoints (quant_method "awq", version "gemm"): their quantization_config, read and written back,
// and their row of the methods' table. packed_int4.hpp reads their tensors (AWQ's word order) into int4 with zero
// points.
#include <algorithm>
#include <string>
#include <string_view>

#include "../packed_int4.hpp"
#include "packed_method.hpp"
#include "quantization_keys.hpp"

namespace lazygraph::nn::detail {

namespace {

using nlohmann::json;

/// Keys of an AWQ config that choose runtime kernels or fusing (transformers' AwqConfig), not the stored bytes.
constexpr std::string_view kAwqHarmless[] = {"do_fuse", "fuse_max_seq_len", "modules_to_fuse", "exllama_config"};

PackedQuantization read_awq(const QuantizationKeys& keys, const LlamaConfig& /*config*/) {
  PackedQuantization p;
  p.method = PackedMethod::awq;
  keys.four_bits();
  p.group = keys.group();
  if (!keys.boolean("zero_point", true)) {
    keys.fail("zero_point", "is false: lazygraph reads AWQ checkpoints with zero points only (AutoAWQ's default)");
  }
  if (const std::string version = keys.text("version", "gemm"); version != "gemm") {
    keys.fail("version", "is \"" + version +
                             "\": lazygraph reads AWQ's GEMM packing only (gemv, gemv_fast, marlin, exllama and ipex "
                             "pack the weights otherwise)");
  }
  if (const std::string backend = keys.text("backend", "autoawq"); backend != "autoawq") {
    keys.fail("backend", "is \"" + backend + "\": lazygraph reads AutoAWQ's packing only (llm-awq packs otherwise)");
  }
  if (const json* skip = keys.get("modules_to_not_convert"); skip != nullptr) {
    if (!skip->is_array() || !std::all_of(skip->begin(), skip->end(), [](const json& m) { return m.is_string(); })) {
      keys.fail("modules_to_not_convert", "must be a list of module names or null, found " + describe_json(*skip));
    }
    for (const json& m : *skip) p.modules_to_not_convert.push_back(m.get<std::string>());
  }
  constexpr std::string_view read[] = {
      "quant_method", "bits", "group_size", "zero_point", "version", "backend", "modules_to_not_convert"};
  keys.only(read, kAwqHarmless);
  return p;
}

json write_awq(const PackedQuantization& packed) {
  json out = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", packed.group}};
  out["zero_point"] = true;
  out["version"] = "gemm";
  out["modules_to_not_convert"] =
      packed.modules_to_not_convert.empty() ? json(nullptr) : json(packed.modules_to_not_convert);
  return out;
}

/// AutoAWQ's GEMM packing: qweight I32 [K, N / 8], word (k, c) holding outputs 8c + j in nibble nibble[j] (AutoAWQ's
/// order 0, 2, 4, 6, 1, 3, 5, 7 of outputs along the nibbles); qzeros packed alike, zero points stored as they are.
constexpr Int4Packing kAwqPacking{
    .words_hold_outputs = true, .nibble = {0, 4, 1, 5, 2, 6, 3, 7}, .zero_offset = 0, .g_idx = false};

PackedTensors require_awq(const Checkpoint& checkpoint, const PackedQuantization& packed, const std::string& module,
                          int outputs, int inputs) {
  return require_packed(checkpoint, packed, module, outputs, inputs, kAwqPacking);
}

QuantizedWeight repack_awq(const Checkpoint& checkpoint, const PackedQuantization& packed,
                           const QuantizedLayout& layout, std::span<const PackedPart> parts, int head_dim) {
  return repack(checkpoint, packed, layout, parts, head_dim, kAwqPacking);
}

}  // namespace

extern const PackedMethodRow awq_method{
    .method = PackedMethod::awq,
    .quant_method = "awq",
    .name = "AWQ",
    .read = read_awq,
    .write = write_awq,
    .format = int4_with_zeros,
    .packed_suffix = ".qweight",
    .packed_dtype = std::nullopt,
    .require = require_awq,
    .repack = repack_awq,
};

}  // namespace lazygraph::nn::detail
