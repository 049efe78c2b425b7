// LlamaConfig's config.json (llama_config.hpp): the keys every architecture shares read here, the rest by the
// architecture's file (src/nn/architectures/), which this file looks up by model_type; and written back.
#include <lazygraph/nn/llama_config.hpp>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "architectures/architecture.hpp"
#include "detail/config_reader.hpp"
#include "formats/storage_format.hpp"
#include "json_util.hpp"
#include "methods/packed_method.hpp"

namespace lazygraph::nn {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

using detail::ConfigReader;
constexpr int kMaxHeads = 4096;
constexpr int kMaxLayers = 1024;
using detail::kMaxVocab;

/// Keys that do not change what inference computes: bookkeeping, training-only settings, token ids read elsewhere,
/// and generation defaults (a caller picks its own sampling).
constexpr std::string_view kHarmlessKeys[] = {
    "_attn_implementation",
    "_attn_implementation_autoset",
    "_commit_hash",
    "_name_or_path",
    "add_cross_attention",
    "attention_dropout",
    "attn_implementation",
    "bad_words_ids",
    "begin_suppress_tokens",
    "chunk_size_feed_forward",
    "cross_attention_hidden_size",
    "decoder_start_token_id",
    "diversity_penalty",
    "do_sample",
    "early_stopping",
    "encoder_no_repeat_ngram_size",
    "exponential_decay_length_penalty",
    "finetuning_task",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "id2label",
    "initializer_range",
    "is_decoder",
    "is_encoder_decoder",
    "label2id",
    "length_penalty",
    "max_length",
    "min_length",
    "no_repeat_ngram_size",
    "num_beam_groups",
    "num_beams",
    "num_return_sequences",
    "output_attentions",
    "output_hidden_states",
    "output_scores",
    "pad_token_id",
    "prefix",
    "pretraining_tp",
    "problem_type",
    "pruned_heads",
    "remove_invalid_values",
    "repetition_penalty",
    "return_dict",
    "return_dict_in_generate",
    "sep_token_id",
    "suppress_tokens",
    "task_specific_params",
    "temperature",
    "tf_legacy_loss",
    "tie_encoder_decoder",
    "tokenizer_class",
    "top_k",
    "top_p",
    "torchscript",
    "transformers_version",
    "typical_p",
    "use_bfloat16",
    "use_cache",
    "use_return_dict",
};

/// Keys this reader reads (and checks).
constexpr std::string_view kReadKeys[] = {
    "architectures",
    "bos_token_id",
    "dtype",
    "eos_token_id",
    "head_dim",
    "hidden_act",
    "hidden_size",
    "intermediate_size",
    "lazygraph_save_id",
    "max_position_embeddings",
    "mlp_bias",
    "model_type",
    "num_attention_heads",
    "num_hidden_layers",
    "num_key_value_heads",
    "quantization_config",
    "rms_norm_eps",
    "rope_parameters",
    "rope_scaling",
    "rope_theta",
    "tie_word_embeddings",
    "torch_dtype",
    "vocab_size",
};

template <std::size_t N>
bool listed(const std::string_view (&list)[N], std::string_view key) {
  return std::find(std::begin(list), std::end(list), key) != std::end(list);
}

/// model_type and architectures: the architecture's file (src/nn/architectures/), whose keys are read too.
const detail::Architecture& read_architecture(LlamaConfig& config, const ConfigReader& reader) {
  config.model_type = reader.string("model_type", "llama");
  const detail::Architecture* known = detail::find_architecture(config.model_type);
  if (known == nullptr) {
    std::string names;
    for (const detail::Architecture* a : detail::architectures()) {
      names += (names.empty() ? "" : ", ") + std::string(a->model_type);
    }
    reader.fail("model_type", "'" + config.model_type + "' is not supported (lazygraph runs " + names + ")");
  }
  if (const json* classes = reader.get("architectures"); classes != nullptr) {
    if (!classes->is_array()) reader.fail("architectures", "must be a list, found " + detail::describe_json(*classes));
    for (const json& name : *classes) {
      if (!name.is_string() || name.get<std::string>() != known->class_name) {
        reader.fail("architectures", "names " + detail::describe_json(name) + ", but lazygraph runs model_type '" +
                                         config.model_type + "' as " + std::string(known->class_name) + " only");
      }
    }
  }
  return *known;
}

void check_keys(const ConfigReader& reader, const detail::Architecture& architecture) {
  for (const auto& [key, value] : reader.root().items()) {
    if (listed(kReadKeys, key) || listed(kHarmlessKeys, key)) continue;
    if (std::find(architecture.keys.begin(), architecture.keys.end(), key) != architecture.keys.end()) continue;
    reader.fail(key,
                "is not one lazygraph knows, and it may change what the model computes, so the model is "
                "refused rather than run without it (remove it from config.json if it does not)");
  }
}

/// RoPE: transformers 5's rope_parameters {rope_theta, rope_type, ...}, or the older top-level rope_theta and
/// rope_scaling {type or rope_type, ...}; where both are given they must agree.
void read_rope(LlamaConfig& config, const ConfigReader& reader) {
  const json* parameters = reader.get("rope_parameters");
  const json* scaling = reader.get("rope_scaling");
  const bool has_top_theta = reader.get("rope_theta") != nullptr;
  const double top_theta = reader.float_number("rope_theta", config.rope_theta);
  const auto read_object = [&](const json& object, std::string_view key, bool holds_theta) {
    return detail::read_rope_object(reader, object, key, holds_theta);
  };
  config.rope_theta = top_theta;
  if (parameters != nullptr) {
    config.rope_scaling = read_object(*parameters, "rope_parameters", true);
    if (const auto it = parameters->find("rope_theta"); it != parameters->end() && !it->is_null()) {
      const double theta = reader.float_value("rope_parameters.rope_theta", *it);
      if (has_top_theta && top_theta != theta) {
        reader.fail("rope_theta", "(" + std::to_string(top_theta) + ") disagrees with rope_parameters.rope_theta (" +
                                      std::to_string(theta) + ")");
      }
      config.rope_theta = theta;
    }
    if (scaling != nullptr && read_object(*scaling, "rope_scaling", false) != config.rope_scaling) {
      reader.fail("rope_scaling", "disagrees with rope_parameters");
    }
  } else if (scaling != nullptr) {
    config.rope_scaling = read_object(*scaling, "rope_scaling", false);
  }
}

/// One class's format in quantization_config, e.g. {"kind": "int4", "group": 128, "asymmetric": false, "scale_type":
/// "float16"} or {"kind": "int8", "scale_type": "bfloat16"}; nullopt when the class's key is absent or null.
std::optional<QuantizedFormat> read_format(const json& config, std::string_view name, const ConfigReader& reader) {
  const auto it = config.find(name);
  if (it == config.end() || it->is_null()) return std::nullopt;
  const std::string where = "quantization_config." + std::string(name);
  if (!it->is_object()) reader.fail(where, "must be a format object or null, found " + detail::describe_json(*it));
  const auto field = [&](std::string_view key) -> const json* {
    const auto found = it->find(key);
    return found == it->end() || found->is_null() ? nullptr : &*found;
  };
  QuantizedFormat format;
  const json* kind = field("kind");
  const auto formats = detail::storage_formats();
  const auto named = std::find_if(formats.begin(), formats.end(), [&](const detail::StorageFormat* f) {
    return kind != nullptr && kind->is_string() && kind->get_ref<const std::string&>() == f->name;
  });
  if (named == formats.end()) {
    reader.fail(where + ".kind", "must be " + detail::listed_names() + ", found " +
                                     (kind == nullptr ? "nothing" : detail::describe_json(*kind)));
  }
  const detail::StorageFormat& storage = **named;
  format.kind = storage.kind;
  format.group = 0;  // one scale per row, unless the format has groups
  if (!storage.scale_per_row()) {
    const json* group = field("group");
    const std::span<const int> groups = storage.groups;
    if (group == nullptr || !group->is_number_unsigned() || std::none_of(groups.begin(), groups.end(), [&](int g) {
          return group->get<std::uint64_t>() == static_cast<std::uint64_t>(g);
        })) {
      reader.fail(where + ".group", "must be " + detail::listed(groups) + " for " + std::string(storage.name) +
                                        " (elements per scale along the input), found " +
                                        (group == nullptr ? "nothing" : detail::describe_json(*group)));
    }
    format.group = static_cast<int>(group->get<std::uint64_t>());
  }
  if (storage.allows_asymmetric) {
    if (const json* asymmetric = field("asymmetric"); asymmetric != nullptr) {
      if (!asymmetric->is_boolean()) {
        reader.fail(where + ".asymmetric", "must be true or false, found " + detail::describe_json(*asymmetric));
      }
      format.asymmetric = asymmetric->get<bool>();
    }
  }
  const json* scales = field("scale_type");
  if (scales == nullptr || !scales->is_string() || (*scales != "float16" && *scales != "bfloat16")) {
    reader.fail(where + ".scale_type", "must be \"float16\" or \"bfloat16\", found " +
                                           (scales == nullptr ? "nothing" : detail::describe_json(*scales)));
  }
  format.scale_type = *scales == "float16" ? ScaleType::f16 : ScaleType::bf16;
  for (const auto& [key, value] : it->items()) {
    if (key == "kind" || key == "scale_type") continue;
    // group and asymmetric are keys of the formats with groups and with zero points
    const bool format_key = key == "group" || key == "asymmetric";
    const bool used =
        (key == "group" && !storage.scale_per_row()) || (key == "asymmetric" && storage.allows_asymmetric);
    if (used || (format_key && value.is_null())) continue;  // null: absent, as field() reads it
    std::string path = where;
    path += '.';
    path += key;
    reader.fail(path, format_key ? "is not used by " + std::string(storage.name) + ", " + std::string(storage.lacks)
                                 : "is not a key of a quantized format (kind, group, asymmetric, scale_type)");
  }
  return format;
}

/// quantization_config, as save_quantized_checkpoint writes it: {"quant_method": "lazygraph", "layout_version": 1,
/// "attention": FORMAT or null, "mlp": ..., "lm_head": ..., "clip_search": false}; or another tool's, which its row
/// of the methods' table reads (methods/packed_method.hpp).
void read_quantization(LlamaConfig& config, const ConfigReader& reader) {
  const json* q = reader.get("quantization_config");
  if (q == nullptr) return;
  if (!q->is_object()) reader.fail("quantization_config", "must be an object, found " + detail::describe_json(*q));
  const auto field = [&](std::string_view key) -> const json* {
    const auto found = q->find(key);
    return found == q->end() || found->is_null() ? nullptr : &*found;
  };
  const std::string own =
      "lazygraph reads the quantized checkpoints it writes itself (quant_method \"lazygraph\", "
      "nn::save_quantized_checkpoint), " +
      std::string(detail::packed_methods_read());
  const json* method = field("quant_method");
  if (method == nullptr) reader.fail("quantization_config.quant_method", "is missing: " + own);
  if (method->is_string()) {
    if (const detail::PackedMethodRow* packed = detail::find_packed_method(method->get<std::string>())) {
      detail::read_packed_config(config, *q, *packed, reader);
      return;
    }
  }
  if (!method->is_string() || method->get<std::string>() != "lazygraph") {
    reader.fail("quantization_config.quant_method",
                "is " + detail::describe_json(*method) + ": " + own +
                    ", whose byte layouts no other method shares; load the model's unquantized checkpoint with "
                    "LoadOptions::quantization to quantize it as it loads");
  }
  const json* version = field("layout_version");
  if (version == nullptr || !version->is_number_unsigned()) {
    reader.fail(
        "quantization_config.layout_version",
        "must be a positive integer, found " + (version == nullptr ? "nothing" : detail::describe_json(*version)));
  }
  if (version->get<std::uint64_t>() != static_cast<std::uint64_t>(quantized_layout_version)) {
    reader.fail("quantization_config.layout_version",
                "is " + detail::describe_json(*version) +
                    ", but this lazygraph reads quantized weights of layout version " +
                    std::to_string(quantized_layout_version) +
                    " only: save the checkpoint again from its unquantized one with this version");
  }
  DecoderQuantization quantization;
  quantization.attention = read_format(*q, "attention", reader);
  quantization.mlp = read_format(*q, "mlp", reader);
  quantization.lm_head = read_format(*q, "lm_head", reader);
  if (const json* clip = field("clip_search"); clip != nullptr) {
    if (!clip->is_boolean()) {
      reader.fail("quantization_config.clip_search", "must be true or false, found " + detail::describe_json(*clip));
    }
    quantization.options.clip_search = clip->get<bool>();
  }
  for (const auto& [key, value] : q->items()) {
    if (key == "quant_method" || key == "layout_version" || key == "attention" || key == "mlp" || key == "lm_head" ||
        key == "clip_search") {
      continue;
    }
    reader.fail("quantization_config." + key,
                "is not a key lazygraph writes, and it may change what the weights "
                "mean, so the checkpoint is refused rather than read without it");
  }
  if (!quantization.any()) {
    reader.fail("quantization_config", "quantizes nothing (attention, mlp and lm_head are all null)");
  }
  config.quantization = quantization;
}

/// bos_token_id and each eos_token_id must be a row of the embedding: an id at or past vocab_size could never be
/// sampled (an eos that never ends a generation) or embedded (a bos that fails every prompt).
void check_token_ids(const LlamaConfig& config, const ConfigReader& reader) {
  const auto check = [&](std::string_view key, int id) {
    if (id >= config.vocab_size) {
      reader.fail(key, "(" + std::to_string(id) + ") is not a token of the vocabulary: vocab_size is " +
                           std::to_string(config.vocab_size) + ", so token ids are 0 to " +
                           std::to_string(config.vocab_size - 1));
    }
  };
  if (config.bos_token_id.has_value()) check("bos_token_id", *config.bos_token_id);
  for (const int id : config.eos_token_ids) check("eos_token_id", id);
}

void check_shapes(const LlamaConfig& config, const ConfigReader& reader) {
  if (config.num_attention_heads % config.num_key_value_heads != 0) {
    reader.fail("num_key_value_heads", "(" + std::to_string(config.num_key_value_heads) +
                                           ") must divide num_attention_heads (" +
                                           std::to_string(config.num_attention_heads) + ")");
  }
  if (!config.head_dim.has_value() && config.hidden_size % config.num_attention_heads != 0) {
    reader.fail("num_attention_heads", "(" + std::to_string(config.num_attention_heads) +
                                           ") must divide hidden_size (" + std::to_string(config.hidden_size) +
                                           ") when head_dim is absent");
  }
}

/// A quantized format as read_format reads it; null for a dense class.
json format_json(const std::optional<QuantizedFormat>& format) {
  if (!format) return nullptr;
  const detail::StorageFormat* storage = detail::find_storage_format(format->kind);
  json out = {{"kind", storage != nullptr ? std::string(storage->name) : std::string("dense")}};
  if (storage != nullptr && !storage->scale_per_row()) out["group"] = format->group;
  if (storage != nullptr && storage->allows_asymmetric) out["asymmetric"] = format->asymmetric;
  out["scale_type"] = format->scale_type == ScaleType::bf16 ? "bfloat16" : "float16";
  return out;
}

}  // namespace

LlamaConfig LlamaConfig::parse(std::string_view json_text, const std::filesystem::path& source) {
  const json root = detail::parse_json_strict(json_text, source, "the config", false, detail::kMaxConfigValues);
  if (!root.is_object()) {
    throw CheckpointError(source, "", "the config must be a JSON object, found " + detail::describe_json(root));
  }
  const ConfigReader reader(root, source);
  LlamaConfig config;
  const detail::Architecture& architecture = read_architecture(config, reader);
  check_keys(reader, architecture);
  constexpr int kMaxWidth = 1 << 20;
  config.hidden_size = reader.positive_int("hidden_size", kMaxWidth);
  config.num_attention_heads = reader.positive_int("num_attention_heads", kMaxHeads);
  config.num_key_value_heads =
      reader.optional_positive_int("num_key_value_heads", kMaxHeads).value_or(config.num_attention_heads);
  config.num_hidden_layers = reader.positive_int("num_hidden_layers", kMaxLayers);
  config.intermediate_size = reader.positive_int("intermediate_size", kMaxWidth);
  config.vocab_size = reader.positive_int("vocab_size", kMaxVocab);
  config.max_position_embeddings =
      reader.optional_positive_int("max_position_embeddings", 1 << 24).value_or(config.max_position_embeddings);
  if (!architecture.reads_rope) read_rope(config, reader);
  config.rms_norm_eps = reader.float_number("rms_norm_eps", config.rms_norm_eps);
  config.torch_dtype = reader.string("torch_dtype", "");
  if (const std::string dtype = reader.string("dtype", ""); !dtype.empty()) {
    if (!config.torch_dtype.empty() && config.torch_dtype != dtype) {
      reader.fail("dtype", "('" + dtype + "') disagrees with torch_dtype ('" + config.torch_dtype + "')");
    }
    config.torch_dtype = dtype;
  }
  config.tie_word_embeddings = reader.boolean("tie_word_embeddings", config.tie_word_embeddings);
  config.hidden_act = reader.string("hidden_act", config.hidden_act);
  config.head_dim = reader.optional_positive_int("head_dim", 1024);
  if (reader.boolean("mlp_bias", false)) {
    reader.fail("mlp_bias", "is true: MLP biases are not implemented");
  }
  if (config.hidden_act != "silu") reader.fail("hidden_act '" + config.hidden_act + "' is not supported (only silu)");
  if (const std::vector<int> bos = reader.token_ids("bos_token_id"); !bos.empty()) {
    if (bos.size() != 1) reader.fail("bos_token_id", "must be one token id, found " + std::to_string(bos.size()));
    config.bos_token_id = bos.front();
  }
  config.eos_token_ids = reader.token_ids("eos_token_id");
  check_token_ids(config, reader);
  config.save_id = reader.string("lazygraph_save_id", "");
  architecture.read(reader, config);
  read_quantization(config, reader);
  check_shapes(config, reader);
  return config;
}

LlamaConfig LlamaConfig::load(const std::filesystem::path& file_or_dir) {
  std::error_code error;
  const fs::path file = fs::is_directory(file_or_dir, error) ? file_or_dir / "config.json" : file_or_dir;
  return parse(detail::read_text_file(file), file);
}

std::string LlamaConfig::to_json() const {
  const detail::Architecture* architecture = detail::find_architecture(model_type);
  json rope = {{"rope_type", rope_type_name(rope_scaling.type)}, {"rope_theta", rope_theta}};
  if (rope_scaling.type != RopeType::standard) rope["factor"] = rope_scaling.factor;
  if (rope_scaling.type == RopeType::llama3) {
    rope["low_freq_factor"] = rope_scaling.low_freq_factor;
    rope["high_freq_factor"] = rope_scaling.high_freq_factor;
    rope["original_max_position_embeddings"] = rope_scaling.original_max_position_embeddings;
  }
  json root = {
      {"model_type", model_type},
      {"hidden_size", hidden_size},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"num_hidden_layers", num_hidden_layers},
      {"intermediate_size", intermediate_size},
      {"vocab_size", vocab_size},
      {"max_position_embeddings", max_position_embeddings},
      {"rope_parameters", rope},
      {"rms_norm_eps", rms_norm_eps},
      {"tie_word_embeddings", tie_word_embeddings},
      {"hidden_act", hidden_act},
      {"attention_bias", attention_bias},
  };
  if (architecture != nullptr) {
    root["architectures"] = json::array({std::string(architecture->class_name)});
  }
  if (!torch_dtype.empty()) root["torch_dtype"] = torch_dtype;
  if (head_dim.has_value()) root["head_dim"] = *head_dim;
  if (sliding_window.has_value()) {
    root["sliding_window"] = *sliding_window;
    if (model_type != "mistral") root["use_sliding_window"] = true;
    if (!sliding_layers.empty()) {
      json types = json::array();
      for (const bool s : sliding_layers) types.push_back(s ? "sliding_attention" : "full_attention");
      root["layer_types"] = types;
    }
  }
  if (bos_token_id.has_value()) root["bos_token_id"] = *bos_token_id;
  if (eos_token_ids.size() == 1) root["eos_token_id"] = eos_token_ids[0];
  if (eos_token_ids.size() > 1) root["eos_token_id"] = eos_token_ids;
  if (!save_id.empty()) root["lazygraph_save_id"] = save_id;
  if (packed.has_value()) {
    root["quantization_config"] = detail::packed_config_json(*packed);
  } else if (quantization.has_value()) {
    root["quantization_config"] = {
        {"quant_method", "lazygraph"},
        {"layout_version", quantized_layout_version},
        {"attention", format_json(quantization->attention)},
        {"mlp", format_json(quantization->mlp)},
        {"lm_head", format_json(quantization->lm_head)},
        {"clip_search", quantization->options.clip_search},
    };
  }
  if (architecture != nullptr && architecture->write != nullptr) architecture->write(*this, root);
  return root.dump(2) + "\n";
}

}  // namespace lazygraph::nn
