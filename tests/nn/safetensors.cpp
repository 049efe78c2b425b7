// Host tests of lazygraph::nn's safetensors reader and writer: round trips, a hand-made file, one test per kind
// of malformed input, Checkpoint over single files and sharded folders, and hostile input (deep nesting, FIFOs,
// devices, size limits, NUL bytes, huge headers), config.json included as LlamaConfig reads it with the same helpers.
#include <doctest/doctest.h>

#include "common/files.hpp"
#include "common/rewrite_safetensors.hpp"
#include "common/temp_dir.hpp"

#include <lazygraph/nn/llama_config.hpp>
#include <lazygraph/nn/safetensors.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

using namespace lazygraph::nn;
namespace fs = std::filesystem;

namespace {

std::mt19937 make_rng() {
  std::random_device seed;
  return std::mt19937(seed());
}

/// Every test here writes into its own folder.
struct SafetensorsDir : lgtest::TempDir {
  SafetensorsDir() : lgtest::TempDir("nn-st") {}
};

/// `size` random bytes, never all zero (a read of zeroed memory must not pass for a correct read).
std::vector<std::byte> random_bytes(std::mt19937& rng, std::size_t size) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<std::byte> bytes(size);
  for (std::byte& b : bytes) b = static_cast<std::byte>(byte(rng));
  if (size > 0 && std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; })) {
    bytes[0] = std::byte{1};
  }
  return bytes;
}

using lgtest::le64;
using lgtest::read_file;
using lgtest::write_file;

/// A safetensors file made by hand: the length of `header`, `header`, then `data_bytes` bytes of 0x5a.
std::string raw_safetensors(const std::string& header, std::size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\x5a');
}

/// The CheckpointError that `action` throws; fails the test when it throws nothing or another type.
template <class Action>
CheckpointError checkpoint_error_of(Action&& action) {
  try {
    action();
  } catch (const CheckpointError& e) {
    return e;
  } catch (const std::exception& e) {
    FAIL("expected a CheckpointError, got another exception: " << e.what());
  }
  FAIL("expected a CheckpointError, nothing was thrown");
  throw std::logic_error("unreachable");
}

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

/// Checks that `error` names `file`, `tensor` (none when empty) and holds `fragment`.
void check_error(const CheckpointError& error, const fs::path& file, const std::string& tensor,
                 std::string_view fragment) {
  INFO("message: " << std::string(error.what()));
  CHECK(error.file() == file);
  CHECK(error.tensor() == tensor);
  CHECK(contains(error.what(), "file " + file.string()));
  if (!tensor.empty()) CHECK(contains(error.what(), "tensor " + tensor + ":"));
  CHECK(contains(error.what(), fragment));
}

/// Writes `bytes` as a file and checks that SafetensorsFile::open refuses it naming the file, `tensor` and
/// `fragment`.
void check_refused(const std::string& bytes, const std::string& tensor, std::string_view fragment) {
  const SafetensorsDir dir;
  const fs::path file = dir / "bad.safetensors";
  write_file(file, bytes);
  const CheckpointError error = checkpoint_error_of([&] { (void)SafetensorsFile::open(file); });
  check_error(error, file, tensor, fragment);
}

/// A header holding one entry `name` -> `entry` (raw JSON text).
std::string one_entry(const std::string& name, const std::string& entry) { return "{\"" + name + "\":" + entry + "}"; }

using lgtest::OwnedTensor;

OwnedTensor random_tensor(std::mt19937& rng, std::string name, DType dtype, std::vector<std::int64_t> shape) {
  std::size_t count = 1;
  for (const std::int64_t dim : shape) count *= static_cast<std::size_t>(dim);
  OwnedTensor tensor{std::move(name), dtype, std::move(shape), {}};
  tensor.bytes = random_bytes(rng, count * dtype_size(dtype));
  return tensor;
}

std::vector<TensorToWrite> views(const std::vector<OwnedTensor>& tensors) {
  std::vector<TensorToWrite> out;
  for (const OwnedTensor& t : tensors) out.push_back({t.name, t.dtype, t.shape, t.bytes});
  return out;
}

void check_same(const SafetensorsFile& file, const OwnedTensor& expected) {
  INFO("tensor " << expected.name);
  const TensorInfo* info = file.find(expected.name);
  REQUIRE(info != nullptr);
  CHECK(info->dtype == expected.dtype);
  CHECK(info->shape == expected.shape);
  CHECK(info->bytes == expected.bytes.size());
  const std::span<const std::byte> data = file.data(*info);
  CHECK(std::equal(data.begin(), data.end(), expected.bytes.begin(), expected.bytes.end()));
}

const std::vector<DType> kAllDTypes = {DType::f16, DType::bf16, DType::f32, DType::f64,     DType::i8,     DType::i16,
                                       DType::i32, DType::i64,  DType::u8,  DType::boolean, DType::f8_e4m3};

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// DType and bf16

TEST_CASE("dtype names and sizes match the safetensors format, and names parse back") {
  CHECK(dtype_name(DType::bf16) == "BF16");
  CHECK(dtype_name(DType::boolean) == "BOOL");
  CHECK(dtype_size(DType::f16) == 2);
  CHECK(dtype_size(DType::f64) == 8);
  CHECK(dtype_size(DType::boolean) == 1);
  for (const DType dtype : kAllDTypes) CHECK(dtype_from_name(dtype_name(dtype)) == dtype);
  CHECK(dtype_from_name("F8_E4M3") == DType::f8_e4m3);
  CHECK(dtype_size(DType::f8_e4m3) == 1);
  CHECK_FALSE(dtype_from_name("F8_E5M2").has_value());
  CHECK_FALSE(dtype_from_name("f32").has_value());
  CHECK(parse_dtype("I16") == DType::i16);
  check_error(checkpoint_error_of([] { (void)parse_dtype("F8_E5M2", "m.safetensors", "w"); }), "m.safetensors", "w",
              "unknown dtype \"F8_E5M2\" (expected one of F16, BF16");
}

// ---------------------------------------------------------------------------------------------------------------
// Round trips

TEST_CASE("write_safetensors then SafetensorsFile::open round-trips every dtype and several shapes") {
  std::mt19937 rng = make_rng();
  const std::vector<std::vector<std::int64_t>> shapes = {{}, {7}, {3, 5}, {2, 3, 4}, {1, 1, 1, 1}, {0}, {4, 0, 2}};
  std::vector<OwnedTensor> tensors;
  for (std::size_t i = 0; i < kAllDTypes.size(); ++i) {
    for (std::size_t j = 0; j < shapes.size(); ++j) {
      const std::string name = "layers." + std::to_string(i) + "." + std::to_string(j) + ".weight";
      tensors.push_back(random_tensor(rng, name, kAllDTypes[i], shapes[(i + j) % shapes.size()]));
    }
  }
  std::shuffle(tensors.begin(), tensors.end(), rng);
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "h\xc3\xa9llo"}};
  const SafetensorsDir dir;
  const fs::path path = dir / "model.safetensors";
  const std::vector<TensorToWrite> to_write = views(tensors);
  write_safetensors(path, to_write, metadata);
  CHECK_FALSE(fs::exists(dir / "model.safetensors.tmp"));

  const SafetensorsFile file = SafetensorsFile::open(path);
  CHECK(file.path() == path);
  CHECK(file.metadata() == metadata);
  REQUIRE(file.tensors().size() == tensors.size());
  for (const OwnedTensor& tensor : tensors) check_same(file, tensor);
  CHECK(std::is_sorted(file.tensors().begin(), file.tensors().end(),
                       [](const TensorInfo& a, const TensorInfo& b) { return a.offset < b.offset; }));

  // The layout: an 8-byte length, a header padded to a multiple of 8, then the tensors contiguously in order.
  const std::string raw = read_file(path);
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, raw.data(), 8);  // the test host is little-endian
  CHECK(header_size % 8 == 0);
  std::size_t offset = 8 + header_size;
  for (const OwnedTensor& tensor : tensors) {
    CHECK(file.tensor(tensor.name).offset == offset);
    offset += tensor.bytes.size();
  }
  CHECK(raw.size() == offset);
  CHECK(file.file_size() == offset);
}

TEST_CASE("write_safetensors replaces an existing file, and an empty file of tensors is valid") {
  std::mt19937 rng = make_rng();
  const SafetensorsDir dir;
  const fs::path path = dir / "w.safetensors";
  write_file(path, "old contents");
  const std::vector<OwnedTensor> tensors = {random_tensor(rng, "a", DType::bf16, {2, 2})};
  write_safetensors(path, views(tensors));
  check_same(SafetensorsFile::open(path), tensors[0]);
  CHECK(SafetensorsFile::open(path).metadata().empty());

  write_safetensors(path, {});
  const SafetensorsFile empty = SafetensorsFile::open(path);
  CHECK(empty.tensors().empty());
  CHECK(empty.find("a") == nullptr);
}

TEST_CASE("write_safetensors_folder shards tensors as Hugging Face does, and a later save leaves no stale file") {
  SafetensorsDir dir;
  auto rng = make_rng();
  // Tensor bytes 100, 100, 300, 52, 48: shards of at most 200 bytes hold [a, b], [c] (alone: larger), [d, e].
  const std::vector<std::pair<std::string, std::size_t>> spec{{"a", 25}, {"b", 25}, {"c", 75}, {"d", 13}, {"e", 12}};
  std::vector<std::vector<std::byte>> data;
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, floats] : spec) data.push_back(random_bytes(rng, floats * 4));
  for (std::size_t i = 0; i < spec.size(); ++i) {
    tensors.push_back({spec[i].first, DType::f32, {static_cast<std::int64_t>(spec[i].second)}, data[i]});
  }
  const auto check_reads_back = [&](std::size_t files) {
    const Checkpoint cp = Checkpoint::open(dir.path());
    CHECK(cp.files().size() == files);
    for (std::size_t i = 0; i < spec.size(); ++i) {
      CAPTURE(spec[i].first);
      const auto got = cp.data(cp.tensor(spec[i].first));
      CHECK(std::equal(got.begin(), got.end(), data[i].begin(), data[i].end()));
    }
  };
  write_safetensors_folder(dir.path(), tensors, 200, {{"format", "pt"}});
  CHECK_FALSE(fs::exists(dir.path() / "model.safetensors"));
  const std::string id = Checkpoint::open(dir.path()).save_id();
  REQUIRE(id.size() == 16);
  const auto shard = [&](int i, int n) {
    return "model-0000" + std::to_string(i) + "-of-0000" + std::to_string(n) + "-" + id + ".safetensors";
  };
  for (int i = 1; i <= 3; ++i) CHECK(fs::exists(dir.path() / shard(i, 3)));
  const std::string index = read_file(dir.path() / "model.safetensors.index.json");
  for (const std::string& entry :
       {std::string(R"("total_size": 600)"), R"("lazygraph_save_id": ")" + id + '"', R"("b": ")" + shard(1, 3) + '"',
        R"("c": ")" + shard(2, 3) + '"', R"("e": ")" + shard(3, 3) + '"'}) {
    CAPTURE(entry);
    CHECK(index.find(entry) != std::string::npos);
  }
  check_reads_back(3);
  const SafetensorsFile second = SafetensorsFile::open(dir.path() / shard(2, 3));
  CHECK(second.metadata() == std::map<std::string, std::string>{{"format", "pt"}, {"lazygraph_save_id", id}});

  write_safetensors_folder(dir.path(), tensors, 400);  // two shards: the earlier three are stale and go
  CHECK(Checkpoint::open(dir.path()).save_id() != id);
  for (int i = 1; i <= 3; ++i) CHECK_FALSE(fs::exists(dir.path() / shard(i, 3)));
  CHECK(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator{}) == 3);
  check_reads_back(2);
  write_safetensors_folder(dir.path(), tensors);  // one file: the index and the shards go
  CHECK(fs::exists(dir.path() / "model.safetensors"));
  CHECK_FALSE(fs::exists(dir.path() / "model.safetensors.index.json"));
  CHECK(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator{}) == 1);
  check_reads_back(1);
  write_safetensors_folder(dir.path(), tensors, 100);  // sharded again: the single file would shadow the index
  CHECK_FALSE(fs::exists(dir.path() / "model.safetensors"));
  check_reads_back(4);

  std::vector<TensorToWrite> twice{tensors[0], tensors[0]};
  CHECK_THROWS_WITH_AS(write_safetensors_folder(dir.path() / "dup", twice, 100), doctest::Contains("repeats"),
                       CheckpointError);
  CHECK_FALSE(fs::exists(dir.path() / "dup"));
  CHECK_THROWS_AS(write_safetensors_folder(dir.path(), tensors, 0), lazygraph::UsageError);
  CHECK_THROWS_WITH_AS(write_safetensors_folder(dir.path(), tensors, 100, {{"lazygraph_save_id", "mine"}}),
                       doctest::Contains("the metadata holds \"lazygraph_save_id\", which the save writes itself"),
                       lazygraph::UsageError);
}

TEST_CASE("a hand-written file is read byte-exactly") {
  // Header 120 bytes; data: F32 w = [1.0, -2.0] at [0, 8), BF16 scalar b = 0.5 at [8, 10), 2 unused bytes.
  const std::string header =
      R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"shape":[],"dtype":"BF16","data_offsets":[8,10]},"__metadata__":{"format":"pt"}}  )";
  const std::string data = std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8) + std::string("\x00\x3f\xee\xee", 4);
  const SafetensorsDir dir;
  const fs::path path = dir / "tiny.safetensors";
  write_file(path, le64(header.size()) + header + data);

  const SafetensorsFile file = SafetensorsFile::open(path);
  REQUIRE(file.tensors().size() == 2);
  CHECK(file.tensors()[0].name == "w");
  CHECK(file.tensors()[1].name == "b");
  CHECK(file.metadata() == std::map<std::string, std::string>{{"format", "pt"}});

  const TensorInfo& w = file.tensor("w");
  CHECK(w.dtype == DType::f32);
  CHECK(w.shape == std::vector<std::int64_t>{2});
  CHECK(w.offset == 8 + header.size());
  CHECK(w.bytes == 8);
  CHECK(w.element_count() == 2);
  std::array<float, 2> values{};
  std::memcpy(values.data(), file.data(w).data(), 8);
  CHECK(values[0] == 1.0F);
  CHECK(values[1] == -2.0F);

  const TensorInfo& b = file.tensor("b");
  CHECK(b.dtype == DType::bf16);
  CHECK(b.shape.empty());
  CHECK(b.element_count() == 1);
  CHECK(b.offset == 8 + header.size() + 8);
  std::uint16_t bits = 0;
  std::memcpy(&bits, file.data(b).data(), 2);
  CHECK(lazygraph::bfloat16{bits}.to_float() == 0.5F);
}

TEST_CASE("SafetensorsFile is move-only and a moved-from one finds nothing") {
  std::mt19937 rng = make_rng();
  const SafetensorsDir dir;
  const std::vector<OwnedTensor> tensors = {random_tensor(rng, "x", DType::i32, {3})};
  write_safetensors(dir / "m.safetensors", views(tensors));
  SafetensorsFile a = SafetensorsFile::open(dir / "m.safetensors");
  const TensorInfo* info = a.find("x");
  SafetensorsFile b = std::move(a);
  CHECK(b.find("x") == info);  // the TensorInfo stays where it was
  check_same(b, tensors[0]);
  CHECK(a.find("x") == nullptr);  // NOLINT(bugprone-use-after-move): testing the moved-from state
  CHECK(a.tensors().empty());     // NOLINT(bugprone-use-after-move)
  a = std::move(b);
  check_same(a, tensors[0]);
  static_assert(!std::is_copy_constructible_v<SafetensorsFile>);
  static_assert(!std::is_copy_assignable_v<SafetensorsFile>);
}

// ---------------------------------------------------------------------------------------------------------------
// Lookups

TEST_CASE("tensor() and require() name the file and tensor, and what was expected against what was found") {
  std::mt19937 rng = make_rng();
  const SafetensorsDir dir;
  const fs::path path = dir / "r.safetensors";
  const std::vector<OwnedTensor> tensors = {random_tensor(rng, "proj", DType::f32, {4, 2})};
  write_safetensors(path, views(tensors));
  const SafetensorsFile file = SafetensorsFile::open(path);

  check_error(checkpoint_error_of([&] { (void)file.tensor("missing"); }), path, "missing", "no such tensor");
  check_error(checkpoint_error_of([&] { (void)file.require("missing", {}, {}); }), path, "missing", "no such tensor");

  const std::vector<DType> half_types = {DType::bf16, DType::f16};
  const std::vector<std::int64_t> want = {4, 4};
  check_error(checkpoint_error_of([&] { (void)file.require("proj", half_types, want); }), path, "proj",
              "expected BF16 or F16 [4, 4], found F32 [4, 2]");
  const std::vector<DType> f32 = {DType::f32};
  check_error(checkpoint_error_of([&] { (void)file.require("proj", f32, want); }), path, "proj",
              "expected F32 [4, 4], found F32 [4, 2]");
  const std::vector<std::int64_t> right = {4, 2};
  check_error(checkpoint_error_of([&] { (void)file.require("proj", half_types, right); }), path, "proj",
              "expected BF16 or F16 [4, 2], found F32 [4, 2]");
  CHECK(&file.require("proj", f32, right) == &file.tensor("proj"));
  CHECK(&file.require("proj", {}, right) == &file.tensor("proj"));  // no dtypes given: any dtype

  TensorInfo foreign = file.tensor("proj");
  CHECK_THROWS_AS((void)file.data(foreign), lazygraph::UsageError);
}

// ---------------------------------------------------------------------------------------------------------------
// Malformed files: each one is a CheckpointError naming the file (and the tensor where there is one)

TEST_CASE("a file that cannot be opened is refused with the system's reason") {
  const SafetensorsDir dir;
  const fs::path missing = dir / "nope.safetensors";
  check_error(checkpoint_error_of([&] { (void)SafetensorsFile::open(missing); }), missing, "",
              "No such file or directory");
  check_error(checkpoint_error_of([&] { (void)SafetensorsFile::open(dir.path()); }), dir.path(), "",
              "not a regular file");
}

TEST_CASE("a file shorter than the 8-byte header length is refused") {
  check_refused("", "", "the file is 0 bytes, shorter than the 8-byte header length");
  check_refused("abc", "", "the file is 3 bytes");
}

TEST_CASE("a header length past the end of the file is refused") {
  check_refused(le64(100) + "{}", "", "the header length is 100 bytes but only 2 follow");
}

TEST_CASE("an absurdly large header length is refused before anything else") {
  check_refused(le64(200000000) + "{}", "", "more than the 100000000 allowed");
  check_refused(le64(~std::uint64_t{0}) + "{}", "", "more than the 100000000 allowed");
}

TEST_CASE("a header that is not JSON, or not an object, is refused") {
  check_refused(raw_safetensors("{\"a\": ", 0), "", "the header is not valid JSON");
  check_refused(raw_safetensors("[1, 2]", 0), "", "the header must be a JSON object, found [1,2]");
  check_refused(raw_safetensors("{\"a\":\"\xff\"}", 0), "", "the header is not valid JSON");  // not UTF-8
}

TEST_CASE("an entry that is not an object, or lacks dtype, shape or data_offsets, is refused") {
  check_refused(raw_safetensors(one_entry("t", "3"), 0), "t", "the entry must be an object");
  check_refused(raw_safetensors(one_entry("t", R"({"shape":[1],"data_offsets":[0,4]})"), 4), "t",
                "the entry has no \"dtype\"");
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"F32","data_offsets":[0,4]})"), 4), "t",
                "the entry has no \"shape\"");
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"F32","shape":[1]})"), 4), "t",
                "the entry has no \"data_offsets\"");
}

TEST_CASE("entries with JSON values of the wrong type are refused") {
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":4,"shape":[1],"data_offsets":[0,4]})"), 4), "t",
                "\"dtype\" must be a string, found 4");
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"F32","shape":"1","data_offsets":[0,4]})"), 4), "t",
                "\"shape\" must be an array of non-negative integers, found \"1\"");
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"F32","shape":["1"],"data_offsets":[0,4]})"), 4), "t",
                "shape dims must be non-negative integers, found \"1\"");
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"F32","shape":[1],"data_offsets":[0]})"), 4), "t",
                "\"data_offsets\" must be [begin, end], two non-negative integers, found [0]");
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"F32","shape":[1],"data_offsets":[0,"4"]})"), 4), "t",
                "found [0,\"4\"]");
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})"), 4), "t",
                "found [-4,0]");
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"F32","shape":[1],"data_offsets":[0,4,8]})"), 8), "t",
                "found [0,4,8]");
}

TEST_CASE("negative and non-integer shape dims are refused") {
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), 8), "t",
                "shape dims must be >= 0, found -2");
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,6]})"), 8), "t",
                "shape dims must be non-negative integers, found 1.5");
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"), 8), "t",
                "found 2.0");
  check_refused(
      raw_safetensors(one_entry("t", R"({"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,8]})"), 8), "t",
      "shape dim 9223372036854775808 is larger than 2^63 - 1");
}

TEST_CASE("a shape whose byte size overflows 64 bits is refused") {
  check_refused(
      raw_safetensors(one_entry("t", R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})"), 8),
      "t", "the byte size of F32 [4294967296, 4294967296] overflows 64 bits");
}

TEST_CASE("a byte size other than product(shape) * dtype size is refused") {
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), 12), "t",
                "expected 12 bytes for F32 [3], found data_offsets [0, 8] = 8 bytes");
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"BF16","shape":[2,2],"data_offsets":[0,16]})"), 16), "t",
                "expected 8 bytes for BF16 [2, 2]");
  // FP8 checkpoints' weights: one byte an element
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"F8_E4M3","shape":[4,8],"data_offsets":[0,64]})"), 64), "t",
                "expected 32 bytes for F8_E4M3 [4, 8], found data_offsets [0, 64] = 64 bytes");
}

TEST_CASE("begin past end, and offsets past the end of the file, are refused") {
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"F32","shape":[1],"data_offsets":[8,4]})"), 8), "t",
                "data_offsets [8, 4]: begin is past end");
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), 4), "t",
                "data_offsets [0, 8] end past the data buffer of 4 bytes");
  check_refused(
      raw_safetensors(one_entry("t", R"({"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,0]})"), 4), "t",
      "begin is past end");
}

TEST_CASE("overlapping tensors are refused, naming both; empty tensors overlap nothing") {
  check_refused(raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                12),
                "b", "data_offsets [4, 12] overlap those of tensor 'a' [0, 8]");
  check_refused(raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                R"("b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
                                8),
                "b", "overlap those of tensor 'a'");

  const SafetensorsDir dir;
  const fs::path path = dir / "empty_inside.safetensors";
  write_file(path, raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                   R"("z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                                   8));
  const SafetensorsFile file = SafetensorsFile::open(path);
  CHECK(file.tensor("z").bytes == 0);
  CHECK(file.data(file.tensor("z")).empty());
}

TEST_CASE("an unknown dtype is refused, listing the known ones") {
  check_refused(
      raw_safetensors(one_entry("t", R"({"dtype":"F8_E5M2","shape":[1],"data_offsets":[0,1]})"), 1), "t",
      "unknown dtype \"F8_E5M2\" (expected one of F16, BF16, F32, F64, I8, I16, I32, I64, U8, BOOL, F8_E4M3)");
}

TEST_CASE("duplicate tensor names and duplicate keys in an entry are refused") {
  check_refused(raw_safetensors(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                2),
                "a", "the name appears twice in the header");
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]})"), 1),
                "", "the header has the key 'dtype' twice in one object");
}

TEST_CASE("metadata that is not an object of strings is refused") {
  check_refused(raw_safetensors(R"({"__metadata__":{"format":"pt","step":1000}})", 0), "",
                "\"__metadata__\" value of key 'step' must be a string, found 1000");
  check_refused(raw_safetensors(R"({"__metadata__":["pt"]})", 0), "",
                "\"__metadata__\" must be an object of strings, found [\"pt\"]");
}

// ---------------------------------------------------------------------------------------------------------------
// Writer validation

TEST_CASE("write_safetensors refuses bad tensors and leaves no file behind") {
  std::mt19937 rng = make_rng();
  const SafetensorsDir dir;
  const fs::path path = dir / "out.safetensors";
  const std::vector<std::byte> eight = random_bytes(rng, 8);
  const auto refused = [&](std::vector<TensorToWrite> tensors, const std::string& tensor, std::string_view fragment) {
    check_error(checkpoint_error_of([&] { write_safetensors(path, tensors); }), path, tensor, fragment);
    CHECK(fs::is_empty(dir.path()));  // neither the file nor a temporary one
  };
  refused({{"a", DType::f32, {3}, eight}}, "a", "expected 12 bytes of data for F32 [3], found 8");
  refused({{"a", DType::f32, {2}, eight}, {"a", DType::u8, {8}, eight}}, "a", "the name appears twice");
  refused({{"__metadata__", DType::u8, {8}, eight}}, "__metadata__", "reserved");
  refused({{"a", DType::u8, {-8}, eight}}, "a", "has a negative dim");
  refused({{"bad\xff", DType::u8, {8}, eight}}, "", "not valid UTF-8");

  const fs::path nowhere = dir / "no_such_folder" / "x.safetensors";
  const std::vector<TensorToWrite> ok = {{"a", DType::u8, {8}, eight}};
  check_error(checkpoint_error_of([&] { write_safetensors(nowhere, ok); }), nowhere, "",
              "cannot create the temporary file " + (dir / "no_such_folder").string() + "/.x.safetensors.");
  check_error(checkpoint_error_of([&] { write_safetensors(nowhere, ok); }), nowhere, "",
              ".tmp (to be renamed over this file): No such file or directory");
}

// ---------------------------------------------------------------------------------------------------------------
// Checkpoint

namespace {

/// Writes `tensors` into shards of `dir` named in `shard_of` (tensor name -> shard file) and the index.
void write_sharded(const SafetensorsDir& dir, const std::vector<OwnedTensor>& tensors,
                   const std::map<std::string, std::string>& shard_of) {
  std::map<std::string, std::vector<TensorToWrite>> shards;
  for (const OwnedTensor& t : tensors) shards[shard_of.at(t.name)].push_back({t.name, t.dtype, t.shape, t.bytes});
  for (const auto& [shard, list] : shards) write_safetensors(dir / shard, list);
  std::string index = R"({"metadata":{"total_size":0},"weight_map":{)";
  bool first = true;
  for (const auto& [name, shard] : shard_of) {
    index += (first ? "\"" : ",\"") + name + "\":\"" + shard + "\"";
    first = false;
  }
  write_file(dir / "model.safetensors.index.json", index + "}}");
}

}  // namespace

TEST_CASE("Checkpoint opens a single file and a folder holding model.safetensors") {
  std::mt19937 rng = make_rng();
  const SafetensorsDir dir;
  const std::vector<OwnedTensor> tensors = {random_tensor(rng, "embed", DType::bf16, {16, 8}),
                                            random_tensor(rng, "norm", DType::f32, {8})};
  write_safetensors(dir / "model.safetensors", views(tensors));

  for (const fs::path& given : {dir / "model.safetensors", dir.path()}) {
    INFO("opened as " << given);
    const Checkpoint checkpoint = Checkpoint::open(given);
    CHECK(checkpoint.path() == given);
    REQUIRE(checkpoint.files().size() == 1);
    CHECK(checkpoint.files()[0].path() == dir / "model.safetensors");
    CHECK(checkpoint.names() == std::vector<std::string_view>{"embed", "norm"});
    for (const OwnedTensor& t : tensors) {
      const TensorInfo& info = checkpoint.tensor(t.name);
      CHECK(&checkpoint.file_of(info) == &checkpoint.files()[0]);
      const std::span<const std::byte> data = checkpoint.data(info);
      CHECK(std::equal(data.begin(), data.end(), t.bytes.begin(), t.bytes.end()));
    }
    CHECK(checkpoint.find("nothing") == nullptr);
    check_error(checkpoint_error_of([&] { (void)checkpoint.tensor("nothing"); }), dir / "model.safetensors", "nothing",
                "no such tensor in the checkpoint");
  }
}

TEST_CASE("Checkpoint opens a sharded folder through its index, with lookups across shards") {
  std::mt19937 rng = make_rng();
  const SafetensorsDir dir;
  const std::vector<OwnedTensor> tensors = {
      random_tensor(rng, "model.embed_tokens.weight", DType::bf16, {32, 8}),
      random_tensor(rng, "model.layers.0.mlp.up_proj.weight", DType::bf16, {16, 8}),
      random_tensor(rng, "model.norm.weight", DType::f32, {8}),
      random_tensor(rng, "lm_head.weight", DType::f16, {32, 8}),
  };
  const std::map<std::string, std::string> shard_of = {
      {"model.embed_tokens.weight", "model-00001-of-00002.safetensors"},
      {"model.layers.0.mlp.up_proj.weight", "model-00001-of-00002.safetensors"},
      {"model.norm.weight", "model-00002-of-00002.safetensors"},
      {"lm_head.weight", "model-00002-of-00002.safetensors"},
  };
  write_sharded(dir, tensors, shard_of);

  const Checkpoint checkpoint = Checkpoint::open(dir.path());
  CHECK(checkpoint.description_file() == dir / "model.safetensors.index.json");
  REQUIRE(checkpoint.files().size() == 2);
  CHECK(checkpoint.names().size() == 4);
  for (const OwnedTensor& t : tensors) {
    INFO("tensor " << t.name);
    const TensorInfo& info = checkpoint.tensor(t.name);
    CHECK(checkpoint.file_of(info).path() == dir / shard_of.at(t.name));
    const std::span<const std::byte> data = checkpoint.data(info);
    CHECK(std::equal(data.begin(), data.end(), t.bytes.begin(), t.bytes.end()));
  }
  const std::vector<DType> bf16 = {DType::bf16};
  const std::vector<std::int64_t> shape = {8};
  check_error(checkpoint_error_of([&] { (void)checkpoint.require("model.norm.weight", bf16, shape); }),
              dir / "model-00002-of-00002.safetensors", "model.norm.weight", "expected BF16 [8], found F32 [8]");
  const std::vector<std::int64_t> up_shape = {16, 8};
  CHECK(checkpoint.require("model.layers.0.mlp.up_proj.weight", bf16, up_shape).bytes == 16 * 8 * 2);

  // Moving the checkpoint keeps every TensorInfo where it was.
  const TensorInfo* norm = checkpoint.find("model.norm.weight");
  Checkpoint moved = Checkpoint::open(dir.path());
  const TensorInfo* moved_norm = moved.find("model.norm.weight");
  const Checkpoint target = std::move(moved);
  CHECK(target.find("model.norm.weight") == moved_norm);
  CHECK(&target.file_of(*moved_norm) == &target.files()[1]);
  CHECK_THROWS_AS((void)target.file_of(*norm), lazygraph::UsageError);  // another checkpoint's TensorInfo
}

TEST_CASE("Checkpoint refuses bad paths, indexes and shards, naming the file at fault") {
  std::mt19937 rng = make_rng();
  const SafetensorsDir dir;
  const fs::path index = dir / "model.safetensors.index.json";
  const std::vector<OwnedTensor> tensors = {random_tensor(rng, "a", DType::f32, {2}),
                                            random_tensor(rng, "b", DType::f32, {3})};

  SUBCASE("a path that does not exist") {
    check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir / "none"); }), dir / "none", "", "does not exist");
  }
  SUBCASE("a folder without model.safetensors or an index") {
    check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), dir.path(), "",
                "neither model.safetensors nor model.safetensors.index.json");
  }
  SUBCASE("a missing shard names the index and the shard") {
    write_sharded(dir, tensors, {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}});
    fs::remove(dir / "s2.safetensors");
    check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), index, "",
                "the shard 's2.safetensors' is missing");
  }
  SUBCASE("a tensor of the index absent from its shard") {
    write_sharded(dir, tensors, {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}});
    write_file(index, R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors","c":"s2.safetensors"}})");
    check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), index, "c",
                "the index maps it to shard 's2.safetensors', which has no such tensor");
  }
  SUBCASE("a shard holding a tensor the index maps elsewhere or not at all") {
    write_sharded(dir, tensors, {{"a", "s1.safetensors"}, {"b", "s1.safetensors"}});
    write_file(index, R"({"weight_map":{"a":"s1.safetensors"}})");
    check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), dir / "s1.safetensors", "b",
                "does not map it to this shard");
  }
  SUBCASE("an index that is not JSON, lacks weight_map, or names a shard outside the folder") {
    write_file(index, "{\"weight_map\": ");
    check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), index, "",
                "the index is not valid JSON");
    write_file(index, R"({"metadata":{}})");
    check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), index, "",
                "the index must hold \"weight_map\"");
    write_file(index, R"({"weight_map":{}})");
    check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), index, "", "is empty");
    write_file(index, R"({"weight_map":{"a":3}})");
    check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), index, "a",
                "must be a shard file name, found 3");
    write_file(index, R"({"weight_map":{"a":"../x.safetensors"}})");
    check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), index, "a", "not a plain file name");
    write_file(index, R"({"weight_map":{"a":"s.safetensors","a":"s.safetensors"}})");
    check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), index, "",
                "the index has the key 'a' twice");
  }
  SUBCASE("a malformed shard is reported by the shard's name") {
    write_sharded(dir, tensors, {{"a", "s1.safetensors"}, {"b", "s1.safetensors"}});
    write_file(dir / "s1.safetensors", "short");
    check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), dir / "s1.safetensors", "",
                "the file is 5 bytes");
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Hostile input (issue 38): every case a clean CheckpointError naming the file, in bounded time and memory

namespace {

/// `depth` nested JSON arrays around 0: "[[...[0]...]]".
std::string nested_arrays(std::size_t depth) { return std::string(depth, '[') + "0" + std::string(depth, ']'); }

/// `depth` nested JSON objects around 0: {"a":{"a":...{"a":0}...}}.
std::string nested_objects(std::size_t depth) {
  std::string text;
  text.reserve(depth * 6 + 1);
  for (std::size_t i = 0; i < depth; ++i) text += R"({"a":)";
  return text + "0" + std::string(depth, '}');
}

/// A valid entry for a U8 tensor of one byte at [begin, begin + 1).
std::string u8_entry(std::size_t begin) {
  return R"({"dtype":"U8","shape":[1],"data_offsets":[)" + std::to_string(begin) + "," + std::to_string(begin + 1) +
         "]}";
}

/// The least config.json LlamaConfig accepts, with `extra` members added after its first one.
std::string config_with(const std::string& extra) {
  return R"({"hidden_size": 64, )" + extra +
         R"(, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 100})";
}

/// The CheckpointError of LlamaConfig::load(`path`).
CheckpointError config_load_error(const fs::path& path) {
  return checkpoint_error_of([&] { (void)LlamaConfig::load(path); });
}

/// Seconds `action` takes.
template <class Action>
double seconds_of(Action&& action) {
  const auto start = std::chrono::steady_clock::now();
  action();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

constexpr std::size_t kDeep = 100000;  // 200 kB of brackets: overflowed the stack before the depth limit

}  // namespace

TEST_CASE("deep nesting anywhere in a header is refused at 64 levels without recursion") {
  const std::string deep = nested_arrays(kDeep);
  const std::string message = "the header nests deeper than 64 levels of arrays and objects";
  check_refused(raw_safetensors(deep, 0), "", message);  // the root
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":)" + deep + R"(,"shape":[1],"data_offsets":[0,1]})"), 1), "",
                message);
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"U8","shape":[)" + deep + R"(],"data_offsets":[0,1]})"), 1),
                "", message);
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"U8","shape":[1],"data_offsets":)" + deep + "}"), 1), "",
                message);
  check_refused(raw_safetensors(R"({"__metadata__":{"a":)" + deep + "}}", 0), "", message);
  check_refused(raw_safetensors(one_entry("t", nested_objects(kDeep)), 0), "", message);
  check_refused(raw_safetensors(nested_objects(kDeep).substr(0, 5 * kDeep), 0), "", message);  // never closed
  // Unbalanced: nothing but opening brackets, the depth error comes before the end of input.
  check_refused(raw_safetensors(std::string(kDeep, '['), 0), "", message);

  // The limit itself: 64 levels pass the parser (and are refused by the metadata check), 65 do not.
  check_refused(raw_safetensors(R"({"__metadata__":{"a":)" + nested_arrays(62) + "}}", 0), "",
                "\"__metadata__\" value of key 'a' must be a string, found [[[[");
  check_refused(raw_safetensors(R"({"__metadata__":{"a":)" + nested_arrays(63) + "}}", 0), "", message);
}

TEST_CASE("deep nesting in the index or in config.json is refused at 64 levels") {
  const SafetensorsDir dir;
  const fs::path index = dir / "model.safetensors.index.json";
  write_file(index, R"({"weight_map":{"a":)" + nested_arrays(kDeep) + "}}");
  check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), index, "",
              "the index nests deeper than 64 levels");
  write_file(index, nested_arrays(kDeep));
  check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), index, "",
              "the index nests deeper than 64 levels");

  const fs::path config = dir / "config.json";
  for (const std::string& text : {nested_arrays(kDeep), config_with(R"("rope_scaling": )" + nested_arrays(kDeep)),
                                  R"({"hidden_size": )" + nested_arrays(kDeep) + "}"}) {
    write_file(config, text);
    check_error(config_load_error(config), config, "", "the config nests deeper than 64 levels");
    check_error(checkpoint_error_of([&] { (void)LlamaConfig::parse(text, "c.json"); }), "c.json", "",
                "the config nests deeper than 64 levels");
  }
}

TEST_CASE("a header of 60000 tensors opens in linear time") {
  // The duplicate-key check of the old parser rescanned the parent object each time a child closed: 20k tensors
  // took 3 s, 80k took 349 s. Now 60k take well under a second; 20 s leaves room for a slow, sanitized machine.
  constexpr std::size_t kCount = 60000;
  std::string header = "{";
  for (std::size_t i = 0; i < kCount; ++i) {
    header += (i == 0 ? "\"t" : ",\"t") + std::to_string(i) + "\":" + u8_entry(i);
  }
  header += "}";
  const SafetensorsDir dir;
  const fs::path path = dir / "many.safetensors";
  write_file(path, raw_safetensors(header, kCount));
  std::size_t tensors = 0;
  const double seconds = seconds_of([&] { tensors = SafetensorsFile::open(path).tensors().size(); });
  CHECK(tensors == kCount);
  CHECK(seconds < 20.0);

  // The same shape of text as an index (one object of 60k strings) and as a nested object of config.json.
  std::string map = R"({"weight_map":{)";
  std::string nested = R"({"x":{)";
  for (std::size_t i = 0; i < kCount; ++i) {
    map += (i == 0 ? "\"t" : ",\"t") + std::to_string(i) + "\":\"missing.safetensors\"";
    nested += (i == 0 ? "\"k" : ",\"k") + std::to_string(i) + "\":{\"a\":1}";
  }
  write_file(dir / "model.safetensors.index.json", map + "}}");
  const double index_seconds = seconds_of([&] {
    check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), dir / "model.safetensors.index.json",
                "", "the shard 'missing.safetensors' is missing");
  });
  CHECK(index_seconds < 20.0);
  const double config_seconds = seconds_of([&] {
    try {
      (void)LlamaConfig::parse(nested + "}}", "c.json");  // the parse itself must be fast; the key is refused later
    } catch (const CheckpointError&) {
    }
  });
  CHECK(config_seconds < 20.0);
}

TEST_CASE("a header or an index of one huge flat array is refused while it is read, before it is built") {
  // 100 MB of "0," once built a 2 GB DOM in 13 s; a header is now read entry by entry, each entry and the index
  // within a count of values.
  std::string zeros = "[0";
  for (int i = 0; i < 1'100'000; ++i) zeros += ",0";
  zeros += "]";
  const SafetensorsDir dir;
  const fs::path entry = dir / "entry.safetensors";
  write_file(entry, raw_safetensors(one_entry("a", zeros), 0));
  const fs::path top = dir / "top.safetensors";
  write_file(top, raw_safetensors(zeros, 0));
  const double seconds = seconds_of([&] {
    check_error(checkpoint_error_of([&] { (void)SafetensorsFile::open(entry); }), entry, "a",
                "its entry in the header holds more than 65536 JSON values");
    check_error(checkpoint_error_of([&] { (void)SafetensorsFile::open(top); }), top, "",
                "the header must be a JSON object, found [0,0,0,");
    write_file(dir / "model.safetensors.index.json",
               R"({"weight_map":{"a":"model-1.safetensors"},"metadata":{"zeros":)" + zeros + "}}");
    check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), dir / "model.safetensors.index.json",
                "", "the index holds more than 1048576 JSON values");
  });
  // A fraction of a second: the text is read once, and at most 2^20 values are built. 20 s, as above, leaves room for a
  // slow, sanitized machine (5.4 s under AddressSanitizer beside other tests on a 2-core machine, 2026-12-03).
  CHECK(seconds < 20.0);

  // Under the limits: an entry of 60000 dims, metadata of 60000 keys.
  std::string dims = "[1";
  std::string keys = R"({"k0":"v")";
  for (int i = 1; i < 60000; ++i) {
    dims += ",1";
    keys += ",\"k" + std::to_string(i) + "\":\"v\"";
  }
  const fs::path wide = dir / "wide.safetensors";
  write_file(wide, raw_safetensors(R"({"__metadata__":)" + keys + R"(},"a":{"dtype":"U8","shape":)" + dims +
                                       R"(],"data_offsets":[0,1]}})",
                                   1));
  const SafetensorsFile file = SafetensorsFile::open(wide);
  CHECK(file.tensor("a").shape.size() == 60000);
  CHECK(file.metadata().size() == 60000);
}

TEST_CASE("a FIFO in place of a checkpoint file is refused at once without blocking") {
  const SafetensorsDir dir;
  const auto make_fifo = [](const fs::path& path) { REQUIRE(::mkfifo(path.c_str(), 0600) == 0); };

  const fs::path single = dir / "model.safetensors";
  make_fifo(single);
  check_error(checkpoint_error_of([&] { (void)SafetensorsFile::open(single); }), single, "",
              "is not a regular file (a FIFO)");
  check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), single, "",
              "is not a regular file (a FIFO)");
  check_error(checkpoint_error_of([&] { (void)Checkpoint::open(single); }), single, "", "is not a regular file");
  fs::remove(single);

  const fs::path index = dir / "model.safetensors.index.json";
  make_fifo(index);
  check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), index, "",
              "is not a regular file (a FIFO)");
  fs::remove(index);

  write_file(index, R"({"weight_map":{"a":"shard.safetensors"}})");
  make_fifo(dir / "shard.safetensors");
  check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), dir / "shard.safetensors", "",
              "is not a regular file (a FIFO)");

  const fs::path config = dir / "config.json";
  make_fifo(config);
  check_error(config_load_error(config), config, "", "is not a regular file (a FIFO)");
  check_error(config_load_error(dir.path()), config, "", "is not a regular file (a FIFO)");
}

TEST_CASE("config.json or the index linked to a device is refused and not read until memory runs out") {
  const SafetensorsDir dir;
  const fs::path config = dir / "config.json";
  fs::create_symlink("/dev/zero", config);
  check_error(config_load_error(dir.path()), config, "", "is not a regular file (a character device)");
  const fs::path index = dir / "model.safetensors.index.json";
  fs::create_symlink("/dev/zero", index);
  check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), index, "",
              "is not a regular file (a character device)");
  const fs::path weights = dir / "model.safetensors";
  fs::create_symlink("/dev/zero", weights);
  check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), weights, "",
              "is not a regular file (a character device)");
}

TEST_CASE("config.json over 16 MiB and an index over 64 MiB are refused before they are read") {
  const SafetensorsDir dir;
  // Sparse files: their size costs no disk, and reading them would take the time and memory the limit saves.
  const fs::path config = dir / "config.json";
  write_file(config, "{");
  fs::resize_file(config, (std::size_t{16} << 20U) + 1);
  check_error(config_load_error(config), config, "", "is larger than the 16777216 bytes allowed (16 MiB)");
  fs::resize_file(config, std::size_t{16} << 20U);  // at the limit: read, then refused for its NUL bytes
  check_error(config_load_error(config), config, "", "the config is not valid JSON: it holds a NUL byte at offset 1");

  const fs::path index = dir / "model.safetensors.index.json";
  write_file(index, "{");
  fs::resize_file(index, (std::size_t{64} << 20U) + 1);
  check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), index, "",
              "is larger than the 67108864 bytes allowed (64 MiB)");
}

TEST_CASE("a NUL or another control character in a shard name is refused") {
  const SafetensorsDir dir;
  const fs::path index = dir / "model.safetensors.index.json";
  std::mt19937 rng = make_rng();
  const std::vector<OwnedTensor> tensors = {random_tensor(rng, "a", DType::f32, {2})};
  write_sharded(dir, tensors, {{"a", "s.safetensors"}});
  REQUIRE(Checkpoint::open(dir.path()).names().size() == 1);
  // "s.safetensors\0x" would open s.safetensors where the system reads the name.
  write_file(index, R"({"weight_map":{"a":"s.safetensors\u0000x"}})");
  check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), index, "a",
              "the shard 's.safetensors\\x00x' is not a plain file name");
  for (const char* name : {R"(s\n.safetensors)", R"(s\u001f.safetensors)", R"(s\u007f.safetensors)", R"(\u0000)",
                           R"(.)", R"(..)", R"(sub/s.safetensors)", R"(/abs.safetensors)"}) {
    INFO("shard name " << name);
    write_file(index, std::string(R"({"weight_map":{"a":")") + name + R"("}})");
    check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), index, "a",
                "is not a plain file name in the index's folder");
  }
  // A raw NUL byte is not JSON at all; nlohmann would otherwise stop there and accept what follows.
  write_file(index, std::string(R"({"weight_map":{"a":"s.safetensors"}})") + '\0' + "garbage");
  check_error(checkpoint_error_of([&] { (void)Checkpoint::open(dir.path()); }), index, "",
              "the index is not valid JSON: it holds a NUL byte at offset 36");
}

TEST_CASE("a NUL byte in a header is refused even after a complete JSON value") {
  const std::string header = one_entry("t", u8_entry(0));
  check_refused(raw_safetensors(header + std::string(1, '\0') + "garbage", 1), "",
                "the header is not valid JSON: it holds a NUL byte at offset " + std::to_string(header.size()));
  check_refused(raw_safetensors(header + std::string(8, '\0'), 1), "", "holds a NUL byte");
  // A tensor name with an escaped NUL is a name like any other; messages show it escaped, as what() is a C string.
  const SafetensorsDir dir;
  const fs::path path = dir / "nul_name.safetensors";
  write_file(path, raw_safetensors(R"({"t\u0000":)" + u8_entry(0) + R"(,"t\u0000":)" + u8_entry(1) + "}", 2));
  const CheckpointError error = checkpoint_error_of([&] { (void)SafetensorsFile::open(path); });
  CHECK(error.tensor() == std::string("t\0", 2));
  CHECK(contains(error.what(), "tensor t\\x00: the name appears twice in the header"));
}

TEST_CASE("numbers out of range in a header are refused as invalid JSON or as bad dims") {
  check_refused(raw_safetensors(one_entry("t", R"({"dtype":"U8","shape":[1e400],"data_offsets":[0,1]})"), 1), "",
                "the header is not valid JSON: [json.exception.out_of_range.406] number overflow parsing '1e400'");
  check_refused(
      raw_safetensors(one_entry("t", R"({"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,1]})"), 1), "t",
      "shape dims must be non-negative integers, found 1.8446744073709552e+19");
  check_refused(
      raw_safetensors(one_entry("t", R"({"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551616]})"), 1), "t",
      "\"data_offsets\" must be [begin, end], two non-negative integers, found [0,1.8446744073709552e+19]");
}

TEST_CASE("duplicate keys are found in objects at any depth") {
  check_refused(raw_safetensors(R"({"__metadata__":{"a":"1","b":"2","a":"3"}})", 0), "",
                "the header has the key 'a' twice in one object");
  check_refused(raw_safetensors(R"({"__metadata__":{"a":"1"},"__metadata__":{}})", 0), "__metadata__",
                "the name appears twice in the header");
  // A key of an inner object may repeat one of its parent's: that is no duplicate.
  const SafetensorsDir dir;
  const fs::path path = dir / "m.safetensors";
  write_file(path, raw_safetensors(R"({"dtype":)" + u8_entry(0) + "}", 1));
  CHECK(SafetensorsFile::open(path).tensor("dtype").bytes == 1);
}

TEST_CASE("a file shorter than its header claims is refused at open naming the tensor cut off") {
  std::mt19937 rng = make_rng();
  const SafetensorsDir dir;
  const fs::path path = dir / "cut.safetensors";
  const std::vector<OwnedTensor> tensors = {random_tensor(rng, "first", DType::f32, {4}),
                                            random_tensor(rng, "last", DType::f16, {3})};
  write_safetensors(path, views(tensors));
  const std::uintmax_t size = fs::file_size(path);
  fs::resize_file(path, size - 1);
  check_error(checkpoint_error_of([&] { (void)SafetensorsFile::open(path); }), path, "last",
              "end past the data buffer of 21 bytes (the file is truncated or the offsets are wrong)");
  fs::resize_file(path, 20);  // inside the header
  check_error(checkpoint_error_of([&] { (void)SafetensorsFile::open(path); }), path, "",
              "but only 12 follow (the file is truncated)");
}

TEST_CASE("messages show a huge JSON value cut short") {
  std::string shape = R"("shape":{)";
  for (int i = 0; i < 50000; ++i) {  // under 65536 values
    shape += (i == 0 ? "\"k" : ",\"k") + std::to_string(i) + "\":0";
  }
  const SafetensorsDir dir;
  const fs::path object_path = dir / "object.safetensors";
  write_file(object_path,
             raw_safetensors(one_entry("t", R"({"dtype":"U8",)" + shape + R"(},"data_offsets":[0,1]})"), 1));
  const CheckpointError object_error = checkpoint_error_of([&] { (void)SafetensorsFile::open(object_path); });
  check_error(object_error, object_path, "t",
              "\"shape\" must be an array of non-negative integers, found {\"k0\":0,\"k1\":0,\"k10\":0,");
  CHECK(std::string(object_error.what()).size() < 300);

  const std::string long_string(1000000, 'y');
  const fs::path string_path = dir / "string.safetensors";
  write_file(
      string_path,
      raw_safetensors(one_entry("t", R"({"dtype":[")" + long_string + R"("],"shape":[1],"data_offsets":[0,1]})"), 1));
  const CheckpointError string_error = checkpoint_error_of([&] { (void)SafetensorsFile::open(string_path); });
  check_error(string_error, string_path, "t", "\"dtype\" must be a string, found [\"yyyy");
  CHECK(std::string(string_error.what()).size() < 300);
  CHECK(contains(string_error.what(), "yyy..."));
}
