// Host tests of lazygraph::nn::Tokenizer on small hand-made tokenizer.json files, one per part of the pipeline
// (the ids worked out by hand from the rules of the `tokenizers` library), one test per refused input, and the
// checked-in tokenizers that `tokenizers` itself trained, against its ids (tests/nn/data/tokenizers/).
#include <doctest/doctest.h>

#include "common/temp_dir.hpp"
#include "common/tokenizer_files.hpp"

#include <lazygraph/nn/tokenizer.hpp>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using namespace lazygraph::nn;
namespace fs = std::filesystem;

namespace {

using namespace lgtest;

/// The message of the TokenizerError that loading `json` throws ("" when it loads).
std::string load_error(const std::string& json) {
  try {
    const Loaded loaded(json);
  } catch (const TokenizerError& e) {
    return e.what();
  }
  return "";
}

const std::string kLlama3Split =
    R"({"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false})";

/// A BPE whose every piece of interest is one token (ignore_merges), so that ids show how a pre-tokenizer cut.
Parts pieces(const std::vector<std::string>& vocab, const std::string& pre_tokenizer) {
  Parts p;
  p.model = bpe(vocab, {}, R"("ignore_merges":true)");
  p.pre_tokenizer = pre_tokenizer;
  return p;
}

}  // namespace

TEST_CASE("a byte-level BPE merges each pre-token by rank and decodes back to the text") {
  const Loaded tok(json_of(hello_world()));
  CHECK(tok->encode("hello world") == Ids{11, 12, 3, 6, 2, 7});
  CHECK(tok->decode(Ids{11, 12, 3, 6, 2, 7}) == "hello world");
  CHECK(tok->encode("hello world!") == Ids{11, 12, 3, 6, 2, 7, 13});
  CHECK(tok->size() == 14);
  CHECK(tok->id_of("hello") == 11);
  CHECK(tok->token_of(12) == "Ġw");
  CHECK_FALSE(tok->token_of(14).has_value());
  CHECK_FALSE(tok->id_of("world").has_value());
  CHECK(tok->encode("") == Ids{});
}

TEST_CASE("BPE merges the lowest-ranked pair first, the leftmost of equal ranks") {
  Parts p;
  p.model = bpe({"a", "b", "ab", "bb"}, {"b b", "a b"});
  CHECK(Loaded(json_of(p))->encode("abb") == Ids{0, 3});
  p.model = bpe({"a", "b", "ab", "bb"}, {"a b", "b b"});
  CHECK(Loaded(json_of(p))->encode("abb") == Ids{2, 1});
  p.model = bpe({"a", "aa"}, {"a a"});
  CHECK(Loaded(json_of(p))->encode("aaa") == Ids{1, 0});                            // leftmost first
  p.model = R"({"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]]})";  // merges as pairs
  CHECK(Loaded(json_of(p))->encode("abab") == Ids{2, 2});
}

TEST_CASE("ignore_merges takes a pre-token that is in the vocabulary as one token") {
  Parts p;
  p.model = bpe({"a", "b", "c", "abc"}, {}, R"("ignore_merges":true)");
  CHECK(Loaded(json_of(p))->encode("abc") == Ids{3});
  p.model = bpe({"a", "b", "c", "abc"}, {}, R"("ignore_merges":false)");
  CHECK(Loaded(json_of(p))->encode("abc") == Ids{0, 1, 2});
}

TEST_CASE("unknown characters become unk_token, fused into one when fuse_unk, or vanish without one") {
  Parts p;
  p.model = bpe({"<unk>", "a"}, {}, R"("unk_token":"<unk>","fuse_unk":true)");
  CHECK(Loaded(json_of(p))->encode("xya") == Ids{0, 1});
  p.model = bpe({"<unk>", "a"}, {}, R"("unk_token":"<unk>","fuse_unk":false)");
  CHECK(Loaded(json_of(p))->encode("xya") == Ids{0, 0, 1});
  p.model = bpe({"<unk>", "a"}, {});
  CHECK(Loaded(json_of(p))->encode("xya") == Ids{1});
}

TEST_CASE("continuing_subword_prefix and end_of_word_suffix spell the symbols inside and at the end of a word") {
  Parts p;
  p.model = bpe({"a", "##b", "##c", "##bc", "a##bc"}, {"##b ##c"}, R"("continuing_subword_prefix":"##")");
  CHECK(Loaded(json_of(p))->encode("abc") == Ids{0, 3});
  p.model = bpe({"a", "b</w>", "ab</w>"}, {"a b</w>"}, R"("end_of_word_suffix":"</w>")");
  CHECK(Loaded(json_of(p))->encode("ab") == Ids{2});
}

TEST_CASE("byte_fallback spells a character outside the vocabulary as its byte tokens, and decoding joins them") {
  const Loaded tok(json_of(metaspace()));
  // "▁" + "é": "▁" is a piece, é is not: its UTF-8 bytes C3 A9 are <0xC3> (id 3 + 0xC3) and <0xA9>.
  CHECK(tok->encode("é", {.add_special_tokens = false}) == Ids{259, 3 + 0xC3, 3 + 0xA9});
  CHECK(tok->decode(Ids{259, 3 + 0xC3, 3 + 0xA9}) == "é");
  // A cut character decodes to one U+FFFD per byte, as tokenizers' ByteFallback decoder.
  CHECK(tok->decode(Ids{260, 3 + 0xC3}) == "a\xEF\xBF\xBD");
  CHECK(tok->decode(Ids{260, 3 + 0xE2, 3 + 0x82}) == "a\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST_CASE("Metaspace writes spaces as the replacement and prepends it to the first piece of the text only") {
  const Loaded tok(json_of(metaspace()));
  CHECK(tok->encode("ab a") == Ids{1, 265, 262});
  CHECK(tok->encode("ab a", {.add_special_tokens = false}) == Ids{265, 262});
  CHECK(tok->decode(Ids{1, 265, 262}) == "<s> ab a");  // Strip removes a space only at the very start
  CHECK(tok->decode(Ids{1, 265, 262}, true) == "ab a");
  // After an added token, a piece does not begin the text: no replacement is prepended ("first").
  CHECK(tok->encode("</s>ab", {.add_special_tokens = false}) == Ids{2, 264});
  CHECK(tok->is_special(1));
  CHECK_FALSE(tok->is_special(260));

  Parts always = metaspace();
  always.pre_tokenizer = R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true})";
  const Loaded split(json_of(always));
  CHECK(split->encode("</s>ab b", {.add_special_tokens = false}) == Ids{2, 265, 263});
  Parts never = metaspace();
  never.pre_tokenizer = R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"never","split":true})";
  CHECK(Loaded(json_of(never))->encode("ab b", {.add_special_tokens = false}) == Ids{264, 263});
}

TEST_CASE("the Metaspace decoder drops the replacement in the first token and turns the others into spaces") {
  Parts p = metaspace();
  p.decoder = R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true})";
  const Loaded tok(json_of(p));
  CHECK(tok->decode(Ids{262, 263}) == "a b");
  CHECK(tok->decode(Ids{260, 263}) == "a b");
  p.decoder = R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"never","split":true})";
  CHECK(Loaded(json_of(p))->decode(Ids{262, 263}) == " a b");
}

TEST_CASE("special tokens in the text are matched whole, or split as text when split_special_tokens") {
  Parts p = hello_world();
  p.model =
      bpe({"h", "e", "l", "o", "Ġ", "w", "r", "d", "he", "ll", "hell", "hello", "Ġw", "!", "<", "|", ">", "x", "<|x|>"},
          {"h e", "l l", "he ll", "hell o", "Ġ w"});
  p.added_tokens =
      R"([{"id":18,"content":"<|x|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}])";
  const Loaded tok(json_of(p));
  CHECK(tok->encode("hello<|x|>hello") == Ids{11, 18, 11});
  CHECK(tok->encode("hello<|x|>hello", {.split_special_tokens = true}) == Ids{11, 14, 15, 17, 15, 16, 11});
  CHECK(tok->decode(Ids{11, 18, 11}) == "hello<|x|>hello");
  CHECK(tok->decode(Ids{11, 18, 11}, true) == "hellohello");
  CHECK(tok->is_special(18));
}

TEST_CASE("added tokens: the longest match wins, lstrip and rstrip take whitespace, single_word needs word edges") {
  Parts p;
  p.model = bpe({"a", " ", "b"}, {});
  p.added_tokens =
      R"([{"id":3,"content":"<t>","single_word":false,"lstrip":true,"rstrip":true,"normalized":false,"special":false},)"
      R"({"id":4,"content":"<t>>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":false},)"
      R"({"id":5,"content":"ab","single_word":true,"lstrip":false,"rstrip":false,"normalized":false,"special":false}])";
  const Loaded tok(json_of(p));
  CHECK(tok->size() == 6);
  CHECK(tok->encode("a  <t>  b") == Ids{0, 3, 2});
  CHECK(tok->encode("a <t>> b") == Ids{0, 1, 4, 1, 2});
  CHECK(tok->encode("ab a") == Ids{5, 1, 0});
  CHECK(tok->encode("aab") == Ids{0, 0, 2});  // not at a word's start: not the token
}

TEST_CASE("added tokens with normalized true are matched after the normalizer, spelled as it writes them") {
  Parts p;
  p.model = bpe({"a", "b", "c"}, {});
  p.normalizer = R"({"type":"Lowercase"})";
  p.added_tokens =
      R"([{"id":3,"content":"AB","single_word":false,"lstrip":false,"rstrip":false,"normalized":true,"special":false}])";
  const Loaded tok(json_of(p));
  CHECK(tok->encode("cAbc") == Ids{2, 3, 2});
  CHECK(tok->encode("cabc") == Ids{2, 3, 2});
}

TEST_CASE("normalizers: NFC composes, Lowercase, Replace by string and regex, Prepend, Strip, in a Sequence") {
  Parts p;
  p.model = bpe({"é", "e", "x", "_", "i", "\xCC\x87", "a"}, {});
  p.normalizer = R"({"type":"NFC"})";
  CHECK(Loaded(json_of(p))->encode("e\xCC\x81") == Ids{0});
  p.normalizer = R"({"type":"NFD"})";
  CHECK(Loaded(json_of(p))->encode("\xC3\xA9").size() == 1);  // e and U+0301, which is not in the vocabulary
  p.normalizer = R"({"type":"Lowercase"})";
  CHECK(Loaded(json_of(p))->encode("X\xC4\xB0") == Ids{2, 4, 5});  // U+0130 lowercases to i + U+0307
  p.normalizer = R"({"type":"Sequence","normalizers":[{"type":"Strip","strip_left":true,"strip_right":true},)"
                 R"({"type":"Replace","pattern":{"Regex":"\\s+"},"content":"_"},{"type":"Prepend","prepend":"x"},)"
                 R"({"type":"Replace","pattern":{"String":"a"},"content":"e"}]})";
  CHECK(Loaded(json_of(p))->encode("\u3000 a \t a \n") == Ids{2, 1, 3, 1});
}

TEST_CASE("Split cuts by a regex with each behavior, and invert swaps what matched") {
  const std::vector<std::string> vocab{"a", "b", "-", "a-", "-b", "--", "a--", "--b", "a-b", "ab"};
  const auto split = [&](const std::string& behavior, bool invert = false) {
    return Loaded(json_of(pieces(vocab, R"({"type":"Split","pattern":{"String":"-"},"behavior":")" + behavior +
                                            R"(","invert":)" + (invert ? "true" : "false") + "}")))
        ->encode("a--b");
  };
  CHECK(split("Isolated") == Ids{0, 2, 2, 1});
  CHECK(split("Removed") == Ids{0, 1});
  CHECK(split("MergedWithPrevious") == Ids{3, 2, 1});
  CHECK(split("MergedWithNext") == Ids{0, 2, 4});
  CHECK(split("Contiguous") == Ids{0, 5, 1});
  CHECK(split("Removed", true) == Ids{2, 2});
}

TEST_CASE("Llama 3's split regex through PCRE2 cuts contractions, letters, three digits at a time and spaces") {
  const std::vector<std::string> vocab{"I",    "'M", " fine", "123", "4",      " ",
                                       "\n\n", "  ", "!!",    " 42", "!!\n\n", "!\xE1\xA0\x8E!"};
  Parts p = pieces(vocab, kLlama3Split);
  const Loaded tok(json_of(p));
  CHECK(tok->encode("I'M fine1234") == Ids{0, 1, 2, 3, 4});
  CHECK(tok->encode("!!\n\n   fine") == Ids{10, 7, 2});  // punctuation takes the newlines after it
  CHECK(tok->encode("\n\n 42") == Ids{6, 5, 4});         // never " 42": digits go alone ("2" is not in the vocabulary)
  // U+180E is not White_Space (since Unicode 6.3) and not \s to Oniguruma, tokenizers' engine, though it is to
  // PCRE2: "[^\s\p{L}\p{N}]+" takes it with the punctuation around it.
  CHECK(tok->encode("!\xE1\xA0\x8E!") == Ids{11});
}

TEST_CASE("Digits cuts numbers into single digits or runs, and a Sequence of pre-tokenizers applies each in order") {
  const std::vector<std::string> vocab{"ab", "1", "2", "12", "Ġ", "Ġab"};
  CHECK(Loaded(json_of(pieces(vocab, R"({"type":"Digits","individual_digits":true})")))->encode("ab12") ==
        Ids{0, 1, 2});
  CHECK(Loaded(json_of(pieces(vocab, R"({"type":"Digits","individual_digits":false})")))->encode("ab12") == Ids{0, 3});
  const std::string sequence =
      R"({"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},)" + kByteLevel + "]}";
  CHECK(Loaded(json_of(pieces(vocab, sequence)))->encode("ab12 ab") == Ids{0, 1, 2, 5});
}

TEST_CASE("ByteLevel with add_prefix_space puts a space before each part that lacks one") {
  Parts p = hello_world();
  p.pre_tokenizer = R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true})";
  p.model = bpe({"Ġ", "h", "i", "Ġh", "Ġhi"}, {"Ġ h", "Ġh i"});
  CHECK(Loaded(json_of(p))->encode("hi hi") == Ids{4, 4});
}

TEST_CASE(
    "decoders: ByteLevel maps the alphabet back to bytes and reads them as UTF-8 with U+FFFD where they are not") {
  Parts p = hello_world();
  p.model = bpe({"Ã", "©", "Ġ", "x"}, {});  // "é" is C3 A9: the byte-level characters Ã and ©
  const Loaded tok(json_of(p));
  CHECK(tok->encode("é") == Ids{0, 1});
  CHECK(tok->decode(Ids{0, 1}) == "é");
  CHECK(tok->decode(Ids{3, 0}) == "x\xEF\xBF\xBD");
  CHECK(tok->decode(Ids{2, 3}) == " x");
}

TEST_CASE("the TemplateProcessing post-processor adds its special tokens unless add_special_tokens is false") {
  Parts p = hello_world();
  p.post_processor =
      R"({"type":"Sequence","processors":[{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false,"use_regex":true},)"
      R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"!","type_id":0}},{"Sequence":{"id":"A","type_id":0}},)"
      R"({"SpecialToken":{"id":"e","type_id":0}}],"pair":[],"special_tokens":{"!":{"id":"!","ids":[13],"tokens":["!"]},)"
      R"("e":{"id":"e","ids":[1],"tokens":["e"]}}}]})";
  const Loaded tok(json_of(p));
  CHECK(tok->encode("hello") == Ids{13, 11, 1});
  CHECK(tok->encode("hello", {.add_special_tokens = false}) == Ids{11});
}

TEST_CASE("Tokenizer::load picks tokenizer.json in a folder, else tokenizer.model, and names a folder with neither") {
  const lgtest::TempDir dir("tokenizer-load");
  try {
    (void)Tokenizer::load(dir.path());
    FAIL("no error");
  } catch (const TokenizerError& e) {
    CHECK(std::string(e.what()) == dir.path().string() + ": has neither tokenizer.json nor tokenizer.model");
    CHECK(e.file() == dir.path());
  }
  lgtest::write_file(dir / "tokenizer.model", "not a model");
  if (Tokenizer::sentencepiece_supported()) {
    CHECK_THROWS_WITH_AS((void)Tokenizer::load(dir.path()), doctest::Contains("not a SentencePiece model"),
                         TokenizerError);
  } else {
    CHECK_THROWS_WITH_AS((void)Tokenizer::load(dir.path()), doctest::Contains("without SentencePiece"), TokenizerError);
  }
  lgtest::write_file(dir / "tokenizer.json", json_of(hello_world()));
  CHECK(Tokenizer::load(dir.path()).encode("hello") == Ids{11});
  CHECK(Tokenizer::load(dir / "tokenizer.json").file() == dir / "tokenizer.json");
}

TEST_CASE("text that is not UTF-8 is refused with the offset of its first bad byte") {
  const Loaded tok(json_of(hello_world()));
  for (const auto& [text, offset] : std::vector<std::pair<std::string, int>>{
           {"hello\xFFworld", 5}, {"he\xC3", 2}, {"\xED\xA0\x80", 0}, {"ok\xF4\x90\x80\x80", 2}, {"\xC0\xAF", 0}}) {
    CAPTURE(offset);
    const std::string expected = "is not UTF-8: byte " + std::to_string(offset) + " ";
    CHECK_THROWS_WITH_AS((void)tok->encode(text), doctest::Contains(expected.c_str()), TokenizerError);
  }
}

TEST_CASE("a malformed tokenizer.json is refused naming the file and the problem") {
  CHECK(load_error("{\"model\": ").find("tokenizer.json: the tokenizer is not valid JSON") != std::string::npos);
  CHECK(load_error(std::string(100, '[') + std::string(100, ']')).find("nests deeper than 64 levels") !=
        std::string::npos);
  CHECK(load_error(R"({"model":{},"model":{}})").find("the key 'model' twice") != std::string::npos);
  CHECK(load_error("[]").find("the top level: is an array, not an object") != std::string::npos);
  CHECK(load_error("{}").find("the top level: has no member 'model'") != std::string::npos);
  CHECK(load_error(R"({"version":"2.0","model":{}})").find("version: unknown tokenizer.json version '2.0'") !=
        std::string::npos);
  Parts p = hello_world();
  p.model = R"({"type":"BPE","vocab":{"a":"zero"},"merges":[]})";
  CHECK(load_error(json_of(p)).find("model.vocab.a: is a string, not an integer") != std::string::npos);
}

TEST_CASE("a merge naming a token that is not in the vocabulary is refused naming the merge") {
  Parts p;
  p.model = bpe({"a", "b", "ab"}, {"a b", "a c"});
  CHECK(load_error(json_of(p)).find("model.merges[1]: the merge names the token 'c', which is not in model.vocab") !=
        std::string::npos);
  p.model = bpe({"a", "b"}, {"a b"});
  CHECK(load_error(json_of(p)).find("model.merges[0]: the merge names the token 'ab'") != std::string::npos);
  p.model = bpe({"a", "b", "ab"}, {"a b c"});
  CHECK(load_error(json_of(p)).find("model.merges[0]: the merge \"a b c\" is not two tokens") != std::string::npos);
}

TEST_CASE("types this library does not implement are refused by name") {
  Parts p = hello_world();
  p.model = R"({"type":"WordPiece","vocab":{},"unk_token":"[UNK]"})";
  CHECK(load_error(json_of(p)).find("model.type: the model 'WordPiece' is not implemented") != std::string::npos);
  p = hello_world();
  p.normalizer = R"({"type":"Sequence","normalizers":[{"type":"BertNormalizer"}]})";
  CHECK(load_error(json_of(p)).find("normalizer.normalizers[0].type: the normalizer 'BertNormalizer' is not") !=
        std::string::npos);
  p = hello_world();
  p.pre_tokenizer = R"({"type":"Whitespace"})";
  CHECK(load_error(json_of(p)).find("pre_tokenizer.type: the pre-tokenizer 'Whitespace' is not implemented") !=
        std::string::npos);
  p = hello_world();
  p.decoder = R"({"type":"WordPiece","prefix":"##"})";
  CHECK(load_error(json_of(p)).find("decoder.type: the decoder 'WordPiece' is not implemented") != std::string::npos);
  p = hello_world();
  p.post_processor = R"({"type":"BertProcessing"})";
  CHECK(load_error(json_of(p)).find("post_processor.type: the post-processor 'BertProcessing' is not") !=
        std::string::npos);
  p = hello_world();
  p.pre_tokenizer = R"({"type":"Split","pattern":{"Regex":"(unclosed"},"behavior":"Isolated","invert":false})";
  CHECK(load_error(json_of(p)).find("pre_tokenizer.pattern.Regex: PCRE2 refuses the regex at offset") !=
        std::string::npos);
  p = hello_world();
  p.pre_tokenizer = R"({"type":"Split","pattern":{"String":"x"},"behavior":"Sideways","invert":false})";
  CHECK(load_error(json_of(p)).find("pre_tokenizer.behavior: unknown behavior 'Sideways'") != std::string::npos);
}

TEST_CASE("a tokenizer.json over 256 MiB is refused before it is read") {
  const lgtest::TempDir dir("tokenizer-big");
  const fs::path file = dir / "tokenizer.json";
  {
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(Tokenizer::max_json_bytes + 1)) == 0);  // sparse: no disk used
    ::close(fd);
  }
  const std::string expected = file.string() + ": is larger than the 268435456 bytes allowed (256 MiB)";
  CHECK_THROWS_WITH_AS((void)Tokenizer::from_json(file), doctest::Contains(expected.c_str()), TokenizerError);
}

TEST_CASE("copies of a tokenizer share one model and encode alike") {
  std::optional<Tokenizer> copy;
  {
    const Loaded tok(json_of(hello_world()));
    copy = *tok;
  }
  CHECK(copy->encode("hello world") == Ids{11, 12, 3, 6, 2, 7});
}

TEST_CASE("tokenizers trained by the tokenizers library encode and decode their cases exactly as it does") {
  // tests/nn/data/tokenizers/<name>/: tokenizer.json and cases.jsonl, written by tests/nn/crosscheck/
  // make_tokenizer_fixtures.py with tokenizers 0.23 (ids with and without special tokens, decoded with and without).
  const fs::path data = LAZYGRAPH_TOKENIZER_DATA;
  for (const char* name :
       {"byte_level_llama3", "byte_level_qwen2", "sentencepiece_bpe_legacy", "sentencepiece_bpe_metaspace"}) {
    CAPTURE(name);
    const Tokenizer tok = Tokenizer::load(data / name);
    std::ifstream cases(data / name / "cases.jsonl");
    REQUIRE(cases.good());
    std::string line;
    int count = 0;
    while (std::getline(cases, line)) {
      const nlohmann::json c = nlohmann::json::parse(line);
      const std::string text = c.at("text").get<std::string>();
      CAPTURE(text);
      const Ids ids = c.at("ids").get<Ids>();
      CHECK(tok.encode(text) == ids);
      CHECK(tok.encode(text, {.add_special_tokens = false}) == c.at("ids_no_special").get<Ids>());
      CHECK(tok.decode(ids) == c.at("decoded").get<std::string>());
      CHECK(tok.decode(ids, true) == c.at("decoded_skip").get<std::string>());
      ++count;
    }
    CHECK(count >= 100);
  }
}

TEST_CASE("characters newer than PCRE2's Unicode tables are split by their category, as tokenizers splits them") {
  // Debian 12's PCRE2 (10.42) knows Unicode 14, tokenizers Unicode 15. On the GPU machine's crosscheck (tokenizers
  // 0.23.2) the Llama 3 pattern cut two of 10,500 texts differently while PCRE2 read Unicode 15's characters as
  // unassigned: U+317CB (CJK extension H, a letter) before "'S", and U+1D2C0 (a Kaktovik numeral, a number).
  const std::string cjk_h = "\xF0\xB1\x9F\x8B";     // U+317CB
  const std::string kaktovik = "\xF0\x9D\x8B\x80";  // U+1D2C0
  const std::vector<std::string> vocab{" " + cjk_h, "'S", ":", kaktovik + kaktovik + kaktovik, kaktovik};
  const Loaded tok(json_of(pieces(vocab, kLlama3Split)));
  CHECK(tok->encode(" " + cjk_h + "'S") == Ids{0, 1});  // a letter, then the contraction (PCRE2 alone: " 𱟋'", "S")
  CHECK(tok->encode(":" + kaktovik + kaktovik + kaktovik + kaktovik) == Ids{2, 3, 4});  // numbers, three at a time
}

TEST_CASE("a vocabulary id far past the vocabulary's size is refused, so that a small file cannot cost gigabytes") {
  Parts p;
  p.model = R"({"type":"BPE","vocab":{"a":0,"b":1000000000},"merges":[]})";
  CHECK(load_error(json_of(p)).find("model.vocab: the id 1000000000 is far past the vocabulary's 2 tokens") !=
        std::string::npos);
  p.model = R"({"type":"BPE","vocab":{"a":0,"b":1025},"merges":[]})";  // holes are fine within a bound
  CHECK(Loaded(json_of(p))->encode("ab") == Ids{0, 1025});
  p.model = R"({"type":"BPE","vocab":{},"merges":[]})";
  CHECK(Loaded(json_of(p))->encode("ab").empty());
}

TEST_CASE("byte-level tokenizers decode what they encoded back to the very text, for random Unicode") {
  // Byte-level BPE without a normalizer is lossless: a property that needs no oracle, over text of every plane.
  const Tokenizer tok = Tokenizer::load(fs::path(LAZYGRAPH_TOKENIZER_DATA) / "byte_level_llama3");
  std::uint32_t state = 12345;
  const auto next = [&] {
    state = state * 1664525U + 1013904223U;
    return state >> 8U;
  };
  for (int n = 0; n < 300; ++n) {
    std::string text;
    const int length = static_cast<int>(next() % 24);
    for (int i = 0; i < length; ++i) {
      char32_t c = 0;
      switch (next() % 4) {
        case 0:
          c = U'a' + next() % 26;
          break;
        case 1:
          c = U" \n\t'.,0123456789"[next() % 16];
          break;
        case 2:
          c = 0x80 + next() % 0x2F80;
          break;
        default:
          c = 0x3000 + next() % 0x10C000;
          break;
      }
      if (c >= 0xD800 && c <= 0xDFFF) c = U'?';
      if (c > 0x10FFFF) c = U'!';
      if (c < 0x80) {
        text += static_cast<char>(c);
      } else if (c < 0x800) {
        text += static_cast<char>(0xC0 | (c >> 6));
        text += static_cast<char>(0x80 | (c & 0x3F));
      } else if (c < 0x10000) {
        text += static_cast<char>(0xE0 | (c >> 12));
        text += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        text += static_cast<char>(0x80 | (c & 0x3F));
      } else {
        text += static_cast<char>(0xF0 | (c >> 18));
        text += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
        text += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        text += static_cast<char>(0x80 | (c & 0x3F));
      }
    }
    CAPTURE(text);
    REQUIRE(tok.decode(tok.encode(text, {.add_special_tokens = false})) == text);
  }
}

TEST_CASE("a damaged tokenizer.json is loaded or refused with a TokenizerError, never anything else") {
  // Each of 300 copies of a small tokenizer.json with bytes changed, cut or repeated: loading (and encoding with
  // what loads) must end in a TokenizerError or succeed, without a crash or another exception.
  const std::string original = json_of(metaspace());
  std::uint32_t state = 7;
  const auto next = [&] {
    state = state * 1664525U + 1013904223U;
    return state >> 8U;
  };
  const lgtest::TempDir dir("tokenizer-damaged");
  int refused = 0;
  for (int n = 0; n < 300; ++n) {
    std::string text = original;
    const int changes = 1 + static_cast<int>(next() % 3);
    for (int k = 0; k < changes; ++k) {
      const std::size_t at = next() % text.size();
      switch (next() % 4) {
        case 0:
          text[at] = "{}[]\",:0123456789-etnul \\"[next() % 26];
          break;
        case 1:
          text.erase(at, 1 + next() % 8);
          break;
        case 2:
          text.insert(at, text.substr(at, 1 + next() % 40));
          break;
        default:
          text.resize(at);
          break;
      }
    }
    lgtest::write_file(dir / "tokenizer.json", text);
    try {
      const Tokenizer tok = Tokenizer::from_json(dir / "tokenizer.json");
      (void)tok.decode(tok.encode("ab a \xC3\xA9 </s>"));
    } catch (const TokenizerError& e) {
      CHECK(std::string(e.what()).starts_with((dir / "tokenizer.json").string() + ": "));
      ++refused;
    }
  }
  CHECK(refused > 100);  // most damage is noticed
}

TEST_CASE("a tokenizer encodes on several threads at once as on one") {
  const Tokenizer tok = Tokenizer::load(fs::path(LAZYGRAPH_TOKENIZER_DATA) / "byte_level_qwen2");
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) {
    texts.push_back("line " + std::to_string(i) + ": the quick brown fox, 日本語 and 😀 x" + std::to_string(i * 7919));
  }
  std::vector<Ids> expected;
  for (const std::string& text : texts) expected.push_back(tok.encode(text));
  std::vector<std::vector<Ids>> got(4);
  {
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < got.size(); ++t) {
      threads.emplace_back([&, t] {
        for (int round = 0; round < 4; ++round) {
          for (const std::string& text : texts) got[t].push_back(tok.encode(text));
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  for (const std::vector<Ids>& results : got) {
    REQUIRE(results.size() == 4 * texts.size());
    for (std::size_t i = 0; i < results.size(); ++i) CHECK(results[i] == expected[i % texts.size()]);
  }
}
