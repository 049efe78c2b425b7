// What a decode step's weight stream can reach on this GPU, and what a dependency across the whole GPU costs it
// (issue 63's question: can a persistent kernel's weight stream run on across the boundaries where a step's kernels
// wait for each other?). Every variant streams fp16 rows of 2048 columns (4 KB) into fp32 dot products with one
// vector, on every multiprocessor at once, split into phases that each depend on the whole phase before (as a
// layer's projections do: each needs all of the vector the one before wrote):
//   kernels     one kernel a phase, launched early in a CUDA graph (the library's pattern: each warp's first row in
//               flight before griddepcontrol.wait), 2 blocks of 8 warps a multiprocessor; also with the next kernel
//               launched at the start instead of after the wait, and with every row asked of L2 first;
//   library     the library's own one-vector gemv (kernels/nn/gemv.cu) as the phases' kernels, launched as
//               fp32_gemv_config launches it, or capped at 3 or 2 blocks a multiprocessor;
//   registers   one persistent kernel, 2 blocks a multiprocessor, the phases separated by a grid barrier (a counter
//               in global memory), each warp's row loads in registers, x brought into shared memory after each
//               barrier;
//   ring        one persistent kernel, 1 block a multiprocessor: a producer thread streams pages of rows with bulk
//               copies (cp.async.bulk) into a ring of shared-memory pages completed on mbarriers, across the phase
//               boundaries (weights do not depend on the phase before), while 4 consumer warps wait at the grid
//               barrier, bring the phase's vector into shared memory and consume the pages.
// Variants of `kernels` take it apart: the next kernel launched at the start, every row asked of L2 first, the weights
// by ld.global.nc, bounded for 3 blocks a multiprocessor (so that a block of the next kernel fits beside two of
// this one's, as beside the library's gemv), and rows taken by atomic tickets instead of grid-stride shares.
// Sizes: 50 MB (one MoE layer's chosen experts) in 1 and 2 phases, read cold (8 copies taken in turn, more than L2
// holds); 2000 MB (a 1B model's step) in one phase and in 88 (a TinyLlama-shaped step's count of dependent kernels);
// 4 MB in 86 phases (next to no bytes: the cost of the dependencies alone). Reported against the copy ceiling measured
// in the same run; "over bytes" is each phase's time above what the bytes take at that ceiling. For the ring in 88
// phases, per %globaltimer stamps: how far apart the blocks reach the barrier, and how long after the last one arrives
// the others leave it. Medians of 31 samples, CUDA events. Each variant's dot products are first checked against a
// float64 reference.
#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn/kernels.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ceiling.hpp"
#include "cli.hpp"
#include "median.hpp"

namespace lg = lazygraph;

namespace {

const char* const kStreamKernels = R"(#include "lazygraph/kernel_common.cuh"
#include "lazygraph/element.cuh"
#include "lazygraph/half.cuh"
namespace {
constexpr int kCols = 2048;             // halves a row
constexpr int kPerLane = kCols / 8 / 32;  // a lane's 16-byte chunks of a row

__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ float dot8(uint4 w, uint4 x) {
  const unsigned wv[4] = {w.x, w.y, w.z, w.w};
  const unsigned xv[4] = {x.x, x.y, x.z, x.w};
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = lg::unpack_half2(wv[i]);
    const float2 b = lg::unpack_half2(xv[i]);
    s = fmaf(a.x, b.x, s);
    s = fmaf(a.y, b.y, s);
  }
  return s;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
/// A lane's share of one row's products with x (its weights already loaded): x's chunks loaded together, then the
/// products in chunk order (so every variant gives the same bits), summed over the warp. x is what the phase before
/// wrote: a kernel reads it through L1 (empty at its start), as the library's gemv does; a persistent kernel from
/// shared memory, where each block brings it after each barrier (L1 would keep an earlier phase's x).
__device__ __forceinline__ float row_dot(const uint4 (&w)[kPerLane], const uint4* x, int lane) {
  uint4 xv[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) xv[k] = x[lane + 32 * k];
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) s += dot8(w[k], xv[k]);
  return warp_sum(s);
}
__device__ __forceinline__ void load_row(const uint4* row, uint4 (&w)[kPerLane], int lane) {
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) w[k] = load_streaming(row + lane + 32 * k);
}
__device__ __forceinline__ void load_row_nc(const uint4* row, uint4 (&w)[kPerLane], int lane) {
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    uint4& v = w[k];
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(row + lane + 32 * k));
  }
}
__device__ __forceinline__ long long now_ns() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
/// Every block's thread 0 counts itself in, then waits until `target` blocks have (the counter only grows). Traps
/// after a second without them (blocks that are not all resident at once would wait forever).
__device__ __forceinline__ void arrive_and_wait(unsigned* counter, unsigned target) {
  __threadfence();
  atomicAdd(counter, 1u);
  const long long start = now_ns();
  unsigned seen = 0;
  do {
    asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
    if (now_ns() - start > 1000000000LL) __trap();
  } while (static_cast<int>(seen - target) < 0);
}
__device__ __forceinline__ unsigned smem(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
}  // namespace

/// w[i] for i < n halves: a hash of i mapped to [-1, 1) (the host's reference computes the same).
extern "C" __global__ void fill_weights(lg::half_t* w, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ static_cast<unsigned>(i >> 32) * 40503u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float v = static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
    w[i] = lg::from_float<lg::half_t>(v);
  }
}

/// out[r] = w[r] . x for rows [begin, end): one phase as one early-launched kernel. `mode` bit 0: let the next
/// kernel launch at the start (before the wait) instead of after the wait; bit 1: first ask L2 for every row the
/// block will read (prefetch.global.L2 a line at a time), as the library's gemv did for kernels of up to 24 MB;
/// bit 2: the weights through the non-coherent path (`ld.global.nc`), as the library's gemv loads them.
__device__ __forceinline__ void phase_body(const lg::half_t* weights, const lg::half_t* vector, float* out,
                                           long long begin, long long end, int mode) {
  const uint4* w = reinterpret_cast<const uint4*>(weights);
  const uint4* x = reinterpret_cast<const uint4*>(vector);
  const int lane = threadIdx.x % 32;
  const long long warps = gridDim.x * 8LL;
  long long r = begin + blockIdx.x * 8LL + threadIdx.x / 32;
  if (mode & 2) {
    for (long long row = r; row < end; row += warps) {
      lg::prefetch_l2(w + row * (kCols / 8) + lane * 8);  // lane l: the row's l-th 128-byte line
    }
  }
  if (mode & 1) lg::allow_dependent_launch();
  bool waited = false;
  for (; r < end; r += warps) {
    uint4 wv[kPerLane];
    if (mode & 4) {
      load_row_nc(w + r * (kCols / 8), wv, lane);
    } else {
      load_row(w + r * (kCols / 8), wv, lane);
    }
    if (!waited) {  // the first row's weights are in flight before the wait for the phase before
      lg::wait_for_prior_grids();
      if ((mode & 1) == 0) lg::allow_dependent_launch();
      waited = true;
    }
    const float s = row_dot(wv, x, lane);
    if (lane == 0) out[r] = s;
  }
  if (!waited) {
    lg::wait_for_prior_grids();
    if ((mode & 1) == 0) lg::allow_dependent_launch();
  }
}

extern "C" __global__ void __launch_bounds__(256, 2) stream_phase(const lg::half_t* weights, const lg::half_t* vector,
                                                                 float* out, long long begin, long long end, int mode) {
  phase_body(weights, vector, out, begin, end, mode);
}

/// stream_phase bounded for 3 blocks of 256 threads a multiprocessor (at most 85 registers), as the library's gemv
/// is: launched 2 a multiprocessor, a block of the next early-launched kernel fits beside them.
extern "C" __global__ void __launch_bounds__(256, 3) stream_phase_3(const lg::half_t* weights,
                                                                   const lg::half_t* vector, float* out,
                                                                   long long begin, long long end, int mode) {
  phase_body(weights, vector, out, begin, end, mode);
}

/// stream_phase with each warp's rows taken by tickets instead of grid-stride shares: a warp takes tickets from
/// `tickets` (this kernel's own counter, never reset) until one is past its rows; each launch takes exactly
/// rows + warps of them, so ticket mod (rows + warps) numbers the launch's rows. A warp takes its next ticket while
/// its current row's weights are in flight.
extern "C" __global__ void __launch_bounds__(256, 2) stream_tickets(const lg::half_t* weights,
                                                                   const lg::half_t* vector, float* out,
                                                                   long long begin, long long end,
                                                                   unsigned long long* tickets) {
  const uint4* w = reinterpret_cast<const uint4*>(weights);
  const uint4* x = reinterpret_cast<const uint4*>(vector);
  const int lane = threadIdx.x % 32;
  if (blockDim.x != 256) __trap();  // a launch takes rows + 8 warps a block of tickets
  const unsigned long long n = static_cast<unsigned long long>(end - begin);
  const unsigned long long per_launch = n + gridDim.x * 8ULL;
  const auto take = [&] {
    unsigned long long t = 0;
    if (lane == 0) t = atomicAdd(tickets, 1ULL);
    return __shfl_sync(0xffffffffu, t, 0) % per_launch;
  };
  unsigned long long i = take();
  bool waited = false;
  while (i < n) {
    uint4 wv[kPerLane];
    load_row(w + (begin + static_cast<long long>(i)) * (kCols / 8), wv, lane);
    const unsigned long long next = take();
    if (!waited) {
      lg::wait_for_prior_grids();
      lg::allow_dependent_launch();
      waited = true;
    }
    const float s = row_dot(wv, x, lane);
    if (lane == 0) out[begin + static_cast<long long>(i)] = s;
    i = next;
  }
  if (!waited) {
    lg::wait_for_prior_grids();
    lg::allow_dependent_launch();
  }
}

/// out[r] = w[r] . x for rows [begin, end) in phases of `per_phase` rows, a grid barrier between phases
/// (counter: the barrier's count, `base` its value at launch).
extern "C" __global__ void __launch_bounds__(256, 2) stream_barrier(const lg::half_t* weights,
                                                                   const lg::half_t* vector, float* out,
                                                                   long long begin, long long end,
                                                                   long long per_phase, unsigned* counter,
                                                                   unsigned base) {
  __shared__ uint4 xs[kCols / 8];
  const uint4* w = reinterpret_cast<const uint4*>(weights);
  const uint4* x = reinterpret_cast<const uint4*>(vector);
  const int lane = threadIdx.x % 32;
  const long long warps = gridDim.x * 8LL;
  unsigned phase = 0;
  for (long long p0 = begin; p0 < end; p0 += per_phase, ++phase) {
    if (phase > 0) {
      __syncthreads();
      if (threadIdx.x == 0) arrive_and_wait(counter, base + phase * gridDim.x);
      __syncthreads();  // x is read only once the barrier has passed
    }
    for (int c = threadIdx.x; c < kCols / 8; c += blockDim.x) xs[c] = __ldcg(x + c);
    __syncthreads();
    const long long p1 = min(end, p0 + per_phase);
    for (long long r = p0 + blockIdx.x * 8LL + threadIdx.x / 32; r < p1; r += warps) {
      uint4 wv[kPerLane];
      load_row(w + r * (kCols / 8), wv, lane);
      const float s = row_dot(wv, xs, lane);
      if (lane == 0) out[r] = s;
    }
  }
}

/// The same phases through a ring of `stages` shared-memory pages of `page_rows` rows: warp 0's first thread issues
/// the bulk copies, warps 1.. consume. Block b takes the b-th contiguous share of each phase's rows. With `trace`,
/// trace[(b * phases + p) * 2 + 0 / 1]: when the block reached the barrier before phase p, and when it left it.
extern "C" __global__ void stream_ring(const lg::half_t* weights, const lg::half_t* vector, float* out,
                                       long long begin, long long end, long long per_phase, unsigned* counter,
                                       unsigned base, int page_rows, int stages, long long* trace) {
  const uint4* w = reinterpret_cast<const uint4*>(weights);
  const uint4* x = reinterpret_cast<const uint4*>(vector);
  extern __shared__ __align__(128) unsigned char pages[];
  __shared__ __align__(8) unsigned long long full[16];
  __shared__ __align__(8) unsigned long long empty[16];
  __shared__ __align__(16) uint4 xs[kCols / 8];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int consumers = blockDim.x / 32 - 1;
  if (stages > 16 || consumers < 1) __trap();
  const unsigned page_bytes = static_cast<unsigned>(page_rows) * kCols * 2;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem(&full[s])));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem(&empty[s])), "r"(consumers));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const long long phases = (end - begin + per_phase - 1) / per_phase;
  const auto share = [&](long long p, long long& lo, long long& hi) {
    const long long p0 = begin + p * per_phase;
    const long long n = min(per_phase, end - p0);
    const long long each = (n + gridDim.x - 1) / gridDim.x;
    lo = p0 + min(n, each * blockIdx.x);
    hi = p0 + min(n, each * (blockIdx.x + 1));
  };
  const auto wait_parity = [](unsigned barrier, unsigned parity) {
    unsigned done = 0;
    do {
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done) : "r"(barrier), "r"(parity) : "memory");
    } while (done == 0);
  };
  if (warp == 0) {
    if (lane == 0) {
      long long page = 0;
      for (long long p = 0; p < phases; ++p) {
        long long lo = 0, hi = 0;
        share(p, lo, hi);
        for (long long r = lo; r < hi; r += page_rows, ++page) {
          const int s = static_cast<int>(page % stages);
          if (page >= stages) wait_parity(smem(&empty[s]), static_cast<unsigned>((page / stages - 1) & 1));
          const unsigned bytes = static_cast<unsigned>(min(static_cast<long long>(page_rows), hi - r)) * kCols * 2;
          asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem(&full[s])), "r"(bytes)
                       : "memory");
          asm volatile(
              "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                  smem(pages + s * page_bytes)),
              "l"(w + r * (kCols / 8)), "r"(bytes), "r"(smem(&full[s]))
              : "memory");
        }
      }
    }
    return;
  }
  const unsigned threads = static_cast<unsigned>(consumers) * 32;
  long long page = 0;
  for (long long p = 0; p < phases; ++p) {
    if (p > 0) {
      asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory");
      if (threadIdx.x == 32) {
        if (trace) trace[(blockIdx.x * phases + p) * 2] = now_ns();
        arrive_and_wait(counter, base + static_cast<unsigned>(p) * gridDim.x);
        if (trace) trace[(blockIdx.x * phases + p) * 2 + 1] = now_ns();
      }
    }
    if (warp == 1) {  // the phase's vector, once a block, after the barrier (thread 32 waited at it)
      __syncwarp();
      for (int c = lane; c < kCols / 8; c += 32) xs[c] = __ldcg(x + c);
    }
    asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory");
    uint4 xr[kPerLane];
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) xr[k] = xs[lane + 32 * k];
    long long lo = 0, hi = 0;
    share(p, lo, hi);
    for (long long r = lo; r < hi; r += page_rows, ++page) {
      const int s = static_cast<int>(page % stages);
      wait_parity(smem(&full[s]), static_cast<unsigned>((page / stages) & 1));
      const int n = static_cast<int>(min(static_cast<long long>(page_rows), hi - r));
      const uint4* rows = reinterpret_cast<const uint4*>(pages + s * page_bytes);
      for (int i = warp - 1; i < n; i += consumers) {
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) acc += dot8(rows[i * (kCols / 8) + lane + 32 * k], xr[k]);
        acc = warp_sum(acc);
        if (lane == 0) out[r + i] = acc;
      }
      __syncwarp();
      if (lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem(&empty[s])) : "memory");
    }
  }
}
)";

constexpr long long kCols = 2048;
constexpr long long kRowBytes = kCols * 2;

/// The weight the kernel fill_weights puts at index i.
float weight_at(long long i) {
  auto h = static_cast<unsigned>(i) * 2654435761U ^ static_cast<unsigned>(i >> 32) * 40503U;
  h ^= h >> 15U;
  h *= 2246822519U;
  h ^= h >> 13U;
  const float v = static_cast<float>(h >> 8U) * (2.0F / 16777216.0F) - 1.0F;
  return lg::half::from_float(v).to_float();
}

}  // namespace

constexpr const char* usage =
    "usage: bench_weight_stream\n"
    "Streams fp16 weight rows into dot products on every multiprocessor, in phases that each depend on the whole\n"
    "phase before: one early-launched kernel a phase in a CUDA graph, one persistent kernel with a grid barrier\n"
    "between phases, and one whose producer streams pages through a shared-memory ring across the barriers; 50 MB\n"
    "and 2000 MB, against the copy ceiling measured in the same run.\n"
    "Exit status: 0 done, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

int main(int argc, char** argv) {
  if (auto code = example::handle_arguments(argc, argv, usage, 0)) return *code;
  if (example::skip_without_gpu("bench_weight_stream")) return example::exit_skipped;
  try {
    lg::Device gpu = lg::Device::first();
    lg::Stream s(gpu);
    lg::KernelLibraryOptions options;
    options.kernel_sets = {lg::nn::kernel_set(), lg::KernelSet{"bench", {{"weight_stream.cu", kStreamKernels}}, {}}};
    lg::KernelLibrary lib(gpu, std::move(options));
    const auto fill = lib.get<void(lg::half*, long long)>("fill_weights");
    const auto phase_kernel =
        lib.get<void(const lg::half*, const lg::half*, float*, long long, long long, int)>("stream_phase");
    const auto phase_kernel_3 =
        lib.get<void(const lg::half*, const lg::half*, float*, long long, long long, int)>("stream_phase_3");
    const auto tickets_kernel =
        lib.get<void(const lg::half*, const lg::half*, float*, long long, long long, unsigned long long*)>(
            "stream_tickets");
    const auto barrier_kernel =
        lib.get<void(const lg::half*, const lg::half*, float*, long long, long long, long long, unsigned*, unsigned)>(
            "stream_barrier");
    const auto ring_kernel = lib.get<void(const lg::half*, const lg::half*, float*, long long, long long, long long,
                                          unsigned*, unsigned, int, int, long long*)>("stream_ring");
    const unsigned sms = static_cast<unsigned>(gpu.sm_count());
    if (barrier_kernel.max_active_blocks_per_sm(256) < 2)
      throw std::runtime_error("stream_barrier: 2 blocks a SM do not fit");

    const long long big = 2000LL << 20U;
    const long long rows_total = big / kRowBytes;
    auto w = lg::empty<lg::half>(static_cast<std::size_t>(big / 2)).sync_on(s);
    fill.launch(s, {{4 * sms, 1, 1}, {256, 1, 1}, 0}, w.view(), big / 2);
    std::vector<lg::half> x_host(kCols);
    for (long long i = 0; i < kCols; ++i) x_host[i] = lg::half::from_float(std::sin(0.37F * static_cast<float>(i)));
    auto x = lg::from_host(x_host).sync_on(s);
    auto out = lg::empty<float>(static_cast<std::size_t>(rows_total)).sync_on(s);
    auto counter = lg::zeros<unsigned>(1).sync_on(s);
    unsigned counter_value = 0;  // what the grid barriers have counted so far
    const int ring_pages = 8;    // rows a page: 32 KB
    const int ring_stages = 6;
    const unsigned ring_threads = 32 * 5;
    const unsigned ring_shared = ring_pages * ring_stages * kRowBytes;
    if (ring_kernel.max_active_blocks_per_sm(ring_threads, ring_shared) < 1) {
      throw std::runtime_error("stream_ring: a block of " + std::to_string(ring_shared) +
                               " bytes of shared memory does not fit on a multiprocessor");
    }

    // One run of a variant over rows [begin, end) in `phases` phases; the persistent ones launched directly.
    const auto run_barrier = [&](long long begin, long long end, long long per_phase) {
      barrier_kernel.launch(s, {{2 * sms, 1, 1}, {256, 1, 1}, 0}, w.cview(), x.cview(), out.view(), begin, end,
                            per_phase, counter.view(), counter_value);
      counter_value += static_cast<unsigned>((end - begin + per_phase - 1) / per_phase - 1) * 2 * sms;
    };
    const auto run_ring = [&](long long begin, long long end, long long per_phase, lg::DeviceSpan<long long> trace) {
      ring_kernel.launch(s, {{sms, 1, 1}, {ring_threads, 1, 1}, ring_shared}, w.cview(), x.cview(), out.view(), begin,
                         end, per_phase, counter.view(), counter_value, ring_pages, ring_stages, trace);
      counter_value += static_cast<unsigned>((end - begin + per_phase - 1) / per_phase - 1) * sms;
    };
    // The library's own one-vector gemv (kernels/nn/gemv.cu) as the phases' kernels: one block per 8 rows (`cap` 0,
    // as fp32_gemv_config launched it before its one-vector cap), or at most `cap` blocks a multiprocessor, its warps
    // taking the rows past the grid in grid-stride passes (`cap` 2: as fp32_gemv_config launches it now).
    const auto gemv = lib.get<void(const lg::half*, const lg::half*, lg::half*, int, int, int)>("gemv");
    auto y = lg::empty<lg::half>(static_cast<std::size_t>(rows_total)).sync_on(s);
    const auto gemv_graph = [&](long long begin, long long end, long long per_phase, unsigned cap) {
      return lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) {
        for (long long p0 = begin; p0 < end; p0 += per_phase) {
          const long long n = std::min(end, p0 + per_phase) - p0;
          const auto blocks = static_cast<unsigned>((n + 7) / 8);
          const unsigned grid = cap > 0 ? std::min(blocks, cap * sms) : blocks;
          sc.record(gemv(lg::early(lg::LaunchConfig{{grid, 1, 1}, {32, 1, 8}, 0}),
                         w.cview().subspan(static_cast<std::size_t>(p0 * kCols), static_cast<std::size_t>(n * kCols)),
                         x.cview(), y.view().subspan(static_cast<std::size_t>(p0), static_cast<std::size_t>(n)),
                         static_cast<int>(n), static_cast<int>(kCols), 1));
        }
      });
    };
    // `bound3`: stream_phase_3 (a block of the next kernel fits beside two of this one's).
    const auto phase_graph = [&](long long begin, long long end, long long per_phase, int mode = 0,
                                 bool bound3 = false) {
      return lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) {
        for (long long p0 = begin; p0 < end; p0 += per_phase) {
          sc.record((bound3 ? phase_kernel_3 : phase_kernel)(
              lg::early(lg::LaunchConfig{{2 * sms, 1, 1}, {256, 1, 1}, 0}), w.cview(), x.cview(), out.view(), p0,
              std::min(end, p0 + per_phase), mode));
        }
      });
    };
    // Each kernel of a tickets graph has its own counter: graph k of a case takes counters [k * 88, k * 88 + 88),
    // the correctness check the last few (kTicketCheck).
    constexpr std::size_t kTicketCounters = 8 * 88 + 8;
    constexpr std::size_t kTicketCheck = 8 * 88;
    auto tickets = lg::zeros<unsigned long long>(kTicketCounters).sync_on(s);
    const auto tickets_graph = [&](long long begin, long long end, long long per_phase, std::size_t first_counter) {
      return lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) {
        std::size_t counter = first_counter;
        for (long long p0 = begin; p0 < end; p0 += per_phase, ++counter) {
          sc.record(tickets_kernel(lg::early(lg::LaunchConfig{{2 * sms, 1, 1}, {256, 1, 1}, 0}), w.cview(), x.cview(),
                                   out.view(), p0, std::min(end, p0 + per_phase), tickets.view().subspan(counter, 1)));
        }
      });
    };

    // Correctness: 64 MB of rows through each variant against float64.
    {
      const long long rows = (64LL << 20U) / kRowBytes;
      std::vector<double> ref(rows);
      std::vector<double> mag(rows);
      for (long long r = 0; r < rows; ++r) {
        double sum = 0;
        double abs_sum = 0;
        for (long long c = 0; c < kCols; ++c) {
          const double term = static_cast<double>(weight_at(r * kCols + c)) * x_host[c].to_float();
          sum += term;
          abs_sum += std::fabs(term);
        }
        ref[r] = sum;
        mag[r] = abs_sum;
      }
      // Each row within 1e-5 of its sum of |products| (fp32 sums), or, for the library's fp16 outputs, within fp16's
      // rounding of the result besides; a NaN fails.
      const auto check = [&](const char* name, const std::vector<double>& got, double relative) {
        double worst = 0;
        for (long long r = 0; r < rows; ++r) {
          const double error = std::fabs(got[r] - ref[r]) / (mag[r] + relative * std::fabs(ref[r]) / 1e-5);
          if (!(error <= 1e-5)) {
            throw std::runtime_error(std::string(name) + ": row " + std::to_string(r) + " is " +
                                     std::to_string(got[r]) + ", float64 says " + std::to_string(ref[r]));
          }
          worst = std::max(worst, std::fabs(got[r] - ref[r]) / mag[r]);
        }
        std::printf("%s: largest error %.2e of the sum of |products| over %lld rows\n", name, worst, rows);
      };
      const auto check_out = [&](const char* name) {
        std::vector<float> got(static_cast<std::size_t>(rows_total));
        lg::copy(std::span<float>(got), out.cview()).sync_on(s);
        check(name, std::vector<double>(got.begin(), got.begin() + rows), 0);
        lg::fill(out.view(), -1.0F).sync_on(s);
      };
      lg::fill(out.view(), -1.0F).sync_on(s);
      for (const int mode : {0, 1, 2, 3, 4}) {
        auto g = phase_graph(0, rows, rows / 4, mode);
        g.launch_on(s);
        check_out(mode == 0   ? "kernels"
                  : mode == 1 ? "kernels, next launched at the start"
                  : mode == 2 ? "kernels, rows asked of L2 first"
                  : mode == 3 ? "kernels, both"
                              : "kernels, weights by ld.global.nc");
      }
      auto g3 = phase_graph(0, rows, rows / 4, 0, true);
      g3.launch_on(s);
      check_out("kernels, bounded for 3 blocks a SM");
      auto gt = tickets_graph(0, rows, rows / 4, kTicketCheck);
      gt.launch_on(s);
      check_out("kernels, rows by tickets");
      gt.launch_on(s);  // a second launch: the tickets numbering from where the first left them
      check_out("kernels, rows by tickets, launched again");
      run_barrier(0, rows, rows / 4);
      check_out("registers");
      run_ring(0, rows, rows / 4, {});
      check_out("ring");
      for (const unsigned cap : {0U, 3U, 2U}) {
        lg::fill(y.view(), lg::half::from_float(-1.0F)).sync_on(s);
        auto g = gemv_graph(0, rows, rows / 4, cap);
        g.launch_on(s);
        std::vector<lg::half> got(static_cast<std::size_t>(rows_total));
        lg::copy(std::span<lg::half>(got), y.cview()).sync_on(s);
        std::vector<double> values(static_cast<std::size_t>(rows));
        for (long long r = 0; r < rows; ++r) values[r] = got[r].to_float();
        const std::string name =
            cap == 0 ? std::string("library gemv") : "library gemv, at most " + std::to_string(cap) + " blocks a SM";
        check(name.c_str(), values, 1.0 / 1024);
      }
    }

    const double copy = bench::copy_ceiling(s);
    std::printf("\n%s, %u multiprocessors: copy ceiling %.2f TB/s\n\n", gpu.name().c_str(), sms, copy * 1e-12);
    std::printf(
        "| variant | MB | phases | us | TB/s | of copy ceiling | us a phase over bytes "
        "|\n|---|---|---|---|---|---|---|\n");
    auto trace = lg::empty<long long>(static_cast<std::size_t>(sms) * 88 * 2).sync_on(s);
    struct Case {
      long long mb;
      long long phases;
    };
    for (const Case c : {Case{50, 1}, Case{50, 2}, Case{2000, 1}, Case{2000, 88}, Case{4, 88}}) {
      const long long rows = (c.mb << 20U) / kRowBytes;
      const long long per_phase = (rows + c.phases - 1) / c.phases;
      const long long phases = (rows + per_phase - 1) / per_phase;  // c.phases, or fewer where rows are few
      // Cold reads where 8 copies exceed L2 (the 4 MB case's do not: its time is the dependencies').
      const int copies = static_cast<int>(std::min<long long>(8, rows_total / rows));
      const double bytes = static_cast<double>(rows * kRowBytes);
      const auto report = [&](const char* name, double seconds) {
        const double us = seconds * 1e6;
        std::printf("| %s | %lld | %lld | %.1f | %.2f | %.3f | %.2f |\n", name, c.mb, phases, us,
                    bytes / seconds * 1e-12, bytes / seconds / copy,
                    (us - bytes / copy * 1e6) / static_cast<double>(phases));
      };
      std::vector<lg::CudaGraph<>> graphs;
      for (int k = 0; k < copies; ++k) graphs.push_back(phase_graph(k * rows, (k + 1) * rows, per_phase));
      report("kernels", bench::median_seconds(s, copies, [&](int i) { graphs[i % copies].launch_on(s); }));
      for (const int mode : {1, 2, 3, 4, 8}) {
        std::vector<lg::CudaGraph<>> variant;
        for (int k = 0; k < copies; ++k) {
          variant.push_back(phase_graph(k * rows, (k + 1) * rows, per_phase, mode & 7, mode == 8));
        }
        const char* name = mode == 1   ? "kernels, next launched at the start"
                           : mode == 2 ? "kernels, rows asked of L2 first"
                           : mode == 3 ? "kernels, both"
                           : mode == 4 ? "kernels, weights by ld.global.nc"
                                       : "kernels, bounded for 3 blocks a SM";
        report(name, bench::median_seconds(s, copies, [&](int i) { variant[i % copies].launch_on(s); }));
      }
      {
        tickets =
            lg::zeros<unsigned long long>(kTicketCounters).sync_on(s);  // each counter numbers one shape's launches
        std::vector<lg::CudaGraph<>> ticketed;
        for (int k = 0; k < copies; ++k) {
          ticketed.push_back(tickets_graph(k * rows, (k + 1) * rows, per_phase, static_cast<std::size_t>(k) * 88));
        }
        report("kernels, rows by tickets",
               bench::median_seconds(s, copies, [&](int i) { ticketed[i % copies].launch_on(s); }));
      }
      for (const unsigned cap : {0U, 3U, 2U}) {
        std::vector<lg::CudaGraph<>> library;
        for (int k = 0; k < copies; ++k) library.push_back(gemv_graph(k * rows, (k + 1) * rows, per_phase, cap));
        const std::string name =
            cap == 0 ? std::string("library gemv") : "library gemv, at most " + std::to_string(cap) + " blocks a SM";
        report(name.c_str(), bench::median_seconds(s, copies, [&](int i) { library[i % copies].launch_on(s); }));
      }
      report("registers", bench::median_seconds(s, copies, [&](int i) {
               const long long b = (i % copies) * rows;
               run_barrier(b, b + rows, per_phase);
             }));
      report("ring", bench::median_seconds(s, copies, [&](int i) {
               const long long b = (i % copies) * rows;
               run_ring(b, b + rows, per_phase, {});
             }));
      if (phases > 2) {  // one traced run of the ring: the blocks at its barriers
        run_ring(0, rows, per_phase, trace.view());
        std::vector<long long> t(static_cast<std::size_t>(sms) * 88 * 2);
        lg::copy(std::span<long long>(t), trace.cview()).sync_on(s);
        std::vector<double> spread;
        std::vector<double> release;
        for (long long p = 2; p < phases; ++p) {
          std::vector<long long> arrive;
          std::vector<long long> leave;
          for (unsigned b = 0; b < sms; ++b) {
            arrive.push_back(t[(b * phases + p) * 2]);
            leave.push_back(t[(b * phases + p) * 2 + 1]);
          }
          std::sort(arrive.begin(), arrive.end());
          std::sort(leave.begin(), leave.end());
          spread.push_back(static_cast<double>(arrive[sms / 2] - arrive[0]) * 1e-3);
          release.push_back(static_cast<double>(leave[sms / 2] - arrive[sms - 1]) * 1e-3);
        }
        std::printf(
            "|   ring's barriers (median over phases): the median block arrives %.2f us after the first, "
            "and leaves %.2f us after the last arrives | | | | | | |\n",
            bench::median(spread), bench::median(release));
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_weight_stream: %s\n", e.what());
    return 1;
  }
}
