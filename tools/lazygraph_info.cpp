// lazygraph-info: prints what a user needs when something does not work — the CUDA driver (loaded or not,
// from where, why not), each GPU, NVRTC and the architecture kernels are compiled for, the kernel cache, and
// which graph features this machine supports — and clears the kernel cache on request.
//
// Without a driver or a GPU it still prints everything else and exits 0: explaining that case is its job.
// Exit status: 0 after a report (whatever it found) or a clear, 1 when the cache could not be cleared, 2 for a
// bad option.
#include <cuda.h>
#include <dlfcn.h>
#include <link.h>
#include <nvrtc.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <lazygraph/driver.hpp>
#include <lazygraph/kernels.hpp>

#ifndef LAZYGRAPH_VERSION
#error "build with -DLAZYGRAPH_VERSION=\"x.y.z\" (tools/meson.build passes the Meson project version)"
#endif

namespace {

namespace fs = std::filesystem;

constexpr const char* usage_text = R"(Usage: lazygraph-info [--clear-cache | --help | --version]

Prints what lazygraph sees on this machine: the CUDA driver (loaded or not, from where, and why not), each
GPU (name, compute capability, SMs, memory), the NVRTC version and the architecture kernels are compiled
for (CUBIN, or PTX the driver compiles at load), the kernel cache (directory, size, entries), and whether
conditional graph nodes and early launch are supported. Without a driver or GPU it says why and exits 0.

Options:
  --clear-cache  remove the kernel cache's entries and leftover temporary files (other files in the
                 directory are kept); prints how many files and bytes were removed
  --help, -h     print this text
  --version      print the lazygraph version

Environment:
  LAZYGRAPH_CUDA_DRIVER  the driver library to load instead of libcuda.so.1
  LAZYGRAPH_CACHE_DIR    the kernel cache directory (empty disables the cache); else
                         $XDG_CACHE_HOME/lazygraph, else $HOME/.cache/lazygraph

Exit status: 0 after a report (whatever it found) or a clear, 1 when the cache could not be cleared,
2 for an unknown option.
)";

/// CUDA versions as the driver reports them (13000) in the form users know ("13.0").
std::string cuda_version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

std::string plural(std::uintmax_t n, std::string_view one, std::string_view many) {
  return std::to_string(n) + " " + std::string(n == 1 ? one : many);
}

/// "600 bytes", or "150994944 bytes (144.0 MiB)" from 1 KiB up: exact for scripts, readable for people.
std::string byte_text(std::uintmax_t bytes) {
  std::string text = plural(bytes, "byte", "bytes");
  if (bytes < 1024) return text;
  constexpr const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024;
  int unit = 0;
  for (; v >= 1024 && unit < 3; ++unit) v /= 1024;
  char buf[32];
  std::snprintf(buf, sizeof buf, " (%.1f %s)", v, units[unit]);
  return text + buf;
}

/// One "label: value" line, values aligned in one column.
void field(int indent, std::string_view label, const std::string& value) {
  constexpr int value_column = 22;
  const int pad = value_column - indent - static_cast<int>(label.size()) - 1;
  std::printf("%*s%.*s:%*s%s\n", indent, "", static_cast<int>(label.size()), label.data(), pad > 1 ? pad : 1, "",
              value.c_str());
}

// ---- the driver -------------------------------------------------------------------------------------------

/// The library name the driver layer opens (src/driver/driver_api.cpp): $LAZYGRAPH_CUDA_DRIVER, else libcuda.so.1.
std::string driver_library_name() {
  const char* override_path = std::getenv("LAZYGRAPH_CUDA_DRIVER");
  return override_path != nullptr && *override_path != '\0' ? override_path : "libcuda.so.1";
}

/// The file the dynamic loader found for the already-loaded driver, or empty when it is not loaded. The driver
/// layer keeps its handle to itself; asking the loader for the same name (RTLD_NOLOAD) finds that copy.
std::string loaded_driver_path(const std::string& name) {
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return {};
  std::string path = name;
  link_map* map = nullptr;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr && *map->l_name != '\0') {
    path = map->l_name;
  }
  dlclose(lib);
  return path;
}

struct DriverReport {
  bool loaded = false;
  int version = 0;  // 0 when not loaded or unknown
};

DriverReport report_driver() {
  const lazygraph::DriverInfo info = lazygraph::driver_info();
  DriverReport r;
  r.loaded = info.loaded;
  const std::string name = driver_library_name();
  const std::string source = name != "libcuda.so.1" ? "from LAZYGRAPH_CUDA_DRIVER"
                                                    : "the default name; LAZYGRAPH_CUDA_DRIVER=FILE loads another file";
  std::printf("CUDA driver\n");
  if (!r.loaded) {
    field(2, "status", "not loaded");
    field(2, "reason", info.why);
    field(2, "library", name + " (" + source + ")");
    return r;
  }
  const std::string path = loaded_driver_path(name);
  field(2, "status", "loaded");
  field(2, "library", (path.empty() ? name : path) + " (opened as " + name + ", " + source + ")");
  r.version = info.version;
  if (r.version == 0) {
    field(2, "version", "unknown: " + info.why);
    return r;
  }
  field(2, "version",
        "CUDA " + cuda_version_text(r.version) + " (" + std::to_string(r.version) +
            "); lazygraph was built against CUDA " + cuda_version_text(CUDA_VERSION));
  return r;
}

// ---- GPUs and NVRTC ---------------------------------------------------------------------------------------

/// How kernels are compiled for compute capability `cc` (e.g. 90): the rule of src/kernels/kernel_library.cpp.
std::string compile_target_text(int cc) {
  try {
    const int arch = lazygraph::nvrtc_target_architecture(cc);
    if (arch == 0) {
      return "none: this NVRTC supports no architecture at or below sm_" + std::to_string(cc) +
             "; kernels cannot be compiled for this GPU";
    }
    if (arch == cc) return "sm_" + std::to_string(arch) + " as CUBIN (machine code)";
    return "compute_" + std::to_string(arch) + " as PTX (this NVRTC has no sm_" + std::to_string(cc) +
           "; the driver compiles the PTX when it loads a module)";
  } catch (const std::exception& e) {
    return std::string("unknown: ") + e.what();
  }
}

struct GpuReport {
  int ordinal;
  lazygraph::ComputeCapability capability;
};

std::vector<GpuReport> report_gpus(const DriverReport& driver) {
  std::vector<GpuReport> gpus;
  if (!driver.loaded) {
    std::printf("\nGPUs: none listed: the CUDA driver is not loaded (see its reason above)\n");
    return gpus;
  }
  int n = 0;
  try {
    n = lazygraph::Device::count();
  } catch (const std::exception& e) {
    std::printf("\nGPUs: cannot count them: %s\n", e.what());
    return gpus;
  }
  if (n == 0) {
    std::printf("\nGPUs: none: the driver loaded but reports no CUDA device\n");
    return gpus;
  }
  std::printf("\nGPUs: %d\n", n);
  for (int i = 0; i < n; ++i) {
    try {
      const lazygraph::Device d = lazygraph::Device::get(i);
      const lazygraph::ComputeCapability cc = d.compute_capability();
      std::printf("  GPU %d: %s (compute capability %d.%d, %d SMs)\n", i, d.name().c_str(), cc.major, cc.minor,
                  d.sm_count());
      std::string free_text;
      try {
        free_text = byte_text(d.free_memory());
      } catch (const std::exception& e) {
        free_text = std::string("unknown (") + e.what() + ")";
      }
      field(4, "memory", byte_text(d.total_memory()) + " total, " + free_text + " free");
      field(4, "kernels", compile_target_text(cc.as_int()));
      gpus.push_back({i, cc});
    } catch (const std::exception& e) {
      std::printf("  GPU %d: cannot open: %s\n", i, e.what());
    }
  }
  return gpus;
}

void report_nvrtc() {
  std::printf("\nNVRTC\n");
  try {
    field(2, "version", lazygraph::nvrtc_version());
    int n = 0;
    std::string archs;
    if (nvrtcGetNumSupportedArchs(&n) == NVRTC_SUCCESS && n > 0) {
      std::vector<int> list(static_cast<std::size_t>(n));
      if (nvrtcGetSupportedArchs(list.data()) == NVRTC_SUCCESS) {
        for (const int a : list) archs += (archs.empty() ? "sm_" : " sm_") + std::to_string(a);
      }
    }
    field(2, "architectures", archs.empty() ? "unknown" : archs);
  } catch (const std::exception& e) {
    field(2, "unusable", e.what());
  }
}

// ---- the kernel cache -------------------------------------------------------------------------------------

struct CacheLocation {
  fs::path directory;  // empty: caching disabled
  std::string decided_by;
};

/// KernelCache::default_directory() and the variable that decided it (the same order; the host test
/// checks each case against this tool's output).
CacheLocation cache_location() {
  const fs::path dir = lazygraph::KernelCache::default_directory();
  const auto set = [](const char* var) {
    const char* v = std::getenv(var);
    return v != nullptr && *v != '\0';
  };
  if (std::getenv("LAZYGRAPH_CACHE_DIR") != nullptr) {
    return {dir, set("LAZYGRAPH_CACHE_DIR") ? "LAZYGRAPH_CACHE_DIR" : "LAZYGRAPH_CACHE_DIR is set and empty"};
  }
  if (set("XDG_CACHE_HOME")) return {dir, "XDG_CACHE_HOME"};
  if (set("HOME")) return {dir, "HOME"};
  return {dir, "none of LAZYGRAPH_CACHE_DIR, XDG_CACHE_HOME and HOME is set"};
}

void report_cache() {
  const CacheLocation where = cache_location();
  std::printf("\nKernel cache\n");
  if (where.directory.empty()) {
    field(2, "directory", "none: caching is disabled (" + where.decided_by + "); every run compiles its kernels");
    return;
  }
  field(2, "directory", where.directory.string() + " (from " + where.decided_by + ")");
  std::error_code ec;
  const bool exists = fs::is_directory(where.directory, ec);
  field(2, "exists", exists ? "yes" : "no (the first program that compiles a kernel creates it)");
  try {
    const lazygraph::KernelCache::Usage u = lazygraph::KernelCache(where.directory).usage();
    field(2, "entries", std::to_string(u.entries));
    field(2, "size", byte_text(u.bytes));
    if (u.temporary_files != 0) {
      field(2, "temporary files",
            std::to_string(u.temporary_files) + " (" + byte_text(u.temporary_bytes) +
                "), left by interrupted writers; --clear-cache removes them");
    }
  } catch (const std::exception& e) {
    field(2, "unreadable", e.what());
  }
}

int clear_cache() {
  const CacheLocation where = cache_location();
  if (where.directory.empty()) {
    std::printf("nothing to clear: caching is disabled (%s)\n", where.decided_by.c_str());
    return 0;
  }
  const lazygraph::KernelCache cache(where.directory);
  try {
    const lazygraph::KernelCache::Usage removed = cache.clear();
    std::printf("removed %s, %s, and %s, %s, from %s\n", plural(removed.entries, "entry", "entries").c_str(),
                byte_text(removed.bytes).c_str(),
                plural(removed.temporary_files, "temporary file", "temporary files").c_str(),
                byte_text(removed.temporary_bytes).c_str(), where.directory.c_str());
    const lazygraph::KernelCache::Usage left = cache.usage();
    if (left.entries + left.temporary_files != 0) {
      std::fprintf(stderr, "lazygraph-info: could not remove %s; check the permissions of %s\n",
                   plural(left.entries + left.temporary_files, "file", "files").c_str(), where.directory.c_str());
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lazygraph-info: cannot clear the kernel cache: %s\n", e.what());
    return 1;
  }
}

void report_features(const DriverReport& driver, const std::vector<GpuReport>& gpus) {
  std::printf("\nGraph features\n");
  // Conditional nodes are a driver feature: IF and WHILE since CUDA 12.4 (the version NVIDIA's article on
  // conditional nodes gives; the API first appeared in 12.3), SWITCH and IF with an ELSE body since 12.8.
  if (driver.version == 0) {
    field(2, "conditional nodes",
          std::string("unknown without a ") + (driver.loaded ? "driver version" : "driver") +
              " (IF and WHILE need a driver for CUDA 12.4 or newer, SWITCH and IF/ELSE one for 12.8)");
  } else {
    const auto yes_no = [&](int needed) { return driver.version >= needed ? "yes" : "no"; };
    field(2, "conditional nodes",
          std::string("IF and WHILE ") + yes_no(12040) + " (need CUDA 12.4), SWITCH and IF/ELSE " + yes_no(12080) +
              " (need 12.8); this driver: CUDA " + cuda_version_text(driver.version));
  }
  // Programmatic dependent launch needs sm_90; elsewhere lg::early launches as an ordinary launch.
  std::string early;
  for (const GpuReport& g : gpus) {
    early += (early.empty() ? "" : ", ") + std::string(g.capability.major >= 9 ? "yes" : "no") + " on GPU " +
             std::to_string(g.ordinal);
  }
  field(2, "early launch",
        early.empty() ? "unknown without a GPU (programmatic dependent launch needs compute capability 9.0 or newer)"
                      : early +
                            " (programmatic dependent launch needs compute capability 9.0 or newer; elsewhere "
                            "early launches run as ordinary launches)");
}

void print_summary(const DriverReport& driver, const std::vector<GpuReport>& gpus) {
  if (!gpus.empty()) {
    std::printf("\nSummary: ready for GPU work on %s.\n", plural(gpus.size(), "GPU", "GPUs").c_str());
    return;
  }
  std::printf("\nSummary: no GPU work is possible here: %s. NVRTC and the kernel cache work without a GPU.\n",
              driver.loaded ? "the driver reports no usable GPU" : "the CUDA driver is not loaded (reason above)");
}

}  // namespace
int main(int argc, char** argv) {
  bool clear = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage_text, stdout);
      return 0;
    }
    if (arg == "--version") {
      std::printf("lazygraph %s\n", LAZYGRAPH_VERSION);
      return 0;
    }
    if (arg == "--clear-cache") {
      clear = true;
      continue;
    }
    std::fprintf(stderr, "lazygraph-info: unknown option '%s'; see lazygraph-info --help\n", argv[i]);
    return 2;
  }
  if (clear) return clear_cache();

  std::printf("lazygraph %s (built against CUDA %s)\n\n", LAZYGRAPH_VERSION, cuda_version_text(CUDA_VERSION).c_str());
  const DriverReport driver = report_driver();
  const std::vector<GpuReport> gpus = report_gpus(driver);
  report_nvrtc();
  report_cache();
  report_features(driver, gpus);
  print_summary(driver, gpus);
  return 0;
}
