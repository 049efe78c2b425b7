// Paged decode attention (nn::PagedAttention, kernels/nn/paged_attention.cu and paged_attention_grouped.cu: unsplit,
// split and grouped, the wide step's) against the floor of the KV bytes it reads and against the contiguous cache's
// kernels (nn::Kernels::attention, attention_split), for the attention shapes of Llama-3.2-1B (32 heads, 8 kv heads,
// head_dim 64) and Llama-3.1-8B (32 / 8, 128), 1, 8, 64 and 256 rows, every
// row at the same position. Each launch is timed alone (ordinary launches, not early ones) with CUDA events, the
// median of many; the floor is the KV bytes read at the device-to-device copy bandwidth measured in the same run
// (examples/bench/ceiling.hpp). Caches smaller than 1 GiB are held twice and launches alternate between the copies, so
// that no launch finds its keys in L2. The paged tables are shuffled blocks, as a pool in use gives them.
#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn/decoder_io.hpp>
#include <lazygraph/nn/kernels.hpp>
#include <lazygraph/nn/paged_attention.hpp>
#include <lazygraph/nn/random_weights.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ceiling.hpp"
#include "cli.hpp"

namespace lg = lazygraph;
namespace nn = lazygraph::nn;
using lg::half;

namespace {

using bench::median_seconds;

struct Shape {
  const char* name;
  int heads;
  int kv_heads;
  int head_dim;
};

/// Fills `into` with seeded uniform values in [-scale, scale) (never zeros), on the device.
void fill(const lg::Stream& s, const nn::Kernels& k, const lg::DeviceSpan<half>& into, unsigned key, float scale) {
  const long long n = static_cast<long long>(into.size());
  const unsigned blocks = static_cast<unsigned>(std::min<long long>((n + 255) / 256, 8192));
  k.fill_uniform.launch(s, {{blocks, 1, 1}, {256, 1, 1}, 0}, into, n, key, scale, 0.0F);
}

/// One case's times in microseconds (nullopt: not run, with the reason in `why`).
struct Times {
  double floor_us = 0;
  std::optional<double> unsplit;
  std::optional<double> split;
  std::optional<double> contiguous;
  std::optional<double> contiguous_split;
  std::optional<double> grouped;
  std::optional<double> grouped_cuda_cores;
  int splits = 1;
  int grouped_splits = 1;
};

/// Whether the unsplit kernel's scores and table fit its shared memory (nn::PagedAttention::attend).
bool unsplit_fits(const nn::PagedAttentionShape& shape) {
  return (shape.capacity() + shape.table_width) * 4 <= nn::paged_unsplit_shared_limit;
}

std::string cell(const std::optional<double>& t) {
  if (!t) return "n/a";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", *t);
  return b;
}

/// A paged pool of `copies` caches of `rows` rows of `width` blocks each (K and V of `per_row` elements a row, filled
/// with seeded values) and a table per copy: copy c's blocks [c * rows * width, (c + 1) * rows * width), shuffled, as a
/// pool in use gives them.
struct PagedPool {
  lg::DeviceBuffer<half> k;
  lg::DeviceBuffer<half> v;
  std::vector<lg::DeviceBuffer<int>> tables;
};

PagedPool make_pool(const lg::Stream& s, const nn::Kernels& k, int rows, int width, int copies, std::size_t per_row) {
  const std::size_t elements = per_row * static_cast<std::size_t>(rows) * static_cast<std::size_t>(copies);
  PagedPool p{lg::empty<half>(elements).sync_on(s), lg::empty<half>(elements).sync_on(s), {}};
  fill(s, k, p.k.view(), 1U, 4.0F);
  fill(s, k, p.v.view(), 2U, 1.0F);
  std::mt19937 rng(7);
  for (int c = 0; c < copies; ++c) {
    std::vector<int> table(static_cast<std::size_t>(rows) * width);
    std::iota(table.begin(), table.end(), c * rows * width);
    std::shuffle(table.begin(), table.end(), rng);
    p.tables.push_back(lg::from_host(table).sync_on(s));
  }
  return p;
}

Times run_case(const lg::Stream& s, const lg::Device& gpu, const nn::Kernels& k, const nn::PagedAttention<half>& paged,
               const Shape& sh, int rows, int positions, double ceiling, double max_bytes) {
  constexpr int block_size = 16;
  Times t;
  const int width = (positions + block_size - 1) / block_size;
  const std::size_t per_row = static_cast<std::size_t>(sh.kv_heads) * static_cast<std::size_t>(width) * block_size *
                              static_cast<std::size_t>(sh.head_dim);  // elements of K (or V) per row
  const double bytes_read = 2.0 * static_cast<double>(rows) * sh.kv_heads * positions * sh.head_dim * sizeof(half);
  t.floor_us = bytes_read / ceiling * 1e6;
  const double cache_bytes = 2.0 * static_cast<double>(per_row) * rows * sizeof(half);
  if (2 * cache_bytes > max_bytes) return t;  // the paged and the contiguous caches would not fit the budget
  const int copies = cache_bytes < static_cast<double>(1ULL << 30) ? 2 : 1;
  const int blocks = copies * rows * width;
  nn::PagedAttentionShape shape{.rows = rows,
                                .heads = sh.heads,
                                .kv_heads = sh.kv_heads,
                                .head_dim = sh.head_dim,
                                .block_size = block_size,
                                .blocks = blocks,
                                .table_width = width};
  const std::size_t pool = per_row * static_cast<std::size_t>(rows) * copies;
  const auto d_positions = lg::from_host(std::vector<int>(static_cast<std::size_t>(rows), positions - 1)).sync_on(s);
  const std::size_t q_size = static_cast<std::size_t>(rows) * sh.heads * sh.head_dim;
  auto q = lg::empty<half>(q_size).sync_on(s);
  fill(s, k, q.view(), 3U, 1.0F);
  auto out = lg::empty<half>(q_size).sync_on(s);
  t.splits = nn::paged_attention_splits(positions, rows * sh.heads, gpu.sm_count());
  // What the decode and wide steps pick: nearest half a wave of resident blocks (the wide step at most
  // paged_grouped_splits).
  t.grouped_splits = nn::paged_grouped_wave_splits(rows, sh.heads, sh.kv_heads, sh.head_dim, gpu.sm_count(),
                                                   paged.grouped_resident(shape));
  if (rows > nn::kMaxRows) {
    t.grouped_splits =
        std::min(t.grouped_splits, nn::paged_grouped_splits(rows, sh.heads, sh.kv_heads, sh.head_dim, gpu.sm_count()));
  }
  auto partials =
      lg::empty<float>(nn::PagedAttention<half>::split_partials(shape, std::max(t.splits, t.grouped_splits)))
          .sync_on(s);
  const auto count = lg::from_host(std::vector<int>{rows}).sync_on(s);
  auto counters = lg::zeros<unsigned>(static_cast<std::size_t>(rows) * sh.heads).sync_on(s);
  const float scale = 1.0F / std::sqrt(static_cast<float>(sh.head_dim));
  constexpr int reps = 20;
  {  // the paged pool, freed before the contiguous cache is made
    PagedPool paged_pool = make_pool(s, k, rows, width, copies, per_row);
    auto& k_pool = paged_pool.k;
    auto& v_pool = paged_pool.v;
    const auto& tables = paged_pool.tables;
    const nn::PagedKvCache<half> cache{k_pool.view(), v_pool.view(), d_positions.cview(), tables[0].cview()};
    // The checked calls refuse what the raw launches below would get wrong; the launches alternate the tables.
    (void)paged.attend_split(shape, q.cview(), out.view(),
                             partials.view().subspan(0, nn::PagedAttention<half>::split_partials(shape, t.splits)),
                             counters.view(), cache, t.splits);
    if (unsplit_fits(shape)) {
      (void)paged.attend(shape, q.cview(), out.view(), cache);
      const auto config = paged.attention_config(shape);
      t.unsplit = median_seconds(s, reps,
                                 [&](int i) {
                                   paged.attention_kernel().launch(s, config, q.cview(), k_pool.cview(), v_pool.cview(),
                                                                   out.view(), d_positions.cview(),
                                                                   tables[i % copies].cview(), sh.heads, sh.kv_heads,
                                                                   sh.head_dim, block_size, blocks, width, scale, 0);
                                 }) *
                  1e6;
    }
    (void)paged.attend_grouped(
        shape, q.cview(), out.view(),
        partials.view().subspan(0, nn::PagedAttention<half>::split_partials(shape, t.grouped_splits)), counters.view(),
        cache, count.cview(), t.grouped_splits);
    // The grouped kernel attend_grouped launches (tensor cores at head_dim 64 and 128), then its CUDA-core twin.
    for (const bool tensor_cores : {true, false}) {
      const int warps = tensor_cores ? paged.grouped_warps(shape, t.grouped_splits) : 4;
      const auto grouped_config = paged.grouped_config(shape, t.grouped_splits, tensor_cores, warps);
      const auto& grouped_kernel = paged.grouped_kernel(shape, tensor_cores, warps);
      (tensor_cores ? t.grouped : t.grouped_cuda_cores) =
          median_seconds(s, reps,
                         [&](int i) {
                           grouped_kernel.launch(s, grouped_config, q.cview(), k_pool.cview(), v_pool.cview(),
                                                 out.view(), partials.view(), counters.view(), d_positions.cview(),
                                                 tables[i % copies].cview(), count.cview(), sh.heads, sh.kv_heads,
                                                 sh.head_dim, block_size, blocks, width, scale, 0);
                         }) *
          1e6;
    }
    const auto config = paged.split_config(shape, t.splits);
    t.split = median_seconds(s, reps,
                             [&](int i) {
                               paged.split_kernel().launch(
                                   s, config, q.cview(), k_pool.cview(), v_pool.cview(), out.view(), partials.view(),
                                   counters.view(), d_positions.cview(), tables[i % copies].cview(), sh.heads,
                                   sh.kv_heads, sh.head_dim, block_size, blocks, width, scale, 0);
                             }) *
              1e6;
  }
  // The contiguous cache: `copies` slots per row, [slots][kv_heads][context][head_dim].
  const int context = width * block_size;
  const int slots = rows * copies;
  auto k_cache = lg::empty<half>(pool).sync_on(s);
  auto v_cache = lg::empty<half>(pool).sync_on(s);
  fill(s, k, k_cache.view(), 1U, 4.0F);
  fill(s, k, v_cache.view(), 2U, 1.0F);
  std::vector<lg::DeviceBuffer<int>> d_slots;
  for (int c = 0; c < copies; ++c) {
    std::vector<int> sl(static_cast<std::size_t>(rows));
    std::iota(sl.begin(), sl.end(), c * rows);
    d_slots.push_back(lg::from_host(sl).sync_on(s));
  }
  if (static_cast<long long>(context) * 4 <= nn::paged_unsplit_shared_limit) {
    const auto config = k.attention_config(sh.heads, sh.head_dim, rows, context);
    t.contiguous = median_seconds(s, reps,
                                  [&](int i) {
                                    k.attention.launch(s, config, q.cview(), k_cache.cview(), v_cache.cview(),
                                                       out.view(), d_positions.cview(), d_slots[i % copies].cview(),
                                                       sh.heads, sh.kv_heads, sh.head_dim, context, slots, scale, 0);
                                  }) *
                   1e6;
  }
  const auto split_config = k.attention_split_config(sh.heads, rows, context, t.splits, sh.head_dim);
  if (split_config.shared_bytes <= 232448 - 10 * 1024) {
    t.contiguous_split =
        median_seconds(s, reps,
                       [&](int i) {
                         k.attention_split.launch(s, split_config, q.cview(), k_cache.cview(), v_cache.cview(),
                                                  out.view(), partials.view(), counters.view(), d_positions.cview(),
                                                  d_slots[i % copies].cview(), sh.heads, sh.kv_heads, sh.head_dim,
                                                  context, slots, scale, 0);
                       }) *
        1e6;
  }
  return t;
}

/// The grouped kernel (tensor cores, blocks of `warps` warps) at one case for each of `candidates` splits: median us
/// per launch.
std::vector<double> sweep_case(const lg::Stream& s, const nn::Kernels& k, const nn::PagedAttention<half>& paged,
                               const Shape& sh, int rows, int positions, const std::vector<int>& candidates,
                               int warps) {
  constexpr int block_size = 16;
  const int width = (positions + block_size - 1) / block_size;
  const std::size_t per_row = static_cast<std::size_t>(sh.kv_heads) * static_cast<std::size_t>(width) * block_size *
                              static_cast<std::size_t>(sh.head_dim);
  const double cache_bytes = 2.0 * static_cast<double>(per_row) * rows * sizeof(half);
  const int copies = cache_bytes < static_cast<double>(1ULL << 30) ? 2 : 1;
  const int blocks = copies * rows * width;
  const nn::PagedAttentionShape shape{.rows = rows,
                                      .heads = sh.heads,
                                      .kv_heads = sh.kv_heads,
                                      .head_dim = sh.head_dim,
                                      .block_size = block_size,
                                      .blocks = blocks,
                                      .table_width = width};
  const auto d_positions = lg::from_host(std::vector<int>(static_cast<std::size_t>(rows), positions - 1)).sync_on(s);
  const std::size_t q_size = static_cast<std::size_t>(rows) * sh.heads * sh.head_dim;
  auto q = lg::empty<half>(q_size).sync_on(s);
  fill(s, k, q.view(), 3U, 1.0F);
  auto out = lg::empty<half>(q_size).sync_on(s);
  const int most = *std::max_element(candidates.begin(), candidates.end());
  auto partials = lg::empty<float>(nn::PagedAttention<half>::split_partials(shape, most)).sync_on(s);
  const auto count = lg::from_host(std::vector<int>{rows}).sync_on(s);
  auto counters = lg::zeros<unsigned>(static_cast<std::size_t>(rows) * sh.heads).sync_on(s);
  const float scale = 1.0F / std::sqrt(static_cast<float>(sh.head_dim));
  PagedPool paged_pool = make_pool(s, k, rows, width, copies, per_row);
  auto& k_pool = paged_pool.k;
  auto& v_pool = paged_pool.v;
  const auto& tables = paged_pool.tables;
  const nn::PagedKvCache<half> cache{k_pool.view(), v_pool.view(), d_positions.cview(), tables[0].cview()};
  std::vector<double> us;
  for (const int splits : candidates) {
    (void)paged.attend_grouped(shape, q.cview(), out.view(),
                               partials.view().subspan(0, nn::PagedAttention<half>::split_partials(shape, splits)),
                               counters.view(), cache, count.cview(), splits);
    const auto config = paged.grouped_config(shape, splits, true, warps);
    const auto& kernel = paged.grouped_kernel(shape, true, warps);
    us.push_back(median_seconds(s, 20,
                                [&](int i) {
                                  kernel.launch(s, config, q.cview(), k_pool.cview(), v_pool.cview(), out.view(),
                                                partials.view(), counters.view(), d_positions.cview(),
                                                tables[i % copies].cview(), count.cview(), sh.heads, sh.kv_heads,
                                                sh.head_dim, block_size, blocks, width, scale, 0);
                                }) *
                 1e6);
  }
  return us;
}

/// The sweep's cases to run: a shape's name ("" for both), row counts and positions (empty for the defaults).
struct SweepCases {
  std::string shape;
  std::vector<int> rows;
  std::vector<int> positions;
};

/// --sweep: the grouped kernel's time against its splits, for 1 to 256 rows at positions 512 to 131072, or the cases
/// `only` names (cases whose cache passes max_bytes left out).
int sweep(const lg::Stream& s, const lg::Device& gpu, const nn::Kernels& k, const nn::PagedAttention<half>& paged,
          double ceiling, double max_bytes, const SweepCases& only) {
  const std::vector<int> row_counts =
      only.rows.empty() ? std::vector<int>{1, 2, 4, 8, 16, 32, 64, 128, 256} : only.rows;
  const std::vector<int> positions_list =
      only.positions.empty() ? std::vector<int>{512, 4096, 32768, 131072} : only.positions;
  std::printf(
      "| shape | rows | position | floor us | resident blocks / SM | splits: us (x floor) ... "
      "|\n|---|---|---|---|---|---|\n");
  for (const Shape& sh : {Shape{"1B", 32, 8, 64}, Shape{"8B", 32, 8, 128}, Shape{"TinyLlama", 32, 4, 64}}) {
    if (!only.shape.empty() && only.shape != sh.name) continue;
    if (only.shape.empty() && sh.name == std::string("TinyLlama")) continue;
    for (const int rows : row_counts) {
      for (const int positions : positions_list) {
        if (2.0 * rows * sh.kv_heads * positions * sh.head_dim * sizeof(half) > max_bytes) continue;
        const nn::PagedAttentionShape shape{.rows = rows,
                                            .heads = sh.heads,
                                            .kv_heads = sh.kv_heads,
                                            .head_dim = sh.head_dim,
                                            .blocks = 1,
                                            .table_width = 1};
        const int resident = paged.grouped_resident(shape);
        const int per_split = rows * sh.kv_heads;  // groups of 4 and 8: one part (16 heads a block)
        const int slots = resident * gpu.sm_count();
        // First what the decoder picks: nearest half a wave of resident blocks (the wide step's at most
        // paged_grouped_splits); the other candidates count whole waves.
        int picked = nn::paged_grouped_wave_splits(rows, sh.heads, sh.kv_heads, sh.head_dim, gpu.sm_count(), resident);
        if (rows > nn::kMaxRows) {
          picked = std::min(picked, nn::paged_grouped_splits(rows, sh.heads, sh.kv_heads, sh.head_dim, gpu.sm_count()));
        }
        std::vector<int> candidates{picked};
        for (int waves = 1; waves <= 4; ++waves) candidates.push_back(std::max(1, waves * slots / per_split));
        for (const int c : {1, 2, 3, 4, 8, 16, 32, 64}) candidates.push_back(c);
        std::sort(candidates.begin() + 1, candidates.end());
        candidates.erase(std::unique(candidates.begin() + 1, candidates.end()), candidates.end());
        const double floor_us = 2.0 * rows * sh.kv_heads * positions * sh.head_dim * sizeof(half) / ceiling * 1e6;
        // The warps attend_grouped gives the picked splits, then every candidate with 4 warps a block and with 8.
        const int picked_warps = paged.grouped_warps(shape, picked);
        std::printf("| %s | %d | %d | %.1f | %d |", sh.name, rows, positions, floor_us, resident);
        for (const int warps : {4, 8}) {
          if (warps == 8 && !paged.grouped_fits(shape, 8)) continue;
          const std::vector<double> us = sweep_case(s, k, paged, sh, rows, positions, candidates, warps);
          std::printf(" %d warps:", warps);
          for (std::size_t i = 0; i < us.size(); ++i) {
            const bool pick = i == 0 && warps == picked_warps;
            std::printf(" %s%d: %.1f (%.2f)", pick ? "picked " : "", candidates[i], us[i], us[i] / floor_us);
          }
          std::printf(";");
        }
        std::printf(" |\n");
      }
    }
  }
  return 0;
}

const char* usage =
    "usage: bench_paged_attention [--max-gib N] [--sweep [--shape 1B|8B|TinyLlama] [--rows LIST] [--positions LIST]]\n"
    "Prints a markdown table: paged decode attention (unsplit, split over positions, and grouped: one block per kv\n"
    "head) and the contiguous cache's kernels, for the Llama-3.2-1B and Llama-3.1-8B attention shapes, 1, 8, 64 and\n"
    "256 rows at positions 1k, 8k, 32k and\n"
    "128k, each against the floor of the KV bytes it reads at the device-to-device copy bandwidth measured in the\n"
    "same run. Target (issue 66): at position 32768 the best paged kernel within 1.5x the floor. A benchmark, not a\n"
    "test.\n"
    "  --max-gib N   skip cases whose two caches (paged and contiguous) exceed N GiB (default 40)\n"
    "  --sweep       instead, the grouped kernel's time for several splits at 1 to 256 rows (the first: the\n"
    "                decoder's choice), with blocks of 4 warps and of 8, to tune\n"
    "                paged_grouped_splits, paged_grouped_wave_splits and PagedAttention::grouped_warps\n"
    "  --shape S     with --sweep: only shape S (1B or 8B; TinyLlama, 32 heads over 4 kv heads of 64, only by name)\n"
    "  --rows LIST   with --sweep: only these row counts (default 1,2,4,8,16,32,64,128,256; at most 256)\n"
    "  --positions LIST  with --sweep: only these positions (default 512,4096,32768,131072; at most 131072)\n"
    "Exit status: 0 done (a missed target is only reported), 1 failed, 2 usage error, 77 skipped (no GPU; the reason\n"
    "is printed).\n";

int run(double max_gib, bool sweep_splits, const SweepCases& only) {
  lg::Device gpu = lg::Device::first();
  lg::Stream s = gpu.create_stream();
  lg::KernelLibrary library = nn::kernel_library(gpu);
  const nn::Kernels k(library, false);
  const nn::PagedAttention<half> paged(library, false);
  const double ceiling = bench::copy_ceiling(s);
  std::printf(
      "paged decode attention on %s (%d SMs), fp16, block_size 16; copy ceiling %.2f TB/s; median us per launch\n\n",
      gpu.name().c_str(), gpu.sm_count(), ceiling * 1e-12);
  if (sweep_splits) return sweep(s, gpu, k, paged, ceiling, max_gib * (1ULL << 30), only);
  std::printf(
      "| shape | rows | position | KV MiB | floor us | paged us | paged split us (splits) | paged grouped us (splits) "
      "| grouped on CUDA cores us "
      "| contiguous us | contiguous split us | best paged / floor "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  bool target_met = true;
  for (const Shape& sh : {Shape{"1B", 32, 8, 64}, Shape{"8B", 32, 8, 128}}) {
    for (const int rows : {1, 8, 64, 256}) {
      for (const int positions : {1024, 8192, 32768, 131072}) {
        const Times t = run_case(s, gpu, k, paged, sh, rows, positions, ceiling, max_gib * (1ULL << 30));
        const double kv_mib = 2.0 * rows * sh.kv_heads * positions * sh.head_dim * sizeof(half) / (1 << 20);
        if (!t.split) {
          std::printf("| %s | %d | %d | %.0f | %.1f | skipped: over --max-gib | | | | | | |\n", sh.name, rows,
                      positions, kv_mib, t.floor_us);
          continue;
        }
        const double best = std::min({*t.split, t.unsplit.value_or(*t.split), t.grouped.value_or(*t.split)});
        if (positions == 32768 && best > 1.5 * t.floor_us) target_met = false;
        std::printf("| %s | %d | %d | %.0f | %.1f | %s | %.1f (%d) | %s (%d) | %s | %s | %s | %.2f |\n", sh.name, rows,
                    positions, kv_mib, t.floor_us, cell(t.unsplit).c_str(), *t.split, t.splits, cell(t.grouped).c_str(),
                    t.grouped_splits, cell(t.grouped_cuda_cores).c_str(), cell(t.contiguous).c_str(),
                    cell(t.contiguous_split).c_str(), best / t.floor_us);
      }
    }
  }
  std::printf("\ntarget (position 32768 within 1.5x the floor): %s\n", target_met ? "met" : "MISSED");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  double max_gib = 40;
  bool sweep_splits = false;
  SweepCases only;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::fputs(usage, stdout);
      return 0;
    }
    if (args[i] == "--sweep") {
      sweep_splits = true;
      continue;
    }
    if (args[i] == "--max-gib" && i + 1 < args.size()) {
      try {
        max_gib = std::stod(args[++i]);
      } catch (const std::exception&) {
        max_gib = -1;
      }
      if (max_gib <= 0) {
        std::fprintf(stderr, "bench_paged_attention: --max-gib wants a positive number, not '%s'\n%s", args[i].c_str(),
                     usage);
        return example::exit_usage;
      }
      continue;
    }
    if ((args[i] == "--rows" || args[i] == "--positions") && i + 1 < args.size()) {
      const bool rows = args[i] == "--rows";
      try {
        (rows ? only.rows : only.positions) = example::integers(args[i + 1], args[i], 1);
      } catch (const lg::UsageError& e) {
        std::fprintf(stderr, "bench_paged_attention: %s\n%s", e.what(), usage);
        return example::exit_usage;
      }
      const std::vector<int>& got = rows ? only.rows : only.positions;
      if (*std::max_element(got.begin(), got.end()) > (rows ? 256 : 131072)) {
        std::fprintf(stderr, "bench_paged_attention: %s '%s' goes past %d\n%s", args[i].c_str(), args[i + 1].c_str(),
                     rows ? 256 : 131072, usage);
        return example::exit_usage;
      }
      ++i;
      continue;
    }
    if (args[i] == "--shape" && i + 1 < args.size()) {
      only.shape = args[++i];
      if (only.shape != "1B" && only.shape != "8B" && only.shape != "TinyLlama") {
        std::fprintf(stderr, "bench_paged_attention: --shape wants 1B, 8B or TinyLlama, not '%s'\n%s",
                     only.shape.c_str(), usage);
        return example::exit_usage;
      }
      continue;
    }
    std::fprintf(stderr, "bench_paged_attention: unknown argument '%s'\n%s", args[i].c_str(), usage);
    return example::exit_usage;
  }
  if (!sweep_splits && (!only.shape.empty() || !only.rows.empty() || !only.positions.empty())) {
    std::fprintf(stderr, "bench_paged_attention: --shape, --rows and --positions go with --sweep\n%s", usage);
    return example::exit_usage;
  }
  if (example::skip_without_gpu("bench_paged_attention")) return example::exit_skipped;
  try {
    return run(max_gib, sweep_splits, only);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_paged_attention: %s\n", e.what());
    return 1;
  }
}
