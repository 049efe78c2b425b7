#include "lazygraph/nn/kernels.hpp"

namespace lazygraph::nn {

namespace {

template <class Handle>
struct SignatureOf;
template <class Signature>
struct SignatureOf<Kernel<Signature>> {
  using type = Signature;
};

/// The kernel `name`, typed as the member it initialises (so each signature is written once, in the header).
template <class Signature>
struct SignatureOf<BatchedKernel<Signature>> {
  using type = Signature;
};

template <class Handle>
Handle lookup(const KernelLibrary& library, std::string_view name) {
  if constexpr (std::is_same_v<Handle, Kernel<typename SignatureOf<Handle>::type>>) {
    return library.get<typename SignatureOf<Handle>::type>(name);
  } else {
    return Handle(library, std::string(name));
  }
}

}  // namespace

KernelLibrary kernel_library(const Device& device) {
  KernelLibraryOptions options;
  options.kernel_sets = {core_kernels(), kernel_set()};
  return KernelLibrary(device, std::move(options));
}

Kernels::Kernels(const KernelLibrary& library, bool early)
    : embedding(lookup<decltype(embedding)>(library, "embedding")),
      gemv(lookup<decltype(gemv)>(library, "gemv")),
      gemv_add(lookup<decltype(gemv_add)>(library, "gemv_add")),
      rms_norm_gemv(lookup<decltype(rms_norm_gemv)>(library, "rms_norm_gemv")),
      rms_norm_gemv_swiglu(lookup<decltype(rms_norm_gemv_swiglu)>(library, "rms_norm_gemv_swiglu")),
      rms_norm(lookup<decltype(rms_norm)>(library, "rms_norm")),
      rope(lookup<decltype(rope)>(library, "rope")),
      kv_append(lookup<decltype(kv_append)>(library, "kv_append")),
      attention(lookup<decltype(attention)>(library, "attention")),
      argmax(lookup<decltype(argmax)>(library, "argmax")),
      sample(lookup<decltype(sample)>(library, "sample")),
      fill_uniform(lookup<decltype(fill_uniform)>(library, "fill_uniform_f16")),
      early_launch(early) {}

}  // namespace lazygraph::nn
