#include <lazygraph/nn/llama_config.hpp>

#include <limits>

#include <nlohmann/json.hpp>

#include "json_util.hpp"

namespace lazygraph::nn {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

/// Reads keys of one config.json object, naming the file and the key in every error.
class ConfigReader {
 public:
  ConfigReader(const json& root, const fs::path& source) : root_(root), source_(source) {}

  /// Throws "file <source>: <problem>".
  [[noreturn]] void fail(std::string_view problem) const { throw CheckpointError(source_, "", problem); }

  /// Throws "file <source>: key '<key>' <problem>".
  [[noreturn]] void fail(std::string_view key, std::string_view problem) const {
    fail("key '" + std::string(key) + "' " + std::string(problem));
  }

  /// The value of `key`, or nullptr when it is absent or null.
  [[nodiscard]] const json* get(std::string_view key) const {
    const auto it = root_.find(key);
    return it == root_.end() || it->is_null() ? nullptr : &*it;
  }

  [[nodiscard]] int positive_int(std::string_view key) const {
    const json* value = get(key);
    if (value == nullptr) fail(key, "is missing");
    return positive_int_value(key, *value);
  }

  [[nodiscard]] std::optional<int> optional_positive_int(std::string_view key) const {
    const json* value = get(key);
    if (value == nullptr) return std::nullopt;
    return positive_int_value(key, *value);
  }

  [[nodiscard]] double positive_number(std::string_view key, double fallback) const {
    const json* value = get(key);
    if (value == nullptr) return fallback;
    if (!value->is_number() || !(value->get<double>() > 0)) {
      fail(key, "must be a positive number, found " + detail::describe_json(*value));
    }
    return value->get<double>();
  }

  [[nodiscard]] std::string string(std::string_view key, std::string fallback) const {
    const json* value = get(key);
    if (value == nullptr) return fallback;
    if (!value->is_string()) fail(key, "must be a string, found " + detail::describe_json(*value));
    return value->get<std::string>();
  }

  [[nodiscard]] bool boolean(std::string_view key, bool fallback) const {
    const json* value = get(key);
    if (value == nullptr) return fallback;
    if (!value->is_boolean()) fail(key, "must be true or false, found " + detail::describe_json(*value));
    return value->get<bool>();
  }

 private:
  [[nodiscard]] int positive_int_value(std::string_view key, const json& value) const {
    if (value.is_number_unsigned() && value.get<std::uint64_t>() > 0 &&
        value.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<int>::max())) {
      return static_cast<int>(value.get<std::uint64_t>());
    }
    fail(key, "must be a positive integer, found " + detail::describe_json(value));
  }

  const json& root_;
  const fs::path& source_;
};

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

}  // namespace

LlamaConfig LlamaConfig::parse(std::string_view json_text, const std::filesystem::path& source) {
  const json root = detail::parse_json_strict(json_text, source, "the config", false);
  if (!root.is_object()) {
    throw CheckpointError(source, "", "the config must be a JSON object, found " + detail::describe_json(root));
  }
  const ConfigReader reader(root, source);
  LlamaConfig config;
  config.hidden_size = reader.positive_int("hidden_size");
  config.num_attention_heads = reader.positive_int("num_attention_heads");
  config.num_key_value_heads = reader.optional_positive_int("num_key_value_heads").value_or(config.num_attention_heads);
  config.num_hidden_layers = reader.positive_int("num_hidden_layers");
  config.intermediate_size = reader.positive_int("intermediate_size");
  config.vocab_size = reader.positive_int("vocab_size");
  config.max_position_embeddings =
      reader.optional_positive_int("max_position_embeddings").value_or(config.max_position_embeddings);
  config.rope_theta = reader.positive_number("rope_theta", config.rope_theta);
  config.rms_norm_eps = reader.positive_number("rms_norm_eps", config.rms_norm_eps);
  config.torch_dtype = reader.string("torch_dtype", "");
  config.tie_word_embeddings = reader.boolean("tie_word_embeddings", config.tie_word_embeddings);
  config.hidden_act = reader.string("hidden_act", config.hidden_act);
  config.head_dim = reader.optional_positive_int("head_dim");
  if (config.hidden_act != "silu") reader.fail("hidden_act '" + config.hidden_act + "' is not supported (only silu)");
  if (const json* scaling = reader.get("rope_scaling"); scaling != nullptr) {
    reader.fail("rope_scaling is not supported (found " + detail::describe_json(*scaling) + ")");
  }
  check_shapes(config, reader);
  return config;
}

LlamaConfig LlamaConfig::load(const std::filesystem::path& file_or_dir) {
  std::error_code error;
  const fs::path file = fs::is_directory(file_or_dir, error) ? file_or_dir / "config.json" : file_or_dir;
  return parse(detail::read_text_file(file), file);
}

std::string LlamaConfig::to_json() const {
  json root = {
      {"model_type", "llama"},
      {"architectures", json::array({"LlamaForCausalLM"})},
      {"hidden_size", hidden_size},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"num_hidden_layers", num_hidden_layers},
      {"intermediate_size", intermediate_size},
      {"vocab_size", vocab_size},
      {"max_position_embeddings", max_position_embeddings},
      {"rope_theta", rope_theta},
      {"rms_norm_eps", rms_norm_eps},
      {"tie_word_embeddings", tie_word_embeddings},
      {"hidden_act", hidden_act},
  };
  if (!torch_dtype.empty()) root["torch_dtype"] = torch_dtype;
  if (head_dim.has_value()) root["head_dim"] = *head_dim;
  return root.dump(2) + "\n";
}

}  // namespace lazygraph::nn
