// write_safetensors_folder: a model folder of one safetensors file or of shards with their index (safetensors.hpp).
#include <lazygraph/nn/safetensors.hpp>

#include <cstdio>
#include <regex>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "json_util.hpp"

namespace lazygraph::nn {

namespace {

namespace fs = std::filesystem;

/// "model-00002-of-00005.safetensors": Hugging Face's shard names (save_pretrained).
std::string shard_name(std::size_t index, std::size_t count) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

/// Removes `path` if it is there. \throws CheckpointError naming it when it cannot be removed.
void remove_stale(const fs::path& path) {
  std::error_code error;
  fs::remove(path, error);
  if (error) throw CheckpointError(path, "", "cannot remove this file of an earlier save: " + error.message());
}

}  // namespace

void write_safetensors_folder(const std::filesystem::path& directory, std::span<const TensorToWrite> tensors,
                              std::size_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  if (max_shard_bytes == 0) throw UsageError("write_safetensors_folder: max_shard_bytes must be positive");
  std::set<std::string_view> names;
  for (const TensorToWrite& t : tensors) {
    if (!names.insert(t.name).second) {
      throw CheckpointError(directory, t.name, "the tensor name repeats (each tensor is written once)");
    }
  }
  // Consecutive tensors while they fit; a tensor larger than the limit alone.
  std::vector<std::vector<TensorToWrite>> shards(1);
  std::size_t bytes = 0;
  std::size_t total = 0;
  for (const TensorToWrite& t : tensors) {
    if (!shards.back().empty() && bytes + t.data.size() > max_shard_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().push_back(t);
    bytes += t.data.size();
    total += t.data.size();
  }
  std::error_code made;
  fs::create_directories(directory, made);
  if (made) throw CheckpointError(directory, "", "cannot create the folder: " + made.message());
  const fs::path single = directory / "model.safetensors";
  const fs::path index = directory / "model.safetensors.index.json";
  std::set<std::string> written;
  if (shards.size() == 1) {
    write_safetensors(single, shards[0], metadata);
    remove_stale(index);
  } else {
    nlohmann::ordered_json map = nlohmann::ordered_json::object();
    for (std::size_t s = 0; s < shards.size(); ++s) {
      const std::string name = shard_name(s, shards.size());
      write_safetensors(directory / name, shards[s], metadata);
      written.insert(name);
      for (const TensorToWrite& t : shards[s]) map[t.name] = name;
    }
    nlohmann::ordered_json root;
    root["metadata"] = {{"total_size", total}};
    root["weight_map"] = std::move(map);
    fs::path temporary = index;
    temporary += ".tmp";
    detail::write_text_file(temporary, root.dump(2) + "\n");
    if (std::rename(temporary.c_str(), index.c_str()) != 0) {
      const std::string why = detail::errno_text(errno);
      std::error_code ignored;
      fs::remove(temporary, ignored);
      throw CheckpointError(index, "", "cannot rename " + temporary.string() + " to it: " + why);
    }
    remove_stale(single);  // Checkpoint::open would read it instead of the index
  }
  // Shards of an earlier save that this one did not write.
  static const std::regex kShard(R"(model-\d{5}-of-\d{5}\.safetensors)");
  std::error_code listed;
  for (const fs::directory_entry& e : fs::directory_iterator(directory, listed)) {
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, kShard) && !written.contains(name)) remove_stale(e.path());
  }
  if (listed) throw CheckpointError(directory, "", "cannot list the folder: " + listed.message());
}

}  // namespace lazygraph::nn
