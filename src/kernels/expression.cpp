// Fused elementwise expressions: the generated source (expression.hpp's ExpressionWriter), and the in-memory cache of
// their compiled kernels, per source and device (assign_op.hpp's expression_kernel), over the disk KernelCache.
#include "lazygraph/kernels/expression.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <initializer_list>
#include <mutex>
#include <unordered_map>

#include "lazygraph/detail/driver/capture.hpp"
#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/driver/error.hpp"
#include "lazygraph/driver/kernel_module.hpp"
#include "lazygraph/kernels/assign_op.hpp"
#include "lazygraph/kernels/kernel_cache.hpp"
#include "lazygraph/kernels/kernel_set.hpp"
#include "lazygraph/kernels/nvrtc.hpp"

namespace lazygraph {

namespace detail {

namespace {

/// 64-bit FNV-1a of `text`, as 16 hex digits: names a generated kernel after its source.
std::string hash_hex(std::string_view text) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4U) s[static_cast<std::size_t>(i)] = digits[h & 0xfU];
  return s;
}

std::string address_range(CUdeviceptr begin, std::size_t bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string hex;
  for (CUdeviceptr v = begin; v != 0; v >>= 4U) hex.insert(hex.begin(), digits[v & 0xfU]);
  return "[0x" + (hex.empty() ? std::string("0") : hex) + ", +" + std::to_string(bytes) + " bytes)";
}

/// Appends every piece to `out`.
void append(std::string& out, std::initializer_list<std::string_view> pieces) {
  for (const std::string_view piece : pieces) out.append(piece);
}

constexpr std::string_view kernel_name_placeholder = "LG_EXPR_KERNEL_NAME";

}  // namespace

std::string ExpressionWriter::leaf_name(char prefix) const { return prefix + std::to_string(leaves_.size()); }

std::string ExpressionWriter::span(std::string_view device_type, std::size_t element_size) {
  std::string name = leaf_name('x');
  leaves_.push_back({LeafKind::span, std::string(device_type)});
  smallest_element_ = std::min(smallest_element_, element_size);
  return name;
}

std::string ExpressionWriter::scalar() {
  std::string name = leaf_name('s');
  leaves_.push_back({LeafKind::scalar, "float"});
  return name;
}

std::string ExpressionWriter::broadcast(std::string_view device_type) {
  std::string name = leaf_name('b');
  leaves_.push_back({LeafKind::broadcast, std::string(device_type)});
  return name;
}

std::string ExpressionWriter::temp(bool is_bool, std::string_view expression) {
  std::string name = "t" + std::to_string(temps_++);
  body_ += "  const ";
  body_ += is_bool ? "bool " : "float ";
  body_ += name + " = ";
  body_ += expression;
  body_ += ";\n";
  return name;
}

ExpressionProgram ExpressionWriter::finish(const Emitted& result, std::string_view out_type,
                                           std::size_t out_element_size) const {
  ExpressionProgram p;
  p.description = "out = " + result.text;
  const std::size_t smallest = std::min(smallest_element_, out_element_size);
  p.vector_width = static_cast<int>(16 / smallest);  // 4 floats, or 8 halves / bfloat16s (and 8 floats with them)

  std::string operands;
  std::string body_params;
  std::string body_args_vector;
  std::string body_args_scalar;
  std::string kernel_params;
  std::string broadcasts;
  std::string vector_loads;
  for (std::size_t i = 0; i < leaves_.size(); ++i) {
    const Leaf& leaf = leaves_[i];
    const std::string index = std::to_string(i);
    const std::string_view sep = i == 0 ? "" : ", ";
    const std::string_view type = leaf.device_type;
    switch (leaf.kind) {
      case LeafKind::span:
        append(operands, {sep, "x", index, " ", type, " span"});
        append(body_params, {sep, "float x", index});
        append(body_args_vector, {sep, "x", index, "[j]"});
        append(body_args_scalar, {sep, "lg::expr::load(in", index, " + i)"});
        append(kernel_params, {"const ", type, "* in", index, ", "});
        append(vector_loads,
               {"      float x", index, "[v];\n      lg::expr::load_vec<v>(in", index, " + u * v, x", index, ");\n"});
        p.span_names.push_back("x" + index);
        break;
      case LeafKind::scalar:
        append(operands, {sep, "s", index, " host number"});
        append(body_params, {sep, "float s", index});
        append(body_args_vector, {sep, "s", index});
        append(body_args_scalar, {sep, "s", index});
        append(kernel_params, {"float s", index, ", "});
        break;
      case LeafKind::broadcast:
        append(operands, {sep, "b", index, " ", type, " broadcast"});
        append(body_params, {sep, "float b", index});
        append(body_args_vector, {sep, "b", index});
        append(body_args_scalar, {sep, "b", index});
        append(kernel_params, {"const ", type, "* in", index, ", "});
        append(broadcasts, {"  const float b", index, " = lg::expr::load(in", index, ");\n"});
        p.span_names.push_back("b" + index);
        break;
    }
  }
  const std::string out(out_type);
  const std::string v = std::to_string(p.vector_width);
  // Only the helpers of the 16-bit types the expression uses: every new expression compiles its includes again.
  const auto uses = [&](std::string_view device_type, std::string_view rounding) {
    return out_type == device_type || body_.find(rounding) != std::string::npos ||
           std::any_of(leaves_.begin(), leaves_.end(), [&](const Leaf& l) { return l.device_type == device_type; });
  };

  std::string s;
  s += "// lazygraph fused elementwise expression, generated (include/lazygraph/kernels/expression.hpp).\n";
  s += "// " + p.description + "\n";
  s += "// operands: " + operands + "; out " + out + "\n";
  if (uses("lg::half_t", "lg::expr::round_half(")) s += "#define LG_EXPR_HALF\n";
  if (uses("lg::bf16_t", "lg::expr::round_bf16(")) s += "#define LG_EXPR_BF16\n";
  s += "#include \"lazygraph/expression.cuh\"\n\n";
  s += "namespace {\n\n";
  s += "__device__ __forceinline__ float lg_expr_body(" + body_params + ") {\n";
  s += body_;
  s += "  return " + result.value + ";\n";
  s += "}\n\n";
  s += "}  // namespace\n\n";
  s += "// out[i] = body(operands at i) for i < n; `vectorized`: every pointer is 16-byte aligned.\n";
  s += "extern \"C\" __global__ void __launch_bounds__(256) " + std::string(kernel_name_placeholder) + "(" +
       kernel_params + out + "* out, long long n, int vectorized) {\n";
  s += "  lg::expr::early_launch_prologue();  // may be launched early (LaunchConfig::early_launch)\n";
  s += broadcasts;
  s += "  const long long first = lg::expr::global_index();\n";
  s += "  const long long stride = lg::expr::grid_stride();\n";
  s += "  long long done = 0;\n";
  // Both loops stay rolled (`unroll 1`). Left to itself NVVM unrolls the one-element loop of a float output 4 times
  // and some vector loops twice: each copy of the body is more for NVVM and ptxas to compile (a third to a half of
  // the compile time of a float expression), for loops whose time is the memory's (on the H100 both paths ran as
  // fast rolled, the one-element path up to 8% faster). NVVM left the loops of 16-bit outputs rolled already: their
  // machine code is unchanged.
  s += "  if (vectorized != 0) {\n";
  s += "    constexpr int v = " + v + ";\n";
  s += "    const long long units = n / v;\n";
  s += "#pragma unroll 1\n";
  s += "    for (long long u = first; u < units; u += stride) {\n";
  s += vector_loads;
  s += "      float r[v];\n";
  s += "#pragma unroll\n";
  s += "      for (int j = 0; j < v; ++j) r[j] = lg_expr_body(" + body_args_vector + ");\n";
  s += "      lg::expr::store_vec<v>(out + u * v, r);\n";
  s += "    }\n";
  s += "    done = units * v;\n";
  s += "  }\n";
  s += "#pragma unroll 1\n";
  s += "  for (long long i = done + first; i < n; i += stride) {\n";
  s += "    lg::expr::store(out + i, lg_expr_body(" + body_args_scalar + "));\n";
  s += "  }\n";
  s += "}\n";

  p.kernel_name = "lg_expr_" + hash_hex(s);
  s.replace(s.find(kernel_name_placeholder), kernel_name_placeholder.size(), p.kernel_name);
  p.source = std::move(s);
  return p;
}

std::optional<std::size_t> common_size(std::optional<std::size_t> a, std::optional<std::size_t> b,
                                       std::string_view operation) {
  if (a && b && *a != *b) {
    throw UsageError("fused expression: " + std::string(operation) + " combines spans of different lengths, " +
                     std::to_string(*a) + " and " + std::to_string(*b) +
                     " elements; every span of an expression has one length (broadcast(span) reads one element "
                     "for all)");
  }
  return a ? a : b;
}

void check_broadcast_size(std::size_t size) {
  if (size != 1) {
    throw UsageError("broadcast: the span must hold exactly one element (such as a DeviceScalar's cview()), not " +
                     std::to_string(size));
  }
}

void check_assign_overlap(CUdeviceptr out, std::size_t out_bytes, std::size_t out_element_size, CUdeviceptr operand,
                          std::size_t operand_bytes, std::size_t operand_element_size, bool is_broadcast,
                          std::string_view name, std::string_view description) {
  const bool overlaps =
      out_bytes != 0 && operand_bytes != 0 && out < operand + operand_bytes && operand < out + out_bytes;
  if (!overlaps) return;
  const bool same_elements =
      !is_broadcast && out == operand && out_bytes == operand_bytes && out_element_size == operand_element_size;
  if (same_elements) return;
  throw UsageError("assign: the output " + address_range(out, out_bytes) + " overlaps the " +
                   (is_broadcast ? "broadcast operand " : "operand ") + std::string(name) + " " +
                   address_range(operand, operand_bytes) + " of `" + std::string(description) +
                   "` without being the same elements, so the kernel would read elements it has already written; "
                   "in place is only for exactly the same span (assign(x, x * 2.0F)): write to another buffer and "
                   "copy back");
}

void throw_assign_length_mismatch(std::size_t out, std::size_t expression, std::string_view description) {
  throw UsageError("assign: the output has " + std::to_string(out) + " elements but the spans of `" +
                   std::string(description) + "` have " + std::to_string(expression) +
                   "; pass an output of the same length (or a subspan)");
}

LaunchConfig expression_launch_config(std::size_t n, int vector_width, bool vectorized, unsigned max_blocks) {
  constexpr unsigned block = 256;
  const auto width = static_cast<std::size_t>(std::max(vector_width, 1));
  const std::size_t work = vectorized ? std::max(n / width, n % width) : n;
  const std::size_t blocks = std::clamp<std::size_t>((work + block - 1) / block, 1, std::max(max_blocks, 1U));
  return {{static_cast<unsigned>(blocks), 1, 1}, {block, 1, 1}, 0};
}

KernelCache::Entry compile_expression(const ExpressionProgram& program, std::span<const std::string> options,
                                      bool cubin) {
  const KernelSource source{program.kernel_name + ".cu", program.source};
  const CompileResult result = nvrtc_compile(source, core_kernel_headers(), options, cubin);
  if (!result.succeeded()) {
    throw CompileError(source.name, result.log() + "\n\ngenerated source of the fused expression `" +
                                        program.description + "`:\n" + program.source);
  }
  return {result.image(), result.is_cubin()};
}

namespace {

/// One kernel loaded on one device (its primary context).
struct Loaded {
  CUcontext context = nullptr;
  ExpressionKernel kernel;
};

/// The kernels of one source, per device; its mutex makes one thread compile while others wait.
struct Entry {
  std::mutex mutex;
  std::vector<Loaded> loaded;
};

struct Counters {
  std::atomic<std::size_t> compiled{0};
  std::atomic<std::size_t> disk_hits{0};
  std::atomic<std::size_t> memory_hits{0};
  std::atomic<long long> compile_us{0};
};

/// Every loaded expression kernel, by source. Never destroyed (allocated once and left to the process's end), so
/// that no module is unloaded during static destruction, when the driver may already be shutting down.
class Registry {
 public:
  std::shared_ptr<Entry> entry(const std::string& source) {
    const std::lock_guard lock(mutex_);
    std::shared_ptr<Entry>& e = entries_[source];
    if (!e) e = std::make_shared<Entry>();
    return e;
  }
  void clear() {
    const std::lock_guard lock(mutex_);
    entries_.clear();
  }
  std::size_t loaded() {
    const std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (const auto& kv : entries_) {
      const std::lock_guard entry_lock(kv.second->mutex);
      n += kv.second->loaded.size();
    }
    return n;
  }
  Counters counters;

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<Entry>> entries_;
};

Registry& registry() {
  static Registry* const r = new Registry;  // NOLINT: deliberately never destroyed (see Registry)
  return *r;
}

/// NVRTC's options for a fused expression: nvrtc_options's, and `-minimal`, which leaves out of NVRTC's built-in
/// headers what a generated kernel never uses (textures and surfaces, the device runtime's functions, launches from
/// the device, the runtime's types): about 3 ms less per new expression, with the same machine code. Part of the
/// KernelCache key, as every option.
std::vector<std::string> expression_nvrtc_options(int arch, bool cubin) {
  std::vector<std::string> options = nvrtc_options(arch, cubin);
  options.emplace_back("-minimal");
  return options;
}

ExpressionKernel load_kernel(const ExpressionProgram& program, const Device& device, Counters& counters) {
  const int cc = device.compute_capability().as_int();
  const int arch = nvrtc_target_architecture(cc);
  if (arch == 0) {
    throw UsageError("NVRTC " + nvrtc_version() + " cannot compile the fused expression " + program.kernel_name +
                     " for " + device.name() + " (sm_" + std::to_string(cc) +
                     "): it supports no architecture at or below it");
  }
  // As KernelLibrary: machine code for the device's own architecture when NVRTC knows it, else PTX. (PTX for the
  // driver to compile at load was tried: on the H100 machine the driver's compile of a new expression cost what
  // NVRTC's does, and a disk-cache hit would pay it again in every process.)
  const bool cubin = arch == cc;
  const std::vector<std::string> options = expression_nvrtc_options(arch, cubin);
  const KernelCache cache(KernelCache::default_directory());
  const std::string key =
      KernelCache::key({program.kernel_name + ".cu", program.source}, core_kernel_headers(), options, nvrtc_version());
  std::shared_ptr<const LoadedModule> module;
  if (std::optional<KernelCache::Entry> hit = cache.load(key)) {
    try {
      module = std::make_shared<const LoadedModule>(device, hit->image.data(), program.kernel_name + ".cu");
      counters.disk_hits.fetch_add(1);
    } catch (const CudaError&) {
      cache.remove(key);  // an image this driver refuses: replace it (as KernelLibrary does)
    }
  }
  if (!module) {
    const KernelCache::Entry entry = compile_expression(program, options, cubin);
    cache.store(key, entry);
    module = std::make_shared<const LoadedModule>(device, entry.image.data(), program.kernel_name + ".cu");
    counters.compiled.fetch_add(1);
  }
  return {make_kernel_info(device, std::move(module), program.kernel_name)};
}

}  // namespace

ExpressionKernel expression_kernel(const ExpressionProgram& program, const Device& device) {
  Registry& r = registry();
  const std::shared_ptr<Entry> entry = r.entry(program.source);
  const std::lock_guard lock(entry->mutex);
  const CUcontext context = device.context();
  for (const Loaded& l : entry->loaded) {
    if (l.context == context) {
      r.counters.memory_hits.fetch_add(1);
      return l.kernel;
    }
  }
  if (const std::string why = driver::module_load_forbidden_reason(); !why.empty()) {
    throw CaptureError("fused expression kernel " + program.kernel_name + " (`" + program.description +
                       "`) is not loaded on " + device.name() + " yet, and " + why +
                       " (module loading breaks the capture); call prepare(device) on the assign op before "
                       "CudaGraph::scope / CudaGraph::capture, or record it with CudaGraph::build");
  }
  const auto start = std::chrono::steady_clock::now();
  ExpressionKernel kernel = load_kernel(program, device, r.counters);
  r.counters.compile_us.fetch_add(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count());
  entry->loaded.push_back({context, kernel});
  return kernel;
}

}  // namespace detail

ExpressionCacheStats expression_cache_stats() {
  detail::Registry& r = detail::registry();
  ExpressionCacheStats s;
  s.compiled = r.counters.compiled.load();
  s.disk_hits = r.counters.disk_hits.load();
  s.memory_hits = r.counters.memory_hits.load();
  s.loaded = r.loaded();
  s.compile_ms = static_cast<double>(r.counters.compile_us.load()) / 1000.0;
  return s;
}

void clear_expression_cache() { detail::registry().clear(); }

}  // namespace lazygraph
