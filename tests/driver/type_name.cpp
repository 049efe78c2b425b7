// type_name<T>() (detail/driver/type_name.hpp): the element-type names errors use, as the compiler spells them,
// known at compile time.
#include <doctest/doctest.h>

#include <lazygraph/detail/driver/type_name.hpp>
#include <lazygraph/driver.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

using lazygraph::detail::type_name;

namespace type_name_test {
struct Pixel {
  float r, g, b;
};
template <class A, class B>
struct Pair {
  A a;
  B b;
};
enum class Mode { fast, exact };
}  // namespace type_name_test

// A constant expression: usable where the name is needed at compile time.
static_assert(type_name<float>() == "float");
static_assert(noexcept(type_name<int>()));

TEST_CASE("type_name spells builtin types as the compiler does") {
  CHECK(type_name<float>() == "float");
  CHECK(type_name<double>() == "double");
  CHECK(type_name<int>() == "int");
  CHECK(type_name<unsigned int>() == "unsigned int");
  CHECK(type_name<long long>() == "long long int");
  CHECK(type_name<unsigned char>() == "unsigned char");
  CHECK(type_name<bool>() == "bool");
  CHECK(type_name<const int>() == "const int");
  CHECK(type_name<float*>() == "float*");
}

TEST_CASE("type_name spells class, enum and template types with their namespaces and arguments") {
  CHECK(type_name<type_name_test::Pixel>() == "type_name_test::Pixel");
  CHECK(type_name<type_name_test::Mode>() == "type_name_test::Mode");
  CHECK(type_name<lazygraph::half>() == "lazygraph::half");
  // A comma inside the template arguments does not end the name; gcc's "; ..." after it does.
  CHECK(type_name<type_name_test::Pair<int, float>>() == "type_name_test::Pair<int, float>");
  CHECK(type_name<std::pair<type_name_test::Pixel, char>>() == "std::pair<type_name_test::Pixel, char>");
}

TEST_CASE("type_name gives distinct names to distinct types, and names the element type in buffer errors") {
  CHECK(type_name<std::int32_t>() != type_name<std::uint32_t>());
  CHECK(type_name<float>() != type_name<double>());
  CHECK(type_name<type_name_test::Pair<int, float>>() != type_name<type_name_test::Pair<float, int>>());
  CHECK(lazygraph::DeviceBuffer<type_name_test::Pixel>::describe(4) ==
        "DeviceBuffer<type_name_test::Pixel> of 4 elements (" + std::to_string(4 * sizeof(type_name_test::Pixel)) +
            " bytes)");
}

TEST_CASE("an array type keeps its bound in its name") { CHECK(lazygraph::detail::type_name<int[3]>() == "int [3]"); }
