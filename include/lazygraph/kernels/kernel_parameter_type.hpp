#pragma once
/// \file
/// The canonical spelling of a host-side kernel parameter type, compared with the spelling read from the
/// kernel's source (kernel_declaration.hpp): builtins by their standard names ("unsigned int", "long long"),
/// `lazygraph::half` as the device's "half_t", `lazygraph::bfloat16` as "bf16_t", pointers with their pointee's const
/// ("const float*"), and any other class or enum type by its name without namespaces, unless KernelParameterTypeName
/// says otherwise.

#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "lazygraph/detail/driver/type_name.hpp"
#include "lazygraph/driver/bfloat16.hpp"
#include "lazygraph/driver/half.hpp"

namespace lazygraph {

namespace detail {

/// `type_name<T>()` without namespace qualifiers ahead of any template argument list: "ns::Params" -> "Params".
template <class T>
constexpr std::string_view unqualified_type_name() noexcept {
  std::string_view name = type_name<T>();
  const std::string_view head = name.substr(0, name.find('<'));
  if (const auto colons = head.rfind("::"); colons != std::string_view::npos) name.remove_prefix(colons + 2);
  return name;
}

}  // namespace detail

/// Customisation point: how kernel sources spell the class or enum type `T` passed by value to a kernel.
/// The default is T's name without its namespaces, so `mylib::Params` on the host matches a kernel parameter
/// declared `Params` or `dev::Params`. Specialise it when the device spells the type differently:
///
///     template <> struct lazygraph::KernelParameterTypeName<mylib::HostParams> {
///       static constexpr std::string_view value = "DeviceParams";
///     };
///
/// The value is compared with the kernel source's spelling after that, too, drops its namespaces. Builtins
/// and pointers never consult this trait (a pointer consults it for its pointee).
template <class T>
struct KernelParameterTypeName {
  /// The device's spelling of T.
  static constexpr std::string_view value = detail::unqualified_type_name<T>();
};

/// The host's `half` is the device's `lg::half_t` (kernels/include/lazygraph/half.cuh).
template <>
struct KernelParameterTypeName<half> {
  /// "half_t".
  static constexpr std::string_view value = "half_t";
};

/// The host's `bfloat16` is the device's `lg::bf16_t` (kernels/include/lazygraph/bfloat16.cuh).
template <>
struct KernelParameterTypeName<bfloat16> {
  /// "bf16_t".
  static constexpr std::string_view value = "bf16_t";
};

namespace detail {

/// The canonical spelling of the parameter type `T` (see the file comment).
template <class T>
std::string kernel_parameter_type() {
  using U = std::remove_cv_t<T>;  // top-level const and volatile do not change what the caller passes
  if constexpr (std::is_pointer_v<U>) {
    using Pointee = std::remove_pointer_t<U>;
    if constexpr (std::is_pointer_v<Pointee>) {
      return kernel_parameter_type<std::remove_cv_t<Pointee>>() + (std::is_const_v<Pointee> ? " const*" : "*");
    } else {
      return (std::is_const_v<Pointee> ? "const " : "") + kernel_parameter_type<std::remove_cv_t<Pointee>>() + "*";
    }
  } else if constexpr (std::is_same_v<U, void>) {
    return "void";
  } else if constexpr (std::is_same_v<U, bool>) {
    return "bool";
  } else if constexpr (std::is_same_v<U, char>) {
    return "char";
  } else if constexpr (std::is_same_v<U, signed char>) {
    return "signed char";
  } else if constexpr (std::is_same_v<U, unsigned char>) {
    return "unsigned char";
  } else if constexpr (std::is_same_v<U, short>) {
    return "short";
  } else if constexpr (std::is_same_v<U, unsigned short>) {
    return "unsigned short";
  } else if constexpr (std::is_same_v<U, int>) {
    return "int";
  } else if constexpr (std::is_same_v<U, unsigned int>) {
    return "unsigned int";
  } else if constexpr (std::is_same_v<U, long>) {
    return "long";
  } else if constexpr (std::is_same_v<U, unsigned long>) {
    return "unsigned long";
  } else if constexpr (std::is_same_v<U, long long>) {
    return "long long";
  } else if constexpr (std::is_same_v<U, unsigned long long>) {
    return "unsigned long long";
  } else if constexpr (std::is_same_v<U, float>) {
    return "float";
  } else if constexpr (std::is_same_v<U, double>) {
    return "double";
  } else if constexpr (std::is_same_v<U, long double>) {
    return "long double";
  } else if constexpr (std::is_class_v<U> || std::is_enum_v<U> || std::is_union_v<U>) {
    std::string_view name = KernelParameterTypeName<U>::value;
    const std::string_view head = name.substr(0, name.find('<'));
    if (const auto colons = head.rfind("::"); colons != std::string_view::npos) name.remove_prefix(colons + 2);
    return std::string(name);
  } else {
    return std::string(type_name<U>());  // other builtins (char8_t, ...): as the compiler spells them
  }
}

/// The canonical spellings of a signature's parameter types, in order.
template <class... P>
std::vector<std::string> kernel_parameter_types(void (*)(P...)) {
  return {kernel_parameter_type<P>()...};
}

}  // namespace detail

}  // namespace lazygraph
