// read_rope_object (architecture.hpp): one RoPE object of config.json, for the shared reader and the architectures
// whose RoPE keys take another form.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "architecture.hpp"

namespace lazygraph::nn::detail {

RopeScaling read_rope_object(const ConfigReader& reader, const nlohmann::json& object, std::string_view key,
                             bool holds_theta) {
  using nlohmann::json;
  if (!object.is_object()) reader.fail(key, "must be an object, found " + describe_json(object));
  const auto field = [&](std::string_view name) -> const json* {
    const auto it = object.find(name);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  };
  const std::string where = std::string(key) + ".";
  std::string type = "default";
  for (const char* name : {"rope_type", "type"}) {
    if (const json* t = field(name); t != nullptr) {
      if (!t->is_string()) reader.fail(where + name, "must be a string, found " + describe_json(*t));
      if (type != "default" && t->get<std::string>() != type) reader.fail(where + name, "disagrees with rope_type");
      type = t->get<std::string>();
    }
  }
  RopeScaling rope;
  if (type == "linear") {
    rope.type = RopeType::linear;
  } else if (type == "llama3") {
    rope.type = RopeType::llama3;
  } else if (type != "default") {
    reader.fail(where + "rope_type", "'" + type + "' is not implemented (lazygraph implements default, linear and " +
                                         "llama3; yarn, dynamic, longrope and others change the arithmetic otherwise)");
  }
  const auto number = [&](const char* name) {
    const json* v = field(name);
    if (v == nullptr) reader.fail(where + name, "is missing (rope_type " + type + " needs it)");
    return reader.float_value(where + name, *v);
  };
  std::vector<std::string> used = {"rope_type", "type"};
  if (holds_theta) used.emplace_back("rope_theta");
  if (rope.type != RopeType::standard) {
    rope.factor = number("factor");
    used.emplace_back("factor");
  }
  if (rope.type == RopeType::llama3) {
    rope.low_freq_factor = number("low_freq_factor");
    rope.high_freq_factor = number("high_freq_factor");
    const json* original = field("original_max_position_embeddings");
    if (original == nullptr || !original->is_number_unsigned() || original->get<std::uint64_t>() == 0 ||
        original->get<std::uint64_t>() > (1U << 24U)) {
      reader.fail(where + "original_max_position_embeddings",
                  "must be a positive integer (at most 2^24) for rope_type llama3");
    }
    rope.original_max_position_embeddings = static_cast<int>(original->get<std::uint64_t>());
    used.insert(used.end(), {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
  }
  for (const auto& [name, value] : object.items()) {
    if (std::find(used.begin(), used.end(), name) != used.end() || value.is_null()) continue;
    // transformers writes partial_rotary_factor 1.0 for models that rotate every pair: the same arithmetic.
    if (name == "partial_rotary_factor" && value.is_number() && value.get<double>() == 1.0) continue;
    reader.fail(where + name, "is not used by rope_type " + type +
                                  " as lazygraph implements it, and may change "
                                  "what the model computes");
  }
  try {
    rope.validate();
  } catch (const UsageError& e) {
    reader.fail(key, e.what());
  }
  return rope;
}

}  // namespace lazygraph::nn::detail
