// GraphRecording (detail/graph/graph_recording.hpp): the graph-only state next to a recording context. The graph
// layer finds it through the context (and refuses eager contexts, naming what needs a graph); it counts the bytes a
// graph's host copies move per replay; a plan with no graph to make conditions or scratch memory for refuses them.
#include <doctest/doctest.h>

#include <string>

#include "common/gpu.hpp"
#include "lazygraph/detail/graph/graph_recording.hpp"

using namespace lazygraph;
using detail::GraphRecording;

TEST_SUITE("gpu") {
  TEST_CASE("GraphRecording::of finds the recording a context reports to, and refuses an eager context by name") {
    Stream& s = lgtest::stream();
    ExecContext eager(s, false);
    CHECK_THROWS_WITH_AS((void)GraphRecording::of(eager, "if_ is a node of a graph"),
                         doctest::Contains("if_ is a node of a graph, not work to run eagerly"), UsageError);
    detail::NodePlan plan;
    ExecContext planned(s, plan);
    {
      GraphRecording recording(planned);
      CHECK(&GraphRecording::of(planned, "x") == &recording);
    }
    CHECK_THROWS_AS((void)GraphRecording::of(planned, "x"), UsageError);  // detached when it ended
  }

  TEST_CASE("a recording counts the bytes its host copies move per replay, and a plan without a graph refuses") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> d = from_host(lgtest::random_floats(256)).sync_on(s);
    PinnedBuffer<float> h(s.device(), 256);
    detail::NodePlan plan;
    ExecContext ctx(s, plan);
    GraphRecording recording(ctx);
    ctx.copy_to_device(d.view().address(), h.data(), 100);
    ctx.copy_to_host(h.data(), d.cview().address(), 40);
    ctx.count_host_transfer(8, 12);
    CHECK(recording.bytes_to_device() == 108);
    CHECK(recording.bytes_to_host() == 52);
    CHECK(plan.nodes.size() == 2);
    CHECK_THROWS_WITH_AS((void)recording.make_condition(0), doctest::Contains("no graph to make conditions for"),
                         UsageError);
    CHECK_THROWS_WITH_AS((void)recording.scratch(64), doctest::Contains("no graph to allocate in"), UsageError);
    CHECK_THROWS_WITH_AS((void)recording.scratch(0), doctest::Contains("at least one byte"), UsageError);
    CHECK(recording.conditions_made() == 0);
    CHECK(recording.scratch_bytes() == 0);
  }
}
