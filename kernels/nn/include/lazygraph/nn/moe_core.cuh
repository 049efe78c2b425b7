// What the expert kernels of a mixture of experts share (kernels/nn/moe.cu over dense experts, kernels/nn/qmoe.cu over
// quantized ones): the limits, the layout of the plan moe_route writes, reading an expert of it into a block, the x of
// the down projection (each row's own pair's activations), and the end of a down kernel that adds the experts' fp32
// products into the residual. moe.cu's comment describes the plan and the kernels. Include as
// "lazygraph/nn/moe_core.cuh".
#pragma once

#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"
#include "lazygraph/nn/gemv_core.cuh"

namespace lg::nn::moe {

constexpr int kMaxExperts = 1024;                // the router's shared probabilities
constexpr int kMaxTopK = 16;                     // experts a row may choose
constexpr int kMaxBatch = 8;                     // rows of a decode step
constexpr int kMaxPairs = kMaxBatch * kMaxTopK;  // (row, slot) pairs of a step, so also distinct experts
// The plan's layout (moe_route): the count, the distinct experts, then [kMaxPairs][kMaxBatch] pairs.
constexpr int kPlanDistinct = 1;
constexpr int kPlanPairs = kPlanDistinct + kMaxPairs;
constexpr int kPlanInts = kPlanPairs + kMaxPairs * kMaxBatch;
static_assert(kPlanInts == 1153, "nn::kMoePlanInts (include/lazygraph/nn/kernels.hpp) sizes the plan's buffer");

__device__ __forceinline__ bool counts_supported(int experts, int top_k, int batch) {
  return experts >= 1 && experts <= kMaxExperts && top_k >= 1 && top_k <= kMaxTopK && top_k <= experts && batch >= 1 &&
         batch <= kMaxBatch;
}

/// The end of a row's route, which route_row's two paths share: lane 0 writes ids[s] = chosen[s] and weights[s] =
/// chosen_p[s] (divided by their sum, added in slot order, where `normalize`), rounded to T and stored as float.
/// Every lane of the warp calls it.
template <class T>
__device__ __forceinline__ void write_route(const int* chosen, const float* chosen_p, int* ids, float* weights,
                                            int top_k, int normalize) {
  if (threadIdx.x % 32 == 0) {
    float total = 0.0f;
    for (int s = 0; s < top_k; ++s) total += chosen_p[s];
    for (int s = 0; s < top_k; ++s) {
      const float w = normalize != 0 ? chosen_p[s] / total : chosen_p[s];
      ids[s] = chosen[s];
      weights[s] = lg::to_float(lg::from_float<T>(w));
    }
  }
  __syncwarp();
}

/// Routes one row of router logits; a warp calls it, every lane with the same arguments. Softmax in fp32 over the
/// `experts` logits (as torch's: exp(l - max) / sum), then the top_k largest probabilities in descending order, a tie
/// to the lower expert index, each divided by their sum where `normalize` (nonzero), rounded to T (transformers casts
/// the routing weights to the element type) and stored as float: lane 0 writes ids[s] and weights[s], s < top_k.
/// `q` (experts floats), `chosen` and `chosen_p` (top_k each) are the warp's shared scratch; `chosen` holds the experts
/// in order afterwards. Traps where a NaN probability leaves no expert to choose.
/// Experts up to which route_row keeps a lane's probabilities in registers (kRegisterExperts / 32 each) and takes each
/// round's largest with the warp's integer reductions (sm_80 and newer): the same choice in fewer dependent steps.
constexpr int kRegisterExperts = 128;

/// route_row for experts <= kRegisterExperts: the same softmax, in the same order, and the same choice. A round's
/// largest probability is the warp's largest key (the bits of a probability >= 0 order as it does), a tie going to the
/// lowest expert holding it (each lane offers its own lowest on a tie, as it scans its experts in ascending order).
/// The logits are read past L1 (__ldcg): moe_down_staged routes from logits written two kernels before it, which an
/// earlier step's reads may have left stale in L1.
template <class T>
__device__ __forceinline__ void route_row_in_registers(const T* row, int* chosen, float* chosen_p, int* ids,
                                                       float* weights, int experts, int top_k, int normalize) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int kPerLane = kRegisterExperts / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  float p[kPerLane];
  float m = -__int_as_float(0x7f800000);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    p[i] = e < experts ? lg::to_float(T{__ldcg(reinterpret_cast<const unsigned short*>(row + e))}) : 0.0f;
    if (e < experts) m = fmaxf(m, p[i]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    if (lane + 32 * i < experts) {
      p[i] = expf(p[i] - m);
      sum += p[i];
    }
  }
  sum = lg::warp_sum(sum);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) p[i] = lane + 32 * i < experts ? p[i] / sum : -1.0f;  // -1: never chosen
  for (int s = 0; s < top_k; ++s) {
    float best = -1.0f;
    int best_e = kMaxExperts;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {  // ascending: a tie keeps the lower index
      if (p[i] > best) {
        best = p[i];
        best_e = lane + 32 * i;
      }
    }
    const unsigned key = best >= 0.0f ? __float_as_uint(best) : 0U;  // a lane without a candidate offers 0 and no index
    const unsigned top = __reduce_max_sync(0xffffffffu, key);
    const int e = static_cast<int>(__reduce_min_sync(
        0xffffffffu, key == top ? static_cast<unsigned>(best_e) : static_cast<unsigned>(kMaxExperts)));
    if (e >= experts) __trap();  // only a NaN probability leaves no expert chosen
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (lane + 32 * i == e) p[i] = -1.0f;
    }
    if (lane == 0) {
      chosen[s] = e;
      chosen_p[s] = __uint_as_float(top);
    }
  }
  __syncwarp();
  write_route<T>(chosen, chosen_p, ids, weights, top_k, normalize);
#else
  __trap();  // route_row takes the shared-memory path there
#endif
}

template <class T>
__device__ __forceinline__ void route_row(const T* row, float* q, int* chosen, float* chosen_p, int* ids,
                                          float* weights, int experts, int top_k, int normalize) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (experts <= kRegisterExperts) {
    route_row_in_registers(row, chosen, chosen_p, ids, weights, experts, top_k, normalize);
    return;
  }
#endif
  const int lane = static_cast<int>(threadIdx.x) % 32;
  // Lane l owns the experts l, l + 32, ...
  float m = -__int_as_float(0x7f800000);
  for (int e = lane; e < experts; e += 32) {
    q[e] = lg::to_float(row[e]);
    m = fmaxf(m, q[e]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  float sum = 0.0f;
  for (int e = lane; e < experts; e += 32) {
    const float v = expf(q[e] - m);
    q[e] = v;
    sum += v;
  }
  sum = lg::warp_sum(sum);
  for (int e = lane; e < experts; e += 32) q[e] /= sum;
  __syncwarp();
  // k rounds of the largest remaining probability, the lower index on a tie; a chosen one is marked -1 (below every
  // probability).
  for (int s = 0; s < top_k; ++s) {
    float best = -1.0f;
    int best_e = kMaxExperts;
    for (int e = lane; e < experts; e += 32) {  // ascending: a tie keeps the lower index
      if (q[e] > best) {
        best = q[e];
        best_e = e;
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float other = __shfl_xor_sync(0xffffffffu, best, offset);
      const int other_e = __shfl_xor_sync(0xffffffffu, best_e, offset);
      if (other > best || (other == best && other_e < best_e)) {
        best = other;
        best_e = other_e;
      }
    }
    if (best_e >= experts) __trap();  // only a NaN probability leaves no expert chosen
    if (lane == 0) {
      chosen[s] = best_e;
      chosen_p[s] = best;
      q[best_e] = -1.0f;
    }
    __syncwarp();
  }
  write_route<T>(chosen, chosen_p, ids, weights, top_k, normalize);
}

/// The plan's count of distinct experts, checked against the most the rows can have chosen.
__device__ __forceinline__ int planned_experts(const int* plan, int experts, int top_k, int batch) {
  const int n = plan[0];
  if (n < 1 || n > min(batch * top_k, experts)) __trap();
  return n;
}

/// Reads the plan's expert u into the block: its index (returned) and, in pair_of[b], the pair by which row b chose
/// it or -1. Every thread of the block calls it; synchronises the block.
__device__ __forceinline__ int planned_expert(const int* plan, int u, int experts, int top_k, int batch, int* pair_of) {
  const int e = plan[kPlanDistinct + u];
  if (e < 0 || e >= experts) __trap();
  const int tid = static_cast<int>((threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x);
  if (tid < batch) {
    const int j = plan[kPlanPairs + u * kMaxBatch + tid];
    if (j < -1 || j >= batch * top_k) __trap();
    pair_of[tid] = j;
  }
  __syncthreads();
  return e;
}

/// x for moe_down: vector b is the act row of the pair by which row b chose the block's expert (row 0's act, whose
/// products are dropped, where it did not).
template <class T>
struct PairX {
  static constexpr bool sum_squares = false;
  using Raw = typename PlainX<T>::Raw;
  const T* act;
  const int* pair_of;  // the block's shared pairs
  int width;
  __device__ __forceinline__ Raw load(int b, int chunk) const {
    return {lg::load8(act + static_cast<long long>(max(pair_of[b], 0)) * width + 8LL * chunk)};
  }
  __device__ __forceinline__ Raw gather(int b, const int* order, int chunk) const {
    return {load8_gathered(act + static_cast<long long>(max(pair_of[b], 0)) * width, order, chunk)};
  }
  __device__ __forceinline__ static void expand(const Raw& r, float (&f)[8], float& sq) { PlainX<T>::expand(r, f, sq); }
  __device__ __forceinline__ static uint4 fragment(const Raw& r) { return PlainX<T>::fragment(r); }
};

/// The end of a down kernel: the last block of this grid column (blockIdx.x) to finish adds the column's rows of every
/// pair into x, x[b][r] += sum over s of weights[b][s] * partial[b * top_k + s][r] in slot order, rounded once. A grid
/// column's blocks (every blockIdx.y, with experts or none) hold the same rows: `unit` rows from blockIdx.x * unit,
/// then every gridDim.x * unit. Every block counts itself in counters[blockIdx.x] once its partials are written, so
/// the last one's adds see them all, whichever blocks wrote them; that one sets the count back to zero for the next
/// launch. Every thread of the block calls it, after the block's partials are written. With `parts` above 1 (d a
/// multiple of it), the kernel took d as `parts` slices of d / parts rows, row r of its grid being rows r,
/// r + d / parts, ... of x: a column's rows are then those of every slice.
template <class T>
__device__ __forceinline__ void add_expert_sums(const float* weights, const float* partial, unsigned* counters, T* x,
                                                int d, int top_k, int batch, int unit, int parts = 1) {
  __shared__ bool last_block;
  const int tid = static_cast<int>((threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x);
  const int threads = static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
  __threadfence();  // this block's partials are visible before its count
  __syncthreads();
  if (tid == 0) last_block = atomicAdd(counters + blockIdx.x, 1U) == gridDim.y - 1;
  __syncthreads();
  if (!last_block) return;
  __threadfence();  // the other blocks' partials, counted before ours, are visible from here
  const int slice = d / parts;
  for (int base = static_cast<int>(blockIdx.x) * unit; base < slice; base += static_cast<int>(gridDim.x) * unit) {
    for (int i = tid; i < unit * batch * parts; i += threads) {
      const int in_slice = base + i % unit;
      const int b = i / unit % batch;
      const int r = in_slice + i / (unit * batch) * slice;
      if (in_slice >= slice) continue;
      float sum = 0.0f;
      for (int s = 0; s < top_k; ++s) {
        const int j = b * top_k + s;
        sum = fmaf(weights[j], __ldcg(partial + static_cast<long long>(j) * d + r), sum);  // as moe_down_staged
      }
      T& out = x[static_cast<long long>(b) * d + r];
      out = lg::from_float<T>(lg::to_float(out) + sum);
    }
  }
  if (tid == 0) counters[blockIdx.x] = 0;  // the next launch counts from zero
}

}  // namespace lg::nn::moe
