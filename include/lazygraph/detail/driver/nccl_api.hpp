#pragma once
/// \file
/// The NCCL foreign-function layer: every call into NCCL goes through the functions declared here, implemented in
/// src/driver/nccl_api.cpp, the one file that loads libnccl.so.2 (at run time, on first use; it is never linked, so a
/// program without NCCL starts and runs everything else). Like driver_api.hpp, each wrapper checks the result and
/// throws NcclError naming the API, the result, NCCL's last error and the object; `*_no_throw` forms never throw.
///
/// Where NCCL is looked for, in order: the path given to set_library_path (before first use), the environment
/// variable LAZYGRAPH_NCCL_LIBRARY, the loader's search for "libnccl.so.2" (LD_LIBRARY_PATH, the loader cache),
/// then the `nvidia/nccl/lib` folder of the NCCL wheel that PyTorch installs, in the usual Python package folders
/// ($VIRTUAL_ENV, $CONDA_PREFIX, ~/.local, /usr/local/lib, /usr/lib, /opt/conda, and the environment of each
/// PATH entry ending in /bin, such as a virtual environment's). An explicit path (the first two)
/// is used alone: when it does not load, nothing else is tried.
///
/// The types of nccl.h's ABI that these functions take (NCCL 2.x) are in nccl_types.hpp, so that building lazygraph
/// needs no nccl.h and public headers can name a communicator without reaching these functions.

#include <cuda.h>

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lazygraph/detail/driver/nccl_types.hpp"

namespace lazygraph::detail::nccl {

/// Uses the NCCL library at `path` instead of searching. \throws UsageError once NCCL has been loaded (from
/// another path).
void set_library_path(std::string path);
/// Loads NCCL once per process; later calls are cheap. \throws NcclUnavailable saying where it looked.
void ensure_loaded();
/// ensure_loaded without throwing: false with the reason in `why` (when not null).
bool try_load(std::string* why) noexcept;
/// The file NCCL was loaded from. \throws NcclUnavailable.
std::string library_path();
/// ncclGetVersion: e.g. 22803 for 2.28.3. \throws NcclUnavailable.
int version();
/// "2.28.3". \throws NcclUnavailable.
std::string version_text(int code);

/// The name of a result, e.g. "ncclInvalidUsage" ("ncclResult_t <n>" for one this header does not know).
std::string result_name(int code);
/// Throws NcclError for a failed result, with NCCL's description and `comm`'s last error (when not null).
[[noreturn]] void throw_error(int code, std::string_view api, std::string_view object, Comm comm = nullptr);

UniqueId get_unique_id();
/// Rank `rank` of `ranks`, with `ctx` (the device's primary context) current, which is the device NCCL binds to:
/// returns a blocking communicator once every rank has joined.
///
/// With a bounded join (bounded_join_supported(): NCCL 2.18 or newer) the rank joins through a non-blocking
/// communicator (ncclCommInitRankConfig, blocking = 0), whose wait for the peers can be given up, then every rank
/// splits it into the blocking communicator returned (ncclCommSplit, blocking = 1) and the non-blocking one is
/// destroyed: no call is ever made on a non-blocking communicator but the join, the split and its teardown, since
/// NCCL completes a non-blocking communicator's group on its own thread, after a graph capture may have ended.
/// Joining and splitting together wait at most `timeout`; past it the communicators are aborted and TimeoutError
/// names the rank, the ranks and the timeout. Without a bounded join: ncclCommInitRank, which waits without a bound
/// (`timeout` is unused). \throws NcclUnavailable, NcclError, TimeoutError.
Comm comm_init_rank(CUcontext ctx, int ranks, const UniqueId& id, int rank, std::string_view object,
                    std::chrono::milliseconds timeout);
/// Whether comm_init_rank bounds its wait for the other ranks: NCCL loads, is 2.18 or newer and has
/// ncclCommInitRankConfig, ncclCommSplit and ncclCommFinalize. Never throws.
bool bounded_join_supported() noexcept;
/// ncclCommInitAll over `devices` (ordinals): one communicator per device, rank i on devices[i].
std::vector<Comm> comm_init_all(std::span<const int> devices);
/// ncclCommFinalize then ncclCommDestroy (waits for the communicator's outstanding work to finish).
void comm_destroy_no_throw(Comm comm) noexcept;
/// ncclCommAbort: frees the communicator at once, stopping its kernels that still wait for peers.
void comm_abort_no_throw(Comm comm) noexcept;
/// ncclCommGetAsyncError: what went wrong in the communicator's background work (success when nothing).
Result comm_async_error(Comm comm);
int comm_count(Comm comm);
int comm_device(Comm comm);
int comm_rank(Comm comm);

// The collectives, enqueued on `stream` (or captured, when it captures) in `ctx`. `object` names the op for errors.
void all_reduce(CUcontext ctx, const void* send, void* recv, std::size_t count, DataType type, RedOp op, Comm comm,
                CUstream stream, std::string_view object);
void broadcast(CUcontext ctx, const void* send, void* recv, std::size_t count, DataType type, int root, Comm comm,
               CUstream stream, std::string_view object);
/// `recv_count` elements per rank.
void reduce_scatter(CUcontext ctx, const void* send, void* recv, std::size_t recv_count, DataType type, RedOp op,
                    Comm comm, CUstream stream, std::string_view object);
/// `send_count` elements per rank.
void all_gather(CUcontext ctx, const void* send, void* recv, std::size_t send_count, DataType type, Comm comm,
                CUstream stream, std::string_view object);
/// One group (ncclGroupStart/End) of sends and receives: `sends[i]` goes to `peers_to[i]`, `recvs[j]` comes from
/// `peers_from[j]` (PointToPoint, nccl_types.hpp).
void send_recv(CUcontext ctx, std::span<const PointToPoint> transfers, DataType type, Comm comm, CUstream stream,
               std::string_view object);
/// Whether this NCCL has symmetric memory (ncclMemAlloc and ncclCommWindowRegister, NCCL 2.27+); false with the
/// reason in `why` (when not null), also when NCCL does not load.
bool symmetric_supported(std::string* why) noexcept;
/// ncclMemAlloc of `bytes` on `ctx`'s device (memory NCCL can map into its peers: cuMem, granularity-aligned).
void* mem_alloc(CUcontext ctx, std::size_t bytes, std::string_view object);
/// ncclMemFree, with `ctx` current.
void mem_free_no_throw(CUcontext ctx, void* p) noexcept;
/// ncclCommWindowRegister of buffers[i] (bytes each) with comms[i] as one symmetric window, every rank in one group
/// from this thread (the registration is collective: every rank of the communicators must be here).
std::vector<Window> window_register_all(std::span<const Comm> comms, std::span<void* const> buffers, std::size_t bytes,
                                        std::string_view object);
/// ncclCommWindowDeregister (local to the rank).
void window_deregister_no_throw(Comm comm, Window window) noexcept;

/// ncclGroupStart / ncclGroupEnd: the calls between them (on several communicators of one process, as one
/// thread driving several GPUs must) are issued together.
void group_start();
void group_end(std::string_view object);

}  // namespace lazygraph::detail::nccl
