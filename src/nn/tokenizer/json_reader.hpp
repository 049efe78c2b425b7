#pragma once
/// \file
/// Reading tokenizer.json: the file through the limits config.json has (a regular file, a size cap checked before
/// reading, strict JSON: no duplicate keys, bounded nesting and value count), and its values through a view that
/// knows its key path, so that every refusal names the file and the key ("model.merges[3]").

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <lazygraph/nn/tokenizer.hpp>

namespace lazygraph::nn::tokenizer {

/// The most JSON values a tokenizer.json may hold: 2^24 (Llama 3's holds about 1.1 million: a vocabulary of 128k
/// and 280k merges of three values each), bounding what a hostile file can make the parser build.
inline constexpr std::size_t kMaxTokenizerValues = std::size_t{1} << 24U;

/// The JSON value of `file`. \throws TokenizerError naming the file: unreadable, not a regular file, over
/// `max_bytes` (before reading), not JSON, nested deeper than 64 levels, a key twice in one object, too many values.
[[nodiscard]] nlohmann::json read_tokenizer_json(const std::filesystem::path& file, std::size_t max_bytes);

/// A value of a tokenizer.json and where it is: the file and the key path from the top ("" for the top level).
class JsonAt {
 public:
  JsonAt(const nlohmann::json& value, const std::filesystem::path& file, std::string path)
      : value_(&value), file_(&file), path_(std::move(path)) {}

  [[nodiscard]] const nlohmann::json& value() const noexcept { return *value_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] const std::filesystem::path& file() const noexcept { return *file_; }
  [[nodiscard]] bool is_null() const noexcept { return value_->is_null(); }

  /// A TokenizerError "<file>: <path>: <problem>".
  [[nodiscard]] TokenizerError error(std::string_view problem) const;
  /// The member `key` of this object. \throws TokenizerError when this is not an object or has no such member.
  [[nodiscard]] JsonAt at(std::string_view key) const;
  /// The member `key`, or nullopt when it is missing or null. \throws TokenizerError when this is not an object.
  [[nodiscard]] std::optional<JsonAt> find(std::string_view key) const;
  /// Element `index` of this array.
  [[nodiscard]] JsonAt at(std::size_t index) const;
  /// This array's size. \throws TokenizerError when this is not an array.
  [[nodiscard]] std::size_t array_size() const;
  /// This object's members (this checked to be an object).
  [[nodiscard]] const nlohmann::json::object_t& object() const;

  /// This value as a string / boolean / integer. \throws TokenizerError naming what it is instead.
  [[nodiscard]] const std::string& string() const;
  [[nodiscard]] bool boolean() const;
  [[nodiscard]] long long integer() const;
  /// The member `key` as a boolean, `fallback` when missing or null.
  [[nodiscard]] bool boolean(std::string_view key, bool fallback) const;
  /// The member `key` as a string, nullopt when missing or null.
  [[nodiscard]] std::optional<std::string> string(std::string_view key) const;
  /// The member "type", which every component of a tokenizer.json has.
  [[nodiscard]] const std::string& type() const { return at("type").string(); }

 private:
  [[nodiscard]] std::string kind() const;
  const nlohmann::json* value_;
  const std::filesystem::path* file_;
  std::string path_;
};

}  // namespace lazygraph::nn::tokenizer
