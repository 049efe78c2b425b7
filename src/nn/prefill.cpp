#include "lazygraph/nn/prefill.hpp"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace lazygraph::nn {

std::vector<int> prefill_buckets(const DecoderConfig& c) {
  c.validate();
  std::vector<int> out;
  if (c.prefill_chunk == 0 || c.context < kPrefillMinRows) return out;
  const int most = std::min(c.prefill_chunk, c.context);
  for (int rows = kPrefillMinRows;; rows *= 2) {
    out.push_back(rows);
    if (rows >= most) break;
  }
  return out;
}

std::vector<int> prefill_chunk_rows(std::size_t prompt_rows, const std::vector<int>& buckets) {
  std::vector<int> out;
  if (buckets.empty()) return out;
  const auto largest = static_cast<std::size_t>(buckets.back());
  std::size_t rest = prompt_rows;
  while (rest >= static_cast<std::size_t>(kPrefillMinRows)) {
    std::size_t rows = std::min(rest, largest);
    if (rows < largest) {
      // The largest bucket at or below the rest: taken when it is large, else the whole rest, padded up.
      const auto below = std::upper_bound(buckets.begin(), buckets.end(), static_cast<int>(rest));
      const auto down = static_cast<std::size_t>(*std::prev(below));
      if (down >= static_cast<std::size_t>(kPrefillSplitRows)) rows = down;
    }
    out.push_back(static_cast<int>(rows));
    rest -= rows;
  }
  return out;
}

bool prefill_on_tensor_cores(const DecoderConfig& c, ComputeCapability cc, std::string* why) noexcept {
  const auto no = [why](std::string reason) {
    if (why != nullptr) *why = std::move(reason);
    return false;
  };
  try {
    if (c.prefill_chunk == 0) return no("DecoderConfig::prefill_chunk is 0");
    if (c.mixture_of_experts() && c.moe.experts % 8 != 0) {
      return no("moe.experts (" + std::to_string(c.moe.experts) +
                ") is not a multiple of 8: the router's GEMM on tensor cores stores rows of 16-byte multiples");
    }
    if (c.context < kPrefillMinRows) {
      return no("the context (" + std::to_string(c.context) + ") holds no chunk of " + std::to_string(kPrefillMinRows) +
                " rows");
    }
    if (c.head_dim() != 64 && c.head_dim() != 128) {
      return no("head_dim " + std::to_string(c.head_dim()) +
                ": the flash-attention kernels are compiled for 64 and 128");
    }
    if (cc.major < 8) {
      return no("compute capability " + std::to_string(cc.major) + "." + std::to_string(cc.minor) +
                ": flash attention needs 8.0 or newer");
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
}  // namespace

template <Element T>
BasicPrefillBuffers<T>::BasicPrefillBuffers(const Stream& stream, const DecoderConfig& c, int max_rows,
                                            std::size_t weight_elements)
    : rows(max_rows),
      io(stream.device(), PackedPrefillIo::input_size(max_rows)),
      x(stream.device(), elements(max_rows, c.d)),
      h(stream.device(), elements(max_rows, c.d)),
      qkv(stream.device(), elements(max_rows, c.q_dim() + 2 * c.kv_dim())),
      q(stream.device(), elements(max_rows, c.q_dim())),
      k(stream.device(), elements(max_rows, c.kv_dim())),
      v(stream.device(), elements(max_rows, c.kv_dim())),
      gate(stream.device(), elements(max_rows, c.mixture_of_experts() ? 0 : c.ffn)),
      up(stream.device(), elements(max_rows, c.mixture_of_experts() ? 0 : 2 * c.ffn)),
      weights(stream.device(), weight_elements),
      moe(stream, c, max_rows) {
  for (DeviceBuffer<T>* b : {&x, &h, &qkv, &q, &k, &v, &gate, &up}) {
    if (b->size() > 0) fill(b->view(), T{}).sync_on(stream);
  }
}

template <Element T>
std::size_t BasicPrefillBuffers<T>::bytes(const DecoderConfig& c, int rows) {
  return PackedPrefillIo::input_size(rows) * sizeof(int) +
         elements(rows, 2 * c.d + 2 * c.q_dim() + 4 * c.kv_dim() + (c.mixture_of_experts() ? 0 : 3 * c.ffn)) *
             sizeof(T) +
         BasicPrefillMoeBuffers<T>::bytes(c, rows);
}

namespace {
// Every prefill and wide-step plan: the heuristic's workspace cap, and how many of its algorithms to time.
constexpr GemmOptions kPrefillGemmOptions{
    .alignment = 16, .max_workspace_bytes = kPrefillGemmWorkspace, .candidates = kPrefillGemmCandidates};
}  // namespace

template <Element T>
std::vector<GemmShape> BasicPrefillPlans<T>::shapes(const DecoderConfig& c, int rows, bool lm_head) {
  const auto m = static_cast<std::size_t>(rows);
  const auto d = static_cast<std::size_t>(c.d);
  const auto q_dim = static_cast<std::size_t>(c.q_dim());
  const auto kv_dim = static_cast<std::size_t>(c.kv_dim());
  const auto ffn = static_cast<std::size_t>(c.ffn);
  std::vector<GemmShape> all{{m, q_dim + 2 * kv_dim, d}, {m, d, q_dim}};
  if (c.mixture_of_experts()) {
    all.push_back({m, static_cast<std::size_t>(c.moe.experts), d});  // the router; the experts are grouped products
  } else {
    all.insert(all.end(), {{m, ffn, d}, {m, 2 * ffn, d}, {m, d, ffn}});  // 2 ffn: W1 and W3 stacked (gemm_layer)
  }
  if (lm_head) all.push_back({m, static_cast<std::size_t>(c.vocab), d});
  std::vector<GemmShape> distinct;
  for (const GemmShape& shape : all) {
    if (std::find(distinct.begin(), distinct.end(), shape) == distinct.end()) distinct.push_back(shape);
  }
  return distinct;
}

template <Element T>
BasicPrefillPlans<T>::BasicPrefillPlans(const Device& device, const DecoderConfig& c, int rows, bool lm_head,
                                        const std::shared_ptr<const SharedGemmWorkspace>& workspace) {
  for (const GemmShape& shape : shapes(c, rows, lm_head)) {
    if (workspace) {
      plans_.emplace_back(device, shape, kPrefillGemmOptions, workspace);
    } else {
      plans_.emplace_back(device, shape, kPrefillGemmOptions);
    }
    needed_ = std::max(needed_, Gemm<T>::workspace_needed(device, shape, kPrefillGemmOptions));
  }
}

template <Element T>
std::shared_ptr<const SharedGemmWorkspace> BasicPrefillPlans<T>::shared_workspace(const Device& device,
                                                                                  const DecoderConfig& c,
                                                                                  std::span<const int> buckets,
                                                                                  bool lm_head) {
  std::size_t most = 0;
  for (const int rows : buckets) {
    for (const GemmShape& shape : shapes(c, rows, lm_head)) {
      most = std::max(most, Gemm<T>::workspace_needed(device, shape, kPrefillGemmOptions));
    }
  }
  return most > 0 ? std::make_shared<const SharedGemmWorkspace>(device, most) : nullptr;
}

template <Element T>
const Gemm<T>& BasicPrefillPlans<T>::plan(std::size_t n, std::size_t k) const {
  for (const Gemm<T>& g : plans_) {
    if (g.shape().n == n && g.shape().k == k) return g;
  }
  throw UsageError("prefill: no GEMM plan for N=" + std::to_string(n) + ", K=" + std::to_string(k));
}

template <Element T>
std::size_t BasicPrefillPlans<T>::workspace_bytes() const noexcept {
  std::size_t total = 0;
  for (const Gemm<T>& g : plans_) total += g.workspace_bytes();
  return total;
}

namespace {
int largest_bucket(const DecoderConfig& c) {
  const std::vector<int> buckets = prefill_buckets(c);
  if (buckets.empty()) {
    throw UsageError("prefill: DecoderConfig::prefill_chunk is 0 or the context is below " +
                     std::to_string(kPrefillMinRows) + ": no chunk runs on tensor cores");
  }
  return buckets.back();
}
}  // namespace

template <Element T>
std::size_t dequantized_elements(const BasicDecoderWeights<T>& w) {
  std::size_t most = 0;
  const std::vector<const Weight<T>*> matrices = w.matrices();
  for (std::size_t i = 0; i + 1 < matrices.size(); ++i) {  // all but the LM head, which prefill runs as a step
    const Weight<T>& m = *matrices[i];
    if (!m.is_dense()) most = std::max(most, static_cast<std::size_t>(m.rows()) * static_cast<std::size_t>(m.cols()));
  }
  return std::max(most, prefill_expert_scratch(w));
}

namespace {

/// `make()`'s graph; on a rank, with its collectives compared with the other ranks' before it first runs (every rank
/// captures the same prefill graphs at the same calls).
template <Element T, class Make>
CudaGraph<> capture_checked(const BasicPrefillContext<T>& ctx, const std::string& what, Make make) {
  if (ctx.rank == nullptr) return make();
  CollectiveLog log(ctx.rank->comm);
  CudaGraph<> graph = make();
  check_same_collectives(ctx.rank->comm, ctx.stream, log, what);
  return graph;
}

}  // namespace

template <Element T>
BasicPrefill<T>::BasicPrefill(const Stream& stream, const DecoderConfig& config, std::size_t weight_elements)
    : buckets_(prefill_buckets(config)),
      buffers_(stream, config, largest_bucket(config), weight_elements),
      graphs_(std::max<std::size_t>(2 * buckets_.size(), 1)) {}  // each bucket's graph and its packed one

template <Element T>
std::size_t BasicPrefill<T>::device_bytes() const noexcept {
  std::size_t total = buffers_.io.size() * sizeof(int);
  for (const DeviceBuffer<T>* b : {&buffers_.x, &buffers_.h, &buffers_.qkv, &buffers_.q, &buffers_.k, &buffers_.v,
                                   &buffers_.gate, &buffers_.up, &buffers_.weights}) {
    total += b->size() * sizeof(T);
  }
  for (const auto& [rows, plans] : plans_) total += plans->workspace_bytes();
  if (workspace_) total += workspace_->bytes();
  return total;
}

template <Element T>
std::vector<int> BasicPrefill<T>::captured_buckets() const {
  std::vector<int> out;
  for (const int key : graphs_.keys()) {
    const int bucket = key < 0 ? -key : key;
    if (std::find(out.begin(), out.end(), bucket) == out.end()) out.push_back(bucket);
  }
  return out;
}

template <Element T>
const BasicPrefillPlans<T>& BasicPrefill<T>::bucket_plans(const BasicPrefillContext<T>& ctx, int bucket) {
  // Made outside any capture (planning may load cuBLASLt, ask its heuristic and allocate); kept when a capture fails,
  // for the next try.
  auto found = std::find_if(plans_.begin(), plans_.end(), [&](const auto& p) { return p.first == bucket; });
  if (found == plans_.end()) {
    if (plans_.empty()) {
      workspace_ = BasicPrefillPlans<T>::shared_workspace(ctx.stream.device(), ctx.config, buckets_, false);
    }
    plans_.emplace_back(
        bucket, std::make_unique<BasicPrefillPlans<T>>(ctx.stream.device(), ctx.config, bucket, false, workspace_));
    found = std::prev(plans_.end());
  }
  return *found->second;
}

template <Element T>
CudaGraph<>& BasicPrefill<T>::chunk_graph(const BasicPrefillContext<T>& ctx, int bucket, bool packed) {
  return graphs_.get(packed ? -bucket : bucket, [&](int) {
    const int rows = bucket;
    const BasicPrefillPlans<T>& plans = bucket_plans(ctx, rows);
    const DecoderConfig& c = ctx.config;
    const BasicKernels<T>& k = ctx.kernels;
    BasicPrefillBuffers<T>& b = buffers_;
    // A layer's cache: max_batch x context positions, or a paged cache's pool of kv_blocks blocks.
    const std::size_t cache_size =
        (c.paged() ? static_cast<std::size_t>(c.kv_blocks) * static_cast<std::size_t>(c.kv_block_size)
                   : static_cast<std::size_t>(c.max_batch) * static_cast<std::size_t>(c.context)) *
        static_cast<std::size_t>(c.kv_dim());
    // A paged cache's tables, copied in with the chunk: the chunk's sequence's at row 0 of the state's tables, or a
    // packed chunk's parts' at rows 0 .. kMaxRows - 1.
    const auto width = static_cast<std::size_t>(c.kv_table_width());
    const DeviceSpan<int> table =
        c.paged() ? ctx.state.tables.view().subspan(0, packed ? kMaxRows * width : width) : DeviceSpan<int>{};
    const Communicator* comm = ctx.rank != nullptr ? &ctx.rank->comm : nullptr;
    const auto count = static_cast<std::size_t>(rows);
    const DeviceSpan<int> io =
        b.io.view().subspan(0, packed ? PackedPrefillIo::input_size(rows) : PrefillIo::input_size(rows));
    const PackedPrefillSpans parts =
        packed ? PackedPrefillSpans{.positions = io.as_const().subspan(PackedPrefillIo::positions(rows), count),
                                    .segments = io.as_const().subspan(PackedPrefillIo::segments,
                                                                      PrefillSegmentsLayout::size(kMaxRows)),
                                    .tables = table.as_const()}
               : PackedPrefillSpans{};
    return capture_checked(ctx, "a prefill graph of " + std::to_string(rows) + " rows", [&] {
      return CudaGraph<>::scope(ctx.stream, [&](Scope& s) {
        const DeviceSpan<const int> tokens =
            io.as_const().subspan(packed ? PackedPrefillIo::tokens : PrefillIo::tokens, count);
        const DeviceSpan<T> x = b.x.view().subspan(0, count * static_cast<std::size_t>(c.d));
        const LaunchConfig per_element = k.step_config(grid_for(x.size(), 256));
        s.record(ctx.io.copy_in(io, DecoderIo::prefill));
        if (c.paged()) s.record(ctx.io.copy_in(table, ctx.table_at));
        std::vector<decltype(k.scale(per_element, x, 0LL, 0.0F))> scaled;  // the embedding's scale, where not 1
        if (c.embedding_scale != 1.0F) {
          scaled.push_back(
              k.scale(per_element, x, static_cast<long long>(x.size()), T::from_float(c.embedding_scale).to_float()));
        }
        if (comm == nullptr) {
          s.record(named("embedding", k.embedding(per_element, ctx.weights.embedding.cview(), tokens, x, c.d, rows)));
        } else {
          // The rank's rows of the vocabulary (zeros for other tokens), summed over the ranks.
          const int first = comm->rank() * c.vocab;
          s.record(named("embedding", k.embedding_rows(per_element, ctx.weights.embedding.cview(), tokens, x, c.d, rows,
                                                       first, c.vocab) >>
                                          all_reduce(*comm, x)));
        }
        s.record(chain(std::move(scaled)));
        for (int l = 0; l < c.layers; ++l) {
          const auto layer = static_cast<std::size_t>(l);
          const std::size_t offset = layer * cache_size;
          s.record(
              named("layer " + std::to_string(l),
                    prefill_layer(
                        Projector<T>{k, ctx.quantized}, plans, ctx.weights.attention[layer], ctx.weights.mlp[layer], b,
                        c.local_rope(l) ? ctx.state.local_rope_frequencies.cview() : ctx.state.rope_frequencies.cview(),
                        ctx.state.k_cache.view().subspan(offset, cache_size),
                        ctx.state.v_cache.view().subspan(offset, cache_size), c, rows, comm, l, table.as_const(), parts,
                        c.mixture_of_experts() ? &ctx.weights.moe.at(layer) : nullptr)));
        }
      });
    });
  });
}

template <Element T>
CudaGraph<>& BasicPrefill<T>::head_graph(const BasicPrefillContext<T>& ctx) {
  if (!head_) {
    const DecoderConfig& c = ctx.config;
    const BasicKernels<T>& k = ctx.kernels;
    BasicDecoderState<T>& st = ctx.state;
    const DeviceSpan<const int> io = buffers_.io.cview();
    const auto d = static_cast<std::size_t>(c.d);
    auto head = lm_head_logits(Projector<T>{k, ctx.quantized}, ctx.weights, st.x.cview(), st.logits.view(), c.vocab,
                               c.d, c.eps, 1, c.logit_softcap);
    auto last_row = k.prefill_last_row(k.step_config(grid_for(d, 256)), buffers_.x.cview(), buffers_.chunk(),
                                       st.x.view().subspan(0, d), c.d, buffers_.rows);
    const auto sample = [&](int vocab) {
      return next_tokens(k, st.logits.cview(), st.next.view(), io.subspan(PrefillIo::last_position, 1),
                         io.subspan(PrefillIo::slot, 1), vocab, 1, ctx.sampling);
    };
    const auto next_out = ctx.io.copy_out(st.next.cview().subspan(0, 1), DecoderIo::next);
    if (BasicRankState<T>* r = ctx.rank; r != nullptr) {
      // The rank's rows of the LM head, then every rank's logits gathered into the whole vocabulary's row 0, as a
      // step of one row does (decoder_rank_step).
      const auto part = static_cast<std::size_t>(c.vocab);
      const DeviceSpan<const T> mine = r->logits_part.cview().subspan(0, part);
      const int vocab = c.vocab * r->comm.size();
      head_.emplace(capture_checked(ctx, "the prefill's LM head", [&] {
        return CudaGraph<>::capture(
            ctx.stream,
            named("lm head",
                  std::move(last_row) >>
                      lm_head_logits(Projector<T>{k, ctx.quantized}, ctx.weights, st.x.cview(), r->logits_part.view(),
                                     c.vocab, c.d, c.eps, 1, c.logit_softcap) >>
                      all_gather<T>(r->comm, mine, st.logits.view().subspan(0, mine.size() * r->comm.size())) >>
                      sample(vocab)) >>
                next_out);
      }));
    } else {
      head_.emplace(CudaGraph<>::capture(
          ctx.stream, named("lm head", std::move(last_row) >> std::move(head) >> sample(c.vocab)) >> next_out));
    }
  }
  return *head_;
}

template <Element T>
int BasicPrefill<T>::run(const BasicPrefillContext<T>& ctx, std::span<const int> tokens, int start, int slot,
                         bool last) {
  if (tokens.size() < static_cast<std::size_t>(kPrefillMinRows) ||
      tokens.size() > static_cast<std::size_t>(max_rows())) {
    throw UsageError("prefill: a chunk on tensor cores has " + std::to_string(kPrefillMinRows) + " to " +
                     std::to_string(max_rows()) + " rows, not " + std::to_string(tokens.size()));
  }
  const int rows = static_cast<int>(tokens.size());
  const int bucket = static_cast<int>(
      bucket_for(static_cast<std::size_t>(rows), std::vector<std::size_t>(buckets_.begin(), buckets_.end())));
  check_prefill_chunk({.rows = bucket,
                       .heads = ctx.config.heads,
                       .kv_heads = ctx.config.kv_head_count(),
                       .head_dim = ctx.config.head_dim(),
                       .context = ctx.config.context,
                       .slots = ctx.config.max_batch},
                      {.start = start, .rows = rows, .slot = slot});
  // Graphs first (capturing runs nothing), then the staging: a failed capture leaves nothing half written.
  CudaGraph<>& graph = chunk_graph(ctx, bucket);
  CudaGraph<>* head = last ? &head_graph(ctx) : nullptr;

  const std::span<int> in = ctx.io.input().subspan(DecoderIo::prefill, PrefillIo::input_size(bucket));
  in[PrefillIo::start] = start;
  in[PrefillIo::rows] = rows;
  in[PrefillIo::slot] = slot;
  in[PrefillIo::last_position] = start + rows - 1;
  const std::span<int> chunk_tokens = in.subspan(PrefillIo::tokens);
  std::copy(tokens.begin(), tokens.end(), chunk_tokens.begin());
  std::fill(chunk_tokens.begin() + rows, chunk_tokens.end(), 0);  // the bucket's padding: a valid token
  if (head == nullptr) {
    HostIo<int, int>::run(graph);
    return -1;
  }
  graph.launch_on(head->stream());  // the head follows on the same stream: one wait for both
  HostIo<int, int>::run(*head);
  return ctx.io.output()[DecoderIo::next];
}

template <Element T>
CudaGraph<>& BasicPrefill<T>::packed_head_graph(const BasicPrefillContext<T>& ctx, int parts) {
  std::optional<CudaGraph<>>& graph = packed_heads_.at(static_cast<std::size_t>(parts - 1));
  if (!graph) {
    const DecoderConfig& c = ctx.config;
    const BasicKernels<T>& k = ctx.kernels;
    BasicDecoderState<T>& st = ctx.state;
    const DeviceSpan<const int> io = buffers_.io.cview();
    const auto n = static_cast<std::size_t>(parts);
    const DeviceSpan<T> x = st.x.view().subspan(0, n * static_cast<std::size_t>(c.d));
    // Each part's last row of the chunk to row i of the step's x: the embedding kernel's gather, with the chunk's rows
    // as its table.
    auto lasts = k.embedding(k.step_config(grid_for(x.size(), 256)), buffers_.x.cview(),
                             io.subspan(PackedPrefillIo::lasts, n), x, c.d, parts);
    auto head = lm_head_logits(Projector<T>{k, ctx.quantized}, ctx.weights, x.as_const(), st.logits.view(), c.vocab,
                               c.d, c.eps, parts, c.logit_softcap);
    auto sample = next_tokens(k, st.logits.cview(), st.next.view(), io.subspan(PackedPrefillIo::last_positions, n),
                              io.subspan(PackedPrefillIo::slots, n), c.vocab, parts, ctx.sampling);
    graph.emplace(
        CudaGraph<>::capture(ctx.stream, named("lm head", std::move(lasts) >> std::move(head) >> std::move(sample)) >>
                                             ctx.io.copy_out(st.next.cview().subspan(0, n), DecoderIo::next)));
  }
  return *graph;
}

template <Element T>
std::vector<int> BasicPrefill<T>::run_packed(const BasicPrefillContext<T>& ctx, std::span<const PackedPart> parts) {
  const DecoderConfig& c = ctx.config;
  if (!c.paged())
    throw UsageError("prefill_packed: packed chunks are for a paged cache (DecoderConfig::kv_block_size)");
  if (ctx.rank != nullptr) throw UsageError("prefill_packed: a tensor-parallel rank prefills one sequence at a time");
  if (parts.empty() || parts.size() > static_cast<std::size_t>(kMaxRows)) {
    throw UsageError("prefill_packed: " + std::to_string(parts.size()) + " parts; give 1 to " +
                     std::to_string(kMaxRows));
  }
  std::size_t total = 0;
  std::vector<PrefillChunk> segments;
  for (const PackedPart& p : parts) {
    total += p.tokens.size();
    segments.push_back({.start = p.start, .rows = static_cast<int>(p.tokens.size()), .slot = p.slot});
  }
  if (total > static_cast<std::size_t>(max_rows())) {
    throw UsageError("prefill_packed: the parts hold " + std::to_string(total) + " tokens; a packed chunk holds " +
                     std::to_string(max_rows()) + " (the largest prefill bucket)");
  }
  const int rows = static_cast<int>(total);
  const int bucket = static_cast<int>(
      bucket_for(static_cast<std::size_t>(rows), std::vector<std::size_t>(buckets_.begin(), buckets_.end())));
  check_prefill_segments({.rows = bucket,
                          .heads = c.heads,
                          .kv_heads = c.kv_head_count(),
                          .head_dim = c.head_dim(),
                          .context = c.context,
                          .slots = c.max_batch},
                         segments, kMaxRows);
  // Graphs first (capturing runs nothing), then the staging: a failed capture leaves nothing half written.
  CudaGraph<>& graph = chunk_graph(ctx, bucket, true);
  CudaGraph<>& head = packed_head_graph(ctx, static_cast<int>(parts.size()));

  const std::span<int> in = ctx.io.input().subspan(DecoderIo::prefill, PackedPrefillIo::input_size(bucket));
  std::fill(in.begin(), in.end(), 0);  // padding rows: token 0 at position 0; unused parts' fields 0
  in[PrefillIo::rows] = rows;
  in[PackedPrefillIo::segments + PrefillSegmentsLayout::count] = static_cast<int>(parts.size());
  const std::span<int> tokens = in.subspan(PackedPrefillIo::tokens, static_cast<std::size_t>(bucket));
  const std::span<int> positions = in.subspan(PackedPrefillIo::positions(bucket), static_cast<std::size_t>(bucket));
  std::size_t row = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const PackedPart& p = parts[i];
    const int n = static_cast<int>(p.tokens.size());
    in[PackedPrefillIo::segments + PrefillSegmentsLayout::start(static_cast<int>(i))] = p.start;
    in[PackedPrefillIo::segments + PrefillSegmentsLayout::rows(static_cast<int>(i))] = n;
    std::copy(p.tokens.begin(), p.tokens.end(), tokens.begin() + static_cast<std::ptrdiff_t>(row));
    for (int j = 0; j < n; ++j) positions[row + static_cast<std::size_t>(j)] = p.start + j;
    row += static_cast<std::size_t>(n);
    in[PackedPrefillIo::lasts + i] = static_cast<int>(row) - 1;
    in[PackedPrefillIo::last_positions + i] = p.start + n - 1;
    in[PackedPrefillIo::slots + i] = p.slot;
  }
  graph.launch_on(head.stream());  // the head follows on the same stream: one wait for both
  HostIo<int, int>::run(head);
  const std::span<const int> next = ctx.io.output().subspan(DecoderIo::next, parts.size());
  return {next.begin(), next.end()};
}

template struct BasicPrefillBuffers<half>;
template struct BasicPrefillBuffers<bfloat16>;
template class BasicPrefillPlans<half>;
template class BasicPrefillPlans<bfloat16>;
template class BasicPrefill<half>;
template class BasicPrefill<bfloat16>;
template std::size_t dequantized_elements(const BasicDecoderWeights<half>&);
template std::size_t dequantized_elements(const BasicDecoderWeights<bfloat16>&);

}  // namespace lazygraph::nn
