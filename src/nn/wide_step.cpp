#include "lazygraph/nn/wide_step.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "lazygraph/nn/decoder_io.hpp"
#include "lazygraph/nn/decoder_step.hpp"

namespace lazygraph::nn {

std::vector<int> wide_buckets(const DecoderConfig& c) {
  c.validate();
  std::vector<int> out;
  if (c.max_batch <= kMaxRows) return out;
  for (int rows = kWideMinRows;; rows *= 2) {
    out.push_back(rows);
    if (rows >= c.max_batch) break;
  }
  return out;
}

bool wide_step_available(ComputeCapability cc, std::string* why) noexcept {
  const auto no = [why](std::string reason) {
    if (why != nullptr) *why = std::move(reason);
    return false;
  };
  try {
    if (cc.major < 8) {
      return no("compute capability " + std::to_string(cc.major) + "." + std::to_string(cc.minor) +
                ": the wide step's GEMMs need 8.0 or newer");
    }
    std::string reason;
    if (!cublaslt_available(&reason)) return no("cuBLASLt does not load: " + reason);
    return true;
  } catch (...) {  // std::bad_alloc building a message
    return no("out of memory");
  }
}

namespace {
std::size_t elements(int rows, int width) { return static_cast<std::size_t>(rows) * static_cast<std::size_t>(width); }

/// The shape of layer `layer`'s attention over `rows` rows.
PagedAttentionShape wide_shape(const DecoderConfig& c, int rows, int layer) {
  return {.rows = rows,
          .heads = c.heads,
          .kv_heads = c.kv_head_count(),
          .head_dim = c.head_dim(),
          .block_size = c.kv_block_size,
          .blocks = c.kv_blocks,
          .table_width = c.kv_table_width(),
          .scale = c.score_scale(),
          .window = c.layer_window(layer)};
}

/// The attention splits of a bucket of `rows` rows: DecoderConfig::attention_blocks when set, else
/// paged_grouped_wave_splits's for `resident` blocks per SM (0: paged_grouped_splits's), at most paged_grouped_splits's
/// (the partials are sized by it, before any kernel is asked its residency).
int splits_of(const DecoderConfig& c, int rows, int multiprocessors, int resident = 0) {
  if (c.attention_blocks > 0) return c.attention_blocks;
  const int most = paged_grouped_splits(rows, c.heads, c.kv_head_count(), c.head_dim(), multiprocessors);
  return std::min(most,
                  paged_grouped_wave_splits(rows, c.heads, c.kv_head_count(), c.head_dim(), multiprocessors, resident));
}

/// Floats of the partials the bucket that needs the most needs.
std::size_t most_partials(const DecoderConfig& c, const std::vector<int>& buckets, int multiprocessors) {
  std::size_t most = 0;
  for (const int rows : buckets) {
    most = std::max(most,
                    PagedAttention<half>::split_partials(wide_shape(c, rows, 0), splits_of(c, rows, multiprocessors)));
  }
  return most;
}

int largest(const std::vector<int>& buckets) {
  if (buckets.empty()) {
    throw UsageError("wide step: DecoderConfig::max_batch is at most " + std::to_string(kMaxRows) +
                     "; the narrow step's graphs run every batch");
  }
  return buckets.back();
}
}  // namespace

template <Element T>
BasicWideStep<T>::Buffers::Buffers(const Stream& stream, const DecoderConfig& c, int rows, std::size_t partial_floats,
                                   std::size_t weight_elements)
    : layer(stream, c, rows, weight_elements),
      attn(stream.device(), elements(rows, c.q_dim())),
      logits(stream.device(), elements(rows, c.vocab)),
      next(stream.device(), static_cast<std::size_t>(rows)),
      io(stream.device(), WideIo::size(rows, c.kv_table_width())),
      partials(stream.device(), partial_floats),
      counters(stream.device(), elements(rows, c.heads)) {
  // Defined values everywhere a padding row or a GEMM may read before anything of this step wrote it.
  (fill(attn.view(), T{}) >> fill(logits.view(), T{}) >> fill(next.view(), 0) >> fill(io.view(), 0) >>
   fill(counters.view(), 0U))
      .sync_on(stream);
}

template <Element T>
BasicWideStep<T>::BasicWideStep(const Stream& stream, const KernelLibrary& library, const DecoderConfig& c,
                                std::size_t weight_elements)
    : buckets_(wide_buckets(c)),
      max_rows_(largest(buckets_)),
      width_(c.kv_table_width()),
      vocab_(static_cast<std::size_t>(c.vocab)),
      buffers_(stream, c, max_rows_, most_partials(c, buckets_, stream.device().sm_count()), weight_elements),
      io_(library, WideIo::size(max_rows_, width_), static_cast<std::size_t>(max_rows_)),
      pool_(stream.device()),
      graphs_(buckets_.size()) {
  // The slots the sampler reads: row r's draws depend on (seed, position, r), as forward_batch's.
  const std::span<int> in = io_.input();
  for (int r = 0; r < max_rows_; ++r) in[WideIo::slots(max_rows_) + static_cast<std::size_t>(r)] = r;
}

template <Element T>
std::size_t BasicWideStep<T>::buffer_bytes() const noexcept {
  std::size_t total = 0;
  const BasicPrefillBuffers<T>& b = buffers_.layer;
  for (const DeviceBuffer<T>* t :
       {&b.x, &b.h, &b.qkv, &b.q, &b.k, &b.v, &b.gate, &b.up, &b.weights, &buffers_.attn, &buffers_.logits}) {
    total += t->size() * sizeof(T);
  }
  total += (b.io.size() + buffers_.next.size() + buffers_.io.size()) * sizeof(int);
  total += buffers_.partials.size() * sizeof(float) + buffers_.counters.size() * sizeof(unsigned);
  const BasicPrefillMoeBuffers<T>& m = b.moe;  // a mixture of experts' (all empty without)
  total += (m.logits.size() + m.act.size()) * sizeof(T) + (m.weights.size() + m.partial.size()) * sizeof(float) +
           (m.ids.size() + m.order.size() + m.slot_of.size() + m.tiles.size()) * sizeof(int);
  return total;
}

template <Element T>
DeviceSpan<const T> BasicWideStep<T>::logits(int row) const {
  if (row < 0 || row >= max_rows_) {
    throw UsageError("wide step: row " + std::to_string(row) + " is outside [0, " + std::to_string(max_rows_) + ")");
  }
  return buffers_.logits.cview().subspan(static_cast<std::size_t>(row) * vocab_, vocab_);
}

template <Element T>
void BasicWideStep<T>::forget_graphs() noexcept {
  graphs_.clear();
  report_.clear();  // the report is of the graphs held: recaptures report afresh
}

template <Element T>
CudaGraph<> BasicWideStep<T>::capture(const BasicWideContext<T>& ctx, int rows, const BasicPrefillPlans<T>& plans) {
  const DecoderConfig& c = ctx.config;
  const BasicKernels<T>& k = ctx.kernels;
  const Projector<T> projector{k, ctx.quantized};
  const BasicDecoderWeights<T>& w = ctx.weights;
  BasicPrefillBuffers<T>& b = buffers_.layer;
  const auto count = static_cast<std::size_t>(rows);
  const auto d = static_cast<std::size_t>(c.d);
  const std::size_t width = elements(rows, width_);
  const DeviceSpan<int> io = buffers_.io.view();
  const DeviceSpan<const int> chunk = io.as_const().subspan(WideIo::chunk, PrefillChunkLayout::size);
  const DeviceSpan<const int> tokens = io.as_const().subspan(WideIo::tokens, count);
  const DeviceSpan<const int> positions = io.as_const().subspan(WideIo::positions(max_rows_), count);
  const DeviceSpan<const int> slots = io.as_const().subspan(WideIo::slots(max_rows_), count);
  const DeviceSpan<const int> tables = io.as_const().subspan(WideIo::tables(max_rows_), width);
  const DeviceSpan<T> x = b.x.view().subspan(0, count * d);
  const DeviceSpan<T> h = b.h.view().subspan(0, count * d);
  const DeviceSpan<T> qkv = b.qkv.view().subspan(0, elements(rows, c.q_dim() + 2 * c.kv_dim()));
  const DeviceSpan<T> q = b.q.view().subspan(0, elements(rows, c.q_dim()));
  const DeviceSpan<T> attn = buffers_.attn.view().subspan(0, elements(rows, c.q_dim()));
  const DeviceSpan<T> logits = buffers_.logits.view().subspan(0, count * vocab_);
  const DeviceSpan<int> next = buffers_.next.view().subspan(0, count);
  // A layer's pools: kv_blocks blocks of kv_block_size positions.
  const std::size_t pool = elements(c.kv_blocks, c.kv_block_size) * static_cast<std::size_t>(c.kv_dim());
  const int splits =
      splits_of(c, rows, ctx.stream.device().sm_count(), ctx.paged.grouped_resident(wide_shape(c, rows, 0)));
  const LaunchConfig per_row = k.step_config({{static_cast<unsigned>(rows), 1, 1}, {256, 1, 1}, 0});
  const LaunchConfig per_element = k.step_config(grid_for(x.size(), 256));

  GraphOptions options;
  options.pool = pool_;
  return CudaGraph<>::scope(
      ctx.stream,
      [&](Scope& s) {
        s.record(io_.copy_in(io.subspan(0, WideIo::tables(max_rows_))) >>
                 io_.copy_in(io.subspan(WideIo::tables(max_rows_), width), WideIo::tables(max_rows_)));
        std::vector<decltype(k.scale(per_element, x, 0LL, 0.0F))> scaled;  // the embedding's scale, where not 1
        if (c.embedding_scale != 1.0F) {
          scaled.push_back(
              k.scale(per_element, x, static_cast<long long>(x.size()), T::from_float(c.embedding_scale).to_float()));
        }
        s.record(named("embedding", k.embedding(per_element, w.embedding.cview(), tokens, x, c.d, rows) >>
                                        chain(std::move(scaled))));
        for (int l = 0; l < c.layers; ++l) {
          const auto layer = static_cast<std::size_t>(l);
          const PagedAttentionShape shape = wide_shape(c, rows, l);
          const PagedKvCache<T> cache{ctx.state.k_cache.view().subspan(layer * pool, pool),
                                      ctx.state.v_cache.view().subspan(layer * pool, pool), positions, tables};
          const BasicAttentionWeights<T>& a = w.attention[layer];
          const DeviceSpan<const float> frequencies =
              c.local_rope(l) ? ctx.state.local_rope_frequencies.cview() : ctx.state.rope_frequencies.cview();
          const DeviceSpan<const int> real_rows = chunk.subspan(PrefillChunkLayout::rows, 1);
          auto append = detail::either(
              c.qk_norm,
              [&] {
                return ctx.paged.qk_norm_rope_append(shape, qkv.as_const(), a.bias.cview(), a.q_norm.cview(),
                                                     a.k_norm.cview(), q, cache, real_rows, frequencies, c.eps,
                                                     c.qk_norm_whole);
              },
              [&] {
                return ctx.paged.rope_append(shape, qkv.as_const(), a.bias.cview(), q, cache, real_rows, frequencies);
              });
          auto attend = ctx.paged.attend_grouped(
              shape, q.as_const(), attn,
              buffers_.partials.view().subspan(0, PagedAttention<T>::split_partials(shape, splits)),
              buffers_.counters.view().subspan(0, elements(rows, c.heads)), cache,
              chunk.subspan(PrefillChunkLayout::rows, 1), splits);
          s.record(named(
              "layer " + std::to_string(l),
              gemm_layer(projector, plans, a, w.mlp[layer], b, chunk, c, rows, std::move(append) >> std::move(attend),
                         attn.as_const(), nullptr, c.mixture_of_experts() ? &w.moe.at(layer) : nullptr)));
        }
        const auto n = static_cast<long long>(logits.size());
        std::vector<decltype(k.softcap(LaunchConfig{}, logits, n, 0.0F))> capped;
        if (c.logit_softcap > 0) {
          capped.push_back(k.softcap(k.step_config(grid_for(logits.size(), 256)), logits, n, c.logit_softcap));
        }
        GemmOperand<T> head = gemm_operand(projector, w.lm_head, b.weights.view());  // dequantized first if need be
        s.record(named("lm head",
                       k.prefill_rms_norm(per_row, x.as_const(), w.final_gain.cview(), h, chunk, c.d, c.eps, rows) >>
                           std::move(head.prepare) >> plans.plan(vocab_, d)(logits, h.as_const(), head.values) >>
                           chain(std::move(capped)) >>
                           next_tokens(k, logits.as_const(), next, positions, slots, c.vocab, rows, ctx.sampling)));
        s.record(io_.copy_out(next.as_const()));
      },
      options);
}

template <Element T>
CudaGraph<>& BasicWideStep<T>::graph(const BasicWideContext<T>& ctx, int rows) {
  if (std::find(buckets_.begin(), buckets_.end(), rows) == buckets_.end()) {
    throw UsageError("wide step: no bucket of " + std::to_string(rows) + " rows (16, 32, ... up to " +
                     std::to_string(max_rows_) + ")");
  }
  return graphs_.get(rows, [&](int bucket) {
    const Device& device = ctx.stream.device();
    const auto start = std::chrono::steady_clock::now();
    // The plans first, outside the capture (planning may load cuBLASLt, ask its heuristic and allocate); kept when the
    // capture fails, and when set_sampling drops the graphs.
    auto found = std::find_if(plans_.begin(), plans_.end(), [&](const auto& p) { return p.first == bucket; });
    if (found == plans_.end()) {
      if (plans_.empty()) workspace_ = BasicPrefillPlans<T>::shared_workspace(device, ctx.config, buckets_, true);
      plans_.emplace_back(bucket, std::make_unique<BasicPrefillPlans<T>>(device, ctx.config, bucket, true, workspace_));
      found = std::prev(plans_.end());
    }
    const std::size_t free_before = device.free_memory();
    CudaGraph<> made = capture(ctx, bucket, *found->second);
    const std::size_t free_after = device.free_memory();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report_.push_back({.rows = bucket,
                       .capture_seconds = seconds,
                       .graph_bytes = free_before > free_after ? free_before - free_after : 0,
                       .gemm_workspace_bytes = found->second->workspace_needed()});
    return made;
  });
}

template <Element T>
void BasicWideStep<T>::capture_all(const BasicWideContext<T>& ctx) {
  for (const int rows : buckets_) (void)graph(ctx, rows);
}

template <Element T>
std::span<const int> BasicWideStep<T>::run(const BasicWideContext<T>& ctx, std::span<const TokenAt> steps,
                                           std::span<const int> tables) {
  const auto n = steps.size();
  if (n <= static_cast<std::size_t>(kMaxRows) || n > static_cast<std::size_t>(max_rows_)) {
    throw UsageError("wide step: " + std::to_string(n) + " rows; it takes " + std::to_string(kMaxRows + 1) + " to " +
                     std::to_string(max_rows_));
  }
  const auto width = static_cast<std::size_t>(width_);
  if (tables.size() != n * width) {
    throw UsageError("wide step: tables hold " + std::to_string(tables.size()) + " ints, not " + std::to_string(n) +
                     " rows x " + std::to_string(width));
  }
  const int bucket = static_cast<int>(bucket_for(n, std::vector<std::size_t>(buckets_.begin(), buckets_.end())));
  // The graph first (capturing runs nothing), then the staging: a failed capture leaves nothing half written.
  CudaGraph<>& g = graph(ctx, bucket);
  const std::span<int> in = io_.input();
  in[WideIo::chunk + PrefillChunkLayout::start] = 0;
  in[WideIo::count] = static_cast<int>(n);
  in[WideIo::chunk + PrefillChunkLayout::slot] = 0;
  const std::size_t positions = WideIo::positions(max_rows_);
  const std::span<int> staged_tables = in.subspan(WideIo::tables(max_rows_));
  for (std::size_t r = 0; r < n; ++r) {
    in[WideIo::tokens + r] = steps[r].token;
    in[positions + r] = steps[r].position;
    // Only the entries up to the row's position's block: the rest is padding, never read (stale from earlier steps).
    std::copy_n(tables.begin() + static_cast<std::ptrdiff_t>(r * width), used_entries(ctx.config, steps[r].position),
                staged_tables.begin() + static_cast<std::ptrdiff_t>(r * width));
  }
  // The padding: row 0's token at position 0 through row 0's first block (its other entries are never read); its
  // attention reads nothing and gives zeros (attend_grouped reads N from the device io).
  for (auto r = n; r < static_cast<std::size_t>(bucket); ++r) {
    in[WideIo::tokens + r] = steps[0].token;
    in[positions + r] = 0;
    staged_tables[r * width] = tables[0];
  }
  HostIo<int, int>::run(g);
  return io_.output().subspan(0, n);
}

template class BasicWideStep<half>;
template class BasicWideStep<bfloat16>;

}  // namespace lazygraph::nn
