#include "lazygraph/nn/decoder.hpp"

#include <string>

#include "lazygraph/nn/decoder_tensors.hpp"
#include "lazygraph/nn/random_weights.hpp"

namespace lazygraph::nn {

void DecoderConfig::validate() const {
  const auto fail = [](const std::string& why) { throw UsageError("DecoderConfig: " + why); };
  if (d <= 0 || heads <= 0 || layers <= 0 || ffn <= 0 || vocab <= 0 || context <= 0)
    fail("every size must be positive");
  if (d % 8 != 0 || ffn % 8 != 0) fail("d and ffn must be multiples of 8 (the gemv kernels load 8 halves at a time)");
  if (d % heads != 0) fail("d (" + std::to_string(d) + ") must be divisible by heads (" + std::to_string(heads) + ")");
  if (kv_heads < 0 || heads % kv_head_count() != 0) {
    fail("heads (" + std::to_string(heads) + ") must be a multiple of kv_heads (" + std::to_string(kv_heads) + ")");
  }
  if (head_dim() % 8 != 0 || head_dim() > 128) {
    fail("head_dim (" + std::to_string(head_dim()) +
         ") must be a multiple of 8 and at most 128 (the attention kernel)");
  }
  if (context > 8192)
    fail("context (" + std::to_string(context) + ") must be at most 8192 (scores live in shared memory)");
}

std::size_t DecoderConfig::weight_bytes() const {
  const auto dd = static_cast<std::size_t>(d);
  const auto kv = static_cast<std::size_t>(kv_dim());
  const std::size_t per_layer = 2 * dd * dd + 2 * kv * dd + 3 * dd * static_cast<std::size_t>(ffn) + 2 * dd;
  return (per_layer * static_cast<std::size_t>(layers) + static_cast<std::size_t>(vocab) * dd + 2 * dd) * sizeof(half);
}

DecoderWeights DecoderWeights::generate(const Stream& stream, const Kernels& kernels, const DecoderConfig& c) {
  return assemble_decoder_weights(
      c, [&](const DecoderTensor& t) { return device_tensor(stream, kernels.fill_uniform, c.seed, t.seeded); });
}

namespace {
DeviceBuffer<half> halves(const Device& device, std::size_t n) { return DeviceBuffer<half>(device, n); }
}  // namespace

DecoderState::DecoderState(const Device& device, const DecoderConfig& c)
    : io(device, 2),
      next(device, 1),
      x(halves(device, static_cast<std::size_t>(c.d))),
      q(halves(device, static_cast<std::size_t>(c.d))),
      k(halves(device, static_cast<std::size_t>(c.kv_dim()))),
      v(halves(device, static_cast<std::size_t>(c.kv_dim()))),
      attn(halves(device, static_cast<std::size_t>(c.d))),
      act(halves(device, static_cast<std::size_t>(c.ffn))),
      logits(halves(device, static_cast<std::size_t>(c.vocab))),
      k_cache(halves(device, static_cast<std::size_t>(c.layers) * static_cast<std::size_t>(c.context) *
                                 static_cast<std::size_t>(c.kv_dim()))),
      v_cache(halves(device, k_cache.size())) {}

namespace {
const DecoderConfig& validated(const DecoderConfig& c) {
  c.validate();
  return c;
}
}  // namespace

Decoder::Decoder(const Stream& stream, const KernelLibrary& library, const DecoderConfig& config)
    : config_(validated(config)),
      kernels_(library, config_.early_launch),
      weights_(DecoderWeights::generate(stream, kernels_, config_)),
      state_(stream.device(), config_),
      io_host_(stream.device(), 2),
      next_host_(stream.device(), 1),
      graph_(CudaGraph<>::capture(stream, step_op())) {
  reset();
}

namespace {
/// `w`, after checking that every buffer has the size `c` gives its tensor.
DecoderWeights checked(DecoderWeights w, const DecoderConfig& c) {
  std::vector<const DeviceBuffer<half>*> buffers{&w.embedding};
  if (w.attention.size() != static_cast<std::size_t>(c.layers) || w.mlp.size() != w.attention.size()) {
    throw UsageError("Decoder: the weights have " + std::to_string(w.attention.size()) + " layers, the config " +
                     std::to_string(c.layers));
  }
  for (std::size_t l = 0; l < w.attention.size(); ++l) {
    const AttentionWeights& a = w.attention[l];
    const SwigluWeights& m = w.mlp[l];
    buffers.insert(buffers.end(), {&a.gain, &a.wq, &a.wk, &a.wv, &a.wo, &m.gain, &m.w1, &m.w3, &m.w2});
  }
  buffers.insert(buffers.end(), {&w.final_gain, &w.lm_head});
  const std::vector<DecoderTensor> tensors = decoder_tensors(c);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (buffers[i]->size() != tensors[i].elements()) {
      throw UsageError("Decoder: weight " + tensors[i].name + " has " + std::to_string(buffers[i]->size()) +
                       " elements, the config needs " + std::to_string(tensors[i].elements()));
    }
  }
  return w;
}
}  // namespace

Decoder::Decoder(const Stream& stream, const KernelLibrary& library, const DecoderConfig& config,
                 DecoderWeights weights)
    : config_(validated(config)),
      kernels_(library, config_.early_launch),
      weights_(checked(std::move(weights), config_)),
      state_(stream.device(), config_),
      io_host_(stream.device(), 2),
      next_host_(stream.device(), 1),
      graph_(CudaGraph<>::capture(stream, step_op())) {
  reset();
}

void Decoder::reset() {
  (fill(state_.k_cache.view(), half{}) >> fill(state_.v_cache.view(), half{})).sync_on(graph_.stream());
}

Decoder::Output Decoder::forward(Input in) {
  if (in.token < 0 || in.token >= config_.vocab) {
    throw UsageError("Decoder::forward: token " + std::to_string(in.token) + " is outside the vocabulary [0, " +
                     std::to_string(config_.vocab) + ")");
  }
  if (in.position < 0 || in.position >= config_.context) {
    throw UsageError("Decoder::forward: position " + std::to_string(in.position) + " is outside the context [0, " +
                     std::to_string(config_.context) + ")");
  }
  io_host_[0] = in.token;
  io_host_[1] = in.position;
  const Stream& s = graph_.stream();
  copy_async(s, state_.io.view(), std::as_const(io_host_).span());
  graph_.launch_on(s);
  copy_async(s, next_host_.span(), state_.next.cview());
  s.synchronize();
  return next_host_[0];
}

std::vector<half> Decoder::logits() const {
  std::vector<half> out(static_cast<std::size_t>(config_.vocab));
  const Stream& s = graph_.stream();
  copy_async(s, std::span<half>(out), state_.logits.cview());
  s.synchronize();
  return out;
}

}  // namespace lazygraph::nn
