// NodeKind's names and EdgeCounts, what CudaGraph's introspection reports (graph/node_kind.hpp). The graphs that
// report them are in cuda_graph.cpp, graph_build.cpp and early_launch.cpp.
#include <doctest/doctest.h>

#include <lazygraph/graph/node_kind.hpp>

#include <set>
#include <string>

using namespace lazygraph;

TEST_CASE("every NodeKind has its own name, spelled as the enumerator") {
  const NodeKind all[] = {NodeKind::kernel,     NodeKind::memcpy,       NodeKind::memset,
                          NodeKind::host,       NodeKind::child_graph,  NodeKind::empty,
                          NodeKind::wait_event, NodeKind::event_record, NodeKind::other};
  std::set<std::string> names;
  for (const NodeKind k : all) {
    REQUIRE(to_string(k) != nullptr);
    names.insert(to_string(k));
  }
  CHECK(names.size() == std::size(all));
  CHECK(std::string(to_string(NodeKind::child_graph)) == "child_graph");
  CHECK(std::string(to_string(NodeKind::event_record)) == "event_record");
}

TEST_CASE("EdgeCounts start at zero") {
  const EdgeCounts counts;
  CHECK(counts.full == 0);
  CHECK(counts.programmatic == 0);
}
