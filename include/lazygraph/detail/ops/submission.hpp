#pragma once
/// \file
/// Submission: how an ExecContext carries out the work ops submit, one implementation per mode, each in a file of
/// its own:
///   - eager (src/ops/eager_submission.cpp): the work runs on a stream;
///   - capture (src/ops/capture_submission.cpp): the stream is capturing, so the work becomes graph nodes;
///   - plan (src/ops/plan_submission.cpp): nothing is submitted; each piece of work becomes a NodePlan node with its
///     dependencies.
/// ExecContext (ops/exec_context.hpp) holds one and forwards its verbs to it; the graph layer reaches it through
/// ExecContextAccess for what only a graph has (child graphs, conditional nodes).

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "lazygraph/driver/stream.hpp"

namespace lazygraph {
struct KernelSubmission;
class ExecContext;
}  // namespace lazygraph

namespace lazygraph::detail {

struct NodePlan;

/// Rows of bytes between two pitches within the device (a shape check_copy_2d took; in bytes).
struct Copy2d {
  CUdeviceptr dst = 0;
  std::size_t dst_pitch = 0;
  CUdeviceptr src = 0;
  std::size_t src_pitch = 0;
  std::size_t width = 0;  ///< bytes of each row
  std::size_t rows = 0;
};

/// One mode of submission (see the file comment). Every verb is asynchronous; none is called with an empty
/// transfer (ExecContext filters those out).
class Submission {
 public:
  /// Records body `index` of a conditional node through `body`, a submission into that body (see conditional).
  using BodyRecorder = std::function<void(unsigned index, Submission& body)>;

  explicit Submission(const Stream& origin) noexcept : current_(&origin), origin_(&origin) {}
  Submission(const Submission&) = delete;
  Submission& operator=(const Submission&) = delete;
  virtual ~Submission() = default;

  /// The stream work goes to now (a fork's branch switches it; plan mode never does).
  [[nodiscard]] const Stream& current() const noexcept { return *current_; }
  /// The stream given at construction.
  [[nodiscard]] const Stream& origin() const noexcept { return *origin_; }
  /// True when the work becomes graph nodes (capture and plan).
  [[nodiscard]] virtual bool recording() const noexcept = 0;
  /// Plan mode: the plan written to; null otherwise.
  [[nodiscard]] virtual NodePlan* plan() noexcept { return nullptr; }
  /// Eager mode: a host function was submitted (its data must outlive the stream's run of it).
  [[nodiscard]] virtual bool submitted_host_calls() const noexcept { return false; }

  virtual void launch(const KernelSubmission& kernel) = 0;
  virtual void copy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) = 0;
  virtual void copy_2d(const Copy2d& copy) = 0;
  virtual void copy_to_device(CUdeviceptr dst, const void* host, std::size_t bytes) = 0;
  virtual void copy_to_host(void* host, CUdeviceptr src, std::size_t bytes) = 0;
  virtual void fill(CUdeviceptr dst, unsigned pattern, std::size_t element_size, std::size_t count) = 0;
  virtual void host_function(CUhostFn fn, void* data, std::string_view name) = 0;
  virtual void join() = 0;
  virtual void record_event(CUevent event) = 0;
  virtual void wait_event(CUevent event) = 0;
  /// A copy of `graph` as one node. \throws UsageError eagerly.
  virtual void child_graph(CUgraph graph) = 0;
  /// A conditional node steered by `handle` with `size` bodies; `body(i, s)` records body i through `s`, which
  /// submits into that body and lives until the body is complete. \throws UsageError eagerly.
  virtual void conditional(CUgraphConditionalHandle handle, CUgraphConditionalNodeType type, unsigned size,
                           const BodyRecorder& body) = 0;

  /// fork_join's steps: `count` branches, branch i entered (current() switched to its stream, or the plan's
  /// frontier to the fork point) and left in turn, then joined. Forks nest (a branch may fork): a stack.
  virtual void begin_fork(std::size_t count) = 0;
  virtual void enter_branch(std::size_t index) = 0;
  virtual void leave_branch() = 0;
  virtual void end_fork() = 0;
  /// run_dataflow's steps: piece i starts after the pieces `after`, and the work after follows every piece.
  virtual void begin_dataflow(std::size_t count) = 0;
  virtual void enter_piece(std::span<const std::uint32_t> after) = 0;
  virtual void leave_piece(std::size_t index) = 0;
  virtual void end_dataflow(std::span<const std::vector<std::uint32_t>> after) = 0;

 protected:
  const Stream* current_;
  const Stream* origin_;
};

/// For run_dataflow's end: true for each piece that no other piece follows (`after[i]` lists what piece i follows);
/// the work after the dataflow follows those, and the others through them.
[[nodiscard]] inline std::vector<bool> unfollowed_pieces(std::span<const std::vector<std::uint32_t>> after) {
  std::vector<bool> unfollowed(after.size(), true);
  for (const auto& list : after) {
    for (const std::uint32_t p : list) unfollowed[p] = false;
  }
  return unfollowed;
}

/// Work that runs on `stream`.
[[nodiscard]] std::unique_ptr<Submission> eager_submission(const Stream& stream);
/// Work captured by `stream`, which is capturing.
[[nodiscard]] std::unique_ptr<Submission> capture_submission(const Stream& stream);
/// Work written down in `plan`; `stream` names the device.
[[nodiscard]] std::unique_ptr<Submission> plan_submission(const Stream& stream, NodePlan& plan);

}  // namespace lazygraph::detail
