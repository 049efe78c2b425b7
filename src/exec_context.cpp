#include "lazygraph/detail/ops/exec_context.hpp"

namespace lazygraph {

ExecContext::ExecContext(const Stream& stream, bool recording) : current_(&stream), recording_(recording) {}

ExecContext::~ExecContext() = default;

void ExecContext::keep_alive(const std::shared_ptr<const void>& owner) {
  if (!owner) return;
  // Consecutive ops mostly touch the same few buffers: skip owners among the last few kept (a cheap check that
  // keeps a long recording's list near the number of distinct buffers; duplicates further back are harmless).
  const std::size_t n = owners_.size();
  for (std::size_t i = n; i > 0 && i + 8 > n; --i) {
    if (owners_[i - 1] == owner) return;
  }
  owners_.push_back(owner);
}

const Stream& ExecContext::side_stream(std::size_t index) {
  while (side_streams_.size() <= index) {
    side_streams_.push_back(std::make_unique<Stream>(Stream::pooled(current_->device())));
  }
  return *side_streams_[index];
}

ExecContext::Fork ExecContext::begin_fork(std::size_t count) {
  Fork fork{current_, side_streams_in_use_, count};
  side_streams_in_use_ += count - 1;
  // The side streams start after everything already submitted to the origin (when recording, this wait is
  // what pulls them into the capture).
  Event& forked = events_.emplace_back(current_->device(), false);
  forked.record(*current_);
  for (std::size_t i = 1; i < count; ++i) side_stream(fork.first_side + i - 1).wait(forked);
  return fork;
}

void ExecContext::end_fork(Fork& fork) {
  // The origin continues only after every branch (when recording, this joins the branches back).
  for (std::size_t i = 1; i < fork.count; ++i) {
    Event& joined = events_.emplace_back(current_->device(), false);
    joined.record(side_stream(fork.first_side + i - 1));
    fork.origin->wait(joined);
  }
  side_streams_in_use_ = fork.first_side;
}

}  // namespace lazygraph
