#pragma once
/// \file
/// Layer 6, nn: the element types the nn kernels store weights and activations in, fp16 (`half`) and bf16
/// (`bfloat16`). Every block, model and kernel handle of this layer is a template over one of them (`BasicDecoder<T>`
/// and so on), with the fp16 one under the plain name (`Decoder`). Arithmetic is fp32 either way; the element type
/// decides the storage, the rounding after each kernel, and the range: bf16 holds float's range with 8 significant
/// bits, fp16 11 bits up to 65504.

#include <lazygraph/lazygraph.hpp>

#include <concepts>
#include <string_view>

namespace lazygraph::nn {

/// `half` or `bfloat16`: the element types the nn kernels come in.
template <class T>
concept Element = std::same_as<T, half> || std::same_as<T, bfloat16>;

/// What the names of T's kernels end in: "" for half (`gemv`), "_bf16" for bfloat16 (`gemv_bf16`).
template <Element T>
inline constexpr std::string_view kernel_suffix = std::same_as<T, half> ? "" : "_bf16";

/// T's name in messages: "fp16" or "bf16".
template <Element T>
inline constexpr std::string_view element_name = std::same_as<T, half> ? "fp16" : "bf16";

}  // namespace lazygraph::nn
