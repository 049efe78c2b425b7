// Saving model folders (write_safetensors_folder, save_seeded_checkpoint, save_quantized_checkpoint) so that nothing
// is lost and no link is followed: a save that fails on a full disk (a forked child whose files cannot grow past a
// size) leaves the earlier save loadable and unchanged; every state a crash can leave between the steps of a save
// opens as the earlier save or as the new one, or is refused by name, never mixed; saving through symbolic links
// (a folder made with `cp -rs`) replaces the links and leaves their targets as they were; a link planted under a
// temporary name redirects nothing; temporary files of an interrupted save go with the next save; a header the reader
// would refuse is never written.
#include <doctest/doctest.h>

#include <lazygraph/nn/checkpoint.hpp>
#include <lazygraph/nn/quantized_save.hpp>
#include <lazygraph/nn/safetensors.hpp>

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/file_size_limit.hpp"
#include "common/files.hpp"
#include "common/quantized_formats.hpp"
#include "common/small_decoder.hpp"
#include "common/temp_dir.hpp"

using namespace lazygraph;
using namespace lazygraph::nn;
namespace fs = std::filesystem;

namespace {

/// Every file of `dir` (not its subfolders) by name, with its content; links show as "-> target".
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.is_directory()) continue;
    const std::string name = e.path().filename().string();
    files[name] = e.is_symlink() ? "-> " + fs::read_symlink(e.path()).string() : lgtest::read_file(e.path());
  }
  return files;
}

/// `size` random bytes.
std::vector<std::byte> random_data(std::mt19937& rng, std::size_t size) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<std::byte> bytes(size);
  for (std::byte& b : bytes) b = static_cast<std::byte>(byte(rng));
  return bytes;
}

/// Tensors "t0", "t1", ... of `sizes` random bytes each (U8), and the views write_safetensors_folder takes.
struct Tensors {
  std::vector<std::vector<std::byte>> bytes;
  std::vector<TensorToWrite> views;

  Tensors(std::mt19937& rng, const std::vector<std::size_t>& sizes) {
    for (const std::size_t size : sizes) bytes.push_back(random_data(rng, size));
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      views.push_back({"t" + std::to_string(i), DType::u8, {static_cast<std::int64_t>(sizes[i])}, bytes[i]});
    }
  }
};

/// Whether `dir`'s checkpoint holds exactly `tensors`' bytes.
bool holds(const fs::path& dir, const Tensors& tensors) {
  const Checkpoint checkpoint = Checkpoint::open(dir);
  if (checkpoint.names().size() != tensors.views.size()) return false;
  return std::all_of(tensors.views.begin(), tensors.views.end(), [&](const TensorToWrite& t) {
    const auto data = checkpoint.data(checkpoint.tensor(t.name));
    return std::equal(data.begin(), data.end(), t.data.begin(), t.data.end());
  });
}

/// The message of the CheckpointError that `action` throws; fails the test on anything else.
template <class Action>
std::string checkpoint_error(Action&& action) {
  try {
    action();
  } catch (const CheckpointError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected a CheckpointError, got: " << e.what());
  }
  FAIL("expected a CheckpointError");
  return {};
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// Copies `name` from folder `from` into folder `to`, over what is there: what a rename in a save does to `to`.
void copy_in(const fs::path& from, const std::string& name, const fs::path& to) {
  fs::copy_file(from / name, to / name, fs::copy_options::overwrite_existing);
}

/// The shard files of a sharded folder, from its index.
std::vector<std::string> shard_names(const fs::path& dir) {
  std::vector<std::string> names;
  const Checkpoint checkpoint = Checkpoint::open(dir);
  for (const SafetensorsFile& file : checkpoint.files()) names.push_back(file.path().filename().string());
  return names;
}

/// The seeded decoder the tests save: small, its weights a function of `seed`.
DecoderConfig seeded(std::uint32_t seed) { return lgtest::small_decoder(2, 1, seed); }

/// Every class quantized, so that a save holds each kind of quantized tensor.
LoadOptions quantizing() {
  LoadOptions options;
  options.quantization.attention = lgtest::int4(64, true);
  options.quantization.mlp = lgtest::int8();
  options.quantization.lm_head = lgtest::int4(128);
  return options;
}

/// The bytes of the first quantized matrix of the checkpoint in `dir`.
std::vector<std::uint8_t> first_matrix(const fs::path& dir) {
  const QuantizedWeight w = DecoderCheckpoint::open(dir).quantized_weight(0);
  return {w.values().begin(), w.values().end()};
}

}  // namespace

TEST_CASE("a sharded save that fails part way on a full disk leaves the earlier save loadable and unchanged") {
  const lgtest::TempDir dir("nn-saves");
  std::mt19937 rng(60);
  // Three shards of one tensor each, then three again: the third now too large for the disk.
  const Tensors earlier(rng, {1500, 1500, 1500});
  const Tensors later(rng, {1500, 1500, 6000});
  write_safetensors_folder(dir.path(), earlier.views, 2000);
  REQUIRE(shard_names(dir.path()).size() == 3);
  const std::map<std::string, std::string> before = snapshot(dir.path());
  const std::string outcome =
      lgtest::with_file_size_limit(4096, [&] { write_safetensors_folder(dir.path(), later.views, 2000); });
  CHECK(has(outcome, "threw: file " + dir.path().string() + "/model-00003-of-00003-"));
  CHECK(has(outcome, "(to be renamed over this file): File too large"));
  CHECK(snapshot(dir.path()) == before);  // nothing renamed, removed or left behind
  CHECK(holds(dir.path(), earlier));

  write_safetensors_folder(dir.path(), later.views, 2000);  // the same save with room: every earlier file goes
  CHECK(holds(dir.path(), later));
  CHECK(snapshot(dir.path()).size() == 4);
}

TEST_CASE("a checkpoint saved over another on a full disk leaves the earlier one and its config.json loadable") {
  const lgtest::TempDir dir("nn-saves");
  save_seeded_checkpoint(dir / "model", seeded(1));
  const std::map<std::string, std::string> before = snapshot(dir / "model");
  REQUIRE(before.at("config.json").size() > 100);
  const std::string outcome = lgtest::with_file_size_limit(64 << 10, [&] {
    save_seeded_checkpoint(dir / "model", seeded(2), DType::f32);  // its embedding alone is past 64 KiB
  });
  CHECK(has(outcome, "threw: file " + (dir / "model" / "model.safetensors").string() + ": cannot write"));
  CHECK(has(outcome, "File too large"));
  CHECK(snapshot(dir / "model") == before);
  CHECK(DecoderCheckpoint::open(dir / "model").llama_config().torch_dtype == "float16");

  // A quantized save fails alike, its shards and index included.
  const DecoderCheckpoint source = DecoderCheckpoint::open(dir / "model", quantizing());
  save_quantized_checkpoint(source, dir / "quantized", 20000);
  const std::map<std::string, std::string> quantized = snapshot(dir / "quantized");
  REQUIRE(quantized.size() > 4);
  const std::string failed =
      lgtest::with_file_size_limit(16 << 10, [&] { save_quantized_checkpoint(source, dir / "quantized", 100000); });
  CHECK(has(failed, "File too large"));
  CHECK(snapshot(dir / "quantized") == quantized);
  CHECK_NOTHROW((void)DecoderCheckpoint::open(dir / "quantized"));
}

TEST_CASE("every state a crash can leave between the steps of a save opens as one of the saves, or is refused") {
  const lgtest::TempDir dir("nn-saves");
  // Two saves of the same shapes and formats whose weights differ: a mix of them would load without a word, were
  // it not for their save ids.
  save_seeded_checkpoint(dir / "source1", seeded(1));
  save_seeded_checkpoint(dir / "source2", seeded(2));
  const DecoderCheckpoint source1 = DecoderCheckpoint::open(dir / "source1", quantizing());
  const DecoderCheckpoint source2 = DecoderCheckpoint::open(dir / "source2", quantizing());
  const fs::path a = dir / "a";
  const fs::path b = dir / "b";
  save_quantized_checkpoint(source1, a, 20000);
  save_quantized_checkpoint(source2, b, 20000);
  const std::vector<std::uint8_t> a_bytes = first_matrix(a);
  const std::vector<std::uint8_t> b_bytes = first_matrix(b);
  REQUIRE(a_bytes != b_bytes);
  const std::vector<std::string> b_shards = shard_names(b);
  REQUIRE(b_shards.size() > 2);

  {  // sharded over sharded
    const fs::path x = dir / "x";
    fs::copy(a, x);
    for (const std::string& shard : b_shards) copy_in(b, shard, x);  // 1. the new shards, under new names
    CHECK(first_matrix(x) == a_bytes);
    copy_in(b, "model.safetensors.index.json", x);  // 2. the index: the new weights beside the earlier config.json
    const std::string refused = checkpoint_error([&] { (void)DecoderCheckpoint::open(x); });
    CHECK(has(refused, "file " + (x / "config.json").string() + ": it is of save " + LlamaConfig::load(a).save_id +
                           " (its lazygraph_save_id) but the weights " + (x / "model.safetensors.index.json").string() +
                           " are of save " + LlamaConfig::load(b).save_id + ": they come from different saves"));
    copy_in(b, "config.json", x);  // 3. config.json
    CHECK(first_matrix(x) == b_bytes);
    for (const std::string& shard : shard_names(a)) fs::remove(x / shard);  // 4. the earlier files go
    CHECK(first_matrix(x) == b_bytes);
  }
  {  // one file over one file, and shards over one file
    const fs::path one = dir / "one";
    save_quantized_checkpoint(source1, one);
    REQUIRE(fs::exists(one / "model.safetensors"));
    fs::copy(one, dir / "y");
    copy_in(b, "config.json", dir / "y");  // a new config.json beside the earlier model.safetensors
    CHECK(has(checkpoint_error([&] { (void)DecoderCheckpoint::open(dir / "y"); }), "they come from different saves"));

    const fs::path z = dir / "z";
    fs::copy(one, z);
    for (const std::string& shard : b_shards) copy_in(b, shard, z);
    copy_in(b, "model.safetensors.index.json", z);  // model.safetensors still shadows the index
    CHECK(first_matrix(z) == a_bytes);
    copy_in(b, "config.json", z);
    CHECK(has(checkpoint_error([&] { (void)DecoderCheckpoint::open(z); }), "they come from different saves"));
    fs::remove(z / "model.safetensors");
    CHECK(first_matrix(z) == b_bytes);
  }
  {  // a shard of another save under a shard's name (as the names of earlier versions allowed) is refused
    const fs::path w = dir / "w";
    fs::copy(a, w);
    const std::vector<std::string> a_shards = shard_names(a);
    fs::copy_file(b / b_shards[1], w / a_shards[1], fs::copy_options::overwrite_existing);
    const std::string refused = checkpoint_error([&] { (void)Checkpoint::open(w); });
    CHECK(has(refused, "file " + (w / a_shards[1]).string() + ": the shard is of save " + LlamaConfig::load(b).save_id +
                           " (its __metadata__'s lazygraph_save_id) but the index " +
                           (w / "model.safetensors.index.json").string() + " is of save " +
                           LlamaConfig::load(a).save_id + ": the files come from different saves"));
  }
}

TEST_CASE("saving through symbolic links replaces the links and leaves their targets as they were") {
  const lgtest::TempDir dir("nn-saves");
  const fs::path source = dir / "source";
  save_seeded_checkpoint(source, seeded(1));
  const std::map<std::string, std::string> source_files = snapshot(source);
  // A folder of links to the source's files, as `cp -rs source linked` or a cache of shared blobs makes.
  const fs::path linked = dir / "linked";
  fs::create_directory(linked);
  for (const auto& [name, content] : source_files) fs::create_symlink(source / name, linked / name);
  save_seeded_checkpoint(linked, seeded(2), DType::bf16);
  CHECK(snapshot(source) == source_files);
  CHECK(DecoderCheckpoint::open(source).llama_config().torch_dtype == "float16");
  CHECK(DecoderCheckpoint::open(linked).llama_config().torch_dtype == "bfloat16");
  for (const char* name : {"config.json", "model.safetensors"}) {
    CAPTURE(name);
    CHECK(fs::is_regular_file(fs::symlink_status(linked / name)));
  }

  // Sharded: the linked shards are earlier files of the folder, removed as links.
  std::mt19937 rng(61);
  const Tensors earlier(rng, {900, 900, 900});
  const Tensors later(rng, {900, 900});
  write_safetensors_folder(dir / "shards", earlier.views, 1000);
  const std::map<std::string, std::string> shard_files = snapshot(dir / "shards");
  fs::create_directory(dir / "linked_shards");
  for (const auto& [name, content] : shard_files)
    fs::create_symlink(dir / "shards" / name, dir / "linked_shards" / name);
  write_safetensors_folder(dir / "linked_shards", later.views, 1000);
  CHECK(snapshot(dir / "shards") == shard_files);
  CHECK(holds(dir / "shards", earlier));
  CHECK(holds(dir / "linked_shards", later));
  for (const auto& [name, content] : snapshot(dir / "linked_shards")) CHECK_FALSE(content.starts_with("-> "));
}

TEST_CASE("a symbolic link planted under a temporary name redirects no save") {
  const lgtest::TempDir dir("nn-saves");
  const fs::path target = dir / "precious";
  lgtest::write_file(target, "not to be overwritten");
  const fs::path model = dir / "model";
  fs::create_directory(model);
  // The names earlier versions wrote to, and names shaped like today's temporary files.
  for (const char* name : {"config.json.tmp", "model.safetensors.tmp", "model.safetensors.index.json.tmp",
                           ".config.json.0000000000000000.tmp", ".model.safetensors.0000000000000000.tmp"}) {
    fs::create_symlink(target, model / name);
  }
  save_seeded_checkpoint(model, seeded(1));
  std::mt19937 rng(62);
  const Tensors sharded(rng, {100, 100});
  write_safetensors_folder(model, sharded.views, 100);
  write_safetensors(dir / "single.safetensors", sharded.views);
  CHECK(lgtest::read_file(target) == "not to be overwritten");
  CHECK(holds(model, sharded));
  CHECK(holds(dir / "single.safetensors", sharded));
  CHECK(fs::is_symlink(model / "config.json.tmp"));  // not the writer's: left alone
}

TEST_CASE("the temporary files of an interrupted save go with the next save, and no one else's") {
  const lgtest::TempDir dir("nn-saves");
  const std::vector<std::string> stale = {
      ".model.safetensors.0123456789abcdef.tmp",
      ".model.safetensors.index.json.0123456789abcdef.tmp",
      ".config.json.fedcba9876543210.tmp",
      ".model-00001-of-00002-0123456789abcdef.safetensors.00112233445566ff.tmp",
      ".model-00002-of-00002.safetensors.00112233445566ff.tmp",
  };
  const std::vector<std::string> others = {".hidden", "notes.tmp", ".model.safetensors.tmp",
                                           ".model.safetensors.0123456789ABCDEF.tmp", "tokenizer.json"};
  fs::create_directory(dir / "model");
  for (const std::string& name : stale) lgtest::write_file(dir / "model" / name, "partial");
  for (const std::string& name : others) lgtest::write_file(dir / "model" / name, "someone else's");
  save_seeded_checkpoint(dir / "model", seeded(1));
  std::map<std::string, std::string> expected = {{"config.json", ""}, {"model.safetensors", ""}};
  for (const std::string& name : others) expected[name] = "someone else's";
  std::map<std::string, std::string> found = snapshot(dir / "model");
  found["config.json"].clear();
  found["model.safetensors"].clear();
  CHECK(found == expected);
}

TEST_CASE("a header larger than the reader accepts is refused before anything is written") {
  const lgtest::TempDir dir("nn-saves");
  std::map<std::string, std::string> metadata;
  metadata.emplace("notes", std::string(100'000'000, 'x'));
  const std::vector<TensorToWrite> none;
  const std::string refused = checkpoint_error([&] { write_safetensors(dir / "big.safetensors", none, metadata); });
  CHECK(has(refused, "file " + (dir / "big.safetensors").string() +
                         ": the header would be at least 100000012 "
                         "bytes, more than the 100000000 that safetensors readers (this one included) accept"));
  CHECK(fs::is_empty(dir.path()));
}
