// gemv.cu's kernels over weight-only quantized matrices (int8 per channel, int4 in groups, fp8 e4m3 in groups of 128;
// quantized.hpp's layout),
// for 1 to 8 fp16 or bf16 vectors, on tensor cores (qgemv_core.cuh explains the dequantizing):
//   qgemv(W, x, out, rows, cols, batch)                          out = W x
//   qgemv_add(W, x, out, rows, cols, batch)                      out += W x
//   rms_norm_qgemv(W, x, g, out, rows, cols, eps, batch)         out = W (x / rms(x) * g)
//   rms_norm_qgemv_swiglu(W1, W3, x, g, out, rows, cols, eps, batch)   out = silu(W1 h) * (W3 h), h = x / rms(x) * g
//   rms_norm_qgemv_geglu(W1, W3, x, g, out, rows, cols, eps, batch)    out = gelu_tanh(W1 h) * (W3 h)
//   qdequantize(W, out, rows, cols)                              out = W, dequantized to the element type
//   quantized_qkv_rope_append(W, bias, x, g, q, k_cache, v_cache, positions, slots, d, q_rows, n_kv_heads, head_dim,
//                             max_ctx, n_slots, frequencies, eps, batch)
//       [q | k | v] = W (x / rms(x) * g) + bias, then RoPE on q and k, k and v appended to the caches: what
//       kernels/nn/qkv.cu's qkv_rope_append does with dense weights (same RoPE, cache layout, before-the-wait reads of
//       positions and slots, and traps), here with the three projections' rows stacked in one quantized matrix (q_rows
//       + 2 n_kv_heads head_dim rows of d columns) and their biases stacked the same way (or null). One rounding per
//       output: the rotation is applied to the fp32 sums.
// W is a QuantizedMatrix (by value) of rows x cols, x [batch][cols], out [batch][rows]; an int4z matrix may store its
// columns reordered (W.order: stored column j multiplies x[order[j]], which the kernels gather). Each kernel comes per
// element type (NAME, NAME_bf16: x, g, out and the scales in it) and format (NAME_int8, NAME_int4 symmetric, NAME_int4z
// with zero points, NAME_fp8: qgemv_int8, qgemv_bf16_int4z, ...); the host picks the format from W
// (nn::QuantizedKernel). One rounding per output, as gemv.cu's tensor-core variants: x * g is rounded to the element
// type before the mma (the weights are exact integers there); the scales multiply the fp32 sums.
//
// Requirements (a trap otherwise): the kernel's format and element type, cols a multiple of 64 (int4), 32 (int8) or
// 128 (fp8), the group 32, 64 or 128 (int4, dividing cols), cols (int8) or 128 (fp8), W1 and W3 of one group and
// symmetry, values, x and g 16-byte aligned, batch 1 to 8. Launch: blocks of (32, K, R), K warps per tile of 16 rows
// and R tiles at a time, K * R <= 32, any grid (qgemv_core.cuh); nn::BasicQuantizedKernels::config picks the fast
// shape. Early launch as gemv.cu's kernels, without their L2 prefetch (start_quantized says why).
#include "lazygraph/nn/qgemv_core.cuh"

namespace {

using namespace lg::nn;

template <int F, class T>
__device__ __forceinline__ QuantizedTiles<1, T> tiles_of(const QuantizedMatrix& W, int cols) {
  return {{W}, quantized_tile_bytes<F>(cols), quantized_groups<F>(W, cols)};
}

template <int F, class T>
__device__ __forceinline__ bool supported(const QuantizedMatrix& W, int cols, int batch, const T* x, const T* g) {
  return quantized_supported<F>(W, cols) && batch >= 1 && batch <= 8 && lg::is_aligned16(x) && lg::is_aligned16(g);
}

/// Element (row, b) of [batch][rows] `out`. Named apart from gemv.cu's `at`: a persistent program compiles both files'
/// tile functions in one source.
template <class T>
__device__ __forceinline__ T& out_at(T* out, int rows, int row, int b) {
  return out[static_cast<long long>(b) * rows + row];
}

template <int F, class T>
__device__ __forceinline__ void qgemv_body(QuantizedMatrix W, const T* x, T* out, int rows, int cols, int batch) {
  if (!supported<F>(W, cols, batch, x, x)) __trap();
  const QuantizedTiles<1, T> w = tiles_of<F, T>(W, cols);
  start_quantized();
  qgemv_tiles<F>(w, PlainX<T>{x, cols}, rows, cols, batch, 0.0f,
                 [&](int row, int b, const float* v) { out_at(out, rows, row, b) = lg::from_float<T>(v[0]); });
}

template <int F, class T, class P = lg::GridPlace>
__device__ __forceinline__ void qgemv_add_body(QuantizedMatrix W, const T* x, T* out, int rows, int cols, int batch,
                                               const P& place = {}) {
  if (!supported<F>(W, cols, batch, x, x)) __trap();
  const QuantizedTiles<1, T> w = tiles_of<F, T>(W, cols);
  // The residual this thread adds to first, read right after the wait (as gemv.cu's gemv_add).
  float residual = 0.0f;
  int residual_row = -1;
  int residual_vector = -1;
  place.allow_next();  // start_quantized in a kernel
  qgemv_tiles<F>(
      w, PlainX<T>{x, cols}, rows, cols, batch, 0.0f,
      [&](int row, int b, const float* v) {
        T& o = out_at(out, rows, row, b);
        const bool early = row == residual_row && b == residual_vector;
        o = lg::from_float<T>((early ? residual : lg::to_float(o)) + v[0]);
      },
      [&](int row, int b) {
        if (residual_row >= 0) return;
        residual = lg::to_float(out_at(out, rows, row, b));
        residual_row = row;
        residual_vector = b;
      },
      place);
}

template <int F, class T, class P = lg::GridPlace>
__device__ __forceinline__ void rms_norm_qgemv_body(QuantizedMatrix W, const T* x, const T* g, T* out, int rows,
                                                    int cols, float eps, int batch, const P& place = {}) {
  if (!supported<F>(W, cols, batch, x, g)) __trap();
  const QuantizedTiles<1, T> w = tiles_of<F, T>(W, cols);
  place.allow_next();
  // Its sums of x^2 shared out over the block: the LM head's kernel, whose blocks make several passes.
  qgemv_tiles<F, false, true>(
      w, GainedX<T>{x, g, cols}, rows, cols, batch, eps,
      [&](int row, int b, const float* v) { out_at(out, rows, row, b) = lg::from_float<T>(v[0]); }, NoPreload{}, place);
}

/// sin and cos of `angle`, out of line: sincosf's reduction of large angles needs a stack frame and registers that,
/// inlined, the weight loop's registers would give up (spills there, at 64 registers a thread).
__device__ __noinline__ float2 sin_cos(float angle) {
  float2 r;
  sincosf(angle, &r.x, &r.y);
  return r;
}

template <int F, class T, class P = lg::GridPlace>
__device__ __forceinline__ void quantized_qkv_rope_append_body(QuantizedMatrix W, const T* bias, const T* x, const T* g,
                                                               T* q, T* k_cache, T* v_cache, const int* positions,
                                                               const int* slots, int d, int q_rows, int n_kv_heads,
                                                               int head_dim, int max_ctx, int n_slots,
                                                               const float* frequencies, float eps, int batch,
                                                               const P& place = {}) {
  const int kv_dim = n_kv_heads * head_dim;
  if (!supported<F>(W, d, batch, x, g) || head_dim <= 0 || head_dim % 2 != 0 || q_rows <= 0 || q_rows % head_dim != 0 ||
      n_kv_heads <= 0) {
    __trap();
  }
  const int rows = q_rows + 2 * kv_dim;
  const QuantizedTiles<1, T> w = tiles_of<F, T>(W, d);
  // Each vector's position and slot, read before the wait, which a decode step allows (its input copy writes them
  // before its first kernel); kept in shared memory rather than in registers the weight loop needs. qgemv_tiles'
  // __syncthreads before a tile's finish publishes them.
  __shared__ int where[2][8];  // [position, slot][vector]
  const int tid = static_cast<int>((threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x);
  if (tid < batch) {
    where[0][tid] = positions[tid];
    where[1][tid] = slots[tid];
  }
  place.allow_next();
  const auto biased = [&](int row, float value) { return bias == nullptr ? value : value + lg::to_float(bias[row]); };
  qgemv_tiles<F, true>(
      w, GainedX<T>{x, g, d}, rows, d, batch, eps,
      [&](int row, int b, const float* r, const float* other_row) {
        const int position = where[0][b];
        const int slot = where[1][b];
        if (position < 0 || position >= max_ctx || slot < 0 || slot >= n_slots) __trap();
        float value = biased(row, r[0]);
        const int local = row < q_rows ? row : (row < q_rows + kv_dim ? row - q_rows : row - q_rows - kv_dim);
        if (row <
            q_rows + kv_dim) {  // q or k: RoPE turns the pair (2i, 2i + 1) of the head by position * frequencies[i]
          const int within = local % head_dim;
          const float2 turn = sin_cos(static_cast<float>(position) * frequencies[within / 2]);
          const float s = turn.x;
          const float c = turn.y;
          const float other = biased(row ^ 1, other_row[0]);
          value = within % 2 == 0 ? value * c - other * s : other * s + value * c;
        }
        if (row < q_rows) {
          out_at(q, q_rows, row, b) = lg::from_float<T>(value);
          return;
        }
        const long long cache =
            ((static_cast<long long>(slot) * n_kv_heads + local / head_dim) * max_ctx + position) * head_dim +
            local % head_dim;
        (row < q_rows + kv_dim ? k_cache : v_cache)[cache] = lg::from_float<T>(value);
      },
      NoPreload{}, place);
}

template <int F, bool Gelu, class T, class P = lg::GridPlace>
__device__ __forceinline__ void rms_norm_qgemv_swiglu_body(QuantizedMatrix W1, QuantizedMatrix W3, const T* x,
                                                           const T* g, T* out, int rows, int cols, float eps, int batch,
                                                           const P& place = {}) {
  if (!supported<F>(W1, cols, batch, x, g) || !quantized_supported<F>(W3, cols) || W1.group != W3.group) {
    __trap();
  }
  const QuantizedTiles<2, T> w{{W1, W3}, quantized_tile_bytes<F>(cols), quantized_groups<F>(W1, cols)};
  place.allow_next();
  qgemv_tiles<F>(
      w, GainedX<T>{x, g, cols}, rows, cols, batch, eps,
      [&](int row, int b, const float* v) { out_at(out, rows, row, b) = lg::from_float<T>(gate<Gelu>(v[0]) * v[1]); },
      NoPreload{}, place);
}

/// qdequantize of a matrix whose stored column j multiplies input order[j]: out in x's order, each thread 8
/// consecutive inputs of one row (one 16-byte store, consecutive threads along the row), each input's value read
/// where its stored column lies (the inverse order, W.order + cols, says which). The reads are single words of the
/// row's tile, which the row's threads share through L1.
template <int F, class T>
__device__ __forceinline__ void qdequantize_ordered(QuantizedMatrix W, T* out, int rows, int cols) {
  const QuantizedTiles<1, T> w = tiles_of<F, T>(W, cols);
  const int* const inverse = W.order + cols;
  const int group_shift = 31 - __clz(W.group);
  const long long chunks = static_cast<long long>(rows) * (cols / 8);
  lg::wait_for_prior_grids();  // as qdequantize_body
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < chunks;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int row = static_cast<int>(i / (cols / 8));
    const int first = static_cast<int>(i % (cols / 8)) * 8;
    const int tile = row / kTileRows;
    const int g = row % 8;  // the row's lanes, 4 g .. 4 g + 3; h picks row g (0) or g + 8 (1) of their pairs
    const int h = row % kTileRows / 8;
    const unsigned char* values = w.values(0, tile);
    float f[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const int j = __ldg(inverse + first + c);  // the input's stored column
      const int s = j / 64;
      const int within = j % 64;  // step s's columns 32 half + 8 t + e lie in word 2 half + e / 4 of lane 4 g + t
      const int half = within / 32;
      const int t = within % 32 / 8;
      const int e = within % 8;
      const unsigned word =
          __ldg(reinterpret_cast<const unsigned*>(values + 512 * s + 16 * (4 * g + t)) + 2 * half + e / 4);
      const int nibble = 4 * (e % 2) + 2 * (e % 4 / 2) + h;
      const int k = j >> group_shift;
      const float scale =
          h == 0 ? lg::unpack2(T{}, w.scale_pair(0, tile, k, g)).x : lg::unpack2(T{}, w.scale_pair(0, tile, k, g)).y;
      const int zero = static_cast<int>(w.zero_pair(0, tile, k, g) >> (8 * h) & 0xFFU);
      f[c] = static_cast<float>(static_cast<int>(word >> (4 * nibble) & 0xFU) - zero) * scale;
    }
    *reinterpret_cast<uint4*>(out + static_cast<long long>(row) * cols + first) = lg::pack8<T>(f).raw;
  }
  lg::allow_dependent_launch();
}

/// out = W dequantized, [rows][cols] of T: each element (q - zero) * scale, the product in fp32 rounded once. What
/// prompts on tensor cores multiply (a layer's matrices one at a time, into a scratch buffer). A thread takes one
/// lane's 16 bytes of a step (quantized.hpp's layout), grid-stride, and writes each of its two rows' 8 consecutive
/// columns per half step as one 16-byte store (a tile row's 4 lanes then write 64 contiguous bytes); padding rows are
/// skipped. A matrix stored with its columns reordered (W.order, int4 with zero points) is written in x's order by
/// qdequantize_ordered instead.
template <int F, class T>
__device__ __forceinline__ void qdequantize_body(QuantizedMatrix W, T* out, int rows, int cols) {
  if (!quantized_supported<F>(W, cols) || rows < 1 || !lg::is_aligned16(out)) __trap();
  if constexpr (F == kInt4Zero) {
    if (W.order != nullptr) {
      qdequantize_ordered<F, T>(W, out, rows, cols);
      return;
    }
  }
  const QuantizedTiles<1, T> w = tiles_of<F, T>(W, cols);
  const int group_shift = 31 - __clz(W.group);  // int4's groups: powers of two
  const int steps = cols / columns_per_step(F);
  const long long chunks = static_cast<long long>((rows + kTileRows - 1) / kTileRows) * steps * 32;
  lg::wait_for_prior_grids();  // out may be read by the kernel before (a product of the previous matrix)
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < chunks;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int lane = static_cast<int>(i % 32);
    const int s = static_cast<int>(i / 32 % steps);
    const int tile = static_cast<int>(i / (32LL * steps));
    const int g = lane / 4;
    const int t = lane % 4;
    const uint4 v = load16_streaming(w.values(0, tile) + (512 * s + 16 * lane));
    const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = tile * kTileRows + g + 8 * h;
      if (row >= rows) continue;
      T* const out_row = out + static_cast<long long>(row) * cols;
      if constexpr (is_int4(F)) {
        // Words 2 half and 2 half + 1 hold this row's columns 64 s + 32 half + 8 t .. + 7, in one group.
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int first = 64 * s + 32 * half + 8 * t;
          const int k = first >> group_shift;
          const unsigned pair = w.scale_pair(0, tile, k, g);
          const float scale = h == 0 ? lg::unpack2(T{}, pair).x : lg::unpack2(T{}, pair).y;
          // Symmetric: two's-complement nibbles, (u ^ 8) - 8; with zero points: u - zero.
          const int zero = F == kInt4Zero ? static_cast<int>(w.zero_pair(0, tile, k, g) >> (8 * h) & 0xFFU) : 8;
          const int flip = F == kInt4Zero ? 0 : 8;
          float f[8];
#pragma unroll
          for (int c = 0; c < 8; ++c) {
            const int nibble = 4 * (c % 2) + 2 * (c % 4 / 2) + h;
            const int u = static_cast<int>(words[2 * half + c / 4] >> (4 * nibble) & 0xFU) ^ flip;
            f[c] = static_cast<float>(u - zero) * scale;
          }
          *reinterpret_cast<uint4*>(out_row + first) = lg::pack8<T>(f).raw;
        }
      } else {
        // Words h and 2 + h hold this row's columns 32 s + 8 t .. + 7, a byte each; fp8's in group s / 4.
        const unsigned pair = w.scale_pair(0, tile, F == kFp8 ? s >> 2 : 0, g);
        const float scale = h == 0 ? lg::unpack2(T{}, pair).x : lg::unpack2(T{}, pair).y;
        float f[8];
#pragma unroll
        for (int c = 0; c < 8; c += 2) {
          const unsigned word = words[2 * (c / 4) + h];
          if constexpr (F == kFp8) {  // the e4m3 values times 2^-8, times the scale stored times 2^8
            const uint2 pairs = dequantize_fp8(lg::half_t{}, word);
            const float2 v = lg::unpack2(lg::half_t{}, c % 4 == 0 ? pairs.x : pairs.y);
            f[c] = v.x * scale;
            f[c + 1] = v.y * scale;
          } else {
            f[c] = static_cast<float>(static_cast<int>(word >> (8 * (c % 4)) & 0xFFU) - 128) * scale;
            f[c + 1] = static_cast<float>(static_cast<int>(word >> (8 * (c % 4 + 1)) & 0xFFU) - 128) * scale;
          }
        }
        *reinterpret_cast<uint4*>(out_row + 32 * s + 8 * t) = lg::pack8<T>(f).raw;
      }
    }
  }
  lg::allow_dependent_launch();
}

}  // namespace

// The entry points, one per element type and format (qgemv_int8, qgemv_int4, qgemv_bf16_int8, qgemv_fp8, ...), 32 warps
// a block at most, 64 registers a thread (one block of 32 warps or two of 16 per multiprocessor). The tile functions of
// a decode step's quantized projections for persistent programs (qgemv_add_tile_int8, ..._tile_bf16_fp8): the
// kernels' bodies, the program's block of warps sharing each tile of 16 rows, their partial sums in the call's shared
// memory (quantized_tile_shared_bytes).
/* lazygraph:variants
axis T = lg::half_t | lg::bf16_t _bf16
axis F = kInt8 _int8 | kInt4 _int4 | kInt4Zero _int4z | kFp8 _fp8

qgemv[T][F] __launch_bounds__(1024, 1) =
    qgemv_body<F>(QuantizedMatrix W, const T* x, T* out, int rows, int cols, int batch)
qgemv_add[T][F] __launch_bounds__(1024, 1) =
    qgemv_add_body<F>(QuantizedMatrix W, const T* x, T* out, int rows, int cols, int batch)
rms_norm_qgemv[T][F] __launch_bounds__(1024, 1) =
    rms_norm_qgemv_body<F>(QuantizedMatrix W, const T* x, const T* g, T* out, int rows, int cols, float eps, int batch)
qdequantize[T][F] __launch_bounds__(256) = qdequantize_body<F>(QuantizedMatrix W, T* out, int rows, int cols)
quantized_qkv_rope_append[T][F] __launch_bounds__(1024, 1) = quantized_qkv_rope_append_body<F>(QuantizedMatrix W,
    const T* bias, const T* x, const T* g, T* q, T* k_cache, T* v_cache, const int* positions, const int* slots, int d,
    int q_rows, int n_kv_heads, int head_dim, int max_ctx, int n_slots, const float* frequencies, float eps, int batch)
rms_norm_qgemv_swiglu[T][F] __launch_bounds__(1024, 1) = rms_norm_qgemv_swiglu_body<F, false>(QuantizedMatrix W1,
    QuantizedMatrix W3, const T* x, const T* g, T* out, int rows, int cols, float eps, int batch)
rms_norm_qgemv_geglu[T][F] __launch_bounds__(1024, 1) = rms_norm_qgemv_swiglu_body<F, true>(QuantizedMatrix W1,
    QuantizedMatrix W3, const T* x, const T* g, T* out, int rows, int cols, float eps, int batch)

tile qgemv_add_tile[T][F] = qgemv_add_body<F>(QuantizedMatrix W, const T* x, T* out, int rows, int cols, int batch)
tile rms_norm_qgemv_tile[T][F] = rms_norm_qgemv_body<F>(QuantizedMatrix W, const T* x, const T* g, T* out, int rows,
    int cols, float eps, int batch)
tile rms_norm_qgemv_swiglu_tile[T][F] = rms_norm_qgemv_swiglu_body<F, false>(QuantizedMatrix W1, QuantizedMatrix W3,
    const T* x, const T* g, T* out, int rows, int cols, float eps, int batch)
tile quantized_qkv_rope_append_tile[T][F] = quantized_qkv_rope_append_body<F>(QuantizedMatrix W, const T* bias,
    const T* x, const T* g, T* q, T* k_cache, T* v_cache, const int* positions, const int* slots, int d, int q_rows,
    int n_kv_heads, int head_dim, int max_ctx, int n_slots, const float* frequencies, float eps, int batch)
*/
