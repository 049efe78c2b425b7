#include "stream_submission.hpp"

#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/ops/exec_context.hpp"

namespace lazygraph::detail {

void StreamSubmission::launch(const KernelSubmission& k) {
  driver::launch_kernel(current_->device().context(), k.function, k.shape, current_->get(), k.args, k.name);
}

void StreamSubmission::copy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) {
  driver::copy_device_to_device(current_->device().context(), dst, src, bytes, current_->get());
}

void StreamSubmission::copy_2d(const Copy2d& c) {
  driver::copy_device_to_device_2d(current_->device().context(), c.dst, c.dst_pitch, c.src, c.src_pitch, c.width,
                                   c.rows, current_->get());
}

void StreamSubmission::copy_to_device(CUdeviceptr dst, const void* host, std::size_t bytes) {
  driver::copy_host_to_device(current_->device().context(), dst, host, bytes, current_->get());
}

void StreamSubmission::copy_to_host(void* host, CUdeviceptr src, std::size_t bytes) {
  driver::copy_device_to_host(current_->device().context(), host, src, bytes, current_->get());
}

void StreamSubmission::fill(CUdeviceptr dst, unsigned pattern, std::size_t element_size, std::size_t count) {
  driver::fill(current_->device().context(), dst, pattern, element_size, count, current_->get());
}

const Stream& StreamSubmission::side_stream(std::size_t index) {
  while (side_streams_.size() <= index) {
    side_streams_.push_back(std::make_unique<Stream>(Stream::pooled(current_->device())));
  }
  return *side_streams_[index];
}

void StreamSubmission::begin_fork(std::size_t count) {
  const Fork fork{current_, side_streams_in_use_, count};
  side_streams_in_use_ += count - 1;
  const std::size_t existing = side_streams_.size();
  // The side streams start after everything already submitted to the origin (when capturing, this wait is what
  // pulls them into the capture).
  Event& forked_at = events_.emplace_back(current_->device(), false);
  forked_at.record(*current_);
  for (std::size_t i = 1; i < count; ++i) {
    const std::size_t index = fork.first_side + i - 1;
    const Stream& side = side_stream(index);
    side.wait(forked_at);
    forked(side, index < existing);
  }
  forks_.push_back(fork);
}

void StreamSubmission::enter_branch(std::size_t index) {
  const Fork& fork = forks_.back();
  current_ = index == 0 ? fork.origin : &side_stream(fork.first_side + index - 1);
}

void StreamSubmission::end_fork() {
  const Fork fork = forks_.back();
  forks_.pop_back();
  current_ = fork.origin;
  side_streams_in_use_ = fork.first_side;
  // The origin continues only after every branch (when capturing, this joins the branches back).
  for (std::size_t i = 1; i < fork.count; ++i) {
    Event& joined = events_.emplace_back(current_->device(), false);
    joined.record(side_stream(fork.first_side + i - 1));
    fork.origin->wait(joined);
  }
}

}  // namespace lazygraph::detail
