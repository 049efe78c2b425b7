// The next token of each row of logits ([rows][n]; fp16 for `sample`, bf16 for `sample_bf16`), drawn at a temperature
// from the top-k logits, then the top-p nucleus of those, with a seeded, reproducible random number; temperature 0 is
// greedy (the argmax kernel's rule). One block per row.
//
//   sample(logits, out, positions, slots, n, top_k, temperature, seed, top_p), sample_bf16(...) alike
//
// For row b, with p = positions[b] and s = slots[b] (the sequence: so a sequence draws the same numbers whether
// stepped alone or in a batch):
//   temperature <= 0:  out[b] = argmax (lowest index among ties, NaN never; -1 if all NaN).
//   otherwise:         candidates = the non-NaN logits >= the top_k-th largest (all of them when top_k <= 0 or
//                      top_k >= their count; ties at that value are all kept);
//                      w_i = exp((l_i - max) / temperature) in fp32 over candidates;
//                      top_p < 1: candidates = those >= the largest value v such that the candidates >= v hold at
//                      least top_p of sum(w) (the nucleus: ties at v kept; top_p <= 0 keeps the largest value);
//                      the sums here are of w rounded to multiples of 2^-38 in 64-bit integers, so the nucleus does
//                      not depend on the order the block's atomics run in; top_p >= 1 (or NaN): no change;
//                      u = float(mix(mix(seed ^ mix(p)) + s) >> 8) * 2^-24, in [0, 1) (docs/nn.md's mix);
//                      out[b] = the smallest candidate index i whose prefix sum of w (index order) exceeds
//                      u * sum(w); the last index of nonzero weight if rounding leaves none. -1 if every logit
//                      is NaN. When the largest logit is +inf, the +inf logits share the probability equally.
// The top_k-th largest is found by a radix select over the 16-bit order-preserving keys of the values (fp16 and bf16
// alike: both are sign and magnitude) (two passes of 8-bit digits through a shared histogram), not by k rounds of
// argmax; the nucleus's smallest value by the same select with each digit's bucket holding weight instead of a count.
// (As keys, -0 sorts below +0: a top-k or nucleus boundary at zero keeps the +0 logits and not the -0 ones.)
//
// Launch: grid = the row count, block 32 * k threads (k = 1..32, e.g. 1024), no dynamic shared memory.
#include "lazygraph/block_reduce.cuh"
#include "lazygraph/nn/argmax.cuh"
#include "lazygraph/nn/hash.cuh"
#include "lazygraph/tile.cuh"

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

/// A weight in [0, 1] as an integer count of 2^-38 (NaN as 0): sums of up to 2^24 of them fit 64 bits exactly, and
/// integer sums do not depend on the order of the atomics that add them.
__device__ __forceinline__ unsigned long long fixed_weight(float w) {
  return w > 0.0f ? __float2ull_rn(w * 274877906944.0f) : 0ull;
}

/// The key of the nucleus's smallest value: the largest key v such that the candidates (non-NaN, key >= `threshold`)
/// with keys >= v hold at least top_p of the candidates' total fixed_weight(weight(value)). For the whole block;
/// top_p < 1. The same radix select as kth_largest_key, each bucket summing weights where that one counts logits.
template <class T, class Weight>
__device__ unsigned nucleus_key(const T* logits, int n, unsigned threshold, float top_p, const Weight& weight) {
  __shared__ unsigned long long mass[256];
  __shared__ unsigned found_prefix;
  __shared__ unsigned long long found_needed;
  unsigned prefix = 0;
  unsigned long long needed = 0;  // the weight still to cover: set from the total by warp 0 in the first pass
  for (int shift = 8; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) mass[i] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      if (is_nan(logits[i])) continue;
      const unsigned key = order_key(logits[i].bits);
      if (key < threshold) continue;
      if (shift == 0 && (key >> 8) != (prefix >> 8)) continue;  // only the high digit found in the first pass
      const unsigned long long w = fixed_weight(weight(lg::to_float(logits[i])));
      if (w != 0) atomicAdd(&mass[(key >> shift) & 0xffu], w);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane j holds digits 255 - 8j down to 248 - 8j: an inclusive scan over the lanes sums from the top digit.
      const int lane = static_cast<int>(threadIdx.x);
      const int first_digit = 255 - 8 * lane;
      unsigned long long mine = 0;
      for (int j = 0; j < 8; ++j) mine += mass[first_digit - j];
      unsigned long long inclusive = mine;
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const unsigned long long other = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += other;
      }
      if (shift == 8) {
        // ceil(top_p * total), within [1, total]: total >= 2^38 (the largest logit's weight is 1).
        const unsigned long long total = __shfl_sync(0xffffffffu, inclusive, 31);
        const double want = fmax(1.0, ceil(static_cast<double>(top_p) * static_cast<double>(total)));
        needed = want >= static_cast<double>(total) ? total : static_cast<unsigned long long>(want);
      }
      // Lane 31's inclusive sum is the whole (pass 1) or the high digit's bucket (pass 2): it reaches needed unless
      // every weight is 0 or NaN (all logits -inf), when no candidate is drawn whatever the key.
      const unsigned reached = __ballot_sync(0xffffffffu, inclusive >= needed);
      if (lane == (reached != 0 ? __ffs(static_cast<int>(reached)) - 1 : 31)) {
        unsigned long long acc = inclusive - mine;
        int digit = first_digit;
        for (; digit > first_digit - 7; --digit) {
          if (acc + mass[digit] >= needed) break;
          acc += mass[digit];
        }
        found_prefix = prefix | (static_cast<unsigned>(digit) << shift);
        found_needed = needed - acc;  // >= 1: acc < needed
      }
    }
    __syncthreads();
    prefix = found_prefix;
    needed = found_needed;
    __syncthreads();  // the buckets are cleared for the next pass only after everyone read the result
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

/// The sampling of row start(): `start` waits for the work before (every thread calls it once) and says the row.
template <class T, class Start>
__device__ __forceinline__ void sample_body(const T* logits, int* out, const int* positions, const int* slots, int n,
                                            int top_k, float temperature, unsigned seed, float top_p, Start start) {
  const int row = start();
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
  unsigned threshold = top_k > 0 && top_k < valid ? kth_largest_key(logits, n, top_k) : 0u;
  const float inv_t = 1.0f / temperature;
  if (top_p < 1.0f) {
    // The same weights as `weight` below, for the candidates so far.
    const auto value_weight = [&](float v) {
      return top == __int_as_float(0x7f800000) ? (v == top ? 1.0f : 0.0f) : expf((v - top) * inv_t);
    };
    threshold = nucleus_key(logits, n, threshold, top_p, value_weight);
  }
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

/// A kernel's start: it may be launched early (LaunchConfig::early_launch); its row is its block.
__device__ __forceinline__ int kernel_row() {
  lg::early_launch_prologue();
  return static_cast<int>(blockIdx.x);
}

}  // namespace

extern "C" __global__ void sample(const lg::half_t* logits, int* out, const int* positions, const int* slots, int n,
                                  int top_k, float temperature, unsigned seed, float top_p) {
  sample_body(logits, out, positions, slots, n, top_k, temperature, seed, top_p, [] { return kernel_row(); });
}

extern "C" __global__ void sample_bf16(const lg::bf16_t* logits, int* out, const int* positions, const int* slots,
                                       int n, int top_k, float temperature, unsigned seed, float top_p) {
  sample_body(logits, out, positions, slots, n, top_k, temperature, seed, top_p, [] { return kernel_row(); });
}

// Tile functions (kernels/include/lazygraph/tile.cuh) for persistent programs: sample_tile(_bf16) is sample with the
// same parameters, tile b of a call of `rows` tiles taking the place of block b, on the program's blocks. Greedy
// (temperature 0) gives the kernel's token whatever the block; a draw sums the weights per thread, so it equals the
// kernel's on blocks of as many threads (others may differ where rounding puts u * sum(w) on the other side of a
// boundary).
extern "C" __device__ void sample_tile(lg::Tile tile, const lg::half_t* logits, int* out, const int* positions,
                                       const int* slots, int n, int top_k, float temperature, unsigned seed,
                                       float top_p) {
  sample_body(logits, out, positions, slots, n, top_k, temperature, seed, top_p, [&] {
    tile.wait();
    return static_cast<int>(tile.index());
  });
}

extern "C" __device__ void sample_tile_bf16(lg::Tile tile, const lg::bf16_t* logits, int* out, const int* positions,
                                            const int* slots, int n, int top_k, float temperature, unsigned seed,
                                            float top_p) {
  sample_body(logits, out, positions, slots, n, top_k, temperature, seed, top_p, [&] {
    tile.wait();
    return static_cast<int>(tile.index());
  });
}
