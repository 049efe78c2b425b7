// The quantization_config of AutoAWQ's and AutoGPTQ's / GPTQModel's 4-bit checkpoints (packed_int4.hpp) and of FP8
// ones (transformers' "fp8" and compressed-tensors' "float-quantized"; packed_fp8.hpp): what changes
// the weights' meaning is checked, what only described how they were made (calibration data, damping) or which
// kernels a runtime picks is passed over, and any other key refused by name, as config.json's other keys are.
#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <string>
#include <string_view>

#include "formats/storage_format.hpp"
#include "packed_int4.hpp"

namespace lazygraph::nn {

std::string packed_method_name(PackedMethod method) {
  switch (method) {
    case PackedMethod::awq:
      return "AWQ";
    case PackedMethod::gptq:
      return "GPTQ";
    case PackedMethod::fp8:
      return "FP8";
    case PackedMethod::compressed_tensors:
      break;
  }
  return "compressed-tensors FP8";
}

QuantizedFormat PackedQuantization::format() const {
  if (fp8()) {  // the storage table's row read from checkpoints as they are, 8 bits a value: e4m3 bytes
    const auto rows = detail::storage_formats();
    const auto fp8_row =
        std::find_if(rows.begin(), rows.end(), [](const detail::StorageFormat* f) { return f->e4m3_values; });
    return {.kind = (*fp8_row)->kind, .group = 128, .asymmetric = false, .scale_type = scale_type};
  }
  // the storage table's 4-bit row with zero points: both packings store 4-bit q in [0, 15] with a zero point a group
  const auto rows = detail::storage_formats();
  const auto int4 = std::find_if(rows.begin(), rows.end(), [](const detail::StorageFormat* f) {
    return f->value_bits == 4 && f->allows_asymmetric;
  });
  return {.kind = (*int4)->kind, .group = group, .asymmetric = true, .scale_type = ScaleType::f16};
}

namespace detail {

namespace {

using nlohmann::json;

/// Keys of an AWQ config that choose runtime kernels or fusing (transformers' AwqConfig), not the stored bytes.
constexpr std::string_view kAwqHarmless[] = {"do_fuse", "fuse_max_seq_len", "modules_to_fuse", "exllama_config"};

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

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

/// Reads keys of quantization_config, naming them "quantization_config.<key>".
class Keys {
 public:
  Keys(const json& q, const ConfigReader& reader, std::string method)
      : q_(q), reader_(reader), method_(std::move(method)) {}

  [[noreturn]] void fail(std::string_view key, const std::string& why) const {
    reader_.fail("quantization_config." + std::string(key), why);
  }
  [[nodiscard]] const json* get(std::string_view key) const {
    const auto it = q_.find(key);
    return it == q_.end() || it->is_null() ? nullptr : &*it;
  }
  [[nodiscard]] std::string found(const json* value) const {
    return value == nullptr ? "nothing" : describe_json(*value);
  }
  /// A boolean key, `fallback` when absent.
  [[nodiscard]] bool boolean(std::string_view key, bool fallback) const {
    const json* value = get(key);
    if (value == nullptr) return fallback;
    if (!value->is_boolean()) fail(key, "must be true or false, found " + describe_json(*value));
    return value->get<bool>();
  }
  /// A string key, lower-cased; `fallback` when absent.
  [[nodiscard]] std::string text(std::string_view key, const std::string& fallback) const {
    const json* value = get(key);
    if (value == nullptr) return fallback;
    if (!value->is_string()) fail(key, "must be a string, found " + describe_json(*value));
    return lower(value->get<std::string>());
  }
  /// bits, which must be 4.
  void four_bits() const {
    const json* bits = get("bits");
    if (bits == nullptr || !bits->is_number_integer() || bits->get<std::int64_t>() != 4) {
      fail("bits",
           "is " + found(bits) + ": lazygraph reads " + method_ +
               " checkpoints of 4 bits only (the int4 layout its kernels read); 3- and 8-bit ones are not read");
    }
  }
  /// group_size: 32, 64 or 128.
  [[nodiscard]] int group() const {
    const json* group = get("group_size");
    const bool ok =
        group != nullptr && group->is_number_integer() &&
        (group->get<std::int64_t>() == 32 || group->get<std::int64_t>() == 64 || group->get<std::int64_t>() == 128);
    if (!ok) {
      const bool per_channel = group != nullptr && group->is_number_integer() && group->get<std::int64_t>() == -1;
      fail("group_size", "is " + found(group) + ": lazygraph reads " + method_ + " groups of 32, 64 or 128 inputs" +
                             (per_channel ? " (one scale per output channel over all inputs, -1, is not read)" : ""));
    }
    return static_cast<int>(group->get<std::int64_t>());
  }
  /// A list of strings, or nothing (empty) when absent or null.
  [[nodiscard]] std::vector<std::string> names(std::string_view key) const {
    std::vector<std::string> out;
    const json* list = get(key);
    if (list == nullptr) return out;
    if (!list->is_array() || !std::all_of(list->begin(), list->end(), [](const json& m) { return m.is_string(); })) {
      fail(key, "must be a list of module names or null, found " + describe_json(*list));
    }
    for (const json& m : *list) out.push_back(m.get<std::string>());
    return out;
  }
  /// Refuses any key that is neither `read` nor `harmless`.
  void only(std::span<const std::string_view> read, std::span<const std::string_view> harmless) const {
    const auto in = [](std::span<const std::string_view> keys, const std::string& key) {
      return std::find(keys.begin(), keys.end(), key) != keys.end();
    };
    for (const auto& [key, value] : q_.items()) {
      if (in(read, key) || in(harmless, key)) continue;
      fail(key, "is not a key lazygraph knows for " + method_ +
                    " checkpoints, and it may change what the weights mean, so the checkpoint is refused rather than "
                    "read without it");
    }
  }

 private:
  const json& q_;
  const ConfigReader& reader_;
  std::string method_;
};

PackedQuantization read_awq(const Keys& keys) {
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

/// The scale type FP8 matrices are stored with: the model's element type (bf16 unless torch_dtype is float16).
ScaleType fp8_scale_type(const LlamaConfig& config) {
  return config.torch_dtype == "float16" ? ScaleType::f16 : ScaleType::bf16;
}

/// A [128, 128] block size (weight_block_size, block_structure); refuses any other, naming `key`.
void require_blocks_of_128(const Keys& keys, std::string_view key, const json* blocks) {
  const bool ok = blocks != nullptr && blocks->is_array() && blocks->size() == 2 &&
                  std::all_of(blocks->begin(), blocks->end(),
                              [](const json& b) { return b.is_number_integer() && b.get<std::int64_t>() == 128; });
  if (!ok) {
    keys.fail(key, "is " + keys.found(blocks) +
                       ": lazygraph reads FP8 blocks of [128, 128] only (one scale per 128 outputs and 128 inputs)");
  }
}

/// transformers' FineGrainedFP8Config: {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
/// "weight_block_size": [128, 128], "modules_to_not_convert": [...]}.
PackedQuantization read_fp8(const Keys& keys) {
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
  return p;
}

/// compressed-tensors' quantization_config with format "float-quantized" and one config group of 8-bit float weights,
/// symmetric, per channel or in blocks of [128, 128]; input activations dynamic or none.
PackedQuantization read_compressed_tensors(const Keys& keys) {
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
  return p;
}

PackedQuantization read_gptq(const Keys& keys) {
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

}  // namespace

void read_packed_config(LlamaConfig& config, const json& q, PackedMethod method, const ConfigReader& reader) {
  const Keys keys(q, reader, packed_method_name(method));
  PackedQuantization packed;
  switch (method) {
    case PackedMethod::awq:
      packed = read_awq(keys);
      break;
    case PackedMethod::gptq:
      packed = read_gptq(keys);
      break;
    case PackedMethod::fp8:
      packed = read_fp8(keys);
      break;
    case PackedMethod::compressed_tensors:
      packed = read_compressed_tensors(keys);
      break;
  }
  if (packed.fp8()) packed.scale_type = fp8_scale_type(config);
  DecoderQuantization quantization;
  quantization.attention = quantization.mlp = quantization.lm_head = packed.format();
  config.quantization = quantization;
  config.packed = packed;
}

json packed_config_json(const PackedQuantization& packed) {
  const json skipped = packed.modules_to_not_convert.empty() ? json(nullptr) : json(packed.modules_to_not_convert);
  if (packed.method == PackedMethod::fp8) {
    return {{"quant_method", "fp8"},
            {"fmt", "e4m3"},
            {"activation_scheme", "dynamic"},
            {"weight_block_size", {128, 128}},
            {"modules_to_not_convert", skipped}};
  }
  if (packed.method == PackedMethod::compressed_tensors) {
    json weights = {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"dynamic", false}};
    weights["strategy"] = packed.per_channel ? "channel" : "block";
    if (!packed.per_channel) weights["block_structure"] = {128, 128};
    return {{"quant_method", "compressed-tensors"},
            {"format", "float-quantized"},
            {"quantization_status", "compressed"},
            {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}}}}},
            {"ignore", packed.modules_to_not_convert}};
  }
  json out = {
      {"quant_method", packed.method == PackedMethod::awq ? "awq" : "gptq"}, {"bits", 4}, {"group_size", packed.group}};
  if (packed.method == PackedMethod::awq) {
    out["zero_point"] = true;
    out["version"] = "gemm";
    out["modules_to_not_convert"] =
        packed.modules_to_not_convert.empty() ? json(nullptr) : json(packed.modules_to_not_convert);
  } else {
    out["sym"] = packed.symmetric;
    out["desc_act"] = packed.desc_act;
    out["checkpoint_format"] = "gptq";
  }
  return out;
}

}  // namespace detail

}  // namespace lazygraph::nn
