// compressed-tensors' FP8 checkpoints (llm-compressor's; quant_method "compressed-tensors", format "float-quantized":
// e4m3 weights per output channel or in blocks of [128, 128], each matrix's scale `<module>.weight_scale`): their
// quantization_config, read and written back, and their row of the methods' table. packed_fp8.hpp reads their
// tensors into the fp8 format.
#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>

#include "../packed_fp8.hpp"
#include "packed_method.hpp"
#include "quantization_keys.hpp"

namespace lazygraph::nn::detail {

namespace {

using nlohmann::json;

/// compressed-tensors' quantization_config with format "float-quantized" and one config group of 8-bit float weights,
/// symmetric, per channel or in blocks of [128, 128]; input activations dynamic or none.
PackedQuantization read_compressed_tensors(const QuantizationKeys& keys, const LlamaConfig& config) {
  PackedQuantization p;
  p.method = PackedMethod::compressed_tensors;
  if (const std::string format = keys.text("format", ""); format != "float-quantized") {
    keys.fail("format", "is \"" + format +
                            "\": lazygraph reads compressed-tensors checkpoints of 8-bit float weights only "
                            "(\"float-quantized\")");
  }
  const json* groups = keys.get("config_groups");
  if (groups == nullptr || !groups->is_object() || groups->size() != 1) {
    keys.fail("config_groups", "is " + keys.found(groups) +
                                   ": lazygraph reads compressed-tensors checkpoints of one config group, whose "
                                   "scheme every quantized Linear module has");
  }
  const std::string group = "config_groups." + groups->begin().key();
  const json& scheme = groups->begin().value();
  if (!scheme.is_object()) keys.fail(group, "must be an object, found " + describe_json(scheme));
  const auto member = [&](const json& object, std::string_view key) -> const json* {
    const auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* targets = member(scheme, "targets"); targets == nullptr || *targets != json::array({"Linear"})) {
    keys.fail(group + ".targets",
              "is " + keys.found(targets) + ": lazygraph reads a group targeting [\"Linear\"] only");
  }
  const json* weights = member(scheme, "weights");
  if (weights == nullptr || !weights->is_object()) {
    keys.fail(group + ".weights", "is " + keys.found(weights) + ": the group must quantize the weights");
  }
  const std::string w = group + ".weights";
  const auto expect = [&](const json& object, const std::string& at, std::string_view key, const json& want,
                          std::string_view why) {
    const json* value = member(object, key);
    if (value == nullptr ? !want.is_null() : *value != want) {
      keys.fail(at + "." + std::string(key), "is " + keys.found(value) + ": " + std::string(why));
    }
  };
  expect(*weights, w, "num_bits", 8, "lazygraph reads 8-bit float weights only");
  expect(*weights, w, "type", "float", "lazygraph reads float (e4m3) weights only; integer ones are not read");
  expect(*weights, w, "symmetric", true, "lazygraph reads symmetric FP8 weights only (no zero points)");
  expect(*weights, w, "dynamic", false, "weights quantized as they run are not stored weights");
  expect(*weights, w, "actorder", nullptr, "lazygraph does not reorder inputs");
  const json* strategy = member(*weights, "strategy");
  if (strategy != nullptr && *strategy == "channel") {
    p.per_channel = true;
    expect(*weights, w, "group_size", nullptr, "a channel strategy has no groups");
  } else if (strategy != nullptr && *strategy == "block") {
    require_blocks_of_128(keys, w + ".block_structure", member(*weights, "block_structure"));
  } else {
    keys.fail(w + ".strategy", "is " + keys.found(strategy) +
                                   ": lazygraph reads FP8 weights with one scale per output channel (\"channel\") or "
                                   "per block of [128, 128] (\"block\"); tensor, group and token scales are not read");
  }
  if (const json* inputs = member(scheme, "input_activations"); inputs != nullptr) {
    // Dynamic input quantization rounds activations to FP8 per token as a runtime runs; lazygraph keeps them in the
    // decoder's element type (docs/models.md). Static input scales change what is computed: refused.
    expect(*inputs, group + ".input_activations", "dynamic", true,
           "static input scales are not read: lazygraph reads FP8 weights only, activations in the decoder's "
           "element type");
  }
  expect(scheme, group, "output_activations", nullptr, "lazygraph does not quantize outputs");
  if (const json* format = member(scheme, "format"); format != nullptr && *format != "float-quantized") {
    keys.fail(group + ".format", "is " + describe_json(*format) + ": lazygraph reads \"float-quantized\" groups only");
  }
  // Any other key of the group or of its weights may change what the weights mean: refused rather than passed over.
  const auto only = [&](const json& object, const std::string& at, std::initializer_list<std::string_view> known) {
    for (const auto& [key, value] : object.items()) {
      if (std::find(known.begin(), known.end(), key) != known.end()) continue;
      std::string path = at;
      path += '.';
      path += key;
      keys.fail(path,
                "is not a key lazygraph knows for compressed-tensors FP8 checkpoints, and it may change what the "
                "weights mean, so the checkpoint is refused rather than read without it");
    }
  };
  only(scheme, group, {"targets", "weights", "input_activations", "output_activations", "format"});
  only(*weights, w,
       {"num_bits", "type", "symmetric", "group_size", "strategy", "block_structure", "dynamic", "actorder", "observer",
        "observer_kwargs", "scale_dtype", "zp_dtype"});
  if (const json* kv = keys.get("kv_cache_scheme"); kv != nullptr) {
    keys.fail("kv_cache_scheme", "is " + describe_json(*kv) + ": lazygraph keeps the KV cache unquantized");
  }
  if (const json* sparsity = keys.get("sparsity_config"); sparsity != nullptr && !sparsity->empty()) {
    keys.fail("sparsity_config", "is " + describe_json(*sparsity) + ": lazygraph does not read sparse weights");
  }
  if (const json* transform = keys.get("transform_config"); transform != nullptr) {
    keys.fail("transform_config", "is " + describe_json(*transform) + ": lazygraph does not read transformed weights");
  }
  if (const std::string status = keys.text("quantization_status", "compressed"); status != "compressed") {
    keys.fail("quantization_status",
              "is \"" + status + "\": lazygraph reads compressed-tensors checkpoints whose weights are compressed");
  }
  p.modules_to_not_convert = keys.names("ignore");
  for (const std::string& m : p.modules_to_not_convert) {
    if (m.starts_with("re:")) {
      keys.fail("ignore", "names \"" + m + "\": lazygraph reads plain module names only, not patterns");
    }
  }
  constexpr std::string_view read[] = {"quant_method",    "format",           "config_groups",       "kv_cache_scheme",
                                       "sparsity_config", "transform_config", "quantization_status", "ignore"};
  constexpr std::string_view harmless[] = {"global_compression_ratio", "version", "provider"};
  keys.only(read, harmless);
  p.scale_type = fp8_scale_type(config);
  return p;
}

json write_compressed_tensors(const PackedQuantization& packed) {
  json weights = {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"dynamic", false}};
  weights["strategy"] = packed.per_channel ? "channel" : "block";
  if (!packed.per_channel) weights["block_structure"] = {128, 128};
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}}}}},
          {"ignore", packed.modules_to_not_convert}};
}

PackedTensors require_compressed_tensors(const Checkpoint& checkpoint, const PackedQuantization& packed,
                                         const std::string& module, int outputs, int inputs) {
  return require_fp8_tensors(checkpoint, packed, module, outputs, inputs, ".weight_scale");
}

}  // namespace

extern const PackedMethodRow compressed_tensors_method{
    .method = PackedMethod::compressed_tensors,
    .quant_method = "compressed-tensors",
    .name = "compressed-tensors FP8",
    .read = read_compressed_tensors,
    .write = write_compressed_tensors,
    .format = fp8_format,
    .packed_suffix = ".weight",
    .packed_dtype = DType::f8_e4m3,
    .require = require_compressed_tensors,
    .repack = repack_fp8,
    .experts = true,
};

}  // namespace lazygraph::nn::detail
