// Element-wise fp16 kernels of a decode step, computed in fp32 and rounded once.
//   silu_mul(a, b, out, n):  out = silu(a) * b, silu(a) = a / (1 + exp(-a))   (SwiGLU's gate)
//   add_inplace(x, y, n):    x += y                                            (the residual add)
// `out` may alias `a` or `b`.
//
// Launch: 1-D, any grid and block (grid-stride), e.g. grid_for(n, 256).
#include "lazygraph/half.cuh"
#include "lazygraph/kernel_common.cuh"

extern "C" __global__ void silu_mul(const lg::half_t* a, const lg::half_t* b, lg::half_t* out, int n) {
  lg::early_launch_prologue();  // may be launched early (LaunchConfig::early_launch)
  for (long long i = lg::global_index(); i < n; i += lg::grid_stride()) {
    const float av = lg::to_float(a[i]);
    out[i] = lg::to_half(av / (1.0f + expf(-av)) * lg::to_float(b[i]));
  }
}

extern "C" __global__ void add_inplace(lg::half_t* x, const lg::half_t* y, int n) {
  lg::early_launch_prologue();  // may be launched early (LaunchConfig::early_launch)
  for (long long i = lg::global_index(); i < n; i += lg::grid_stride()) {
    x[i] = lg::to_half(lg::to_float(x[i]) + lg::to_float(y[i]));
  }
}
