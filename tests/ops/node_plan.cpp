// NodePlan: plain data, tested on the host.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

using lazygraph::detail::NodePlan;
using lazygraph::detail::PlannedNode;

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
  CHECK(plan.dependencies_of(0).empty());
  REQUIRE(plan.dependencies_of(1).size() == 1);
  CHECK(plan.dependencies_of(1)[0] == 0);
  REQUIRE(plan.dependencies_of(2).size() == 2);
  CHECK(plan.dependencies_of(2)[1] == 1);

  std::vector<void*> pointers;
  plan.argument_pointers(plan.nodes[0], pointers);
  REQUIRE(pointers.size() == 5);
  CHECK(pointers.back() == nullptr);
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
  for (std::size_t i = 0; i < 4; ++i) CHECK(reinterpret_cast<std::uintptr_t>(pointers[i]) % 8 == 0);
  // The argument bytes span the four values (with padding), and two plans with equal values compare equal.
  CHECK(plan.arguments(plan.nodes[0]).size() >= sizeof a + sizeof pointer + sizeof c + sizeof n);
  NodePlan again;
  PlannedNode same;
  again.store_arguments(same, args, sizes, 4);
  const auto x = plan.arguments(plan.nodes[0]);
  const auto y = again.arguments(same);
  REQUIRE(x.size() == y.size());
  CHECK(std::memcmp(x.data(), y.data(), x.size()) == 0);
}

TEST_CASE("reserve_like sizes a plan for another of the same shape without changing it") {
  NodePlan big;
  for (int i = 0; i < 100; ++i) (void)big.add(PlannedNode{}, {});
  NodePlan fresh;
  fresh.reserve_like(big);
  CHECK(fresh.nodes.empty());
  CHECK(fresh.nodes.capacity() >= 100);
}
