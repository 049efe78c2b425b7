#include "lazygraph/detail/kernels/kernel_info.hpp"

#include <mutex>

#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/driver/error.hpp"

namespace lazygraph::detail {

std::shared_ptr<KernelInfo> make_kernel_info(const Device& device, std::shared_ptr<const LoadedModule> module,
                                             const std::string& name) {
  auto info = std::make_shared<KernelInfo>(device);
  info->function = module->function(name);
  if (info->function == nullptr) throw UsageError("the module " + module->name() + " has no kernel " + name);
  info->name = name;
  info->module = std::move(module);
  info->max_threads_per_block =
      driver::function_attribute(device.context(), info->function, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, name);
  info->static_shared_bytes =
      driver::function_attribute(device.context(), info->function, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, name);
  info->dynamic_shared_limit.store(device.limits().max_shared_per_block - info->static_shared_bytes);
  return info;
}

namespace {

std::string dims(const Dim3& d) {
  return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")";
}

[[noreturn]] void reject(const KernelInfo& k, const LaunchConfig& c, const std::string& why) {
  const std::string cluster = c.cluster.volume() == 1 ? "" : " cluster " + dims(c.cluster);
  const std::string carveout = c.shared_carveout == -1 ? "" : " carveout " + std::to_string(c.shared_carveout) + " %";
  throw UsageError("kernel " + k.name + ": launch configuration grid " + dims(c.grid) + " block " + dims(c.block) +
                   cluster + " shared " + std::to_string(c.shared_bytes) + " B" + carveout + " is invalid on " +
                   k.device.name() + ": " + why);
}

/// LaunchConfig::cluster's rules: nonzero, dividing the grid, at most kMaxClusterBlocks blocks, sm_90 or newer.
void validate_cluster(const KernelInfo& k, const LaunchConfig& c) {
  const Dim3& cl = c.cluster;
  if (cl.x == 0 || cl.y == 0 || cl.z == 0) reject(k, c, "a cluster dimension is zero");
  if (cl.volume() == 1) return;
  const std::string what = "clusters of " + dims(cl) + " blocks";
  if (k.device.compute_capability().major < 9) {
    reject(k, c,
           what + " need sm_90 or newer; this GPU is sm_" + std::to_string(k.device.compute_capability().major) +
               std::to_string(k.device.compute_capability().minor));
  }
  if (cl.volume() > kMaxClusterBlocks) {
    reject(k, c, what + " exceed the " + std::to_string(kMaxClusterBlocks) + " blocks a cluster may portably have");
  }
  if (c.grid.x % cl.x != 0 || c.grid.y % cl.y != 0 || c.grid.z % cl.z != 0) {
    reject(k, c, what + " do not divide the grid");
  }
}

}  // namespace

int max_active_blocks_per_sm(KernelInfo& kernel, unsigned block_threads, unsigned dynamic_shared) {
  // The driver counts no block of more dynamic shared memory than the kernel's attribute: raised as a launch would.
  raise_dynamic_shared_limit(kernel, static_cast<int>(dynamic_shared));
  return driver::max_active_blocks_per_sm(kernel.device.context(), kernel.function, static_cast<int>(block_threads),
                                          dynamic_shared, kernel.name);
}

void validate_launch(const KernelInfo& k, const LaunchConfig& c) {
  const DeviceLimits& lim = k.device.limits();
  if (c.block.x == 0 || c.block.y == 0 || c.block.z == 0) reject(k, c, "a block dimension is zero");
  if (c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0) reject(k, c, "a grid dimension is zero");
  const unsigned block[3] = {c.block.x, c.block.y, c.block.z};
  const unsigned grid[3] = {c.grid.x, c.grid.y, c.grid.z};
  for (int i = 0; i < 3; ++i) {
    if (block[i] > static_cast<unsigned>(lim.max_block_dim[i])) {
      reject(k, c,
             "block dimension " + std::to_string(i) + " exceeds the device's " + std::to_string(lim.max_block_dim[i]));
    }
    if (grid[i] > static_cast<unsigned>(lim.max_grid_dim[i])) {
      reject(k, c,
             "grid dimension " + std::to_string(i) + " exceeds the device's " + std::to_string(lim.max_grid_dim[i]));
    }
  }
  if (c.block.volume() > static_cast<std::size_t>(k.max_threads_per_block)) {
    reject(k, c,
           std::to_string(c.block.volume()) + " threads per block exceed this kernel's limit of " +
               std::to_string(k.max_threads_per_block));
  }
  const auto available = static_cast<long long>(lim.max_shared_per_block_optin) - k.static_shared_bytes;
  if (static_cast<long long>(c.shared_bytes) > available) {
    reject(k, c,
           "dynamic shared memory exceeds the " + std::to_string(available) + " bytes a block of this kernel may have");
  }
  validate_cluster(k, c);
  if (c.shared_carveout < -1 || c.shared_carveout > 100) {
    reject(k, c, "a shared memory carveout is a percent, 0 to 100 (or -1: the kernel's own preference)");
  }
}

void raise_dynamic_shared_limit(KernelInfo& k, int needed) {
  if (needed > k.dynamic_shared_limit.load(std::memory_order_acquire)) [[unlikely]] {
    // Re-checked under the lock: another thread may have raised it further meanwhile, and setting `needed`
    // then would lower the limit below what that thread's launch, perhaps already queued, relies on.
    const std::lock_guard lock(k.dynamic_shared_mutex);
    if (needed > k.dynamic_shared_limit.load(std::memory_order_relaxed)) {
      driver::set_function_attribute(k.device.context(), k.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     needed, k.name);
      k.dynamic_shared_limit.store(needed, std::memory_order_release);
    }
  }
}

void set_shared_carveout(KernelInfo& k, int percent) {
  if (percent < -1 || percent > 100) {
    throw UsageError("kernel " + k.name + ": a shared memory carveout of " + std::to_string(percent) +
                     " % is outside 0..100 (or -1, the driver's default)");
  }
  driver::set_function_attribute(k.device.context(), k.function, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                 percent, k.name);
}

driver::LaunchShape prepare_launch(KernelInfo& k, const LaunchConfig& c) {
  raise_dynamic_shared_limit(k, static_cast<int>(c.shared_bytes));
  // Programmatic dependent launch exists from sm_90 on; elsewhere the kernel's wait is a no-op and the launch
  // an ordinary one.
  const bool early = c.early_launch && k.device.compute_capability().major >= 9;
  return {{c.grid.x, c.grid.y, c.grid.z},
          {c.block.x, c.block.y, c.block.z},
          c.shared_bytes,
          early,
          {c.cluster.x, c.cluster.y, c.cluster.z},
          c.shared_carveout};
}

void add_argument_accesses(std::span<const ArgumentRange> ranges, std::string_view name, AccessSet& out) {
  for (const ArgumentRange& r : ranges) {
    if (r.opaque) {
      out.opaque(name);
    } else if (r.writes) {
      out.write(r.address, r.bytes, name);
    } else {
      out.read(r.address, r.bytes, name);
    }
  }
}

}  // namespace lazygraph::detail
