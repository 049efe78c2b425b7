// The one file that talks to NCCL. libnccl.so.2 is opened with dlopen on first use, never linked: a program
// without NCCL starts, runs its single-GPU work, and gets NcclUnavailable only when it asks for a communicator.

#include "lazygraph/detail/driver/nccl_api.hpp"

#include <dlfcn.h>
#include <glob.h>
#include <link.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/driver/error.hpp"

namespace lazygraph::detail::nccl {

namespace {

// nccl.h's signatures, in the types declared in nccl_api.hpp (same ABI: enums are ints, the unique id is passed
// by value as 128 bytes, cudaStream_t is CUstream).
using GetVersionFn = Result (*)(int*);
using GetUniqueIdFn = Result (*)(UniqueId*);
using CommInitRankFn = Result (*)(Comm*, int, UniqueId, int);
using CommInitAllFn = Result (*)(Comm*, int, const int*);
using CommFn = Result (*)(Comm);
using CommAsyncErrorFn = Result (*)(Comm, Result*);
using CommIntFn = Result (*)(Comm, int*);
using ErrorStringFn = const char* (*)(Result);
using LastErrorFn = const char* (*)(Comm);
using AllReduceFn = Result (*)(const void*, void*, std::size_t, DataType, RedOp, Comm, CUstream);
using BroadcastFn = Result (*)(const void*, void*, std::size_t, DataType, int, Comm, CUstream);
using ReduceScatterFn = Result (*)(const void*, void*, std::size_t, DataType, RedOp, Comm, CUstream);
using AllGatherFn = Result (*)(const void*, void*, std::size_t, DataType, Comm, CUstream);
using SendFn = Result (*)(const void*, std::size_t, DataType, int, Comm, CUstream);
using RecvFn = Result (*)(void*, std::size_t, DataType, int, Comm, CUstream);
using GroupFn = Result (*)();
using MemAllocFn = Result (*)(void**, std::size_t);
using MemFreeFn = Result (*)(void*);
using WindowRegisterFn = Result (*)(Comm, void*, std::size_t, Window*, int);
using WindowDeregisterFn = Result (*)(Comm, Window);

/// The first fields of ncclConfig_t, as NCCL 2.18 laid them out (up to splitShare). Later versions only append
/// fields (2.28's ncclConfig_v22800 is 80 bytes), and NCCL copies just `size` bytes of a config over its defaults,
/// then resets every field newer than `version` to its default (parseCommConfig), so this prefix with version 2.18
/// means the same to every NCCL from 2.18 on: no layout to choose by the loaded version, and nothing set that we
/// do not mean. `size` stops at splitShare's end, so the padding after it is not copied over trafficClass.
struct Config {
  static constexpr int undefined = std::numeric_limits<int>::min();  // NCCL_CONFIG_UNDEF_INT
  std::size_t size = 0;
  unsigned magic = 0xcafebeef;
  unsigned version = 21800;  // NCCL_VERSION(2, 18, 0): 2.14 or newer, or NCCL ignores `blocking`
  int blocking = undefined;
  int cga_cluster_size = undefined;
  int min_ctas = undefined;
  int max_ctas = undefined;
  const char* net_name = nullptr;  // NCCL_CONFIG_UNDEF_PTR
  int split_share = undefined;
};
static_assert(offsetof(Config, magic) == 8 && offsetof(Config, blocking) == 16 && offsetof(Config, net_name) == 32 &&
                  offsetof(Config, split_share) == 40,
              "Config must match ncclConfig_t's first fields (LP64)");

/// A config asking for a blocking (1) or non-blocking (0) communicator that shares no resources with a
/// communicator split from it (the joining communicator is destroyed right after the split).
Config config_of(int blocking) {
  Config c;
  c.size = offsetof(Config, split_share) + sizeof(c.split_share);
  c.blocking = blocking;
  c.split_share = 0;
  return c;
}

using CommInitRankConfigFn = Result (*)(Comm*, int, UniqueId, int, Config*);
using CommSplitFn = Result (*)(Comm, int, int, Comm*, Config*);

struct EntryPoints {
  GetVersionFn ncclGetVersion = nullptr;
  GetUniqueIdFn ncclGetUniqueId = nullptr;
  CommInitRankFn ncclCommInitRank = nullptr;
  CommInitAllFn ncclCommInitAll = nullptr;
  CommFn ncclCommDestroy = nullptr;
  CommFn ncclCommAbort = nullptr;
  CommFn ncclCommFinalize = nullptr;  // optional (NCCL 2.14+)
  // The bounded join (comm_init_rank), both or neither: null unless NCCL is 2.18+ and has them and ncclCommFinalize.
  CommInitRankConfigFn ncclCommInitRankConfig = nullptr;
  CommSplitFn ncclCommSplit = nullptr;
  CommAsyncErrorFn ncclCommGetAsyncError = nullptr;
  CommIntFn ncclCommCount = nullptr;
  CommIntFn ncclCommCuDevice = nullptr;
  CommIntFn ncclCommUserRank = nullptr;
  ErrorStringFn ncclGetErrorString = nullptr;
  LastErrorFn ncclGetLastError = nullptr;  // optional (NCCL 2.13+)
  AllReduceFn ncclAllReduce = nullptr;
  BroadcastFn ncclBroadcast = nullptr;
  ReduceScatterFn ncclReduceScatter = nullptr;
  AllGatherFn ncclAllGather = nullptr;
  SendFn ncclSend = nullptr;
  RecvFn ncclRecv = nullptr;
  GroupFn ncclGroupStart = nullptr;
  GroupFn ncclGroupEnd = nullptr;
  MemAllocFn ncclMemAlloc = nullptr;                      // optional (NCCL 2.19+)
  MemFreeFn ncclMemFree = nullptr;                        // optional (NCCL 2.19+)
  WindowRegisterFn ncclCommWindowRegister = nullptr;      // optional (NCCL 2.27+)
  WindowDeregisterFn ncclCommWindowDeregister = nullptr;  // optional (NCCL 2.27+)
};

struct Library {
  EntryPoints api;
  bool usable = false;
  std::string path;
  std::string why;  // when not usable
  int version = 0;
};

// NOLINTBEGIN(cppcoreguidelines-avoid-non-const-global-variables): one NCCL per process, loaded once
std::mutex load_mutex;
std::optional<std::string> chosen_path;  // set_library_path
std::optional<Library> loaded;
// NOLINTEND(cppcoreguidelines-avoid-non-const-global-variables)

std::string where_loaded(void* lib, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr && *map->l_name != '\0') {
    return map->l_name;
  }
  return fallback;
}

/// The NCCL wheels PyTorch installs (nvidia-nccl-cu12/13), in the usual package folders.
std::vector<std::string> wheel_candidates() {
  std::vector<std::string> patterns;
  const auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr ? v : "";
  };
  std::vector<std::string> roots{env("VIRTUAL_ENV"),        env("CONDA_PREFIX"), env("HOME") + "/.local",
                                 std::string("/usr/local"), std::string("/usr"), std::string("/opt/conda")};
  // Python environments whose bin folder is on PATH (an environment that is used but not activated).
  const std::string path = env("PATH");
  for (std::size_t begin = 0; begin <= path.size();) {
    const std::size_t end = std::min(path.find(':', begin), path.size());
    const std::string dir = path.substr(begin, end - begin);
    if (dir.size() > 4 && dir.ends_with("/bin")) roots.push_back(dir.substr(0, dir.size() - 4));
    begin = end + 1;
  }
  for (const std::string& root : roots) {
    if (root.empty() || root == "/.local") continue;
    for (const char* packages : {"site-packages", "dist-packages"}) {
      patterns.push_back(root + "/lib/python3*/" + packages + "/nvidia/nccl/lib/libnccl.so.2");
    }
  }
  patterns.emplace_back("/usr/lib/python3/dist-packages/nvidia/nccl/lib/libnccl.so.2");
  std::vector<std::string> found;
  for (const std::string& pattern : patterns) {
    glob_t g{};
    if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
      for (std::size_t i = 0; i < g.gl_pathc; ++i) found.emplace_back(g.gl_pathv[i]);
    }
    globfree(&g);
  }
  return found;
}

template <class F>
bool fetch(void* lib, const char* name, F& entry) {
  void* p = dlsym(lib, name);
  entry = reinterpret_cast<F>(p);
  return p != nullptr;
}

Library open_at(void* lib, const std::string& name) {
  Library l;
  l.path = where_loaded(lib, name);
  std::string missing;
  const auto need = [&](const char* fn, auto& entry) {
    if (!fetch(lib, fn, entry)) missing += missing.empty() ? fn : std::string(", ") + fn;
  };
  EntryPoints& a = l.api;
  need("ncclGetVersion", a.ncclGetVersion);
  need("ncclGetUniqueId", a.ncclGetUniqueId);
  need("ncclCommInitRank", a.ncclCommInitRank);
  need("ncclCommInitAll", a.ncclCommInitAll);
  need("ncclCommDestroy", a.ncclCommDestroy);
  need("ncclCommAbort", a.ncclCommAbort);
  need("ncclCommGetAsyncError", a.ncclCommGetAsyncError);
  need("ncclCommCount", a.ncclCommCount);
  need("ncclCommCuDevice", a.ncclCommCuDevice);
  need("ncclCommUserRank", a.ncclCommUserRank);
  need("ncclGetErrorString", a.ncclGetErrorString);
  need("ncclAllReduce", a.ncclAllReduce);
  need("ncclBroadcast", a.ncclBroadcast);
  need("ncclReduceScatter", a.ncclReduceScatter);
  need("ncclAllGather", a.ncclAllGather);
  need("ncclSend", a.ncclSend);
  need("ncclRecv", a.ncclRecv);
  need("ncclGroupStart", a.ncclGroupStart);
  need("ncclGroupEnd", a.ncclGroupEnd);
  fetch(lib, "ncclCommFinalize", a.ncclCommFinalize);
  fetch(lib, "ncclCommInitRankConfig", a.ncclCommInitRankConfig);
  fetch(lib, "ncclCommSplit", a.ncclCommSplit);
  fetch(lib, "ncclGetLastError", a.ncclGetLastError);
  fetch(lib, "ncclMemAlloc", a.ncclMemAlloc);
  fetch(lib, "ncclMemFree", a.ncclMemFree);
  fetch(lib, "ncclCommWindowRegister", a.ncclCommWindowRegister);
  fetch(lib, "ncclCommWindowDeregister", a.ncclCommWindowDeregister);
  if (!missing.empty()) {
    l.why = "cannot use NCCL " + l.path + ": it lacks " + missing + " (lazygraph needs NCCL 2.7 or newer)";
    return l;
  }
  if (a.ncclGetVersion(&l.version) != success) {
    l.why = "cannot use NCCL " + l.path + ": ncclGetVersion failed";
    return l;
  }
  if (l.version < 21800 || a.ncclCommInitRankConfig == nullptr || a.ncclCommSplit == nullptr ||
      a.ncclCommFinalize == nullptr) {
    a.ncclCommInitRankConfig = nullptr;  // no bounded join: ncclCommSplit and Config's layout are 2.18's
    a.ncclCommSplit = nullptr;
  }
  l.usable = true;
  return l;
}

constexpr const char* how_to_point =
    "; install NCCL (e.g. the nvidia-nccl wheel PyTorch uses, or the libnccl2 package) or point lazygraph at "
    "libnccl.so.2 with LAZYGRAPH_NCCL_LIBRARY=/path/to/libnccl.so.2 or lazygraph::set_nccl_library";

Library load() {
  std::string explicit_path;
  if (chosen_path) {
    explicit_path = *chosen_path;
  } else if (const char* env = std::getenv("LAZYGRAPH_NCCL_LIBRARY"); env != nullptr && *env != '\0') {
    explicit_path = env;
  }
  if (!explicit_path.empty()) {
    void* lib = dlopen(explicit_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      Library l;
      l.why = "cannot load NCCL (" + explicit_path + ", as " +
              (chosen_path ? std::string("set_nccl_library") : std::string("LAZYGRAPH_NCCL_LIBRARY")) +
              " asks): " + (err != nullptr ? err : "not found") + how_to_point;
      return l;
    }
    return open_at(lib, explicit_path);
  }
  std::string tried = "libnccl.so.2 (the loader's search)";
  if (void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL); lib != nullptr) return open_at(lib, "libnccl.so.2");
  for (const std::string& candidate : wheel_candidates()) {
    if (void* lib = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL); lib != nullptr) return open_at(lib, candidate);
    tried += ", " + candidate;
  }
  Library l;
  l.why = "cannot load NCCL: not found (tried " + tried +
          ", and the nvidia/nccl/lib folders of Python's site-packages under $VIRTUAL_ENV, $CONDA_PREFIX, ~/.local, "
          "/usr/local, /usr, /opt/conda and each PATH entry's parent folder)" +
          how_to_point;
  return l;
}

const Library& library() {
  const std::lock_guard lock(load_mutex);
  if (!loaded) loaded = load();
  return *loaded;
}

const EntryPoints& api() {
  const Library& l = library();
  if (!l.usable) [[unlikely]]
    throw NcclUnavailable(l.why);
  return l.api;
}

std::string comm_text(Comm comm) {
  if (comm == nullptr) return {};
  const EntryPoints& a = library().api;
  int rank = -1;
  int count = -1;
  int device = -1;
  (void)a.ncclCommUserRank(comm, &rank);
  (void)a.ncclCommCount(comm, &count);
  (void)a.ncclCommCuDevice(comm, &device);
  return "rank " + std::to_string(rank) + " of " + std::to_string(count) + " on device " + std::to_string(device);
}

void check(Result r, std::string_view api_name, std::string_view object, Comm comm = nullptr) {
  if (r != success) [[unlikely]]
    throw_error(r, api_name, object, comm);
}

}  // namespace

void set_library_path(std::string path) {
  const std::lock_guard lock(load_mutex);
  if (loaded && loaded->usable && loaded->path != path) {
    throw UsageError("set_nccl_library(" + path + "): NCCL is already loaded from " + loaded->path +
                     "; call it before the first communicator");
  }
  if (loaded && !loaded->usable) loaded.reset();  // try again with the new path
  chosen_path = std::move(path);
}

void ensure_loaded() { (void)api(); }

bool try_load(std::string* why) noexcept {
  try {
    const Library& l = library();
    if (!l.usable && why != nullptr) *why = l.why;
    return l.usable;
  } catch (const std::exception& e) {
    if (why != nullptr) *why = e.what();
    return false;
  }
}

std::string library_path() {
  (void)api();
  return library().path;
}

int version() {
  (void)api();
  return library().version;
}

std::string version_text(int code) {
  // NCCL_VERSION(X,Y,Z) is X*10000 + Y*100 + Z from 2.9 on, X*1000 + Y*100 + Z before.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code % 10000 / 100 : code % 1000 / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

std::string result_name(int code) {
  switch (code) {
    case success:
      return "ncclSuccess";
    case unhandled_cuda_error:
      return "ncclUnhandledCudaError";
    case system_error:
      return "ncclSystemError";
    case internal_error:
      return "ncclInternalError";
    case invalid_argument:
      return "ncclInvalidArgument";
    case invalid_usage:
      return "ncclInvalidUsage";
    case remote_error:
      return "ncclRemoteError";
    case in_progress:
      return "ncclInProgress";
    default:
      return "ncclResult_t " + std::to_string(code);
  }
}

void throw_error(int code, std::string_view api_name, std::string_view object, Comm comm) {
  std::string detail;
  std::string where(object);
  if (loaded && loaded->usable) {
    const EntryPoints& a = loaded->api;
    if (const char* text = a.ncclGetErrorString(static_cast<Result>(code)); text != nullptr) detail = text;
    if (a.ncclGetLastError != nullptr) {
      if (const char* last = a.ncclGetLastError(comm); last != nullptr && *last != '\0') {
        detail += detail.empty() ? last : std::string(": ") + last;
      }
    }
    if (comm != nullptr) where += (where.empty() ? "" : ", ") + comm_text(comm);
  }
  throw NcclError(std::string(api_name), code, result_name(code), detail, where);
}

namespace {

/// Around every call that enqueues work: NCCL acts on `ctx`'s device, and may set itself up (connect the ranks,
/// enable peer access between their GPUs) also when the stream captures, which thread-local capture forbids.
struct EnqueueScope {
  driver::CurrentContext current;
  driver::RelaxedCapture relaxed;
  explicit EnqueueScope(CUcontext ctx) : current(ctx) {}
};

}  // namespace

UniqueId get_unique_id() {
  UniqueId id;
  check(api().ncclGetUniqueId(&id), "ncclGetUniqueId", "a new communicator's id");
  return id;
}

namespace {

using Clock = std::chrono::steady_clock;

/// `timeout` from now, or the clock's end for a timeout beyond it.
Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  const Clock::time_point now = Clock::now();
  if (timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now)) {
    return Clock::time_point::max();
  }
  return now + timeout;
}

/// Polls ncclCommGetAsyncError on a non-blocking communicator until its last call is no longer in progress: that
/// call's result, or ncclInProgress when `deadline` passed first (or the poll's own failure).
Result settle(const EntryPoints& a, Comm comm, Clock::time_point deadline) noexcept {
  auto pause = std::chrono::microseconds(2);
  for (;;) {
    Result state = success;
    if (const Result r = a.ncclCommGetAsyncError(comm, &state); r != success) return r;
    if (state != in_progress) return state;
    if (Clock::now() >= deadline) return in_progress;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

/// Destroys the non-blocking communicator the ranks joined through, once split: ncclCommFinalize (which NCCL
/// completes on its thread) waited for until `deadline` but at least a second, then ncclCommDestroy; aborted when
/// finalizing fails or takes longer. The split-off communicator does not depend on it (no shared resources).
void destroy_joined_no_throw(const EntryPoints& a, Comm joined, Clock::time_point deadline) noexcept {
  Result r = a.ncclCommFinalize(joined);
  if (r == success || r == in_progress)
    r = settle(a, joined, std::max(deadline, Clock::now() + std::chrono::seconds(1)));
  if (r == success) {
    (void)a.ncclCommDestroy(joined);
  } else {
    (void)a.ncclCommAbort(joined);
  }
}

std::string join_timeout_text(int rank, int ranks, std::string_view object, std::chrono::milliseconds timeout,
                              std::string_view stage) {
  return "Communicator: " + std::string(object) + " did not " + std::string(stage) + " within " +
         std::to_string(timeout.count()) + " ms: a peer never came (each of the " + std::to_string(ranks) +
         " ranks, rank " + std::to_string(rank) +
         " being this one, must make its Communicator from the same id within the timeout); the NCCL "
         "communicator was aborted";
}

/// The NcclError throw_error makes, as an exception_ptr (made before an abort may change NCCL's last error).
std::exception_ptr nccl_error(Result r, std::string_view api_name, std::string_view object) {
  try {
    throw_error(r, api_name, object);
  } catch (...) {
    return std::current_exception();
  }
}

/// Gives up a join: aborts `joined` (non-blocking, so its abort stops and joins NCCL's thread: an init waiting for
/// peers, or a split), after which `*comm` is final: null, or a communicator whose init has ended, well or not,
/// which an abort frees. Then throws `error`.
[[noreturn]] void abandon_join(const EntryPoints& a, Comm joined, Comm* comm, const std::exception_ptr& error) {
  (void)a.ncclCommAbort(joined);  // null-safe
  if (Comm made = std::atomic_ref<Comm>(*comm).load(std::memory_order_acquire); made != nullptr) {
    (void)a.ncclCommAbort(made);
  }
  std::rethrow_exception(error);
}

}  // namespace

Comm comm_init_rank(CUcontext ctx, int ranks, const UniqueId& id, int rank, std::string_view object,
                    std::chrono::milliseconds timeout) {
  const EntryPoints& a = api();
  const driver::CurrentContext current(ctx);
  if (a.ncclCommSplit == nullptr) {  // no bounded join (NCCL before 2.18): blocks until every rank has come
    Comm comm = nullptr;
    check(a.ncclCommInitRank(&comm, ranks, id, rank), "ncclCommInitRank", object);
    return comm;
  }
  const Clock::time_point deadline = deadline_after(timeout);
  Comm joined = nullptr;  // non-blocking: only joined, split and destroyed here, never handed out
  Comm comm = nullptr;    // blocking: written by NCCL's thread when the split's job ends
  const auto error_of = [&](Result r, std::string_view api_name, std::string_view stage) {
    if (r != in_progress) return nccl_error(r, api_name, object);
    return std::make_exception_ptr(TimeoutError(join_timeout_text(rank, ranks, object, timeout, stage)));
  };

  Config joining = config_of(0);
  Result r = a.ncclCommInitRankConfig(&joined, ranks, id, rank, &joining);
  if (r == success || r == in_progress) r = settle(a, joined, deadline);
  if (r != success) abandon_join(a, joined, &comm, error_of(r, "ncclCommInitRankConfig", "join"));

  // Every rank has joined: each splits off the blocking communicator (color 0, key = rank: the same ranks in the
  // same order). On a non-blocking parent ncclCommSplit may return ncclSuccess while its job still runs on NCCL's
  // thread; the parent's asynchronous error says when the job has ended, and only then is `comm` written.
  Config blocking = config_of(1);
  r = a.ncclCommSplit(joined, 0, rank, &comm, &blocking);
  if (r == success || r == in_progress) r = settle(a, joined, deadline);
  if (r != success) {
    abandon_join(a, joined, &comm, error_of(r, "ncclCommSplit", "split off its blocking communicator once joined"));
  }
  comm = std::atomic_ref<Comm>(comm).load(std::memory_order_acquire);
  if (comm == nullptr) {
    abandon_join(a, joined, &comm,
                 nccl_error(internal_error, "ncclCommSplit", std::string(object) + ": no communicator came back"));
  }
  int count = 0;
  int my_rank = -1;
  if (r = a.ncclCommCount(comm, &count); r != success) {
    abandon_join(a, joined, &comm, nccl_error(r, "ncclCommCount", object));
  }
  if (r = a.ncclCommUserRank(comm, &my_rank); r != success) {
    abandon_join(a, joined, &comm, nccl_error(r, "ncclCommUserRank", object));
  }
  if (count != ranks || my_rank != rank) {
    abandon_join(a, joined, &comm,
                 nccl_error(internal_error, "ncclCommSplit",
                            std::string(object) + ": the split communicator is rank " + std::to_string(my_rank) +
                                " of " + std::to_string(count) + ", not rank " + std::to_string(rank) + " of the " +
                                std::to_string(ranks) + " ranks that joined"));
  }
  destroy_joined_no_throw(a, joined, deadline);
  return comm;
}

bool bounded_join_supported() noexcept {
  if (!try_load(nullptr)) return false;
  return loaded->api.ncclCommSplit != nullptr;
}

std::vector<Comm> comm_init_all(std::span<const int> devices) {
  const EntryPoints& a = api();
  std::vector<Comm> comms(devices.size(), nullptr);
  std::string object = "devices";
  for (const int d : devices) object += " " + std::to_string(d);
  check(a.ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()), "ncclCommInitAll", object);
  return comms;
}

void comm_destroy_no_throw(Comm comm) noexcept {
  if (comm == nullptr || !loaded || !loaded->usable) return;
  const EntryPoints& a = loaded->api;
  if (a.ncclCommFinalize != nullptr && a.ncclCommFinalize(comm) != success) {
    (void)a.ncclCommAbort(comm);  // a communicator that cannot finish cleanly is torn down
    return;
  }
  (void)a.ncclCommDestroy(comm);
}

void comm_abort_no_throw(Comm comm) noexcept {
  if (comm == nullptr || !loaded || !loaded->usable) return;
  (void)loaded->api.ncclCommAbort(comm);
}

Result comm_async_error(Comm comm) {
  Result r = success;
  check(api().ncclCommGetAsyncError(comm, &r), "ncclCommGetAsyncError", "communicator", comm);
  return r;
}

int comm_count(Comm comm) {
  int n = 0;
  check(api().ncclCommCount(comm, &n), "ncclCommCount", "communicator");
  return n;
}

int comm_device(Comm comm) {
  int d = 0;
  check(api().ncclCommCuDevice(comm, &d), "ncclCommCuDevice", "communicator");
  return d;
}

int comm_rank(Comm comm) {
  int r = 0;
  check(api().ncclCommUserRank(comm, &r), "ncclCommUserRank", "communicator");
  return r;
}

void all_reduce(CUcontext ctx, const void* send, void* recv, std::size_t count, DataType type, RedOp op, Comm comm,
                CUstream stream, std::string_view object) {
  const EntryPoints& a = api();
  const EnqueueScope scope(ctx);
  check(a.ncclAllReduce(send, recv, count, type, op, comm, stream), "ncclAllReduce", object, comm);
}

void broadcast(CUcontext ctx, const void* send, void* recv, std::size_t count, DataType type, int root, Comm comm,
               CUstream stream, std::string_view object) {
  const EntryPoints& a = api();
  const EnqueueScope scope(ctx);
  check(a.ncclBroadcast(send, recv, count, type, root, comm, stream), "ncclBroadcast", object, comm);
}

void reduce_scatter(CUcontext ctx, const void* send, void* recv, std::size_t recv_count, DataType type, RedOp op,
                    Comm comm, CUstream stream, std::string_view object) {
  const EntryPoints& a = api();
  const EnqueueScope scope(ctx);
  check(a.ncclReduceScatter(send, recv, recv_count, type, op, comm, stream), "ncclReduceScatter", object, comm);
}

void all_gather(CUcontext ctx, const void* send, void* recv, std::size_t send_count, DataType type, Comm comm,
                CUstream stream, std::string_view object) {
  const EntryPoints& a = api();
  const EnqueueScope scope(ctx);
  check(a.ncclAllGather(send, recv, send_count, type, comm, stream), "ncclAllGather", object, comm);
}

void send_recv(CUcontext ctx, std::span<const PointToPoint> transfers, DataType type, Comm comm, CUstream stream,
               std::string_view object) {
  const EntryPoints& a = api();
  const EnqueueScope scope(ctx);
  check(a.ncclGroupStart(), "ncclGroupStart", object, comm);
  Result first_error = success;
  const char* failed_api = "";
  for (const PointToPoint& t : transfers) {
    const Result r = t.send != nullptr ? a.ncclSend(t.send, t.count, type, t.peer, comm, stream)
                                       : a.ncclRecv(t.recv, t.count, type, t.peer, comm, stream);
    if (r != success && first_error == success) {
      first_error = r;
      failed_api = t.send != nullptr ? "ncclSend" : "ncclRecv";
    }
  }
  const Result end = a.ncclGroupEnd();  // always closes the group, also after a failed call inside it
  check(first_error, failed_api, object, comm);
  check(end, "ncclGroupEnd", object, comm);
}

bool symmetric_supported(std::string* why) noexcept {
  if (!try_load(why)) return false;
  const EntryPoints& a = loaded->api;
  if (a.ncclMemAlloc == nullptr || a.ncclMemFree == nullptr || a.ncclCommWindowRegister == nullptr ||
      a.ncclCommWindowDeregister == nullptr) {
    if (why != nullptr) {
      *why = "NCCL " + version_text(loaded->version) + " (" + loaded->path +
             ") has no symmetric memory (ncclCommWindowRegister, NCCL 2.27 or newer)";
    }
    return false;
  }
  return true;
}

void* mem_alloc(CUcontext ctx, std::size_t bytes, std::string_view object) {
  const EntryPoints& a = api();
  if (a.ncclMemAlloc == nullptr) throw_error(invalid_usage, "ncclMemAlloc", "not in this NCCL (2.19 or newer)");
  const driver::CurrentContext current(ctx);
  void* p = nullptr;
  check(a.ncclMemAlloc(&p, bytes), "ncclMemAlloc", object);
  return p;
}

void mem_free_no_throw(CUcontext ctx, void* p) noexcept {
  if (p == nullptr || !loaded || !loaded->usable || loaded->api.ncclMemFree == nullptr) return;
  try {
    const driver::CurrentContext current(ctx);
    (void)loaded->api.ncclMemFree(p);
  } catch (...) {  // NOLINT(bugprone-empty-catch): the context cannot be made current (the driver is gone)
  }
}

std::vector<Window> window_register_all(std::span<const Comm> comms, std::span<void* const> buffers, std::size_t bytes,
                                        std::string_view object) {
  const EntryPoints& a = api();
  if (a.ncclCommWindowRegister == nullptr) {
    throw_error(invalid_usage, "ncclCommWindowRegister", "not in this NCCL (2.27 or newer)");
  }
  std::vector<Window> windows(comms.size(), nullptr);
  const driver::RelaxedCapture relaxed;
  check(a.ncclGroupStart(), "ncclGroupStart", object);
  Result first_error = success;
  for (std::size_t i = 0; i < comms.size(); ++i) {
    const Result r = a.ncclCommWindowRegister(comms[i], buffers[i], bytes, &windows[i], window_symmetric);
    if (r != success && first_error == success) first_error = r;
  }
  const Result end = a.ncclGroupEnd();  // always closes the group
  check(first_error, "ncclCommWindowRegister", object, comms.empty() ? nullptr : comms[0]);
  check(end, "ncclGroupEnd", object, comms.empty() ? nullptr : comms[0]);
  return windows;
}

void window_deregister_no_throw(Comm comm, Window window) noexcept {
  if (comm == nullptr || window == nullptr || !loaded || !loaded->usable ||
      loaded->api.ncclCommWindowDeregister == nullptr) {
    return;
  }
  (void)loaded->api.ncclCommWindowDeregister(comm, window);
}

void group_start() { check(api().ncclGroupStart(), "ncclGroupStart", "a group of NCCL calls"); }

void group_end(std::string_view object) {
  const driver::RelaxedCapture relaxed;  // the group's calls are issued here, connecting the ranks on first use
  check(api().ncclGroupEnd(), "ncclGroupEnd", object);
}

}  // namespace lazygraph::detail::nccl
