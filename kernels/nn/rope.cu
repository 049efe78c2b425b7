// Rotary position embedding, in place on q [batch][n_heads][head_dim] and k [batch][n_kv_heads][head_dim] (`rope`
// for fp16, `rope_bf16` for bf16), vector b at position positions[b]. Within each head the pairs (2i, 2i+1), i <
// head_dim / 2, are rotated by angle = position * frequencies[i] (the table nn::rope_frequencies computes: theta^(-2i /
// head_dim) for the plain rule, scaled for linear and llama3):
//   x0' = x0 cos - x1 sin,  x1' = x0 sin + x1 cos
// (the interleaved convention of GPT-J and Meta's Llama code; Hugging Face's Llama pairs i with i + head_dim/2
// instead: lazygraph::nn's checkpoint loader reorders the rows of its Wq and Wk so that this kernel applies).
// With grouped-query attention k has fewer heads than q. The positions are read from device memory, so a graph
// replays at new positions.
//
// Launch: 1-D over the batch * (n_heads + n_kv_heads) * head_dim / 2 pairs of q and k, any grid and block
// (grid-stride), e.g. grid_for(batch * n_heads * head_dim, 256). head_dim must be even.
#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"

namespace {

template <class T>
__device__ __forceinline__ void rope_body(T* q, T* k, const int* positions, int n_heads, int n_kv_heads, int head_dim,
                                          const float* frequencies, int batch) {
  lg::early_launch_prologue();  // may be launched early (LaunchConfig::early_launch)
  const int half_dim = head_dim / 2;
  const long long q_pairs = static_cast<long long>(n_heads) * half_dim;
  const long long k_pairs = static_cast<long long>(n_kv_heads) * half_dim;
  const long long row_pairs = q_pairs + k_pairs;
  for (long long e = lg::global_index(); e < batch * row_pairs; e += lg::grid_stride()) {
    const long long b = e / row_pairs;
    const long long p = e - b * row_pairs;
    const float pos = static_cast<float>(positions[b]);
    T* t = p < q_pairs ? q + b * 2 * q_pairs : k + b * 2 * k_pairs;
    const long long pair = p < q_pairs ? p : p - q_pairs;
    const int i = static_cast<int>(pair % half_dim);
    // Both factors in fp32; sincosf reduces the (up to thousands of radians) angle exactly.
    const float angle = pos * frequencies[i];
    float s;
    float c;
    sincosf(angle, &s, &c);
    const float x0 = lg::to_float(t[2 * pair]);
    const float x1 = lg::to_float(t[2 * pair + 1]);
    t[2 * pair] = lg::from_float<T>(x0 * c - x1 * s);
    t[2 * pair + 1] = lg::from_float<T>(x0 * s + x1 * c);
  }
}

}  // namespace

extern "C" __global__ void rope(lg::half_t* q, lg::half_t* k, const int* positions, int n_heads, int n_kv_heads,
                                int head_dim, const float* frequencies, int batch) {
  rope_body(q, k, positions, n_heads, n_kv_heads, head_dim, frequencies, batch);
}

extern "C" __global__ void rope_bf16(lg::bf16_t* q, lg::bf16_t* k, const int* positions, int n_heads, int n_kv_heads,
                                     int head_dim, const float* frequencies, int batch) {
  rope_body(q, k, positions, n_heads, n_kv_heads, head_dim, frequencies, batch);
}
