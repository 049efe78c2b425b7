#include "json_reader.hpp"

#include "../json_util.hpp"
#include "../printable.hpp"

namespace lazygraph::nn::tokenizer {

nlohmann::json read_tokenizer_json(const std::filesystem::path& file, std::size_t max_bytes) {
  try {
    const std::string text = detail::read_text_file(file, max_bytes);
    return detail::parse_json_strict(text, file, "the tokenizer", false, kMaxTokenizerValues);
  } catch (const CheckpointError& e) {
    // CheckpointError's message is "file <file>: <problem>": keep the problem.
    std::string_view message = e.what();
    const std::string prefix = "file " + file.string() + ": ";
    if (message.starts_with(prefix)) message.remove_prefix(prefix.size());
    throw TokenizerError(file, message);
  }
}

TokenizerError JsonAt::error(std::string_view problem) const {
  return TokenizerError(*file_, (path_.empty() ? std::string("the top level") : path_) + ": " + std::string(problem));
}

std::string JsonAt::kind() const {
  switch (value_->type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    default:
      return "a number";
  }
}

const nlohmann::json::object_t& JsonAt::object() const {
  if (!value_->is_object()) throw error("is " + kind() + ", not an object");
  return value_->get_ref<const nlohmann::json::object_t&>();
}

std::optional<JsonAt> JsonAt::find(std::string_view key) const {
  const auto& members = object();
  const auto it = members.find(std::string(key));
  if (it == members.end() || it->second.is_null()) return std::nullopt;
  return JsonAt(it->second, *file_, path_.empty() ? std::string(key) : path_ + "." + std::string(key));
}

JsonAt JsonAt::at(std::string_view key) const {
  std::optional<JsonAt> member = find(key);
  if (!member.has_value()) throw error("has no member '" + std::string(key) + "'");
  return *member;
}

std::size_t JsonAt::array_size() const {
  if (!value_->is_array()) throw error("is " + kind() + ", not an array");
  return value_->size();
}

JsonAt JsonAt::at(std::size_t index) const {
  return {(*value_)[index], *file_, path_ + "[" + std::to_string(index) + "]"};
}

const std::string& JsonAt::string() const {
  if (!value_->is_string()) throw error("is " + kind() + ", not a string");
  return value_->get_ref<const std::string&>();
}

bool JsonAt::boolean() const {
  if (!value_->is_boolean()) throw error("is " + kind() + ", not true or false");
  return value_->get<bool>();
}

long long JsonAt::integer() const {
  if (!value_->is_number_integer()) throw error("is " + kind() + ", not an integer");
  return value_->get<long long>();
}

bool JsonAt::boolean(std::string_view key, bool fallback) const {
  const std::optional<JsonAt> member = find(key);
  return member.has_value() ? member->boolean() : fallback;
}

std::optional<std::string> JsonAt::string(std::string_view key) const {
  const std::optional<JsonAt> member = find(key);
  if (!member.has_value()) return std::nullopt;
  return member->string();
}

}  // namespace lazygraph::nn::tokenizer
