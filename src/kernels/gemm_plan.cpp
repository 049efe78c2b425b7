// A Gemm plan's cuBLASLt state (detail/kernels/gemm_plan.hpp): the device's handle, the descriptors of the row-major
// product, the algorithm chosen once per shape in the process, the workspace, and the checks made before any of it.
//
// Row-major through column-major: cuBLASLt's matrices are column-major, and a row-major R x C matrix is the same
// memory as a column-major C x R one. So D[M, N] = X[M, K] W[N, K]^T, all row-major, is asked of cuBLASLt as its
// transpose D^T (N x M, leading dimension N) = W (K x N column-major, transposed: op A = T) times X^T (K x M
// column-major, not transposed: op B = N): the "TN" layout, the one cuBLASLt's half and bfloat16 kernels favour.

#include "lazygraph/detail/kernels/gemm_plan.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "lazygraph/detail/driver/byte_count.hpp"
#include "lazygraph/detail/driver/capture.hpp"
#include "lazygraph/detail/driver/cublaslt_api.hpp"
#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/driver/device_buffer.hpp"
#include "lazygraph/driver/error.hpp"
#include "lazygraph/driver/stream.hpp"
#include "lazygraph/kernels/gemm.hpp"
#include "lazygraph/ops/exec_context.hpp"
#include "lazygraph/ops/fill.hpp"

namespace lazygraph::detail {

namespace {

namespace lt = cublaslt;

const char* type_text(GemmElementType type) { return type == GemmElementType::f16 ? "half" : "bfloat16"; }

std::string describe(const GemmShape& shape) {
  return "gemm (M=" + std::to_string(shape.m) + ", N=" + std::to_string(shape.n) + ", K=" + std::to_string(shape.k) +
         ")";
}

std::string hex(CUdeviceptr address) {
  char text[32] = {};
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(address));
  return text;
}

// ---- The device's cuBLASLt handle: made once, on first use, and destroyed when the process exits ----------------

struct DeviceHandle {
  std::shared_ptr<const DeviceState> device;  // retains the primary context the handle works in
  cublasLtHandle_t handle = nullptr;
};

struct HandleRegistry {
  std::mutex mutex;
  std::map<int, DeviceHandle> by_ordinal;
  bool exit_registered = false;
  bool destroyed = false;
};

/// Never destroyed itself: destroy_handles_at_exit destroys the handles. It is registered with atexit right after the
/// first cublasLtCreate, so it runs before the exit handlers cuBLASLt and its CUDA runtime registered while setting
/// up (handlers run in reverse order of registration), while the driver and the handle's context still work.
HandleRegistry& handle_registry() {
  static auto* registry = new HandleRegistry;  // NOLINT(cppcoreguidelines-owning-memory): see above
  return *registry;
}

void destroy_handles_at_exit() noexcept {
  HandleRegistry& r = handle_registry();
  const std::lock_guard lock(r.mutex);
  for (auto& [ordinal, entry] : r.by_ordinal) {
    lt::destroy_no_throw(entry.device->context, entry.handle);
    entry.handle = nullptr;
    entry.device.reset();  // lets go of the primary context
  }
  r.destroyed = true;
}

cublasLtHandle_t handle_for(const Device& device) {
  HandleRegistry& r = handle_registry();
  const std::lock_guard lock(r.mutex);
  if (r.destroyed) throw UsageError("Gemm: the process is exiting, and cuBLASLt's handles are gone");
  if (auto it = r.by_ordinal.find(device.ordinal()); it != r.by_ordinal.end()) return it->second.handle;
  // A state of its own (a retain of the primary context, no streams), not the caller's: the handle must not keep the
  // caller's Device, with its pooled streams, until the process exits.
  const Device own = Device::get(device.ordinal());
  DeviceHandle entry{own.state(),
                     lt::create(own.context(), "the cuBLASLt handle of device " + std::to_string(device.ordinal()))};
  const cublasLtHandle_t handle = entry.handle;
  r.by_ordinal.emplace(device.ordinal(), std::move(entry));
  if (!r.exit_registered) {
    r.exit_registered = std::atexit(destroy_handles_at_exit) == 0;  // if it cannot be registered, the OS cleans up
  }
  return handle;
}

// ---- The algorithm for each (device, shape, type, options): asked of the heuristic once per process -----------

struct AlgorithmKey {
  int device = 0;
  std::size_t m = 0;
  std::size_t n = 0;
  std::size_t k = 0;
  GemmElementType type = GemmElementType::f16;
  std::size_t alignment = 0;
  std::size_t max_workspace = 0;
  int candidates = 1;
  friend bool operator<(const AlgorithmKey& a, const AlgorithmKey& b) {
    return std::tie(a.device, a.m, a.n, a.k, a.type, a.alignment, a.max_workspace, a.candidates) <
           std::tie(b.device, b.m, b.n, b.k, b.type, b.alignment, b.max_workspace, b.candidates);
  }
};

struct AlgorithmChoice {
  cublasLtMatmulAlgo_t algorithm{};
  std::size_t workspace_bytes = 0;
};

/// One key's choice, made once: the thread that finds it unset asks the heuristic (and times its candidates) holding
/// only this entry's mutex, so that planning other shapes never waits for it.
struct AlgorithmEntry {
  std::mutex mutex;
  std::optional<AlgorithmChoice> choice;
};

struct AlgorithmCache {
  std::mutex mutex;  ///< guards `chosen` (the map, not its entries)
  std::map<AlgorithmKey, std::shared_ptr<AlgorithmEntry>> chosen;
};

AlgorithmCache& algorithm_cache() {
  static AlgorithmCache cache;
  return cache;
}

std::atomic<std::size_t> heuristic_query_count{0};  // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)

}  // namespace

// ---- RAII for the descriptors (host memory of cuBLASLt's) --------------------------------------------------------
// Outside the anonymous namespace: GemmState, declared in the header, holds them, which GCC refuses
// (-Wsubobject-linkage) when this file is compiled as part of another, as in a unity build.

struct OperationDeleter {
  void operator()(cublasLtMatmulDesc_t desc) const noexcept { lt::matmul_desc_destroy_no_throw(desc); }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayout_t layout) const noexcept { lt::layout_destroy_no_throw(layout); }
};
struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreference_t preference) const noexcept { lt::preference_destroy_no_throw(preference); }
};
using OperationPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>, OperationDeleter>;
using LayoutPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>, LayoutDeleter>;
using PreferencePtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, PreferenceDeleter>;

struct GemmState {
  std::shared_ptr<const DeviceState> device;
  cublasLtHandle_t handle = nullptr;  // the device's, which lives until the process exits
  OperationPtr operation;
  LayoutPtr w_layout;  // A: W, K x N column-major, transposed
  LayoutPtr x_layout;  // B: X, K x M column-major
  LayoutPtr d_layout;  // C and D: N x M column-major
  cublasLtMatmulAlgo_t algorithm{};
  std::optional<DeviceBuffer<std::byte>> workspace;   // its own, when the algorithm needs one and none is shared
  std::shared_ptr<const SharedGemmWorkspace> shared;  // or the one it shares
  std::string name;                                   // "gemm (M=.., N=.., K=..) of half on device 0", for errors

  [[nodiscard]] lt::MatmulDescriptors descriptors() const noexcept {
    return {operation.get(), w_layout.get(), x_layout.get(), d_layout.get(), d_layout.get()};
  }
};

void check_gemm_shape(const GemmShape& shape, const GemmOptions& options, std::size_t element_size) {
  const std::string what = describe(shape);
  for (const auto& [letter, value] : {std::pair{"M", shape.m}, std::pair{"N", shape.n}, std::pair{"K", shape.k}}) {
    if (value == 0) {
      throw UsageError(what + ": " + letter +
                       " is 0; every dimension of D[M, N] = X[M, K] * W[N, K]^T must be at least 1");
    }
  }
  (void)byte_count(byte_count(shape.m, shape.k, what + ": X"), element_size, what + ": X");
  (void)byte_count(byte_count(shape.n, shape.k, what + ": W"), element_size, what + ": W");
  (void)byte_count(byte_count(shape.m, shape.n, what + ": D"), element_size, what + ": D");
  const std::size_t a = options.alignment;
  if (!std::has_single_bit(a) || a < element_size || a > 256) {
    throw UsageError(what + ": GemmOptions::alignment is " + std::to_string(a) +
                     " bytes; it must be a power of two from the element's size (" + std::to_string(element_size) +
                     " bytes) to 256");
  }
  if (options.candidates < 1 || options.candidates > 64) {
    throw UsageError(what + ": GemmOptions::candidates is " + std::to_string(options.candidates) +
                     "; it must be 1 (the heuristic's first) to 64");
  }
}

void check_gemm_operands(const GemmShape& shape, std::size_t alignment, std::size_t element_size, const GemmOperand& d,
                         const GemmOperand& x, const GemmOperand& w, const GemmOperand* c) {
  const auto fail = [&](const std::string& text) { throw UsageError(describe(shape) + ": " + text); };
  const auto check_size = [&](const char* name, const GemmOperand& o, const char* matrix, std::size_t rows,
                              const char* rows_name, std::size_t cols, const char* cols_name) {
    if (o.elements != rows * cols) {
      fail(std::string(name) + " has " + std::to_string(o.elements) + " elements, but " + matrix + " is " + rows_name +
           " x " + cols_name + " = " + std::to_string(rows * cols));
    }
  };
  check_size("d", d, "D", shape.m, "M", shape.n, "N");
  check_size("x", x, "X", shape.m, "M", shape.k, "K");
  check_size("w", w, "W", shape.n, "N", shape.k, "K");
  if (c != nullptr) check_size("c", *c, "C", shape.m, "M", shape.n, "N");

  const auto check_aligned = [&](const char* name, const GemmOperand& o) {
    if (o.address % alignment != 0) {
      fail(std::string(name) + " starts at " + hex(o.address) +
           ", which is not a multiple of the plan's alignment of " + std::to_string(alignment) +
           " bytes (GemmOptions::alignment: plan with a smaller one for such subspans)");
    }
  };
  check_aligned("d", d);
  check_aligned("x", x);
  check_aligned("w", w);
  if (c != nullptr) check_aligned("c", *c);

  const auto overlap = [&](const GemmOperand& p, const GemmOperand& q) {
    const CUdeviceptr p_end = p.address + p.elements * element_size;
    const CUdeviceptr q_end = q.address + q.elements * element_size;
    return p.address < q_end && q.address < p_end;
  };
  if (overlap(d, x)) fail("d overlaps x: cuBLASLt would overwrite the input it reads; write the product elsewhere");
  if (overlap(d, w)) fail("d overlaps w: cuBLASLt would overwrite the input it reads; write the product elsewhere");
  if (c != nullptr && overlap(*c, d) && (c->address != d.address || c->elements != d.elements)) {
    fail("c overlaps d without being the same elements; pass d itself as c to add in place, or a span apart from it");
  }
}

namespace {

/// Of the heuristic's `candidates` (at least two), the one whose product of `shape` runs fastest on `device`: each
/// timed with events over 10 runs after 2 warm-ups, on a stream of its own, on operands of the shape filled with
/// 1/16 (the values do not change which is fastest). A candidate cuBLASLt refuses to run is passed over; nullopt
/// when none ran, or when the device has no memory for the operands (the caller keeps the heuristic's first).
/// \throws CudaError for any other driver failure (a candidate's kernel that faulted leaves the context unusable: the
///         error must reach the caller, not turn into an untimed choice that the cache keeps).
std::optional<AlgorithmChoice> fastest(const Device& device, const GemmState& state, const GemmShape& shape,
                                       std::span<const cublasLtMatmulHeuristicResult_t> candidates) {
  constexpr int warm_ups = 2;
  constexpr int runs = 10;
  constexpr std::uint16_t sixteenth = 0x2C00;  // 1/16 in half; in bfloat16 2^-39 (about 1.8e-12), as harmless
  try {
    const Stream stream = device.create_stream();
    DeviceBuffer<std::uint16_t> x(device, shape.m * shape.k);
    DeviceBuffer<std::uint16_t> w(device, shape.n * shape.k);
    DeviceBuffer<std::uint16_t> d(device, shape.m * shape.n);
    for (DeviceBuffer<std::uint16_t>* b : {&x, &w, &d}) fill(b->view(), sixteenth).sync_on(stream);
    std::size_t most = 0;
    for (const cublasLtMatmulHeuristicResult_t& c : candidates) most = std::max(most, c.workspaceSize);
    std::optional<DeviceBuffer<std::byte>> workspace;
    if (most > 0) workspace.emplace(device, most);
    const Event start(device);
    const Event end(device);
    const float alpha = 1.0F;
    const float beta = 0.0F;
    const auto pointer = [](CUdeviceptr address) {
      return reinterpret_cast<void*>(address);  // NOLINT(performance-no-int-to-ptr): a device address, by design
    };
    lt::MatmulOperands operands;
    operands.alpha = &alpha;
    operands.beta = &beta;
    operands.a = pointer(w.cview().address());
    operands.b = pointer(x.cview().address());
    operands.c = pointer(d.cview().address());
    operands.d = pointer(d.cview().address());
    operands.workspace = workspace ? pointer(workspace->cview().address()) : nullptr;
    operands.workspace_bytes = most;
    std::optional<AlgorithmChoice> best;
    float best_ms = 0;
    for (const cublasLtMatmulHeuristicResult_t& c : candidates) {
      try {
        for (int i = 0; i < warm_ups; ++i) {
          lt::matmul(state.device->context, state.handle, state.descriptors(), operands, &c.algo, stream.get(),
                     state.name);
        }
        start.record(stream);
        for (int i = 0; i < runs; ++i) {
          lt::matmul(state.device->context, state.handle, state.descriptors(), operands, &c.algo, stream.get(),
                     state.name);
        }
        end.record(stream);
        end.synchronize();
      } catch (const CublasError&) {
        stream.synchronize();
        continue;  // cuBLASLt would not run this one: the others may
      }
      const float ms = Event::elapsed_ms(start, end);
      if (!best || ms < best_ms) {
        best = AlgorithmChoice{c.algo, c.workspaceSize};
        best_ms = ms;
      }
    }
    stream.synchronize();
    return best;
  } catch (const CudaError& e) {
    if (e.code() != CUDA_ERROR_OUT_OF_MEMORY) throw;
    return std::nullopt;  // no memory for the trial operands: untimed
  }
}

/// A state with its descriptors and algorithm, without a workspace, and the bytes that algorithm needs.
std::pair<std::shared_ptr<GemmState>, std::size_t> plan_state(const Device& device, const GemmShape& shape,
                                                              const GemmOptions& options, GemmElementType type) {
  check_gemm_shape(shape, options, 2);
  auto state = std::make_shared<GemmState>();
  state->name = describe(shape) + " of " + type_text(type) + " on device " + std::to_string(device.ordinal());
  if (const std::string why = driver::module_load_forbidden_reason(); !why.empty()) {
    throw CaptureError("cannot plan " + state->name + ": " + why +
                       " (planning may load cuBLASLt, ask its heuristic and allocate the workspace, which break a "
                       "capture); make the Gemm plan before CudaGraph::scope / CudaGraph::capture");
  }
  lt::ensure_loaded();
  state->device = device.state();
  state->handle = handle_for(device);

  const cudaDataType_t data = type == GemmElementType::f16 ? CUDA_R_16F : CUDA_R_16BF;
  const std::string& object = state->name;
  state->operation.reset(lt::matmul_desc_create(CUBLAS_COMPUTE_32F, CUDA_R_32F, object));
  const std::int32_t transposed = CUBLAS_OP_T;
  const std::int32_t as_is = CUBLAS_OP_N;
  lt::matmul_desc_set(state->operation.get(), CUBLASLT_MATMUL_DESC_TRANSA, &transposed, sizeof transposed, object);
  lt::matmul_desc_set(state->operation.get(), CUBLASLT_MATMUL_DESC_TRANSB, &as_is, sizeof as_is, object);
  const auto ld = [](std::size_t v) { return static_cast<std::int64_t>(v); };  // check_gemm_shape bounds them
  state->w_layout.reset(lt::layout_create(data, shape.k, shape.n, ld(shape.k), object));
  state->x_layout.reset(lt::layout_create(data, shape.k, shape.m, ld(shape.k), object));
  state->d_layout.reset(lt::layout_create(data, shape.n, shape.m, ld(shape.n), object));

  const AlgorithmKey key{
      device.ordinal(),  shape.m, shape.n, shape.k, type, options.alignment, options.max_workspace_bytes,
      options.candidates};
  std::shared_ptr<AlgorithmEntry> entry;
  {
    AlgorithmCache& cache = algorithm_cache();
    const std::lock_guard lock(cache.mutex);
    std::shared_ptr<AlgorithmEntry>& slot = cache.chosen[key];
    if (!slot) slot = std::make_shared<AlgorithmEntry>();
    entry = slot;
  }
  AlgorithmChoice choice;
  {
    const std::lock_guard lock(entry->mutex);  // one query per key, also when threads plan the same shape at once
    if (entry->choice) {
      choice = *entry->choice;
    } else {
      const PreferencePtr preference(lt::preference_create(object));
      const std::uint64_t max_workspace = options.max_workspace_bytes;
      lt::preference_set(preference.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                         sizeof max_workspace, object);
      const auto alignment = static_cast<std::uint32_t>(options.alignment);
      for (const auto attribute :
           {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
        lt::preference_set(preference.get(), attribute, &alignment, sizeof alignment, object);
      }
      std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<std::size_t>(options.candidates));
      heuristic_query_count.fetch_add(1, std::memory_order_relaxed);
      const int found = lt::heuristics(state->device->context, state->handle, state->descriptors(), preference.get(),
                                       results, object);
      if (found == 0) {
        lt::throw_error(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulAlgoGetHeuristic",
                        object + ": no algorithm for this shape and type with operands aligned to " +
                            std::to_string(options.alignment) + " bytes and at most " +
                            std::to_string(options.max_workspace_bytes) + " bytes of workspace");
      }
      choice = {results.front().algo, results.front().workspaceSize};
      if (found > 1) {
        // One key's timing at a time in the process (after the entry's lock, never before it): a GPU busy with
        // another key's trial runs would skew a choice that is kept for the process's life, and both keys' trial
        // operands would take memory at once.
        static std::mutex timing;
        const std::lock_guard timing_lock(timing);
        choice =
            fastest(device, *state, shape, std::span(results).first(static_cast<std::size_t>(found))).value_or(choice);
      }
      // Kept for the process's life, untimed or not: workspace_needed and the plans after it must agree.
      entry->choice = choice;
    }
  }
  state->algorithm = choice.algorithm;
  return {std::move(state), choice.workspace_bytes};
}

}  // namespace

std::shared_ptr<const GemmState> make_gemm_state(const Device& device, const GemmShape& shape,
                                                 const GemmOptions& options, GemmElementType type,
                                                 std::shared_ptr<const SharedGemmWorkspace> shared) {
  auto [state, needed] = plan_state(device, shape, options, type);
  if (shared) {
    if (shared->device_ordinal() != device.ordinal()) {
      throw UsageError(state->name + ": the shared workspace is on device " + std::to_string(shared->device_ordinal()) +
                       "; a plan's workspace is on its own device");
    }
    if (shared->bytes() < needed) {
      throw UsageError(state->name + ": its algorithm needs " + std::to_string(needed) +
                       " bytes of workspace, and the shared workspace has " + std::to_string(shared->bytes()) +
                       " (size it with Gemm::workspace_needed over every shape that shares it)");
    }
    state->shared = std::move(shared);
  } else if (needed > 0) {
    state->workspace.emplace(device, needed);
  }
  return state;
}

std::size_t gemm_workspace_needed(const Device& device, const GemmShape& shape, const GemmOptions& options,
                                  GemmElementType type) {
  return plan_state(device, shape, options, type).second;
}

GemmWorkspace gemm_workspace(const GemmState& state) noexcept {
  if (state.shared) return {state.shared->span().address(), state.shared->bytes()};
  if (!state.workspace || !state.workspace->valid()) return {};
  return {state.workspace->cview().address(), state.workspace->size()};
}

std::size_t gemm_owned_workspace_bytes(const GemmState& state) noexcept {
  return state.workspace && state.workspace->valid() ? state.workspace->size() : 0;
}

void submit_gemm(ExecContext& ctx, const GemmState& state, const GemmCall& call) {
  if (ctx.planning()) {
    throw UsageError(state.name +
                     ": cuBLASLt submits its kernels to a stream itself, which CudaGraph::build cannot write down; "
                     "record the op with CudaGraph::capture or CudaGraph::scope");
  }
  const Stream& stream = ctx.stream();
  if (stream.device().ordinal() != state.device->ordinal) {
    throw UsageError(state.name + ": executed on a stream of device " + std::to_string(stream.device().ordinal()) +
                     "; a plan runs on the device it was made for");
  }
  // cuBLASLt may set itself up on a kernel's first use (load it, query the device) also while the stream captures,
  // which a this-thread or global capture would refuse: its enqueued kernels are captured all the same.
  std::optional<driver::RelaxedCapture> relaxed;
  if (ctx.recording()) relaxed.emplace();
  const auto pointer = [](CUdeviceptr address) {
    return reinterpret_cast<void*>(address);  // NOLINT(performance-no-int-to-ptr): a device address, by design
  };
  const GemmWorkspace workspace = gemm_workspace(state);
  lt::MatmulOperands operands;
  operands.alpha = &call.alpha;
  operands.a = pointer(call.w);
  operands.b = pointer(call.x);
  operands.beta = &call.beta;
  operands.c = pointer(call.c);
  operands.d = pointer(call.d);
  operands.workspace = pointer(workspace.address);
  operands.workspace_bytes = workspace.bytes;
  lt::matmul(state.device->context, state.handle, state.descriptors(), operands, &state.algorithm, stream.get(),
             state.name);
}

std::size_t gemm_heuristic_queries() noexcept { return heuristic_query_count.load(std::memory_order_relaxed); }

}  // namespace lazygraph::detail
