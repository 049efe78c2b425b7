#pragma once
/// \file
/// The declared parameter types of the kernels in CUDA C++ sources, read on the host, so that a
/// `Kernel<void(Params...)>` is checked against what the kernel declares and not only against the sizes the
/// driver reports: `float*` and `const float*` have one size, yet a read-only view must never reach a
/// parameter the kernel writes.
///
/// A kernel is found when it is declared, at namespace scope, as
///
///     extern "C" __global__ void NAME(PARAMETERS)            // or inside an extern "C" { ... } block
///
/// where attributes such as `__launch_bounds__(...)` may stand around `__global__` and `void`, and the parameter list
/// may span lines and hold comments. A tile function (kernels/include/lazygraph/tile.cuh) is found the same way when
/// declared `extern "C" __device__ void NAME(lg::Tile tile, ...)`, its first parameter a `Tile` by value. Each
/// parameter type is spelled canonically:
///   - builtins by their standard names: `unsigned` is "unsigned int", `long long int` is "long long";
///   - `size_t`, `ptrdiff_t`, `intptr_t`, `uintptr_t` and the `[u]intN_t` typedefs (with or without `std::`) as
///     the builtin they stand for on LP64 Linux, host and device alike: `int64_t` is "long", `size_t` is
///     "unsigned long";
///   - `lg::half_t` (kernels/include/lazygraph/half.cuh), `half` and `__half` as "half_t", the device spelling of
///     the host's `lazygraph::half`; `lg::bf16_t`, `__nv_bfloat16` and `nv_bfloat16` as "bf16_t", the device
///     spelling of `lazygraph::bfloat16`; any other name without its namespace ("mylib::Params" is "Params");
///   - top-level `const`, `volatile`, `__restrict__` and `__grid_constant__` dropped (they do not change what
///     the caller passes); a pointer keeps its pointee's `const`: "const float*", "float*", "const float* const*".
///
/// What this reader cannot do: it expands no macros and follows no typedef beyond those listed, so a kernel
/// declared through a macro is not found, and a parameter spelled through another typedef is compared by that
/// spelling (name the host type with KernelParameterTypeName to match it). References, arrays, function
/// pointers and variadic parameters are reported as unreadable.

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lazygraph/detail/driver/type_name.hpp"
#include "lazygraph/kernels/kernel_parameter_type.hpp"
#include "lazygraph/kernels/nvrtc.hpp"

namespace lazygraph {

/// One kernel's declaration, as read from its source.
struct KernelDeclaration {
  /// The kernel's name, e.g. "axpy".
  std::string name;
  std::string file;                          ///< the source's name, e.g. "axpy.cu"
  int line = 0;                              ///< where the kernel's name stands, from 1
  std::vector<std::string> parameter_types;  ///< canonical spellings, in order
  std::string problem;  ///< empty, or why a parameter could not be read (its types are then incomplete)
  /// A tile function (`extern "C" __device__ void NAME(lg::Tile tile, ...)`, kernels/include/lazygraph/tile.cuh)
  /// rather than a kernel; parameter_types then leave out the leading lg::Tile.
  bool tile = false;
};

/// How kernels must be declared to be found, as error messages say it.
inline constexpr std::string_view kernel_declaration_rule =
    "declare each kernel as `extern \"C\" __global__ void NAME(TYPE name, ...)` (attributes such as "
    "__launch_bounds__(...) may stand around `void`), spelled out in the kernel file, not produced by a macro";

/// Every kernel declared in `text` (see the file comment), in source order. Comments, string literals and
/// preprocessor lines are skipped; a `#line N` directive numbers the lines after it, as for the compiler (the
/// kernels a variant table writes out, src/kernel_variants.py, so name their table line). A kernel declared twice
/// (a prototype, then the definition) appears twice.
std::vector<KernelDeclaration> parse_kernel_declarations(std::string_view text, std::string_view file);

/// The canonical spelling of one parameter declaration, with or without its name:
/// "const lg::half_t* __restrict__ x" is "const half_t*", "const unsigned n" is "unsigned int".
/// \throws UsageError when the declaration is not one this reader understands (a reference, an array...).
std::string canonical_parameter_type(std::string_view parameter);

/// Checks a host signature's canonical parameter types (detail::kernel_parameter_types) against a declaration.
/// \throws UsageError naming the kernel, its file, the first parameter that differs (index, declared type,
///         the signature's type) and how to fix it; or, when the declaration was unreadable, why.
void check_kernel_signature(const KernelDeclaration& declared, std::span<const std::string> signature_types,
                            std::string_view signature);

/// The kernel declarations of a set of sources, by kernel name.
///
/// Thread safety: immutable once constructed.
class KernelDeclarations {
 public:
  /// No declarations: every `find` returns nullptr.
  KernelDeclarations() = default;
  /// Reads every source (a name declared in several sources keeps its first declaration).
  explicit KernelDeclarations(std::span<const KernelSource> sources);

  /// The declaration of `kernel`, or nullptr when no source declares it in a form this reader finds.
  [[nodiscard]] const KernelDeclaration* find(std::string_view kernel) const;
  /// The declaration of `kernel`.
  /// \throws UsageError, when there is none, naming the kernel, `where` (e.g. the module that holds the compiled
  ///         kernel) and how kernels must be declared.
  [[nodiscard]] const KernelDeclaration& require(std::string_view kernel, std::string_view where) const;

  /// Checks `Signature` (such as `void(float, const float*, float*, int)`) against the declaration of `kernel`:
  /// the check KernelLibrary::get makes, without compiling anything or needing a GPU.
  /// \throws UsageError as `require` and `check_kernel_signature` do.
  template <class Signature>
  void check(std::string_view kernel) const {
    const std::vector<std::string> types = detail::kernel_parameter_types(static_cast<Signature*>(nullptr));
    check_kernel_signature(require(kernel, "these kernel sources"), types, detail::type_name<Signature>());
  }

  /// The number of kernels declared.
  [[nodiscard]] std::size_t size() const noexcept { return by_name_.size(); }
  /// Every declaration, by kernel name.
  [[nodiscard]] const std::map<std::string, KernelDeclaration, std::less<>>& all() const noexcept { return by_name_; }

 private:
  std::map<std::string, KernelDeclaration, std::less<>> by_name_;
};

}  // namespace lazygraph
