// Host tests of lazygraph::nn::GenerationConfig: published generation_config.json texts, how its keys override
// config.json's, loading from a file or a folder, and one test per refused input.
#include <doctest/doctest.h>

#include "common/files.hpp"
#include "common/temp_dir.hpp"

#include <lazygraph/nn/generation_config.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

using namespace lazygraph::nn;
namespace fs = std::filesystem;

namespace {

using lgtest::write_file;

// Llama 3.1 8B Instruct's generation_config.json, as published.
const std::string kLlama31 = R"({
  "bos_token_id": 128000,
  "do_sample": true,
  "eos_token_id": [128001, 128008, 128009],
  "temperature": 0.6,
  "top_p": 0.9,
  "transformers_version": "4.42.3"
})";

// TinyLlama 1.1B Chat's.
const std::string kTinyLlama = R"({
  "bos_token_id": 1,
  "eos_token_id": 2,
  "max_length": 2048,
  "pad_token_id": 0,
  "transformers_version": "4.35.0"
})";

/// A model config with bos 1, eos 2 and a vocabulary of 1000.
LlamaConfig model() {
  LlamaConfig m;
  m.vocab_size = 1000;
  m.bos_token_id = 1;
  m.eos_token_ids = {2};
  return m;
}

/// The message of the CheckpointError that `action` throws; fails the test when it throws nothing or another type.
template <class Action>
std::string refusal(Action action, const fs::path& source) {
  try {
    (void)action();
  } catch (const CheckpointError& e) {
    CHECK(e.file() == source);
    CHECK(e.tensor().empty());
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected a CheckpointError, got another exception: " << e.what());
  }
  FAIL("expected a CheckpointError");
  throw std::logic_error("unreachable");
}

/// Checks that parsing `text` is refused with a message naming the file and holding `fragment`.
void check_generation_refused(const std::string& text, const std::string& fragment) {
  const fs::path source = "/models/tiny/generation_config.json";
  const std::string what = refusal([&] { return GenerationConfig::parse(text, source); }, source);
  INFO("message: " << what);
  CHECK(what.find("file /models/tiny/generation_config.json: ") == 0);
  CHECK(what.find(fragment) != std::string::npos);
}

}  // namespace

TEST_CASE("the generation_config.json of Llama 3.1 and of TinyLlama parse to their special tokens") {
  const GenerationConfig llama = GenerationConfig::parse(kLlama31, "g.json");
  CHECK(llama.source == "g.json");
  CHECK(llama.bos_token_id == std::optional<int>(128000));
  CHECK(llama.eos_token_ids == std::vector<int>{128001, 128008, 128009});
  const GenerationConfig tiny = GenerationConfig::parse(kTinyLlama, "g.json");
  CHECK(tiny.bos_token_id == std::optional<int>(1));
  CHECK(tiny.eos_token_ids == std::vector<int>{2});
}

TEST_CASE("a key of generation_config.json overrides config.json's, null included; a key it lacks does not") {
  LlamaConfig m = model();
  m.vocab_size = 200000;
  CHECK(GenerationConfig::parse(kLlama31, "g").special_tokens(m) == SpecialTokens{128000, {128001, 128008, 128009}});
  CHECK(GenerationConfig::parse("{}", "g").special_tokens(m) == SpecialTokens{1, {2}});
  CHECK(GenerationConfig::parse(R"({"eos_token_id": 7})", "g").special_tokens(m) == SpecialTokens{1, {7}});
  CHECK(GenerationConfig::parse(R"({"bos_token_id": 9})", "g").special_tokens(m) == SpecialTokens{9, {2}});
  const GenerationConfig nulls = GenerationConfig::parse(R"({"bos_token_id": null, "eos_token_id": null})", "g");
  REQUIRE(nulls.bos_token_id.has_value());  // the key is there
  CHECK(!nulls.bos_token_id->has_value());  // and says "none"
  CHECK(nulls.eos_token_ids == std::vector<int>{});
  CHECK(nulls.special_tokens(m) == SpecialTokens{std::nullopt, {}});
  CHECK(GenerationConfig{}.special_tokens(m) == SpecialTokens{1, {2}});
}

TEST_CASE("load reads a file or a folder's generation_config.json; a folder without one sets no key") {
  const lgtest::TempDir dir("nn-generation-config");
  CHECK(GenerationConfig::load(dir.path()) == GenerationConfig{});
  const fs::path file = dir / "generation_config.json";
  write_file(file, kTinyLlama);
  CHECK(GenerationConfig::load(dir.path()) == GenerationConfig::parse(kTinyLlama, file));
  CHECK(GenerationConfig::load(file) == GenerationConfig::parse(kTinyLlama, file));

  const fs::path missing = dir / "elsewhere.json";
  CHECK(refusal([&] { return GenerationConfig::load(missing); }, missing).find("cannot open: No such file") !=
        std::string::npos);
  fs::remove(file);
  fs::create_symlink(missing, file);  // a link to nowhere is not an absent file
  CHECK(refusal([&] { return GenerationConfig::load(dir.path()); }, file).find("cannot open") != std::string::npos);
}

TEST_CASE("a generation_config.json that is not a small regular file is refused before it is read") {
  const lgtest::TempDir dir("nn-generation-config");
  const fs::path file = dir / "generation_config.json";
  write_file(file, "{}");
  fs::resize_file(file, (std::uintmax_t{16} << 20U) + 1);  // sparse: nothing is written
  CHECK(refusal([&] { return GenerationConfig::load(dir.path()); }, file)
            .find("is larger than the 16777216 bytes allowed (16 MiB)") != std::string::npos);
  fs::remove(file);
  REQUIRE(::mkfifo(file.c_str(), 0600) == 0);  // would block a reader forever
  CHECK(refusal([&] { return GenerationConfig::load(dir.path()); }, file).find("is not a regular file (a FIFO)") !=
        std::string::npos);
}

TEST_CASE("generation_config.json text that is not a JSON object, repeats a key or nests too deep is refused") {
  check_generation_refused("{\"eos_token_id\": ", "the generation config is not valid JSON");
  check_generation_refused("[1, 2]", "the generation config must be a JSON object, found [1,2]");
  check_generation_refused(R"({"eos_token_id": 2, "eos_token_id": 3})",
                           "the generation config has the key 'eos_token_id' twice in one object");
  check_generation_refused(R"({"bos_token_id": 1, "x": {"a": 1, "a": 2}})", "has the key 'a' twice in one object");
  check_generation_refused(std::string(R"({"x": )") + std::string(100, '[') + std::string(100, ']') + "}",
                           "nests deeper than 64 levels");
  check_generation_refused(std::string("{\"bos_token_id\": 1}\0 ", 20), "NUL byte");
}

TEST_CASE("token ids of generation_config.json that are not ids are refused naming the key and the value") {
  check_generation_refused(R"({"eos_token_id": "two"})",
                           R"(key 'eos_token_id' must be a token id or a list of them, found "two")");
  check_generation_refused(R"({"eos_token_id": [2, -1]})",
                           "key 'eos_token_id' must be a token id or a list of them, found [2,-1]");
  check_generation_refused(R"({"eos_token_id": 16777217})", "key 'eos_token_id' must be a token id");
  check_generation_refused(R"({"eos_token_id": 2.0})", "key 'eos_token_id' must be a token id");
  check_generation_refused(R"({"bos_token_id": [1]})", "key 'bos_token_id' must be one token id, found [1]");
  check_generation_refused(R"({"bos_token_id": true})", "key 'bos_token_id' must be one token id, found true");
  std::string many = R"({"eos_token_id": [0)";
  for (int i = 1; i <= 1024; ++i) many += "," + std::to_string(i);
  check_generation_refused(many + "]}", "key 'eos_token_id' lists more than 1024 tokens");
}

TEST_CASE("special_tokens refuses an id of generation_config.json outside the model's vocabulary, naming the file") {
  const fs::path source = "/models/tiny/generation_config.json";
  const GenerationConfig bos = GenerationConfig::parse(R"({"bos_token_id": 1000})", source);
  CHECK(refusal([&] { return bos.special_tokens(model()); }, source)
            .find("key 'bos_token_id' names token 1000, outside the model's vocabulary (vocab_size 1000 in "
                  "config.json)") != std::string::npos);
  const GenerationConfig eos = GenerationConfig::parse(R"({"eos_token_id": [2, 999, 4096]})", source);
  CHECK(refusal([&] { return eos.special_tokens(model()); }, source).find("key 'eos_token_id' names token 4096") !=
        std::string::npos);
  CHECK(GenerationConfig::parse(R"({"eos_token_id": [2, 999]})", source).special_tokens(model()).eos ==
        std::vector<int>{2, 999});
}
