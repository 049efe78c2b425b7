#include "lazygraph/kernels/persistent_program.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <optional>

#include "lazygraph/driver/device_buffer.hpp"
#include "lazygraph/driver/error.hpp"
#include "lazygraph/driver/kernel_module.hpp"
#include "lazygraph/driver/memcpy.hpp"
#include "lazygraph/kernels/kernel.hpp"
#include "lazygraph/kernels/kernel_cache.hpp"

namespace lazygraph {

namespace detail {

// Must match kernels/include/lazygraph/tile.cuh.
constexpr std::uint32_t kCounterStride = 32;
constexpr std::size_t kStatusWords = 8;
constexpr std::uint32_t kStatusTimeout = 1;
constexpr std::uint32_t kStatusNoWait = 2;
constexpr std::uint32_t kPrefetchNext = 1;

/// Everything a program owns; shared by the program, its ops and every graph that records one.
struct PersistentState {
  explicit PersistentState(const Device& d) : device(d) {}
  Device device;
  std::vector<TileCall> calls;
  std::vector<const TileInfo*> functions;  ///< dispatch order; the calls keep them alive
  std::vector<std::uint32_t> function_of;  ///< per call, its function's index
  std::string source;
  PersistentSchedule schedule;
  PersistentOptions options;
  unsigned shared_bytes = 0;  ///< the persistent kernel's: the most any call asks
  std::shared_ptr<KernelInfo> persistent;
  std::vector<std::shared_ptr<KernelInfo>> tile_kernels;  ///< per function, its graph form
  std::vector<std::uint32_t> args_offset;                 ///< per call
  std::optional<DeviceBuffer<PersistentCallEntry>> call_table;
  std::optional<DeviceBuffer<std::uint32_t>> tile_waits;
  std::optional<DeviceBuffer<std::uint32_t>> waits;
  std::optional<DeviceBuffer<unsigned char>> args;
  std::optional<DeviceBuffer<std::uint32_t>> queue_begin;
  std::optional<DeviceBuffer<std::uint32_t>> queue;
  std::optional<DeviceBuffer<std::uint32_t>> counters;  ///< per call kCounterStride words, then a flag per tile
  std::optional<DeviceBuffer<std::uint32_t>> status;
  std::optional<DeviceBuffer<unsigned long long>> timeline;  ///< with PersistentOptions::profile
  PersistentProgramView view;
};

namespace {

template <class T>
DeviceBuffer<T> upload_table(const Stream& stream, const std::vector<T>& host) {
  DeviceBuffer<T> buffer(stream.device(), std::max<std::size_t>(host.size(), 1));
  if (!host.empty()) copy_async(stream, buffer.view().subspan(0, host.size()), std::span<const T>(host));
  return buffer;
}

std::shared_ptr<const LoadedModule> compile_persistent_program(const KernelBuild& build, const std::string& source,
                                                               const std::vector<KernelSource>& headers) {
  const KernelSource file{"lazygraph_persistent.cu", source};
  const KernelCache cache(build.cache_directory);
  const std::string key = KernelCache::key(file, headers, build.options, build.nvrtc);
  if (std::optional<KernelCache::Entry> hit = cache.load(key)) {
    try {
      return std::make_shared<const LoadedModule>(build.device, hit->image.data(), file.name);
    } catch (const CudaError&) {
      cache.remove(key);  // stored as it is, and refused now: compile it again (as KernelLibrary does)
    }
  }
  const CompileResult result = nvrtc_compile(file, headers, build.options, build.cubin);
  KernelCache::Entry entry{result.image(), result.is_cubin()};  // image() throws CompileError with the log
  cache.store(key, entry);
  return std::make_shared<const LoadedModule>(build.device, entry.image.data(), file.name);
}

std::string persistent_call_name(const PersistentState& s, std::uint32_t call) {
  if (call >= s.calls.size()) return "call " + std::to_string(call);
  return "call " + std::to_string(call) + " (" + s.calls[call].name() + ")";
}

}  // namespace

}  // namespace detail

void detail::check_tile_config(const std::string& function, const TileConfig& config) {
  const std::size_t tiles = config.tiles.volume();
  if (tiles == 0 || tiles > 0x7fffffffU) {
    throw UsageError("tile function " + function + ": a call needs 1 to 2^31 - 1 tiles, not " + std::to_string(tiles) +
                     " (" + std::to_string(config.tiles.x) + " x " + std::to_string(config.tiles.y) + " x " +
                     std::to_string(config.tiles.z) + ")");
  }
}

TileCall::TileCall(std::shared_ptr<const detail::TileInfo> function, const TileConfig& config,
                   std::vector<unsigned char> arguments, std::vector<unsigned> parameter_sizes,
                   std::vector<std::shared_ptr<const void>> owners, std::vector<detail::ArgumentRange> ranges)
    : function_(std::move(function)),
      config_(config),
      arguments_(std::move(arguments)),
      parameter_sizes_(std::move(parameter_sizes)),
      owners_(std::move(owners)),
      ranges_(std::move(ranges)) {}

void TileCall::accesses(AccessSet& out) const { detail::add_argument_accesses(ranges_, function_->name, out); }

PersistentOp::PersistentOp(std::shared_ptr<const detail::PersistentState> state, FillOp<std::uint32_t> reset,
                           PersistentLaunch launch)
    : state_(std::move(state)), reset_(std::move(reset)), launch_(std::move(launch)) {}

void PersistentOp::execute(ExecContext& ctx) const {
  ctx.keep_alive(state_);
  reset_.execute(ctx);
  launch_.execute(ctx);
}

void PersistentOp::accesses(AccessSet& out) const {
  for (const TileCall& call : state_->calls) call.accesses(out);
  out.write(state_->counters->cview().address(), state_->counters->size_bytes(), "persistent program");
  out.write(state_->status->cview().address(), state_->status->size_bytes(), "persistent program");
}

PersistentProgram::PersistentProgram(const Stream& stream, std::vector<TileCall> calls, PersistentOptions options) {
  using detail::PersistentCallEntry;
  if (calls.empty()) throw UsageError("persistent program: give it at least one tile-function call");
  const detail::KernelBuild& build = *calls.front().function()->build;
  auto s = std::make_shared<detail::PersistentState>(build.device);
  s->options = options;
  if (options.threads == 0 || options.threads > 1024 || options.threads % 32 != 0 || options.min_blocks_per_sm == 0) {
    throw UsageError("persistent program: threads must be a multiple of 32 from 32 to 1024 (not " +
                     std::to_string(options.threads) + ") and min_blocks_per_sm at least 1");
  }

  // The functions in order of first use, each with its host parameter sizes.
  std::map<const detail::TileInfo*, std::uint32_t> index;
  std::vector<std::vector<unsigned>> sizes;
  for (const TileCall& call : calls) {
    const detail::TileInfo* f = call.function().get();
    if (!(f->build->device == build.device)) {
      throw UsageError("persistent program: tile function " + f->name +
                       " comes from a library on another device than " + calls.front().name() +
                       "'s; a program runs on one device");
    }
    const auto [it, inserted] = index.emplace(f, static_cast<std::uint32_t>(s->functions.size()));
    const std::vector<unsigned> mine(call.parameter_sizes().begin(), call.parameter_sizes().end());
    if (inserted) {
      s->functions.push_back(f);
      sizes.push_back(mine);
    } else if (sizes[it->second] != mine) {
      throw UsageError("persistent program: two calls of tile function " + f->name +
                       " pass parameters of different host types (sizes differ); use one signature per function");
    }
    s->function_of.push_back(it->second);
    s->shared_bytes = std::max(s->shared_bytes, call.config().shared_bytes);
  }
  s->calls = std::move(calls);

  // The kernels.
  s->source = detail::persistent_source(s->functions, sizes, options.threads, options.min_blocks_per_sm);
  const std::shared_ptr<const LoadedModule> module =
      detail::compile_persistent_program(build, s->source, detail::persistent_headers(s->functions));
  s->persistent = detail::make_kernel_info(build.device, module, "lazygraph_persistent");
  for (std::size_t i = 0; i < s->functions.size(); ++i) {
    s->tile_kernels.push_back(detail::make_kernel_info(build.device, module, "lazygraph_tile_" + std::to_string(i)));
  }

  // The lowering, on as many blocks as can be resident.
  const Kernel<void(detail::PersistentProgramView)> kernel(s->persistent);
  detail::validate_launch(*s->persistent, {{1, 1, 1}, {options.threads, 1, 1}, s->shared_bytes});
  // Raises the kernel's dynamic shared memory limit to what its calls ask (above the default 48 KiB, the occupancy
  // query would say no block fits).
  (void)detail::prepare_launch(*s->persistent, {{1, 1, 1}, {options.threads, 1, 1}, s->shared_bytes});
  std::size_t tiles = 0;
  std::vector<detail::CallAccesses> accesses;
  for (std::size_t c = 0; c < s->calls.size(); ++c) {
    const TileCall& call = s->calls[c];
    accesses.push_back({accesses_of(call), call.tiles(), call.tile_accesses(), detail::persistent_call_name(*s, c)});
    tiles += call.tiles();
  }
  const unsigned blocks =
      detail::persistent_blocks(options.blocks, kernel.max_active_blocks_per_sm(options.threads, s->shared_bytes),
                                build.device.sm_count(), tiles, options.threads, s->shared_bytes);
  s->schedule = detail::schedule_persistent(accesses, blocks);

  // The tables.
  std::vector<PersistentCallEntry> entries;
  std::vector<unsigned char> args;
  for (std::size_t c = 0; c < s->calls.size(); ++c) {
    const TileCall& call = s->calls[c];
    PersistentCallEntry e;
    e.function = s->function_of[c];
    e.tiles = call.tiles();
    e.grid_x = call.config().tiles.x;
    e.grid_y = call.config().tiles.y;
    args.resize((args.size() + 15) / 16 * 16);  // each call's block 16-byte aligned, as the kernel's loads assume
    e.args = static_cast<std::uint32_t>(args.size());
    s->args_offset.push_back(e.args);
    args.insert(args.end(), call.arguments().begin(), call.arguments().end());
    e.tiles_begin = s->schedule.tiles_begin[c];
    e.shared_bytes = call.config().shared_bytes;
    entries.push_back(e);
  }
  std::vector<std::uint32_t> waits;
  waits.reserve(3 * s->schedule.waits.size());
  for (const detail::TileWait& w : s->schedule.waits) waits.insert(waits.end(), {w.call, w.first, w.count});
  s->call_table = detail::upload_table(stream, entries);
  s->tile_waits = detail::upload_table(stream, s->schedule.tile_waits);
  s->waits = detail::upload_table(stream, waits);
  s->args = detail::upload_table(stream, args);
  s->queue_begin = detail::upload_table(stream, s->schedule.queue_begin);
  s->queue = detail::upload_table(stream, s->schedule.queue);
  s->counters =
      detail::upload_table(stream, std::vector<std::uint32_t>(s->calls.size() * detail::kCounterStride + tiles, 0));
  s->status = detail::upload_table(stream, std::vector<std::uint32_t>(detail::kStatusWords, 0));
  stream.synchronize();  // the host vectors go now

  s->view.calls = s->call_table->cview().address();
  s->view.tile_waits = s->tile_waits->cview().address();
  s->view.waits = s->waits->cview().address();
  s->view.args = s->args->cview().address();
  s->view.queue_begin = s->queue_begin->cview().address();
  s->view.queue = s->queue->cview().address();
  s->view.counters = s->counters->cview().address();
  s->view.tile_done = s->view.counters + s->calls.size() * detail::kCounterStride * sizeof(std::uint32_t);
  s->view.status = s->status->cview().address();
  if (options.profile) {
    s->timeline.emplace(build.device, 4 * tiles);
    s->view.timeline = s->timeline->cview().address();
  }
  s->view.timeout_ns =
      static_cast<unsigned long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(options.timeout).count());
  s->view.pause_ns = options.poll_pause_ns;
  s->view.flags = options.prefetch_next ? detail::kPrefetchNext : 0U;
  state_ = std::move(s);
}

PersistentOp PersistentProgram::op() const {
  const Kernel<void(detail::PersistentProgramView)> kernel(state_->persistent);
  const LaunchConfig config{{state_->schedule.blocks, 1, 1}, {state_->options.threads, 1, 1}, state_->shared_bytes};
  // The counters' span is owned by the state, so that the fill keeps the whole program alive in a graph.
  const DeviceSpan<std::uint32_t> counters(state_->counters->cview().address(), state_->counters->size(), state_);
  return {state_, fill(counters, 0U), kernel(config, state_->view)};
}

DataflowListOp<TileLaunchOp> PersistentProgram::graph_op() const {
  std::vector<TileLaunchOp> ops;
  ops.reserve(state_->calls.size());
  for (std::size_t c = 0; c < state_->calls.size(); ++c) {
    const TileCall& call = state_->calls[c];
    const Kernel<void(const unsigned char*)> kernel(state_->tile_kernels[state_->function_of[c]]);
    const Dim3 grid = call.config().tiles;
    const LaunchConfig config = early({grid, {state_->options.threads, 1, 1}, call.config().shared_bytes});
    // The arguments' span is owned by the state: it keeps the module, the calls' buffers and the arguments alive.
    const DeviceSpan<const unsigned char> args(state_->args->cview().address() + state_->args_offset[c],
                                               call.arguments().size(), state_);
    ops.emplace_back(kernel(config, args), accesses_of(call));
  }
  return dataflow(std::move(ops));
}

void PersistentProgram::check(const Stream& stream) const {
  std::array<std::uint32_t, detail::kStatusWords> st{};
  copy_async(stream, std::span<std::uint32_t>(st), state_->status->cview());
  stream.synchronize();
  if (st[0] == 0) return;
  const std::vector<std::uint32_t> zeros(detail::kStatusWords, 0);
  copy_async(stream, state_->status->view(), std::span<const std::uint32_t>(zeros));
  stream.synchronize();
  const detail::PersistentState& s = *state_;
  if (st[0] == detail::kStatusTimeout) {
    throw TimeoutError("persistent program: tile " + std::to_string(st[2]) + " of " +
                       detail::persistent_call_name(s, st[1]) + " waited more than " +
                       std::to_string(s.options.timeout.count()) + " ms for " + detail::persistent_call_name(s, st[3]) +
                       ", which had finished " + std::to_string(st[4]) + " of its " + std::to_string(st[5]) +
                       " tiles; the kernel stopped there and this run's results are not valid");
  }
  if (st[0] == detail::kStatusNoWait) {
    throw UsageError("persistent program: tile " + std::to_string(st[2]) + " of " +
                     detail::persistent_call_name(s, st[1]) +
                     " returned without calling tile.wait(); every thread of a tile function must call it once, "
                     "before touching memory that earlier calls write or read (kernels/include/lazygraph/tile.cuh)");
  }
  throw UsageError("persistent program: the kernel stopped with unknown status " + std::to_string(st[0]));
}

std::vector<PersistentCallProfile> PersistentProgram::profile(const Stream& stream) const {
  const detail::PersistentState& s = *state_;
  if (!s.timeline) {
    throw UsageError("PersistentProgram::profile: make the program with PersistentOptions::profile = true");
  }
  std::vector<unsigned long long> t(s.timeline->size());
  copy_async(stream, std::span<unsigned long long>(t), s.timeline->cview());
  stream.synchronize();
  unsigned long long start = ~0ULL;
  for (std::size_t i = 0; i < t.size(); i += 4) start = std::min(start, t[i]);
  std::vector<PersistentCallProfile> out;
  for (std::size_t c = 0; c < s.calls.size(); ++c) {
    PersistentCallProfile p;
    p.name = s.calls[c].name();
    p.tiles = s.calls[c].tiles();
    double first = 1e300;
    double last = 0;
    for (std::uint32_t k = s.schedule.tiles_begin[c]; k < s.schedule.tiles_begin[c + 1]; ++k) {
      const unsigned long long* st = &t[4 * std::size_t{k}];
      p.before_wait += static_cast<double>(st[1] - st[0]) * 1e-3;
      p.waiting += static_cast<double>(st[2] - st[1]) * 1e-3;
      p.after_wait += static_cast<double>(st[3] - st[2]) * 1e-3;
      first = std::min(first, static_cast<double>(st[0] - start) * 1e-3);
      last = std::max(last, static_cast<double>(st[3] - start) * 1e-3);
    }
    p.before_wait /= p.tiles;
    p.waiting /= p.tiles;
    p.after_wait /= p.tiles;
    p.first_start = first;
    p.last_end = last;
    out.push_back(std::move(p));
  }
  return out;
}

const detail::PersistentSchedule& PersistentProgram::schedule() const noexcept { return state_->schedule; }

std::span<const TileCall> PersistentProgram::calls() const noexcept { return state_->calls; }

const std::string& PersistentProgram::source() const noexcept { return state_->source; }

}  // namespace lazygraph
