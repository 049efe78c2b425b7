#pragma once
/// \file
/// ExecContext: what an op executes against — a stream, the side streams that `all(...)` forks onto, and,
/// while a graph is being recorded, the list of owners that the graph must keep alive.

#include <memory>
#include <vector>

#include "lazygraph/detail/driver/stream.hpp"

namespace lazygraph {

/// What ops execute against (see the file comment). sync_on, Scope and CudaGraph make one; an op of your own
/// only receives it in `execute`.
///
/// Exception safety: if an op throws during execution, the context stays consistent; side streams already
/// forked are joined back by the `all` op before it rethrows.
class ExecContext {
 public:
  /// Executes on `stream`. `recording` is true while a graph captures the stream.
  ExecContext(const Stream& stream, bool recording);
  ExecContext(const ExecContext&) = delete;
  ExecContext& operator=(const ExecContext&) = delete;
  ~ExecContext();

  /// The stream to submit work to now: the context's own, or inside a fork_join branch, that branch's.
  [[nodiscard]] const Stream& stream() const noexcept { return *current_; }
  /// True while a graph is recorded: submitted work becomes graph nodes instead of running.
  [[nodiscard]] bool recording() const noexcept { return recording_; }

  /// Keeps `owner` alive as long as the work that uses it may run: for a graph, as long as the graph lives.
  void keep_alive(const std::shared_ptr<const void>& owner);
  /// Everything kept alive so far (the graph takes these when recording ends).
  [[nodiscard]] std::vector<std::shared_ptr<const void>> take_owners() noexcept { return std::move(owners_); }

  /// Runs `branches.size()` pieces of work concurrently: branch i executes with stream() switched to its own
  /// stream (branch 0 on the current one), each starting after the work already submitted and all finishing
  /// before any later work. When recording, they become parallel branches of the graph.
  template <class... F>
  void fork_join(F&&... branches);

 private:
  struct Fork;
  Fork begin_fork(std::size_t count);
  void end_fork(Fork& fork) noexcept(false);
  const Stream& side_stream(std::size_t index);

  const Stream* current_;
  bool recording_;
  std::vector<std::shared_ptr<const void>> owners_;
  std::vector<std::unique_ptr<Stream>> side_streams_;
  std::size_t side_streams_in_use_ = 0;
  std::vector<Event> events_;  // kept until the context ends: a recorded event wait refers to them
};

struct ExecContext::Fork {
  const Stream* origin = nullptr;
  std::size_t first_side = 0;
  std::size_t count = 0;
};

template <class... F>
void ExecContext::fork_join(F&&... branches) {
  constexpr std::size_t count = sizeof...(F);
  if constexpr (count == 1) {
    (branches(), ...);
  } else {
    Fork fork = begin_fork(count);
    std::exception_ptr error;
    std::size_t index = 0;
    const auto run_branch = [&](auto& branch) {
      current_ = index == 0 ? fork.origin : &side_stream(fork.first_side + index - 1);
      ++index;
      if (error) return;
      try {
        branch();
      } catch (...) {
        error = std::current_exception();
      }
    };
    (run_branch(branches), ...);
    current_ = fork.origin;
    end_fork(fork);
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace lazygraph
