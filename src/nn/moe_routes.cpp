#include "lazygraph/nn/moe_routes.hpp"

#include <algorithm>
#include <string>

#include "lazygraph/driver/error.hpp"
#include "lazygraph/nn/decoder_io.hpp"

namespace lazygraph::nn {

namespace {
/// The index of (layer, row, k) in MoeRoutes' arrays, after checking each against its range.
std::size_t route_index(const MoeRoutes& r, int layer, int row, int k) {
  const auto check = [](int value, int size, const char* name) {
    if (value < 0 || value >= size) {
      throw UsageError("MoeRoutes: " + std::string(name) + " " + std::to_string(value) + " is outside [0, " +
                       std::to_string(size) + ")");
    }
  };
  check(layer, r.layers, "layer");
  check(row, r.rows, "row");
  check(k, r.top_k, "rank k");
  return ((static_cast<std::size_t>(layer) * static_cast<std::size_t>(r.rows)) + static_cast<std::size_t>(row)) *
             static_cast<std::size_t>(r.top_k) +
         static_cast<std::size_t>(k);
}
}  // namespace

int MoeRoutes::expert(int layer, int row, int k) const { return experts[route_index(*this, layer, row, k)]; }

float MoeRoutes::weight(int layer, int row, int k) const { return weights[route_index(*this, layer, row, k)]; }

std::vector<int> MoeRoutes::distinct_experts(int layer) const {
  if (rows == 0) return {};
  const std::size_t first = route_index(*this, layer, 0, 0);
  const std::size_t count = static_cast<std::size_t>(rows) * static_cast<std::size_t>(top_k);
  std::vector<int> out(experts.begin() + static_cast<std::ptrdiff_t>(first),
                       experts.begin() + static_cast<std::ptrdiff_t>(first + count));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::size_t route_buffer_size(const DecoderConfig& c) noexcept {
  if (!c.mixture_of_experts()) return 0;
  const std::size_t layer = kMaxRows * static_cast<std::size_t>(c.moe.experts_per_token);
  return c.record_routes ? static_cast<std::size_t>(c.layers) * layer : layer;
}

std::size_t route_offset(const DecoderConfig& c, int layer) noexcept {
  if (!c.record_routes) return 0;
  return static_cast<std::size_t>(layer) * kMaxRows * static_cast<std::size_t>(c.moe.experts_per_token);
}

void check_last_routes(const DecoderConfig& c, int rows) {
  if (!c.mixture_of_experts()) {
    throw UsageError("Decoder::last_routes: the decoder has no mixture of experts (DecoderConfig::moe.experts is 0)");
  }
  if (!c.record_routes) {
    throw UsageError(
        "Decoder::last_routes: DecoderConfig::record_routes (LoadOptions::record_routes) is off, so each layer's "
        "routes were overwritten by the next layer's");
  }
  if (rows <= 0) throw UsageError("Decoder::last_routes: no step has run yet");
}

MoeRoutes gather_routes(const DecoderConfig& c, int rows, std::span<const int> ids, std::span<const float> weights) {
  check_last_routes(c, rows);
  if (rows > kMaxRows) {
    throw UsageError("Decoder::last_routes: " + std::to_string(rows) + " rows, at most " + std::to_string(kMaxRows));
  }
  const std::size_t size = route_buffer_size(c);
  if (ids.size() != size || weights.size() != size) {
    throw UsageError("Decoder::last_routes: route buffers of " + std::to_string(ids.size()) + " ids and " +
                     std::to_string(weights.size()) + " weights, the config needs " + std::to_string(size));
  }
  MoeRoutes r{c.layers, rows, c.moe.experts_per_token, {}, {}};
  const std::size_t per_layer = static_cast<std::size_t>(rows) * static_cast<std::size_t>(r.top_k);
  r.experts.reserve(per_layer * static_cast<std::size_t>(c.layers));
  r.weights.reserve(r.experts.capacity());
  for (int l = 0; l < c.layers; ++l) {
    const std::size_t at = route_offset(c, l);
    r.experts.insert(r.experts.end(), ids.begin() + static_cast<std::ptrdiff_t>(at),
                     ids.begin() + static_cast<std::ptrdiff_t>(at + per_layer));
    r.weights.insert(r.weights.end(), weights.begin() + static_cast<std::ptrdiff_t>(at),
                     weights.begin() + static_cast<std::ptrdiff_t>(at + per_layer));
  }
  return r;
}

}  // namespace lazygraph::nn
