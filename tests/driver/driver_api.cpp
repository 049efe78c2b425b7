// The driver layer's contract with threads and contexts: every call makes the object's context current for
// itself (a worker thread with no context, or one where other code made another context current, works) and
// gives the caller's context back; RelaxedCapture opens a capture to another library's setup calls and closes it
// again; and the failure paths that only fault injection can reach leak nothing.
#include <doctest/doctest.h>

#include <dlfcn.h>

#include <lazygraph/detail/driver/driver_api.hpp>

#include <thread>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;
namespace drv = lazygraph::detail::driver;

namespace {

/// Another library's view of the driver (as PyTorch or cuBLAS would use it): its own handle to libcuda.
struct OtherCode {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  template <class F>
  F get(const char* name, int version) const {
    using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
    auto get_proc = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
    void* p = nullptr;
    CUdriverProcAddressQueryResult status{};
    REQUIRE(get_proc(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS);
    return reinterpret_cast<F>(p);
  }
  void set_current(CUcontext ctx) const {
    REQUIRE(get<decltype(&cuCtxSetCurrent)>("cuCtxSetCurrent", 4000)(ctx) == CUDA_SUCCESS);
  }
  /// A context of the other code's own on the same device (not the primary one).
  CUcontext create_context(CUdevice dev) const {
    CUcontext ctx = nullptr;
    REQUIRE(get<decltype(&cuCtxCreate)>("cuCtxCreate", CUDA_VERSION)(&ctx, nullptr, 0, dev) == CUDA_SUCCESS);
    return ctx;
  }
  void destroy_context(CUcontext ctx) const { (void)get<decltype(&cuCtxDestroy)>("cuCtxDestroy", 4000)(ctx); }
  CUcontext context_of(CUdeviceptr p) const {
    CUcontext ctx = nullptr;
    REQUIRE(get<decltype(&cuPointerGetAttribute)>("cuPointerGetAttribute", 4000)(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT,
                                                                                 p) == CUDA_SUCCESS);
    return ctx;
  }
};

using lgtest::axpy;

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("a thread with no current context allocates, copies, launches, captures and replays") {
    const auto k = axpy();  // looked up on this thread; used on the worker
    const int n = 4096;
    const auto x = lgtest::random_floats(n);
    std::vector<float> result;
    std::string error;
    std::thread worker([&] {
      try {
        CHECK(drv::current_context() == nullptr);
        Stream s(lgtest::device());
        DeviceBuffer<float> dx = from_host(x).sync_on(s);
        DeviceBuffer<float> dy = zeros<float>(n).sync_on(s);
        auto graph = CudaGraph<>::capture(s, k(grid_for(n, 256), 2.0F, dx.cview(), dy.view(), n));
        graph.launch();
        graph.launch();
        result = lgtest::to_host(s, dy.cview());
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
    worker.join();
    REQUIRE(error.empty());
    std::vector<double> want(n);
    for (int i = 0; i < n; ++i) want[i] = 4.0 * x[i];
    CHECK(lgtest::relative_error(result, want) < 1e-6);
  }

  TEST_CASE("when other code makes no context or its own context current, lazygraph still uses the device's") {
    const OtherCode other;
    REQUIRE(other.lib != nullptr);
    Stream& s = lgtest::stream();
    DeviceBuffer<float> warm(lgtest::device(), 4);  // lazygraph's context is current on this thread now
    other.set_current(nullptr);                     // other code unbinds it behind lazygraph's back
    DeviceBuffer<float> a(lgtest::device(), 1024);
    CHECK(other.context_of(a.view().address()) == lgtest::device().context());
    fill(a.view(), 1.5F).sync_on(s);
    CHECK(lgtest::to_host(s, a.cview())[1023] == 1.5F);

    CUcontext theirs = other.create_context(lgtest::device().state()->device);  // and makes its own current
    other.set_current(theirs);
    {
      DeviceBuffer<float> b(lgtest::device(), 1024);
      CHECK(other.context_of(b.view().address()) == lgtest::device().context());
      auto graph = CudaGraph<>::capture(s, fill(b.view(), 4.0F));
      graph.launch();
      CHECK(lgtest::to_host(s, b.cview())[0] == 4.0F);
      CHECK(drv::current_context() == theirs);  // each call gave the other code its context back
    }
    other.set_current(lgtest::device().context());
    other.destroy_context(theirs);
  }

  TEST_CASE("RelaxedCapture lets another library allocate while this thread captures, then restores the mode") {
    const OtherCode other;
    REQUIRE(other.lib != nullptr);
    const auto exchange =
        other.get<decltype(&cuThreadExchangeStreamCaptureMode)>("cuThreadExchangeStreamCaptureMode", 10010);
    const auto mem_alloc = other.get<decltype(&cuMemAlloc)>("cuMemAlloc", 3020);
    const auto mem_free = other.get<decltype(&cuMemFree)>("cuMemFree", 3020);
    const auto mode_now = [&] {  // swaps a mode in and the thread's back
      CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
      REQUIRE(exchange(&m) == CUDA_SUCCESS);
      const CUstreamCaptureMode now = m;
      REQUIRE(exchange(&m) == CUDA_SUCCESS);
      return now;
    };
    Stream& s = lgtest::stream();
    DeviceBuffer<float> a(lgtest::device(), 64);
    CUresult inside = CUDA_ERROR_UNKNOWN;
    CUstreamCaptureMode during = CU_STREAM_CAPTURE_MODE_GLOBAL;
    CUstreamCaptureMode capturing = CU_STREAM_CAPTURE_MODE_GLOBAL;
    CUstreamCaptureMode restored = CU_STREAM_CAPTURE_MODE_GLOBAL;
    auto graph = CudaGraph<>::scope(s, [&](Scope& sc) {
      sc.record(fill(a.view(), 2.0F));
      capturing = mode_now();
      {
        const drv::CurrentContext current(lgtest::device().context());
        const drv::RelaxedCapture relaxed;  // as around each NCCL call
        during = mode_now();
        CUdeviceptr p = 0;
        inside = mem_alloc(&p, 256);  // what NCCL does when it connects its ranks; thread-local capture forbids it
        if (inside == CUDA_SUCCESS) (void)mem_free(p);
      }
      restored = mode_now();
      sc.record(fill(a.view().subspan(0, 8), 3.0F));  // the capture goes on unharmed
    });
    CHECK(capturing != CU_STREAM_CAPTURE_MODE_RELAXED);  // the thread's own mode (the driver's default: global)
    CHECK(during == CU_STREAM_CAPTURE_MODE_RELAXED);
    CHECK(inside == CUDA_SUCCESS);
    CHECK(restored == capturing);
    graph.launch();
    const std::vector<float> got = lgtest::to_host(s, a.cview());
    CHECK(got[0] == 3.0F);
    CHECK(got[63] == 2.0F);
  }

  TEST_CASE("a replay stream that cannot be created leaks neither the captured graph nor anything else") {
    const Device fresh = Device::get(lgtest::device().ordinal());  // its own, empty stream pool
    Stream s(fresh);
    DeviceBuffer<float> b = zeros<float>(64).sync_on(s);
    const LiveHandles before = live_handles();
    {
      const drv::InjectedFault fault("cuStreamCreate", CUDA_ERROR_OUT_OF_MEMORY);
      CHECK_THROWS_WITH_AS(CudaGraph<>::capture(s, fill(b.view(), 1.0F)), doctest::Contains("cuStreamCreate"),
                           CudaError);
    }
    CHECK(live_handles() == before);
    auto graph = CudaGraph<>::capture(s, fill(b.view(), 1.0F));  // and the next one works
    graph.launch();
    CHECK(lgtest::to_host(s, b.cview())[63] == 1.0F);
  }

  TEST_CASE("a failed instantiation or upload leaks no graph, and the stream captures again") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> b = zeros<float>(64).sync_on(s);
    (void)CudaGraph<>::capture(s, fill(b.view(), 0.0F));  // warm the stream pool
    const LiveHandles before = live_handles();
    for (const char* api : {"cuGraphInstantiateWithFlags", "cuGraphUpload", "cuStreamBeginCapture"}) {
      CAPTURE(api);
      {
        const drv::InjectedFault fault(api, CUDA_ERROR_OUT_OF_MEMORY);
        CHECK_THROWS_AS(CudaGraph<>::capture(s, fill(b.view(), 2.0F)), Error);
      }
      CHECK(live_handles() == before);
      CHECK(capture_status(s) == CaptureStatus::none);
    }
    auto graph = CudaGraph<>::capture(s, fill(b.view(), 3.0F));
    graph.launch();
    CHECK(lgtest::to_host(s, b.cview())[0] == 3.0F);
  }
}

TEST_CASE("a failed call's error names the instance it acted on, its address and, with a context, its device") {
  const std::string described = drv::describe_instance("stream", reinterpret_cast<const void*>(0x1234));
  CHECK(described.starts_with("stream 0x1234"));
}

TEST_SUITE("gpu") {
  TEST_CASE("an instance is described with the device of the context current on the thread") {
    const drv::CurrentContext current(lgtest::device().context());
    const std::string described = drv::describe_instance("event", reinterpret_cast<const void*>(0xbeef0));
    CHECK(described == "event 0xbeef0 on device " + std::to_string(lgtest::device().ordinal()));
  }
}
