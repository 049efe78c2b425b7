#pragma once
/// \file
/// HostCallErrors: where host functions (host_call) report exceptions. They run on a driver thread, where nothing
/// can catch them, so the first one is kept until the stream's or graph's next launch or synchronize throws it.

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace lazygraph {

/// The error channel of one graph (or one eager ExecContext): host calls report into it from driver threads,
/// the owner rethrows from its own.
class HostCallErrors {
 public:
  /// Keeps `error` from the host call `name` unless an earlier one is pending.
  void report(std::string_view name, std::exception_ptr error) noexcept;
  /// Throws (once) the pending error as HostCallError naming the host call; nothing when none is pending.
  /// Errors of the watched channels (graphs embedded as children) count too.
  void rethrow_pending();
  /// Also reports, from rethrow_pending, what `other` keeps: the host calls of a child graph report to the
  /// child's channel, and the run that embedded it must see them.
  void watch(std::shared_ptr<HostCallErrors> other);

 private:
  std::mutex mutex_;
  std::atomic<bool> pending_{false};   ///< error_ is set (read without the lock on every replay)
  std::atomic<bool> watching_{false};  ///< watched_ is not empty
  std::vector<std::shared_ptr<HostCallErrors>> watched_;
  std::exception_ptr error_;
  std::string name_;
};

}  // namespace lazygraph
