#pragma once
/// \file
/// Access sets: which device memory an op reads and which it writes, as byte ranges, derived from its typed
/// arguments — a kernel launch from each span parameter's constness (`const T*` reads, `T*` writes), a copy from
/// its two spans, a fill from its destination — and, for a composite, the union of its parts'. `all(...)` uses
/// them to refuse branches that race, `dataflow(...)` to order ops only where they conflict.
///
/// An op says what it touches with a const member `void accesses(AccessSet&) const`. One that does not (an op of
/// your own, a host call, an event, a conditional or child graph) is *opaque*: it may touch anything, so
/// dataflow orders it after everything before it and everything after it after it, and the race check of `all`
/// cannot see into it (it checks the rest). `with_accesses(name, op, reads(...), writes(...))` (declared_accesses.hpp)
/// declares what an op touches, replacing what it would report.
///
/// What is recorded is what the spans view, an upper bound: a kernel given a whole buffer that writes only a row
/// of it is taken to write all of it. Pass subspans (or declare the accesses) where that matters.

#include <cuda.h>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "lazygraph/detail/driver/type_name.hpp"
#include "lazygraph/driver/device_span.hpp"

namespace lazygraph {

/// One range of device memory an op reads, or writes (a write may read too).
struct MemoryAccess {
  /// The first byte.
  CUdeviceptr begin = 0;
  /// How many bytes from `begin`.
  std::size_t bytes = 0;
  /// True for a write (which may also read), false for a read.
  bool writes = false;
  /// What touches it: a kernel's name, "copy", "fill", a `named()` label. A view: it must outlive the set (the
  /// names ops give live as long as the ops).
  std::string_view op;

  /// One past the last byte.
  [[nodiscard]] CUdeviceptr end() const noexcept { return begin + bytes; }
  /// True when the two ranges share a byte.
  [[nodiscard]] bool overlaps(const MemoryAccess& other) const noexcept {
    return bytes != 0 && other.bytes != 0 && begin < other.end() && other.begin < end();
  }
};

/// What an op (or a group of ops) reads and writes: a list of MemoryAccess, or *opaque* when some part did not say
/// (see the file comment).
class AccessSet {
 public:
  /// Records a read of `bytes` bytes at `begin` by `op`. Nothing for 0 bytes.
  void read(CUdeviceptr begin, std::size_t bytes, std::string_view op) { add({begin, bytes, false, op}); }
  /// Records a write (possibly also a read) of `bytes` bytes at `begin` by `op`. Nothing for 0 bytes.
  void write(CUdeviceptr begin, std::size_t bytes, std::string_view op) { add({begin, bytes, true, op}); }
  /// Records a read of what `span` views.
  template <class T>
  void read(const DeviceSpan<T>& span, std::string_view op) {
    read(span.address(), span.size_bytes(), op);
  }
  /// Records a write of what `span` views (a read-only span cannot be written: a compile error).
  template <class T>
  void write(const DeviceSpan<T>& span, std::string_view op) {
    static_assert(!std::is_const_v<T>, "AccessSet::write: a read-only DeviceSpan<const T> is never written");
    write(span.address(), span.size_bytes(), op);
  }
  /// Records that `op` may touch any memory: the set becomes opaque. The first such op is kept, for messages.
  void opaque(std::string_view op) {
    if (!opaque_) opaque_op_ = std::string(op);
    opaque_ = true;
  }
  /// Adds everything `other` records.
  void merge(const AccessSet& other) {
    entries_.insert(entries_.end(), other.entries_.begin(), other.entries_.end());
    if (other.opaque_) opaque(other.opaque_op_);
  }

  /// The ranges recorded, in the order they were.
  [[nodiscard]] std::span<const MemoryAccess> entries() const noexcept { return entries_; }
  /// True when some op of the set did not say what it touches.
  [[nodiscard]] bool is_opaque() const noexcept { return opaque_; }
  /// The first op that made the set opaque (its type name), or empty.
  [[nodiscard]] const std::string& opaque_op() const noexcept { return opaque_op_; }
  /// True when nothing is recorded and the set is not opaque.
  [[nodiscard]] bool empty() const noexcept { return entries_.empty() && !opaque_; }

 private:
  void add(const MemoryAccess& a) {
    if (a.bytes != 0) entries_.push_back(a);
  }
  std::vector<MemoryAccess> entries_;
  std::string opaque_op_;
  bool opaque_ = false;
};

/// Two accesses of different ops (or groups) that overlap where at least one writes.
struct AccessConflict {
  MemoryAccess first;   ///< of the earlier op
  MemoryAccess second;  ///< of the later op
  /// "read-after-write", "write-after-read" or "write-after-write", the later op's access after the earlier's.
  [[nodiscard]] std::string_view kind() const noexcept {
    if (!first.writes) return "write-after-read";
    return second.writes ? "write-after-write" : "read-after-write";
  }
  /// One sentence naming both ops, what each does and the bytes they share, e.g.
  /// `"axpy" writes bytes [0x7f00..., +4096) that "copy" reads (read-after-write)`.
  [[nodiscard]] std::string describe() const;
};

/// The first conflict between the known accesses of `earlier` and `later` (opaque parts are not looked at: test
/// is_opaque() for those), or nothing.
std::optional<AccessConflict> find_conflict(const AccessSet& earlier, const AccessSet& later);

/// True for an op that says what it touches (a const `accesses(AccessSet&)` member).
template <class Op>
concept DeclaresAccesses = requires(const Op& op, AccessSet& out) {
  op.accesses(out);
};

/// Adds what `op` touches to `out`: its own declaration, or, for an op that makes none, an opaque entry naming
/// its type.
template <class Op>
void collect_accesses(const Op& op, AccessSet& out) {
  if constexpr (DeclaresAccesses<Op>) {
    op.accesses(out);
  } else {
    out.opaque(detail::type_name<Op>());
  }
}

/// What `op` reads and writes (see the file comment).
template <class Op>
[[nodiscard]] AccessSet accesses_of(const Op& op) {
  AccessSet set;
  collect_accesses(op, set);
  return set;
}

namespace detail {
/// The address of host memory (pinned staging memory, which unified addressing keeps apart from device memory) as
/// an access range's start.
inline CUdeviceptr host_address(const void* p) noexcept {
  return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p));
}

/// \throws UsageError naming the first two of `branches` (of an `all`) whose accesses conflict, both ops and the
///         bytes; nothing when none do. Opaque branches are skipped.
void check_branches_independent(std::span<const AccessSet> branches);

/// For each of `sets` (ops in program order), the earlier ops it must follow directly: j after i when their known
/// accesses conflict or either is opaque, less the edges implied through others (transitive reduction). Indices
/// ascend within each list.
std::vector<std::vector<std::uint32_t>> direct_dependencies(std::span<const AccessSet> sets);
/// For each of `sets` (ops in program order), the earlier ops it must follow: j after i when their known accesses
/// conflict or either is opaque, minus the edges implied through others (transitive reduction); then a node whose
/// latest predecessor is itself a join waits for that one alone, the join taking in its other predecessors (fewer
/// joins; see dataflow.hpp). Keeps program order's results. Indices ascend within each list.
std::vector<std::vector<std::uint32_t>> infer_dependencies(std::span<const AccessSet> sets);
}  // namespace detail

}  // namespace lazygraph
