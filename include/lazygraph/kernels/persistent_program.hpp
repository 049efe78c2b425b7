#pragma once
/// \file
/// PersistentProgram: a list of tile-function calls (tile_function.hpp) lowered into ONE persistent kernel launch.
///
/// Inside a CUDA graph every kernel boundary costs microseconds on the GPU; a decode step of small ops is mostly
/// boundaries. A program runs its calls in one launch instead: one block per resident slot, each running a queue of
/// tiles in program order (detail/kernels/persistent_schedule.hpp), a tile waiting only for what it depends on —
/// derived from the calls' access sets, as dataflow(...) orders ops — through counters and flags in device memory
/// that tiles set when done. A call that says what each of its tiles touches (TileCall::with_tile_accesses) lets a
/// later call's tiles wait for just the tiles they conflict with, not the whole call: the pipelining a kernel
/// boundary rules out. A tile loads what no earlier call writes (its weights) before it waits, so the next tiles'
/// loads overlap the current ones' end (kernels/include/lazygraph/tile.cuh).
///
/// `op()` is a GraphNode (the counters cleared, then the launch): record it into a graph, compose it with `>>`,
/// staging copies and `while_`, replay it behind Module::forward. `graph_op()` is the same calls as one
/// early-launched kernel each, ordered by dataflow: the same tile code on the graph path, to compare and to fall
/// back on.
///
/// The generated kernel includes every kernel file that defines a tile function of the program, in one translation
/// unit: names at file scope (in anonymous namespaces too) must not clash between those files, or the program fails
/// to compile with NVRTC's message. It is compiled when the program is made (or loaded from the library's disk
/// cache), never during a capture.
///
/// Errors: a wait that outlasts `PersistentOptions::timeout` (a counter that never fills: a bug, a fault) ends the
/// kernel with an error recorded in device memory instead of hanging; `check()` turns it into an exception. Until it
/// is collected, later launches of the program run nothing (their results are stale). The host cannot see the error
/// sooner: check after the runs whose results you read.
///
/// Thread safety: ops of one program share its counters, so two runs of it must not overlap (a graph replayed from
/// one stream at a time is fine). `check` must not race a run.
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lazygraph/detail/kernels/persistent_schedule.hpp"
#include "lazygraph/driver/stream.hpp"
#include "lazygraph/kernels/launch_op.hpp"
#include "lazygraph/kernels/tile_function.hpp"
#include "lazygraph/ops/dataflow.hpp"
#include "lazygraph/ops/fill.hpp"

namespace lazygraph {

/// How a persistent program runs.
struct PersistentOptions {
  /// Threads per block, the same for every tile (a tile function sees them as tile.threads()): a multiple of 32.
  unsigned threads = 256;
  /// Blocks of the kernel; 0: as many as the occupancy query says can be resident at once (more are refused).
  unsigned blocks = 0;
  /// The second argument of the kernel's __launch_bounds__: blocks per multiprocessor the compiler must fit.
  unsigned min_blocks_per_sm = 1;
  /// How long a tile may wait for one call before the kernel gives up with an error (see the file comment).
  std::chrono::milliseconds timeout{2000};
  /// The pause between two polls of a counter that is not there yet (__nanosleep; 0: poll without pausing). Many
  /// blocks polling one counter without a pause slowed the phases of an earlier persistent kernel down (H100,
  /// docs/decode_performance.md).
  unsigned poll_pause_ns = 32;
  /// Stamp every tile with the GPU's clock (%globaltimer) as it is taken, starts and ends its wait, and is counted
  /// done, for PersistentProgram::profile. Costs four stores per tile.
  bool profile = false;
  /// Before a block runs a tile, call its next tile's prefetch companion (NAME_prefetch, tile.cuh), so that the next
  /// tile's weights stream into L2 while the current one waits and works. Off by default: with the library's gemv
  /// tiles it was slower on the H100 (docs/persistent.md).
  bool prefetch_next = false;
};

/// Where one call's time went in the last profiled run (PersistentOptions::profile), averaged over its tiles, in
/// microseconds: before the wait (its loads of what no earlier call writes, and the tile's own set-up), in the
/// wait, and after it (the rest of the tile, the barrier, the signal). `first_start` and `last_end` place the
/// call in the run, from the run's first stamp.
struct PersistentCallProfile {
  std::string name;        ///< the tile function
  unsigned tiles = 0;      ///< how many tiles the call has
  double before_wait = 0;  ///< mean µs from taking the tile to calling wait()
  double waiting = 0;      ///< mean µs in wait()
  double after_wait = 0;   ///< mean µs from the wait's end to the tile's signal
  double first_start = 0;  ///< µs from the run's start to the call's first tile taken
  double last_end = 0;     ///< µs from the run's start to the call's last tile done
};

namespace detail {

/// The persistent kernel's parameter (kernels/include/lazygraph/tile.cuh: lg::PersistentProgram, same layout).
struct PersistentProgramView {
  CUdeviceptr calls = 0;
  CUdeviceptr tile_waits = 0;
  CUdeviceptr waits = 0;
  CUdeviceptr args = 0;
  CUdeviceptr queue_begin = 0;
  CUdeviceptr queue = 0;
  CUdeviceptr counters = 0;
  CUdeviceptr tile_done = 0;
  CUdeviceptr status = 0;
  CUdeviceptr timeline = 0;
  unsigned long long timeout_ns = 0;
  unsigned pause_ns = 0;
  unsigned flags = 0;
};

/// One call as the kernel reads it (lg::PersistentCall, same layout).
struct PersistentCallEntry {
  std::uint32_t function = 0;
  std::uint32_t tiles = 0;
  std::uint32_t grid_x = 1;
  std::uint32_t grid_y = 1;
  std::uint32_t args = 0;
  std::uint32_t tiles_begin = 0;
  std::uint32_t shared_bytes = 0;
  std::uint32_t reserved1 = 0;
};

struct PersistentState;

}  // namespace detail

/// The kernel parameters of a persistent launch (a named type, so that the op's signature says what it is).
using PersistentLaunch = LaunchOp<detail::PersistentProgramView>;

/// A persistent program's run as an op: its counters and flags cleared, then its kernel. A GraphNode.
class [[nodiscard]] PersistentOp : public OpBase<PersistentOp> {
 public:
  /// No output.
  using Output = void;
  /// A fill and a launch: neither allocates.
  static constexpr bool is_graph_node = true;
  /// Both are nodes CudaGraph::build adds directly.
  static constexpr bool builds_without_capture = true;

  /// Made by PersistentProgram::op.
  PersistentOp(std::shared_ptr<const detail::PersistentState> state, FillOp<std::uint32_t> reset,
               PersistentLaunch launch);
  /// Clears the counters, then launches the kernel.
  void execute(ExecContext& ctx) const;
  /// Everything the program's calls touch, and its counters and status.
  void accesses(AccessSet& out) const;

 private:
  std::shared_ptr<const detail::PersistentState> state_;
  FillOp<std::uint32_t> reset_;
  PersistentLaunch launch_;
};

/// One call of a program as its own kernel launch (the program's graph form): the call's tile function on a grid of
/// its tiles, launched early. A GraphNode that touches what the call touches.
class [[nodiscard]] TileLaunchOp : public OpBase<TileLaunchOp> {
 public:
  /// No output.
  using Output = void;
  /// A launch.
  static constexpr bool is_graph_node = true;
  /// A kernel node.
  static constexpr bool builds_without_capture = true;

  /// Made by PersistentProgram::graph_op.
  TileLaunchOp(LaunchOp<const unsigned char*> launch, AccessSet accesses)
      : launch_(std::move(launch)), accesses_(std::move(accesses)) {}
  /// Launches the call's kernel.
  void execute(ExecContext& ctx) const { launch_.execute(ctx); }
  /// What the call touches.
  void accesses(AccessSet& out) const { out.merge(accesses_); }

 private:
  LaunchOp<const unsigned char*> launch_;
  AccessSet accesses_;
};

/// Tile-function calls lowered into one persistent kernel (see the file comment).
class PersistentProgram {
 public:
  /// Lowers `calls` (program order), generates and compiles (or loads from the disk cache) the kernel, and uploads
  /// its tables on `stream` (and waits for them).
  /// \throws UsageError for no calls, calls of functions from different devices, a call whose tiles need more shared
  ///         memory than a block can have, more blocks than can be resident (persistent_blocks), or two calls of one
  ///         function whose parameter sizes differ; CompileError when the generated kernel does not compile (two
  ///         files' names clashing, a parameter size the device disagrees with); CaptureError during a capture.
  PersistentProgram(const Stream& stream, std::vector<TileCall> calls, PersistentOptions options = {});

  /// The program's run: counters cleared, then the persistent kernel (a GraphNode).
  [[nodiscard]] PersistentOp op() const;
  /// The same calls as one early-launched kernel each, ordered by what they read and write (a GraphNode).
  [[nodiscard]] DataflowListOp<TileLaunchOp> graph_op() const;
  /// Waits for `stream`, then throws if a run of the persistent kernel stopped early, and clears the error so the
  /// program runs again.
  /// \throws TimeoutError naming the call and tile that waited, the call it waited for and that call's tiles done of
  ///         its tiles; UsageError naming a tile function that returned without calling tile.wait().
  void check(const Stream& stream) const;

  /// Where each call's time went in the last run, from the tiles' stamps (waits for `stream` first).
  /// \throws UsageError when the program was not made with PersistentOptions::profile.
  [[nodiscard]] std::vector<PersistentCallProfile> profile(const Stream& stream) const;

  /// The lowering: each call's dependencies and each block's queue.
  [[nodiscard]] const detail::PersistentSchedule& schedule() const noexcept;
  /// The blocks the kernel runs.
  [[nodiscard]] unsigned blocks() const noexcept { return schedule().blocks; }
  /// The calls, in program order.
  [[nodiscard]] std::span<const TileCall> calls() const noexcept;
  /// The generated kernel source (for the curious and for error reports).
  [[nodiscard]] const std::string& source() const noexcept;

 private:
  std::shared_ptr<detail::PersistentState> state_;
};

namespace detail {

/// The source of a program's kernels: `lazygraph_persistent` (the persistent kernel) and `lazygraph_tile_<i>` (the
/// graph form of function i), for `functions` in dispatch order, each with the host's parameter sizes `sizes[i]`,
/// blocks of `threads` threads, at least `min_blocks_per_sm` per multiprocessor. The kernel files the functions are
/// defined in are included by their names (the compiler's headers: `persistent_headers`).
std::string persistent_source(std::span<const TileInfo* const> functions, std::span<const std::vector<unsigned>> sizes,
                              unsigned threads, unsigned min_blocks_per_sm);
/// The headers the generated source compiles with: the core headers, each set's headers and the functions' files.
/// \throws UsageError when two sets bring different headers of one name.
std::vector<KernelSource> persistent_headers(std::span<const TileInfo* const> functions);

}  // namespace detail

}  // namespace lazygraph
