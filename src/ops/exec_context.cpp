#include "lazygraph/ops/exec_context.hpp"

#include <nvtx3/nvToolsExt.h>

#include <utility>

#include "lazygraph/detail/ops/graph_access.hpp"
#include "lazygraph/detail/ops/submission.hpp"
#include "lazygraph/driver/error.hpp"

namespace lazygraph {

ExecContext::ExecContext(const Stream& stream, bool recording, std::shared_ptr<HostCallErrors> host_errors)
    : owned_(recording ? detail::capture_submission(stream) : detail::eager_submission(stream)),
      submission_(owned_.get()),
      recording_(recording),
      planning_(false),
      host_errors_(std::move(host_errors)) {}

ExecContext::ExecContext(const Stream& stream, detail::NodePlan& plan, std::shared_ptr<HostCallErrors> host_errors)
    : owned_(detail::plan_submission(stream, plan)),
      submission_(owned_.get()),
      recording_(true),
      planning_(true),
      host_errors_(std::move(host_errors)) {}

ExecContext::ExecContext(detail::Submission& submission, std::shared_ptr<HostCallErrors> host_errors)
    : submission_(&submission),
      recording_(submission.recording()),
      planning_(submission.plan() != nullptr),
      host_errors_(std::move(host_errors)) {}

ExecContext::~ExecContext() {
  if (!submission_->submitted_host_calls() || owners_.empty()) return;
  try {
    submission_->origin().synchronize();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a failed stream has stopped running its work, host calls included
  }
}

const Stream& ExecContext::stream() const noexcept { return submission_->current(); }

const std::shared_ptr<HostCallErrors>& ExecContext::host_errors() {
  if (!host_errors_) host_errors_ = std::make_shared<HostCallErrors>();
  return host_errors_;
}

void ExecContext::keep_alive(const std::shared_ptr<const void>& owner) {
  if (!owner) return;
  if (owner.get() == &detail::scratch_marker) [[unlikely]] {
    if (hooks_ == nullptr) {
      throw UsageError(
          "an op uses scratch memory of a graph (Scope::scratch) outside that graph: scratch memory exists only "
          "while its graph runs; record the op in the same scope, or use a DeviceBuffer");
    }
    hooks_->check_scratch(owner);
  }
  // Consecutive ops mostly touch the same few buffers: skip owners among the last few kept (a cheap check that
  // keeps a long recording's list near the number of distinct buffers; duplicates further back are harmless).
  const std::size_t n = owners_.size();
  for (std::size_t i = n; i > 0 && i + 8 > n; --i) {
    if (owners_[i - 1] == owner) return;
  }
  owners_.push_back(owner);
}

void ExecContext::launch(const KernelSubmission& kernel) {
  const bool observed = observer_ != nullptr && !recording_;
  if (observed) observer_->before(kernel, stream(), labels_);
  submission_->launch(kernel);
  if (observed) observer_->after(kernel, stream());
}

void ExecContext::push_label(const std::string& label) {
  nvtxRangePushA(label.c_str());
  labels_.emplace_back(label);
}

void ExecContext::pop_label() noexcept {
  if (labels_.empty()) return;
  labels_.pop_back();
  nvtxRangePop();
}

void ExecContext::copy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) {
  if (bytes != 0) submission_->copy(dst, src, bytes);
}

void ExecContext::copy_2d(CUdeviceptr dst, std::size_t dst_pitch, CUdeviceptr src, std::size_t src_pitch,
                          std::size_t width, std::size_t rows) {
  if (width == 0 || rows == 0) return;
  // One row: the pitches are not used, and the driver gets the row length for them (any pitch is valid then).
  if (rows == 1) dst_pitch = src_pitch = width;
  submission_->copy_2d({dst, dst_pitch, src, src_pitch, width, rows});
}

void ExecContext::copy_to_device(CUdeviceptr dst, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  count_host_transfer(bytes, 0);
  submission_->copy_to_device(dst, host, bytes);
}

void ExecContext::copy_to_host(void* host, CUdeviceptr src, std::size_t bytes) {
  if (bytes == 0) return;
  count_host_transfer(0, bytes);
  submission_->copy_to_host(host, src, bytes);
}

void ExecContext::count_host_transfer(std::size_t to_device, std::size_t to_host) noexcept {
  if (hooks_ != nullptr) hooks_->count_host_transfer(to_device, to_host);
}

void ExecContext::fill(CUdeviceptr dst, unsigned pattern, std::size_t element_size, std::size_t count) {
  if (count != 0) submission_->fill(dst, pattern, element_size, count);
}

void ExecContext::host_function(CUhostFn fn, void* data, std::string_view name) {
  if (hooks_ != nullptr) hooks_->check_submittable("a host call");
  submission_->host_function(fn, data, name);
}

void ExecContext::join() { submission_->join(); }

void ExecContext::record_event(CUevent event) {
  if (hooks_ != nullptr) hooks_->check_submittable("an event record");
  submission_->record_event(event);
}

void ExecContext::wait_event(CUevent event) {
  if (hooks_ != nullptr) hooks_->check_submittable("an event wait");
  submission_->wait_event(event);
}

void ExecContext::begin_fork(std::size_t count) { submission_->begin_fork(count); }
void ExecContext::enter_branch(std::size_t index) { submission_->enter_branch(index); }
void ExecContext::leave_branch() { submission_->leave_branch(); }
void ExecContext::end_fork() { submission_->end_fork(); }
void ExecContext::begin_dataflow(std::size_t count) { submission_->begin_dataflow(count); }
void ExecContext::enter_piece(std::span<const std::uint32_t> after) { submission_->enter_piece(after); }
void ExecContext::leave_piece(std::size_t index) { submission_->leave_piece(index); }
void ExecContext::end_dataflow(std::span<const std::vector<std::uint32_t>> after) { submission_->end_dataflow(after); }

}  // namespace lazygraph
