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
  const KernelSource* source = nullptr;
  std::string key;
  KernelCache::Entry entry;
  bool from_cache = false;
};

/// What every module of one library is compiled with.
struct BuildSettings {
  std::span<const KernelSource> headers;
  std::vector<std::string> options;
  bool cubin = false;
  std::string nvrtc;
};

BuiltModule compile_and_store(const KernelSource& source, std::string key, const BuildSettings& settings,
                              const KernelCache& cache) {
  CompileResult result = nvrtc_compile(source, settings.headers, settings.options, settings.cubin);
  KernelCache::Entry entry{result.image(), result.is_cubin()};  // image() throws CompileError with the log
  cache.store(key, entry);
  return {&source, std::move(key), std::move(entry), false};
}

BuiltModule build_module(const KernelSource& source, const BuildSettings& settings, const KernelCache& cache) {
  std::string key = KernelCache::key(source, settings.headers, settings.options, settings.nvrtc);
  if (auto hit = cache.load(key)) return {&source, std::move(key), std::move(*hit), true};
  return compile_and_store(source, std::move(key), settings, cache);
}

/// Loads `m`'s image. One from the cache that the driver rejects is evicted and replaced by a fresh
/// compilation (`m` then describes that); only a fresh image that fails to load is an error.
std::shared_ptr<const LoadedModule> load_module(const Device& device, BuiltModule& m, const BuildSettings& settings,
                                                const KernelCache& cache) {
  if (m.from_cache) {
    try {
      return std::make_shared<const LoadedModule>(device, m.entry.image.data(), m.source->name);
    } catch (const CudaError&) {
      // It passed the checksum, so it was stored as it is: a bad toolchain, or an image this driver no longer
      // accepts. Every later run would fail the same way, so replace it.
      cache.remove(m.key);
      m = compile_and_store(*m.source, std::move(m.key), settings, cache);
    }
  }
  return std::make_shared<const LoadedModule>(device, m.entry.image.data(), m.source->name);
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
  BuildSettings settings;
  settings.cubin = arch == cc;
  settings.options = nvrtc_options(arch, settings.cubin);
  settings.nvrtc = nvrtc_version();
  const KernelCache cache(options.cache_directory.value_or(KernelCache::default_directory()));

  std::span<const KernelSource> sources = embedded_kernel_sources();
  settings.headers = embedded_kernel_headers();
  if (options.sources) {
    sources = *options.sources;
    settings.headers = options.headers;
  }
  declarations_ = KernelDeclarations(sources);

  // Compile the files concurrently: each NVRTC program is independent, and a cold start is dominated by them.
  std::vector<std::future<BuiltModule>> pending;
  pending.reserve(sources.size());
  for (const KernelSource& source : sources) {
    pending.push_back(
        std::async(std::launch::async, build_module, std::cref(source), std::cref(settings), std::cref(cache)));
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
  const int shared_per_block = device.limits().max_shared_per_block;
  for (BuiltModule& m : built) {
    const std::shared_ptr<const LoadedModule> module = load_module(device, m, settings, cache);
    for (const std::string& kernel : module->function_names()) {
      if (auto [it, inserted] = defined_in.emplace(kernel, m.source->name); !inserted) {
        throw UsageError("kernel " + kernel + " is defined in both " + it->second + " and " + m.source->name +
                         "; kernel names must be unique across kernels/");
      }
      auto info = std::make_shared<detail::KernelInfo>(device);
      info->function = module->function(kernel);
      info->name = kernel;
      info->module = module;
      info->max_threads_per_block = detail::driver::function_attribute(device.context(), info->function,
                                                                       CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, kernel);
      info->static_shared_bytes = detail::driver::function_attribute(device.context(), info->function,
                                                                     CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, kernel);
      info->dynamic_shared_limit.store(shared_per_block - info->static_shared_bytes);
      kernels_.emplace(kernel, std::move(info));
    }
    ++stats_.modules;
    (m.from_cache ? stats_.cache_hits : stats_.compiled) += 1;
  }
  stats_.architecture = arch;
  stats_.cubin = settings.cubin;
  stats_.milliseconds = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

std::vector<std::string> KernelLibrary::kernel_names() const {
  return kernels_ | ranges::views::transform([](const auto& kv) { return kv.first; }) | ranges::to<std::vector>();
}

std::shared_ptr<detail::KernelInfo> KernelLibrary::lookup(std::string_view name, const std::vector<std::string>& types,
                                                          const std::vector<std::size_t>& sizes,
                                                          std::string_view signature) const {
  const auto it = kernels_.find(name);
  if (it == kernels_.end()) {
    throw UsageError("unknown kernel \"" + std::string(name) + "\": the kernel library has " +
                     (kernels_.empty() ? std::string("no kernels") : join(kernel_names(), ", ")));
  }
  const detail::KernelInfo& info = *it->second;
  const KernelDeclaration& declared = declarations_.require(name, "module " + info.module->name());
  check_kernel_signature(declared, types, signature);
  // The types agree; the sizes still catch a class type whose host and device layouts differ.
  const std::vector<std::size_t> compiled =
      detail::driver::function_parameter_sizes(device_.context(), info.function, declared.parameter_types.size(), name);
  if (!ranges::equal(compiled, sizes)) {
    throw UsageError("kernel " + std::string(name) + ": the declared signature " + std::string(signature) + " has " +
                     std::to_string(sizes.size()) + " parameters of sizes " + join_sizes(sizes) +
                     " bytes, but the compiled kernel has " + std::to_string(compiled.size()) + " of sizes " +
                     join_sizes(compiled) + "; make the host types' layouts match the kernel's (" + declared.file +
                     ")");
  }
  return it->second;
}

}  // namespace lazygraph
