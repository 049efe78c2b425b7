// The decoder with a paged KV cache (DecoderConfig::kv_block_size, nn/decoder.hpp) against the contiguous one: the
// same seeded weights, the same steps, and with attention_blocks 1 or more the paged kernels' bits are the contiguous
// kernels', so every logit must be equal bit for bit; prompts on tensor cores too (prefill_chunk: the paged
// flash-attention kernel's bits are the contiguous one's). With attention_blocks 0 (the grouped kernels) within
// rounding. GPU only.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <lazygraph/nn.hpp>

#include "common/gpu.hpp"
#include "common/nn.hpp"
#include "common/quantized_formats.hpp"

using namespace lazygraph;
using namespace lazygraph::nn;

namespace {
/// The contiguous reference: 8 slots of 64 positions, grouped-query heads, prompts through the step graphs.
DecoderConfig contiguous_reference_config(int attention_blocks) {
  DecoderConfig c;
  c.d = 128;
  c.heads = 4;
  c.kv_heads = 2;
  c.layers = 2;
  c.ffn = 256;
  c.vocab = 512;
  c.context = 64;
  c.max_batch = kMaxRows;
  c.prefill_chunk = 0;
  c.attention_blocks = attention_blocks;
  return c;
}

/// A contiguous reference whose prompts run on tensor cores: head_dim 64 or 128 (the flash-attention kernels'), chunks
/// of up to `chunk` rows, 4 slots of 512 positions, unsplit attention.
DecoderConfig tensor_core_reference_config(int head_dim, int chunk) {
  DecoderConfig c;
  c.d = 256;
  c.heads = c.d / head_dim;
  c.kv_heads = c.heads / 2;
  c.layers = 2;
  c.ffn = 512;
  c.vocab = 512;
  c.context = 512;
  c.max_batch = 4;
  c.prefill_chunk = chunk;
  c.attention_blocks = 1;
  return c;
}

/// Whether two rows of logits hold the same bits.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

/// The tables of `sequences` sequences of `width` blocks each, from the ids 0 .. pool - 1 shuffled (row after row).
std::vector<int> shuffled_tables(int sequences, int width, int pool, unsigned seed) {
  std::vector<int> ids(static_cast<std::size_t>(pool));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  ids.resize(static_cast<std::size_t>(sequences) * static_cast<std::size_t>(width));
  return ids;
}
}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE_TEMPLATE("a paged decoder's prompts and batch steps give the contiguous decoder's logits bit for bit", T,
                     half, bfloat16) {
    // Unsplit attention on blocks of 16, and attention split in 4 on blocks of 32 (the same positions per split);
    // without q/k norms, with Qwen3's (each head) and with OLMoE's (the whole q and k: PagedAttention's
    // qk_norm_rope_append against the contiguous step's qk_norm_rope_append).
    int qk = 0;
    SUBCASE("no q/k norms") {}
    SUBCASE("q/k norms of each head") { qk = 1; }
    SUBCASE("q/k norms over the whole projection") { qk = 2; }
    // Batches on tensor cores of 32 heads: a full step's 256 blocks outnumber an H100's or H200's multiprocessors, so
    // both caches' unsplit attention runs in blocks of 256 threads (nn::attention_block_threads).
    SUBCASE("32 heads of 16, batches on tensor cores") { qk = 3; }
    CAPTURE(qk);
    for (const auto& [blocks, block_size] : {std::pair{1, 16}, std::pair{4, 32}}) {
      CAPTURE(blocks);
      CAPTURE(block_size);
      DecoderConfig c = contiguous_reference_config(blocks);
      c.qk_norm = qk == 1 || qk == 2;
      c.qk_norm_whole = qk == 2;
      if (qk == 3) {
        c.d = 512;
        c.heads = 32;
        c.kv_heads = 8;
        c.tensor_cores = true;
      }
      DecoderConfig pc = c;
      pc.kv_block_size = block_size;
      pc.kv_blocks = kMaxRows * (c.context / block_size) + 5;  // room to spare: the tables skip some blocks
      BasicDecoder<T> reference(lgtest::stream(), lgtest::nn_kernels(), c);
      BasicDecoder<T> paged(lgtest::stream(), lgtest::nn_kernels(), pc);
      const int width = paged.table_width();
      REQUIRE(width == c.context / block_size);
      const std::vector<int> tables =
          shuffled_tables(kMaxRows, width, pc.kv_blocks, 7U + static_cast<unsigned>(blocks));
      const auto table_of = [&](int s) {
        return std::span<const int>(tables).subspan(static_cast<std::size_t>(s * width),
                                                    static_cast<std::size_t>(width));
      };
      // Each sequence's prompt, of a length of its own (1 to 22 tokens), so that the steps' positions differ.
      std::vector<int> position(kMaxRows);
      std::vector<int> token(kMaxRows);
      for (int s = 0; s < kMaxRows; ++s) {
        CAPTURE(s);
        std::vector<int> prompt(static_cast<std::size_t>(1 + 3 * s));
        for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int>((37 * i + 11 * s) % 512);
        const int want = reference.prefill(prompt, 0, s);
        const int got = paged.prefill(prompt, 0, table_of(s), s);
        CHECK(got == want);
        CHECK(same_bits(paged.logits(0), reference.logits(0)));
        position[static_cast<std::size_t>(s)] = static_cast<int>(prompt.size());
        token[static_cast<std::size_t>(s)] = want;
      }
      // Batches of 1 to 8 rows: row r is sequence r at its own next position (slot r of the reference).
      for (int step = 0; step < 16; ++step) {
        const int rows = 1 + (step * 5) % kMaxRows;
        CAPTURE(step);
        CAPTURE(rows);
        std::vector<TokenAt> steps;
        for (int r = 0; r < rows; ++r) {
          steps.push_back(
              {.token = token[static_cast<std::size_t>(r)], .position = position[static_cast<std::size_t>(r)]});
        }
        const std::vector<int> want = reference.forward_batch(steps);
        const std::vector<int> got =
            paged.forward_batch(steps, std::span<const int>(tables).first(static_cast<std::size_t>(rows * width)));
        CHECK(got == want);
        for (int r = 0; r < rows; ++r) {
          CAPTURE(r);
          CHECK(same_bits(paged.logits(r), reference.logits(r)));
          token[static_cast<std::size_t>(r)] = want[static_cast<std::size_t>(r)];
          ++position[static_cast<std::size_t>(r)];
        }
      }
    }
  }

  TEST_CASE_TEMPLATE(
      "a paged decoder of quantized weights, q k and v included, follows the contiguous decoder within rounding", T,
      half, bfloat16) {
    // The same quantized weights (int8 attention, int4 MLP with zero points) on both caches: the paged step projects
    // q, k and v on the quantized kernels into s.qkv and appends through PagedAttention::rope_append, where the
    // contiguous one rotates and appends in its fused quantized kernel (one rounding fewer): logits within rounding,
    // the same token where the margin is clear, over prompts (the step's graphs) and batches of 1 to 8 rows.
    const double bound = std::same_as<T, half> ? 1e-2 : 4e-2;
    const DecoderConfig c = contiguous_reference_config(1);
    DecoderConfig pc = c;
    pc.kv_block_size = 16;
    pc.kv_blocks = kMaxRows * (c.context / 16) + 5;
    DecoderQuantization q;
    q.attention = lgtest::int8(scale_type_of<T>);
    q.mlp = lgtest::int4(32, true, scale_type_of<T>);
    const BasicKernels<T> k(lgtest::nn_kernels());
    const auto weights = [&] {
      return quantize_decoder_weights(lgtest::stream(), BasicDecoderWeights<T>::generate(lgtest::stream(), k, c), c, q);
    };
    BasicDecoder<T> reference(lgtest::stream(), lgtest::nn_kernels(), c, weights());
    BasicDecoder<T> paged(lgtest::stream(), lgtest::nn_kernels(), pc, weights());
    const int width = paged.table_width();
    const std::vector<int> tables = shuffled_tables(kMaxRows, width, pc.kv_blocks, 3U);
    const auto table_of = [&](int s) {
      return std::span<const int>(tables).subspan(static_cast<std::size_t>(s * width), static_cast<std::size_t>(width));
    };
    const auto close = [&](const std::vector<T>& got, const std::vector<T>& want, int token, int wanted) {
      const std::vector<double> g = lgtest::widened(got);
      const std::vector<double> w = lgtest::widened(want);
      CHECK(relative_error(g, w) < bound);
      if (lgtest::clear_margin(w, bound)) CHECK(token == wanted);
    };
    std::vector<int> position(kMaxRows);
    std::vector<int> token(kMaxRows);
    for (int s = 0; s < kMaxRows; ++s) {
      CAPTURE(s);
      std::vector<int> prompt(static_cast<std::size_t>(1 + 3 * s));
      for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int>((37 * i + 11 * s) % 512);
      const int want = reference.prefill(prompt, 0, s);
      const int got = paged.prefill(prompt, 0, table_of(s), s);
      close(paged.logits(0), reference.logits(0), got, want);
      position[static_cast<std::size_t>(s)] = static_cast<int>(prompt.size());
      token[static_cast<std::size_t>(s)] = want;  // both go on from the reference's token
    }
    for (int step = 0; step < 12; ++step) {
      const int rows = 1 + (step * 5) % kMaxRows;
      CAPTURE(step);
      CAPTURE(rows);
      std::vector<TokenAt> steps;
      for (int r = 0; r < rows; ++r) {
        steps.push_back(
            {.token = token[static_cast<std::size_t>(r)], .position = position[static_cast<std::size_t>(r)]});
      }
      const std::vector<int> want = reference.forward_batch(steps);
      const std::vector<int> got =
          paged.forward_batch(steps, std::span<const int>(tables).first(static_cast<std::size_t>(rows * width)));
      for (int r = 0; r < rows; ++r) {
        CAPTURE(r);
        close(paged.logits(r), reference.logits(r), got[static_cast<std::size_t>(r)],
              want[static_cast<std::size_t>(r)]);
        token[static_cast<std::size_t>(r)] = want[static_cast<std::size_t>(r)];
        ++position[static_cast<std::size_t>(r)];
      }
    }
  }

  TEST_CASE_TEMPLATE("a paged decoder of a context beyond 8192 gives the contiguous decoder's logits for a prompt", T,
                     half, bfloat16) {
    // Unsplit attention reads only positions 0 .. p, whatever the table reaches: the same bits as a short cache.
    const DecoderConfig c = contiguous_reference_config(1);
    DecoderConfig pc = c;
    pc.context = 16384;
    pc.kv_block_size = 16;
    pc.kv_blocks = 9;
    BasicDecoder<T> reference(lgtest::stream(), lgtest::nn_kernels(), c);
    BasicDecoder<T> paged(lgtest::stream(), lgtest::nn_kernels(), pc);
    std::vector<int> table(static_cast<std::size_t>(paged.table_width()), -1);
    table[0] = 8;
    table[1] = 3;
    std::vector<int> prompt(29);
    for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int>((53 * i + 5) % 512);
    CHECK(paged.prefill(prompt, 0, table, 1) == reference.prefill(prompt, 0, 1));
    CHECK(same_bits(paged.logits(0), reference.logits(0)));
    // attention_blocks 0: the grouped kernel over the row's own positions (split over them as
    // paged_grouped_wave_splits says; on a GPU older than 8.0 attend_split over the capacity of 16384): the same logits
    // within rounding (fp32 sums in another order).
    pc.attention_blocks = 0;
    BasicDecoder<T> split(lgtest::stream(), lgtest::nn_kernels(), pc);
    (void)split.prefill(prompt, 0, table, 1);
    const std::vector<T> got = split.logits(0);
    const std::vector<T> want = reference.logits(0);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      const float w = want[i].to_float();
      CHECK(std::abs(got[i].to_float() - w) <= 0.05F + 0.02F * std::abs(w));
    }
  }

  TEST_CASE_TEMPLATE(
      "a paged decoder with attention_blocks 0 attends on the grouped kernels: decode steps of 1 to 4 rows after long "
      "prompts on tensor cores give the contiguous decoder's logits within rounding",
      T, half, bfloat16) {
    // head_dim 64 and 128 (attention_paged_grouped_mma_d64 / _d128), prompts of 700 to 1900 tokens on tensor cores
    // (the same chunks in both decoders, so the caches hold the same bits), then decode steps of 1 to 4 rows, each a
    // step graph of its own whose grouped kernel reads its row count from the device (row_counts) and splits each
    // row's positions over blocks of its own. The reference attends unsplit: only the fp32 sums' order differs.
    if (lgtest::device().compute_capability().major < 8) {
      MESSAGE("skipped: the grouped attention kernels need compute capability 8.0 or newer");
      return;
    }
    for (const int head_dim : {64, 128}) {
      CAPTURE(head_dim);
      DecoderConfig c = tensor_core_reference_config(head_dim, 512);
      c.context = 2048;
      DecoderConfig pc = c;
      pc.kv_block_size = 16;
      pc.kv_blocks = c.max_batch * (c.context / 16) + 3;
      pc.attention_blocks = 0;
      // The splits come nearest half a wave of the kernel's resident blocks, which the driver must count (more than 48
      // KiB of shared memory at head_dim 128: counted only once the kernel's limit is raised).
      const PagedAttentionShape shape{.rows = 1,
                                      .heads = pc.heads,
                                      .kv_heads = pc.kv_head_count(),
                                      .head_dim = head_dim,
                                      .blocks = 1,
                                      .table_width = 1};
      CHECK(PagedAttention<T>(lgtest::nn_kernels()).grouped_resident(shape) >= 1);
      BasicDecoder<T> reference(lgtest::stream(), lgtest::nn_kernels(), c);
      BasicDecoder<T> paged(lgtest::stream(), lgtest::nn_kernels(), pc);
      const int width = paged.table_width();
      const std::vector<int> tables = shuffled_tables(c.max_batch, width, pc.kv_blocks, 29U);
      std::vector<int> position(static_cast<std::size_t>(c.max_batch));
      std::vector<int> token(static_cast<std::size_t>(c.max_batch));
      for (int s = 0; s < c.max_batch; ++s) {
        CAPTURE(s);
        std::vector<int> prompt(static_cast<std::size_t>(700 + 397 * s));
        for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int>((41 * i + 13 * s + 7) % 512);
        token[static_cast<std::size_t>(s)] = reference.prefill(prompt, 0, s);
        (void)paged.prefill(
            prompt, 0,
            std::span<const int>(tables).subspan(static_cast<std::size_t>(s * width), static_cast<std::size_t>(width)),
            s);
        position[static_cast<std::size_t>(s)] = static_cast<int>(prompt.size());
      }
      float worst = 0;
      for (int step = 0; step < 8; ++step) {
        const int rows = 1 + step % c.max_batch;
        CAPTURE(step);
        CAPTURE(rows);
        std::vector<TokenAt> steps;
        for (int r = 0; r < rows; ++r) {
          steps.push_back(
              {.token = token[static_cast<std::size_t>(r)], .position = position[static_cast<std::size_t>(r)]});
        }
        const std::vector<int> want = reference.forward_batch(steps);
        (void)paged.forward_batch(steps, std::span<const int>(tables).first(static_cast<std::size_t>(rows * width)));
        for (int r = 0; r < rows; ++r) {
          CAPTURE(r);
          const std::vector<T> got = paged.logits(r);
          const std::vector<T> expect = reference.logits(r);
          REQUIRE(got.size() == expect.size());
          int outside = 0;
          for (std::size_t i = 0; i < got.size(); ++i) {
            const float w = expect[i].to_float();
            const float e = std::abs(got[i].to_float() - w);
            worst = std::max(worst, e);
            outside += e <= 0.05F + 0.02F * std::abs(w) ? 0 : 1;
          }
          CHECK(outside == 0);
          // Both decoders go on from the reference's token, so that later steps compare the same sequences.
          token[static_cast<std::size_t>(r)] = want[static_cast<std::size_t>(r)];
          ++position[static_cast<std::size_t>(r)];
        }
      }
      MESSAGE("head_dim " << head_dim << ": largest logit difference " << worst);
    }
  }

  TEST_CASE_TEMPLATE(
      "a paged decoder's prompts on tensor cores give the contiguous decoder's logits and cache bit for bit and so do "
      "the decode steps after them",
      T, half, bfloat16) {
    // Both decoders cut each prompt into the same chunks (prefill_chunk 64 or 32): a first prompt of 150 to 171
    // tokens (two or four full chunks, then a rest padded up to its bucket), then a continuation at its end, mid-block
    // (a full chunk and a rest of 6 to 21 rows: through the step graphs or a bucket of 16); each sequence in blocks of
    // a shuffled table. Then 8 batch steps of every sequence, and the keys and values both caches hold.
    if (lgtest::device().compute_capability().major < 8) {
      MESSAGE("skipped: prefill on tensor cores needs compute capability 8.0 or newer");
      return;
    }
    for (const auto& [head_dim, block_size, chunk] : {std::tuple{64, 16, 64}, std::tuple{128, 32, 32}}) {
      CAPTURE(head_dim);
      CAPTURE(block_size);
      const DecoderConfig c = tensor_core_reference_config(head_dim, chunk);
      DecoderConfig pc = c;
      pc.kv_block_size = block_size;
      pc.kv_blocks = c.max_batch * (c.context / block_size) + 5;
      BasicDecoder<T> reference(lgtest::stream(), lgtest::nn_kernels(), c);
      BasicDecoder<T> paged(lgtest::stream(), lgtest::nn_kernels(), pc);
      REQUIRE_MESSAGE(paged.prefill_fallback_reason().empty(), paged.prefill_fallback_reason());
      const int width = paged.table_width();
      const std::vector<int> tables =
          shuffled_tables(c.max_batch, width, pc.kv_blocks, 11U + static_cast<unsigned>(chunk));
      const auto table_of = [&](int s) {
        return std::span<const int>(tables).subspan(static_cast<std::size_t>(s * width),
                                                    static_cast<std::size_t>(width));
      };
      std::vector<int> position(static_cast<std::size_t>(c.max_batch));
      std::vector<int> token(static_cast<std::size_t>(c.max_batch));
      for (int s = 0; s < c.max_batch; ++s) {
        int start = 0;
        for (const int length : {150 + 7 * s, 70 + 5 * s}) {
          CAPTURE(s);
          CAPTURE(start);
          CAPTURE(length);
          std::vector<int> prompt(static_cast<std::size_t>(length));
          for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int>((41 * i + 13 * s + start) % 512);
          const int want = reference.prefill(prompt, start, s);
          const int got = paged.prefill(prompt, start, table_of(s), s);
          CHECK(got == want);
          CHECK(same_bits(paged.logits(0), reference.logits(0)));
          start += length;
          token[static_cast<std::size_t>(s)] = want;
        }
        position[static_cast<std::size_t>(s)] = start;
      }
      for (int step = 0; step < 8; ++step) {
        CAPTURE(step);
        std::vector<TokenAt> steps;
        for (int r = 0; r < c.max_batch; ++r) {
          steps.push_back(
              {.token = token[static_cast<std::size_t>(r)], .position = position[static_cast<std::size_t>(r)]});
        }
        const std::vector<int> want = reference.forward_batch(steps);
        const std::vector<int> got = paged.forward_batch(steps, tables);
        CHECK(got == want);
        for (int r = 0; r < c.max_batch; ++r) {
          CAPTURE(r);
          CHECK(same_bits(paged.logits(r), reference.logits(r)));
          token[static_cast<std::size_t>(r)] = want[static_cast<std::size_t>(r)];
          ++position[static_cast<std::size_t>(r)];
        }
      }
      // Every position each sequence wrote, every layer and kv head: the pool through the table holds the contiguous
      // cache's bits.
      const std::vector<T> k_want = lgtest::to_host(lgtest::stream(), reference.k_cache().as_const());
      const std::vector<T> v_want = lgtest::to_host(lgtest::stream(), reference.v_cache().as_const());
      const std::vector<T> k_got = lgtest::to_host(lgtest::stream(), paged.k_cache().as_const());
      const std::vector<T> v_got = lgtest::to_host(lgtest::stream(), paged.v_cache().as_const());
      const auto kv_heads = static_cast<std::size_t>(c.kv_head_count());
      const auto dim = static_cast<std::size_t>(c.head_dim());
      const auto bs = static_cast<std::size_t>(block_size);
      int differ = 0;
      for (std::size_t l = 0; l < static_cast<std::size_t>(c.layers); ++l) {
        for (std::size_t s = 0; s < static_cast<std::size_t>(c.max_batch); ++s) {
          for (std::size_t g = 0; g < kv_heads; ++g) {
            for (std::size_t p = 0; p < static_cast<std::size_t>(position[s]); ++p) {
              const std::size_t want_at =
                  (((l * c.max_batch + s) * kv_heads + g) * static_cast<std::size_t>(c.context) + p) * dim;
              const auto block = static_cast<std::size_t>(table_of(static_cast<int>(s))[p / bs]);
              const std::size_t got_at =
                  (((l * static_cast<std::size_t>(pc.kv_blocks) + block) * kv_heads + g) * bs + p % bs) * dim;
              differ += std::memcmp(&k_want[want_at], &k_got[got_at], dim * sizeof(T)) != 0 ? 1 : 0;
              differ += std::memcmp(&v_want[want_at], &v_got[got_at], dim * sizeof(T)) != 0 ? 1 : 0;
            }
          }
        }
      }
      CHECK(differ == 0);
    }
  }

  TEST_CASE_TEMPLATE(
      "prefill_packed runs several sequences' prompt parts in one chunk as prefill runs each alone, within rounding: "
      "logits, tokens at a clear margin, the keys and values in each part's blocks and nowhere else, and the next "
      "batch step",
      T, half, bfloat16) {
    for (const int head_dim : {64, 128}) {
      CAPTURE(head_dim);
      DecoderConfig pc = tensor_core_reference_config(head_dim, 128);
      pc.max_batch = kMaxRows;
      pc.kv_block_size = 16;
      pc.kv_blocks = kMaxRows * (pc.context / 16) + 3;
      BasicDecoder<T> alone(lgtest::stream(), lgtest::nn_kernels(), pc);
      BasicDecoder<T> packed(lgtest::stream(), lgtest::nn_kernels(), pc);
      if (packed.packed_prefill_rows() == 0) {
        MESSAGE("skipped: no packed prefill here: " << packed.prefill_fallback_reason());
        return;
      }
      CHECK(packed.packed_prefill_rows() == 128);
      Stream& s = lgtest::stream();
      const T sentinel = T::from_float(-5.0F);
      for (BasicDecoder<T>* d : {&alone, &packed})
        (fill(d->k_cache(), sentinel) >> fill(d->v_cache(), sentinel)).sync_on(s);
      const int width = packed.table_width();
      const std::vector<int> tables = shuffled_tables(kMaxRows, width, pc.kv_blocks, 21U);
      const auto table_of = [&](int q) {
        return std::span<const int>(tables).subspan(static_cast<std::size_t>(q * width),
                                                    static_cast<std::size_t>(width));
      };
      // Sequence 4's prompt began earlier (its first 30 tokens, prefilled alone in both decoders): its part is its
      // rest. Lengths of 1 to 40: parts below the 16 rows prefill alone takes on tensor cores, and one part of one
      // token.
      const std::vector<int> lengths{7, 1, 40, 16, 23, 3};
      const std::vector<int> starts{0, 0, 0, 0, 30, 0};
      std::vector<std::vector<int>> prompts;
      for (std::size_t q = 0; q < lengths.size(); ++q) {
        std::vector<int> p(static_cast<std::size_t>(starts[q] + lengths[q]));
        for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int>((31 * i + 97 * q + 5) % 512);
        prompts.push_back(std::move(p));
      }
      const std::vector<int> earlier(prompts[4].begin(), prompts[4].begin() + 30);
      (void)alone.prefill(earlier, 0, table_of(4), 4);
      (void)packed.prefill(earlier, 0, table_of(4), 4);
      std::vector<PromptPart> parts;
      std::vector<int> want_tokens;
      std::vector<std::vector<T>> want_logits;
      for (std::size_t q = 0; q < lengths.size(); ++q) {
        const std::span<const int> part = std::span<const int>(prompts[q]).subspan(static_cast<std::size_t>(starts[q]));
        parts.push_back(
            {.tokens = part, .start = starts[q], .table = table_of(static_cast<int>(q)), .slot = static_cast<int>(q)});
        want_tokens.push_back(alone.prefill(part, starts[q], table_of(static_cast<int>(q)), static_cast<int>(q)));
        want_logits.push_back(alone.logits(0));
      }
      const std::vector<int> got_tokens = packed.prefill_packed(parts);
      REQUIRE(got_tokens.size() == parts.size());
      CHECK_THROWS_WITH_AS((void)packed.logits(static_cast<int>(parts.size())), doctest::Contains("outside"),
                           UsageError);
      const double bound = std::same_as<T, half> ? 1e-2 : 3e-2;
      for (std::size_t q = 0; q < parts.size(); ++q) {
        CAPTURE(q);
        const std::vector<T> got = packed.logits(static_cast<int>(q));
        const std::vector<T>& want = want_logits[q];
        REQUIRE(got.size() == want.size());
        double err = 0;
        double top = 0;
        std::vector<double> sorted;
        for (std::size_t i = 0; i < got.size(); ++i) {
          err = std::max(err, std::abs(static_cast<double>(got[i].to_float()) - want[i].to_float()));
          top = std::max(top, std::abs(static_cast<double>(want[i].to_float())));
          sorted.push_back(want[i].to_float());
        }
        CAPTURE(err / top);
        CHECK(err / top < bound);
        std::sort(sorted.rbegin(), sorted.rend());
        if (sorted[0] - sorted[1] > 4 * bound * top) CHECK(got_tokens[q] == want_tokens[q]);
      }
      // The caches: equal within rounding where a part wrote (its blocks), the sentinel where no sequence did.
      const auto block_size = static_cast<std::size_t>(pc.kv_block_size);
      const auto per_block = block_size * static_cast<std::size_t>(pc.kv_dim());
      std::vector<bool> used(static_cast<std::size_t>(pc.kv_blocks), false);
      for (std::size_t q = 0; q < prompts.size(); ++q) {
        const std::size_t blocks = (prompts[q].size() + block_size - 1) / block_size;
        for (std::size_t e = 0; e < blocks; ++e)
          used[static_cast<std::size_t>(table_of(static_cast<int>(q))[e])] = true;
      }
      for (const bool keys : {true, false}) {
        CAPTURE(keys);
        const std::vector<T> got = lgtest::to_host(s, keys ? packed.k_cache().as_const() : packed.v_cache().as_const());
        const std::vector<T> want = lgtest::to_host(s, keys ? alone.k_cache().as_const() : alone.v_cache().as_const());
        double err = 0;
        double top = 0;
        std::size_t differ_unused = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
          const std::size_t block = i / per_block % static_cast<std::size_t>(pc.kv_blocks);
          if (!used[block]) {
            differ_unused += got[i].bits != sentinel.bits ? 1 : 0;
            continue;
          }
          err = std::max(err, std::abs(static_cast<double>(got[i].to_float()) - want[i].to_float()));
          top = std::max(top, std::abs(static_cast<double>(want[i].to_float())));
        }
        CHECK(differ_unused == 0);
        CAPTURE(err / top);
        CHECK(err / top < 2 * bound);
      }
      // A batch step of every sequence from its prompt's end: the same logits within rounding.
      std::vector<TokenAt> steps;
      std::vector<int> step_tables;
      for (std::size_t q = 0; q < prompts.size(); ++q) {
        steps.push_back({.token = want_tokens[q], .position = static_cast<int>(prompts[q].size())});
        const std::span<const int> t = table_of(static_cast<int>(q));
        step_tables.insert(step_tables.end(), t.begin(), t.end());
      }
      (void)alone.forward_batch(steps, step_tables);
      (void)packed.forward_batch(steps, step_tables);
      for (std::size_t q = 0; q < steps.size(); ++q) {
        CAPTURE(q);
        const std::vector<T> got = packed.logits(static_cast<int>(q));
        const std::vector<T> want = alone.logits(static_cast<int>(q));
        double err = 0;
        double top = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
          err = std::max(err, std::abs(static_cast<double>(got[i].to_float()) - want[i].to_float()));
          top = std::max(top, std::abs(static_cast<double>(want[i].to_float())));
        }
        CAPTURE(err / top);
        CHECK(err / top < 2 * bound);
      }
    }
  }

  TEST_CASE("a paged decoder refuses the calls that take no block table and tables it cannot use, by name") {
    const auto good_table = [] {
      static const std::vector<int> table{2, -1, -1, -1};
      return std::span<const int>(table);
    };
    DecoderConfig c = contiguous_reference_config(1);
    c.kv_block_size = 16;
    c.kv_blocks = 4;
    Decoder decoder(lgtest::stream(), lgtest::nn_kernels(), c);
    CHECK(decoder.prefill_fallback_reason() == "DecoderConfig::prefill_chunk is 0");
    CHECK_THROWS_WITH_AS((void)decoder.forward({1, 0}),
                         doctest::Contains("Decoder::forward: the decoder's KV cache is paged"), UsageError);
    const std::vector<TokenAt> steps{{.token = 1, .position = 0}};
    CHECK_THROWS_WITH_AS((void)decoder.forward_batch(steps), doctest::Contains("give each row's block table"),
                         UsageError);
    const std::vector<int> prompt{1, 2, 3};
    CHECK_THROWS_WITH_AS((void)decoder.prefill(prompt, 0, 0), doctest::Contains("give the sequence's block table"),
                         UsageError);
    CHECK_THROWS_WITH_AS((void)decoder.generate(1, 4), doctest::Contains("Decoder::generate: the decoder's KV cache"),
                         UsageError);
    const std::vector<int> twice{1, 1, -1, -1};  // a block at two entries of the prompt's table
    const std::vector<int> prompt20(20, 3);
    CHECK_THROWS_WITH_AS((void)decoder.prefill(prompt20, 0, twice),
                         doctest::Contains("the table holds block 1 at entries 0 and 1"), UsageError);
    const std::vector<int> table{4, -1, -1, -1};
    CHECK_THROWS_WITH_AS((void)decoder.forward_batch(steps, table),
                         doctest::Contains("table entry 0 (4) is outside the pool [0, kv_blocks = 4)"), UsageError);
    const std::vector<PromptPart> parts{{.tokens = prompt, .start = 0, .table = good_table(), .slot = 0}};
    CHECK_THROWS_WITH_AS((void)decoder.prefill_packed(parts),
                         doctest::Contains("no packed chunks here: DecoderConfig::prefill_chunk is 0"), UsageError);
    CHECK(decoder.packed_prefill_rows() == 0);
    const std::vector<int> good{2, -1, -1, -1};
    const std::vector<int> next = decoder.forward_batch(steps, good);
    REQUIRE(next.size() == 1);
    CHECK(next[0] >= 0);
    CHECK(next[0] < c.vocab);
  }
}
