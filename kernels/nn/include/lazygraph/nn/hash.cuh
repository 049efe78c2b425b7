// The 32-bit integer hash of docs/nn.md, shared by the seeded weights and sampling. Include as
// "lazygraph/nn/hash.cuh".
#pragma once

namespace lg::nn {

/// mix(x) of docs/nn.md (all arithmetic modulo 2^32).
__device__ __forceinline__ unsigned mix(unsigned x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

/// The key of tensor (or stream) `id` under `seed`: mix(seed ^ mix(id)).
__device__ __forceinline__ unsigned tensor_key(unsigned seed, unsigned id) { return mix(seed ^ mix(id)); }

}  // namespace lg::nn
