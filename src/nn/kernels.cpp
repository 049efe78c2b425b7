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

/// `tensor_cores`: for a BatchedKernel with a tensor-core variant (kernels/nn/gemv.cu, moe.cu), use it.
template <class Handle>
Handle lookup(const KernelLibrary& library, std::string_view name, bool tensor_cores = false) {
  if constexpr (std::is_same_v<Handle, Kernel<typename SignatureOf<Handle>::type>>) {
    return library.get<typename SignatureOf<Handle>::type>(name);
  } else {
    if (tensor_cores) check_tensor_cores(library.device().compute_capability());
    return Handle(library, std::string(name), tensor_cores);
  }
}

/// The kernel `base` for elements of T: "gemv" or "gemv_bf16".
template <Element T>
std::string named(std::string_view base) {
  return std::string(base) + std::string(kernel_suffix<T>);
}

}  // namespace

void check_tensor_cores(ComputeCapability cc) {
  if (cc.major < 8) {
    throw UsageError(
        "KernelOptions::tensor_cores needs a GPU of compute capability 8.0 or newer (mma.sync "
        "m16n8k16 on fp16 and bf16); this one is " +
        std::to_string(cc.major) + "." + std::to_string(cc.minor));
  }
}

KernelLibrary kernel_library(const Device& device) {
  KernelLibraryOptions options;
  options.kernel_sets = {kernel_set()};
  return KernelLibrary(device, std::move(options));
}

template <Element T>
BasicKernels<T>::BasicKernels(const KernelLibrary& library, KernelOptions options)
    : embedding(lookup<decltype(embedding)>(library, named<T>("embedding"))),
      embedding_rows(lookup<decltype(embedding_rows)>(library, named<T>("embedding_rows"))),
      peer_all_reduce(lookup<decltype(peer_all_reduce)>(library, named<T>("peer_all_reduce"))),
      gemv_all_reduce(lookup<decltype(gemv_all_reduce)>(library, named<T>("gemv_all_reduce"), options.tensor_cores)),
      gemv(lookup<decltype(gemv)>(library, named<T>("gemv"), options.tensor_cores)),
      gemv_add(lookup<decltype(gemv_add)>(library, named<T>("gemv_add"), options.tensor_cores)),
      rms_norm_gemv(lookup<decltype(rms_norm_gemv)>(library, named<T>("rms_norm_gemv"), options.tensor_cores)),
      rms_norm_gemv_swiglu(
          lookup<decltype(rms_norm_gemv_swiglu)>(library, named<T>("rms_norm_gemv_swiglu"), options.tensor_cores)),
      rms_norm_gemv_geglu(
          lookup<decltype(rms_norm_gemv_geglu)>(library, named<T>("rms_norm_gemv_geglu"), options.tensor_cores)),
      mlp_stack(lookup<decltype(mlp_stack)>(library, named<T>("mlp_stack"))),
      qkv_rope_append(lookup<decltype(qkv_rope_append)>(library, named<T>("qkv_rope_append"), options.tensor_cores)),
      qkv_rope_append_paged(
          lookup<decltype(qkv_rope_append_paged)>(library, named<T>("qkv_rope_append_paged"), options.tensor_cores)),
      qk_norm_rope_append(lookup<decltype(qk_norm_rope_append)>(library, named<T>("qk_norm_rope_append"))),
      prefill_qk_norm_rope(lookup<decltype(prefill_qk_norm_rope)>(library, named<T>("prefill_qk_norm_rope"))),
      rms_norm(lookup<decltype(rms_norm)>(library, named<T>("rms_norm"))),
      rms_norm_store_gemv(lookup<decltype(rms_norm_store_gemv)>(library, named<T>("rms_norm_store_gemv"))),
      rms_norm_add(lookup<decltype(rms_norm_add)>(library, named<T>("rms_norm_add"))),
      moe_route(lookup<decltype(moe_route)>(library, named<T>("moe_route"))),
      moe_gate_up(lookup<decltype(moe_gate_up)>(library, named<T>("moe_gate_up"), options.tensor_cores)),
      moe_down(lookup<decltype(moe_down)>(library, named<T>("moe_down"), options.tensor_cores)),
      moe_gate_up_staged(lookup<decltype(moe_gate_up_staged)>(library, named<T>("moe_gate_up_staged"))),
      moe_down_staged(lookup<decltype(moe_down_staged)>(library, named<T>("moe_down_staged"))),
      scale(lookup<decltype(scale)>(library, named<T>("scale"))),
      softcap(lookup<decltype(softcap)>(library, named<T>("softcap"))),
      rope(lookup<decltype(rope)>(library, named<T>("rope"))),
      kv_append(lookup<decltype(kv_append)>(library, named<T>("kv_append"))),
      attention(lookup<decltype(attention)>(library, named<T>("attention"))),
      attention_split(lookup<decltype(attention_split)>(library, named<T>("attention_split"))),
      flash_attention_d64(lookup<decltype(flash_attention_d64)>(library, named<T>("flash_attention_d64"))),
      flash_attention_d128(lookup<decltype(flash_attention_d128)>(library, named<T>("flash_attention_d128"))),
      flash_attention_rows64_d64(
          lookup<decltype(flash_attention_rows64_d64)>(library, named<T>("flash_attention_rows64_d64"))),
      flash_attention_paged_d64(
          lookup<decltype(flash_attention_paged_d64)>(library, named<T>("flash_attention_paged_d64"))),
      flash_attention_paged_d128(
          lookup<decltype(flash_attention_paged_d128)>(library, named<T>("flash_attention_paged_d128"))),
      flash_attention_paged_rows64_d64(
          lookup<decltype(flash_attention_paged_rows64_d64)>(library, named<T>("flash_attention_paged_rows64_d64"))),
      flash_attention_paged_varlen_d64(
          lookup<decltype(flash_attention_paged_varlen_d64)>(library, named<T>("flash_attention_paged_varlen_d64"))),
      flash_attention_paged_varlen_d128(
          lookup<decltype(flash_attention_paged_varlen_d128)>(library, named<T>("flash_attention_paged_varlen_d128"))),
      prefill_rms_norm(lookup<decltype(prefill_rms_norm)>(library, named<T>("prefill_rms_norm"))),
      prefill_qkv_rope(lookup<decltype(prefill_qkv_rope)>(library, named<T>("prefill_qkv_rope"))),
      prefill_silu_mul(lookup<decltype(prefill_silu_mul)>(library, named<T>("prefill_silu_mul"))),
      prefill_gelu_mul(lookup<decltype(prefill_gelu_mul)>(library, named<T>("prefill_gelu_mul"))),
      prefill_rms_norm_add(lookup<decltype(prefill_rms_norm_add)>(library, named<T>("prefill_rms_norm_add"))),
      prefill_last_row(lookup<decltype(prefill_last_row)>(library, named<T>("prefill_last_row"))),
      moe_prefill_route(lookup<decltype(moe_prefill_route)>(library, named<T>("moe_prefill_route"))),
      moe_prefill_group(lookup<decltype(moe_prefill_group)>(library, "moe_prefill_group")),
      moe_prefill_gate_up(lookup<decltype(moe_prefill_gate_up)>(library, named<T>("moe_prefill_gate_up"))),
      moe_prefill_down(lookup<decltype(moe_prefill_down)>(library, named<T>("moe_prefill_down"))),
      moe_decode_gate_up(lookup<decltype(moe_decode_gate_up)>(library, named<T>("moe_decode_gate_up"))),
      moe_decode_down(lookup<decltype(moe_decode_down)>(library, named<T>("moe_decode_down"))),
      moe_prefill_combine(lookup<decltype(moe_prefill_combine)>(library, named<T>("moe_prefill_combine"))),
      argmax(lookup<decltype(argmax)>(library, named<T>("argmax"))),
      argmax_cluster(lookup<decltype(argmax_cluster)>(library, named<T>("argmax_cluster"))),
      sample(lookup<decltype(sample)>(library, named<T>("sample"))),
      fill_uniform(
          lookup<decltype(fill_uniform)>(library, std::same_as<T, half> ? "fill_uniform_f16" : "fill_uniform_bf16")),
      early_launch(options.early_launch),
      tensor_cores(options.tensor_cores),
      multiprocessors(library.device().sm_count()),
      shared_memory_optin(library.device().limits().max_shared_per_block_optin),
      async_copies(library.device().compute_capability().major >= 8),
      clusters(library.device().compute_capability().major >= 9) {
  // moe_down_staged's blocks, launched early, become resident beside moe_gate_up_staged's where that kernel leaves its
  // multiprocessors' memory split for shared memory (H200, 12 layers of Qwen3-30B-A3B, one row: 880 us a step with
  // the split, 897-901 without, 924-928 with moe_down). moe_gate_up keeps the driver's split: OLMoE-1B-7B's step
  // (moe_down) took 1094 against 1081-1084 us with it there.
  moe_gate_up_staged.prefer_shared_carveout(100);
  moe_down_staged.prefer_shared_carveout(100);
  try {
    loop = LoopKernels{library.get<void(Condition, const int*, int*, int*, int*, int*)>("generate_advance"),
                       library.get<void(Condition, unsigned*, unsigned)>("while_guard")};
  } catch (const UsageError& e) {
    loop_unavailable = e.what();
  }
}

template struct BasicKernels<half>;
template struct BasicKernels<bfloat16>;

}  // namespace lazygraph::nn
