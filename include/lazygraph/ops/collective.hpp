#pragma once
/// \file
/// NCCL collectives as ops: `all_reduce`, `all_gather`, `reduce_scatter`, `broadcast`, and point-to-point
/// `send` / `recv` / `send_recv`, over typed device spans of one rank (Communicator, driver layer). Each is a
/// GraphNode: it composes with `>>` and `all`, is accepted by Scope::record and is captured into the rank's graph
/// (NCCL's kernels become kernel nodes). CudaGraph::build refuses them at compile time: NCCL can only be captured.
///
/// Every rank runs the same collectives in the same order with matching sizes (NCCL's rule). Sizes are checked
/// against the communicator's size when the op is built; the device when it executes (the stream's device must be
/// the communicator's). Ranks of one process (Communicator::create_all) recorded together by MultiDeviceGraph are
/// also compared with each other before NCCL sees them, so that a mismatch is a UsageError rather than a hang.
///
/// Element types: half, bfloat16, float, double, and 8/32/64-bit integers (int8_t, uint8_t, int32_t, uint32_t,
/// int64_t, uint64_t).

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "lazygraph/detail/driver/nccl_types.hpp"
#include "lazygraph/driver/bfloat16.hpp"
#include "lazygraph/driver/communicator.hpp"
#include "lazygraph/driver/device_span.hpp"
#include "lazygraph/driver/half.hpp"
#include "lazygraph/ops/access.hpp"
#include "lazygraph/ops/concepts.hpp"
#include "lazygraph/ops/exec_context.hpp"

namespace lazygraph {

namespace detail {

template <class T>
struct NcclTypeOf {};
template <>
struct NcclTypeOf<half> : std::integral_constant<nccl::DataType, nccl::DataType::float16> {};
template <>
struct NcclTypeOf<bfloat16> : std::integral_constant<nccl::DataType, nccl::DataType::bfloat16> {};
template <>
struct NcclTypeOf<float> : std::integral_constant<nccl::DataType, nccl::DataType::float32> {};
template <>
struct NcclTypeOf<double> : std::integral_constant<nccl::DataType, nccl::DataType::float64> {};
template <>
struct NcclTypeOf<std::int8_t> : std::integral_constant<nccl::DataType, nccl::DataType::int8> {};
template <>
struct NcclTypeOf<std::uint8_t> : std::integral_constant<nccl::DataType, nccl::DataType::uint8> {};
template <>
struct NcclTypeOf<std::int32_t> : std::integral_constant<nccl::DataType, nccl::DataType::int32> {};
template <>
struct NcclTypeOf<std::uint32_t> : std::integral_constant<nccl::DataType, nccl::DataType::uint32> {};
template <>
struct NcclTypeOf<std::int64_t> : std::integral_constant<nccl::DataType, nccl::DataType::int64> {};
template <>
struct NcclTypeOf<std::uint64_t> : std::integral_constant<nccl::DataType, nccl::DataType::uint64> {};

/// The kinds of collective (CollectiveOp).
enum class CollectiveKind { all_reduce, broadcast, reduce_scatter, all_gather };

/// "float16", "float32", ...: NCCL's names, for messages and the ranks' comparison.
std::string_view nccl_type_name(nccl::DataType type) noexcept;
/// "all_reduce", ...
std::string_view collective_name(CollectiveKind kind) noexcept;

/// The sizes a collective over `ranks` ranks needs: all_reduce and broadcast send and receive the same count,
/// reduce_scatter sends `ranks` times what it receives, all_gather receives `ranks` times what it sends.
/// \throws UsageError naming both sizes and the rule; for root outside [0, ranks) (broadcast).
void check_collective(CollectiveKind kind, std::size_t send, std::size_t recv, int ranks, int root);
/// \throws UsageError when `stream_device` is not the communicator's device (`comm_device`), naming both.
void check_collective_device(std::string_view what, int comm_device, int stream_device, const std::string& comm);
/// \throws UsageError for a peer outside [0, ranks).
void check_peer(std::string_view what, int peer, int ranks);
/// What the ranks compare: "all_reduce sum of 1024 float16".
std::string collective_signature(CollectiveKind kind, nccl::DataType type, std::size_t send, std::size_t recv,
                                 ReduceOp op, int root);
nccl::RedOp nccl_op(ReduceOp op) noexcept;

/// Everything a collective does when it executes, after the op checked its arguments: the device check, the
/// ranks' comparison, keeping the communicator alive, the NCCL call under the communicator's lock.
void execute_collective(ExecContext& ctx, const Communicator& comm, CollectiveKind kind, nccl::DataType type,
                        CUdeviceptr send, std::size_t send_count, CUdeviceptr recv, std::size_t recv_count, ReduceOp op,
                        int root);
void execute_point_to_point(ExecContext& ctx, const Communicator& comm, std::span<const nccl::PointToPoint> transfers,
                            nccl::DataType type);
/// What a collective does before NCCL runs it (the device check, refusing an aborted communicator, keeping it alive,
/// the ranks' comparison under `signature`), for a collective that kernels carry out (CollectiveCheckOp).
void prepare_collective(ExecContext& ctx, const Communicator& comm, std::string_view what,
                        const std::string& signature);

}  // namespace detail

/// The element types NCCL reduces and moves.
template <class T>
concept CollectiveElement = requires {
  detail::NcclTypeOf<std::remove_const_t<T>>::value;
};

/// all_reduce, broadcast, reduce_scatter or all_gather on one rank (made by those functions).
template <CollectiveElement T>
class [[nodiscard]] CollectiveOp : public OpBase<CollectiveOp<T>> {
 public:
  /// No output.
  using Output = void;
  /// A GraphNode: NCCL's kernels are captured as kernel nodes; nothing is allocated.
  static constexpr bool is_graph_node = true;

  /// \throws UsageError when the sizes do not fit the kind and the communicator's size, or the root is no rank.
  CollectiveOp(detail::CollectiveKind kind, Communicator comm, DeviceSpan<const T> send, DeviceSpan<T> recv,
               ReduceOp op, int root)
      : kind_(kind), comm_(std::move(comm)), send_(std::move(send)), recv_(std::move(recv)), op_(op), root_(root) {
    detail::check_collective(kind_, send_.size(), recv_.size(), comm_.size(), root_);
  }
  /// Enqueues (or, capturing, records) the collective on the context's stream.
  /// \throws UsageError when the stream is on another device than the communicator, or it was aborted.
  void execute(ExecContext& ctx) const {
    ctx.keep_alive(send_.owner());
    ctx.keep_alive(recv_.owner());
    detail::execute_collective(ctx, comm_, kind_, detail::NcclTypeOf<T>::value, send_.address(), send_.size(),
                               recv_.address(), recv_.size(), op_, root_);
  }
  /// Reads `send`, writes `recv` (the same span for the in-place forms).
  void accesses(AccessSet& out) const {
    const std::string_view what = detail::collective_name(kind_);
    out.read(send_, what);
    out.write(recv_, what);
  }

 private:
  detail::CollectiveKind kind_;
  Communicator comm_;
  DeviceSpan<const T> send_;
  DeviceSpan<T> recv_;
  ReduceOp op_;
  int root_;
};

/// The bookkeeping of a collective that a kernel of one's own carries out among the ranks (nn's peer_all_reduce):
/// executed just before that kernel, it checks the stream's device, refuses an aborted communicator, keeps `owner`
/// (the memory the kernel exchanges through) alive with the graph, and enters `signature` in the ranks' comparison
/// (CollectiveLog, the clique's), so that ranks that disagree fail as they would over NCCL's collectives. Runs
/// nothing on the GPU.
class [[nodiscard]] CollectiveCheckOp : public OpBase<CollectiveCheckOp> {
 public:
  /// No output.
  using Output = void;
  /// A GraphNode: it adds no node.
  static constexpr bool is_graph_node = true;

  /// `what` names the collective in errors ("peer_all_reduce"); `signature` is what the ranks compare ("peer
  /// all_reduce sum of 4096 float16"); `owner` is kept alive with the graph.
  CollectiveCheckOp(Communicator comm, std::string what, std::string signature, std::shared_ptr<const void> owner)
      : comm_(std::move(comm)), what_(std::move(what)), signature_(std::move(signature)), owner_(std::move(owner)) {}
  /// \throws UsageError when the stream is on another device than the communicator, or it was aborted; as the
  /// comparison does.
  void execute(ExecContext& ctx) const {
    detail::prepare_collective(ctx, comm_, what_, signature_);
    ctx.keep_alive(owner_);
  }
  /// Touches no memory.
  void accesses(AccessSet& /*out*/) const {}

 private:
  Communicator comm_;
  std::string what_;
  std::string signature_;
  std::shared_ptr<const void> owner_;
};

/// Sends and receives of one rank, issued as one NCCL group (made by send, recv and send_recv): the group's
/// transfers proceed together, so two ranks may each send to and receive from the other in one op.
template <CollectiveElement T>
class [[nodiscard]] PointToPointOp : public OpBase<PointToPointOp<T>> {
 public:
  /// No output.
  using Output = void;
  /// A GraphNode, as CollectiveOp.
  static constexpr bool is_graph_node = true;

  /// \throws UsageError for a peer that is no rank.
  PointToPointOp(Communicator comm, std::vector<std::pair<DeviceSpan<const T>, int>> sends,
                 std::vector<std::pair<DeviceSpan<T>, int>> recvs)
      : comm_(std::move(comm)), sends_(std::move(sends)), recvs_(std::move(recvs)) {
    for (const auto& s : sends_) detail::check_peer("send", s.second, comm_.size());
    for (const auto& r : recvs_) detail::check_peer("recv", r.second, comm_.size());
  }
  /// Enqueues (or records) the group on the context's stream.
  void execute(ExecContext& ctx) const {
    std::vector<detail::nccl::PointToPoint> transfers;
    transfers.reserve(sends_.size() + recvs_.size());
    for (const auto& [span, peer] : sends_) {
      ctx.keep_alive(span.owner());
      // NOLINTNEXTLINE(performance-no-int-to-ptr): NCCL takes device addresses as pointers
      transfers.push_back({reinterpret_cast<const void*>(span.address()), nullptr, span.size(), peer});
    }
    for (const auto& [span, peer] : recvs_) {
      ctx.keep_alive(span.owner());
      // NOLINTNEXTLINE(performance-no-int-to-ptr): as above
      transfers.push_back({nullptr, reinterpret_cast<void*>(span.address()), span.size(), peer});
    }
    detail::execute_point_to_point(ctx, comm_, transfers, detail::NcclTypeOf<T>::value);
  }
  /// Reads what it sends, writes what it receives.
  void accesses(AccessSet& out) const {
    for (const auto& s : sends_) out.read(s.first, "send");
    for (const auto& r : recvs_) out.write(r.first, "recv");
  }

 private:
  Communicator comm_;
  std::vector<std::pair<DeviceSpan<const T>, int>> sends_;
  std::vector<std::pair<DeviceSpan<T>, int>> recvs_;
};

/// recv = op over the ranks of each rank's send. \throws UsageError unless both have the same size.
template <CollectiveElement T>
CollectiveOp<T> all_reduce(const Communicator& comm, std::type_identity_t<DeviceSpan<const T>> send, DeviceSpan<T> recv,
                           ReduceOp op = ReduceOp::sum) {
  return {detail::CollectiveKind::all_reduce, comm, std::move(send), std::move(recv), op, 0};
}
/// In place: every rank's `data` becomes op over the ranks' `data`.
template <CollectiveElement T>
CollectiveOp<T> all_reduce(const Communicator& comm, DeviceSpan<T> data, ReduceOp op = ReduceOp::sum) {
  return {detail::CollectiveKind::all_reduce, comm, data.as_const(), data, op, 0};
}
/// Every rank's recv = root's send (send is read on the root only). \throws UsageError for sizes that differ or a
/// root that is no rank.
template <CollectiveElement T>
CollectiveOp<T> broadcast(const Communicator& comm, std::type_identity_t<DeviceSpan<const T>> send, DeviceSpan<T> recv,
                          int root) {
  return {detail::CollectiveKind::broadcast, comm, std::move(send), std::move(recv), ReduceOp::sum, root};
}
/// In place: every rank's `data` becomes root's.
template <CollectiveElement T>
CollectiveOp<T> broadcast(const Communicator& comm, DeviceSpan<T> data, int root) {
  return {detail::CollectiveKind::broadcast, comm, data.as_const(), data, ReduceOp::sum, root};
}
/// recv (n elements) = block `rank` of op over the ranks' send (ranks * n elements).
/// \throws UsageError unless send.size() == ranks * recv.size().
template <CollectiveElement T>
CollectiveOp<T> reduce_scatter(const Communicator& comm, std::type_identity_t<DeviceSpan<const T>> send,
                               DeviceSpan<T> recv, ReduceOp op = ReduceOp::sum) {
  return {detail::CollectiveKind::reduce_scatter, comm, std::move(send), std::move(recv), op, 0};
}
/// recv (ranks * n elements) = the ranks' send (n elements each), in rank order.
/// \throws UsageError unless recv.size() == ranks * send.size().
template <CollectiveElement T>
CollectiveOp<T> all_gather(const Communicator& comm, std::type_identity_t<DeviceSpan<const T>> send,
                           DeviceSpan<T> recv) {
  return {detail::CollectiveKind::all_gather, comm, std::move(send), std::move(recv), ReduceOp::sum, 0};
}
/// Sends `data` to rank `peer`, which must receive as many elements from this rank (recv).
template <CollectiveElement T>
PointToPointOp<T> send(const Communicator& comm, std::type_identity_t<DeviceSpan<const T>> data, int peer) {
  return {comm, {{std::move(data), peer}}, {}};
}
/// Receives `data` from rank `peer`.
template <CollectiveElement T>
PointToPointOp<T> recv(const Communicator& comm, DeviceSpan<T> data, int peer) {
  return {comm, {}, {{std::move(data), peer}}};
}
/// Sends `out` to `to` and receives `in` from `from` as one group (an exchange or a ring shift).
template <CollectiveElement T>
PointToPointOp<T> send_recv(const Communicator& comm, std::type_identity_t<DeviceSpan<const T>> out, int to,
                            DeviceSpan<T> in, int from) {
  return {comm, {{std::move(out), to}}, {{std::move(in), from}}};
}

}  // namespace lazygraph
