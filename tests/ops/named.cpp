// named(label, op) (ops/named.hpp): the same work as op, inside an NVTX range and a label that kernel launches
// report to a LaunchObserver; labels nest and are closed again when the op throws.
#include <doctest/doctest.h>

#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

static_assert(GraphNode<NamedOp<FillOp<float>>> && is_buildable_v<NamedOp<FillOp<float>>>);
static_assert(!GraphNode<NamedOp<decltype(zeros<float>(1))>>);

namespace {
/// Writes down the labels each kernel launch sees.
struct LabelRecorder final : LaunchObserver {
  void before(const KernelSubmission& k, const Stream& /*stream*/, std::span<const std::string_view> labels) override {
    std::string path(k.name);
    for (const std::string_view l : labels) path.append("/").append(l);
    seen.push_back(path);
  }
  void after(const KernelSubmission& /*kernel*/, const Stream& /*stream*/) override {}
  std::vector<std::string> seen;
};

/// An op whose execution throws.
struct Throwing {
  using Output = void;
  void execute(ExecContext& /*ctx*/) const { throw std::runtime_error("no"); }
};
}  // namespace

TEST_CASE("named ops compose without touching the GPU and keep their label") {
  const auto op = named("outer", fill(DeviceSpan<float>(0x1000, 4), 1.0F));
  CHECK(op.label() == "outer");
}

TEST_SUITE("gpu") {
  TEST_CASE("kernels launched inside named ops report the labels around them, innermost last") {
    Stream& s = lgtest::stream();
    const auto axpy = lgtest::axpy();
    auto x = zeros<float>(64).sync_on(s);
    auto y = zeros<float>(64).sync_on(s);
    const auto step = [&] { return axpy(grid_for(64, 64), 1.0F, x.cview(), y.view(), 64); };
    const auto op = named("outer", named("inner", step()) >> step()) >> step();
    LabelRecorder recorder;
    ExecContext ctx(s, false);
    ctx.observe(&recorder);
    op.execute(ctx);
    s.synchronize();
    CHECK(recorder.seen == std::vector<std::string>{"axpy/outer/inner", "axpy/outer", "axpy"});
    CHECK(ctx.labels().empty());
  }

  TEST_CASE("a named op that throws closes its label, and recording one adds no node") {
    Stream& s = lgtest::stream();
    auto y = zeros<float>(64).sync_on(s);
    ExecContext ctx(s, false);
    const auto failing = named("part", fill(y.view(), 1.0F) >> Throwing{});
    CHECK_THROWS(failing.execute(ctx));
    s.synchronize();
    CHECK(ctx.labels().empty());
    auto plain = CudaGraph<>::capture(s, fill(y.view(), 2.0F) >> fill(y.view(), 3.0F));
    auto labelled = CudaGraph<>::capture(s, named("a", fill(y.view(), 2.0F)) >> named("b", fill(y.view(), 3.0F)));
    CHECK(labelled.node_count() == plain.node_count());
  }
}
