// An application's own kernel (see scale_add.cu): clamps each of n floats into [lo, hi], in place.
#include "lazygraph/kernel_common.cuh"

extern "C" __global__ void clip(float* x, float lo, float hi, int n) {
  for (long long i = lg::global_index(); i < n; i += lg::grid_stride()) x[i] = fminf(fmaxf(x[i], lo), hi);
}
