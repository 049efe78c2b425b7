#pragma once
/// \file
/// Reading and writing safetensors checkpoint files on the host, for the lazygraph::nn layer.
///
/// A safetensors file is an 8-byte little-endian header length N, then N bytes of UTF-8 JSON, then the data
/// buffer. The JSON maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to
/// the data buffer) and may hold a "__metadata__" object of string to string. `SafetensorsFile` maps one file
/// read-only and checks its whole header when it opens, so every later access is in bounds; `Checkpoint` gives the
/// same lookups over a model folder that may be split into shards; `write_safetensors` writes a file.
/// Every malformed input is reported as a `CheckpointError` naming the file, the tensor and what was expected.
///
/// The readers are written for hostile files too: only regular files are read (a FIFO or a device in place of a
/// checkpoint file is refused at once, never waited on or read without end), the index is read up to 64 MiB,
/// every JSON text (header, index) is parsed in one pass, O(n log n) in its number of keys, and JSON nested deeper
/// than 64 levels of arrays and objects is refused while parsing (real files nest fewer than 5), as is a NUL byte
/// anywhere in the text. A header is read entry by entry, never held whole as JSON, and an entry of more than 65536
/// JSON values is refused as it is read (a tensor's entry holds 8 and one per dim), as is an index of more than
/// 2^20 values (LlamaConfig::load reads config.json the same way, up to 65536 values). Time and memory stay within
/// a small multiple of the size of the text read, which is bounded: 100 MB for a header, 64 MiB for an index,
/// 16 MiB for a config.json.
///
/// The writers never leave a file half written and never write through a symbolic link: each file is written under
/// a new temporary name (created with O_EXCL | O_NOFOLLOW), flushed to disk and renamed over its name.
/// write_safetensors_folder (and the saves built on it) make a model folder of several files whose mixes are
/// refused: see there.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <lazygraph/driver.hpp>
#include <lazygraph/driver/error.hpp>
#include <lazygraph/nn/checkpoint_error.hpp>

namespace lazygraph::nn {

/// The element types of the safetensors format that lazygraph reads and writes.
enum class DType {
  f16,      ///< "F16": IEEE binary16
  bf16,     ///< "BF16": bfloat16
  f32,      ///< "F32"
  f64,      ///< "F64"
  i8,       ///< "I8"
  i16,      ///< "I16"
  i32,      ///< "I32"
  i64,      ///< "I64"
  u8,       ///< "U8"
  boolean,  ///< "BOOL", one byte
  f8_e4m3   ///< "F8_E4M3": FP8, 1 sign, 4 exponent bits of bias 7, 3 mantissa bits (FP8 checkpoints' weights)
};

/// The size in bytes of one element of `dtype` (a boolean is one byte).
[[nodiscard]] std::size_t dtype_size(DType dtype) noexcept;

/// The name of `dtype` in safetensors headers: "F16", "BF16", "F32", "F64", "I8", "I16", "I32", "I64", "U8", "BOOL",
/// "F8_E4M3".
[[nodiscard]] std::string_view dtype_name(DType dtype) noexcept;

/// The DType named `name` (exactly as dtype_name spells it), or nullopt for any other name.
[[nodiscard]] std::optional<DType> dtype_from_name(std::string_view name) noexcept;

/// The DType named `name` (exactly as dtype_name spells it). Throws CheckpointError naming `file` and `tensor`
/// (either may be empty) and listing the known names when `name` is none of them.
[[nodiscard]] DType parse_dtype(std::string_view name, const std::filesystem::path& file = {},
                                const std::string& tensor = {});

/// Where one tensor lies in a safetensors file, and its type and shape.
struct TensorInfo {
  std::string name;                 ///< the tensor's name in the header
  DType dtype = DType::f32;         ///< its element type
  std::vector<std::int64_t> shape;  ///< its dimensions, each >= 0; empty for a scalar
  std::size_t offset = 0;           ///< where its bytes begin, counted from the start of the file
  std::size_t bytes = 0;            ///< its size in bytes: element_count() * dtype_size(dtype)

  /// The product of `shape` (1 for a scalar). For a TensorInfo that a SafetensorsFile made, it cannot overflow;
  /// for one built by hand, the caller must make sure it does not.
  [[nodiscard]] std::size_t element_count() const noexcept;
};

/// "[4096, 1024]": a shape as messages write it.
[[nodiscard]] std::string format_shape(std::span<const std::int64_t> shape);

/// One safetensors file, mapped read-only into memory for the object's lifetime. Move-only; a moved-from object
/// holds no file and no tensors (its lookups find nothing). Not thread-safe to move while another thread reads it;
/// concurrent const access is fine.
///
/// Precondition: the file must not shrink (be truncated, or rewritten in place shorter) while it is mapped. The
/// header is checked against the file's size when it opens, so a file that is already too short is refused; but
/// reading a tensor whose pages a later truncation cut off raises SIGBUS, which ends the process, and no check
/// here can prevent that. A file rewritten in place without shrinking may show the new bytes. Replacing a file by
/// renaming another over it, as write_safetensors does, is safe: the mapping keeps the old file.
class SafetensorsFile {
 public:
  /// Opens and maps `path` and validates the whole header. Throws CheckpointError when the file cannot be opened
  /// (the message holds strerror), is not a regular file ("is not a regular file (a FIFO)"; a FIFO is not waited
  /// on), or is not a well-formed safetensors file: shorter than 8 bytes, header length over 100 MB or past the
  /// end of the file, header not valid JSON (a NUL byte or a number out of a double's range included), nested
  /// deeper than 64 levels of arrays and objects ("the header nests deeper than 64 levels"), an entry of more than
  /// 65536 JSON values (refused as it is read, naming the tensor), not a JSON object,
  /// duplicate keys in any object, an entry without a string "dtype", an integer "shape" or a two-integer
  /// "data_offsets", an unknown dtype, a negative or non-integer dim, a shape whose byte size overflows,
  /// begin > end, an end past the file, a byte size other than product(shape) * dtype size, overlapping tensors,
  /// or a "__metadata__" that is not an object of strings.
  /// Gaps between tensors are allowed.
  [[nodiscard]] static SafetensorsFile open(const std::filesystem::path& path);

  /// Takes `other`'s mapping; `other` is left empty.
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  /// Unmaps this file and takes `other`'s mapping; `other` is left empty.
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  /// Unmaps the file; never throws.
  ~SafetensorsFile();

  /// The path the file was opened with.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// Every tensor of the file, in the order of their offsets in the file.
  [[nodiscard]] const std::vector<TensorInfo>& tensors() const noexcept { return tensors_; }
  /// The tensor named `name`, or nullptr when the file has none.
  [[nodiscard]] const TensorInfo* find(std::string_view name) const noexcept;
  /// The tensor named `name`. Throws CheckpointError naming the file and the tensor when there is none.
  [[nodiscard]] const TensorInfo& tensor(std::string_view name) const;
  /// The tensor named `name`, checked to have one of the `allowed` dtypes (any dtype when `allowed` is empty) and
  /// exactly `shape`. Throws CheckpointError when it is missing or differs, e.g. "file X: tensor Y: expected BF16
  /// or F16 [4096, 4096], found F32 [4096, 1024]".
  [[nodiscard]] const TensorInfo& require(std::string_view name, std::span<const DType> allowed,
                                          std::span<const std::int64_t> shape) const;
  /// The bytes of `info`, which must be one of this file's tensors() (else UsageError). The span is valid while
  /// this object lives and is not moved from; it is aligned only as the file's offsets make it (8-byte alignment
  /// of the data buffer start is not guaranteed by the format), so copy it out or read it byte-wise.
  [[nodiscard]] std::span<const std::byte> data(const TensorInfo& info) const;
  /// The "__metadata__" strings of the header (empty when it has none).
  [[nodiscard]] const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  /// The file's size in bytes.
  [[nodiscard]] std::size_t file_size() const noexcept { return size_; }

 private:
  SafetensorsFile() = default;
  void parse_header();
  void release() noexcept;

  std::filesystem::path path_;
  const std::byte* map_ = nullptr;
  std::size_t size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

/// The key under which lazygraph's saves record a save identifier, the same in every file one save writes: in each
/// safetensors file's "__metadata__", in the index's "metadata" and in config.json (LlamaConfig::save_id). Files of
/// one folder that carry different identifiers come from different saves, and the readers refuse them together.
inline constexpr std::string_view kSaveIdKey = "lazygraph_save_id";

/// A model's weights: one safetensors file, or a folder holding "model.safetensors", or a folder split into shards
/// listed by "model.safetensors.index.json". Lookups work across shards. Move-only.
class Checkpoint {
 public:
  /// Opens `dir_or_file`: a file is read as one safetensors file; a folder must hold "model.safetensors" (used
  /// when present) or "model.safetensors.index.json", whose "weight_map" maps each tensor name to its shard's
  /// file name in the same folder. Throws CheckpointError when the path does not exist, the folder has neither
  /// file, the index or a shard is not a regular file (a FIFO, a device, a folder), the index is larger than
  /// 64 MiB, is not JSON (with the same limits as a header: duplicate keys, a NUL byte or nesting deeper than 64
  /// levels are refused), holds more than 2^20 JSON values (a million tensors) or has no "weight_map" object of
  /// strings, a shard name is not a plain file name (empty,
  /// "." or "..", holding a '/' or a control character such as NUL), a shard is missing or malformed (see
  /// SafetensorsFile::open), a tensor of the index is absent from its shard, or a shard holds a tensor that the
  /// index does not map to it, the index's metadata holds a kSaveIdKey that is not a non-empty string, or a shard's
  /// "__metadata__" and the index's "metadata" both hold a kSaveIdKey and they differ (the files come from different
  /// saves: the message names the shard, the index and both identifiers). Every shard is mapped as a
  /// SafetensorsFile, with its precondition.
  [[nodiscard]] static Checkpoint open(const std::filesystem::path& dir_or_file);

  /// Takes the other's files; every TensorInfo keeps its address.
  Checkpoint(Checkpoint&&) noexcept = default;
  /// Takes the other's files; every TensorInfo keeps its address.
  Checkpoint& operator=(Checkpoint&&) noexcept = default;
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;
  ~Checkpoint() = default;

  /// The path given to open().
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// The file that errors about the checkpoint as a whole name: the index for a sharded folder, else the file.
  [[nodiscard]] const std::filesystem::path& description_file() const noexcept { return description_file_; }
  /// The safetensors files, one per shard, in the order of their names.
  [[nodiscard]] const std::vector<SafetensorsFile>& files() const noexcept { return files_; }
  /// The identifier of the lazygraph save that wrote the weights (kSaveIdKey in the index's "metadata", or in the
  /// single file's "__metadata__"); empty when there is none (files that transformers wrote, say).
  [[nodiscard]] const std::string& save_id() const noexcept { return save_id_; }
  /// The names of every tensor, sorted.
  [[nodiscard]] std::vector<std::string_view> names() const;
  /// The tensor named `name`, or nullptr when no shard has it.
  [[nodiscard]] const TensorInfo* find(std::string_view name) const noexcept;
  /// The tensor named `name`. Throws CheckpointError naming the checkpoint and the tensor when there is none.
  [[nodiscard]] const TensorInfo& tensor(std::string_view name) const;
  /// As SafetensorsFile::require, across shards; the error names the shard that holds the tensor.
  [[nodiscard]] const TensorInfo& require(std::string_view name, std::span<const DType> allowed,
                                          std::span<const std::int64_t> shape) const;
  /// The shard that holds `info`, which must be a tensor of this checkpoint (else UsageError).
  [[nodiscard]] const SafetensorsFile& file_of(const TensorInfo& info) const;
  /// The bytes of `info`, which must be a tensor of this checkpoint (else UsageError); see SafetensorsFile::data.
  [[nodiscard]] std::span<const std::byte> data(const TensorInfo& info) const;

 private:
  struct Location {
    std::size_t file;        // position in files_
    const TensorInfo* info;  // into files_[file].tensors(); stable, as moving a SafetensorsFile keeps its vector
  };

  Checkpoint() = default;
  static Checkpoint open_single(const std::filesystem::path& file, const std::filesystem::path& given);
  static Checkpoint open_sharded(const std::filesystem::path& index, const std::filesystem::path& given);

  std::filesystem::path path_;
  std::filesystem::path description_file_;
  std::string save_id_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, Location, std::less<>> tensors_;
};

/// One tensor for write_safetensors: its bytes are written as they are (the caller supplies them little-endian).
struct TensorToWrite {
  std::string name;                 ///< unique in the file, not "__metadata__"
  DType dtype = DType::f32;         ///< element type
  std::vector<std::int64_t> shape;  ///< dimensions, each >= 0; empty for a scalar
  std::span<const std::byte> data;  ///< exactly product(shape) * dtype_size(dtype) bytes
};

/// Writes `tensors` and `metadata` as the safetensors file `path`. The header JSON is padded with spaces to a
/// multiple of 8 bytes, so the data buffer starts 8-byte aligned; the tensors follow contiguously in the given order
/// (no padding between them, so a tensor is aligned only as far as the sizes before it make it). The file is
/// written under a new temporary name beside `path` ('.', its name, '.', 16 random hex digits, ".tmp"; created with
/// O_EXCL | O_NOFOLLOW, so that nothing planted under a name can redirect the write), flushed to disk, renamed over
/// `path` and the folder flushed, so a crash never leaves a half-written `path`. A symbolic link at `path` is replaced
/// by the new file; its target is left as it was. Throws CheckpointError (naming `path` and the tensor) when a name
/// repeats or is "__metadata__", a dim is negative, a data size differs from product(shape) * dtype size, a name or
/// metadata string is not valid UTF-8, the header would exceed the 100 MB that SafetensorsFile::open reads (before
/// anything is written), or creating, writing (a full disk: "No space left on device"), flushing or renaming fails
/// (with strerror); the temporary file is removed then and `path` is as it was.
void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// The most tensor bytes a shard of write_safetensors_folder holds by default: Hugging Face's "5GB".
inline constexpr std::size_t kDefaultShardBytes = 5'000'000'000;

/// Writes `tensors` as a model folder that Checkpoint::open (and Hugging Face's transformers) reads back, laid out as
/// save_pretrained lays one out: "model.safetensors" when their bytes fit `max_shard_bytes`, else shards, each of
/// consecutive tensors of at most max_shard_bytes of data (a larger tensor alone), and "model.safetensors.index.json"
/// mapping every tensor to its shard (with "metadata": {"total_size", kSaveIdKey}). A shard's name is unique to
/// the save: "model-00001-of-0000N-ID.safetensors", ID being the save id, 16 random hex digits that every file of the
/// save also records under kSaveIdKey (with `metadata`, in each file's "__metadata__").
///
/// No failure or crash at any point leaves a folder that loads silently mixed. Every file is first written under a
/// temporary name and flushed (write_safetensors); a failure there (a full disk) removes them all and leaves the
/// folder as it was. Then the shards are renamed to their new names, which no earlier file has, so the earlier
/// index and its shards stay whole; the folder is flushed; then the index is renamed over the earlier one: the one
/// step at which the folder's weights change from the earlier save's to this one's (for one file, renaming
/// model.safetensors over the earlier one is that step; where an earlier model.safetensors shadows the new index,
/// removing it below is). A config.json saved with the weights (save_quantized_checkpoint, save_seeded_checkpoint)
/// is renamed last, and the folder flushed: a crash between the two leaves weights and config.json of different
/// saves, which DecoderCheckpoint::open refuses by their save ids. Only then are the earlier save's files that would
/// change what Checkpoint::open reads removed (model.safetensors beside an index, an index beside a single file,
/// shards named model-NNNNN-of-NNNNN.safetensors or model-NNNNN-of-NNNNN-ID.safetensors that this save did not
/// write; a link is removed, never its target), with the temporary files that an interrupted save left (such a name
/// or config.json, with a '.' before it and ".HHHHHHHHHHHHHHHH.tmp" after it). Two saves into one folder at the same
/// time are not supported.
/// \throws UsageError for a max_shard_bytes of 0 or a `metadata` holding kSaveIdKey; CheckpointError for a tensor
///         name that repeats (before anything is written), as write_safetensors does, and naming a file that cannot
///         be written, renamed or removed.
void write_safetensors_folder(const std::filesystem::path& directory, std::span<const TensorToWrite> tensors,
                              std::size_t max_shard_bytes = kDefaultShardBytes,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace lazygraph::nn
