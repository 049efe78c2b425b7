// Token embedding lookup for a batch: out[b][i] = table[tokens[b] * d + i] for b < batch, i < d; `embedding` for
// fp16 tables, `embedding_bf16` for bf16 (a copy: the values are not converted).
//
// The tokens are read from device memory, so a captured graph replays with whatever tokens were copied there
// (or written by argmax) last. They are not checked against the table's row count, which the kernel cannot know.
//
// Launch: 1-D over batch * d, any grid and block (grid-stride), e.g. grid_for(batch * d, 256).
#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"

namespace {

template <class T>
__device__ __forceinline__ void embedding_body(const T* table, const int* tokens, T* out, int d, int batch) {
  lg::early_launch_prologue();  // may be launched early (LaunchConfig::early_launch)
  const long long n = static_cast<long long>(batch) * d;
  for (long long e = lg::global_index(); e < n; e += lg::grid_stride()) {
    const long long b = e / d;
    out[e] = table[static_cast<long long>(tokens[b]) * d + (e - b * d)];
  }
}

}  // namespace

extern "C" __global__ void embedding(const lg::half_t* table, const int* tokens, lg::half_t* out, int d, int batch) {
  embedding_body(table, tokens, out, d, batch);
}

extern "C" __global__ void embedding_bf16(const lg::bf16_t* table, const int* tokens, lg::bf16_t* out, int d,
                                          int batch) {
  embedding_body(table, tokens, out, d, batch);
}
