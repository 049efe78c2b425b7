#include "lazygraph/nn/decoder.hpp"

#include <string>

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
  c.validate();
  const auto make = [&](const TensorSpec& spec) { return device_tensor(stream, kernels.fill_uniform, c.seed, spec); };
  const TensorSpec embedding{1000000, static_cast<std::size_t>(c.vocab) * static_cast<std::size_t>(c.d), 1.0F, 0.0F};
  DecoderWeights w{make(embedding), {}, {}, make(gain_spec(1000001, c.d)), make(matrix_spec(1000002, c.vocab, c.d))};
  for (int l = 0; l < c.layers; ++l) {
    const auto id = [&](std::uint32_t slot) { return 16U * static_cast<std::uint32_t>(l) + slot; };
    w.attention.push_back({make(gain_spec(id(1), c.d)), make(matrix_spec(id(2), c.d, c.d)),
                           make(matrix_spec(id(3), c.kv_dim(), c.d)), make(matrix_spec(id(4), c.kv_dim(), c.d)),
                           make(matrix_spec(id(5), c.d, c.d))});
    w.mlp.push_back(generate_swiglu_weights(stream, kernels, c.seed, l, c.d, c.ffn));
  }
  return w;
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
