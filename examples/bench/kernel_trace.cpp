// A kernel timeline of any CUDA program, without Nsight Systems (which the GPU machines lack): a CUDA injection
// library that records every kernel's start and end on the GPU (CUPTI's activity records) and writes them as CSV when
// the program exits. Built as liblazygraph_kernel_trace.so where the toolkit has CUPTI; run a program with
//
//   CUDA_INJECTION64_PATH=build/examples/liblazygraph_kernel_trace.so LAZYGRAPH_TRACE_OUT=trace.csv PROGRAM ...
//
// then examples/bench/kernel_timeline.py trace.csv --first embedding --last sample (a greedy step over 16384+ logits on
// sm_90+: --last argmax_cluster): each step's GPU span, the GPU's idle time between steps (host work between graph
// replays), and each kernel's mean time and the gap before it.
// Columns: start_ns, end_ns (GPU timestamps), blocks (the grid's), name (mangled, quoted). Kernels inside CUDA graphs
// are recorded as their own launches are. Tracing costs time of its own (10-20 % more per step of a 64-row decode
// step on an H200), so compare traced runs with traced runs.
#include <cupti.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace {

FILE* out = nullptr;
std::mutex writing;
constexpr std::size_t kBufferBytes = std::size_t{16} << 20U;

void CUPTIAPI give_buffer(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void write_name(const char* name) {
  std::fputc('"', out);
  for (const char* c = name != nullptr ? name : ""; *c != '\0'; ++c) {
    if (*c == '"') std::fputc('"', out);
    std::fputc(*c, out);
  }
  std::fputc('"', out);
}

void CUPTIAPI take_buffer(CUcontext /*context*/, uint32_t /*stream*/, uint8_t* buffer, size_t /*size*/, size_t valid) {
  const std::lock_guard<std::mutex> lock(writing);
  CUpti_Activity* record = nullptr;
  while (out != nullptr && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    std::fprintf(out, "%llu,%llu,%lld,", static_cast<unsigned long long>(k->start),
                 static_cast<unsigned long long>(k->end), static_cast<long long>(k->gridX) * k->gridY * k->gridZ);
    write_name(k->name);
    std::fputc('\n', out);
  }
  std::size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS && dropped > 0) {
    std::fprintf(stderr, "lazygraph kernel trace: CUPTI dropped %zu records\n", dropped);
  }
  std::free(buffer);
}

void finish() {
  cuptiActivityFlushAll(1);
  const std::lock_guard<std::mutex> lock(writing);
  if (out != nullptr) std::fclose(out);
  out = nullptr;
}

}  // namespace

/// Called by the CUDA driver when it loads this library (CUDA_INJECTION64_PATH). Returns 1; when the file cannot be
/// opened or CUPTI refuses, it says so on stderr and the program runs untraced.
extern "C" int InitializeInjection() {  // NOLINT(readability-identifier-naming): the name the driver calls
  const char* path = std::getenv("LAZYGRAPH_TRACE_OUT");
  path = path != nullptr ? path : "kernel_trace.csv";
  out = std::fopen(path, "w");
  if (out == nullptr) {
    std::fprintf(stderr, "lazygraph kernel trace: cannot write %s; not tracing\n", path);
    return 1;
  }
  std::fprintf(out, "start_ns,end_ns,blocks,name\n");
  const char* error = nullptr;
  CUptiResult r = cuptiActivityRegisterCallbacks(give_buffer, take_buffer);
  if (r == CUPTI_SUCCESS) r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (r != CUPTI_SUCCESS) {
    cuptiGetResultString(r, &error);
    std::fprintf(stderr, "lazygraph kernel trace: CUPTI refused (%s); not tracing\n", error != nullptr ? error : "?");
    std::fclose(out);
    out = nullptr;
    return 1;
  }
  std::atexit(finish);
  return 1;
}
