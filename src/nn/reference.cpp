#include "lazygraph/nn/reference.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <stdexcept>

#include "lazygraph/nn/decoder_tensors.hpp"
#include "lazygraph/nn/moe_routing.hpp"
#include "lazygraph/nn/random_weights.hpp"

namespace lazygraph::nn {

namespace {

/// out[r] = sum_c w[r * cols + c] * x[c]
std::vector<double> matvec(const std::vector<double>& w, std::span<const double> x, int rows, int cols) {
  std::vector<double> out(static_cast<std::size_t>(rows));
  for (std::size_t r = 0; r < out.size(); ++r) {
    const double* row = w.data() + r * static_cast<std::size_t>(cols);
    double acc = 0.0;
    for (std::size_t c = 0; c < static_cast<std::size_t>(cols); ++c) acc += row[c] * x[c];
    out[r] = acc;
  }
  return out;
}

std::vector<double> rms_norm(std::span<const double> x, const std::vector<double>& gain, double eps) {
  double ss = 0.0;
  for (const double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv * gain[i];
  return out;
}

double silu(double a) { return a / (1.0 + std::exp(-a)); }

/// GELU's tanh form: a / 2 (1 + tanh(sqrt(2 / pi) (a + 0.044715 a^3))).
double gelu_tanh(double a) {
  return 0.5 * a * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (a + 0.044715 * a * a * a)));
}

/// x += W2 (silu(W1 h) * (W3 h)), h = rmsnorm(x) * gain.
void swiglu_block(std::vector<double>& x, const std::vector<double>& gain, const std::vector<double>& w1,
                  const std::vector<double>& w3, const std::vector<double>& w2, int d, int ffn, double eps) {
  const std::vector<double> h = rms_norm(x, gain, eps);
  const std::vector<double> a = matvec(w1, h, ffn, d);
  const std::vector<double> b = matvec(w3, h, ffn, d);
  std::vector<double> act(a.size());
  for (std::size_t i = 0; i < act.size(); ++i) act[i] = silu(a[i]) * b[i];
  const std::vector<double> down = matvec(w2, act, d, ffn);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += down[i];
}

std::uint32_t layer_id(int layer, std::uint32_t slot) { return 16U * static_cast<std::uint32_t>(layer) + slot; }

/// Rotates the pairs (2i, 2i+1) of every head by position * frequencies[i].
/// Each head of `t` ([heads][head_dim]) RMS-normed with `gain` [head_dim] (a q or k norm).
void head_norm(std::vector<double>& t, int heads, int head_dim, const std::vector<double>& gain, double eps) {
  const auto hd = static_cast<std::size_t>(head_dim);
  for (std::size_t h = 0; h < static_cast<std::size_t>(heads); ++h) {
    const std::vector<double> normed = rms_norm(std::span<const double>(t).subspan(h * hd, hd), gain, eps);
    std::copy(normed.begin(), normed.end(), t.begin() + static_cast<std::ptrdiff_t>(h * hd));
  }
}

void rope(std::vector<double>& t, int heads, int head_dim, int position, const std::vector<double>& frequencies) {
  for (int h = 0; h < heads; ++h) {
    for (int i = 0; i < head_dim / 2; ++i) {
      const double angle = position * frequencies[static_cast<std::size_t>(i)];
      const std::size_t at =
          static_cast<std::size_t>(h) * static_cast<std::size_t>(head_dim) + 2 * static_cast<std::size_t>(i);
      const double a = t[at];
      const double b = t[at + 1];
      t[at] = a * std::cos(angle) - b * std::sin(angle);
      t[at + 1] = a * std::sin(angle) + b * std::cos(angle);
    }
  }
}

/// The seeded tensor rounded to `weights` (F16 or BF16), widened to double.
std::vector<double> seeded(std::uint32_t seed, const TensorSpec& spec, DType weights) {
  return weights == DType::bf16 ? host_tensor_f64<bfloat16>(seed, spec) : host_tensor_f64<half>(seed, spec);
}

void check_weights(DType weights, const char* what) {
  if (weights != DType::f16 && weights != DType::bf16) {
    throw UsageError(std::string(what) + ": weights must be F16 or BF16, not " + std::string(dtype_name(weights)));
  }
}

}  // namespace

std::vector<double> mlp_reference(const MlpConfig& config, std::span<const double> input, DType weights) {
  config.validate();
  check_weights(weights, "mlp_reference");
  const auto d = static_cast<std::size_t>(config.d);
  if (input.empty() || input.size() % d != 0) {
    throw std::invalid_argument("mlp_reference: input size is not a positive multiple of d");
  }
  std::vector<double> x(input.begin(), input.end());
  for (int l = 0; l < config.layers; ++l) {  // each layer's weights generated once, applied to every row
    const std::vector<double> gain = seeded(config.seed, gain_spec(layer_id(l, 6), config.d), weights);
    const std::vector<double> w1 = seeded(config.seed, matrix_spec(layer_id(l, 7), config.ffn, config.d), weights);
    const std::vector<double> w3 = seeded(config.seed, matrix_spec(layer_id(l, 8), config.ffn, config.d), weights);
    const std::vector<double> w2 = seeded(config.seed, matrix_spec(layer_id(l, 9), config.d, config.ffn), weights);
    for (std::size_t at = 0; at < x.size(); at += d) {
      std::vector<double> row(x.begin() + static_cast<std::ptrdiff_t>(at),
                              x.begin() + static_cast<std::ptrdiff_t>(at + d));
      swiglu_block(row, gain, w1, w3, w2, config.d, config.ffn, config.eps);
      std::copy(row.begin(), row.end(), x.begin() + static_cast<std::ptrdiff_t>(at));
    }
  }
  return x;
}

DecoderReference::DecoderReference(const DecoderConfig& config, DType weights) : config_(config) {
  config.validate();
  check_weights(weights, "DecoderReference");
  const DecoderConfig& c = config_;
  const std::vector<DecoderTensor> tensors = decoder_tensors(c);
  auto next = tensors.begin();
  const auto take = [&] {
    const DecoderTensor& t = *next++;
    return seeded(c.seed, t.seeded, weights);
  };
  embedding_ = take();
  for (int l = 0; l < c.layers; ++l) {
    Layer& layer = layers_.emplace_back();
    for (std::vector<double>* w : {&layer.attn_gain, &layer.wq, &layer.wk, &layer.wv, &layer.wo}) *w = take();
    if (c.qkv_bias) {
      for (std::vector<double>* w : {&layer.bq, &layer.bk, &layer.bv}) *w = take();
    }
    if (c.qk_norm) {
      for (std::vector<double>* w : {&layer.q_norm, &layer.k_norm}) *w = take();
    }
    if (c.post_norms) layer.attn_post_gain = take();
    if (c.mixture_of_experts()) {  // the router, then each kind of expert matrix in expert order
      layer.mlp_gain = take();
      layer.router = take();
      for (std::vector<std::vector<double>>* kind : {&layer.expert_w1, &layer.expert_w3, &layer.expert_w2}) {
        for (int e = 0; e < c.moe.experts; ++e) kind->push_back(take());
      }
    } else {
      for (std::vector<double>* w : {&layer.mlp_gain, &layer.w1, &layer.w3, &layer.w2}) *w = take();
    }
    if (c.post_norms) layer.mlp_post_gain = take();
  }
  final_gain_ = take();
  lm_head_ = take();
  frequencies_ = rope_frequencies(c.theta, c.rope_scaling, c.head_dim());
  if (c.local_theta > 0) local_frequencies_ = rope_frequencies(c.local_theta, {}, c.head_dim());
  // The embedding's scale as the GPU model multiplies by it: rounded to the weights' type.
  embedding_scale_ = weights == DType::bf16 ? bfloat16::from_float(c.embedding_scale).to_float()
                                            : half::from_float(c.embedding_scale).to_float();
  const std::size_t cache = static_cast<std::size_t>(c.context) * static_cast<std::size_t>(c.kv_dim());
  k_cache_.assign(static_cast<std::size_t>(c.layers), std::vector<double>(cache));
  v_cache_.assign(static_cast<std::size_t>(c.layers), std::vector<double>(cache));
}

std::vector<double> DecoderReference::step(int token, int position) {
  const DecoderConfig& c = config_;
  if (token < 0 || token >= c.vocab || position < 0 || position >= c.context) {
    throw std::invalid_argument("DecoderReference::step: token or position out of range");
  }
  const auto hd = static_cast<std::size_t>(c.head_dim());
  const auto d = static_cast<std::size_t>(c.d);
  std::vector<double> x(embedding_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(token) * d),
                        embedding_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(token + 1) * d));
  for (double& e : x) e *= embedding_scale_;
  last_routes_.clear();
  last_route_margins_.clear();
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& w = layers_[l];
    const int layer = static_cast<int>(l);
    const std::vector<double>& frequencies = c.local_rope(layer) ? local_frequencies_ : frequencies_;
    const int window = c.layer_window(layer);
    // A block's output into the residual stream: added, or with post-norms its RMSNorm added.
    const auto add_output = [&](const std::vector<double>& out, const std::vector<double>& post_gain) {
      const std::vector<double> y = c.post_norms ? rms_norm(out, post_gain, c.eps) : out;
      for (std::size_t i = 0; i < d; ++i) x[i] += y[i];
    };
    const std::vector<double> h = rms_norm(x, w.attn_gain, c.eps);
    std::vector<double> q = matvec(w.wq, h, c.q_dim(), c.d);
    std::vector<double> k = matvec(w.wk, h, c.kv_dim(), c.d);
    std::vector<double> v = matvec(w.wv, h, c.kv_dim(), c.d);
    const auto add = [](std::vector<double>& to, const std::vector<double>& bias) {
      for (std::size_t i = 0; i < bias.size(); ++i) to[i] += bias[i];
    };
    add(q, w.bq);  // empty without qkv_bias
    add(k, w.bk);
    add(v, w.bv);
    if (c.qk_norm_whole) {  // one norm over the whole q and one over the whole k (OLMoE's)
      q = rms_norm(q, w.q_norm, c.eps);
      k = rms_norm(k, w.k_norm, c.eps);
    } else if (c.qk_norm) {
      head_norm(q, c.heads, c.head_dim(), w.q_norm, c.eps);
      head_norm(k, c.kv_head_count(), c.head_dim(), w.k_norm, c.eps);
    }
    rope(q, c.heads, c.head_dim(), position, frequencies);
    rope(k, c.kv_head_count(), c.head_dim(), position, frequencies);
    std::vector<double> o(static_cast<std::size_t>(c.q_dim()));
    const auto pos = static_cast<std::size_t>(position);
    const auto cache_base = [&](std::size_t kv_head) { return kv_head * static_cast<std::size_t>(c.context) * hd; };
    for (std::size_t g = 0; g < static_cast<std::size_t>(c.kv_head_count()); ++g) {
      std::copy_n(k.begin() + static_cast<std::ptrdiff_t>(g * hd), hd,
                  k_cache_[l].begin() + static_cast<std::ptrdiff_t>(cache_base(g) + pos * hd));
      std::copy_n(v.begin() + static_cast<std::ptrdiff_t>(g * hd), hd,
                  v_cache_[l].begin() + static_cast<std::ptrdiff_t>(cache_base(g) + pos * hd));
    }
    const auto group = static_cast<std::size_t>(c.heads / c.kv_head_count());
    for (std::size_t head = 0; head < static_cast<std::size_t>(c.heads); ++head) {
      const std::size_t first = head * hd;  // this head's slice of q and o
      const auto at = [&](std::size_t j) { return cache_base(head / group) + j * hd; };
      const std::size_t lo = window > 0 && pos + 1 > static_cast<std::size_t>(window) ? pos + 1 - window : 0;
      const double scale =
          c.attention_scale > 0 ? static_cast<double>(c.attention_scale) : 1.0 / std::sqrt(static_cast<double>(hd));
      std::vector<double> scores(pos + 1 - lo);
      for (std::size_t j = lo; j <= pos; ++j) {
        double s = 0.0;
        for (std::size_t i = 0; i < hd; ++i) s += q[first + i] * k_cache_[l][at(j) + i];
        scores[j - lo] = s * scale;
      }
      const double top = *std::max_element(scores.begin(), scores.end());
      double total = 0.0;
      for (double& s : scores) total += (s = std::exp(s - top));
      for (std::size_t j = lo; j <= pos; ++j) {
        const double weight = scores[j - lo] / total;
        for (std::size_t i = 0; i < hd; ++i) o[first + i] += weight * v_cache_[l][at(j) + i];
      }
    }
    add_output(matvec(w.wo, o, c.d, c.q_dim()), w.attn_post_gain);
    const std::vector<double> h2 = rms_norm(x, w.mlp_gain, c.eps);
    if (c.mixture_of_experts()) {  // the router's top k experts, each's SwiGLU weighted into the residual
      const int width = c.moe.expert_width;
      std::vector<double> sum(d);
      const std::vector<double> logits = matvec(w.router, h2, c.moe.experts, c.d);
      const std::vector<ExpertChoice> route = route_token(logits, c.moe.experts_per_token, c.moe.normalize);
      double margin = std::numeric_limits<double>::infinity();
      if (c.moe.experts_per_token < c.moe.experts) {
        std::vector<double> sorted = logits;
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        const auto k = static_cast<std::size_t>(c.moe.experts_per_token);
        margin = sorted[k - 1] - sorted[k];
        route_margin_ = std::min(route_margin_, margin);
      }
      last_routes_.push_back(route);
      last_route_margins_.push_back(margin);
      for (const ExpertChoice& chosen : route) {
        const auto e = static_cast<std::size_t>(chosen.expert);
        const std::vector<double> a = matvec(w.expert_w1[e], h2, width, c.d);
        const std::vector<double> b = matvec(w.expert_w3[e], h2, width, c.d);
        std::vector<double> act(a.size());
        for (std::size_t i = 0; i < act.size(); ++i) act[i] = silu(a[i]) * b[i];
        const std::vector<double> down = matvec(w.expert_w2[e], act, c.d, width);
        for (std::size_t i = 0; i < d; ++i) sum[i] += chosen.weight * down[i];
      }
      add_output(sum, w.mlp_post_gain);
      continue;
    }
    const std::vector<double> a = matvec(w.w1, h2, c.ffn, c.d);
    const std::vector<double> b = matvec(w.w3, h2, c.ffn, c.d);
    std::vector<double> act(a.size());
    for (std::size_t i = 0; i < act.size(); ++i) {
      act[i] = (c.activation == GateActivation::gelu_tanh ? gelu_tanh(a[i]) : silu(a[i])) * b[i];
    }
    add_output(matvec(w.w2, act, c.d, c.ffn), w.mlp_post_gain);
  }
  std::vector<double> logits = matvec(lm_head_, rms_norm(x, final_gain_, c.eps), c.vocab, c.d);
  if (c.logit_softcap > 0) {
    const double cap = c.logit_softcap;
    for (double& v : logits) v = std::tanh(v / cap) * cap;
  }
  return logits;
}

double relative_error(std::span<const double> got, std::span<const double> want) {
  if (got.size() != want.size()) throw std::invalid_argument("relative_error: sizes differ");
  double diff = 0.0;
  double norm = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff) / std::sqrt(norm);
}

std::vector<double> widen(std::span<const half> values) {
  std::vector<double> out(values.size());
  std::transform(values.begin(), values.end(), out.begin(), [](half h) { return double{h.to_float()}; });
  return out;
}

std::vector<double> widen(std::span<const bfloat16> values) {
  std::vector<double> out(values.size());
  std::transform(values.begin(), values.end(), out.begin(), [](bfloat16 h) { return double{h.to_float()}; });
  return out;
}

int argmax(std::span<const double> values) {
  return static_cast<int>(std::max_element(values.begin(), values.end()) - values.begin());
}

}  // namespace lazygraph::nn
