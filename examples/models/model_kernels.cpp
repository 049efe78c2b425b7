#include "model_kernels.hpp"

namespace models {

ModelKernels::ModelKernels(const lg::KernelLibrary& library, bool early)
    : embedding(library.get<void(const half*, const int*, half*, int)>("embedding")),
      gemv_add(library.get<void(const half*, const half*, half*, int, int)>("gemv_add")),
      rms_norm_gemv(library.get<void(const half*, const half*, const half*, half*, int, int, float)>("rms_norm_gemv")),
      rms_norm_gemv_swiglu(
          library.get<void(const half*, const half*, const half*, const half*, half*, int, int, float)>(
              "rms_norm_gemv_swiglu")),
      rope(library.get<void(half*, half*, const int*, int, int, float)>("rope")),
      kv_append(library.get<void(const half*, const half*, half*, half*, const int*, int, int, int)>("kv_append")),
      attention(library.get<void(const half*, const half*, const half*, half*, const int*, int, int, int, float)>(
          "attention")),
      argmax(library.get<void(const half*, int*, int)>("argmax")),
      fill_uniform(library.get<void(half*, long long, unsigned, float, float)>("fill_uniform_f16")),
      early_launch(early) {}

}  // namespace models
