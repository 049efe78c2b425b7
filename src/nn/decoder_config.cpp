#include "lazygraph/nn/decoder_config.hpp"

#include <algorithm>
#include <bitset>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "lazygraph/driver/error.hpp"
#include "lazygraph/driver/half.hpp"
#include "lazygraph/nn/paged_attention.hpp"

namespace lazygraph::nn {

namespace {
/// DecoderConfig::validate's paged-cache part.
void validate_paged(const DecoderConfig& c) {
  const auto fail = [](const std::string& why) { throw UsageError("DecoderConfig: " + why); };
  if (c.kv_block_size != 16 && c.kv_block_size != 32) {
    fail("kv_block_size (" + std::to_string(c.kv_block_size) + ") must be 16 or 32 (0: the contiguous cache)");
  }
  if (c.kv_blocks < 1) fail("kv_blocks (" + std::to_string(c.kv_blocks) + ") must be at least 1 with kv_block_size");
  if (c.context > kMaxPagedContext) {
    fail("context (" + std::to_string(c.context) + ") must be at most " + std::to_string(kMaxPagedContext) +
         " with a paged cache (kv_block_size)");
  }
  const auto refuse = [&](bool uses, const char* what) {
    if (uses) fail(std::string("the paged KV cache (kv_block_size) does not run ") + what);
  };
  refuse(c.backend == DecoderBackend::persistent, "on the persistent backend; use DecoderBackend::graph");
  refuse(!c.fused, "the unfused attention block (fused false); set fused");
  // attend's scores and table in one block's shared memory (PagedAttention::attention_config).
  const long long unsplit = (static_cast<long long>(c.kv_table_width()) * (c.kv_block_size + 1)) * 4;
  if (c.attention_blocks == 1 && unsplit > paged_unsplit_shared_limit) {
    fail("attention_blocks 1 cannot hold the scores of a context of " + std::to_string(c.context) +
         " positions in one block's shared memory; set attention_blocks to 0 (split by positions) or more");
  }
}

}  // namespace

void DecoderConfig::validate() const {
  const auto fail = [](const std::string& why) { throw UsageError("DecoderConfig: " + why); };
  if (d <= 0 || heads <= 0 || layers <= 0 || ffn <= 0 || vocab <= 0 || context <= 0)
    fail("every size must be positive");
  if (d % 8 != 0 || ffn % 8 != 0) fail("d and ffn must be multiples of 8 (the gemv kernels load 8 halves at a time)");
  if (head_width < 0) fail("head_width (" + std::to_string(head_width) + ") must be 0 (d / heads) or positive");
  if (head_width == 0 && d % heads != 0) {
    fail("d (" + std::to_string(d) + ") must be divisible by heads (" + std::to_string(heads) +
         ") when head_width is 0");
  }
  if (kv_heads < 0 || heads % kv_head_count() != 0) {
    fail("heads (" + std::to_string(heads) + ") must be a multiple of kv_heads (" + std::to_string(kv_heads) + ")");
  }
  if (head_dim() % 8 != 0 || head_dim() > 256) {
    fail("head_dim (" + std::to_string(head_dim()) +
         ") must be a multiple of 8 and at most 256 (the attention kernel)");
  }
  if (!std::isfinite(theta) || !(theta > 0)) fail("theta (" + std::to_string(theta) + ") must be finite and positive");
  if (!std::isfinite(eps) || !(eps > 0)) fail("eps (" + std::to_string(eps) + ") must be finite and positive");
  try {
    rope_scaling.validate();
  } catch (const UsageError& e) {
    fail(e.what());
  }
  if (qkv_bias && !fused && !qk_norm) fail("qkv_bias needs fused (the unfused kernels add no biases)");
  if (qk_norm_whole && !qk_norm) fail("qk_norm_whole (q/k norms over the whole projection) needs qk_norm");
  if (window < 0) fail("window (" + std::to_string(window) + ") must be 0 (none) or positive");
  if (!sliding.empty() && sliding.size() != static_cast<std::size_t>(layers)) {
    fail("sliding lists " + std::to_string(sliding.size()) + " layers, not layers (" + std::to_string(layers) +
         "); empty for every layer");
  }
  const auto finite_at_least = [&](float v, float least, const char* name) {
    if (!std::isfinite(v) || v < least) fail(std::string(name) + " (" + std::to_string(v) + ") is out of its range");
  };
  finite_at_least(attention_scale, 0, "attention_scale");
  finite_at_least(local_theta, 0, "local_theta");
  finite_at_least(logit_softcap, 0, "logit_softcap");
  finite_at_least(gain_offset, -1e30F, "gain_offset");
  if (!std::isfinite(embedding_scale) || !(embedding_scale > 0)) {
    fail("embedding_scale (" + std::to_string(embedding_scale) + ") must be finite and positive");
  }
  if (mixture_of_experts()) {
    if (moe.experts > 1024) fail("moe.experts (" + std::to_string(moe.experts) + ") must be at most 1024");
    if (moe.experts_per_token < 1 || moe.experts_per_token > 16 || moe.experts_per_token > moe.experts) {
      fail("moe.experts_per_token (" + std::to_string(moe.experts_per_token) + ") must be 1 to 16 and at most the " +
           std::to_string(moe.experts) + " experts (kernels/nn/moe.cu)");
    }
    if (moe.expert_width <= 0 || moe.expert_width % 8 != 0) {
      fail("moe.expert_width (" + std::to_string(moe.expert_width) + ") must be a positive multiple of 8");
    }
    if (activation != GateActivation::silu) fail("a mixture of experts' experts are SwiGLU (activation silu)");
    if (post_norms) fail("a mixture of experts has no post-norm of its output (post_norms)");
  } else if (moe.experts < 0) {
    fail("moe.experts (" + std::to_string(moe.experts) + ") must be 0 (a dense MLP) or positive");
  } else if (record_routes) {
    fail("record_routes keeps a mixture of experts' routes, but moe.experts is 0 (a dense MLP)");
  }
  if (backend == DecoderBackend::persistent) {
    if (mixture_of_experts())
      fail("the persistent backend has no tiles for a mixture of experts; use DecoderBackend::graph");
    if (!fused) fail("the persistent backend runs the fused attention block (set fused)");
    if (qk_norm_whole) {
      fail(
          "the persistent backend has no tiles for q/k norms over the whole projection (qk_norm_whole: OLMoE); use "
          "DecoderBackend::graph");
    }
    if (qk_norm)
      fail(
          "the persistent backend has no tiles for q/k norms (qk_norm: Qwen3, Gemma 3, OLMoE); use "
          "DecoderBackend::graph");
    const auto refuse = [&](bool uses, const char* what) {
      if (uses) fail(std::string("the persistent backend has no tiles for ") + what + "; use DecoderBackend::graph");
    };
    refuse(activation != GateActivation::silu, "a GeGLU MLP (activation gelu_tanh: Gemma 3)");
    refuse(post_norms, "post-norms (Gemma 3)");
    refuse(embedding_scale != 1.0F, "a scaled embedding (Gemma 3)");
    refuse(window > 0, "sliding-window attention (window)");
    refuse(local_theta > 0, "a sliding layers' RoPE (local_theta)");
    refuse(logit_softcap > 0, "logit soft-capping (logit_softcap)");
    if (attention_splits() != 1) {
      fail("the persistent backend runs attention as one tile per head (set attention_blocks to 1, not " +
           std::to_string(attention_blocks) + ")");
    }
    if (persistent.threads < 64 || persistent.threads > 256 || persistent.threads % 32 != 0) {
      fail("persistent.threads (" + std::to_string(persistent.threads) +
           ") must be a multiple of 32 from 64 to 256 (the q/k/v tile rotates and stores 8 rows of up to 8 vectors, "
           "one a thread; the attention and gemv tiles take at most 8 warps)");
    }
    if (persistent_tile_rows < 0 || persistent_tile_rows % 8 != 0) {
      fail("persistent_tile_rows (" + std::to_string(persistent_tile_rows) +
           ") must be 0 (one tile per block) or a positive multiple of 8 (the gemv tiles' rows)");
    }
  }
  if (kv_block_size != 0) {
    validate_paged(*this);
  } else if (kv_blocks != 0) {
    fail("kv_blocks (" + std::to_string(kv_blocks) + ") needs a paged cache (kv_block_size 16 or 32); 0 without one");
  } else if (context > kMaxContext) {
    fail("context (" + std::to_string(context) + ") must be at most " + std::to_string(kMaxContext) +
         " (scores live in shared memory; a paged cache, kv_block_size, reaches " + std::to_string(kMaxPagedContext) +
         ")");
  }
  if (max_batch < 1 || max_batch > (paged() ? kMaxWideRows : kMaxRows)) {
    fail("max_batch (" + std::to_string(max_batch) + ") must be 1 to " + std::to_string(kMaxRows) +
         ", or with a paged cache (kv_block_size) 1 to " + std::to_string(kMaxWideRows));
  }
  if (max_batch > kMaxRows && mixture_of_experts() && moe.experts % 8 != 0) {
    fail("max_batch (" + std::to_string(max_batch) + ") above " + std::to_string(kMaxRows) +
         " runs the wide step, whose router GEMM stores rows of 16-byte multiples: moe.experts (" +
         std::to_string(moe.experts) + ") must be a multiple of 8");
  }
  if (attention_blocks < 0 || attention_blocks > 64) {
    fail("attention_blocks (" + std::to_string(attention_blocks) + ") must be 0 (by context) to 64");
  }
  if (prefill_chunk != 0 &&
      (prefill_chunk < 16 || prefill_chunk > 8192 || (prefill_chunk & (prefill_chunk - 1)) != 0)) {
    fail("prefill_chunk (" + std::to_string(prefill_chunk) +
         ") must be 0 (prefill on the decode step's graphs) or a power of two from 16 to 8192");
  }
}

std::vector<float> rope_table(const ModelShape& config) {
  const std::vector<double> f = rope_frequencies(config.theta, config.rope_scaling, config.head_dim());
  return {f.begin(), f.end()};
}

std::size_t ModelShape::weight_bytes() const {
  const auto dd = static_cast<std::size_t>(d);
  const auto kv = static_cast<std::size_t>(kv_dim());
  const auto qd = static_cast<std::size_t>(q_dim());
  // q/k norms' gains: a head's each, or (qk_norm_whole) the whole q's and k's.
  const std::size_t qk_gains = !qk_norm ? 0 : (qk_norm_whole ? qd + kv : 2 * static_cast<std::size_t>(head_dim()));
  const std::size_t per_layer = 2 * qd * dd + 2 * kv * dd + 3 * dd * static_cast<std::size_t>(ffn) + 2 * dd +
                                (qkv_bias ? qd + 2 * kv : 0) + qk_gains + (post_norms ? 2 * dd : 0);
  // A mixture of experts: the router and every expert's three matrices in place of the MLP's (all stored; a step
  // reads the chosen experts' only).
  const std::size_t moe_layer = mixture_of_experts() ? static_cast<std::size_t>(moe.experts) * dd *
                                                           (1 + 3 * static_cast<std::size_t>(moe.expert_width))
                                                     : 0;
  const std::size_t layer_bytes =
      mixture_of_experts() ? per_layer - 3 * dd * static_cast<std::size_t>(ffn) + moe_layer : per_layer;
  return (layer_bytes * static_cast<std::size_t>(layers) + static_cast<std::size_t>(vocab) * dd + 2 * dd) *
         sizeof(half);
}

namespace {
/// Refuses a token outside the vocabulary or a position outside the context; `what()` names the caller in the message
/// (made only on a refusal: a step checks every row).
template <class What>
void check_token_at(const DecoderConfig& c, int token, int position, const What& what) {
  if (token < 0 || token >= c.vocab) {
    throw UsageError(what() + ": token " + std::to_string(token) + " is outside the vocabulary [0, " +
                     std::to_string(c.vocab) + ")");
  }
  if (position < 0 || position >= c.context) {
    throw UsageError(what() + ": position " + std::to_string(position) + " is outside the context [0, " +
                     std::to_string(c.context) + ")");
  }
}

/// Refuses a table entry (its index `i`) outside the pool; `whose()` names the table in the message (made only on a
/// refusal: a step checks every entry its rows read, thousands of them at long contexts).
template <class Whose>
void check_block(const DecoderConfig& c, int block, std::size_t i, const Whose& whose) {
  if (block < 0 || block >= c.kv_blocks) {
    throw UsageError(whose() + " table entry " + std::to_string(i) + " (" + std::to_string(block) +
                     ") is outside the pool [0, kv_blocks = " + std::to_string(c.kv_blocks) + ")");
  }
}
}  // namespace

void check_paged_prompt(const DecoderConfig& c, std::span<const int> prompt, int start, std::span<const int> table,
                        int slot) {
  const std::string what = "Decoder::prefill";
  if (!c.paged()) throw UsageError(what + ": a block table is for a paged cache (DecoderConfig::kv_block_size)");
  check_prompt(c, prompt, start, slot);
  if (table.size() != static_cast<std::size_t>(c.kv_table_width())) {
    throw UsageError(what + ": the table holds " + std::to_string(table.size()) + " ints, not kv_table_width (" +
                     std::to_string(c.kv_table_width()) + ")");
  }
  const auto last = static_cast<std::size_t>((start + static_cast<int>(prompt.size()) - 1) / c.kv_block_size);
  for (std::size_t i = 0; i <= last; ++i) check_block(c, table[i], i, [&] { return what + ": the"; });
  // Distinct blocks: the prompt's chunks read earlier positions while they write theirs (flash attention's cache).
  // Sorted (block, entry) pairs, so that the time follows the entries used, not the pool's size.
  std::vector<std::pair<int, std::size_t>> entries;
  entries.reserve(last + 1);
  for (std::size_t i = 0; i <= last; ++i) entries.emplace_back(table[i], i);
  std::sort(entries.begin(), entries.end());
  std::size_t repeat = 0;  // the first entry whose block an earlier entry holds (0: none), as a scan in order finds it
  for (std::size_t k = 1; k < entries.size(); ++k) {
    if (entries[k].first == entries[k - 1].first && (repeat == 0 || entries[k].second < entries[repeat].second)) {
      repeat = k;
    }
  }
  if (repeat > 0) {
    throw UsageError(what + ": the table holds block " + std::to_string(entries[repeat].first) + " at entries " +
                     std::to_string(entries[repeat - 1].second) + " and " + std::to_string(entries[repeat].second) +
                     " (a sequence's blocks are distinct)");
  }
}

void check_packed_prompts(const DecoderConfig& c, std::span<const PromptPart> parts, int max_rows) {
  const std::string what = "Decoder::prefill_packed";
  if (!c.paged()) throw UsageError(what + ": packed prompts are for a paged cache (DecoderConfig::kv_block_size)");
  if (parts.empty() || parts.size() > static_cast<std::size_t>(kMaxRows)) {
    throw UsageError(what + ": " + std::to_string(parts.size()) + " parts; give 1 to " + std::to_string(kMaxRows));
  }
  std::size_t total = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const PromptPart& p = parts[i];
    try {
      check_paged_prompt(c, p.tokens, p.start, p.table, p.slot);
    } catch (const UsageError& e) {
      std::string why = e.what();
      const std::string prefix = "Decoder::prefill: ";
      if (why.starts_with(prefix)) why.erase(0, prefix.size());
      throw UsageError(what + ": part " + std::to_string(i) + ": " + why);
    }
    total += p.tokens.size();
  }
  if (total > static_cast<std::size_t>(std::max(max_rows, 0))) {
    throw UsageError(what + ": the parts hold " + std::to_string(total) + " tokens; one packed chunk holds " +
                     std::to_string(max_rows));
  }
  const auto last = [&](const PromptPart& p) {
    return static_cast<std::size_t>((p.start + static_cast<int>(p.tokens.size()) - 1) / c.kv_block_size);
  };
  // The blocks each part writes (its positions'), then every other part's entries up to its last looked up among them.
  std::vector<std::pair<int, std::size_t>> written;  // (block, part)
  for (std::size_t i = 0; i < parts.size(); ++i) {
    for (std::size_t e = static_cast<std::size_t>(parts[i].start / c.kv_block_size); e <= last(parts[i]); ++e) {
      written.emplace_back(parts[i].table[e], i);
    }
  }
  std::sort(written.begin(), written.end());
  for (std::size_t o = 0; o < parts.size(); ++o) {
    for (std::size_t e = 0; e <= last(parts[o]); ++e) {
      const int block = parts[o].table[e];
      for (auto w = std::lower_bound(written.begin(), written.end(), std::pair<int, std::size_t>{block, 0});
           w != written.end() && w->first == block; ++w) {
        if (w->second == o) continue;
        throw UsageError(what + ": part " + std::to_string(w->second) + " writes block " + std::to_string(block) +
                         ", which part " + std::to_string(o) + "'s table holds at entry " + std::to_string(e) +
                         " (a block a part writes is its own)");
      }
    }
  }
}

void check_paged_batch(const DecoderConfig& c, std::span<const TokenAt> steps, std::span<const int> tables) {
  const std::string what = "Decoder::forward_batch";
  if (!c.paged()) throw UsageError(what + ": block tables are for a paged cache (DecoderConfig::kv_block_size)");
  check_batch(c, steps);
  const auto width = static_cast<std::size_t>(c.kv_table_width());
  if (tables.size() != steps.size() * width) {
    throw UsageError(what + ": tables hold " + std::to_string(tables.size()) + " ints, not " +
                     std::to_string(steps.size()) + " rows x " + std::to_string(width) + " (kv_table_width)");
  }
  const auto last = [&](std::size_t r) { return static_cast<std::size_t>(steps[r].position / c.kv_block_size); };
  const auto entry = [&](std::size_t r, std::size_t i) { return tables[r * width + i]; };
  for (std::size_t r = 0; r < steps.size(); ++r) {
    for (std::size_t i = 0; i <= last(r); ++i)
      check_block(c, entry(r, i), i, [&] { return what + ": sequence " + std::to_string(r) + "'s"; });
  }
  // The block a row writes is read by no other row at another index (the paged kernels' early reads): each written
  // block's first writer (row and entry), sorted by block, then every row's entries looked up among them: no vector of
  // the pool's size per step. A filter of the written blocks' low bits passes most entries without the search, so the
  // time is about the tables' used entries (thousands a row at long contexts).
  struct Writer {
    int block = 0;
    std::size_t row = 0;    // the first row that writes the block
    std::size_t other = 0;  // another row that writes it at the same entry (rows of one sequence)
    std::size_t entry = 0;  // the entry the first row writes it at
    bool shared = false;
  };
  std::vector<Writer> writers;  // by block, one per block written (a writer at another entry is found by its own)
  writers.reserve(steps.size());
  for (std::size_t r = 0; r < steps.size(); ++r) {
    writers.push_back({.block = entry(r, last(r)), .row = r, .other = r, .entry = last(r), .shared = false});
  }
  std::stable_sort(writers.begin(), writers.end(), [](const Writer& a, const Writer& b) { return a.block < b.block; });
  std::size_t kept = 0;
  for (std::size_t i = 0; i < writers.size(); ++i) {
    if (kept > 0 && writers[kept - 1].block == writers[i].block) {
      if (writers[kept - 1].entry == writers[i].entry) {
        writers[kept - 1].other = writers[i].row;
        writers[kept - 1].shared = true;
      }
      continue;
    }
    writers[kept++] = writers[i];
  }
  writers.resize(kept);
  constexpr std::size_t kFilterBits = 4096;
  std::bitset<kFilterBits> written;  // bit b: some written block is b modulo kFilterBits
  for (const Writer& w : writers) written.set(static_cast<std::size_t>(w.block) % kFilterBits);
  for (std::size_t o = 0; o < steps.size(); ++o) {
    for (std::size_t i = 0; i <= last(o); ++i) {
      const int block = entry(o, i);
      if (!written.test(static_cast<std::size_t>(block) % kFilterBits)) continue;  // no row writes it
      const auto w =
          std::lower_bound(writers.begin(), writers.end(), block, [](const Writer& a, int b) { return a.block < b; });
      if (w != writers.end() && w->block == block && w->entry != i && (w->row != o || w->shared)) {
        throw UsageError(what + ": sequence " + std::to_string(w->row != o ? w->row : w->other) + " writes block " +
                         std::to_string(block) + ", which sequence " + std::to_string(o) + "'s table holds at entry " +
                         std::to_string(i) + " (a block a row writes is its own, or shared at the same entry)");
      }
    }
  }
}

void check_step(const DecoderConfig& c, TokenAt step) {
  check_token_at(c, step.token, step.position, [] { return std::string("Decoder::forward"); });
}

void check_batch(const DecoderConfig& c, std::span<const TokenAt> steps) {
  if (steps.empty() || steps.size() > static_cast<std::size_t>(c.max_batch)) {
    throw UsageError("Decoder::forward_batch: " + std::to_string(steps.size()) + " steps; give 1 to max_batch (" +
                     std::to_string(c.max_batch) + ")");
  }
  for (std::size_t r = 0; r < steps.size(); ++r) {
    check_token_at(c, steps[r].token, steps[r].position,
                   [&] { return "Decoder::forward_batch: sequence " + std::to_string(r); });
  }
}

void check_generate(const DecoderConfig& c, int token, int n, int stop_token, int start) {
  const std::string what = "Decoder::generate";
  check_token_at(c, token, start, [&] { return what; });
  if (n < 1 || n > c.context - start) {
    throw UsageError(what + ": n (" + std::to_string(n) + ") must be 1 to the " + std::to_string(c.context - start) +
                     " positions the context has left from position " + std::to_string(start));
  }
  if (stop_token < -1 || stop_token >= c.vocab) {
    throw UsageError(what + ": stop token " + std::to_string(stop_token) + " is outside the vocabulary [0, " +
                     std::to_string(c.vocab) + ") (-1: none)");
  }
}

void check_prompt(const DecoderConfig& c, std::span<const int> prompt, int start, int slot) {
  const std::string what = "Decoder::prefill";
  if (prompt.empty()) throw UsageError(what + ": the prompt is empty");
  if (slot < 0 || slot >= c.max_batch) {
    throw UsageError(what + ": slot " + std::to_string(slot) +
                     " is outside [0, max_batch = " + std::to_string(c.max_batch) + ")");
  }
  if (start < 0 || static_cast<std::size_t>(c.context - std::min(start, c.context)) < prompt.size()) {
    throw UsageError(what + ": a prompt of " + std::to_string(prompt.size()) + " tokens from position " +
                     std::to_string(start) + " does not fit the context of " + std::to_string(c.context));
  }
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= c.vocab) {
      throw UsageError(what + ": prompt token " + std::to_string(i) + " (" + std::to_string(prompt[i]) +
                       ") is outside the vocabulary [0, " + std::to_string(c.vocab) + ")");
    }
  }
}

}  // namespace lazygraph::nn
