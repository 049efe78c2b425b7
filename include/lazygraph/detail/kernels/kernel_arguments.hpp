#pragma once
/// \file
/// The compile-time rules that match launch arguments to a kernel's declared parameters:
///   - a `T*` parameter takes a writable `DeviceSpan<T>`; a read-only `DeviceSpan<const T>` does not compile;
///   - a `const T*` parameter takes `DeviceSpan<T>` or `DeviceSpan<const T>`;
///   - a scalar parameter takes exactly its own type (no narrowing or widening behind the user's back).
/// To pass your own type, specialise `KernelArgumentTraits<Param, Arg>` with `static Param convert(const Arg&)`.

#include <cstddef>
#include <type_traits>

#include "lazygraph/detail/driver/device_span.hpp"

namespace lazygraph {

/// Customisation point: specialise with `static Param convert(const Arg&)` to accept `Arg` for `Param`.
template <class Param, class Arg>
struct KernelArgumentTraits;

namespace detail {

template <class T>
inline constexpr bool is_device_span_v = false;
template <class T>
inline constexpr bool is_device_span_v<DeviceSpan<T>> = true;

template <class Param, class Arg>
concept HasCustomArgumentTraits = requires(const Arg& a) {
  { KernelArgumentTraits<Param, Arg>::convert(a) } -> std::convertible_to<Param>;
};

template <class Param, class Arg>
constexpr Param convert_argument(const Arg& arg) {
  if constexpr (HasCustomArgumentTraits<Param, Arg>) {
    return KernelArgumentTraits<Param, Arg>::convert(arg);
  } else if constexpr (std::is_pointer_v<Param>) {
    using Pointee = std::remove_pointer_t<Param>;
    constexpr bool argument_is_device_span = is_device_span_v<Arg>;
    static_assert(argument_is_device_span,
                  "Kernel argument: a pointer parameter takes a DeviceSpan; pass buffer.view() where the kernel "
                  "writes and buffer.cview() where it only reads");
    if constexpr (argument_is_device_span) {
      using Element = typename Arg::element_type;
      constexpr bool read_only_span_for_writable_parameter = std::is_const_v<Element> && !std::is_const_v<Pointee>;
      static_assert(!read_only_span_for_writable_parameter,
                    "Kernel argument: a read-only DeviceSpan<const T> was passed for a writable T* parameter; the "
                    "kernel writes there, so pass a writable view (buffer.view())");
      constexpr bool span_element_matches_parameter =
          std::is_same_v<std::remove_const_t<Element>, std::remove_const_t<Pointee>>;
      static_assert(span_element_matches_parameter,
                    "Kernel argument: the DeviceSpan's element type differs from the pointer parameter's; device "
                    "pointers are never converted between element types");
      if constexpr (!read_only_span_for_writable_parameter && span_element_matches_parameter) {
        return arg.data();
      } else {
        return Param{};
      }
    } else {
      return Param{};
    }
  } else {
    constexpr bool scalar_argument_has_parameter_type = std::is_same_v<Arg, Param>;
    constexpr bool float_parameter = std::is_floating_point_v<Param>;
    static_assert(scalar_argument_has_parameter_type || !float_parameter,
                  "Kernel argument: a scalar argument must have exactly the parameter's type; nothing is converted "
                  "implicitly — for a float parameter write 2.0f (not 2.0 or 2), or static_cast<float>(x)");
    static_assert(scalar_argument_has_parameter_type || float_parameter,
                  "Kernel argument: a scalar argument must have exactly the parameter's type; nothing is converted "
                  "implicitly — for an integer parameter pass that integer type, e.g. static_cast<int>(n) for an "
                  "int parameter given a std::size_t");
    if constexpr (scalar_argument_has_parameter_type) {
      return arg;
    } else {
      return Param{};
    }
  }
}

}  // namespace detail
}  // namespace lazygraph
