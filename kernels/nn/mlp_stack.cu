// A whole stack of SwiGLU MLP blocks in ONE persistent launch: for each layer l in order,
//   act = silu(W1 h) * (W3 h),  h = x / rms(x) * gain     (phase A: ffn rows of d columns, two matrices)
//   x  += W2 act                                          (phase B: d rows of ffn columns)
// in place on the residual streams x [batch][d], with act [batch][ffn] as scratch; the same math as
// rms_norm_gemv_swiglu followed by gemv_add (kernels/nn/gemv.cu), in fp32 with one rounding per stored value.
//
// Why one launch: a small model's blocks each read 1-3 MB of weights, which the memory streams in well under a
// microsecond, while a kernel boundary in a graph costs 2-3 us. (Measured on the H100, the counters below cost more
// than that boundary: the kernel is 1.05-2.1x slower than the chain, and off by default; docs/decode_performance.md.)
// Here the boundary is a counter in global memory: the blocks of the grid take work items in ticket order (an atomic
// counter), an item waits only for the phase before its own, and a block holding an item of a later phase loads that
// item's weights into registers BEFORE it waits. So the weights of the next phase stream in while the current phase
// finishes, and a phase boundary costs the counter's round trip plus the read of x, not a launch. Large models gain the
// same overlap at each boundary.
//
// Forward progress without co-residency: tickets are handed out in order and an item waits only for items of an
// earlier phase, i.e. with smaller tickets, which blocks already running hold. So the kernel cannot deadlock
// whatever number of its blocks the GPU runs at once (other kernels may share the GPU); the grid is sized to fill
// the GPU (MlpStack), not required to.
//
// Work items: phase A of a layer is split into items of 8 / split_a rows (split_a warps per row, 1, 2, 4 or 8;
// a row's partial sums are added through shared memory in a fixed order), phase B likewise with split_b. Item t:
// layer t / per_layer, then phase A's items, then phase B's. Each warp computes its row's dot products exactly as
// gemv.cu does (16-byte weight loads, all in flight before use; loads past the row's end re-read its last chunk
// and count as zero), and phase A also sums x^2 over the same chunks, so rms(x) comes with the dot products
// without a second pass (1 / rms scales the fp32 dot products, as rms_norm_gemv_swiglu does). Each vector's
// result is bit-for-bit what a batch of 1 gives for it.
//
// Synchronisation: `sync` holds (2 + 16 * layers) * 32 unsigned counters, all zero at launch, one per 128-byte
// line: line 0 the ticket, line 1 the blocks that finished, then for each phase (A of layer l: 2l, B: 2l + 1) 8 lines
// counting its items done (item i on line i % 8, so that one phase's atomics and polls spread over 8 addresses). An
// item's block counts itself after a block barrier with a device-scope release add; a waiting block's first
// thread polls the 8 counters with device-scope acquire loads (pausing 32 ns between rounds), then the block barrier
// hands the ordering to every thread, whose ordinary loads of x and act then see the other blocks' stores. The last
// block to finish sets every counter back to zero, so the next launch starts clean. Two launches that share one `sync`
// must not run at once.
//
// Kernels: mlp_stack (fp16) and mlp_stack_bf16, each with _b2, _b4, _b8 variants for batches of up to 2, 4, 8
// (nn::BatchedKernel picks one):
//   mlp_stack(layers, x, act, sync, layer_count, d, ffn, eps, split_a, split_b, batch)
// `layers` is a device array of layer_count MlpLayer (the weights' device addresses: gain [d], W1 and W3
// [ffn x d], W2 [d x ffn], all 16-byte aligned). d and ffn are multiples of 8; batch 1..8; x and act 16-byte
// aligned. A violation traps. Launch: 256 threads per block, any grid (a multiple of the SM count fills the GPU),
// early launch allowed: only the weights are touched before the wait for earlier work.
#include "lazygraph/nn/gemv_core.cuh"

/// One block's weights as device addresses (the host's lazygraph::nn::MlpLayer has the same layout).
struct MlpLayer {
  unsigned long long gain;
  unsigned long long w1;
  unsigned long long w3;
  unsigned long long w2;
};

namespace {

constexpr int kWarps = 8;  // 256 threads per block

/// Each phase's completion count is spread over kLanes counters, one per 128-byte line (item i counts on counter
/// i % kLanes), so that the atomics of one phase's items and the polls of the blocks waiting for it do not all
/// queue on one address.
constexpr int kLanes = 8;
constexpr int kLineWords = 32;  // unsigned ints per 128-byte line

/// Device-scope acquire load: later loads of this thread (and, after a block barrier, of its block) see what was
/// written before the release that this load observes.
__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/// Blocks until the phase whose counters start at `counters` has counted `items` items. The block's first thread
/// polls the kLanes counters (their loads in flight together), pausing between rounds: hundreds of blocks wait at
/// once, and polling without a pause slowed the phase boundaries down (H100); the block waits at the barrier.
/// (A block that took its next ticket while working on the current one made things worse still: the last items of
/// a phase then waited for their holders' current items, so each phase cost two items in a row.)
__device__ __forceinline__ void block_wait_for(const unsigned* counters, int items) {
  if (threadIdx.x == 0) {
    for (;;) {
      bool done = true;
#pragma unroll
      for (int i = 0; i < kLanes; ++i) {
        const unsigned target = static_cast<unsigned>((items - i + kLanes - 1) / kLanes);
        done = done && load_acquire(counters + i * kLineWords) >= target;
      }
      if (done) break;
      __nanosleep(32);
    }
  }
  __syncthreads();
}

/// Counts item `item` of the phase whose counters start at `counters`, once every thread of the block has finished
/// its stores: the barrier orders them before thread 0's device-scope release add.
__device__ __forceinline__ void block_signal(unsigned* counters, int item) {
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counters + (item % kLanes) * kLineWords) : "memory");
  }
}

template <class T>
__device__ __forceinline__ const T* at(unsigned long long address) {
  return reinterpret_cast<const T*>(address);
}

/// The rows of one item and this warp's place in them.
struct Slot {
  int row;     ///< the row this warp works on (clamped into the matrix for loads; see `valid`)
  bool valid;  ///< the row exists (the last item of a phase may be short)
  int part;    ///< this warp's index among the split warps of its row
  int group;   ///< the row's index in the item
};

__device__ __forceinline__ Slot slot_of(int item, int split, int rows) {
  const int warp = threadIdx.x / 32;
  const int group = warp / split;
  const int row = item * (kWarps / split) + group;
  return {min(row, rows - 1), row < rows, warp % split, group};
}

/// Adds the partial sums of the `split` warps of each row through shared memory, in warp order; the result is
/// valid in lane 0 of the row's first warp. Every thread of the block must call it.
template <int N>
__device__ __forceinline__ void reduce_split(float (&v)[N], const Slot& s, int split, float (*scratch)[N]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = lg::warp_sum(v[i]);
  if (split == 1) return;  // uniform over the block
  const int warp = threadIdx.x / 32;
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) scratch[warp][i] = v[i];
  }
  __syncthreads();
  if (s.part == 0 && lane == 0) {
    for (int k = 1; k < split; ++k) {
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] += scratch[warp + k][i];
    }
  }
  __syncthreads();  // scratch is read before the next item overwrites it
}

/// Phase A of one item: act[b][row] = silu(W1 h) * (W3 h) for the item's rows.
template <int B, class T>
__device__ __forceinline__ void phase_a(const MlpLayer& layer, const T* x, T* act, int d, int ffn, float eps, int batch,
                                        int split, int item, const unsigned* wait_counters, int wait_items,
                                        float (*scratch)[2 * B + B]) {
  constexpr int L = 4;  // loads in flight per lane and matrix
  const Slot s = slot_of(item, split, ffn);
  const int lane = threadIdx.x % 32;
  const int chunks = d / 8;
  const int stride = 32 * split;
  const int first = s.part * 32 + lane;
  const T* w1 = at<T>(layer.w1) + static_cast<long long>(s.row) * d;
  const T* w3 = at<T>(layer.w3) + static_cast<long long>(s.row) * d;
  const T* g = at<T>(layer.gain);

  // The first step's weights, before the wait: they do not depend on earlier phases.
  lg::Pack8<T> a1[L];
  lg::Pack8<T> a3[L];
#pragma unroll
  for (int u = 0; u < L; ++u) {
    const int chunk = min(first + u * stride, chunks - 1);
    a1[u] = lg::load8_streaming(w1 + 8LL * chunk);
    a3[u] = lg::load8_streaming(w3 + 8LL * chunk);
  }
  if (wait_counters != nullptr) block_wait_for(wait_counters, wait_items);

  float acc[2 * B + B];  // [0, B): W1 h, [B, 2B): W3 h, [2B, 3B): sum of x^2
#pragma unroll
  for (int i = 0; i < 3 * B; ++i) acc[i] = 0.0f;
  for (int base = first; base < chunks; base += stride * L) {
    if (base != first) {
#pragma unroll
      for (int u = 0; u < L; ++u) {
        const int chunk = min(base + u * stride, chunks - 1);
        a1[u] = lg::load8_streaming(w1 + 8LL * chunk);
        a3[u] = lg::load8_streaming(w3 + 8LL * chunk);
      }
    }
#pragma unroll
    for (int u = 0; u < L; ++u) {
      const bool inside = base + u * stride < chunks;
      const int chunk = min(base + u * stride, chunks - 1);
      float f1[8];
      float f3[8];
      float gain[8];
      lg::unpack8(a1[u], f1);
      lg::unpack8(a3[u], f3);
      lg::load_float8(g + 8LL * chunk, gain);
#pragma unroll
      for (int b = 0; b < B; ++b) {
        float xf[8];
        lg::load_float8(x + static_cast<long long>(min(b, batch - 1)) * d + 8LL * chunk, xf);
        float sq = xf[0] * xf[0];
#pragma unroll
        for (int i = 1; i < 8; ++i) sq = fmaf(xf[i], xf[i], sq);
        float h[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) h[i] = xf[i] * gain[i];
        float dot1 = f1[0] * h[0];
        float dot3 = f3[0] * h[0];
#pragma unroll
        for (int i = 1; i < 8; ++i) {
          dot1 = fmaf(f1[i], h[i], dot1);
          dot3 = fmaf(f3[i], h[i], dot3);
        }
        acc[b] += inside ? dot1 : 0.0f;
        acc[B + b] += inside ? dot3 : 0.0f;
        acc[2 * B + b] += inside ? sq : 0.0f;
      }
    }
  }
  reduce_split(acc, s, split, scratch);
  if (s.valid && s.part == 0 && lane == 0) {
#pragma unroll
    for (int b = 0; b < B; ++b) {  // unrolled over B, not batch: a run-time index would put acc in local memory
      if (b >= batch) break;
      const float inv = 1.0f / sqrtf(acc[2 * B + b] / static_cast<float>(d) + eps);
      act[static_cast<long long>(b) * ffn + s.row] = lg::from_float<T>(lg::nn::silu(acc[b] * inv) * (acc[B + b] * inv));
    }
  }
}

/// Phase B of one item: x[b][row] += W2 act[b] for the item's rows.
template <int B, class T>
__device__ __forceinline__ void phase_b(const MlpLayer& layer, T* x, const T* act, int d, int ffn, int batch, int split,
                                        int item, const unsigned* wait_counters, int wait_items, float (*scratch)[B]) {
  constexpr int L = 8;
  const Slot s = slot_of(item, split, d);
  const int lane = threadIdx.x % 32;
  const int chunks = ffn / 8;
  const int stride = 32 * split;
  const int first = s.part * 32 + lane;
  const T* w2 = at<T>(layer.w2) + static_cast<long long>(s.row) * ffn;

  lg::Pack8<T> a[L];
#pragma unroll
  for (int u = 0; u < L; ++u) a[u] = lg::load8_streaming(w2 + 8LL * min(first + u * stride, chunks - 1));
  block_wait_for(wait_counters, wait_items);

  float acc[B];
#pragma unroll
  for (int b = 0; b < B; ++b) acc[b] = 0.0f;
  for (int base = first; base < chunks; base += stride * L) {
    if (base != first) {
#pragma unroll
      for (int u = 0; u < L; ++u) a[u] = lg::load8_streaming(w2 + 8LL * min(base + u * stride, chunks - 1));
    }
#pragma unroll
    for (int u = 0; u < L; ++u) {
      const bool inside = base + u * stride < chunks;
      const int chunk = min(base + u * stride, chunks - 1);
      float w[8];
      lg::unpack8(a[u], w);
#pragma unroll
      for (int b = 0; b < B; ++b) {
        float v[8];
        lg::load_float8(act + static_cast<long long>(min(b, batch - 1)) * ffn + 8LL * chunk, v);
        float dot = w[0] * v[0];
#pragma unroll
        for (int i = 1; i < 8; ++i) dot = fmaf(w[i], v[i], dot);
        acc[b] += inside ? dot : 0.0f;
      }
    }
  }
  reduce_split(acc, s, split, scratch);
  if (s.valid && s.part == 0 && lane == 0) {
#pragma unroll
    for (int b = 0; b < B; ++b) {
      if (b >= batch) break;
      T& o = x[static_cast<long long>(b) * d + s.row];
      o = lg::from_float<T>(lg::to_float(o) + acc[b]);
    }
  }
}

__device__ __forceinline__ bool split_supported(int split) {
  return split == 1 || split == 2 || split == 4 || split == 8;
}

template <int B, class T>
__device__ __forceinline__ void mlp_stack_body(const MlpLayer* layers, T* x, T* act, unsigned* sync, int layer_count,
                                               int d, int ffn, float eps, int split_a, int split_b, int batch) {
  if (d <= 0 || ffn <= 0 || d % 8 != 0 || ffn % 8 != 0 || layer_count < 1 || batch < 1 || batch > B ||
      !split_supported(split_a) || !split_supported(split_b) || !lg::is_aligned16(x) || !lg::is_aligned16(act) ||
      blockDim.x != 32 * kWarps || blockDim.y != 1 || blockDim.z != 1) {
    __trap();
  }
  const int items_a = (ffn + kWarps / split_a - 1) / (kWarps / split_a);
  const int items_b = (d + kWarps / split_b - 1) / (kWarps / split_b);
  const int per_layer = items_a + items_b;
  const int total = per_layer * layer_count;
  unsigned* ticket = sync;
  unsigned* finished = sync + kLineWords;
  // Phase counters: phase q (2l: A of layer l, 2l + 1: B) has kLanes counters, a line each.
  const auto phase = [&](int q) { return sync + (2 + q * kLanes) * kLineWords; };

  // Launched early, only the weights may be touched before this wait: x, act and the counters belong to earlier
  // work (the counters too: an earlier launch of this kernel with the same `sync` resets them as it ends).
  lg::allow_dependent_launch();
  lg::wait_for_prior_grids();

  __shared__ int item_of_block;
  __shared__ float scratch_a[kWarps][3 * B];
  __shared__ float scratch_b[kWarps][B];
  for (;;) {
    if (threadIdx.x == 0) item_of_block = static_cast<int>(atomicAdd(ticket, 1u));
    __syncthreads();
    const int t = item_of_block;
    __syncthreads();  // read by every thread before the next ticket overwrites it
    if (t >= total) break;
    const int l = t / per_layer;
    const int r = t % per_layer;
    const MlpLayer layer = layers[l];
    if (r < items_a) {
      phase_a<B>(layer, x, act, d, ffn, eps, batch, split_a, r, l > 0 ? phase(2 * l - 1) : nullptr, items_b, scratch_a);
      block_signal(phase(2 * l), r);
    } else {
      phase_b<B>(layer, x, act, d, ffn, batch, split_b, r - items_a, phase(2 * l), items_a, scratch_b);
      block_signal(phase(2 * l + 1), r - items_a);
    }
  }
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(finished, 1u) == gridDim.x - 1) {  // every other block is past its last ticket
      *ticket = 0;
      *finished = 0;
      for (int q = 0; q < 2 * layer_count; ++q) {
        for (int i = 0; i < kLanes; ++i) phase(q)[i * kLineWords] = 0;
      }
      __threadfence();
    }
  }
}

}  // namespace

// The entry points, written out as in gemv.cu (mlp_stack, _b2, _b4, _b8, mlp_stack_bf16, ...; no tensor-core variant).
// __launch_bounds__: 3 blocks of 256 threads per SM for batches up to 2, 2 for 4 and 8 (gemv.cu's one-vector
// kernels went to 2; this persistent kernel keeps 3, not measured at 2).
/* lazygraph:variants
axis T = lg::half_t | lg::bf16_t _bf16
axis B = 1 (256, 3) | 2 _b2 (256, 3) | 4 _b4 (256, 2) | 8 _b8 (256, 2)

mlp_stack[T][B] = mlp_stack_body<B>(const MlpLayer* layers, T* x, T* act, unsigned* sync, int layer_count, int d,
                                    int ffn, float eps, int split_a, int split_b, int batch)
*/
