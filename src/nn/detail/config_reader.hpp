#pragma once
/// \file
/// Private to src/nn: reading the keys of a config.json object with the file and the key named in every error. The
/// config reader (config_json.cpp) reads the keys every architecture shares with it; each architecture's file
/// (src/nn/architectures/) reads its own with it.

#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "../json_util.hpp"

namespace lazygraph::nn::detail {

inline constexpr int kMaxVocab = 1 << 24;  ///< the largest vocab_size (and token id) a config may name

/// Reads keys of one config.json object, naming the file and the key in every error.
class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& root, const std::filesystem::path& source) : root_(root), source_(source) {}

  /// Throws "file <source>: <problem>".
  [[noreturn]] void fail(std::string_view problem) const { throw CheckpointError(source_, "", problem); }

  /// Throws "file <source>: key '<key>' <problem>".
  [[noreturn]] void fail(std::string_view key, std::string_view problem) const {
    fail("key '" + std::string(key) + "' " + std::string(problem));
  }

  /// The value of `key`, or nullptr when it is absent or null.
  [[nodiscard]] const nlohmann::json* get(std::string_view key) const {
    const auto it = root_.find(key);
    return it == root_.end() || it->is_null() ? nullptr : &*it;
  }

  [[nodiscard]] int positive_int(std::string_view key, int most) const {
    const nlohmann::json* value = get(key);
    if (value == nullptr) fail(key, "is missing");
    return positive_int_value(key, *value, most);
  }

  [[nodiscard]] std::optional<int> optional_positive_int(std::string_view key, int most) const {
    const nlohmann::json* value = get(key);
    if (value == nullptr) return std::nullopt;
    return positive_int_value(key, *value, most);
  }

  /// A positive number that float holds as a normal finite value (the kernels compute in float).
  [[nodiscard]] double float_number(std::string_view key, double fallback) const {
    const nlohmann::json* value = get(key);
    if (value == nullptr) return fallback;
    return float_value(key, *value);
  }

  [[nodiscard]] double float_value(std::string_view key, const nlohmann::json& value) const {
    if (!value.is_number() || !(value.get<double>() > 0)) {
      fail(key, "must be a positive number, found " + describe_json(value));
    }
    const double x = value.get<double>();
    if (!(x >= std::numeric_limits<float>::min() && x <= std::numeric_limits<float>::max())) {
      fail(key, "(" + describe_json(value) + ") is outside the range of float (the kernels compute in float)");
    }
    return x;
  }

  [[nodiscard]] std::string string(std::string_view key, std::string fallback) const {
    const nlohmann::json* value = get(key);
    if (value == nullptr) return fallback;
    if (!value->is_string()) fail(key, "must be a string, found " + describe_json(*value));
    return value->get<std::string>();
  }

  [[nodiscard]] bool boolean(std::string_view key, bool fallback) const {
    const nlohmann::json* value = get(key);
    if (value == nullptr) return fallback;
    if (!value->is_boolean()) fail(key, "must be true or false, found " + describe_json(*value));
    return value->get<bool>();
  }

  /// A token id, or a list of them (eos_token_id may be either); empty when absent.
  [[nodiscard]] std::vector<int> token_ids(std::string_view key) const {
    const nlohmann::json* value = get(key);
    if (value == nullptr) return {};
    std::vector<int> ids;
    const auto one = [&](const nlohmann::json& id) {
      if (!id.is_number_unsigned() || id.get<std::uint64_t>() > static_cast<std::uint64_t>(kMaxVocab)) {
        fail(key, "must be a token id or a list of them, found " + describe_json(*value));
      }
      ids.push_back(static_cast<int>(id.get<std::uint64_t>()));
    };
    if (value->is_array()) {
      if (value->size() > 1024) fail(key, "lists more than 1024 tokens");
      for (const nlohmann::json& id : *value) one(id);
    } else {
      one(*value);
    }
    return ids;
  }

  [[nodiscard]] const nlohmann::json& root() const noexcept { return root_; }

 private:
  [[nodiscard]] int positive_int_value(std::string_view key, const nlohmann::json& value, int most) const {
    if (value.is_number_unsigned() && value.get<std::uint64_t>() > 0 &&
        value.get<std::uint64_t>() <= static_cast<std::uint64_t>(most)) {
      return static_cast<int>(value.get<std::uint64_t>());
    }
    if (value.is_number_unsigned() && value.get<std::uint64_t>() > 0) {
      fail(key, "(" + describe_json(value) + ") is larger than lazygraph reads (at most " + std::to_string(most) + ")");
    }
    fail(key, "must be a positive integer, found " + describe_json(value));
  }

  const nlohmann::json& root_;
  const std::filesystem::path& source_;
};

}  // namespace lazygraph::nn::detail
