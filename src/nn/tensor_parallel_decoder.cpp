#include "lazygraph/nn/tensor_parallel_decoder.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace lazygraph::nn {

void check_tensor_parallel(const DecoderConfig& config, int ranks) {
  config.validate();
  const auto fail = [&](const std::string& why) {
    throw UsageError("tensor-parallel decoder over " + std::to_string(ranks) + " ranks: " + why);
  };
  if (ranks < 1) fail("at least one rank");
  if (config.max_batch != 1) fail("one sequence (max_batch 1), not " + std::to_string(config.max_batch));
  if (config.qkv_bias) fail("q, k and v biases (qkv_bias) are not split over ranks yet");
  if (config.heads % ranks != 0) fail("heads " + std::to_string(config.heads) + " do not divide among the ranks");
  if (config.kv_head_count() % ranks != 0) {
    fail("kv heads " + std::to_string(config.kv_head_count()) + " do not divide among the ranks");
  }
  if (config.vocab % ranks != 0) fail("vocab " + std::to_string(config.vocab) + " does not divide among the ranks");
  if (config.ffn % (8 * ranks) != 0) {
    fail("ffn " + std::to_string(config.ffn) + " does not split into shards of a multiple of 8");
  }
}

template <Element T>
BasicTensorParallelDecoder<T>::BasicTensorParallelDecoder(std::span<const Communicator> comms,
                                                          std::span<const KernelLibrary* const> libraries,
                                                          const DecoderConfig& config,
                                                          const TensorParallelOptions& options)
    : config_(config) {
  const int n = static_cast<int>(comms.size());
  check_tensor_parallel(config_, n);
  detail::check_libraries("TensorParallelDecoder", libraries.size(), comms.size());
  const auto d = static_cast<std::size_t>(config_.d);
  const auto q_dim = static_cast<std::size_t>(config_.q_dim());
  const auto dq = q_dim / static_cast<std::size_t>(n);
  const auto dkv = static_cast<std::size_t>(config_.kv_dim()) / static_cast<std::size_t>(n);
  const auto vocab_part = static_cast<std::size_t>(config_.vocab / n);
  const auto hd = static_cast<std::size_t>(config_.head_dim());
  const auto cache = static_cast<std::size_t>(config_.layers) * static_cast<std::size_t>(config_.context) * dkv;
  std::vector<DeviceSpan<T>> x = detail::reduction_buffers<T>(comms, d, options.symmetric_memory, &symmetric_);
  ranks_.reserve(comms.size());
  for (int r = 0; r < n; ++r) {
    const Communicator& comm = comms[static_cast<std::size_t>(r)];
    const Device& device = comm.device();
    const Stream stream(device);
    BasicKernels<T> kernels(*libraries[static_cast<std::size_t>(r)], config_.early_launch);
    // The whole seeded model on this rank's GPU, cut into this rank's shards, then freed.
    const BasicDecoderWeights<T> full = BasicDecoderWeights<T>::generate(stream, kernels, config_);
    const auto rank = static_cast<std::size_t>(r);
    std::vector<Layer> layers;
    layers.reserve(static_cast<std::size_t>(config_.layers));
    for (int l = 0; l < config_.layers; ++l) {
      const BasicAttentionWeights<T>& a = full.attention[static_cast<std::size_t>(l)];
      DeviceBuffer<T> gain(device, d);
      copy_async(stream, gain.view(), a.gain.cview());
      DeviceBuffer<T> wqkv(device, (dq + 2 * dkv) * d);
      copy_async(stream, wqkv.view().subspan(0, dq * d), a.wq(config_).subspan(rank * dq * d, dq * d));
      copy_async(stream, wqkv.view().subspan(dq * d, dkv * d), a.wk(config_).subspan(rank * dkv * d, dkv * d));
      copy_async(stream, wqkv.view().subspan((dq + dkv) * d, dkv * d), a.wv(config_).subspan(rank * dkv * d, dkv * d));
      layers.push_back(
          Layer{std::move(gain), std::move(wqkv), detail::copy_columns(stream, a.wo.cview(), d, q_dim, rank * dq, dq),
                shard_swiglu_weights(stream, full.mlp[static_cast<std::size_t>(l)], config_.d, config_.ffn, r, n)});
    }
    DeviceBuffer<T> embedding(device, full.embedding.size());
    copy_async(stream, embedding.view(), full.embedding.cview());
    DeviceBuffer<T> final_gain(device, d);
    copy_async(stream, final_gain.view(), full.final_gain.cview());
    DeviceBuffer<T> lm_head = detail::copy_rows(stream, full.lm_head.cview(), d, rank * vocab_part, vocab_part);
    stream.synchronize();
    ranks_.push_back(Rank{
        comm, std::move(kernels), std::move(embedding), std::move(layers), std::move(final_gain), std::move(lm_head),
        DeviceBuffer<int>(device, 3), DeviceBuffer<int>(device, 1), x[rank], DeviceBuffer<T>(device, dq + 2 * dkv),
        DeviceBuffer<T>(device, dq), DeviceBuffer<T>(device, static_cast<std::size_t>(config_.ffn / n)),
        DeviceBuffer<T>(device, vocab_part), DeviceBuffer<T>(device, static_cast<std::size_t>(config_.vocab)),
        DeviceBuffer<T>(device, cache), DeviceBuffer<T>(device, cache),
        DeviceBuffer<float>(device, dq / hd * static_cast<std::size_t>(config_.attention_splits()) * (hd + 2)),
        DeviceBuffer<unsigned>(device, dq / hd), DeviceBuffer<float>(device, hd / 2)});
    // attention_split counts each head's blocks here and leaves the counts at zero; they start there.
    fill(ranks_.back().attention_counters.view(), 0U).sync_on(stream);
    const std::vector<float> table = rope_table(config_);
    copy(ranks_.back().rope_frequencies.view(), std::span<const float>(table)).sync_on(stream);
  }
  graph_.emplace(MultiDeviceGraph::capture(comms, [this](int r, Scope& s) { record_step(r, s); }));
}

template <Element T>
void BasicTensorParallelDecoder<T>::record_step(int r, Scope& s) {
  Rank& me = ranks_[static_cast<std::size_t>(r)];
  const BasicKernels<T>& k = me.kernels;
  const DecoderConfig& c = config_;
  const int n = ranks();
  const int d = c.d;
  const int hd = c.head_dim();
  const int heads = c.heads / n;
  const int kv_heads = c.kv_head_count() / n;
  const int dq = heads * hd;
  const int dkv = kv_heads * hd;
  const int vocab_part = c.vocab / n;
  const DeviceSpan<const int> tokens = me.io.cview().subspan(0, 1);
  const DeviceSpan<const int> positions = me.io.cview().subspan(1, 1);
  const DeviceSpan<const int> slots = me.io.cview().subspan(2, 1);
  const float scale = 1.0F / std::sqrt(static_cast<float>(hd));
  const LaunchConfig per_head = k.attention_config(heads, 1, c.context);
  const auto cache_size = static_cast<std::size_t>(c.context) * static_cast<std::size_t>(dkv);
  const auto& down = r == 0 ? k.gemv_add : k.gemv;  // rank 0 keeps x in the all-reduce's sum
  const DeviceSpan<T> q = me.qkv.view().subspan(0, static_cast<std::size_t>(dq));
  const DeviceSpan<T> kk = me.qkv.view().subspan(static_cast<std::size_t>(dq), static_cast<std::size_t>(dkv));
  const DeviceSpan<T> v = me.qkv.view().subspan(static_cast<std::size_t>(dq) + static_cast<std::size_t>(dkv),
                                                static_cast<std::size_t>(dkv));
  // This rank's rows of Wq, Wk and Wv, one after the other in wqkv.
  const auto wq = [&](const Layer& w) { return w.wqkv.cview().subspan(0, static_cast<std::size_t>(dq) * d); };
  const auto wk = [&](const Layer& w) {
    return w.wqkv.cview().subspan(static_cast<std::size_t>(dq) * d, static_cast<std::size_t>(dkv) * d);
  };
  const auto wv = [&](const Layer& w) {
    return w.wqkv.cview().subspan((static_cast<std::size_t>(dq) + static_cast<std::size_t>(dkv)) * d,
                                  static_cast<std::size_t>(dkv) * d);
  };
  const int splits = c.attention_splits();
  const LaunchConfig per_split = k.attention_split_config(heads, 1, c.context, splits, hd);
  const DeviceSpan<const float> frequencies = me.rope_frequencies.cview();

  s.record(named("embedding", k.embedding(k.step_config(grid_for(static_cast<std::size_t>(d), 256)),
                                          me.embedding.cview(), tokens, me.x, d, 1)));
  for (int l = 0; l < c.layers; ++l) {
    const Layer& w = me.layers[static_cast<std::size_t>(l)];
    const DeviceSpan<T> kc = me.k_cache.view().subspan(static_cast<std::size_t>(l) * cache_size, cache_size);
    const DeviceSpan<T> vc = me.v_cache.view().subspan(static_cast<std::size_t>(l) * cache_size, cache_size);
    const std::string name = "layer " + std::to_string(l);
    // Fused (DecoderConfig::fused): the norm, this rank's q, k and v rows, RoPE and the cache append in one kernel,
    // attention spread over blocks of positions; unfused: three projections, rope, kv_append, one block per head.
    // Either is Decoder's with the same `fused`, on this rank's heads.
    auto fused = k.qkv_rope_append(k.qkv_config(dq, dkv, d), wq(w), wk(w), wv(w), DeviceSpan<const T>{},
                                   DeviceSpan<const T>{}, DeviceSpan<const T>{}, me.x.as_const(), w.gain.cview(), q, kc,
                                   vc, positions, slots, d, dq, kv_heads, hd, c.context, 1, frequencies, c.eps, 1) >>
                 choose(splits > 1,
                        k.attention_split(per_split, q.as_const(), kc.as_const(), vc.as_const(), me.attn.view(),
                                          me.attention_partials.view(), me.attention_counters.view(), positions, slots,
                                          heads, kv_heads, hd, c.context, 1, scale),
                        k.attention(per_head, q.as_const(), kc.as_const(), vc.as_const(), me.attn.view(), positions,
                                    slots, heads, kv_heads, hd, c.context, 1, scale));
    auto unfused =
        k.rms_norm_gemv(k.gemv_config(dq, d), wq(w), me.x.as_const(), w.gain.cview(), q, dq, d, c.eps, 1) >>
        k.rms_norm_gemv(k.gemv_config(dkv, d), wk(w), me.x.as_const(), w.gain.cview(), kk, dkv, d, c.eps, 1) >>
        k.rms_norm_gemv(k.gemv_config(dkv, d), wv(w), me.x.as_const(), w.gain.cview(), v, dkv, d, c.eps, 1) >>
        k.rope(k.step_config(grid_for(static_cast<std::size_t>(dq), 256)), q, kk, positions, heads, kv_heads, hd,
               frequencies, 1) >>
        k.kv_append(k.step_config(grid_for(static_cast<std::size_t>(dkv), 256)), kk.as_const(), v.as_const(), kc, vc,
                    positions, slots, kv_heads, hd, c.context, 1, 1) >>
        k.attention(per_head, q.as_const(), kc.as_const(), vc.as_const(), me.attn.view(), positions, slots, heads,
                    kv_heads, hd, c.context, 1, scale);
    s.record(named(name + " attention", choose(c.fused, std::move(fused), std::move(unfused)) >>
                                            down(k.gemv_config(d, dq), w.wo.cview(), me.attn.cview(), me.x, d, dq, 1) >>
                                            all_reduce(me.comm, me.x)));
    s.record(named(name + " mlp", tensor_parallel_swiglu_block(k, w.mlp, me.comm, me.x, me.act.view(), d, c.eps)));
  }
  s.record(named("lm head", k.rms_norm_gemv(k.gemv_config(vocab_part, d), me.lm_head.cview(), me.x.as_const(),
                                            me.final_gain.cview(), me.logits_part.view(), vocab_part, d, c.eps, 1) >>
                                all_gather<T>(me.comm, me.logits_part.cview(), me.logits.view()) >>
                                k.argmax(k.step_config({{1, 1, 1}, {1024, 1, 1}, 0}), me.logits.cview(), me.next.view(),
                                         c.vocab)));
}

template <Element T>
int BasicTensorParallelDecoder<T>::forward(TokenAt in) {
  check_step(config_, in);
  const std::vector<int> io{in.token, in.position, 0};
  for (std::size_t r = 0; r < ranks_.size(); ++r) {
    copy_async(graph_->graph(static_cast<int>(r)).stream(), ranks_[r].io.view(), std::span<const int>(io));
  }
  graph_->launch();
  int next = -1;
  const Stream& s = graph_->graph(0).stream();
  copy_async(s, std::span<int>(&next, 1), ranks_[0].next.cview());
  s.synchronize();
  return next;
}

template <Element T>
std::vector<T> BasicTensorParallelDecoder<T>::logits() const {
  std::vector<T> out(static_cast<std::size_t>(config_.vocab));
  const Stream s(ranks_[0].comm.device());
  copy_async(s, std::span<T>(out), ranks_[0].logits.cview());
  s.synchronize();
  return out;
}

template class BasicTensorParallelDecoder<half>;
template class BasicTensorParallelDecoder<bfloat16>;

}  // namespace lazygraph::nn
