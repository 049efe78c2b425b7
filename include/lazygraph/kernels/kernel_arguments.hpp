#pragma once
/// \file
/// The compile-time rules that match launch arguments to a kernel's declared parameters:
///   - a `T*` parameter takes a writable `DeviceSpan<T>`; a read-only `DeviceSpan<const T>` does not compile;
///   - a `const T*` parameter takes `DeviceSpan<T>` or `DeviceSpan<const T>`;
///   - a scalar parameter takes exactly its own type (no narrowing or widening behind the user's back).
/// To pass your own type, specialise `KernelArgumentTraits<Param, Arg>` with `static Param convert(const Arg&)`.
/// A broken rule is a compile error naming the argument (counted from 1) and both types, in the instantiation of
/// `KernelArgument<N>::ForParameterType<P>::GivenType<A>` that the compiler prints with the error.

#include <cstddef>
#include <type_traits>

#include "lazygraph/driver/device_span.hpp"

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

/// The element type of a DeviceSpan (`const T` for a read-only one); void for any other type.
template <class T>
struct SpanElement {
  using type = void;
};
template <class T>
struct SpanElement<DeviceSpan<T>> {
  using type = T;
};

/// The rules above, checked for kernel argument `Number` (counted from 1) of type `Argument`, given for a parameter
/// of type `Parameter`. A static_assert message must be a string literal, so it cannot name the argument; a broken
/// rule fails inside this nest instead, whose name the compiler prints in the error's instantiation context:
/// "KernelArgument<2>::ForParameterType<float>::GivenType<double>" reads as "kernel argument 2, for a parameter
/// of type float, given a double".
template <int Number>
struct KernelArgument {
  template <class Parameter>
  struct ForParameterType {
    template <class Argument>
    struct GivenType {
      static constexpr bool converted_by_traits = HasCustomArgumentTraits<Parameter, Argument>;
      static constexpr bool pointer_parameter = !converted_by_traits && std::is_pointer_v<Parameter>;
      static constexpr bool scalar_parameter = !converted_by_traits && !std::is_pointer_v<Parameter>;
      using Pointee = std::remove_pointer_t<Parameter>;
      using Element = typename SpanElement<Argument>::type;

      static constexpr bool pointer_parameter_given_a_device_span = !pointer_parameter || is_device_span_v<Argument>;
      static_assert(pointer_parameter_given_a_device_span,
                    "Kernel argument N (counted from 1; see KernelArgument<N> in this error): a pointer parameter "
                    "takes a DeviceSpan; pass buffer.view() where the kernel writes and buffer.cview() where it only "
                    "reads");
      static constexpr bool span_for_pointer = pointer_parameter && is_device_span_v<Argument>;
      static constexpr bool writable_parameter_given_a_writable_span =
          !span_for_pointer || !std::is_const_v<Element> || std::is_const_v<Pointee>;
      static_assert(writable_parameter_given_a_writable_span,
                    "Kernel argument N (counted from 1; see KernelArgument<N> in this error): a read-only "
                    "DeviceSpan<const T> was passed for a writable T* parameter; the kernel writes there, so pass a "
                    "writable view (buffer.view())");
      static constexpr bool span_element_matches_parameter =
          !span_for_pointer || std::is_same_v<std::remove_const_t<Element>, std::remove_const_t<Pointee>>;
      static_assert(span_element_matches_parameter,
                    "Kernel argument N (counted from 1; see KernelArgument<N> in this error): the DeviceSpan's "
                    "element type differs from the pointer parameter's; device pointers are never converted between "
                    "element types");
      static constexpr bool scalar_argument_has_parameter_type =
          !scalar_parameter || std::is_same_v<Argument, Parameter>;
      static constexpr bool float_parameter = std::is_floating_point_v<Parameter>;
      static constexpr bool float_parameter_given_its_type = scalar_argument_has_parameter_type || !float_parameter;
      static_assert(float_parameter_given_its_type,
                    "Kernel argument N (counted from 1; see KernelArgument<N> in this error): a scalar argument must "
                    "have exactly the parameter's type; nothing is converted implicitly: for a float parameter write "
                    "2.0f (not 2.0 or 2), or static_cast<float>(x)");
      static constexpr bool other_parameter_given_its_type = scalar_argument_has_parameter_type || float_parameter;
      static_assert(other_parameter_given_its_type,
                    "Kernel argument N (counted from 1; see KernelArgument<N> in this error): a scalar argument must "
                    "have exactly the parameter's type; nothing is converted implicitly: for an integer parameter "
                    "pass that integer type, e.g. static_cast<int>(n) for an int parameter given a std::size_t");

      /// Whether every rule holds (the asserts above have failed the compilation otherwise).
      static constexpr bool accepted = pointer_parameter_given_a_device_span &&
                                       writable_parameter_given_a_writable_span && span_element_matches_parameter &&
                                       scalar_argument_has_parameter_type;
    };
  };
};

/// `arg` as the value of a parameter of type `Param`, checked by the rules above as kernel argument `Number`
/// (counted from 1; only the diagnostics use it).
template <class Param, int Number, class Arg>
constexpr Param convert_argument(const Arg& arg) {
  using Check = typename KernelArgument<Number>::template ForParameterType<Param>::template GivenType<Arg>;
  if constexpr (Check::converted_by_traits) {
    return KernelArgumentTraits<Param, Arg>::convert(arg);
  } else if constexpr (!Check::accepted) {
    return Param{};  // a static_assert of Check has already failed: this only spares the user a second error
  } else if constexpr (std::is_pointer_v<Param>) {
    return arg.data();
  } else {
    return arg;
  }
}

}  // namespace detail
}  // namespace lazygraph
