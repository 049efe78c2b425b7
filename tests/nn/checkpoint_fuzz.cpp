// Fuzz tests of the checkpoint readers (issue 38, "hostile checkpoints"): seeded mutations of a valid safetensors
// file, a valid config.json and a valid sharded folder. Each case must either open, and then keep the readers'
// promises (every tensor inside the file, its bytes those written), or be refused with a CheckpointError naming a
// file of the case. Any other exception fails the test naming the seed, the case and its mutations; a crash or a
// hang is a failure too. Deterministic: the seed is in each test's name, and the same seed replays the same cases
// (with the same standard library, whose distributions it uses). Run with doctest's --success (-s), each case is
// written to stderr before it runs, so that the last line names the case that crashed or hung.
#include <doctest/doctest.h>

#include "common/files.hpp"
#include "common/temp_dir.hpp"

#include <lazygraph/nn/llama_config.hpp>
#include <lazygraph/nn/safetensors.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

using namespace lazygraph::nn;
namespace fs = std::filesystem;

namespace {

struct FuzzDir : lgtest::TempDir {
  FuzzDir() : lgtest::TempDir("nn-fuzz") {}
};

using lgtest::le64;
using lgtest::read_file;
using lgtest::write_file;

std::uint64_t read_le64(std::string_view bytes) {
  std::uint64_t value = 0;
  for (std::size_t i = 8; i-- > 0;) value = (value << 8U) | static_cast<unsigned char>(bytes[i]);
  return value;
}

/// Applies seeded random mutations to JSON text or raw bytes and logs their names, e.g. "deep(65 arrays) nul".
class Mutator {
 public:
  explicit Mutator(std::uint32_t seed) : rng_(seed) {}

  /// A number in [0, n) (0 when n is 0).
  std::size_t below(std::size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  /// One to three mutations of any kind, JSON-aware ones included.
  void mutate_json(std::string& text, std::string& log) {
    const std::size_t count = 1 + below(3);
    for (std::size_t i = 0; i < count; ++i) {
      switch (below(12)) {
        case 0:
          deep_nesting(text, log);
          break;
        case 1:
          huge_number(text, log);
          break;
        case 2:
          nul_or_control(text, log);
          break;
        case 3:
          duplicate_key(text, log);
          break;
        case 4:
          replace_string(text, log);
          break;
        case 5:
          remove_member(text, log);
          break;
        default:
          mutate_byte_level(text, log);
          break;
      }
    }
  }

  /// One to three byte-level mutations: set or flip a byte, truncate, remove, duplicate or insert a span.
  void mutate_bytes(std::string& bytes, std::string& log) {
    const std::size_t count = 1 + below(3);
    for (std::size_t i = 0; i < count; ++i) mutate_byte_level(bytes, log);
  }

 private:
  void mutate_byte_level(std::string& text, std::string& log) {
    const std::size_t at = below(text.size() + 1);
    switch (below(6)) {
      case 0:
        if (text.empty()) return;
        text[below(text.size())] = static_cast<char>(below(256));
        log += "set-byte ";
        break;
      case 1:
        if (text.empty()) return;
        text[below(text.size())] ^= static_cast<char>(1U << below(8));
        log += "flip-bit ";
        break;
      case 2:
        text.resize(below(text.size() + 1));
        log += "truncate(" + std::to_string(text.size()) + ") ";
        break;
      case 3:
        text.erase(at, 1 + below(chance(0.5) ? 8 : 64));
        log += "remove-span ";
        break;
      case 4: {
        const std::size_t from = below(text.size() + 1);
        const std::string span = text.substr(from, 1 + below(chance(0.5) ? 8 : 128));
        text.insert(below(text.size() + 1), span);
        log += "duplicate-span ";
        break;
      }
      default: {
        std::string noise(1 + below(8), '\0');
        for (char& c : noise) c = static_cast<char>(below(256));
        text.insert(at, noise);
        log += "insert-bytes ";
        break;
      }
    }
  }

  /// A random position just after one of `chars` in `text`, or a random position when there is none.
  std::size_t after_one_of(const std::string& text, std::string_view chars) {
    std::vector<std::size_t> positions;
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (chars.find(text[i]) != std::string_view::npos) positions.push_back(i + 1);
    }
    return positions.empty() ? below(text.size() + 1) : positions[below(positions.size())];
  }

  /// Arrays or objects nested 63 to 100000 deep (64 is the readers' limit), closed or not, inserted as a value.
  void deep_nesting(std::string& text, std::string& log) {
    static constexpr std::array<std::size_t, 7> kDepths = {2, 63, 64, 65, 1000, 20000, 100000};
    const std::size_t depth = kDepths[below(kDepths.size())];
    const bool objects = chance(0.5);
    std::string value;
    if (objects) {
      value.reserve(depth * 7);
      for (std::size_t i = 0; i < depth; ++i) value += R"({"d":)";
      value += "0";
      value += std::string(depth, '}');
    } else {
      value = std::string(depth, '[') + "0" + std::string(depth, ']');
    }
    if (chance(0.1)) value.resize(value.size() / 2);  // unbalanced: never closed
    if (chance(0.5)) {
      text.insert(after_one_of(text, ":"), value + R"(,"fuzz":)");  // the old value becomes that of "fuzz"
    } else {
      text.insert(after_one_of(text, "["), value + ",");
    }
    log += "deep(" + std::to_string(depth) + (objects ? " objects) " : " arrays) ");
  }

  /// A run of digits replaced by a number at or past a limit: of int, int64, uint64, double, or a huge float.
  void huge_number(std::string& text, std::string& log) {
    static const std::array<std::string, 18> kNumbers = {"0",
                                                         "-1",
                                                         "1.5",
                                                         "2147483648",
                                                         "4294967296",
                                                         "1073741840",
                                                         "2000000000",
                                                         "1e39",
                                                         "1e-50",
                                                         "1e400",
                                                         "-1e400",
                                                         "1e-400",
                                                         "-0",
                                                         "9223372036854775808",
                                                         "-9223372036854775809",
                                                         "18446744073709551615",
                                                         "18446744073709551616",
                                                         "1" + std::string(400, '0')};
    std::vector<std::size_t> starts;
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (std::isdigit(static_cast<unsigned char>(text[i])) != 0 &&
          (i == 0 || std::isdigit(static_cast<unsigned char>(text[i - 1])) == 0)) {
        starts.push_back(i);
      }
    }
    if (starts.empty()) return;
    const std::size_t start = starts[below(starts.size())];
    std::size_t end = start;
    while (end < text.size() && std::string_view("0123456789.eE+-").find(text[end]) != std::string_view::npos) ++end;
    const std::string& number = kNumbers[below(kNumbers.size())];
    text.replace(start, end - start, number);
    log += "number(" + number.substr(0, 24) + ") ";
  }

  /// A raw NUL or control byte, or its \u escape, inserted just after a quote (inside a string, mostly).
  void nul_or_control(std::string& text, std::string& log) {
    const std::size_t at = after_one_of(text, "\"");
    const auto byte = static_cast<unsigned>(chance(0.5) ? 0 : below(0x20));
    if (chance(0.5)) {
      text.insert(at, 1, static_cast<char>(byte));
      log += "raw-control(" + std::to_string(byte) + ") ";
    } else {
      constexpr std::string_view kHex = "0123456789abcdef";
      text.insert(at, std::string("\\u00") + kHex[byte >> 4U] + kHex[byte & 0xfU]);
      log += "escaped-control(" + std::to_string(byte) + ") ";
    }
  }

  /// Where the member that starts at `start` (a key's opening quote) ends: the ',' or '}' after it at its level.
  static std::size_t member_end(const std::string& text, std::size_t start) {
    int depth = 0;
    bool in_string = false;
    for (std::size_t i = start; i < text.size(); ++i) {
      const char c = text[i];
      if (in_string) {
        if (c == '\\') {
          ++i;
        } else if (c == '"') {
          in_string = false;
        }
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (depth == 0) return i;
        --depth;
      } else if (c == ',' && depth == 0) {
        return i;
      }
    }
    return text.size();
  }

  /// The position of a random key's opening quote (a quote after '{' or ',' and blanks), or npos.
  std::size_t random_key(const std::string& text) {
    std::vector<std::size_t> keys;
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (text[i] != '"') continue;
      std::size_t j = i;
      while (j > 0 && std::string_view(" \n\t\r").find(text[j - 1]) != std::string_view::npos) --j;
      if (j > 0 && (text[j - 1] == '{' || text[j - 1] == ',')) keys.push_back(i);
    }
    return keys.empty() ? std::string::npos : keys[below(keys.size())];
  }

  /// A member ("key": value) copied right before itself, so that its object holds the key twice.
  void duplicate_key(std::string& text, std::string& log) {
    const std::size_t start = random_key(text);
    if (start == std::string::npos) return;
    const std::string member = text.substr(start, member_end(text, start) - start);
    text.insert(start, member + ",");
    log += "duplicate-key ";
  }

  /// A member ("key": value) removed, with the comma after it.
  void remove_member(std::string& text, std::string& log) {
    const std::size_t start = random_key(text);
    if (start == std::string::npos) return;
    std::size_t end = member_end(text, start);
    if (end < text.size() && text[end] == ',') ++end;
    text.erase(start, end - start);
    log += "remove-member ";
  }

  /// The content of a random string replaced by a word the readers give meaning to, or a long one.
  void replace_string(std::string& text, std::string& log) {
    static const std::array<std::string, 16> kWords = {"",
                                                       "__metadata__",
                                                       "F64",
                                                       "BOOL",
                                                       "F8_E4M3",
                                                       "dtype",
                                                       "shape",
                                                       "data_offsets",
                                                       "weight_map",
                                                       "..",
                                                       "../model.safetensors",
                                                       "model.safetensors.index.json",
                                                       "model-00002-of-00002.safetensors",
                                                       "lm_head.weight",
                                                       "\\ud800",
                                                       std::string(5000, 'w')};
    std::vector<std::size_t> quotes;
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '"' && (i == 0 || text[i - 1] != '\\')) quotes.push_back(i);
    }
    if (quotes.size() < 2) return;
    const std::size_t first = below(quotes.size() - 1);
    const std::size_t open = quotes[first];
    const std::size_t close = quotes[first + 1];
    const std::string& word = kWords[below(kWords.size())];
    text.replace(open + 1, close - open - 1, word);
    log += "string(" + word.substr(0, 24) + ") ";
  }

  std::mt19937 rng_;
};

/// Writes `what` to stderr when doctest runs with --success.
void trace(const std::string& what) {
  if (doctest::getContextOptions()->success) {
    std::fprintf(stderr, "%s\n", what.c_str());  // unbuffered: the line is out before a crash
  }
}

/// What the fuzz loop saw.
struct Tally {
  std::size_t opened = 0;
  std::size_t refused = 0;
};

/// Runs `action` for one case: counts it as opened or refused; a CheckpointError must pass `check_error`; any
/// other std::exception fails the test with `what` (the seed, case and mutations); anything else (doctest's own
/// REQUIRE failures included) goes on to doctest, which shows the case from the caller's INFO.
template <class Action, class CheckError>
void run_case(const std::string& what, Tally& tally, Action&& action, CheckError&& check_error) {
  trace(what);
  try {
    action();
    ++tally.opened;
  } catch (const CheckpointError& e) {
    ++tally.refused;
    check_error(e);
  } catch (const std::exception& e) {
    FAIL(what << ": not a CheckpointError but " << typeid(e).name() << ": " << e.what());
  }
}

/// Checks what SafetensorsFile promises of an opened file: every tensor lies after the header and inside the
/// file, holds exactly product(shape) * dtype size bytes, overlaps no other one, and reads the bytes of `bytes`
/// (the file's content) at its offset.
void check_opened(const SafetensorsFile& file, const std::string& bytes, const std::string& what) {
  INFO(what);
  REQUIRE(bytes.size() >= 8);
  const std::uint64_t header = read_le64(bytes);
  REQUIRE(file.file_size() == bytes.size());
  std::size_t previous_end = 0;
  for (const TensorInfo& info : file.tensors()) {
    REQUIRE(file.find(info.name) == &info);
    REQUIRE(info.offset >= 8 + header);
    REQUIRE(info.offset + info.bytes <= bytes.size());
    REQUIRE(info.bytes == info.element_count() * dtype_size(info.dtype));
    if (info.bytes > 0) {
      REQUIRE(info.offset >= previous_end);
      previous_end = info.offset + info.bytes;
    }
    const std::span<const std::byte> data = file.data(info);
    REQUIRE(data.size() == info.bytes);
    REQUIRE((info.bytes == 0 || std::memcmp(data.data(), bytes.data() + info.offset, info.bytes) == 0));
  }
}

/// A small valid safetensors file: several dtypes, a scalar, an empty tensor, metadata.
std::string valid_safetensors(const fs::path& path) {
  std::mt19937 rng(7);
  const auto bytes_of = [&](std::size_t count) {
    std::vector<std::byte> out(count);
    for (std::byte& b : out) b = static_cast<std::byte>(rng() & 0xffU);
    return out;
  };
  const std::vector<std::byte> embed = bytes_of(4 * 6 * 2);
  const std::vector<std::byte> norm = bytes_of(6 * 4);
  const std::vector<std::byte> head = bytes_of(4 * 6 * 2);
  const std::vector<std::byte> scalar = bytes_of(8);
  const std::vector<TensorToWrite> tensors = {
      {"model.embed_tokens.weight", DType::bf16, {4, 6}, embed},
      {"model.norm.weight", DType::f32, {6}, norm},
      {"lm_head.weight", DType::f16, {4, 6}, head},
      {"step", DType::i64, {}, scalar},
      {"empty", DType::u8, {0, 3}, {}},
  };
  write_safetensors(path, tensors, {{"format", "pt"}});
  return read_file(path);
}

/// A config.json of a small Llama model, with the keys a published one has.
const std::string kConfig = R"({
  "architectures": ["LlamaForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 64,
  "intermediate_size": 176,
  "max_position_embeddings": 2048,
  "model_type": "llama",
  "num_attention_heads": 4,
  "num_hidden_layers": 2,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.0",
  "use_cache": true,
  "vocab_size": 128
})";

constexpr std::uint32_t kSafetensorsSeed = 38051;
constexpr std::uint32_t kConfigSeed = 38052;
constexpr std::uint32_t kIndexSeed = 38053;

}  // namespace

TEST_CASE("fuzz (seed 38051): 2000 mutated safetensors files open intact or are refused with CheckpointError") {
  const FuzzDir dir;
  const std::string valid = valid_safetensors(dir / "valid.safetensors");
  const std::uint64_t header_size = read_le64(valid);
  const std::string header = valid.substr(8, header_size);
  const std::string data = valid.substr(8 + header_size);
  const fs::path path = dir / "fuzz.safetensors";
  Mutator mutator(kSafetensorsSeed);
  Tally tally;
  constexpr std::size_t kCases = 2000;
  for (std::size_t i = 0; i < kCases; ++i) {
    std::string log;
    std::string bytes;
    if (i == 0) {
      bytes = valid;  // the unmutated file must open
    } else if (mutator.chance(0.75)) {
      // The header mutated and framed with its new length, so that the JSON readers see every mutation.
      std::string text = header;
      mutator.mutate_json(text, log);
      std::string tail = data;
      if (mutator.chance(0.1)) {
        tail.resize(mutator.below(tail.size() + 8));
        log += "data(" + std::to_string(tail.size()) + ") ";
      }
      bytes = le64(text.size()) + text + tail;
    } else {
      bytes = valid;
      mutator.mutate_bytes(bytes, log);
    }
    const std::string what =
        "seed " + std::to_string(kSafetensorsSeed) + " case " + std::to_string(i) + ": " + (log.empty() ? "-" : log);
    INFO(what);
    write_file(path, bytes);
    run_case(
        what, tally, [&] { check_opened(SafetensorsFile::open(path), bytes, what); },
        [&](const CheckpointError& e) {
          INFO(what << " -> " << e.what());
          CHECK(e.file() == path);
          CHECK(std::string_view(e.what()).substr(0, 5 + path.string().size()) == "file " + path.string());
        });
  }
  MESSAGE("seed " << kSafetensorsSeed << ": " << tally.opened << " opened, " << tally.refused << " refused");
  CHECK(tally.opened >= 1);
  CHECK(tally.refused >= kCases / 2);
}

TEST_CASE("fuzz (seed 38052): 2000 mutated config.json texts parse or are refused with CheckpointError") {
  const FuzzDir dir;
  const fs::path source = "fuzz/config.json";
  const LlamaConfig base = LlamaConfig::parse(kConfig, source);
  REQUIRE(base.hidden_size == 64);
  Mutator mutator(kConfigSeed);
  Tally tally;
  constexpr std::size_t kCases = 2000;
  for (std::size_t i = 0; i < kCases; ++i) {
    std::string log;
    std::string text = kConfig;
    mutator.mutate_json(text, log);
    const bool from_file = i % 10 == 0;  // through load(), which reads the file
    const std::string what = "seed " + std::to_string(kConfigSeed) + " case " + std::to_string(i) +
                             (from_file ? " (load)" : "") + ": " + log;
    INFO(what);
    const fs::path file = dir / "config.json";
    if (from_file) write_file(file, text);
    run_case(
        what, tally,
        [&] {
          const LlamaConfig config = from_file ? LlamaConfig::load(dir.path()) : LlamaConfig::parse(text, source);
          // What parse() promises: every count positive.
          CHECK(config.hidden_size > 0);
          CHECK(config.num_attention_heads > 0);
          CHECK(config.num_key_value_heads > 0);
          CHECK(config.num_hidden_layers > 0);
          CHECK(config.intermediate_size > 0);
          CHECK(config.vocab_size > 0);
        },
        [&](const CheckpointError& e) {
          INFO(what << " -> " << e.what());
          CHECK(e.file() == (from_file ? file : source));
          CHECK(std::string_view(e.what()).substr(0, 5) == "file ");
        });
  }
  MESSAGE("seed " << kConfigSeed << ": " << tally.opened << " parsed, " << tally.refused << " refused");
  CHECK(tally.opened >= 1);
  CHECK(tally.refused >= kCases / 2);
}

TEST_CASE("fuzz (seed 38053): 1000 mutated sharded folders open consistently or are refused with CheckpointError") {
  const FuzzDir dir;
  const std::string shard1 = "model-00001-of-00002.safetensors";
  const std::string shard2 = "model-00002-of-00002.safetensors";
  std::mt19937 fill(11);
  const auto bytes_of = [&](std::size_t count) {
    std::vector<std::byte> out(count);
    for (std::byte& b : out) b = static_cast<std::byte>(fill() & 0xffU);
    return out;
  };
  const std::vector<std::byte> embed = bytes_of(8 * 4 * 2);
  const std::vector<std::byte> up = bytes_of(4 * 4 * 2);
  const std::vector<std::byte> norm = bytes_of(4 * 4);
  const std::vector<TensorToWrite> first = {{"model.embed_tokens.weight", DType::bf16, {8, 4}, embed},
                                            {"model.layers.0.mlp.up_proj.weight", DType::bf16, {4, 4}, up}};
  const std::vector<TensorToWrite> second = {{"model.norm.weight", DType::f32, {4}, norm}};
  write_safetensors(dir / shard1, first);
  write_safetensors(dir / shard2, second);
  const std::string valid_shard2 = read_file(dir / shard2);
  const std::string index_text = R"({
  "metadata": {"total_size": 112},
  "weight_map": {
    "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
    "model.layers.0.mlp.up_proj.weight": "model-00001-of-00002.safetensors",
    "model.norm.weight": "model-00002-of-00002.safetensors"
  }
})";
  const fs::path index = dir / "model.safetensors.index.json";
  Mutator mutator(kIndexSeed);
  Tally tally;
  constexpr std::size_t kCases = 1000;
  for (std::size_t i = 0; i < kCases; ++i) {
    std::string log;
    std::string text = index_text;
    std::string shard = valid_shard2;
    if (i > 0 && mutator.chance(0.2)) {
      const std::uint64_t header_size = read_le64(shard);
      std::string header = shard.substr(8, header_size);
      mutator.mutate_json(header, log);
      shard = le64(header.size()) + header + shard.substr(8 + header_size);
      log = "shard: " + log;
    } else if (i > 0) {
      mutator.mutate_json(text, log);
    }
    const std::string what =
        "seed " + std::to_string(kIndexSeed) + " case " + std::to_string(i) + ": " + (log.empty() ? "-" : log);
    INFO(what);
    write_file(index, text);
    write_file(dir / shard2, shard);
    run_case(
        what, tally,
        [&] {
          const Checkpoint checkpoint = Checkpoint::open(dir.path());
          // What Checkpoint promises: every name found in the shard that holds it, and every shard's tensor named.
          std::size_t in_files = 0;
          for (const SafetensorsFile& file : checkpoint.files()) in_files += file.tensors().size();
          REQUIRE(checkpoint.names().size() == in_files);
          for (const std::string_view name : checkpoint.names()) {
            const TensorInfo& info = checkpoint.tensor(name);
            const SafetensorsFile& file = checkpoint.file_of(info);
            REQUIRE(file.find(name) == &info);
            REQUIRE(checkpoint.data(info).size() == info.bytes);
            REQUIRE(info.offset + info.bytes <= file.file_size());
          }
        },
        [&](const CheckpointError& e) {
          INFO(what << " -> " << e.what());
          CHECK(e.file().parent_path() == dir.path());  // the index or a shard of the folder
          CHECK(std::string_view(e.what()).substr(0, 5) == "file ");
        });
  }
  MESSAGE("seed " << kIndexSeed << ": " << tally.opened << " opened, " << tally.refused << " refused");
  CHECK(tally.opened >= 1);
  CHECK(tally.refused >= kCases / 2);
}
