#pragma once
// A user's own kernel parameter types, shared by the tests of kernel declarations (kernels/kernel_declaration.cpp)
// and of host parameter spellings (kernels/kernel_parameter_type.cpp): a plain struct, spelled on the device by
// its unqualified name, and one whose device spelling the KernelParameterTypeName trait gives.

#include <lazygraph/kernels.hpp>

#include <string_view>

namespace user {
struct Params {
  int n;
  float scale;
};
struct HostOnlyName {
  int n;
};
}  // namespace user

template <>
struct lazygraph::KernelParameterTypeName<user::HostOnlyName> {
  static constexpr std::string_view value = "DeviceName";
};
