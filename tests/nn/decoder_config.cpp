// DecoderConfig's paged KV cache (kv_block_size, kv_blocks) and the checks a paged decoder makes on its block tables
// before any GPU work (nn/decoder_config.hpp), on the host.
#include <doctest/doctest.h>

#include <vector>

#include <lazygraph/nn.hpp>

using namespace lazygraph;
using namespace lazygraph::nn;

namespace {
/// A small paged config: 4 blocks of 16 per sequence of 64 positions, a pool of 12.
DecoderConfig small_paged_config() {
  DecoderConfig c;
  c.d = 128;
  c.heads = 4;
  c.layers = 2;
  c.ffn = 256;
  c.vocab = 512;
  c.context = 64;
  c.max_batch = 8;
  c.kv_block_size = 16;
  c.kv_blocks = 12;
  return c;
}
}  // namespace

TEST_CASE("a paged config is valid with blocks of 16 or 32 and reaches contexts beyond the contiguous limit") {
  DecoderConfig c = small_paged_config();
  CHECK(c.paged());
  CHECK(c.kv_table_width() == 4);
  CHECK_NOTHROW(c.validate());
  c.kv_block_size = 32;
  CHECK(c.kv_table_width() == 2);
  CHECK_NOTHROW(c.validate());
  c.context = 70;  // a last block only partly reachable
  CHECK(c.kv_table_width() == 3);
  c.context = kMaxPagedContext;
  c.attention_blocks = 0;  // split by positions: one block's shared memory cannot hold 131072 scores
  CHECK_NOTHROW(c.validate());
  DecoderConfig contiguous = small_paged_config();
  contiguous.kv_block_size = 0;
  contiguous.kv_blocks = 0;
  CHECK_FALSE(contiguous.paged());
  CHECK(contiguous.kv_table_width() == 0);
  contiguous.context = kMaxContext + 1;
  CHECK_THROWS_WITH_AS(contiguous.validate(), doctest::Contains("a paged cache, kv_block_size, reaches 131072"),
                       UsageError);
}

TEST_CASE("a paged config refuses bad block sizes and pools and what the paged cache does not run, by name") {
  const auto refused = [](DecoderConfig c, const char* why) {
    CAPTURE(why);
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains(why), UsageError);
  };
  DecoderConfig c = small_paged_config();
  c.kv_block_size = 8;
  refused(c, "kv_block_size (8) must be 16 or 32");
  c = small_paged_config();
  c.kv_blocks = 0;
  refused(c, "kv_blocks (0) must be at least 1 with kv_block_size");
  c = small_paged_config();
  c.kv_block_size = 0;
  refused(c, "kv_blocks (12) needs a paged cache");
  c = small_paged_config();
  c.context = kMaxPagedContext + 16;
  c.attention_blocks = 0;
  refused(c, "context (131088) must be at most 131072 with a paged cache");
  c = small_paged_config();
  c.context = 65536;  // 4096 blocks: 278528 bytes of scores and table, beyond one block's shared memory
  refused(c, "attention_blocks 1 cannot hold the scores of a context of 65536 positions");
  c = small_paged_config();
  c.backend = DecoderBackend::persistent;
  refused(c, "the paged KV cache (kv_block_size) does not run on the persistent backend");
  c = small_paged_config();
  c.fused = false;
  refused(c, "the paged KV cache (kv_block_size) does not run the unfused attention block");
  c = small_paged_config();
  c.qk_norm = true;  // Qwen3's, and OLMoE's over the whole projection: PagedAttention::qk_norm_rope_append
  CHECK_NOTHROW(c.validate());
  c.qk_norm_whole = true;
  CHECK_NOTHROW(c.validate());
}

TEST_CASE("a paged batch's tables are checked for size, pool bounds and blocks written under another row") {
  const DecoderConfig c = small_paged_config();
  const std::vector<TokenAt> steps{{.token = 1, .position = 17}, {.token = 2, .position = 3}};
  // Row 0 reaches its table's entries 0 and 1 (position 17), row 1 entry 0; the rest is padding, never read.
  std::vector<int> tables{5, 9, -1, -1, 2, -1, -1, -1};
  CHECK_NOTHROW(check_paged_batch(c, steps, tables));
  CHECK_THROWS_WITH_AS(check_paged_batch(c, steps, std::span<const int>(tables).first(7)),
                       doctest::Contains("tables hold 7 ints, not 2 rows x 4 (kv_table_width)"), UsageError);
  tables[1] = 12;
  CHECK_THROWS_WITH_AS(check_paged_batch(c, steps, tables),
                       doctest::Contains("sequence 0's table entry 1 (12) is outside the pool [0, kv_blocks = 12)"),
                       UsageError);
  tables[1] = 2;  // row 0 writes block 2 at entry 1, which row 1 holds at entry 0
  CHECK_THROWS_WITH_AS(check_paged_batch(c, steps, tables),
                       doctest::Contains("sequence 0 writes block 2, which sequence 1's table holds at entry 0"),
                       UsageError);
  // Rows of one sequence (a prompt's) share their blocks at the same entries.
  const std::vector<TokenAt> prompt_rows{{.token = 1, .position = 16}, {.token = 2, .position = 17}};
  const std::vector<int> same{5, 9, -1, -1, 5, 9, -1, -1};
  CHECK_NOTHROW(check_paged_batch(c, prompt_rows, same));
  DecoderConfig contiguous = small_paged_config();
  contiguous.kv_block_size = 0;
  contiguous.kv_blocks = 0;
  CHECK_THROWS_WITH_AS(check_paged_batch(contiguous, steps, same),
                       doctest::Contains("block tables are for a paged cache"), UsageError);
}

TEST_CASE("a paged batch's written blocks are found among pools of thousands of blocks, whatever their low bits") {
  DecoderConfig c = small_paged_config();
  c.kv_blocks = 10000;
  const std::vector<TokenAt> steps{{.token = 1, .position = 17}, {.token = 2, .position = 17}};
  // Row 0 writes block 5000 (its entry 1), row 1 block 8000. Row 1's entry 0 holds 904 = 5000 - 4096 and 5000 + 4096
  // would be 9096: blocks that share the written ones' low bits but are other blocks.
  std::vector<int> tables{4000, 5000, -1, -1, 904, 8000, -1, -1};
  CHECK_NOTHROW(check_paged_batch(c, steps, tables));
  tables[4] = 9096;
  CHECK_NOTHROW(check_paged_batch(c, steps, tables));
  tables[4] = 5000;  // now row 1 reads what row 0 writes
  CHECK_THROWS_WITH_AS(check_paged_batch(c, steps, tables),
                       doctest::Contains("sequence 0 writes block 5000, which sequence 1's table holds at entry 0"),
                       UsageError);
}

TEST_CASE("packed prompt parts are checked as prompts each, against the chunk's rows, and for blocks another writes") {
  const DecoderConfig c = small_paged_config();
  const std::vector<int> a(20, 7);  // positions 10 .. 29: writes entries 0 and 1
  const std::vector<int> b(5, 9);   // positions 16 .. 20: writes entry 1
  const std::vector<int> table_a{3, 4, -1, 99};
  const std::vector<int> table_b{3, 5, -1, -1};  // shares block 3 with a (neither writes it there: a writes 3 at 10)
  const std::vector<PromptPart> parts{{.tokens = a, .start = 10, .table = table_a, .slot = 0},
                                      {.tokens = b, .start = 16, .table = table_b, .slot = 1}};
  // a writes block 3 (positions 10 .. 15 lie in entry 0), which b's table holds: refused.
  CHECK_THROWS_WITH_AS(check_packed_prompts(c, parts, 64),
                       doctest::Contains("part 0 writes block 3, which part 1's table holds at entry 0"), UsageError);
  std::vector<PromptPart> apart = parts;
  apart[0].start = 16;  // positions 16 .. 35: entries 1 and 2 of a's table
  const std::vector<int> table_a2{3, 4, 6, 99};
  apart[0].table = table_a2;
  CHECK_NOTHROW(check_packed_prompts(c, apart, 64));  // block 3 is read by both and written by neither
  CHECK_THROWS_WITH_AS(check_packed_prompts(c, apart, 24),
                       doctest::Contains("the parts hold 25 tokens; one packed chunk holds 24"), UsageError);
  CHECK_THROWS_WITH_AS(check_packed_prompts(c, std::vector<PromptPart>{}, 64),
                       doctest::Contains("0 parts; give 1 to 8"), UsageError);
  CHECK_THROWS_WITH_AS(check_packed_prompts(c, std::vector<PromptPart>(9, apart[1]), 64),
                       doctest::Contains("9 parts; give 1 to 8"), UsageError);
  std::vector<int> bad = b;
  bad[3] = 512;
  std::vector<PromptPart> bad_token = apart;
  bad_token[1].tokens = bad;
  CHECK_THROWS_WITH_AS(check_packed_prompts(c, bad_token, 64),
                       doctest::Contains("Decoder::prefill_packed: part 1: prompt token 3 (512)"), UsageError);
  std::vector<PromptPart> short_table = apart;
  short_table[0].table = std::span<const int>(table_a2).first(3);
  CHECK_THROWS_WITH_AS(check_packed_prompts(c, short_table, 64),
                       doctest::Contains("part 0: the table holds 3 ints, not kv_table_width (4)"), UsageError);
  DecoderConfig contiguous = c;
  contiguous.kv_block_size = 0;
  CHECK_THROWS_WITH_AS(check_packed_prompts(contiguous, apart, 64), doctest::Contains("for a paged cache"), UsageError);
}

TEST_CASE("a step stages each row's table up to its position's block, whatever the table's width") {
  DecoderConfig c = small_paged_config();
  CHECK(used_entries(c, 0) == 1);
  CHECK(used_entries(c, c.kv_block_size - 1) == 1);
  CHECK(used_entries(c, c.kv_block_size) == 2);
  CHECK(used_entries(c, c.context - 1) == static_cast<std::size_t>(c.kv_table_width()));  // the last position: all
  c.context = kMaxPagedContext;  // a server's context: 8192 entries a row, of which a row at 17 uses 2
  c.kv_block_size = 16;
  CHECK(c.kv_table_width() == 8192);
  CHECK(used_entries(c, 17) == 2);
  c.kv_block_size = 32;
  CHECK(used_entries(c, 17) == 1);
}

TEST_CASE("a paged prompt's table is checked up to the prompt's last position") {
  const DecoderConfig c = small_paged_config();
  const std::vector<int> prompt(20, 7);  // positions 10 .. 29: entries 0 and 1
  const std::vector<int> table{3, 4, -1, 99};
  CHECK_NOTHROW(check_paged_prompt(c, prompt, 10, table, 0));
  CHECK_THROWS_WITH_AS(check_paged_prompt(c, prompt, 10, std::span<const int>(table).first(3), 0),
                       doctest::Contains("the table holds 3 ints, not kv_table_width (4)"), UsageError);
  CHECK_THROWS_WITH_AS(check_paged_prompt(c, prompt, 30, table, 0),
                       doctest::Contains("the table entry 2 (-1) is outside the pool"), UsageError);
  CHECK_THROWS_WITH_AS(check_paged_prompt(c, prompt, 50, table, 0),
                       doctest::Contains("a prompt of 20 tokens from position 50 does not fit the context of 64"),
                       UsageError);
  // A block at two entries the prompt reaches (its chunks would read a block they write); past them, anything.
  const std::vector<int> twice{3, 3, -1, 99};
  CHECK_THROWS_WITH_AS(
      check_paged_prompt(c, prompt, 10, twice, 0),
      doctest::Contains("the table holds block 3 at entries 0 and 1 (a sequence's blocks are distinct)"), UsageError);
  const std::vector<int> later{3, 4, 4, 3};
  CHECK_NOTHROW(check_paged_prompt(c, prompt, 10, later, 0));
}
