#include "lazygraph/kernels/kernel_library.hpp"

#include <algorithm>
#include <chrono>
#include <future>
#include <range/v3/algorithm/equal.hpp>
#include <range/v3/range/conversion.hpp>
#include <range/v3/view/join.hpp>
#include <range/v3/view/transform.hpp>

#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/driver/error.hpp"
#include "lazygraph/kernels/kernel_cache.hpp"

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

/// One kernel file and the headers it compiles with (the core headers and its set's own).
struct ModuleSource {
  const KernelSource* source = nullptr;
  std::span<const KernelSource> headers;
};

/// One module's image: from the cache, or compiled now (and then cached).
struct BuiltModule {
  const KernelSource* source = nullptr;
  std::span<const KernelSource> headers;
  std::string key;
  KernelCache::Entry entry;
  bool from_cache = false;
};

/// What every module of one library is compiled with.
struct BuildSettings {
  std::vector<std::string> options;
  bool cubin = false;
  std::string nvrtc;
};

BuiltModule compile_and_store(ModuleSource m, std::string key, const BuildSettings& settings,
                              const KernelCache& cache) {
  CompileResult result = nvrtc_compile(*m.source, m.headers, settings.options, settings.cubin);
  KernelCache::Entry entry{result.image(), result.is_cubin()};  // image() throws CompileError with the log
  cache.store(key, entry);
  return {m.source, m.headers, std::move(key), std::move(entry), false};
}

BuiltModule build_module(ModuleSource m, const BuildSettings& settings, const KernelCache& cache) {
  std::string key = KernelCache::key(*m.source, m.headers, settings.options, settings.nvrtc);
  if (auto hit = cache.load(key)) return {m.source, m.headers, std::move(key), std::move(*hit), true};
  return compile_and_store(m, std::move(key), settings, cache);
}

/// Every set's headers joined with the core headers, one list per set (`headers[i]` for `sets[i]`), and every
/// file with its set's list. \throws UsageError for a file name in two sets or a set header named like a core one.
std::vector<ModuleSource> module_sources(std::span<const KernelSet> sets,
                                         std::vector<std::vector<KernelSource>>& headers) {
  std::map<std::string, std::string, std::less<>> file_set;
  headers.clear();
  headers.reserve(sets.size());
  for (const KernelSet& set : sets) {
    std::vector<KernelSource> all(core_kernel_headers().begin(), core_kernel_headers().end());
    for (const KernelSource& h : set.headers) {
      const auto same_name = [&](const KernelSource& core) { return core.name == h.name; };
      const auto core = std::find_if(core_kernel_headers().begin(), core_kernel_headers().end(), same_name);
      if (core == core_kernel_headers().end()) {
        all.push_back(h);
      } else if (core->text != h.text) {  // the core set itself lists the core headers: those are no clash
        throw UsageError("kernel set " + set.name + ": its header " + h.name +
                         " has the name of a core header; rename it (e.g. under a folder of the set's name)");
      }
    }
    headers.push_back(std::move(all));
  }
  std::vector<ModuleSource> out;
  for (std::size_t i = 0; i < sets.size(); ++i) {
    for (const KernelSource& source : sets[i].sources) {
      if (auto [it, inserted] = file_set.emplace(source.name, sets[i].name); !inserted) {
        throw UsageError("kernel file " + source.name + " is in both kernel sets " + it->second + " and " +
                         sets[i].name + "; give a library each set once");
      }
      out.push_back({&source, headers[i]});
    }
  }
  return out;
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
      m = compile_and_store({m.source, m.headers}, std::move(m.key), settings, cache);
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

  const std::vector<KernelSet> sets = detail::with_core_kernels(std::move(options.kernel_sets));
  std::vector<std::vector<KernelSource>> headers;
  const std::vector<ModuleSource> sources = module_sources(sets, headers);
  std::vector<KernelSource> all_files;
  all_files.reserve(sources.size());
  for (const ModuleSource& m : sources) all_files.push_back(*m.source);
  declarations_ = KernelDeclarations(all_files);

  // The tile functions: compiled into the persistent programs that call them, with these settings and headers.
  auto build = std::make_shared<detail::KernelBuild>(device);
  build->options = settings.options;
  build->cubin = settings.cubin;
  build->nvrtc = settings.nvrtc;
  build->cache_directory = options.cache_directory.value_or(KernelCache::default_directory());
  std::vector<std::shared_ptr<const std::vector<KernelSource>>> set_headers;
  set_headers.reserve(headers.size());
  for (const std::vector<KernelSource>& h : headers)
    set_headers.push_back(std::make_shared<const std::vector<KernelSource>>(h));
  for (const ModuleSource& m : sources) {
    std::shared_ptr<const KernelSource> file;
    const std::vector<KernelDeclaration> declared = parse_kernel_declarations(m.source->text, m.source->name);
    const auto companion_of = [&](const KernelDeclaration& d) {  // NAME_prefetch of a tile NAME with d's parameters
      constexpr std::string_view suffix = "_prefetch";
      if (!d.name.ends_with(suffix)) return false;
      const std::string base = d.name.substr(0, d.name.size() - suffix.size());
      return std::any_of(declared.begin(), declared.end(), [&](const KernelDeclaration& b) {
        return b.tile && b.name == base && b.parameter_types == d.parameter_types;
      });
    };
    for (const KernelDeclaration& d : declared) {
      if (!d.tile || companion_of(d)) continue;
      if (!file) file = std::make_shared<const KernelSource>(*m.source);
      const std::size_t set = static_cast<std::size_t>(
          std::find_if(headers.begin(), headers.end(), [&](const auto& h) { return h.data() == m.headers.data(); }) -
          headers.begin());
      auto info = std::make_shared<detail::TileInfo>();
      info->name = d.name;
      info->declaration = d;
      info->file = file;
      info->headers = set_headers.at(set);
      info->build = build;
      // A companion NAME_prefetch of the same parameters in the same file is the function's prefetch.
      const auto companion = std::find_if(declared.begin(), declared.end(), [&](const KernelDeclaration& p) {
        return p.tile && p.name == d.name + "_prefetch" && p.parameter_types == d.parameter_types;
      });
      if (companion != declared.end()) info->prefetch = companion->name;
      if (auto [it, inserted] = tiles_.emplace(d.name, std::move(info)); !inserted) {
        throw UsageError("tile function " + d.name + " is declared in both " + it->second->file->name + " and " +
                         m.source->name + "; tile function names must be unique across every kernel set of a library");
      }
    }
  }

  // Compile the files concurrently: each NVRTC program is independent, and a cold start is dominated by them.
  std::vector<std::future<BuiltModule>> pending;
  pending.reserve(sources.size());
  for (const ModuleSource& m : sources) {
    pending.push_back(std::async(std::launch::async, build_module, m, std::cref(settings), std::cref(cache)));
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
    const std::shared_ptr<const LoadedModule> module = load_module(device, m, settings, cache);
    for (const std::string& kernel : module->function_names()) {
      // Names with a leading "__" are reserved to the implementation (the compiler's or a runtime's own kernels,
      // should a module carry any): not the library's to hand out, nor to collide with a user's.
      if (kernel.starts_with("__")) continue;
      if (auto [it, inserted] = defined_in.emplace(kernel, m.source->name); !inserted) {
        throw UsageError("kernel " + kernel + " is defined in both " + it->second + " and " + m.source->name +
                         "; kernel names must be unique across every kernel set of a library");
      }
      kernels_.emplace(kernel, detail::make_kernel_info(device, module, kernel));
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

std::vector<std::string> KernelLibrary::tile_names() const {
  return tiles_ | ranges::views::transform([](const auto& kv) { return kv.first; }) | ranges::to<std::vector>();
}

std::shared_ptr<const detail::TileInfo> KernelLibrary::lookup_tile(std::string_view name,
                                                                   const std::vector<std::string>& types,
                                                                   std::string_view signature) const {
  const auto it = tiles_.find(name);
  if (it == tiles_.end()) {
    throw UsageError("unknown tile function \"" + std::string(name) + "\": the kernel library has " +
                     (tiles_.empty() ? std::string("none (declare one as `extern \"C\" __device__ void NAME(lg::Tile "
                                                   "tile, ...)` in a kernel file)")
                                     : join(tile_names(), ", ")));
  }
  check_kernel_signature(it->second->declaration, types, signature);
  return it->second;
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
