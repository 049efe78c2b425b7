#pragma once
/// \file
/// Private to src/nn: reading the keys of a checkpoint method's quantization_config, each named
/// "quantization_config.<key>" in the errors (the methods' files, packed_method.hpp, read their keys with it).

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "../detail/config_reader.hpp"

namespace lazygraph::nn::detail {

/// `s` in lower case (ASCII).
inline std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

/// Reads keys of quantization_config, naming them "quantization_config.<key>".
class QuantizationKeys {
 public:
  QuantizationKeys(const nlohmann::json& q, const ConfigReader& reader, std::string method)
      : q_(q), reader_(reader), method_(std::move(method)) {}

  [[noreturn]] void fail(std::string_view key, const std::string& why) const {
    reader_.fail("quantization_config." + std::string(key), why);
  }
  [[nodiscard]] const nlohmann::json* get(std::string_view key) const {
    const auto it = q_.find(key);
    return it == q_.end() || it->is_null() ? nullptr : &*it;
  }
  [[nodiscard]] std::string found(const nlohmann::json* value) const {
    return value == nullptr ? "nothing" : describe_json(*value);
  }
  /// A boolean key, `fallback` when absent.
  [[nodiscard]] bool boolean(std::string_view key, bool fallback) const {
    const nlohmann::json* value = get(key);
    if (value == nullptr) return fallback;
    if (!value->is_boolean()) fail(key, "must be true or false, found " + describe_json(*value));
    return value->get<bool>();
  }
  /// A string key, lower-cased; `fallback` when absent.
  [[nodiscard]] std::string text(std::string_view key, const std::string& fallback) const {
    const nlohmann::json* value = get(key);
    if (value == nullptr) return fallback;
    if (!value->is_string()) fail(key, "must be a string, found " + describe_json(*value));
    return lower(value->get<std::string>());
  }
  /// bits, which must be 4.
  void four_bits() const {
    const nlohmann::json* bits = get("bits");
    if (bits == nullptr || !bits->is_number_integer() || bits->get<std::int64_t>() != 4) {
      fail("bits",
           "is " + found(bits) + ": lazygraph reads " + method_ +
               " checkpoints of 4 bits only (the int4 layout its kernels read); 3- and 8-bit ones are not read");
    }
  }
  /// group_size: 32, 64 or 128.
  [[nodiscard]] int group() const {
    const nlohmann::json* group = get("group_size");
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
    const nlohmann::json* list = get(key);
    if (list == nullptr) return out;
    if (!list->is_array() ||
        !std::all_of(list->begin(), list->end(), [](const nlohmann::json& m) { return m.is_string(); })) {
      fail(key, "must be a list of module names or null, found " + describe_json(*list));
    }
    for (const nlohmann::json& m : *list) out.push_back(m.get<std::string>());
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
  const nlohmann::json& q_;
  const ConfigReader& reader_;
  std::string method_;
};

/// A [128, 128] block size (weight_block_size, block_structure); refuses any other, naming `key`.
inline void require_blocks_of_128(const QuantizationKeys& keys, std::string_view key, const nlohmann::json* blocks) {
  const bool ok = blocks != nullptr && blocks->is_array() && blocks->size() == 2 &&
                  std::all_of(blocks->begin(), blocks->end(), [](const nlohmann::json& b) {
                    return b.is_number_integer() && b.get<std::int64_t>() == 128;
                  });
  if (!ok) {
    keys.fail(key, "is " + keys.found(blocks) +
                       ": lazygraph reads FP8 blocks of [128, 128] only (one scale per 128 outputs and 128 inputs)");
  }
}

}  // namespace lazygraph::nn::detail
