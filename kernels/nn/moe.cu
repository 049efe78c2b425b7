// A mixture of experts' layer in the decode step (fp16 `NAME`, bf16 `NAME_bf16`; arithmetic in fp32), after an
// rms_norm of the residual x into h ([batch][d], rounded to T as transformers rounds its normed states). The experts'
// choice never leaves the device: the router writes it, the expert kernels read it.
//
//   moe_route(router, h, ids, weights, experts, d, top_k, normalize, batch)
//       router [experts][d]. Per row b: the logits l_e = router[e] . h[b], each rounded to T (transformers' gate
//       Linear returns the element type); p = softmax(l) in fp32; the top_k largest p in descending order, ties to
//       the lower expert index; where `normalize` (nonzero) their p divided by their sum; each weight rounded to T
//       (transformers casts the routing weights to the element type) and stored as float. Writes ids [batch][top_k]
//       (expert indices) and weights [batch][top_k]. Launch: any grid (rows block-stride; grid (batch) gives each
//       row a block), a block of 32 to 1024 threads, a multiple of 32.
//   moe_gate_up(w1, w3, h, ids, act, experts, width, d, top_k, batch)
//       w1, w3 [experts][width][d]: the experts' gate_proj and up_proj, stacked. For each pair j = b * top_k + s,
//       e = ids[j]: act[j][i] = silu(w1[e][i] . h[b]) * (w3[e][i] . h[b]), rounded once to T; act is
//       [batch * top_k][width]. The pairs naming one expert (rows of the batch that chose it) are computed together
//       by the block of the first of them, reading the expert's weights once; the other pairs' blocks return.
//       Launch: grid (ceil(width / R), batch * top_k), block (32, R) with R <= 8: the R warps take an expert's rows
//       grid-stride along x, pairs go grid-stride along y.
//   moe_down(w2, act, ids, weights, x, experts, width, d, top_k, batch)
//       w2 [experts][d][width]: the experts' down_proj, stacked. x[b][r] += sum over s of weights[b][s] *
//       (w2[ids[b][s]][r] . act[b * top_k + s]), summed in fp32 in slot order and rounded once into x. A warp takes
//       an output row r and reads the row r of every distinct chosen expert once, for all the pairs naming it.
//       Launch: grid (ceil(d / R)), block (32, R) with R <= 8, rows grid-stride.
//
// Each vector's results are the same bits whatever else its batch holds: every dot product is one lane's chunks in
// order, then a warp sum, whichever pairs share the weights' read. Requirements (a kernel traps on a violation,
// which the next synchronisation reports as a launch failure): d and width multiples of 8; router, w1, w2, w3, h,
// act 16-byte aligned; batch 1 to 8; experts 1 to kMaxExperts; top_k 1 to kMaxTopK and at most experts; ids in
// [0, experts), a row's ids distinct (moe_route writes them so). x, act, ids and weights must not alias the weights
// or h. May be launched early: each waits for the kernel before it first (the weights they read depend on ids, so
// there is nothing to prefetch before).
#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"
#include "lazygraph/nn/gemv_core.cuh"

namespace {

constexpr int kMaxExperts = 1024;                // the router's shared probabilities
constexpr int kMaxTopK = 16;                     // experts a row may choose
constexpr int kMaxBatch = 8;                     // rows of a decode step
constexpr int kMaxPairs = kMaxBatch * kMaxTopK;  // (row, slot) pairs of a step
constexpr int kMaxWarps = 8;                     // warps of an expert kernel's block (moe_down's shared dots)

__device__ __forceinline__ bool counts_supported(int experts, int d, int top_k, int batch) {
  return d > 0 && d % 8 == 0 && experts >= 1 && experts <= kMaxExperts && top_k >= 1 && top_k <= kMaxTopK &&
         top_k <= experts && batch >= 1 && batch <= kMaxBatch;
}

/// Sum of 8 products in fp32, in index order.
__device__ __forceinline__ float dot8(const float (&a)[8], const float (&b)[8], float acc) {
#pragma unroll
  for (int k = 0; k < 8; ++k) acc += a[k] * b[k];
  return acc;
}

template <class T>
__device__ __forceinline__ void moe_route_body(const T* router, const T* h, int* ids, float* weights, int experts,
                                               int d, int top_k, int normalize, int batch) {
  __shared__ float p[kMaxExperts];
  __shared__ int chosen[kMaxTopK];
  __shared__ float chosen_p[kMaxTopK];
  lg::early_launch_prologue();
  if (!counts_supported(experts, d, top_k, batch) || blockDim.x % 32 != 0 || !lg::is_aligned16(router) ||
      !lg::is_aligned16(h)) {
    __trap();
  }
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  const int chunks = d / 8;
  for (int b = blockIdx.x; b < batch; b += gridDim.x) {  // uniform over the block: its barriers are too
    const T* x = h + static_cast<long long>(b) * d;
    for (int e = warp; e < experts; e += warps) {
      const T* row = router + static_cast<long long>(e) * d;
      float acc = 0.0f;
      for (int c = lane; c < chunks; c += 32) {
        float w[8];
        float v[8];
        lg::unpack8(lg::load8_streaming(row + 8LL * c), w);
        lg::load_float8(x + 8LL * c, v);
        acc = dot8(w, v, acc);
      }
      acc = lg::warp_sum(acc);
      if (lane == 0) p[e] = lg::to_float(lg::from_float<T>(acc));
    }
    __syncthreads();
    if (warp == 0) {
      // Softmax in fp32 over every expert, as torch's: exp(l - max) / sum.
      float m = -__int_as_float(0x7f800000);
      for (int e = lane; e < experts; e += 32) m = fmaxf(m, p[e]);
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
      float sum = 0.0f;
      for (int e = lane; e < experts; e += 32) {
        const float q = expf(p[e] - m);
        p[e] = q;
        sum += q;
      }
      sum = lg::warp_sum(sum);
      for (int e = lane; e < experts; e += 32) p[e] /= sum;
      __syncwarp();
      // Top k: k rounds of the largest remaining probability, the lower index on a tie; a chosen one is marked -1
      // (below every probability).
      for (int s = 0; s < top_k; ++s) {
        float best = -1.0f;
        int best_e = kMaxExperts;
        for (int e = lane; e < experts; e += 32) {  // ascending: a tie keeps the lower index
          if (p[e] > best) {
            best = p[e];
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
          p[best_e] = -1.0f;
        }
        __syncwarp();
      }
      if (lane == 0) {
        float total = 0.0f;
        for (int s = 0; s < top_k; ++s) total += chosen_p[s];
        for (int s = 0; s < top_k; ++s) {
          const float w = normalize != 0 ? chosen_p[s] / total : chosen_p[s];
          ids[b * top_k + s] = chosen[s];
          weights[b * top_k + s] = lg::to_float(lg::from_float<T>(w));
        }
      }
    }
    __syncthreads();  // p and chosen are the next row's
  }
}

/// For the `pairs` (row, slot) pairs of ids: next[j] is the next pair naming pair j's expert (-1: none), and first[j]
/// whether pair j is the first naming it. Called by every thread of the block; synchronises it. Traps on an id
/// outside [0, experts).
__device__ __forceinline__ void link_pairs(const int* ids, int pairs, int experts, int* next, bool* first) {
  const int thread = static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x);
  const int threads = static_cast<int>(blockDim.x * blockDim.y);
  for (int j = thread; j < pairs; j += threads) {
    const int e = ids[j];
    if (e < 0 || e >= experts) __trap();
    int after = -1;
    for (int i = j + 1; i < pairs && after < 0; ++i) after = ids[i] == e ? i : -1;
    bool leads = true;
    for (int i = 0; i < j && leads; ++i) leads = ids[i] != e;
    next[j] = after;
    first[j] = leads;
  }
  __syncthreads();
}

template <class T>
__device__ __forceinline__ void moe_gate_up_body(const T* w1, const T* w3, const T* h, const int* ids, T* act,
                                                 int experts, int width, int d, int top_k, int batch) {
  __shared__ int next[kMaxPairs];
  __shared__ bool first[kMaxPairs];
  lg::early_launch_prologue();
  if (!counts_supported(experts, d, top_k, batch) || width <= 0 || width % 8 != 0 || blockDim.x != 32 ||
      blockDim.y > kMaxWarps || !lg::is_aligned16(w1) || !lg::is_aligned16(w3) || !lg::is_aligned16(h) ||
      !lg::is_aligned16(act)) {
    __trap();
  }
  const int pairs = batch * top_k;
  link_pairs(ids, pairs, experts, next, first);
  const int lane = static_cast<int>(threadIdx.x);
  const int chunks = d / 8;
  for (int j = blockIdx.y; j < pairs; j += gridDim.y) {
    if (!first[j]) continue;  // the block of the expert's first pair computes this one
    // The pairs naming this expert: at most one per row, as a row's experts are distinct.
    int member[kMaxBatch];
    int count = 0;
    for (int i = j; i >= 0; i = next[i]) {
      if (count == kMaxBatch) __trap();
      member[count++] = i;
    }
    const long long e = ids[j];
    for (int i = blockIdx.x * blockDim.y + threadIdx.y; i < width; i += gridDim.x * blockDim.y) {
      const T* g_row = w1 + (e * width + i) * d;
      const T* u_row = w3 + (e * width + i) * d;
      float g[kMaxBatch] = {};
      float u[kMaxBatch] = {};
      for (int c = lane; c < chunks; c += 32) {
        float wg[8];
        float wu[8];
        lg::unpack8(lg::load8_streaming(g_row + 8LL * c), wg);
        lg::unpack8(lg::load8_streaming(u_row + 8LL * c), wu);
#pragma unroll
        for (int m = 0; m < kMaxBatch; ++m) {
          if (m < count) {
            float v[8];
            lg::load_float8(h + static_cast<long long>(member[m] / top_k) * d + 8LL * c, v);
            g[m] = dot8(wg, v, g[m]);
            u[m] = dot8(wu, v, u[m]);
          }
        }
      }
#pragma unroll
      for (int m = 0; m < kMaxBatch; ++m) {
        if (m < count) {  // count is the same in every lane: the warp sums are whole-warp
          const float gate = lg::warp_sum(g[m]);
          const float up = lg::warp_sum(u[m]);
          if (lane == 0) {
            act[static_cast<long long>(member[m]) * width + i] = lg::from_float<T>(lg::nn::silu(gate) * up);
          }
        }
      }
    }
  }
}

template <class T>
__device__ __forceinline__ void moe_down_body(const T* w2, const T* act, const int* ids, const float* weights, T* x,
                                              int experts, int width, int d, int top_k, int batch) {
  __shared__ int next[kMaxPairs];
  __shared__ bool first[kMaxPairs];
  __shared__ float dots[kMaxWarps][kMaxPairs];
  lg::early_launch_prologue();
  if (!counts_supported(experts, d, top_k, batch) || width <= 0 || width % 8 != 0 || blockDim.x != 32 ||
      blockDim.y > kMaxWarps || !lg::is_aligned16(w2) || !lg::is_aligned16(act)) {
    __trap();
  }
  const int pairs = batch * top_k;
  link_pairs(ids, pairs, experts, next, first);
  const int lane = static_cast<int>(threadIdx.x);
  const int warp = static_cast<int>(threadIdx.y);
  const int chunks = width / 8;
  for (int r = blockIdx.x * blockDim.y + warp; r < d; r += gridDim.x * blockDim.y) {
    for (int j = 0; j < pairs; ++j) {
      if (!first[j]) continue;
      int member[kMaxBatch];
      int count = 0;
      for (int i = j; i >= 0; i = next[i]) {
        if (count == kMaxBatch) __trap();
        member[count++] = i;
      }
      const T* row = w2 + (static_cast<long long>(ids[j]) * d + r) * width;
      float acc[kMaxBatch] = {};
      for (int c = lane; c < chunks; c += 32) {
        float w[8];
        lg::unpack8(lg::load8_streaming(row + 8LL * c), w);
#pragma unroll
        for (int m = 0; m < kMaxBatch; ++m) {
          if (m < count) {
            float v[8];
            lg::load_float8(act + static_cast<long long>(member[m]) * width + 8LL * c, v);
            acc[m] = dot8(w, v, acc[m]);
          }
        }
      }
#pragma unroll
      for (int m = 0; m < kMaxBatch; ++m) {
        if (m < count) {
          const float sum = lg::warp_sum(acc[m]);
          if (lane == 0) dots[warp][member[m]] = sum;
        }
      }
    }
    __syncwarp();  // lane 0's dots, for every lane
    if (lane < batch) {
      float sum = 0.0f;
      for (int s = 0; s < top_k; ++s) sum += weights[lane * top_k + s] * dots[warp][lane * top_k + s];
      T& out = x[static_cast<long long>(lane) * d + r];
      out = lg::from_float<T>(lg::to_float(out) + sum);
    }
    __syncwarp();  // the dots are read before the next row writes them
  }
}

}  // namespace

/* lazygraph:variants
axis T = lg::half_t | lg::bf16_t _bf16

moe_route[T] = moe_route_body<T>(const T* router, const T* h, int* ids, float* weights, int experts, int d,
    int top_k, int normalize, int batch)
moe_gate_up[T] = moe_gate_up_body<T>(const T* w1, const T* w3, const T* h, const int* ids, T* act, int experts,
    int width, int d, int top_k, int batch)
moe_down[T] = moe_down_body<T>(const T* w2, const T* act, const int* ids, const float* weights, T* x, int experts,
    int width, int d, int top_k, int batch)
*/
