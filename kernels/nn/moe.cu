// A mixture of experts' layer in the decode step (fp16 `NAME`, bf16 `NAME_bf16`; arithmetic in fp32), after an
// rms_norm of the residual x into h ([batch][d], rounded to T as transformers rounds its normed states) and the
// router's logits = W_r h through gemv ([batch][experts], each rounded to T as transformers' gate Linear returns
// them). The experts' choice never leaves the device: moe_route writes it, the expert kernels read it (or, for one
// row, moe_gate_up_staged and moe_down_staged take it from the logits themselves).
//
//   moe_route(logits, ids, weights, plan, experts, top_k, normalize, batch)
//       Per row b: p = softmax(logits[b]) in fp32; the top_k largest p in descending order, ties to the lower expert
//       index; where `normalize` (nonzero) their p divided by their sum; each weight rounded to T (transformers casts
//       the routing weights to the element type) and stored as float. Writes ids [batch][top_k] (expert indices),
//       weights [batch][top_k], and the step's plan for the expert kernels (kPlanInts ints, nn::kMoePlanInts):
//       plan[0] = n, the distinct experts the rows chose; plan[1 + u], u < n, the u-th of them in the order of
//       their first pair (pair j = b * top_k + s is row b's slot s); plan[1 + kMaxPairs + u * 8 + b], b < batch:
//       the pair by which row b chose expert u, or -1. Launch: a grid of one block (the block builds the plan from
//       every row's choice; for one row, its warp writes the plan alone), 32 to 1024 threads, a multiple of 32; warp w
//       routes rows w, w + warps, ...
//   moe_gate_up(w1, w3, h, plan, act, experts, width, d, top_k, batch)
//       w1, w3 [experts][width][d]: the experts' gate_proj and up_proj, stacked. For each distinct expert u of the
//       plan (e its index) and row b that chose it by pair j: act[j][i] = silu(w1[e][i] . h[b]) * (w3[e][i] . h[b]),
//       rounded once to T; act is [batch * top_k][width]. Expert u is an ordinary two-matrix gemv of `width` rows
//       over every row of h (gemv_core.cuh: the weights are read once for the whole batch; the products of rows
//       that did not choose u are dropped), so a block takes a tile of rows of one expert: grid.y goes over the
//       distinct experts (y-stride; blocks with y >= n return, so size it for the most there can be,
//       min(batch * top_k, experts)), grid.x over the expert's rows. Launch: as gemv's variant of the same suffix
//       for `width` rows of d columns (nn::BasicKernels::moe_config).
//   moe_down(w2, act, plan, weights, partial, counters, x, experts, width, d, top_k, batch)
//       w2 [experts][d][width]: the experts' down_proj, stacked. x[b][r] += sum over s of weights[b][s] *
//       (w2[ids[b][s]][r] . act[b * top_k + s]), summed in fp32 in slot order and rounded once into x. Each distinct
//       expert u (e) is a one-matrix gemv of d rows, each row of the batch multiplied with the act of its own pair
//       (launched as moe_gate_up, for d rows of `width` columns); a pair's product stays in fp32, in
//       partial[j][r] ([batch * top_k][d]). The blocks of one grid column (blockIdx.x) hold the same rows of d for
//       every expert; each counts itself in counters[blockIdx.x] when its products are written, and the last of them
//       adds the column's rows into x and sets its count back to zero. counters: gridDim.x (at most d) entries, zero
//       before the launch, zero after it. The one-vector variant takes short rows (width at most 1024, d a multiple of
//       32) four at a time, rows r, r + d/4, r + d/2, r + 3d/4 as the row loop's four matrices over d/4 rows, so that a
//       lane has four rows' loads in flight (nn::BasicKernels::moe_down_config sizes the grid for d/4 rows then); any
//       grid.x up to d is correct either way.
//
//   moe_gate_up_staged(w1, w3, h, logits, ids, weights, plan, act, experts, width, d, top_k, normalize)
//       One row's (batch 1) moe_route and moe_gate_up in one kernel, with their bits: each block routes the row from
//       the router's logits itself (its first warp, into shared memory; experts at most 128, route_row's register
//       path), then runs its slots' experts as moe_gate_up's one-vector variant; block (0, 0) also writes ids, weights
//       and the plan as moe_route would. It waits for the kernel before it (the router's gemv) before it lets the
//       next one launch, for moe_down_staged, and its multiprocessors are kept split for shared memory (the host asks
//       the driver: nn::BasicKernels), so that moe_down_staged's large blocks can become resident beside its blocks.
//   moe_down_staged(w2, act, logits, x, experts, width, d, top_k, normalize)
//       moe_down's sum for one row, the same bits, with no partial sums in memory and no counters: a block routes the
//       row from the logits as moe_gate_up_staged does (the same experts and weights), owns rows r0 .. r0 + rows of d
//       (rows = ceil(d / grid.x), at most its threads) for every slot, copies each slot's expert's rows (one
//       contiguous piece of w2) into shared memory with cp.async, multiplies them by the slots' act and adds the
//       slots in order into its rows of x. The route, those copies and x are read before the kernel's wait: launch it
//       right after moe_gate_up_staged of the same logits, or without early launch. Then the experts' rows stream in
//       while moe_gate_up_staged still runs. Launch: 256 threads a block (a warp takes two rows and four slots at a
//       time), dynamic shared memory of at least top_k * (rows * width * sizeof(T) + width * 4 + rows * 4) bytes
//       (the stages, act in fp32, the products; nn::BasicKernels::moe_down_staged_config).
//
// moe_gate_up and moe_down come in the gemv family's variants (NAME, NAME_b2, NAME_b4, NAME_b8: the fp32 row loop
// for up to 1, 2, 4, 8 rows; NAME_mma: the tensor-core loop for 1 to 8; nn::BatchedKernel picks). Each vector's
// results are the same bits whatever else its batch holds and whichever rows share its experts' reads: each product
// is the row loop's own chain for the vector (gemv.cu), each expert's down product stays in fp32 until the row's
// slots are added in order; no float atomics (the one integer count only picks which block adds), so the bits
// repeat run to run. The fp32 variants also give a batch of one's bits; the _mma ones differ from those within
// rounding (gemv.cu).
//
// Requirements (a kernel traps on a violation, which the next synchronisation reports as a launch failure): d and
// width multiples of 8; w1, w2, w3, h, act 16-byte aligned; batch 1 to 8 (and at most the variant's); experts 1 to
// kMaxExperts (moe_gate_up_staged and moe_down_staged: 1 to kRegisterExperts, 128; one row; the former's blocks 32
// threads wide); top_k 1 to kMaxTopK and at most experts; a plan as moe_route writes it for the same experts, top_k and
// batch (its experts in [0, experts), its pairs in [-1, batch * top_k)); moe_down's grid.x at most d. x, act, partial,
// counters, ids, weights and plan must not alias the weights, logits or h. Early launch: moe_route, moe_gate_up and
// moe_down let the next kernel launch early at once and then wait for the kernel before them; moe_gate_up_staged waits
// first (for moe_down_staged, above). The weight rows of the expert kernels depend on the route, so unlike gemv's they
// cannot prefetch before that wait (moe_down_staged excepted); from it on, the row loop keeps 8 independent 16-byte
// weight loads in flight per lane.
#include "lazygraph/async_copy.cuh"
#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"
#include "lazygraph/nn/gemv_core.cuh"
#include "lazygraph/nn/moe_core.cuh"

namespace {

using namespace lg::nn;
using namespace lg::nn::moe;

template <class T>
__device__ __forceinline__ void moe_route_body(const T* logits, int* ids, float* weights, int* plan, int experts,
                                               int top_k, int normalize, int batch) {
  __shared__ float p[kMaxBatch][kMaxExperts];
  __shared__ int chosen[kMaxPairs];
  __shared__ float chosen_p[kMaxPairs];
  __shared__ int first_pair[kMaxExperts];  // the first pair choosing each expert (kMaxPairs: none)
  __shared__ unsigned leads[kMaxPairs / 32];
  __shared__ int distinct[kMaxPairs];
  lg::early_launch_prologue();
  if (!counts_supported(experts, top_k, batch) || gridDim.x * gridDim.y * gridDim.z != 1 || blockDim.x % 32 != 0 ||
      blockDim.y != 1 || blockDim.z != 1) {
    __trap();
  }
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int warps = threads / 32;
  if (batch == 1) {  // one row's experts are distinct: the plan is its slots in order, which warp 0 writes alone
    if (warp == 0) {
      route_row(logits, p[0], chosen, chosen_p, ids, weights, experts, top_k, normalize);
      for (int u = lane; u < top_k; u += 32) {
        plan[kPlanDistinct + u] = chosen[u];
        plan[kPlanPairs + u * kMaxBatch] = u;
      }
      if (lane == 0) plan[0] = top_k;
    }
    return;
  }
  for (int e = tid; e < experts; e += threads) first_pair[e] = kMaxPairs;

  for (int b = warp; b < batch; b += warps) {  // uniform over the warp
    route_row(logits + static_cast<long long>(b) * experts, p[b], chosen + b * top_k, chosen_p + b * top_k,
              ids + b * top_k, weights + b * top_k, experts, top_k, normalize);
  }
  __syncthreads();  // every row's choice (and first_pair's start) for the plan

  // The plan: an expert's first pair (an integer minimum: the same whichever thread comes first), the leading pairs
  // as bits, an expert's place u among the distinct ones = the leading pairs before its first.
  const int pairs = batch * top_k;
  for (int j = tid; j < pairs; j += threads) atomicMin(&first_pair[chosen[j]], j);
  __syncthreads();
  for (int j0 = warp * 32; j0 < pairs; j0 += warps * 32) {  // uniform over the warp
    const int j = j0 + lane;
    const unsigned mask = __ballot_sync(0xffffffffu, j < pairs && first_pair[chosen[j]] == j);
    if (lane == 0) leads[j0 / 32] = mask;
  }
  __syncthreads();
  int n = 0;
  for (int w = 0; w < (pairs + 31) / 32; ++w) n += __popc(leads[w]);
  for (int j = tid; j < pairs; j += threads) {
    if (first_pair[chosen[j]] != j) continue;
    int u = __popc(leads[j / 32] & ((1U << (j % 32)) - 1U));
    for (int w = 0; w < j / 32; ++w) u += __popc(leads[w]);
    distinct[u] = chosen[j];
    plan[kPlanDistinct + u] = chosen[j];
  }
  if (tid == 0) plan[0] = n;
  __syncthreads();
  for (int i = tid; i < n * batch; i += threads) {
    const int u = i / batch;
    const int b = i % batch;
    int pair = -1;
    for (int s = 0; s < top_k; ++s) pair = chosen[b * top_k + s] == distinct[u] ? b * top_k + s : pair;
    plan[kPlanPairs + u * kMaxBatch + b] = pair;
  }
}

/// The row loop of a variant: the fp32 one for up to B vectors, or the tensor-core one (B = kTensorCores), both
/// after the wait for earlier work (the weights' rows depend on the plan). finish(row, b, v) as rows_of's.
template <int B, class W, class X, class Finish>
__device__ __forceinline__ void expert_rows(const W& w, const X& x, int rows, int cols, int batch, Finish finish) {
  if constexpr (B == kTensorCores) {
    gemv_rows_mma<mma_steps(W::count)>(w, x, rows, cols, batch, 0.0f, finish);
  } else {
    gemv_rows<B>(w, x, rows, cols, batch, 0.0f, [&](int row, const float(&acc)[W::count][B]) {
      for (int b = 0; b < batch; ++b) {
        float v[W::count];
#pragma unroll
        for (int m = 0; m < W::count; ++m) v[m] = acc[m][b];
        finish(row, b, v);
      }
    });
  }
}

template <int B, class T>
__device__ __forceinline__ void moe_gate_up_body(const T* w1, const T* w3, const T* h, const int* plan, T* act,
                                                 int experts, int width, int d, int top_k, int batch) {
  __shared__ int pair_of[kMaxBatch];
  lg::early_launch_prologue();
  if (!counts_supported(experts, top_k, batch) || batch > max_batch(B) || width <= 0 || width % 8 != 0 || d <= 0 ||
      d % 8 != 0 || !lg::is_aligned16(w1) || !lg::is_aligned16(w3) || !lg::is_aligned16(h) || !lg::is_aligned16(act)) {
    __trap();
  }
  const int n = planned_experts(plan, experts, top_k, batch);
  for (int u = static_cast<int>(blockIdx.y); u < n; u += static_cast<int>(gridDim.y)) {  // uniform over the block
    const long long e = planned_expert(plan, u, experts, top_k, batch, pair_of);
    const Matrices<2, T> w{{w1 + e * width * d, w3 + e * width * d}, d};
    expert_rows<B>(w, PlainX<T>{h, d}, width, d, batch, [&](int row, int b, const float* v) {
      const int j = pair_of[b];
      if (j >= 0) act[static_cast<long long>(j) * width + row] = lg::from_float<T>(silu(v[0]) * v[1]);
    });
    __syncthreads();  // pair_of is read before the next expert's
  }
}

/// One row's route as moe_route gives it (route_row), taken by the block's first warp into shared memory: chosen[s]
/// the expert of slot s, weight[s] its weight. With `publish`, that warp also writes ids, weights and the plan as
/// moe_route does for one row. Every thread of the block calls it; synchronises the block.
template <class T>
__device__ __forceinline__ void route_in_block(const T* logits, int* ids, float* weights, int* plan, int experts,
                                               int top_k, int normalize, bool publish, int* chosen, float* weight) {
  __shared__ float chosen_p[kMaxTopK];
  const bool first_warp = threadIdx.y == 0 && threadIdx.z == 0 && threadIdx.x < 32;
  if (first_warp) {
    route_row_in_registers(logits, chosen, chosen_p, chosen, weight, experts, top_k, normalize);
    if (publish) {
      for (int s = static_cast<int>(threadIdx.x); s < top_k; s += 32) {
        ids[s] = chosen[s];
        weights[s] = weight[s];
        plan[kPlanDistinct + s] = chosen[s];
        plan[kPlanPairs + s * kMaxBatch] = s;
      }
      if (threadIdx.x == 0) plan[0] = top_k;
    }
  }
  __syncthreads();
}

template <class T>
__device__ __forceinline__ void moe_gate_up_staged_body(const T* w1, const T* w3, const T* h, const T* logits, int* ids,
                                                        float* weights, int* plan, T* act, int experts, int width,
                                                        int d, int top_k, int normalize) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800  // (before sm_80, without cp.async, the pair only traps)
  __shared__ int chosen[kMaxTopK];
  __shared__ float weight[kMaxTopK];
  // The kernel after this one may launch only once the router's gemv, the kernel before, is complete: moe_down_staged
  // routes from its logits before its own wait. Nothing is lost here, since the weights' rows depend on the route.
  lg::wait_for_prior_grids();
  lg::allow_dependent_launch();
  // blockDim.x 32: route_in_block's first warp is the threads of y = z = 0.
  if (!counts_supported(experts, top_k, 1) || experts > kRegisterExperts || width <= 0 || width % 8 != 0 || d <= 0 ||
      d % 8 != 0 || blockDim.x != 32 || !lg::is_aligned16(w1) || !lg::is_aligned16(w3) || !lg::is_aligned16(h) ||
      !lg::is_aligned16(act)) {
    __trap();
  }
  route_in_block(logits, ids, weights, plan, experts, top_k, normalize, blockIdx.x == 0 && blockIdx.y == 0, chosen,
                 weight);
  for (int u = static_cast<int>(blockIdx.y); u < top_k; u += static_cast<int>(gridDim.y)) {  // uniform over the block
    const long long e = chosen[u];
    const Matrices<2, T> w{{w1 + e * width * d, w3 + e * width * d}, d};
    expert_rows<1>(w, PlainX<T>{h, d}, width, d, 1, [&](int row, int /*b*/, const float* v) {
      act[static_cast<long long>(u) * width + row] = lg::from_float<T>(silu(v[0]) * v[1]);
    });
  }
#else
  __trap();
#endif
}

/// Rows of d per block column of an expert kernel's grid (grid.x): what gemv_rows (a group's row per pass, blockDim.z
/// groups) or gemv_rows_mma (a tile of kMmaRows) gives a block per pass, passes grid-stride.
template <int B>
__device__ __forceinline__ int rows_per_pass() {
  return B == kTensorCores ? kMmaRows : static_cast<int>(blockDim.z);
}

/// The slices moe_down's one-vector variant takes d in: kDownParts where rows are short (width at most 1024: fewer
/// than 8 useful 16-byte loads per lane and step in the row loop, which then re-reads the row's last chunk for the
/// rest) and d a multiple of 8 kDownParts, so that each lane keeps loads of four rows in flight instead of one's; else
/// 1. The other variants take d whole (their accumulators for 2 to 8 vectors of four rows spill: 16-128 bytes).
constexpr int kDownParts = 4;
template <int B>
__device__ __forceinline__ int down_parts(int d, int width) {
  return B == 1 && width <= 1024 && d % (8 * kDownParts) == 0 ? kDownParts : 1;
}

template <int B, class T>
__device__ __forceinline__ void moe_down_body(const T* w2, const T* act, const int* plan, const float* weights,
                                              float* partial, unsigned* counters, T* x, int experts, int width, int d,
                                              int top_k, int batch) {
  __shared__ int pair_of[kMaxBatch];
  lg::early_launch_prologue();
  if (!counts_supported(experts, top_k, batch) || batch > max_batch(B) || width <= 0 || width % 8 != 0 || d <= 0 ||
      d % 8 != 0 || static_cast<int>(gridDim.x) > d || !lg::is_aligned16(w2) || !lg::is_aligned16(act)) {
    __trap();
  }
  const int n = planned_experts(plan, experts, top_k, batch);
  const int parts = down_parts<B>(d, width);
  for (int u = static_cast<int>(blockIdx.y); u < n; u += static_cast<int>(gridDim.y)) {  // uniform over the block
    const long long e = planned_expert(plan, u, experts, top_k, batch, pair_of);
    const T* w_e = w2 + e * d * width;
    if constexpr (B == 1) {
      if (parts == kDownParts) {
        // Rows r, r + d / 4, r + d / 2 and r + 3 d / 4 together: the four as the row loop's matrices.
        const long long slice = d / kDownParts;
        const Matrices<kDownParts, T> w{{w_e, w_e + slice * width, w_e + 2 * slice * width, w_e + 3 * slice * width},
                                        width};
        expert_rows<B>(w, PairX<T>{act, pair_of, width}, static_cast<int>(slice), width, batch,
                       [&](int row, int b, const float* v) {
                         const int j = pair_of[b];
                         if (j < 0) return;
#pragma unroll
                         for (int m = 0; m < kDownParts; ++m)
                           partial[j * static_cast<long long>(d) + m * slice + row] = v[m];
                       });
        __syncthreads();  // pair_of is read before the next expert's
        continue;
      }
    }
    const Matrices<1, T> w{{w_e}, width};
    expert_rows<B>(w, PairX<T>{act, pair_of, width}, d, width, batch, [&](int row, int b, const float* v) {
      const int j = pair_of[b];
      if (j >= 0) partial[static_cast<long long>(j) * d + row] = v[0];
    });
    __syncthreads();  // pair_of is read before the next expert's
  }

  add_expert_sums(weights, partial, counters, x, d, top_k, batch, rows_per_pass<B>(), parts);
}

/// Rows of d and slots a warp of moe_down_staged multiplies at a time: each act chunk loaded once for the rows, the
/// warp sums of all of them interleaved.
constexpr int kStagedRows = 2;
constexpr int kStagedSlots = 4;

template <class T>
__device__ __forceinline__ void moe_down_staged_body(const T* w2, const T* act, const T* logits, T* x, int experts,
                                                     int width, int d, int top_k, int normalize) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800  // (before sm_80, without cp.async, the kernel only traps)
  extern __shared__ __align__(16) unsigned char staged[];
  __shared__ int expert_of[kMaxTopK];
  __shared__ float slot_weight[kMaxTopK];
  if (!counts_supported(experts, top_k, 1) || experts > kRegisterExperts || width <= 0 || width % 8 != 0 || d <= 0 ||
      d % 8 != 0 || static_cast<int>(gridDim.x) > d || gridDim.y != 1 || gridDim.z != 1 || blockDim.x % 32 != 0 ||
      blockDim.y != 1 || blockDim.z != 1 || !lg::is_aligned16(w2) || !lg::is_aligned16(act)) {
    __trap();
  }
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  const int rows = (d + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);  // of d, per block
  if (rows > threads) __trap();  // a thread per row adds the slots' products into x
  const int r0 = static_cast<int>(blockIdx.x) * rows;
  const int my_rows = max(0, min(rows, d - r0));
  unsigned shared_bytes = 0;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(shared_bytes));
  // Shared memory: each slot's stage (rows x width of T), act in fp32 (top_k x width), the products (top_k x rows).
  const long long stage_elements = static_cast<long long>(rows) * width;
  T* const stages = reinterpret_cast<T*>(staged);
  float* const act_f = reinterpret_cast<float*>(stages + top_k * stage_elements);
  float* const part = act_f + static_cast<long long>(top_k) * width;
  if (reinterpret_cast<unsigned char*>(part + top_k * rows) - staged > static_cast<long long>(shared_bytes)) __trap();

  // The route, before the wait, from the logits the router's gemv wrote two kernels back: moe_gate_up_staged lets
  // this kernel launch only after its own wait, so that gemv is complete and its writes are in L2 (PTX promises
  // visibility through griddepcontrol.wait for the grid just before only; a grid's writes reach L2 when it
  // completes); route_row reads them past L1. The same route, so the same experts and weights, as every block of
  // moe_gate_up_staged takes. One row's top_k experts are distinct.
  route_in_block(logits, nullptr, nullptr, nullptr, experts, top_k, normalize, false, expert_of, slot_weight);
  const int row_chunks = my_rows * width / 8;
  for (int s = 0; s < top_k; ++s) {
    const T* from = w2 + (static_cast<long long>(expert_of[s]) * d + r0) * width;
    T* to = stages + s * stage_elements;
    for (int c = tid; c < row_chunks; c += threads) lg::copy16_async(to + 8LL * c, from + 8LL * c, true);
  }
  lg::commit_async();
  // x (written before the router's gemv, if at all) is complete too: a thread per row of d takes it now, past L1.
  const float x_before =
      tid < my_rows ? lg::to_float(T{__ldcg(reinterpret_cast<const unsigned short*>(x + r0 + tid))}) : 0.0f;
  lg::allow_dependent_launch();
  lg::wait_for_prior_grids();  // act from here on

  const int chunks = width / 8;
  for (int i = tid; i < top_k * chunks; i += threads) {
    float f[8];
    lg::unpack8(lg::load8(act + 8LL * i), f);
    *reinterpret_cast<float4*>(act_f + 8LL * i) = make_float4(f[0], f[1], f[2], f[3]);
    *reinterpret_cast<float4*>(act_f + 8LL * i + 4) = make_float4(f[4], f[5], f[6], f[7]);
  }
  lg::wait_async<0>();
  __syncthreads();

  const int lane = tid % 32;
  const int warp = tid / 32;
  const int warps = threads / 32;
  for (int rb = warp; rb < my_rows; rb += kStagedRows * warps) {
    for (int s0 = 0; s0 < top_k; s0 += kStagedSlots) {
      // The row loop's chain for one vector (gemv_core.cuh's gemv_rows): lane l's chunks l, l + 32, ... in order,
      // each an fma chain of its 8 products, then the warp's butterfly sum: the bits moe_down gives.
      float acc[kStagedSlots][kStagedRows];
#pragma unroll
      for (int g = 0; g < kStagedSlots; ++g) {
#pragma unroll
        for (int h = 0; h < kStagedRows; ++h) acc[g][h] = 0.0f;
      }
      for (int c = lane; c < chunks; c += 32) {
#pragma unroll
        for (int g = 0; g < kStagedSlots; ++g) {
          const int s = min(s0 + g, top_k - 1);
          const float* y = act_f + static_cast<long long>(s) * width + 8LL * c;
          const float4 y0 = *reinterpret_cast<const float4*>(y);
          const float4 y1 = *reinterpret_cast<const float4*>(y + 4);
#pragma unroll
          for (int h = 0; h < kStagedRows; ++h) {
            const int r = min(rb + h * warps, my_rows - 1);
            float wf[8];
            lg::unpack8(lg::load8(stages + s * stage_elements + static_cast<long long>(r) * width + 8LL * c), wf);
            float dot = wf[0] * y0.x;
            dot = fmaf(wf[1], y0.y, dot);
            dot = fmaf(wf[2], y0.z, dot);
            dot = fmaf(wf[3], y0.w, dot);
            dot = fmaf(wf[4], y1.x, dot);
            dot = fmaf(wf[5], y1.y, dot);
            dot = fmaf(wf[6], y1.z, dot);
            dot = fmaf(wf[7], y1.w, dot);
            acc[g][h] += dot;
          }
        }
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
#pragma unroll
        for (int g = 0; g < kStagedSlots; ++g) {
#pragma unroll
          for (int h = 0; h < kStagedRows; ++h) acc[g][h] += __shfl_xor_sync(0xffffffffu, acc[g][h], offset);
        }
      }
      if (lane == 0) {
#pragma unroll
        for (int g = 0; g < kStagedSlots; ++g) {
#pragma unroll
          for (int h = 0; h < kStagedRows; ++h) {
            if (s0 + g < top_k && rb + h * warps < my_rows) part[(s0 + g) * rows + rb + h * warps] = acc[g][h];
          }
        }
      }
    }
  }
  __syncthreads();  // every slot's products
  if (tid < my_rows) {
    float sum = 0.0f;
    for (int s = 0; s < top_k; ++s) sum = fmaf(slot_weight[s], part[s * rows + tid], sum);  // as add_expert_sums
    x[r0 + tid] = lg::from_float<T>(x_before + sum);
  }
#else
  __trap();
#endif
}

}  // namespace

// The entry points (src/kernel_variants.py writes them out): the expert kernels in gemv.cu's batch variants, at 3
// blocks a multiprocessor for one vector (gemv.cu's one-vector kernels: 2), launched uncapped (moe_config).
/* lazygraph:variants
axis T = lg::half_t | lg::bf16_t _bf16
axis B = 1 (256, 3) | 2 _b2 (256, 3) | 4 _b4 (256, 2) | 8 _b8 (256, 2) | kTensorCores _mma (256, 2)

moe_route[T] = moe_route_body<T>(const T* logits, int* ids, float* weights, int* plan, int experts, int top_k,
    int normalize, int batch)
moe_gate_up[T][B] = moe_gate_up_body<B>(const T* w1, const T* w3, const T* h, const int* plan, T* act, int experts,
    int width, int d, int top_k, int batch)
moe_gate_up_staged[T] __launch_bounds__(256, 3) = moe_gate_up_staged_body(const T* w1, const T* w3, const T* h,
    const T* logits, int* ids, float* weights, int* plan, T* act, int experts, int width, int d, int top_k,
    int normalize)
moe_down_staged[T] __launch_bounds__(256, 3) = moe_down_staged_body(const T* w2, const T* act, const T* logits, T* x,
    int experts, int width, int d, int top_k, int normalize)
moe_down[T][B] = moe_down_body<B>(const T* w2, const T* act, const int* plan, const float* weights, float* partial,
    unsigned* counters, T* x, int experts, int width, int d, int top_k, int batch)
*/
