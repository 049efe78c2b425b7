// write_safetensors_folder: a model folder of one safetensors file or of shards with their index (safetensors.hpp),
// and save_model_folder, which also writes config.json (model_folder.hpp). The order of the steps, and why no crash
// leaves the folder silently mixed, is written at write_safetensors_folder.
#include <lazygraph/nn/safetensors.hpp>

#include <cstdio>
#include <regex>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "json_util.hpp"
#include "model_folder.hpp"

namespace lazygraph::nn {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kSingleName = "model.safetensors";
constexpr std::string_view kIndexName = "model.safetensors.index.json";
constexpr std::string_view kConfigName = "config.json";

/// "model-00002-of-00005-<save id>.safetensors": Hugging Face's shard names (save_pretrained), made unique to the save.
std::string shard_name(std::size_t index, std::size_t count, const std::string& save_id) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu-", index + 1, count);
  return name + save_id + ".safetensors";
}

/// Whether `name` is a shard name of this writer (with or without a save id) or of save_pretrained.
bool is_shard_name(const std::string& name) {
  static const std::regex kShard(R"(model-\d{5}-of-\d{5}(-[0-9a-f]{16})?\.safetensors)");
  return std::regex_match(name, kShard);
}

/// Whether `name` is the temporary file of an interrupted save of a file named like those this writer writes.
bool is_stale_temporary(const std::string& name) {
  if (!name.starts_with('.') || !name.ends_with(".tmp")) return false;
  for (const std::string_view target : {kSingleName, kIndexName, kConfigName}) {
    if (detail::is_temporary_of(name, target)) return true;
  }
  // ".<shard name>.<16 hex>.tmp": the shard name is what lies between the first '.' and the last two.
  const std::size_t end = name.size() - std::string_view(".0123456789abcdef.tmp").size();
  return end > 1 && is_shard_name(name.substr(1, end - 1)) && detail::is_temporary_of(name, name.substr(1, end - 1));
}

/// Removes `path` if it is there (a link is removed, never followed).
/// \throws CheckpointError naming it when it cannot be removed.
void remove_stale(const fs::path& path) {
  std::error_code error;
  fs::remove(path, error);
  if (error) throw CheckpointError(path, "", "cannot remove this file of an earlier save: " + error.message());
}

/// Consecutive tensors while they fit `max_shard_bytes`; a tensor larger than the limit alone.
std::vector<std::vector<TensorToWrite>> plan_shards(std::span<const TensorToWrite> tensors,
                                                    std::size_t max_shard_bytes) {
  std::vector<std::vector<TensorToWrite>> shards(1);
  std::size_t bytes = 0;
  for (const TensorToWrite& t : tensors) {
    if (!shards.back().empty() && bytes + t.data.size() > max_shard_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().push_back(t);
    bytes += t.data.size();
  }
  return shards;
}

/// Removes what an earlier save left that would change what Checkpoint::open reads, or that only takes room: the
/// file of the other layout, shards not in `written`, temporary files of interrupted saves. The folder is not flushed
/// after: a removal a crash undoes brings back a file that nothing this save wrote refers to (an index that
/// model.safetensors shadows, a shard that the index does not name).
void remove_earlier_files(const fs::path& directory, bool sharded, const std::set<std::string>& written) {
  remove_stale(directory / (sharded ? kSingleName : kIndexName));
  std::error_code listed;
  std::vector<fs::path> stale;
  for (const fs::directory_entry& e : fs::directory_iterator(directory, listed)) {
    const std::string name = e.path().filename().string();
    if ((is_shard_name(name) && !written.contains(name)) || is_stale_temporary(name)) stale.push_back(e.path());
  }
  if (listed) throw CheckpointError(directory, "", "cannot list the folder: " + listed.message());
  for (const fs::path& path : stale) remove_stale(path);
}

}  // namespace

std::string detail::new_save_id() { return random_hex16(); }

void detail::save_model_folder(const std::filesystem::path& directory, std::span<const TensorToWrite> tensors,
                               std::size_t max_shard_bytes, std::map<std::string, std::string> metadata,
                               const std::string& save_id, const std::optional<std::string>& config_json) {
  if (max_shard_bytes == 0) throw UsageError("write_safetensors_folder: max_shard_bytes must be positive");
  if (metadata.contains(std::string(kSaveIdKey))) {
    throw UsageError("write_safetensors_folder: the metadata holds \"" + std::string(kSaveIdKey) +
                     "\", which the save writes itself");
  }
  std::set<std::string_view> names;
  for (const TensorToWrite& t : tensors) {
    if (!names.insert(t.name).second) {
      throw CheckpointError(directory, t.name, "the tensor name repeats (each tensor is written once)");
    }
  }
  const std::vector<std::vector<TensorToWrite>> shards = plan_shards(tensors, max_shard_bytes);
  std::error_code made;
  fs::create_directories(directory, made);
  if (made) throw CheckpointError(directory, "", "cannot create the folder: " + made.message());
  metadata.emplace(kSaveIdKey, save_id);

  // 1. Every file under a temporary name, flushed; a failure removes them all (~PendingFile) and changes nothing.
  std::vector<PendingFile> shard_files;  // with the index last when sharded
  std::set<std::string> written;
  if (shards.size() == 1) {
    shard_files.push_back(write_pending_safetensors(directory / kSingleName, shards[0], metadata));
  } else {
    nlohmann::ordered_json map = nlohmann::ordered_json::object();
    std::size_t total = 0;
    for (std::size_t s = 0; s < shards.size(); ++s) {
      const std::string name = shard_name(s, shards.size(), save_id);
      shard_files.push_back(write_pending_safetensors(directory / name, shards[s], metadata));
      written.insert(name);
      for (const TensorToWrite& t : shards[s]) {
        map[t.name] = name;
        total += t.data.size();
      }
    }
    nlohmann::ordered_json root;
    root["metadata"] = {{"total_size", total}, {kSaveIdKey, save_id}};
    root["weight_map"] = std::move(map);
    PendingFile& index = shard_files.emplace_back(directory / kIndexName);
    index.write(root.dump(2) + "\n");
    index.finish();
  }
  std::optional<PendingFile> config;
  if (config_json.has_value()) {
    config.emplace(directory / kConfigName);
    config->write(*config_json);
    config->finish();
  }

  // 2. The new shards under their new names (the earlier save's files untouched), flushed; then the index (or
  //    model.safetensors): the weights change from the earlier save's to this one's; then config.json.
  if (shards.size() > 1) {
    for (std::size_t s = 0; s + 1 < shard_files.size(); ++s) shard_files[s].commit();
    sync_folder(directory);
  }
  shard_files.back().commit();
  if (config.has_value()) config->commit();
  sync_folder(directory);

  // 3. What the earlier save left.
  remove_earlier_files(directory, shards.size() > 1, written);
}

void write_safetensors_folder(const std::filesystem::path& directory, std::span<const TensorToWrite> tensors,
                              std::size_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  detail::save_model_folder(directory, tensors, max_shard_bytes, metadata, detail::new_save_id(), std::nullopt);
}

}  // namespace lazygraph::nn
