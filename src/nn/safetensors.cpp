#include <lazygraph/nn/safetensors.hpp>

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <limits>
#include <set>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "json_util.hpp"
#include "pending_safetensors.hpp"

namespace lazygraph::nn {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr std::size_t kLengthBytes = 8;               // the u64 header length before the JSON
constexpr std::uint64_t kMaxHeaderBytes = 100000000;  // 100 MB, as the reference implementation allows
constexpr std::string_view kMetadataKey = "__metadata__";
constexpr std::size_t kMaxIndexBytes = std::size_t{64} << 20U;  // 64 MiB; the largest real indexes are a few MB
// JSON values in one entry of a header (a tensor's takes 8 and one per dim; "__metadata__" one and one per key), and
// in an index (one per tensor, and a few): far above real files, low enough that a hostile text of a huge flat array
// or object is refused before it is built.
constexpr std::size_t kMaxEntryValues = std::size_t{1} << 16U;
constexpr std::size_t kMaxIndexValues = std::size_t{1} << 20U;

struct DTypeEntry {
  DType dtype;
  std::string_view name;
  std::size_t size;
};

constexpr std::array<DTypeEntry, 11> kDTypes = {{
    {DType::f16, "F16", 2},
    {DType::bf16, "BF16", 2},
    {DType::f32, "F32", 4},
    {DType::f64, "F64", 8},
    {DType::i8, "I8", 1},
    {DType::i16, "I16", 2},
    {DType::i32, "I32", 4},
    {DType::i64, "I64", 8},
    {DType::u8, "U8", 1},
    {DType::boolean, "BOOL", 1},
    {DType::f8_e4m3, "F8_E4M3", 1},
}};

const DTypeEntry& entry_of(DType dtype) noexcept {
  for (const DTypeEntry& entry : kDTypes) {
    if (entry.dtype == dtype) return entry;
  }
  return kDTypes[0];  // unreachable for a valid enumerator
}

std::string dtype_list() {
  std::string names;
  for (const DTypeEntry& entry : kDTypes) {
    if (!names.empty()) names += ", ";
    names += entry.name;
  }
  return names;
}

/// Bytes of `shape` elements of `element_size`, or nullopt when the count overflows size_t. A zero dim makes 0
/// even when the other dims alone would overflow.
std::optional<std::size_t> checked_byte_size(std::span<const std::int64_t> shape, std::size_t element_size) {
  if (std::any_of(shape.begin(), shape.end(), [](std::int64_t dim) { return dim == 0; })) return 0;
  std::size_t bytes = element_size;
  for (const std::int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    if (__builtin_mul_overflow(bytes, static_cast<std::size_t>(dim), &bytes)) return std::nullopt;
  }
  return bytes;
}

std::string format_offsets(std::uint64_t begin, std::uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

std::uint64_t read_le_u64(const std::byte* bytes) noexcept {
  std::uint64_t value = 0;
  for (std::size_t i = kLengthBytes; i-- > 0;) value = (value << 8U) | std::to_integer<std::uint64_t>(bytes[i]);
  return value;
}

std::array<char, kLengthBytes> le_u64_bytes(std::uint64_t value) noexcept {
  std::array<char, kLengthBytes> bytes{};
  for (char& byte : bytes) {
    byte = static_cast<char>(value & 0xffU);
    value >>= 8U;
  }
  return bytes;
}

/// What parsing one header entry needs to know about the file.
struct HeaderContext {
  const fs::path& file;
  std::size_t data_start;  // absolute offset of the data buffer
  std::size_t data_size;   // bytes from data_start to the end of the file
};

const json& member(const json& entry, std::string_view key, std::string_view expected, const HeaderContext& ctx,
                   const std::string& tensor) {
  const auto it = entry.find(key);
  if (it == entry.end()) {
    throw CheckpointError(ctx.file, tensor,
                          "the entry has no \"" + std::string(key) + "\" (expected " + std::string(expected) + ")");
  }
  return *it;
}

DType parse_entry_dtype(const json& entry, const HeaderContext& ctx, const std::string& tensor) {
  const json& value = member(entry, "dtype", "a string such as \"F32\"", ctx, tensor);
  if (!value.is_string()) {
    throw CheckpointError(ctx.file, tensor, "\"dtype\" must be a string, found " + detail::describe_json(value));
  }
  return parse_dtype(value.get_ref<const std::string&>(), ctx.file, tensor);
}

std::int64_t parse_dim(const json& dim, const HeaderContext& ctx, const std::string& tensor) {
  if (dim.is_number_unsigned()) {
    const auto value = dim.get<std::uint64_t>();
    if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      throw CheckpointError(ctx.file, tensor, "shape dim " + std::to_string(value) + " is larger than 2^63 - 1");
    }
    return static_cast<std::int64_t>(value);
  }
  if (dim.is_number_integer()) {
    throw CheckpointError(ctx.file, tensor,
                          "shape dims must be >= 0, found " + std::to_string(dim.get<std::int64_t>()));
  }
  throw CheckpointError(ctx.file, tensor,
                        "shape dims must be non-negative integers, found " + detail::describe_json(dim));
}

std::vector<std::int64_t> parse_entry_shape(const json& entry, const HeaderContext& ctx, const std::string& tensor) {
  const json& value = member(entry, "shape", "an array of non-negative integers", ctx, tensor);
  if (!value.is_array()) {
    throw CheckpointError(ctx.file, tensor,
                          "\"shape\" must be an array of non-negative integers, found " + detail::describe_json(value));
  }
  std::vector<std::int64_t> shape;
  shape.reserve(value.size());
  for (const json& dim : value) shape.push_back(parse_dim(dim, ctx, tensor));
  return shape;
}

std::pair<std::uint64_t, std::uint64_t> parse_entry_offsets(const json& entry, const HeaderContext& ctx,
                                                            const std::string& tensor) {
  const json& value = member(entry, "data_offsets", "[begin, end]", ctx, tensor);
  if (!value.is_array() || value.size() != 2 || !value[0].is_number_unsigned() || !value[1].is_number_unsigned()) {
    throw CheckpointError(
        ctx.file, tensor,
        "\"data_offsets\" must be [begin, end], two non-negative integers, found " + detail::describe_json(value));
  }
  return {value[0].get<std::uint64_t>(), value[1].get<std::uint64_t>()};
}

TensorInfo parse_entry(const std::string& name, const json& entry, const HeaderContext& ctx) {
  if (!entry.is_object()) {
    throw CheckpointError(
        ctx.file, name,
        "the entry must be an object {dtype, shape, data_offsets}, found " + detail::describe_json(entry));
  }
  TensorInfo info;
  info.name = name;
  info.dtype = parse_entry_dtype(entry, ctx, name);
  info.shape = parse_entry_shape(entry, ctx, name);
  const auto [begin, end] = parse_entry_offsets(entry, ctx, name);
  const std::string offsets = "data_offsets " + format_offsets(begin, end);
  if (begin > end) throw CheckpointError(ctx.file, name, offsets + ": begin is past end");
  if (end > ctx.data_size) {
    throw CheckpointError(ctx.file, name,
                          offsets + " end past the data buffer of " + std::to_string(ctx.data_size) +
                              " bytes (the file is truncated or the offsets are wrong)");
  }
  const std::optional<std::size_t> expected = checked_byte_size(info.shape, dtype_size(info.dtype));
  const std::string type_text = std::string(dtype_name(info.dtype)) + " " + format_shape(info.shape);
  if (!expected.has_value()) {
    throw CheckpointError(ctx.file, name, "the byte size of " + type_text + " overflows 64 bits");
  }
  if (*expected != end - begin) {
    throw CheckpointError(ctx.file, name,
                          "expected " + std::to_string(*expected) + " bytes for " + type_text + ", found " + offsets +
                              " = " + std::to_string(end - begin) + " bytes");
  }
  info.offset = ctx.data_start + begin;
  info.bytes = end - begin;
  return info;
}

std::map<std::string, std::string> parse_metadata(const json& value, const fs::path& file) {
  if (!value.is_object()) {
    throw CheckpointError(file, "",
                          "\"__metadata__\" must be an object of strings, found " + detail::describe_json(value));
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, text] : value.items()) {
    if (!text.is_string()) {
      throw CheckpointError(
          file, "",
          "\"__metadata__\" value of key '" + key + "' must be a string, found " + detail::describe_json(text));
    }
    metadata.emplace(key, text.get<std::string>());
  }
  return metadata;
}

/// Sorts `tensors` by offset and throws when two of them share a byte (empty tensors overlap nothing).
void sort_and_check_overlaps(std::vector<TensorInfo>& tensors, const fs::path& file, std::size_t data_start) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.offset, a.bytes, a.name) < std::tie(b.offset, b.bytes, b.name);
  });
  const TensorInfo* previous = nullptr;  // the non-empty tensor that ends last so far
  for (const TensorInfo& info : tensors) {
    if (info.bytes == 0) continue;
    if (previous != nullptr && info.offset < previous->offset + previous->bytes) {
      const auto range = [data_start](const TensorInfo& t) {
        return format_offsets(t.offset - data_start, t.offset - data_start + t.bytes);
      };
      throw CheckpointError(
          file, info.name,
          "data_offsets " + range(info) + " overlap those of tensor '" + previous->name + "' " + range(*previous));
    }
    previous = &info;
  }
}

}  // namespace

std::size_t dtype_size(DType dtype) noexcept { return entry_of(dtype).size; }

std::string_view dtype_name(DType dtype) noexcept { return entry_of(dtype).name; }

std::optional<DType> dtype_from_name(std::string_view name) noexcept {
  for (const DTypeEntry& entry : kDTypes) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

DType parse_dtype(std::string_view name, const std::filesystem::path& file, const std::string& tensor) {
  const std::optional<DType> dtype = dtype_from_name(name);
  if (!dtype.has_value()) {
    throw CheckpointError(file, tensor,
                          "unknown dtype \"" + std::string(name) + "\" (expected one of " + dtype_list() + ")");
  }
  return *dtype;
}

std::size_t TensorInfo::element_count() const noexcept {
  std::size_t count = 1;
  for (const std::int64_t dim : shape) count *= static_cast<std::size_t>(dim);
  return count;
}

std::string format_shape(std::span<const std::int64_t> shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

// ---------------------------------------------------------------------------------------------------------------
// SafetensorsFile

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile file;
  file.path_ = path;
  // Not a plain open(): a FIFO would block it forever, and only a regular file has a size to map.
  const auto [fd, size] = detail::open_regular_file(path);
  if (size < kLengthBytes) {
    throw CheckpointError(path, "",
                          "the file is " + std::to_string(size) +
                              " bytes, shorter than the 8-byte header length that starts a safetensors file");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (map == MAP_FAILED) throw CheckpointError(path, "", "cannot map: " + detail::errno_text(errno));
  file.map_ = static_cast<const std::byte*>(map);
  file.size_ = size;  // from here on, the destructor unmaps, also when the header below is rejected
  file.parse_header();
  return file;
}

void SafetensorsFile::parse_header() {
  const std::uint64_t header_bytes = read_le_u64(map_);
  if (header_bytes > kMaxHeaderBytes) {
    throw CheckpointError(path_, "",
                          "the header length is " + std::to_string(header_bytes) + " bytes, more than the " +
                              std::to_string(kMaxHeaderBytes) + " allowed (not a safetensors file?)");
  }
  if (header_bytes > size_ - kLengthBytes) {
    throw CheckpointError(path_, "",
                          "the header length is " + std::to_string(header_bytes) + " bytes but only " +
                              std::to_string(size_ - kLengthBytes) + " follow (the file is truncated)");
  }
  const std::string_view text(reinterpret_cast<const char*>(map_ + kLengthBytes), header_bytes);
  const HeaderContext ctx{path_, kLengthBytes + header_bytes, size_ - kLengthBytes - header_bytes};
  std::vector<TensorInfo> tensors;
  // Entry by entry: only the tensors' TensorInfo and one entry's JSON are ever held.
  const json top = detail::parse_json_members(text, path_, "the header", true, kMaxEntryValues,
                                              [&](const std::string& name, const json& entry) {
                                                if (name == kMetadataKey) {
                                                  metadata_ = parse_metadata(entry, path_);
                                                } else {
                                                  tensors.push_back(parse_entry(name, entry, ctx));
                                                }
                                              });
  if (!top.is_object()) {
    throw CheckpointError(path_, "", "the header must be a JSON object, found " + detail::describe_json(top));
  }
  sort_and_check_overlaps(tensors, path_, ctx.data_start);
  tensors_ = std::move(tensors);
  for (std::size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      tensors_(std::move(other.tensors_)),
      index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)) {
  other.tensors_.clear();
  other.index_.clear();
  other.metadata_.clear();
}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    size_ = std::exchange(other.size_, 0);
    tensors_ = std::move(other.tensors_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
    other.tensors_.clear();
    other.index_.clear();
    other.metadata_.clear();
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { release(); }

void SafetensorsFile::release() noexcept {
  if (map_ != nullptr) {
    ::munmap(const_cast<std::byte*>(map_), size_);  // NOLINT(cppcoreguidelines-pro-type-const-cast): mmap's API
    map_ = nullptr;
    size_ = 0;
  }
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const noexcept {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& SafetensorsFile::tensor(std::string_view name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) {
    throw CheckpointError(path_, std::string(name),
                          "no such tensor (the file has " + std::to_string(tensors_.size()) + " tensors)");
  }
  return *info;
}

namespace {
void check_required(const fs::path& file, const TensorInfo& info, std::span<const DType> allowed,
                    std::span<const std::int64_t> shape) {
  const bool dtype_ok = allowed.empty() || std::find(allowed.begin(), allowed.end(), info.dtype) != allowed.end();
  const bool shape_ok = std::equal(shape.begin(), shape.end(), info.shape.begin(), info.shape.end());
  if (dtype_ok && shape_ok) return;
  std::string expected;
  for (const DType dtype : allowed) {
    if (!expected.empty()) expected += " or ";
    expected += dtype_name(dtype);
  }
  if (expected.empty()) expected = "any dtype";
  throw CheckpointError(file, info.name,
                        "expected " + expected + " " + format_shape(shape) + ", found " +
                            std::string(dtype_name(info.dtype)) + " " + format_shape(info.shape));
}
}  // namespace

const TensorInfo& SafetensorsFile::require(std::string_view name, std::span<const DType> allowed,
                                           std::span<const std::int64_t> shape) const {
  const TensorInfo& info = tensor(name);
  check_required(path_, info, allowed, shape);
  return info;
}

std::span<const std::byte> SafetensorsFile::data(const TensorInfo& info) const {
  const std::less<const TensorInfo*> before;
  const TensorInfo* first = tensors_.data();
  const TensorInfo* last = first + tensors_.size();
  if (before(&info, first) || !before(&info, last)) {
    throw UsageError("SafetensorsFile::data: the TensorInfo of '" + info.name + "' is not one of the tensors of " +
                     path_.string());
  }
  return {map_ + info.offset, info.bytes};
}

// ---------------------------------------------------------------------------------------------------------------
// Checkpoint

Checkpoint Checkpoint::open(const std::filesystem::path& dir_or_file) {
  std::error_code error;
  const fs::file_status status = fs::status(dir_or_file, error);
  if (!fs::exists(status)) {
    throw CheckpointError(dir_or_file, "", "does not exist" + (error ? " (" + error.message() + ")" : std::string()));
  }
  if (!fs::is_directory(status)) return open_single(dir_or_file, dir_or_file);
  const fs::path single = dir_or_file / "model.safetensors";
  if (fs::exists(single, error)) return open_single(single, dir_or_file);
  const fs::path index = dir_or_file / "model.safetensors.index.json";
  if (fs::exists(index, error)) return open_sharded(index, dir_or_file);
  throw CheckpointError(dir_or_file, "", "the folder holds neither model.safetensors nor model.safetensors.index.json");
}

namespace {

/// The save identifier a safetensors file's metadata holds; empty when it holds none.
std::string save_id_of(const SafetensorsFile& file) {
  const auto it = file.metadata().find(std::string(kSaveIdKey));
  return it == file.metadata().end() ? std::string() : it->second;
}

}  // namespace

Checkpoint Checkpoint::open_single(const std::filesystem::path& file, const std::filesystem::path& given) {
  Checkpoint checkpoint;
  checkpoint.path_ = given;
  checkpoint.description_file_ = file;
  checkpoint.files_.push_back(SafetensorsFile::open(file));
  checkpoint.save_id_ = save_id_of(checkpoint.files_.front());
  for (const TensorInfo& info : checkpoint.files_.front().tensors()) {
    checkpoint.tensors_.emplace(info.name, Location{0, &info});
  }
  return checkpoint;
}

namespace {

/// Whether `name` names a file in the index's folder: not empty, not "." or "..", no '/' and no control character
/// (a NUL would cut the name short where the system reads it).
bool is_plain_file_name(std::string_view name) {
  if (name.empty() || name == "." || name == "..") return false;
  return std::none_of(name.begin(), name.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return c == '/' || byte < 0x20U || byte == 0x7fU;
  });
}

/// What an index says: shard file name -> tensor names, checked, and the save identifier of its metadata.
struct Index {
  std::map<std::string, std::vector<std::string>> shards;
  std::string save_id;  // empty when the index has none
};

/// The save identifier of the index's "metadata", when it holds one (checked to be a non-empty string).
std::string read_index_save_id(const json& root, const fs::path& index) {
  const auto metadata = root.find("metadata");
  if (metadata == root.end() || !metadata->is_object()) return {};
  const auto id = metadata->find(kSaveIdKey);
  if (id == metadata->end()) return {};
  if (!id->is_string() || id->get_ref<const std::string&>().empty()) {
    throw CheckpointError(index, "",
                          "the index's metadata." + std::string(kSaveIdKey) + " must be a non-empty string, found " +
                              detail::describe_json(*id));
  }
  return id->get<std::string>();
}

/// The index's weight_map and save identifier, checked.
Index read_index(const fs::path& index) {
  const json root = detail::parse_json_strict(detail::read_text_file(index, kMaxIndexBytes), index, "the index", false,
                                              kMaxIndexValues);
  if (!root.is_object()) {
    throw CheckpointError(index, "", "the index must be a JSON object, found " + detail::describe_json(root));
  }
  const auto it = root.find("weight_map");
  if (it == root.end() || !it->is_object()) {
    throw CheckpointError(index, "",
                          "the index must hold \"weight_map\", an object of tensor name -> shard file name, found " +
                              (it == root.end() ? std::string("none") : detail::describe_json(*it)));
  }
  if (it->empty()) throw CheckpointError(index, "", "the index's \"weight_map\" is empty");
  Index read{{}, read_index_save_id(root, index)};
  std::map<std::string, std::vector<std::string>>& shards = read.shards;
  for (const auto& [name, shard] : it->items()) {
    if (!shard.is_string()) {
      throw CheckpointError(index, name,
                            "the weight_map value must be a shard file name, found " + detail::describe_json(shard));
    }
    const auto& shard_name = shard.get_ref<const std::string&>();
    if (!is_plain_file_name(shard_name)) {
      throw CheckpointError(
          index, name,
          "the shard '" + detail::printable(shard_name) + "' is not a plain file name in the index's folder");
    }
    shards[shard_name].push_back(name);
  }
  return read;
}

/// "of save 3f9a...", or "of no lazygraph save" for an empty identifier.
std::string save_text(const std::string& id) {
  return id.empty() ? std::string("of no lazygraph save") : "of save " + detail::printable(id);
}

/// Throws when `file` lacks a tensor that the index maps to it, holds one that the index maps elsewhere, or carries
/// another save identifier than the index (when both carry one).
void check_shard(const fs::path& index, const std::string& index_save_id, const std::string& shard,
                 const SafetensorsFile& file, const std::vector<std::string>& names) {
  if (const std::string id = save_id_of(file); !id.empty() && !index_save_id.empty() && id != index_save_id) {
    throw CheckpointError(file.path(), "",
                          "the shard is " + save_text(id) + " (its __metadata__'s " + std::string(kSaveIdKey) +
                              ") but the index " + index.string() + " is " + save_text(index_save_id) +
                              ": the files come from different saves (a save into this folder was interrupted, or "
                              "files were copied between folders); save the checkpoint again");
  }
  for (const std::string& name : names) {
    if (file.find(name) == nullptr) {
      throw CheckpointError(index, name, "the index maps it to shard '" + shard + "', which has no such tensor");
    }
  }
  if (file.tensors().size() != names.size()) {
    const std::set<std::string_view> listed(names.begin(), names.end());
    for (const TensorInfo& info : file.tensors()) {
      if (listed.count(info.name) == 0) {
        throw CheckpointError(
            file.path(), info.name,
            "the shard holds this tensor but the index " + index.string() + " does not map it to this shard");
      }
    }
  }
}

}  // namespace

Checkpoint Checkpoint::open_sharded(const std::filesystem::path& index, const std::filesystem::path& given) {
  const Index read = read_index(index);
  const std::map<std::string, std::vector<std::string>>& shards = read.shards;
  Checkpoint checkpoint;
  checkpoint.path_ = given;
  checkpoint.description_file_ = index;
  checkpoint.save_id_ = read.save_id;
  checkpoint.files_.reserve(shards.size());
  for (const auto& [shard, names] : shards) {
    const fs::path shard_path = index.parent_path() / shard;
    std::error_code error;
    if (!fs::exists(shard_path, error)) {
      throw CheckpointError(index, "",
                            "the shard '" + shard + "' is missing: " + shard_path.string() + " does not exist");
    }
    SafetensorsFile file = SafetensorsFile::open(shard_path);
    check_shard(index, read.save_id, shard, file, names);
    checkpoint.files_.push_back(std::move(file));
  }
  for (std::size_t i = 0; i < checkpoint.files_.size(); ++i) {
    for (const TensorInfo& info : checkpoint.files_[i].tensors()) {
      checkpoint.tensors_.emplace(info.name, Location{i, &info});
    }
  }
  return checkpoint;
}

std::vector<std::string_view> Checkpoint::names() const {
  std::vector<std::string_view> names;
  names.reserve(tensors_.size());
  for (const auto& [name, location] : tensors_) names.emplace_back(name);
  return names;
}

const TensorInfo* Checkpoint::find(std::string_view name) const noexcept {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second.info;
}

const TensorInfo& Checkpoint::tensor(std::string_view name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) {
    throw CheckpointError(description_file_, std::string(name),
                          "no such tensor in the checkpoint (" + std::to_string(tensors_.size()) + " tensors in " +
                              std::to_string(files_.size()) + " file(s))");
  }
  return *info;
}

const TensorInfo& Checkpoint::require(std::string_view name, std::span<const DType> allowed,
                                      std::span<const std::int64_t> shape) const {
  const TensorInfo& info = tensor(name);
  check_required(file_of(info).path(), info, allowed, shape);
  return info;
}

const SafetensorsFile& Checkpoint::file_of(const TensorInfo& info) const {
  const auto it = tensors_.find(info.name);
  if (it == tensors_.end() || it->second.info != &info) {
    throw UsageError("Checkpoint::file_of: the TensorInfo of '" + info.name + "' is not one of the tensors of " +
                     path_.string());
  }
  return files_[it->second.file];
}

std::span<const std::byte> Checkpoint::data(const TensorInfo& info) const { return file_of(info).data(info); }

// ---------------------------------------------------------------------------------------------------------------
// Writer

namespace {

/// Throws the CheckpointError for a header of `bytes` (`at_least`: or more) that readers refuse.
[[noreturn]] void header_too_large(const fs::path& path, std::size_t bytes, bool at_least) {
  throw CheckpointError(path, "",
                        "the header would be " + std::string(at_least ? "at least " : "") + std::to_string(bytes) +
                            " bytes, more than the " + std::to_string(kMaxHeaderBytes) +
                            " that safetensors readers (this one included) accept: write fewer tensors, shorter "
                            "names or less metadata per file");
}

/// The header JSON for `tensors` laid out contiguously in order, padded with spaces to a multiple of 8 bytes.
/// \throws CheckpointError when it would be larger than kMaxHeaderBytes (before building it, when the names and
///         metadata alone are: each holds its strings and a few bytes more).
std::string build_header(const fs::path& path, std::span<const TensorToWrite> tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::size_t least = 2;                                                             // {}
  for (const auto& [key, value] : metadata) least += key.size() + value.size() + 5;  // "key":"value"
  for (const TensorToWrite& tensor : tensors) least += tensor.name.size() + 40;      // "name":{"dtype":"U8",...}
  if (least > kMaxHeaderBytes) header_too_large(path, least, true);
  json header = json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::set<std::string_view> seen;
  std::uint64_t offset = 0;
  for (const TensorToWrite& tensor : tensors) {
    if (tensor.name == kMetadataKey) {
      throw CheckpointError(path, tensor.name, "the name is reserved for the file's metadata");
    }
    if (!seen.insert(tensor.name).second) throw CheckpointError(path, tensor.name, "the name appears twice");
    const std::optional<std::size_t> bytes = checked_byte_size(tensor.shape, dtype_size(tensor.dtype));
    const std::string type_text = std::string(dtype_name(tensor.dtype)) + " " + format_shape(tensor.shape);
    if (!bytes.has_value()) {
      throw CheckpointError(path, tensor.name, "the shape " + type_text + " has a negative dim or overflows 64 bits");
    }
    if (*bytes != tensor.data.size()) {
      throw CheckpointError(path, tensor.name,
                            "expected " + std::to_string(*bytes) + " bytes of data for " + type_text + ", found " +
                                std::to_string(tensor.data.size()));
    }
    header[tensor.name] = {
        {"dtype", dtype_name(tensor.dtype)}, {"shape", tensor.shape}, {"data_offsets", {offset, offset + *bytes}}};
    offset += *bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    throw CheckpointError(path, "", std::string("a tensor name or metadata string is not valid UTF-8: ") + e.what());
  }
  text.append((kLengthBytes - text.size() % kLengthBytes) % kLengthBytes, ' ');
  if (text.size() > kMaxHeaderBytes) header_too_large(path, text.size(), false);
  return text;
}

}  // namespace

detail::PendingFile detail::write_pending_safetensors(const std::filesystem::path& path,
                                                      std::span<const TensorToWrite> tensors,
                                                      const std::map<std::string, std::string>& metadata) {
  const std::string header = build_header(path, tensors, metadata);
  PendingFile file(path);
  const std::array<char, kLengthBytes> length = le_u64_bytes(header.size());
  file.write(std::string_view(length.data(), length.size()));
  file.write(header);
  for (const TensorToWrite& tensor : tensors) file.write(tensor.data);
  file.finish();
  return file;
}

void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata) {
  detail::PendingFile file = detail::write_pending_safetensors(path, tensors, metadata);
  file.commit();
  detail::sync_folder(detail::folder_of(path));
}

}  // namespace lazygraph::nn
