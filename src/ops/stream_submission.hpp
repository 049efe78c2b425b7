#pragma once
// StreamSubmission: what eager and capture submission share (src/ops/eager_submission.cpp,
// capture_submission.cpp). Both submit every piece of work to the current stream; fork_join's branches run on side
// streams, forked from and joined back to the origin with events. Under capture those same calls make the graph's
// nodes and edges; eagerly they run.

#include <memory>
#include <vector>

#include "lazygraph/detail/ops/submission.hpp"
#include "lazygraph/driver/stream.hpp"

namespace lazygraph::detail {

class StreamSubmission : public Submission {
 public:
  using Submission::Submission;

  void launch(const KernelSubmission& kernel) override;
  void copy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) override;
  void copy_2d(const Copy2d& copy) override;
  void copy_to_device(CUdeviceptr dst, const void* host, std::size_t bytes) override;
  void copy_to_host(void* host, CUdeviceptr src, std::size_t bytes) override;
  void fill(CUdeviceptr dst, unsigned pattern, std::size_t element_size, std::size_t count) override;

  void begin_fork(std::size_t count) override;
  void enter_branch(std::size_t index) override;
  void leave_branch() override {}
  void end_fork() override;

 protected:
  /// Called by begin_fork for each side stream `side` a fork uses, after it waits for the fork point; `reused`:
  /// an earlier fork of this context used it already.
  virtual void forked(const Stream& side, bool reused) {
    (void)side;
    (void)reused;
  }

 private:
  struct Fork {
    const Stream* origin = nullptr;
    std::size_t first_side = 0;
    std::size_t count = 0;
  };
  const Stream& side_stream(std::size_t index);

  std::vector<Fork> forks_;  ///< the forks in progress, innermost last
  std::vector<std::unique_ptr<Stream>> side_streams_;
  std::size_t side_streams_in_use_ = 0;
  std::vector<Event> events_;  ///< kept until the submission ends: a recorded event wait refers to them
};

}  // namespace lazygraph::detail
