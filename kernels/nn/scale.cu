// Elementwise rescalings a model's architecture may ask for (fp16 `NAME`, bf16 `NAME_bf16`; arithmetic in fp32):
//
//   scale(x, n, factor)     x[i] = x[i] * factor, in place: the embedding's scale (Gemma 3 multiplies the embedded
//                           rows by sqrt(hidden_size) rounded to the element type, the host passes that value)
//   softcap(x, n, cap)      x[i] = tanh(x[i] / cap) * cap, in place: final logit soft-capping
//
// each rounding once to T. Launch: 1-D, any grid and block (grid-stride), e.g. grid_for(n, 256). May be launched
// early: it waits for the kernel before it first.
#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"

namespace {

template <class T>
__device__ __forceinline__ void scale_body(T* x, long long n, float factor) {
  lg::early_launch_prologue();
  for (long long i = lg::global_index(); i < n; i += lg::grid_stride()) {
    x[i] = lg::from_float<T>(lg::to_float(x[i]) * factor);
  }
}

template <class T>
__device__ __forceinline__ void softcap_body(T* x, long long n, float cap) {
  lg::early_launch_prologue();
  for (long long i = lg::global_index(); i < n; i += lg::grid_stride()) {
    x[i] = lg::from_float<T>(tanhf(lg::to_float(x[i]) / cap) * cap);
  }
}

}  // namespace

/* lazygraph:variants
axis T = lg::half_t | lg::bf16_t _bf16

scale[T] = scale_body<T>(T* x, long long n, float factor)
softcap[T] = softcap_body<T>(T* x, long long n, float cap)
*/
