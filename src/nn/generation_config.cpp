#include <lazygraph/nn/generation_config.hpp>

#include <cerrno>
#include <cstdint>
#include <span>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

#include "json_util.hpp"

namespace lazygraph::nn {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

/// The largest token id a file may name: config.json's largest vocab_size (config_json.cpp).
constexpr std::uint64_t kMaxTokenId = std::uint64_t{1} << 24U;
/// The most ids eos_token_id may list, as in config.json.
constexpr std::size_t kMaxTokenList = 1024;

[[noreturn]] void refuse_key(const fs::path& source, std::string_view key, std::string_view problem) {
  throw CheckpointError(source, "", "key '" + std::string(key) + "' " + std::string(problem));
}

/// The ids of `key`, whose value is not null: one id, or (when `list_allowed`) a list of them.
std::vector<int> read_token_ids(const json& value, const fs::path& source, std::string_view key, bool list_allowed) {
  const std::string expected = list_allowed ? "must be a token id or a list of them" : "must be one token id";
  std::vector<int> ids;
  const auto one = [&](const json& id) {
    if (!id.is_number_unsigned() || id.get<std::uint64_t>() > kMaxTokenId) {
      refuse_key(source, key, expected + ", found " + detail::describe_json(value));
    }
    ids.push_back(static_cast<int>(id.get<std::uint64_t>()));
  };
  if (value.is_array() && list_allowed) {
    if (value.size() > kMaxTokenList)
      refuse_key(source, key, "lists more than " + std::to_string(kMaxTokenList) + " tokens");
    for (const json& id : value) one(id);
  } else {
    one(value);
  }
  return ids;
}

/// Refuses an id of `key` (read from `source`) that the model's embedding has no row for.
void check_in_vocabulary(std::span<const int> ids, const fs::path& source, std::string_view key,
                         const LlamaConfig& model) {
  for (const int id : ids) {
    if (id >= model.vocab_size) {
      refuse_key(source, key,
                 "names token " + std::to_string(id) + ", outside the model's vocabulary (vocab_size " +
                     std::to_string(model.vocab_size) + " in config.json)");
    }
  }
}

}  // namespace

GenerationConfig GenerationConfig::parse(std::string_view json_text, const std::filesystem::path& source) {
  const json root =
      detail::parse_json_strict(json_text, source, "the generation config", false, detail::kMaxConfigValues);
  if (!root.is_object()) {
    throw CheckpointError(source, "",
                          "the generation config must be a JSON object, found " + detail::describe_json(root));
  }
  GenerationConfig config;
  config.source = source;
  if (const auto bos = root.find("bos_token_id"); bos != root.end()) {
    config.bos_token_id.emplace();
    if (!bos->is_null()) config.bos_token_id->emplace(read_token_ids(*bos, source, "bos_token_id", false).front());
  }
  if (const auto eos = root.find("eos_token_id"); eos != root.end()) {
    config.eos_token_ids.emplace();
    if (!eos->is_null()) *config.eos_token_ids = read_token_ids(*eos, source, "eos_token_id", true);
  }
  return config;
}

GenerationConfig GenerationConfig::load(const std::filesystem::path& file_or_dir) {
  std::error_code error;
  if (!fs::is_directory(file_or_dir, error)) return parse(detail::read_text_file(file_or_dir), file_or_dir);
  const fs::path file = file_or_dir / "generation_config.json";
  // Absent means absent: a link to nowhere, or a name that cannot be looked up, is reported by reading it.
  if (fs::symlink_status(file, error).type() == fs::file_type::not_found) return {};
  return parse(detail::read_text_file(file), file);
}

SpecialTokens GenerationConfig::special_tokens(const LlamaConfig& model) const {
  SpecialTokens tokens{model.bos_token_id, model.eos_token_ids};
  if (bos_token_id.has_value()) {
    tokens.bos = *bos_token_id;
    if (tokens.bos.has_value())
      check_in_vocabulary(std::span<const int>(&*tokens.bos, 1), source, "bos_token_id", model);
  }
  if (eos_token_ids.has_value()) {
    tokens.eos = *eos_token_ids;
    check_in_vocabulary(tokens.eos, source, "eos_token_id", model);
  }
  return tokens;
}

}  // namespace lazygraph::nn
