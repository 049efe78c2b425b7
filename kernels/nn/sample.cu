// The next token of each row of logits ([rows][n]; fp16 for `sample`, bf16 for `sample_bf16`), drawn at a temperature
// from the top-k logits with a seeded, reproducible random number; temperature 0 is greedy (the argmax kernel's rule).
// One block per row.
//
//   sample(logits, out, positions, slots, n, top_k, temperature, seed), sample_bf16(...) alike
//
// For row b, with p = positions[b] and s = slots[b] (the sequence: so a sequence draws the same numbers whether
// stepped alone or in a batch):
//   temperature <= 0:  out[b] = argmax (lowest index among ties, NaN never; -1 if all NaN).
//   otherwise:         candidates = the non-NaN logits >= the top_k-th largest (all of them when top_k <= 0 or
//                      top_k >= their count; ties at that value are all kept);
//                      w_i = exp((l_i - max) / temperature) in fp32 over candidates;
//                      u = float(mix(mix(seed ^ mix(p)) + s) >> 8) * 2^-24, in [0, 1) (docs/nn.md's mix);
//                      out[b] = the smallest candidate index i whose prefix sum of w (index order) exceeds
//                      u * sum(w); the last index of nonzero weight if rounding leaves none. -1 if every logit
//                      is NaN. When the largest logit is +inf, the +inf logits share the probability equally.
// The top_k-th largest is found by a radix select over the 16-bit order-preserving keys of the values (fp16 and bf16
// alike: both are sign and magnitude) (two passes of 8-bit digits through a shared histogram), not by k rounds of
// argmax.
//
// Launch: grid = the row count, block 32 * k threads (k = 1..32, e.g. 1024), no dynamic shared memory.
#include "lazygraph/block_reduce.cuh"
#include "lazygraph/nn/argmax.cuh"
#include "lazygraph/nn/hash.cuh"

namespace {

/// A 16-bit float's bits (fp16 or bf16: sign and magnitude) as an unsigned key whose order is the values' order
/// (NaNs excluded by the caller).
__device__ __forceinline__ unsigned order_key(unsigned short bits) {
  return (bits & 0x8000u) != 0 ? (~static_cast<unsigned>(bits) & 0xffffu) : (bits | 0x8000u);
}

__device__ __forceinline__ bool is_nan(lg::half_t h) { return (h.bits & 0x7c00u) == 0x7c00u && (h.bits & 0x3ffu) != 0; }
__device__ __forceinline__ bool is_nan(lg::bf16_t h) { return (h.bits & 0x7f80u) == 0x7f80u && (h.bits & 0x7fu) != 0; }

/// The key of the k-th largest non-NaN logit (1 <= k <= their count), for the whole block.
template <class T>
__device__ unsigned kth_largest_key(const T* logits, int n, int k) {
  __shared__ unsigned histogram[256];
  __shared__ unsigned found_prefix;
  __shared__ int found_remaining;
  unsigned prefix = 0;
  int remaining = k;
  for (int shift = 8; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) histogram[i] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      if (is_nan(logits[i])) continue;
      const unsigned key = order_key(logits[i].bits);
      if (shift == 0 && (key >> 8) != (prefix >> 8)) continue;  // only the high digit found in the first pass
      atomicAdd(&histogram[(key >> shift) & 0xffu], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int r = remaining;
      int digit = 255;
      for (; digit > 0; --digit) {
        if (static_cast<int>(histogram[digit]) >= r) break;
        r -= static_cast<int>(histogram[digit]);
      }
      found_prefix = prefix | (static_cast<unsigned>(digit) << shift);
      found_remaining = r;
    }
    __syncthreads();
    prefix = found_prefix;
    remaining = found_remaining;
    __syncthreads();  // the histogram is cleared for the next pass only after everyone read the result
  }
  return prefix;
}

/// Exclusive prefix sum of `v` over a 1-D block, and the block's total in `total`.
__device__ float block_exclusive_scan(float v, float& total) {
  __shared__ float warp_totals[32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  float inclusive = v;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const float other = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  if (lane == 31) warp_totals[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / 32;
    float t = lane < warps ? warp_totals[lane] : 0.0f;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const float other = __shfl_up_sync(0xffffffffu, t, offset);
      if (lane >= offset) t += other;
    }
    if (lane < warps) warp_totals[lane] = t;  // inclusive over warps
  }
  __syncthreads();
  total = warp_totals[blockDim.x / 32 - 1];
  const float before_warp = warp > 0 ? warp_totals[warp - 1] : 0.0f;
  return before_warp + inclusive - v;
}

template <class T>
__device__ __forceinline__ void sample_body(const T* logits, int* out, const int* positions, const int* slots, int n,
                                            int top_k, float temperature, unsigned seed) {
  lg::early_launch_prologue();  // may be launched early (LaunchConfig::early_launch)
  const int row = blockIdx.x;
  logits += static_cast<long long>(row) * n;
  if (!(temperature > 0.0f)) {
    const int best = lg::nn::block_argmax(logits, n);
    if (threadIdx.x == 0) out[row] = best;
    return;
  }
  float top = -__int_as_float(0x7f800000);
  float count = 0.0f;  // exact: n < 2^24
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    if (is_nan(logits[i])) continue;
    top = fmaxf(top, lg::to_float(logits[i]));
    count += 1.0f;
  }
  top = lg::block_max(top);
  const int valid = static_cast<int>(lg::block_sum(count));
  if (valid == 0) {
    if (threadIdx.x == 0) out[row] = -1;
    return;
  }
  const unsigned threshold = top_k > 0 && top_k < valid ? kth_largest_key(logits, n, top_k) : 0u;
  const float inv_t = 1.0f / temperature;
  const auto weight = [&](int i, bool& candidate) {
    candidate = !is_nan(logits[i]) && order_key(logits[i].bits) >= threshold;
    if (!candidate) return 0.0f;
    const float v = lg::to_float(logits[i]);
    // +inf logits share the probability (inf - inf would make every weight NaN).
    return top == __int_as_float(0x7f800000) ? (v == top ? 1.0f : 0.0f) : expf((v - top) * inv_t);
  };
  // Each thread takes a contiguous range of indices, so the block's scan follows index order.
  const int per_thread = (n + static_cast<int>(blockDim.x) - 1) / static_cast<int>(blockDim.x);
  const int begin = min(n, static_cast<int>(threadIdx.x) * per_thread);
  const int end = min(n, begin + per_thread);
  float mine = 0.0f;
  int last_candidate = -1;
  for (int i = begin; i < end; ++i) {
    bool candidate = false;
    const float w = weight(i, candidate);
    mine += w;
    if (w > 0.0f) last_candidate = i;  // an underflowed weight is never the fallback
  }
  float total = 0.0f;
  const float before = block_exclusive_scan(mine, total);
  const unsigned key = lg::nn::tensor_key(seed, static_cast<unsigned>(positions[row]));
  const float u = static_cast<float>(lg::nn::mix(key + static_cast<unsigned>(slots[row])) >> 8) * (1.0f / 16777216.0f);
  const float target = u * total;

  __shared__ int chosen;
  __shared__ int last;
  if (threadIdx.x == 0) {
    chosen = 0x7fffffff;
    last = -1;
  }
  __syncthreads();
  atomicMax(&last, last_candidate);
  if (mine > 0.0f && target >= before && target < before + mine) {
    float acc = before;
    int pick = last_candidate;  // if rounding walks past the end of this range
    for (int i = begin; i < end; ++i) {
      bool candidate = false;
      acc += weight(i, candidate);
      if (candidate && acc > target) {
        pick = i;
        break;
      }
    }
    atomicMin(&chosen, pick);  // two ranges can both claim target only by rounding: the lower index wins
  }
  __syncthreads();
  if (threadIdx.x == 0) out[row] = chosen != 0x7fffffff ? chosen : last;
}

}  // namespace

extern "C" __global__ void sample(const lg::half_t* logits, int* out, const int* positions, const int* slots, int n,
                                  int top_k, float temperature, unsigned seed) {
  sample_body(logits, out, positions, slots, n, top_k, temperature, seed);
}

extern "C" __global__ void sample_bf16(const lg::bf16_t* logits, int* out, const int* positions, const int* slots,
                                       int n, int top_k, float temperature, unsigned seed) {
  sample_body(logits, out, positions, slots, n, top_k, temperature, seed);
}
