#pragma once
/// \file
/// The graph layer's door into an ExecContext. What only a graph has — conditions, scratch memory, transfer
/// counts, child graphs, conditional bodies — lives in the graph layer (detail/graph/graph_recording.hpp); an
/// ExecContext that records a graph carries a GraphHooks for it, through which the few checks its verbs need
/// (scratch ownership, host transfers, what a conditional body refuses) reach that layer.

#include <cstddef>
#include <memory>
#include <string_view>

#include "lazygraph/detail/ops/submission.hpp"
#include "lazygraph/ops/exec_context.hpp"

namespace lazygraph::detail {

/// What an ExecContext asks of the graph it records (implemented by GraphRecording).
class GraphHooks {
 public:
  GraphHooks() = default;
  GraphHooks(const GraphHooks&) = delete;
  GraphHooks& operator=(const GraphHooks&) = delete;

  /// \throws UsageError when `owner` marks scratch memory of another graph.
  virtual void check_scratch(const std::shared_ptr<const void>& owner) const = 0;
  /// Counts a host transfer of the graph being recorded (nothing inside a conditional body).
  virtual void count_host_transfer(std::size_t to_device, std::size_t to_host) noexcept = 0;
  /// \throws UsageError when `what` (a host call, an event record or wait) is submitted into a conditional body.
  virtual void check_submittable(std::string_view what) const = 0;

 protected:
  ~GraphHooks() = default;
};

/// For the graph layer only: the parts of an ExecContext op authors do not see.
class ExecContextAccess {
 public:
  /// The context's submission (its mode).
  [[nodiscard]] static Submission& submission(ExecContext& ctx) noexcept { return *ctx.submission_; }
  /// The hooks of the graph `ctx` records; null when it records none (eager, or no graph layer above it).
  [[nodiscard]] static GraphHooks* hooks(const ExecContext& ctx) noexcept { return ctx.hooks_; }
  /// Makes `ctx` report to `hooks` (null: to nobody).
  static void attach(ExecContext& ctx, GraphHooks* hooks) noexcept { ctx.hooks_ = hooks; }
  /// A context over `submission`, which outlives it (a conditional body's).
  [[nodiscard]] static ExecContext over(Submission& submission, std::shared_ptr<HostCallErrors> host_errors) {
    return ExecContext(submission, std::move(host_errors));
  }
};

}  // namespace lazygraph::detail
