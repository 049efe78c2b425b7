// NodePlan (detail/ops/node_plan.hpp): plain data, tested on the host.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

using lazygraph::detail::NodePlan;
using lazygraph::detail::PlannedNode;

namespace {

/// True when `p` points inside `plan`'s argument bytes, `size` bytes fitting before their end.
bool inside_arguments(const NodePlan& plan, const void* p, std::size_t size) {
  const auto* b = static_cast<const std::byte*>(p);
  return b >= plan.argument_bytes.data() && b + size <= plan.argument_bytes.data() + plan.argument_bytes.size();
}

}  // namespace

TEST_CASE("a NodePlan keeps each node's dependencies and its kernel arguments' bytes, 8-byte aligned") {
  NodePlan plan;
  PlannedNode first;
  first.type = CU_GRAPH_NODE_TYPE_KERNEL;
  const float a = 2.5F;
  const int n = 12345;
  void* const pointer = &plan;  // any pointer-sized value
  const char c = 'z';
  void* args[] = {const_cast<float*>(&a), const_cast<void**>(&pointer), const_cast<char*>(&c), const_cast<int*>(&n)};
  const std::size_t sizes[] = {sizeof a, sizeof pointer, sizeof c, sizeof n};
  plan.store_arguments(first, args, sizes, 4);
  CHECK(first.argument_count == 4);
  CHECK(plan.add(first, {}) == 0);
  PlannedNode copy;
  copy.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  const std::uint32_t after_first[] = {0};
  CHECK(plan.add(copy, after_first) == 1);
  PlannedNode fill;
  fill.type = CU_GRAPH_NODE_TYPE_MEMSET;
  const std::uint32_t after_both[] = {0, 1};
  CHECK(plan.add(fill, after_both) == 2);

  REQUIRE(plan.nodes.size() == 3);
  CHECK(plan.nodes[1].type == CU_GRAPH_NODE_TYPE_MEMCPY);
  CHECK(plan.dependencies_of(0).empty());
  REQUIRE(plan.dependencies_of(1).size() == 1);
  CHECK(plan.dependencies_of(1)[0] == 0);
  REQUIRE(plan.dependencies_of(2).size() == 2);
  CHECK(plan.dependencies_of(2)[0] == 0);
  CHECK(plan.dependencies_of(2)[1] == 1);

  std::vector<void*> pointers;
  plan.argument_pointers(plan.nodes[0], pointers);
  REQUIRE(pointers.size() == 5);
  CHECK(pointers.back() == nullptr);
  // Each pointer points at the plan's own copy of the value (not at the caller's variable), 8-byte aligned.
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(inside_arguments(plan, pointers[i], sizes[i]));
    CHECK(pointers[i] != args[i]);
    CHECK(reinterpret_cast<std::uintptr_t>(pointers[i]) % 8 == 0);
  }
  float a_back = 0;
  void* pointer_back = nullptr;
  char c_back = 0;
  int n_back = 0;
  std::memcpy(&a_back, pointers[0], sizeof a_back);
  std::memcpy(&pointer_back, pointers[1], sizeof pointer_back);
  std::memcpy(&c_back, pointers[2], sizeof c_back);
  std::memcpy(&n_back, pointers[3], sizeof n_back);
  CHECK(a_back == a);
  CHECK(pointer_back == pointer);
  CHECK(c_back == c);
  CHECK(n_back == n);
  // The layout: float at 0, the pointer at 8, the char at 16, the int at 24; the padding between them is zero.
  const auto bytes = plan.arguments(plan.nodes[0]);
  REQUIRE(bytes.size() == 24 + sizeof n);
  CHECK(static_cast<const void*>(bytes.data()) == pointers[0]);
  CHECK(static_cast<const std::byte*>(pointers[1]) - bytes.data() == 8);
  CHECK(static_cast<const std::byte*>(pointers[2]) - bytes.data() == 16);
  CHECK(static_cast<const std::byte*>(pointers[3]) - bytes.data() == 24);
  for (std::size_t i = sizeof a; i < 8; ++i) CHECK(bytes[i] == std::byte{0});
  for (std::size_t i = 17; i < 24; ++i) CHECK(bytes[i] == std::byte{0});

  // Two plans with equal values have equal argument bytes (how update_from tells an unchanged kernel node).
  NodePlan again;
  PlannedNode same;
  again.store_arguments(same, args, sizes, 4);
  const auto y = again.arguments(same);
  REQUIRE(bytes.size() == y.size());
  CHECK(std::memcmp(bytes.data(), y.data(), bytes.size()) == 0);
  // ... and a changed value changes them.
  const int other_n = n + 1;
  void* changed[] = {args[0], args[1], args[2], const_cast<int*>(&other_n)};
  NodePlan different;
  PlannedNode other;
  different.store_arguments(other, changed, sizes, 4);
  const auto z = different.arguments(other);
  REQUIRE(z.size() == bytes.size());
  CHECK(std::memcmp(bytes.data(), z.data(), bytes.size()) != 0);
}

TEST_CASE("the arguments of a second kernel node are its own, aligned, and leave the first's intact") {
  NodePlan plan;
  const char c = 'q';
  const double d = -6.02214076e23;
  const std::int64_t big = 0x0123456789abcdefLL;
  const float f = 0.375F;

  PlannedNode k1;
  k1.type = CU_GRAPH_NODE_TYPE_KERNEL;
  void* args1[] = {const_cast<char*>(&c)};
  const std::size_t sizes1[] = {sizeof c};
  plan.store_arguments(k1, args1, sizes1, 1);
  (void)plan.add(k1, {});

  PlannedNode k2;
  k2.type = CU_GRAPH_NODE_TYPE_KERNEL;
  void* args2[] = {const_cast<double*>(&d), const_cast<std::int64_t*>(&big), const_cast<float*>(&f)};
  const std::size_t sizes2[] = {sizeof d, sizeof big, sizeof f};
  plan.store_arguments(k2, args2, sizes2, 3);
  const std::uint32_t after_k1[] = {0};
  CHECK(plan.add(k2, after_k1) == 1);

  // The first kernel's range holds its one byte only: the second's start on the next 8-byte boundary.
  REQUIRE(plan.arguments(plan.nodes[0]).size() == 1);
  CHECK(plan.arguments(plan.nodes[0])[0] == std::byte{'q'});
  const auto second = plan.arguments(plan.nodes[1]);
  REQUIRE(second.size() == 16 + sizeof f);

  std::vector<void*> p;
  plan.argument_pointers(plan.nodes[1], p);
  REQUIRE(p.size() == 4);
  CHECK(p[3] == nullptr);
  CHECK(static_cast<const void*>(second.data()) == p[0]);
  double d_back = 0;
  std::int64_t big_back = 0;
  float f_back = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(inside_arguments(plan, p[i], sizes2[i]));
    CHECK(reinterpret_cast<std::uintptr_t>(p[i]) % 8 == 0);
  }
  std::memcpy(&d_back, p[0], sizeof d_back);
  std::memcpy(&big_back, p[1], sizeof big_back);
  std::memcpy(&f_back, p[2], sizeof f_back);
  CHECK(d_back == d);
  CHECK(big_back == big);
  CHECK(f_back == f);

  // The first node's pointers still lead to its byte (argument_pointers clears what it is given).
  plan.argument_pointers(plan.nodes[0], p);
  REQUIRE(p.size() == 2);
  CHECK(*static_cast<const char*>(p[0]) == 'q');
  CHECK(p[1] == nullptr);
}

TEST_CASE("a kernel without arguments has an empty argument range and only the closing null pointer") {
  NodePlan plan;
  PlannedNode k;
  k.type = CU_GRAPH_NODE_TYPE_KERNEL;
  plan.store_arguments(k, nullptr, nullptr, 0);
  (void)plan.add(k, {});
  CHECK(plan.nodes[0].argument_count == 0);
  CHECK(plan.arguments(plan.nodes[0]).empty());
  std::vector<void*> p{reinterpret_cast<void*>(std::uintptr_t{0x10})};  // stale contents are replaced
  plan.argument_pointers(plan.nodes[0], p);
  REQUIRE(p.size() == 1);
  CHECK(p[0] == nullptr);
}

TEST_CASE("reserve_like sizes a plan for another of the same shape without changing it") {
  NodePlan big;
  for (int i = 0; i < 100; ++i) (void)big.add(PlannedNode{}, {});
  NodePlan fresh;
  fresh.reserve_like(big);
  CHECK(fresh.nodes.empty());
  CHECK(fresh.dependencies.empty());
  CHECK(fresh.nodes.capacity() >= 100);
}
