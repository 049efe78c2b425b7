#include "lazygraph/ops/collective.hpp"

#include <cstdint>
#include <mutex>

#include "lazygraph/detail/driver/nccl_api.hpp"
#include "lazygraph/driver/error.hpp"
#include "lazygraph/ops/collective_log.hpp"

namespace lazygraph::detail {

std::string_view nccl_type_name(nccl::DataType type) noexcept {
  switch (type) {
    case nccl::DataType::int8:
      return "int8";
    case nccl::DataType::uint8:
      return "uint8";
    case nccl::DataType::int32:
      return "int32";
    case nccl::DataType::uint32:
      return "uint32";
    case nccl::DataType::int64:
      return "int64";
    case nccl::DataType::uint64:
      return "uint64";
    case nccl::DataType::float16:
      return "float16";
    case nccl::DataType::float32:
      return "float32";
    case nccl::DataType::float64:
      return "float64";
    case nccl::DataType::bfloat16:
      return "bfloat16";
  }
  return "unknown";
}

std::string_view collective_name(CollectiveKind kind) noexcept {
  switch (kind) {
    case CollectiveKind::all_reduce:
      return "all_reduce";
    case CollectiveKind::broadcast:
      return "broadcast";
    case CollectiveKind::reduce_scatter:
      return "reduce_scatter";
    case CollectiveKind::all_gather:
      return "all_gather";
  }
  return "collective";
}

void check_collective(CollectiveKind kind, std::size_t send, std::size_t recv, int ranks, int root) {
  const std::string name(collective_name(kind));
  const auto sizes = [&] {
    return " (send " + std::to_string(send) + " elements, recv " + std::to_string(recv) + ", " + std::to_string(ranks) +
           " ranks)";
  };
  const auto n = static_cast<std::size_t>(ranks);
  switch (kind) {
    case CollectiveKind::all_reduce:
    case CollectiveKind::broadcast:
      if (send != recv) throw UsageError(name + ": send and recv must have the same size" + sizes());
      break;
    case CollectiveKind::reduce_scatter:
      if (send != recv * n) {
        throw UsageError(name + ": send must hold ranks x recv elements, " + std::to_string(recv * n) + sizes());
      }
      break;
    case CollectiveKind::all_gather:
      if (recv != send * n) {
        throw UsageError(name + ": recv must hold ranks x send elements, " + std::to_string(send * n) + sizes());
      }
      break;
  }
  if (kind == CollectiveKind::broadcast && (root < 0 || root >= ranks)) {
    throw UsageError(name + ": root " + std::to_string(root) + " is not a rank of a communicator of " +
                     std::to_string(ranks));
  }
}

void check_collective_device(std::string_view what, int comm_device, int stream_device, const std::string& comm) {
  if (comm_device != stream_device) {
    throw UsageError(std::string(what) + " on a stream of device " + std::to_string(stream_device) +
                     " with communicator " + comm + ": record a rank's collectives on its own device's stream");
  }
}

void check_peer(std::string_view what, int peer, int ranks) {
  if (peer < 0 || peer >= ranks) {
    throw UsageError(std::string(what) + ": peer " + std::to_string(peer) + " is not a rank of a communicator of " +
                     std::to_string(ranks));
  }
}

std::string collective_signature(CollectiveKind kind, nccl::DataType type, std::size_t send, std::size_t recv,
                                 ReduceOp op, int root) {
  std::string s(collective_name(kind));
  if (kind == CollectiveKind::all_reduce || kind == CollectiveKind::reduce_scatter) {
    s.append(" ").append(reduce_op_name(op));
  }
  s.append(" of ").append(std::to_string(kind == CollectiveKind::all_gather ? send : recv));
  s.append(" ").append(nccl_type_name(type));
  if (kind == CollectiveKind::broadcast) s.append(" from rank ").append(std::to_string(root));
  return s;
}

nccl::RedOp nccl_op(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum:
      return nccl::RedOp::sum;
    case ReduceOp::product:
      return nccl::RedOp::prod;
    case ReduceOp::max:
      return nccl::RedOp::max;
    case ReduceOp::min:
      return nccl::RedOp::min;
    case ReduceOp::average:
      return nccl::RedOp::avg;
  }
  return nccl::RedOp::sum;
}

namespace {

/// The shared part of both kinds: device check, keeping the communicator, the ranks' comparison. Nothing is
/// formatted unless it is needed (a mismatch, or a comparison going on): eager collectives pass here on every call.
template <class Signature>
void prepare(ExecContext& ctx, const Communicator& comm, std::string_view what, Signature&& signature) {
  if (comm.device().ordinal() != ctx.stream().device().ordinal()) {
    check_collective_device(what, comm.device().ordinal(), ctx.stream().device().ordinal(), comm.describe());
  }
  (void)comm.get();  // refuses an aborted communicator
  ctx.keep_alive(comm.state());
  if (CollectiveLog* log = CollectiveLog::active(); log != nullptr) log->note(comm, signature());
  if (Clique* clique = comm.state()->clique.get(); clique != nullptr) {
    bool comparing = false;
    {
      const std::lock_guard lock(clique->mutex);
      comparing = clique->comparing;
    }
    if (comparing) clique->note(comm.rank(), signature());
  }
}

/// Makes the collective start only once all the work before it has completed. NCCL launches its symmetric kernels
/// (2.27 and newer) with programmatic stream serialization, so they may start while the kernel before them runs, and
/// NCCL 2.28 and 2.29 dropped the grid dependency wait they need then (restored in 2.30.7, NCCL commit 2948185d,
/// NVIDIA/nccl#1924). After one of our kernels launched early, which lets its dependents start at once, the
/// collective would read its input before that kernel wrote it, and tell its peers this rank's earlier work is
/// done while it still runs. An empty node in between makes the graph's edge into the collective a full one.
/// Eagerly, a 4-byte fill in between does: it starts once the work before it has completed, and a kernel after it
/// cannot start before it (an event recorded and waited for on the same stream did not stop the early start: 2x
/// H100, NCCL 2.28.3). Called with the communicator's mutex held.
void order_after_prior_work(ExecContext& ctx, const Communicator& comm) {
  if (ctx.recording()) {
    ctx.join();
    return;
  }
  const CommunicatorState& state = *comm.state();
  if (!state.fence) state.fence.emplace(state.device, 1);
  ctx.fill(state.fence->view().address(), 0, sizeof(std::uint32_t), 1);
}

}  // namespace

void execute_collective(ExecContext& ctx, const Communicator& comm, CollectiveKind kind, nccl::DataType type,
                        CUdeviceptr send, std::size_t send_count, CUdeviceptr recv, std::size_t recv_count, ReduceOp op,
                        int root) {
  prepare(ctx, comm, collective_name(kind),
          [&] { return collective_signature(kind, type, send_count, recv_count, op, root); });
  const std::string_view object = collective_name(kind);  // NCCL's errors add the rank and device
  const CUcontext context = comm.device().context();
  const CUstream stream = ctx.stream().get();
  // NCCL takes device addresses as pointers.
  const auto* src = reinterpret_cast<const void*>(send);  // NOLINT(performance-no-int-to-ptr)
  auto* dst = reinterpret_cast<void*>(recv);              // NOLINT(performance-no-int-to-ptr)
  const std::lock_guard lock(comm.state()->mutex);
  order_after_prior_work(ctx, comm);
  switch (kind) {
    case CollectiveKind::all_reduce:
      nccl::all_reduce(context, src, dst, recv_count, type, nccl_op(op), comm.get(), stream, object);
      break;
    case CollectiveKind::broadcast:
      nccl::broadcast(context, src, dst, recv_count, type, root, comm.get(), stream, object);
      break;
    case CollectiveKind::reduce_scatter:
      nccl::reduce_scatter(context, src, dst, recv_count, type, nccl_op(op), comm.get(), stream, object);
      break;
    case CollectiveKind::all_gather:
      nccl::all_gather(context, src, dst, send_count, type, comm.get(), stream, object);
      break;
  }
}

void prepare_collective(ExecContext& ctx, const Communicator& comm, std::string_view what,
                        const std::string& signature) {
  prepare(ctx, comm, what, [&] { return signature; });
}

void execute_point_to_point(ExecContext& ctx, const Communicator& comm, std::span<const nccl::PointToPoint> transfers,
                            nccl::DataType type) {
  // Point-to-point groups differ between ranks by nature (rank 0 sends what rank 1 receives): only their order is
  // compared, under one signature.
  prepare(ctx, comm, "send/recv", [&] { return "send/recv " + std::string(nccl_type_name(type)); });
  const std::lock_guard lock(comm.state()->mutex);
  order_after_prior_work(ctx, comm);
  nccl::send_recv(comm.device().context(), transfers, type, comm.get(), ctx.stream().get(), "send/recv");
}

}  // namespace lazygraph::detail
