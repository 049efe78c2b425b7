#include "lazygraph/detail/kernels/kernel_library.hpp"

#include <chrono>
#include <future>
#include <range/v3/algorithm/equal.hpp>
#include <range/v3/range/conversion.hpp>
#include <range/v3/view/join.hpp>
#include <range/v3/view/transform.hpp>

#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/detail/driver/error.hpp"
#include "lazygraph/detail/kernels/kernel_cache.hpp"

namespace lazygraph {

namespace {

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const std::string& s : items) {
    if (!out.empty()) out.append(sep);
    out.append(s);
  }
  return out;
}

std::string join_sizes(const std::vector<std::size_t>& sizes) {
  return "(" +
         join(sizes | ranges::views::transform([](std::size_t s) { return std::to_string(s); }) |
                  ranges::to<std::vector>(),
              ", ") +
         ")";
}

/// One module's image: from the cache, or compiled now (and then cached).
struct BuiltModule {
  std::string name;
  KernelCache::Entry entry;
  bool from_cache = false;
};

BuiltModule build_module(const KernelSource& source, std::span<const KernelSource> headers,
                         const std::vector<std::string>& options, bool cubin, const KernelCache& cache,
                         const std::string& nvrtc) {
  const std::string key = KernelCache::key(source, headers, options, nvrtc);
  if (auto hit = cache.load(key)) return {source.name, std::move(*hit), true};
  CompileResult result = nvrtc_compile(source, headers, options, cubin);
  KernelCache::Entry entry{result.image(), result.is_cubin()};  // image() throws CompileError with the log
  cache.store(key, entry);
  return {source.name, std::move(entry), false};
}

}  // namespace

KernelLibrary::KernelLibrary(const Device& device, KernelLibraryOptions options) : device_(device) {
  const auto start = std::chrono::steady_clock::now();
  const int cc = device.compute_capability().as_int();
  const int arch = nvrtc_target_architecture(cc);
  if (arch == 0) {
    throw UsageError("NVRTC " + nvrtc_version() + " cannot compile for " + device.name() + " (sm_" +
                     std::to_string(cc) + "): it supports no architecture at or below it");
  }
  // Machine code when NVRTC knows the device's own architecture; otherwise PTX of the newest one below it,
  // which the driver compiles for the device when loading.
  const bool cubin = arch == cc;
  const std::vector<std::string> nvrtc_opts = nvrtc_options(arch, cubin);
  const KernelCache cache(options.cache_directory.value_or(KernelCache::default_directory()));
  const std::string nvrtc = nvrtc_version();

  std::span<const KernelSource> sources = embedded_kernel_sources();
  std::span<const KernelSource> headers = embedded_kernel_headers();
  if (options.sources) {
    sources = *options.sources;
    headers = options.headers;
  }

  // Compile the files concurrently: each NVRTC program is independent, and a cold start is dominated by them.
  std::vector<std::future<BuiltModule>> pending;
  pending.reserve(sources.size());
  for (const KernelSource& source : sources) {
    pending.push_back(std::async(std::launch::async, build_module, std::cref(source), headers, std::cref(nvrtc_opts),
                                 cubin, std::cref(cache), std::cref(nvrtc)));
  }
  std::vector<BuiltModule> built;
  built.reserve(pending.size());
  std::exception_ptr first_error;
  for (auto& p : pending) {
    try {
      built.push_back(p.get());
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (first_error) std::rethrow_exception(first_error);

  std::map<std::string, std::string, std::less<>> defined_in;
  for (BuiltModule& m : built) {
    auto module = std::make_shared<const LoadedModule>(device, m.entry.image.data(), m.name);
    for (const std::string& kernel : module->function_names()) {
      if (auto [it, inserted] = defined_in.emplace(kernel, m.name); !inserted) {
        throw UsageError("kernel " + kernel + " is defined in both " + it->second + " and " + m.name +
                         "; kernel names must be unique across kernels/");
      }
      kernels_.emplace(kernel, Entry{module, module->function(kernel)});
    }
    ++stats_.modules;
    (m.from_cache ? stats_.cache_hits : stats_.compiled) += 1;
  }
  stats_.architecture = arch;
  stats_.cubin = cubin;
  stats_.milliseconds = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

std::vector<std::string> KernelLibrary::kernel_names() const {
  return kernels_ | ranges::views::transform([](const auto& kv) { return kv.first; }) | ranges::to<std::vector>();
}

std::shared_ptr<detail::KernelInfo> KernelLibrary::lookup(std::string_view name, const std::vector<std::size_t>& sizes,
                                                          std::string_view signature) const {
  const auto it = kernels_.find(name);
  if (it == kernels_.end()) {
    throw UsageError("unknown kernel \"" + std::string(name) + "\": the kernel library has " +
                     (kernels_.empty() ? std::string("no kernels") : join(kernel_names(), ", ")));
  }
  const std::vector<std::size_t> compiled =
      detail::driver::function_parameter_sizes(device_.context(), it->second.function, sizes.size(), name);
  if (!ranges::equal(compiled, sizes)) {
    throw UsageError("kernel " + std::string(name) + ": the declared signature " + std::string(signature) + " has " +
                     std::to_string(sizes.size()) + " parameters of sizes " + join_sizes(sizes) +
                     " bytes, but the compiled kernel has " + std::to_string(compiled.size()) + " of sizes " +
                     join_sizes(compiled) + "; make the declaration match the kernel in kernels/");
  }
  auto info = std::make_shared<detail::KernelInfo>(device_);
  info->function = it->second.function;
  info->name = std::string(name);
  info->module = it->second.module;
  info->max_threads_per_block = detail::driver::function_attribute(device_.context(), info->function,
                                                                   CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, name);
  info->static_shared_bytes =
      detail::driver::function_attribute(device_.context(), info->function, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, name);
  info->dynamic_shared_limit.store(device_.limits().max_shared_per_block - info->static_shared_bytes);
  return info;
}

}  // namespace lazygraph
