#pragma once
/// \file
/// Private helpers of src/nn: reading a small text file and parsing JSON strictly (syntax errors and duplicate
/// keys become CheckpointError naming the file). Not installed; only src/nn/*.cpp include it.

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include <lazygraph/nn/safetensors.hpp>

namespace lazygraph::nn::detail {

/// The text of errno's current value, e.g. "No such file or directory" (thread-safe, unlike strerror).
inline std::string errno_text(int error) { return std::error_code(error, std::generic_category()).message(); }

/// The whole content of `path`. Throws CheckpointError naming the file and strerror when it cannot be read.
inline std::string read_text_file(const std::filesystem::path& path) {
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (file == nullptr) throw CheckpointError(path, "", "cannot open: " + errno_text(errno));
  std::string text;
  char buffer[65536];
  std::size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) text.append(buffer, got);
  if (std::ferror(file.get()) != 0) throw CheckpointError(path, "", "cannot read: " + errno_text(errno));
  return text;
}

/// A JSON value as messages show it: its text (strings quoted), cut to about 60 characters.
inline std::string describe_json(const nlohmann::json& value) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  constexpr std::size_t kMax = 60;
  if (text.size() > kMax) text = text.substr(0, kMax) + "...";
  return text;
}

/// The JSON value of `text`. Throws CheckpointError naming `file` when `text` is not JSON (nlohmann's message
/// included) or an object repeats a key (naming the key; for a key of the top-level object, it is also reported
/// as the tensor when `keys_are_tensors`).
inline nlohmann::json parse_json_strict(std::string_view text, const std::filesystem::path& file, std::string_view what,
                                        bool keys_are_tensors) {
  std::vector<std::set<std::string>> open_objects;
  std::optional<std::string> duplicate;
  bool duplicate_at_top = false;
  const auto watch = [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) open_objects.emplace_back();
    if (event == Event::object_end && !open_objects.empty()) open_objects.pop_back();
    if (event == Event::key && !open_objects.empty() && !duplicate.has_value()) {
      std::string key = parsed.get<std::string>();
      if (!open_objects.back().insert(key).second) {
        duplicate_at_top = open_objects.size() == 1;
        duplicate = std::move(key);
      }
    }
    return true;
  };
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(text.begin(), text.end(), watch);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(file, "", std::string(what) + " is not valid JSON: " + e.what());
  }
  if (duplicate.has_value()) {
    if (duplicate_at_top && keys_are_tensors) {
      throw CheckpointError(file, *duplicate, "the name appears twice in " + std::string(what));
    }
    throw CheckpointError(file, "", std::string(what) + " has the key '" + *duplicate + "' twice in one object");
  }
  return value;
}

}  // namespace lazygraph::nn::detail
