// The canonical spelling of host kernel parameter types (kernels/kernel_parameter_type.hpp), compared at
// lookup with the spelling read from the kernel's source: no GPU needed.
#include <doctest/doctest.h>

#include <lazygraph/kernels.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/user_types.hpp"

using namespace lazygraph;

namespace {
using Types = std::vector<std::string>;
}  // namespace

namespace user {
enum class Mode { fast, exact };
template <class T>
struct Box {
  T value;
};
struct Spelled {
  int n;
};
}  // namespace user

// The trait's value loses its namespaces too, like the kernel source's spelling.
template <>
struct lazygraph::KernelParameterTypeName<user::Spelled> {
  static constexpr std::string_view value = "dev::OnDevice";
};

static_assert(KernelParameterTypeName<half>::value == "half_t");
static_assert(KernelParameterTypeName<user::Params>::value == "Params");
static_assert(detail::unqualified_type_name<user::Params>() == "Params");
static_assert(detail::unqualified_type_name<int>() == "int");

TEST_CASE("host parameter types are spelled like the kernel sources spell them") {
  using detail::kernel_parameter_type;
  CHECK(kernel_parameter_type<int>() == "int");
  CHECK(kernel_parameter_type<unsigned>() == "unsigned int");
  CHECK(kernel_parameter_type<long long>() == "long long");
  CHECK(kernel_parameter_type<std::size_t>() == "unsigned long");
  CHECK(kernel_parameter_type<std::int64_t>() == "long");
  CHECK(kernel_parameter_type<std::uint32_t>() == "unsigned int");
  CHECK(kernel_parameter_type<const float*>() == "const float*");
  CHECK(kernel_parameter_type<float*>() == "float*");
  CHECK(kernel_parameter_type<float* const>() == "float*");
  CHECK(kernel_parameter_type<const float* const*>() == "const float* const*");
  CHECK(kernel_parameter_type<half>() == "half_t");
  CHECK(kernel_parameter_type<const half*>() == "const half_t*");
  CHECK(kernel_parameter_type<user::Params>() == "Params");
  CHECK(kernel_parameter_type<const user::Params*>() == "const Params*");
  CHECK(kernel_parameter_type<user::HostOnlyName>() == "DeviceName");  // the trait, specialised above
  CHECK(detail::kernel_parameter_types(static_cast<void (*)(float, const float*, float*, int)>(nullptr)) ==
        Types{"float", "const float*", "float*", "int"});
}

TEST_CASE("every builtin parameter type has its standard spelling, whatever cv-qualifiers it carries on top") {
  using detail::kernel_parameter_type;
  CHECK(kernel_parameter_type<void*>() == "void*");
  CHECK(kernel_parameter_type<const void*>() == "const void*");
  CHECK(kernel_parameter_type<bool>() == "bool");
  CHECK(kernel_parameter_type<char>() == "char");
  CHECK(kernel_parameter_type<signed char>() == "signed char");
  CHECK(kernel_parameter_type<unsigned char>() == "unsigned char");
  CHECK(kernel_parameter_type<short>() == "short");
  CHECK(kernel_parameter_type<unsigned short>() == "unsigned short");
  CHECK(kernel_parameter_type<long>() == "long");
  CHECK(kernel_parameter_type<unsigned long>() == "unsigned long");
  CHECK(kernel_parameter_type<unsigned long long>() == "unsigned long long");
  CHECK(kernel_parameter_type<double>() == "double");
  CHECK(kernel_parameter_type<long double>() == "long double");
  CHECK(kernel_parameter_type<const int>() == "int");
  CHECK(kernel_parameter_type<volatile int>() == "int");
  CHECK(kernel_parameter_type<const volatile double>() == "double");
  CHECK(kernel_parameter_type<const volatile float*>() == "const float*");  // the pointee's const is kept
  CHECK(kernel_parameter_type<float* const*>() == "float* const*");
  CHECK(kernel_parameter_type<float**>() == "float**");
  CHECK(kernel_parameter_type<char8_t>() == "char8_t");  // other builtins: as the compiler spells them
}

TEST_CASE("class and enum parameter types are spelled without their namespaces, or as the trait says") {
  using detail::kernel_parameter_type;
  CHECK(kernel_parameter_type<user::Mode>() == "Mode");
  CHECK(kernel_parameter_type<const user::Mode*>() == "const Mode*");
  // Only the namespaces before the template's name go: its arguments keep theirs.
  CHECK(kernel_parameter_type<user::Box<user::Params>>() == "Box<user::Params>");
  CHECK(detail::unqualified_type_name<user::Box<user::Params>>() == "Box<user::Params>");
  CHECK(kernel_parameter_type<user::Spelled>() == "OnDevice");
  CHECK(kernel_parameter_type<user::Spelled*>() == "OnDevice*");  // a pointer consults the trait for its pointee
  CHECK(detail::kernel_parameter_types(static_cast<void (*)()>(nullptr)).empty());
  CHECK(detail::kernel_parameter_types(static_cast<void (*)(const half*, user::HostOnlyName, std::uint64_t)>(
            nullptr)) == Types{"const half_t*", "DeviceName", "unsigned long"});
}
