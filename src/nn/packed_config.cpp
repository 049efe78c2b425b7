// The quantization_config of AutoAWQ's and AutoGPTQ's / GPTQModel's 4-bit checkpoints (packed_int4.hpp): what changes
// the weights' meaning is checked, what only described how they were made (calibration data, damping) or which
// kernels a runtime picks is passed over, and any other key refused by name, as config.json's other keys are.
#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

#include "formats/storage_format.hpp"
#include "packed_int4.hpp"

namespace lazygraph::nn {

std::string packed_method_name(PackedMethod method) { return method == PackedMethod::awq ? "AWQ" : "GPTQ"; }

QuantizedFormat PackedQuantization::format() const {
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
  const PackedQuantization packed = method == PackedMethod::awq ? read_awq(keys) : read_gptq(keys);
  DecoderQuantization quantization;
  quantization.attention = quantization.mlp = quantization.lm_head = packed.format();
  config.quantization = quantization;
  config.packed = packed;
}

json packed_config_json(const PackedQuantization& packed) {
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
