// AWQ and GPTQ checkpoints read as they are (src/nn/packed_int4.hpp, methods/awq.cpp, methods/gptq.cpp): a packer
// written here from the formats' public descriptions (AutoAWQ's GEMM packing: eight outputs a word in the order 0, 2,
// 4, 6, 1, 3, 5, 7; AutoGPTQ's: eight inputs a word, low bits first, zero points stored minus 1) packs seeded weights
// quantized to 4 bits with zero points into small checkpoints; DecoderCheckpoint repacks them on the host, and every
// weight must be the packer's (q - zero) * scale exactly, q and k rows reordered as the loader reorders dense ones.
// Every refusal of the config and of the tensors is checked by name. The gpu suite checks that the uploaded decoder
// computes the logits of the same matrices saved in lazygraph's own int4 format, bit for bit.
#include <doctest/doctest.h>

#include <lazygraph/nn/checkpoint.hpp>
#include <lazygraph/nn/decoder_quantization.hpp>
#include <lazygraph/nn/decoder_tensors.hpp>
#include <lazygraph/nn/quantized_checkpoint.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/files.hpp"
#include "common/gpu.hpp"
#include "common/nn.hpp"
#include "common/rewrite_safetensors.hpp"
#include "common/same_decoding.hpp"
#include "common/small_decoder.hpp"
#include "common/temp_dir.hpp"

using namespace lazygraph;
using namespace lazygraph::nn;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

/// A matrix quantized to 4 bits with a zero point and a scale per group of inputs, [outputs][inputs] as Hugging Face
/// stores weights: what both packings hold.
struct Int4 {
  int outputs = 0;
  int inputs = 0;
  int group = 0;
  std::vector<int> q;       // [outputs][inputs], 0..15
  std::vector<int> zero;    // [outputs][groups], 0..15
  std::vector<half> scale;  // [outputs][groups]
  std::vector<int> g_idx;   // [inputs], each input's group: k / group, or any grouping (GPTQ's desc_act)

  [[nodiscard]] int groups() const { return inputs / group; }
  [[nodiscard]] std::size_t at(int n, int k) const { return static_cast<std::size_t>(n) * inputs + k; }
  [[nodiscard]] std::size_t group_at(int n, int k) const {
    return static_cast<std::size_t>(n) * groups() + static_cast<std::size_t>(g_idx[static_cast<std::size_t>(k)]);
  }
  /// (q - zero) * scale: exact in float (at most 5 bits times 11).
  [[nodiscard]] float weight(int n, int k) const {
    return static_cast<float>(q[at(n, k)] - zero[group_at(n, k)]) * scale[group_at(n, k)].to_float();
  }
};

/// `w` ([outputs][inputs]) rounded to nearest in each group: symmetric, zero 8 and scale absmax / 7 (GPTQ's sym); or
/// over the group's range with 0, zero point at least `lowest_zero` (GPTQ's stored zero - 1 must not be -1). Group g
/// holds inputs order[g * group .. (g + 1) * group - 1] (k itself when order is empty).
Int4 quantize_int4(const std::vector<float>& w, int outputs, int inputs, int group, bool symmetric, int lowest_zero,
                   std::vector<int> order = {}) {
  if (order.empty()) {
    order.resize(static_cast<std::size_t>(inputs));
    std::iota(order.begin(), order.end(), 0);
  }
  Int4 m{outputs, inputs, group, std::vector<int>(w.size()), {}, {}, std::vector<int>(order.size())};
  for (std::size_t j = 0; j < order.size(); ++j) {
    m.g_idx[static_cast<std::size_t>(order[j])] = static_cast<int>(j) / group;
  }
  for (int n = 0; n < outputs; ++n) {
    for (int g = 0; g < m.groups(); ++g) {
      float lo = 0;
      float hi = 0;
      for (int j = g * group; j < (g + 1) * group; ++j) {
        const int k = order[static_cast<std::size_t>(j)];
        lo = std::min(lo, w[m.at(n, k)]);
        hi = std::max(hi, w[m.at(n, k)]);
      }
      const float range = symmetric ? std::max(-lo, hi) / 7 : (hi - lo) / 15;
      const half s = half::from_float(range > 0 ? range : 1.0F);
      const int z = symmetric ? 8 : std::clamp(static_cast<int>(std::lround(-lo / s.to_float())), lowest_zero, 15);
      m.scale.push_back(s);
      m.zero.push_back(z);
      for (int j = g * group; j < (g + 1) * group; ++j) {
        const int k = order[static_cast<std::size_t>(j)];
        m.q[m.at(n, k)] = std::clamp(static_cast<int>(std::lround(w[m.at(n, k)] / s.to_float())) + z, 0, 15);
      }
    }
  }
  return m;
}

std::vector<std::byte> bytes_of(const std::vector<std::uint32_t>& words) {
  std::vector<std::byte> out(words.size() * 4);
  std::memcpy(out.data(), words.data(), out.size());
  return out;
}

std::vector<std::byte> bytes_of(const std::vector<half>& halves) {
  std::vector<std::byte> out(halves.size() * 2);
  for (std::size_t i = 0; i < halves.size(); ++i) std::memcpy(out.data() + 2 * i, &halves[i].bits, 2);
  return out;
}

/// The scales [groups][outputs], as both packings store them.
lgtest::OwnedTensor scales_tensor(const Int4& m, const std::string& module) {
  std::vector<half> s;
  for (int g = 0; g < m.groups(); ++g) {
    for (int n = 0; n < m.outputs; ++n) s.push_back(m.scale[static_cast<std::size_t>(n) * m.groups() + g]);
  }
  return {module + ".scales", DType::f16, {m.groups(), m.outputs}, bytes_of(s)};
}

/// AutoAWQ's GEMM packing: word (k, c) of qweight [inputs][outputs / 8] holds output 8c + order[i] in bits 4i..4i+3,
/// and qzeros [groups][outputs / 8] the zero points alike.
void pack_awq(const Int4& m, const std::string& module, std::vector<lgtest::OwnedTensor>& out) {
  constexpr int order[] = {0, 2, 4, 6, 1, 3, 5, 7};
  const int words = m.outputs / 8;
  std::vector<std::uint32_t> qweight(static_cast<std::size_t>(m.inputs) * words);
  std::vector<std::uint32_t> qzeros(static_cast<std::size_t>(m.groups()) * words);
  for (int c = 0; c < words; ++c) {
    for (int i = 0; i < 8; ++i) {
      const int n = 8 * c + order[i];
      for (int k = 0; k < m.inputs; ++k) {
        qweight[static_cast<std::size_t>(k) * words + c] |= static_cast<std::uint32_t>(m.q[m.at(n, k)]) << (4 * i);
      }
      for (int g = 0; g < m.groups(); ++g) {
        qzeros[static_cast<std::size_t>(g) * words + c] |=
            static_cast<std::uint32_t>(m.zero[static_cast<std::size_t>(n) * m.groups() + g]) << (4 * i);
      }
    }
  }
  out.push_back({module + ".qweight", DType::i32, {m.inputs, words}, bytes_of(qweight)});
  out.push_back({module + ".qzeros", DType::i32, {m.groups(), words}, bytes_of(qzeros)});
  out.push_back(scales_tensor(m, module));
}

/// AutoGPTQ's packing: word (r, n) of qweight [inputs / 8][outputs] holds input 8r + i in bits 4i..4i+3; word (g, c)
/// of qzeros [groups][outputs / 8] holds output 8c + i's zero point minus 1; g_idx [inputs] each input's group.
void pack_gptq(const Int4& m, const std::string& module, std::vector<lgtest::OwnedTensor>& out) {
  const int words = m.outputs / 8;
  std::vector<std::uint32_t> qweight(static_cast<std::size_t>(m.inputs / 8) * m.outputs);
  std::vector<std::uint32_t> qzeros(static_cast<std::size_t>(m.groups()) * words);
  std::vector<std::uint32_t> g_idx(static_cast<std::size_t>(m.inputs));
  for (int n = 0; n < m.outputs; ++n) {
    for (int k = 0; k < m.inputs; ++k) {
      qweight[static_cast<std::size_t>(k / 8) * m.outputs + n] |= static_cast<std::uint32_t>(m.q[m.at(n, k)])
                                                                  << (4 * (k % 8));
    }
    for (int g = 0; g < m.groups(); ++g) {
      const auto stored = static_cast<std::uint32_t>(m.zero[static_cast<std::size_t>(n) * m.groups() + g] - 1);
      qzeros[static_cast<std::size_t>(g) * words + n / 8] |= stored << (4 * (n % 8));
    }
  }
  for (int k = 0; k < m.inputs; ++k) {
    g_idx[static_cast<std::size_t>(k)] = static_cast<std::uint32_t>(m.g_idx[static_cast<std::size_t>(k)]);
  }
  out.push_back({module + ".qweight", DType::i32, {m.inputs / 8, m.outputs}, bytes_of(qweight)});
  out.push_back({module + ".qzeros", DType::i32, {m.groups(), words}, bytes_of(qzeros)});
  out.push_back(scales_tensor(m, module));
  out.push_back({module + ".g_idx", DType::i32, {m.inputs}, bytes_of(g_idx)});
}

enum class Method { awq, gptq, gptq_symmetric };

struct PackOptions {
  Method method = Method::awq;
  int group = 64;
  bool head = false;      ///< pack the LM head too
  bool desc_act = false;  ///< GPTQ: groups over a random order of the inputs, one for the matrices of one input
};

/// A random order of `inputs` inputs for `module` (seeded by the input it reads: q, k and v share one, as do gate and
/// up, as GPTQ's one Hessian per input makes them share their act-order).
std::vector<int> act_order(const std::string& module, int inputs) {
  std::string key = module;
  for (const auto& [part, input] : {std::pair{"k_proj", "q_proj"}, {"v_proj", "q_proj"}, {"up_proj", "gate_proj"}}) {
    if (key.ends_with(part)) key = key.substr(0, key.size() - std::string(part).size()) + input;
  }
  std::vector<int> order(static_cast<std::size_t>(inputs));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(std::hash<std::string>{}(key))));
  return order;
}

/// A seeded checkpoint of `c` whose projections (and LM head, if asked) are packed as `o` says, with its
/// quantization_config; the packer's matrices by module name.
std::map<std::string, Int4> write_packed(const fs::path& dir, const DecoderConfig& c, const PackOptions& o) {
  save_seeded_checkpoint(dir, c, DType::f16);
  std::map<std::string, Int4> matrices;
  lgtest::rewrite(dir, [&](std::vector<lgtest::OwnedTensor>& tensors) {
    std::vector<lgtest::OwnedTensor> out;
    for (lgtest::OwnedTensor& t : tensors) {
      const bool packs = t.name.ends_with("_proj.weight") || (o.head && t.name == "lm_head.weight");
      if (!packs) {
        out.push_back(std::move(t));
        continue;
      }
      const auto outputs = static_cast<int>(t.shape[0]);
      const auto inputs = static_cast<int>(t.shape[1]);
      std::vector<float> w(static_cast<std::size_t>(outputs) * inputs);
      for (std::size_t i = 0; i < w.size(); ++i) {
        half h;
        std::memcpy(&h.bits, t.bytes.data() + 2 * i, 2);
        w[i] = h.to_float();
      }
      const std::string module = t.name.substr(0, t.name.size() - std::string(".weight").size());
      const Int4 m =
          quantize_int4(w, outputs, inputs, o.group, o.method == Method::gptq_symmetric,
                        o.method == Method::awq ? 0 : 1, o.desc_act ? act_order(module, inputs) : std::vector<int>{});
      (o.method == Method::awq ? pack_awq : pack_gptq)(m, module, out);
      matrices.emplace(module, m);
    }
    tensors = std::move(out);
  });
  json config = json::parse(lgtest::read_file(dir / "config.json"));
  if (o.method == Method::awq) {
    config["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4},         {"group_size", o.group},
                                     {"zero_point", true},    {"version", "gemm"}, {"modules_to_not_convert", nullptr}};
  } else {
    config["quantization_config"] = {{"quant_method", "gptq"},  {"bits", 4},
                                     {"group_size", o.group},   {"sym", o.method == Method::gptq_symmetric},
                                     {"desc_act", o.desc_act},  {"damp_percent", 0.01},
                                     {"true_sequential", true}, {"checkpoint_format", "gptq"}};
  }
  lgtest::write_file(dir / "config.json", config.dump(2));
  return matrices;
}

/// Edits `dir`/config.json's quantization_config.
void edit_quantization(const fs::path& dir, const std::function<void(json&)>& edit) {
  json config = json::parse(lgtest::read_file(dir / "config.json"));
  edit(config["quantization_config"]);
  lgtest::write_file(dir / "config.json", config.dump(2));
}

/// The modules a quantized matrix stacks, and whether their rows are reordered (q and k).
std::vector<std::pair<std::string, bool>> parts_of(const std::string& name) {
  const std::string module = name.substr(0, name.size() - std::string(".weight").size());
  const std::size_t at = module.find("qkv_proj");
  if (at == std::string::npos) return {{module, false}};
  const auto with = [&](const char* proj) { return module.substr(0, at) + proj; };
  return {{with("q_proj"), true}, {with("k_proj"), true}, {with("v_proj"), false}};
}

/// The order in which the loader stores `m`'s inputs: sorted by group, stably (empty where that is their own order).
std::vector<int> grouped_order(const Int4& m) {
  std::vector<int> order(static_cast<std::size_t>(m.inputs));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return m.g_idx[static_cast<std::size_t>(a)] < m.g_idx[static_cast<std::size_t>(b)];
  });
  return std::is_sorted(order.begin(), order.end()) ? std::vector<int>{} : order;
}

/// Checks every quantized matrix of `checkpoint` against the packer's: each element's q, zero point, scale and weight,
/// row r of a q or k part holding the packed tensor's output rotate_half_row(r), stored column j input
/// input_order()[j] (j itself without an order); and dequantize() the packer's weights in the inputs' order. A down
/// projection whose inputs are reordered keeps no order: gate's and up's row r hold output D[r] instead, D its
/// grouped order, and its column j multiplies their row j. Returns how many matrices store an input order.
std::size_t check_repacked(const DecoderCheckpoint& checkpoint, const std::map<std::string, Int4>& matrices) {
  const int head_dim = checkpoint.config().head_dim();
  std::size_t checked = 0;
  std::size_t reordered = 0;
  for (std::size_t i = 0; i < checkpoint.quantized_layouts().size(); ++i) {
    const QuantizedWeight w = checkpoint.quantized_weight(i);
    CAPTURE(w.layout().name());
    const std::span<const std::int32_t> order = w.input_order();
    reordered += order.empty() ? 0 : 1;
    const std::vector<float> dense = w.dequantize();
    int row = 0;
    std::size_t differ = 0;
    for (const auto& [module, rope] : parts_of(w.layout().name())) {
      const Int4& m = matrices.at(module);
      REQUIRE(w.layout().cols() == m.inputs);
      const std::size_t at = module.rfind('.') + 1;
      const bool gate_up = module.ends_with("gate_proj") || module.ends_with("up_proj");
      const bool down = module.ends_with("down_proj");
      const std::vector<int> by_down =
          gate_up ? grouped_order(matrices.at(module.substr(0, at) + "down_proj")) : std::vector<int>{};
      const std::vector<int> folded = down ? grouped_order(m) : std::vector<int>{};
      if (down) CHECK(order.empty());
      for (int r = 0; r < m.outputs; ++r, ++row) {
        const int n = rope ? rotate_half_row(r, head_dim) : by_down.empty() ? r : by_down[static_cast<std::size_t>(r)];
        for (int j = 0; j < m.inputs; ++j) {
          const int k = !order.empty()    ? order[static_cast<std::size_t>(j)]
                        : !folded.empty() ? folded[static_cast<std::size_t>(j)]
                                          : j;
          const bool same = w.value(row, j) == m.q[m.at(n, k)] && w.zero(row, j) == m.zero[m.group_at(n, k)] &&
                            w.scale(row, j) == m.scale[m.group_at(n, k)].to_float() &&
                            w.dequantized(row, j) == m.weight(n, k) &&
                            dense[static_cast<std::size_t>(row) * m.inputs + j] ==
                                m.weight(n, folded.empty() ? j : folded[static_cast<std::size_t>(j)]);
          differ += same ? 0 : 1;
          ++checked;
        }
      }
    }
    CHECK(row == w.layout().rows());
    CHECK(differ == 0);
  }
  CHECK(checked > 0);
  return reordered;
}

std::string packed_open_error(const fs::path& dir) {
  try {
    (void)DecoderCheckpoint::open(dir);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "(opened)";
}

DecoderConfig gqa_decoder() { return lgtest::small_decoder(2); }  // k and v of 64 rows: q, k and v differ in size

QuantizedFormat int4z(int group) {
  return {.kind = WeightFormat::int4_group, .group = group, .asymmetric = true, .scale_type = ScaleType::f16};
}

}  // namespace

TEST_CASE("an AWQ checkpoint's matrices are repacked on load: every weight is the packer's (q - zero) * scale") {
  for (const int group : {32, 64, 128}) {
    CAPTURE(group);
    const lgtest::TempDir dir("nn-awq");
    const auto matrices = write_packed(dir.path(), gqa_decoder(), {Method::awq, group, false});
    const DecoderCheckpoint checkpoint = DecoderCheckpoint::open(dir.path());
    CHECK(checkpoint.quantized_as_saved());
    CHECK(checkpoint.quantization().attention == int4z(group));
    CHECK(checkpoint.quantization().mlp == int4z(group));
    CHECK_FALSE(checkpoint.quantization().lm_head.has_value());  // lm_head.weight is dense
    REQUIRE(checkpoint.quantized_layouts().size() == 10);        // qkv, o, gate, up, down of 2 layers
    check_repacked(checkpoint, matrices);
  }
}

TEST_CASE("a GPTQ checkpoint's matrices are repacked on load, asymmetric and symmetric, zero points stored minus 1") {
  for (const Method method : {Method::gptq, Method::gptq_symmetric}) {
    for (const int group : {32, 128}) {
      CAPTURE(group);
      CAPTURE(method == Method::gptq);
      const lgtest::TempDir dir("nn-gptq");
      const auto matrices = write_packed(dir.path(), gqa_decoder(), {method, group, false});
      const DecoderCheckpoint checkpoint = DecoderCheckpoint::open(dir.path());
      CHECK(checkpoint.quantization().attention == int4z(group));
      CHECK(checkpoint.quantization().mlp == int4z(group));
      check_repacked(checkpoint, matrices);
    }
  }
}

TEST_CASE("a packed LM head is read too, and a class is quantized only where its tensors are packed") {
  const lgtest::TempDir dir("nn-awq");
  const auto matrices = write_packed(dir.path(), gqa_decoder(), {Method::awq, 128, true});
  const DecoderCheckpoint checkpoint = DecoderCheckpoint::open(dir.path());
  CHECK(checkpoint.quantization().lm_head == int4z(128));
  REQUIRE(checkpoint.quantized_layouts().size() == 11);
  check_repacked(checkpoint, matrices);
  CHECK(checkpoint.llama_config().packed->method == PackedMethod::awq);
  // config.json written back names the method again, and reads back equal
  CHECK(LlamaConfig::parse(checkpoint.llama_config().to_json(), "c").packed == checkpoint.llama_config().packed);
}

TEST_CASE("a GPTQ checkpoint with desc_act is read: each matrix stored group by group, its x gathered in that order") {
  for (const Method method : {Method::gptq, Method::gptq_symmetric}) {
    for (const int group : {32, 128}) {
      CAPTURE(group);
      CAPTURE(method == Method::gptq);
      const lgtest::TempDir dir("nn-gptq-act");
      const auto matrices = write_packed(dir.path(), gqa_decoder(), {method, group, true, true});
      const DecoderCheckpoint checkpoint = DecoderCheckpoint::open(dir.path());
      CHECK(checkpoint.llama_config().packed->desc_act);
      CHECK(checkpoint.quantization().mlp == int4z(group));
      // qkv, o, gate and up of 2 layers and the head keep an order (the down projections' goes to gate's and up's
      // rows), but one group of all of a matrix's inputs has no order to keep: at group 128 none does (d 128)
      CHECK(check_repacked(checkpoint, matrices) == (group == 32 ? 9U : 0U));
      if (group == 32) {  // lazygraph's own files do not record an input order: saving such a matrix is refused
        CHECK_THROWS_WITH_AS((void)QuantizedTensors(checkpoint.quantized_weight(0)),
                             doctest::Contains(("tensor " + checkpoint.quantized_layouts()[0].name() +
                                                ": its columns are stored in another order than its inputs")
                                                   .c_str()),
                             UsageError);
      }
    }
  }
}

TEST_CASE("GPTQ's g_idx is refused where it is no grouping of group_size inputs, or orders one x two ways") {
  const lgtest::TempDir dir("nn-gptq");
  const auto matrices = write_packed(dir.path(), lgtest::small_decoder(), {Method::gptq, 64, false});
  edit_quantization(dir.path(), [](json& q) { q["desc_act"] = true; });
  CHECK(check_repacked(DecoderCheckpoint::open(dir.path()), matrices) == 0);  // the plain grouping: kept as it is
  const std::string g_idx = "model.layers.1.mlp.down_proj.g_idx";
  const auto set_group = [&](const std::string& name, int input, std::int32_t group) {
    lgtest::rewrite(dir.path(), [&](std::vector<lgtest::OwnedTensor>& tensors) {
      for (lgtest::OwnedTensor& t : tensors) {
        if (t.name == name) std::memcpy(t.bytes.data() + 4 * input, &group, 4);
      }
    });
  };
  set_group(g_idx, 3, 1);  // group 0 one input short, group 1 one too many
  std::string error = packed_open_error(dir.path());
  CHECK(error.find("tensor " + g_idx +
                   ": puts 63 inputs in group 0, not group_size 64: it is not a permutation of "
                   "the groups") != std::string::npos);
  set_group(g_idx, 3, 99);
  error = packed_open_error(dir.path());
  CHECK(error.find("tensor " + g_idx + ": puts input 3 in group 99, outside the ") != std::string::npos);
  set_group(g_idx, 3, 1);
  set_group(g_idx, 70, 0);  // inputs 3 and 70 swap groups: a grouping, though not the plain one
  CHECK(packed_open_error(dir.path()) == "(opened)");
  edit_quantization(dir.path(), [](json& q) { q["desc_act"] = false; });
  error = packed_open_error(dir.path());
  CHECK(error.find("tensor " + g_idx +
                   ": puts input 3 in group 1, not 0 (input / group_size): with desc_act false g_idx must be that "
                   "grouping") != std::string::npos);
  edit_quantization(dir.path(), [](json& q) { q["desc_act"] = true; });
  // q, k and v are one matrix, gate and up one kernel's: each pair must group its inputs alike
  for (const auto& [first, other] :
       {std::pair{std::string("model.layers.0.self_attn.q_proj"), std::string("model.layers.0.self_attn.v_proj")},
        std::pair{std::string("model.layers.1.mlp.gate_proj"), std::string("model.layers.1.mlp.up_proj")}}) {
    CAPTURE(other);
    set_group(other + ".g_idx", 3, 1);
    set_group(other + ".g_idx", 70, 0);
    error = packed_open_error(dir.path());
    CHECK(error.find("tensor " + other + ".g_idx: groups its inputs otherwise than " + first +
                     " does: lazygraph multiplies the two with one x") != std::string::npos);
    set_group(other + ".g_idx", 3, 0);
    set_group(other + ".g_idx", 70, 1);
  }
  // without g_idx: the plain grouping, unless desc_act says the inputs were reordered
  lgtest::rewrite(dir.path(), [&](std::vector<lgtest::OwnedTensor>& tensors) {
    std::erase_if(tensors, [&](const lgtest::OwnedTensor& t) { return t.name == g_idx; });
  });
  error = packed_open_error(dir.path());
  CHECK(error.find("tensor model.layers.1.mlp.down_proj.qweight: has no " + g_idx +
                   ": with desc_act true, g_idx must say each input's group") != std::string::npos);
  edit_quantization(dir.path(), [](json& q) { q["desc_act"] = false; });
  check_repacked(DecoderCheckpoint::open(dir.path()), matrices);
}

TEST_CASE("an AWQ or GPTQ quantization_config that lazygraph cannot read is refused naming the key and the value") {
  struct Case {
    Method method;
    std::function<void(json&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {Method::awq, [](json& q) { q["bits"] = 8; },
       "key 'quantization_config.bits' is 8: lazygraph reads AWQ "
       "checkpoints of 4 bits only"},
      {Method::gptq, [](json& q) { q["bits"] = 3; }, "key 'quantization_config.bits' is 3: lazygraph reads GPTQ"},
      {Method::gptq, [](json& q) { q["group_size"] = -1; },
       "key 'quantization_config.group_size' is -1: lazygraph reads GPTQ groups of 32, 64 or 128 inputs (one scale "
       "per output channel over all inputs, -1, is not read)"},
      {Method::awq, [](json& q) { q["group_size"] = 256; }, "key 'quantization_config.group_size' is 256"},
      {Method::awq, [](json& q) { q["version"] = "gemv"; },
       "key 'quantization_config.version' is \"gemv\": lazygraph reads AWQ's GEMM packing only"},
      {Method::awq, [](json& q) { q["version"] = "exllama"; }, "key 'quantization_config.version' is \"exllama\""},
      {Method::awq, [](json& q) { q["backend"] = "llm-awq"; }, "key 'quantization_config.backend' is \"llm-awq\""},
      {Method::awq, [](json& q) { q["zero_point"] = false; }, "key 'quantization_config.zero_point' is false"},
      {Method::awq, [](json& q) { q["modules_to_not_convert"] = "lm_head"; },
       "key 'quantization_config.modules_to_not_convert' must be a list of module names or null"},
      {Method::gptq, [](json& q) { q["checkpoint_format"] = "gptq_v2"; },
       "key 'quantization_config.checkpoint_format' is \"gptq_v2\": lazygraph reads GPTQ's own packing only"},
      {Method::gptq, [](json& q) { q["checkpoint_format"] = "marlin"; },
       "key 'quantization_config.checkpoint_format' is \"marlin\""},
      {Method::gptq, [](json& q) { q["pack_dtype"] = "int8"; }, "key 'quantization_config.pack_dtype' is \"int8\""},
      {Method::gptq,
       [](json& q) {
         q["dynamic"] = {{"model.layers.0", {{"bits", 8}}}};
       },
       "key 'quantization_config.dynamic' gives modules their own settings"},
      {Method::gptq, [](json& q) { q["sym"] = "yes"; }, "key 'quantization_config.sym' must be true or false"},
      {Method::gptq, [](json& q) { q["rotation"] = "hadamard"; },
       "key 'quantization_config.rotation' is not a key lazygraph knows for GPTQ checkpoints"},
      {Method::awq, [](json& q) { q["quant_method"] = "bitsandbytes"; },
       "key 'quantization_config.quant_method' is \"bitsandbytes\": lazygraph reads the quantized checkpoints it "
       "writes itself"},
  };
  const lgtest::TempDir dir("nn-packed-config");
  const fs::path awq = dir.path() / "awq";
  const fs::path gptq = dir.path() / "gptq";
  (void)write_packed(awq, lgtest::small_decoder(), {Method::awq, 128, false});
  (void)write_packed(gptq, lgtest::small_decoder(), {Method::gptq, 128, false});
  const std::string awq_config = lgtest::read_file(awq / "config.json");
  const std::string gptq_config = lgtest::read_file(gptq / "config.json");
  for (const Case& c : cases) {
    CAPTURE(c.message);
    const fs::path folder = c.method == Method::awq ? awq : gptq;
    lgtest::write_file(folder / "config.json", c.method == Method::awq ? awq_config : gptq_config);
    edit_quantization(folder, c.edit);
    const std::string error = packed_open_error(folder);
    CHECK(error.find((folder / "config.json").string()) != std::string::npos);
    CHECK(error.find(c.message) != std::string::npos);
  }
}

TEST_CASE("packed tensors of the wrong dtype, shape or bytes are refused by open, naming the tensor") {
  const std::string q = "model.layers.0.self_attn.q_proj";
  const std::string down = "model.layers.1.mlp.down_proj";
  struct Case {
    Method method;
    std::function<void(std::vector<lgtest::OwnedTensor>&)> edit;
    std::string tensor;
    std::string message;
  };
  const auto find = [](std::vector<lgtest::OwnedTensor>& ts, const std::string& name) -> lgtest::OwnedTensor& {
    return *std::find_if(ts.begin(), ts.end(), [&](const lgtest::OwnedTensor& t) { return t.name == name; });
  };
  const auto set_half = [](lgtest::OwnedTensor& t, std::size_t i, std::uint16_t bits) {
    std::memcpy(t.bytes.data() + 2 * i, &bits, 2);
  };
  const std::vector<Case> cases = {
      {Method::awq, [&](auto& ts) { find(ts, q + ".qweight").dtype = DType::f32; }, q + ".qweight", "I32"},
      {Method::awq,
       [&](auto& ts) {
         lgtest::OwnedTensor& t = find(ts, q + ".qweight");
         t.shape = {t.shape[0] / 2, t.shape[1] * 2};
       },
       q + ".qweight", "[128, 16]"},
      {Method::gptq,
       [&](auto& ts) {
         lgtest::OwnedTensor& t = find(ts, down + ".qzeros");
         t.shape = {t.shape[1], t.shape[0]};
       },
       down + ".qzeros", "I32"},
      {Method::awq, [&](auto& ts) { find(ts, q + ".scales").dtype = DType::bf16; }, q + ".scales", "F16"},
      {Method::awq, [&](auto& ts) { set_half(find(ts, q + ".scales"), 5, 0x7e00); }, q + ".scales",
       "scale 5 (group 0, output 5) is nan, not a finite number >= 0"},
      {Method::gptq, [&](auto& ts) { set_half(find(ts, down + ".scales"), 130, 0x7c00); }, down + ".scales",
       "scale 130 (group 1, output 2) is inf"},
      {Method::awq, [&](auto& ts) { set_half(find(ts, q + ".scales"), 1, 0xbc00); }, q + ".scales", "is -1.000000"},
      {Method::gptq,
       [&](auto& ts) {
         lgtest::OwnedTensor& t = find(ts, down + ".qzeros");
         t.bytes[0] = static_cast<std::byte>(0xF);  // output 0 of group 0 stored 15
       },
       down + ".qzeros", "zero point of group 0, output 0 is stored as 15, meaning 16"},
      {Method::gptq,
       [&](auto& ts) {
         find(ts, down + ".g_idx").shape = {128, 2};
       },
       down + ".g_idx", "[256]"},
      {Method::awq, [&](auto& ts) { std::erase_if(ts, [&](auto& t) { return t.name == q + ".qzeros"; }); },
       q + ".qzeros", "no such tensor"},
  };
  const lgtest::TempDir dir("nn-packed-tensors");
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    CAPTURE(c.message);
    const fs::path folder = dir.path() / std::to_string(i);
    (void)write_packed(folder, lgtest::small_decoder(), {c.method, 128, false});
    lgtest::rewrite(folder, c.edit);
    const std::string error = packed_open_error(folder);
    CHECK(error.find("tensor " + c.tensor) != std::string::npos);
    CHECK(error.find(c.message) != std::string::npos);
  }
}

TEST_CASE(
    "a class mixing packed and dense matrices, a packed module AWQ was told not to convert, or nothing packed "
    "is refused") {
  const lgtest::TempDir dir("nn-packed-mixed");
  const DecoderConfig c = lgtest::small_decoder();
  (void)write_packed(dir.path(), c, {Method::awq, 64, false});
  const std::string o = "model.layers.1.self_attn.o_proj";
  // o_proj of layer 1 stored dense again
  lgtest::rewrite(dir.path(), [&](std::vector<lgtest::OwnedTensor>& ts) {
    std::erase_if(ts, [&](const lgtest::OwnedTensor& t) { return t.name.starts_with(o + "."); });
    ts.push_back(
        {o + ".weight", DType::f16, {c.d, c.d}, std::vector<std::byte>(static_cast<std::size_t>(c.d * c.d) * 2)});
  });
  std::string error = packed_open_error(dir.path());
  CHECK(error.find("tensor " + o + ".weight: is not packed (no " + o +
                   ".qweight) while "
                   "model.layers.0.self_attn.q_proj.qweight is") != std::string::npos);
  CHECK(error.find("a checkpoint mixing AWQ and dense matrices in one class is refused") != std::string::npos);

  const lgtest::TempDir skip("nn-packed-skip");
  (void)write_packed(skip.path(), c, {Method::awq, 64, false});
  edit_quantization(skip.path(), [](json& q) { q["modules_to_not_convert"] = json::array({"lm_head", "mlp.up"}); });
  error = packed_open_error(skip.path());
  CHECK(error.find("tensor model.layers.0.mlp.up_proj.qweight: is packed, but "
                   "quantization_config.modules_to_not_convert names it (\"mlp.up\")") != std::string::npos);

  const lgtest::TempDir dense("nn-packed-none");
  save_seeded_checkpoint(dense.path(), c, DType::f16);
  json config = json::parse(lgtest::read_file(dense.path() / "config.json"));
  config["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}};
  lgtest::write_file(dense.path() / "config.json", config.dump());
  error = packed_open_error(dense.path());
  CHECK(error.find("quantization_config says GPTQ, but no matrix is packed") != std::string::npos);
}

TEST_CASE("an AWQ checkpoint's fp16 scales are refused for a bf16 decoder, naming the format") {
  const lgtest::TempDir dir("nn-awq");
  (void)write_packed(dir.path(), lgtest::small_decoder(), {Method::awq, 128, false});
  const DecoderCheckpoint checkpoint = DecoderCheckpoint::open(dir.path());
  // what upload<bfloat16> checks before it allocates anything
  CHECK_THROWS_WITH_AS(check_quantization(checkpoint.config(), checkpoint.quantization(), ScaleType::bf16),
                       doctest::Contains("fp16 scales"), UsageError);
  CHECK_NOTHROW(check_quantization(checkpoint.config(), checkpoint.quantization(), ScaleType::f16));
}

namespace {

/// The packer's matrices of `checkpoint` saved in lazygraph's own format (quantized_checkpoint.hpp) beside its dense
/// tensors, placed by the layout's documented positions: the same weights, read by the other route.
fs::path lazygraph_twin(const fs::path& packed, const fs::path& twin, const DecoderCheckpoint& checkpoint,
                        const std::map<std::string, Int4>& matrices) {
  fs::create_directories(twin);
  std::vector<QuantizedWeight> weights;
  for (const QuantizedLayout& layout : checkpoint.quantized_layouts()) {
    std::vector<std::uint8_t> values(layout.value_bytes());
    std::vector<std::uint16_t> scales(layout.scale_count());
    std::vector<std::uint8_t> zeros(layout.zero_bytes());
    int row = 0;
    for (const auto& [module, rope] : parts_of(layout.name())) {
      const Int4& m = matrices.at(module);
      for (int r = 0; r < m.outputs; ++r, ++row) {
        const int n = rope ? rotate_half_row(r, checkpoint.config().head_dim()) : r;
        for (int k = 0; k < m.inputs; ++k) {
          const QuantizedLayout::ValuePosition at = layout.value_position(row, k);
          values[at.byte] |= static_cast<std::uint8_t>(m.q[m.at(n, k)] << (at.high_nibble ? 4 : 0));
          scales[layout.scale_index(row, k)] = m.scale[m.group_at(n, k)].bits;
          zeros[layout.scale_index(row, k)] = static_cast<std::uint8_t>(m.zero[m.group_at(n, k)]);
        }
      }
    }
    weights.emplace_back(layout, std::move(values), std::move(scales), std::move(zeros));
  }
  std::vector<QuantizedTensors> parts;
  for (const QuantizedWeight& w : weights) parts.emplace_back(w);
  std::vector<lgtest::OwnedTensor> dense;
  {
    const SafetensorsFile file = SafetensorsFile::open(packed / "model.safetensors");
    for (const TensorInfo& t : file.tensors()) {
      if (t.name.ends_with(".weight"))
        dense.push_back({t.name, t.dtype, t.shape, {file.data(t).begin(), file.data(t).end()}});
    }
  }
  std::vector<TensorToWrite> out;
  for (const lgtest::OwnedTensor& t : dense) out.push_back({t.name, t.dtype, t.shape, t.bytes});
  for (const QuantizedTensors& p : parts) out.insert(out.end(), p.tensors().begin(), p.tensors().end());
  write_safetensors(twin / "model.safetensors", out);
  LlamaConfig config = checkpoint.llama_config();
  config.packed.reset();
  config.save_id.clear();
  lgtest::write_file(twin / "config.json", config.to_json());
  return twin;
}

void check_same_logits_as_lazygraph_int4(Method method) {
  const lgtest::TempDir dir("nn-packed-gpu");
  const auto matrices = write_packed(dir.path() / "packed", gqa_decoder(), {method, 64, true});
  const DecoderCheckpoint packed = DecoderCheckpoint::open(dir.path() / "packed");
  const DecoderCheckpoint twin =
      DecoderCheckpoint::open(lazygraph_twin(dir.path() / "packed", dir.path() / "twin", packed, matrices));
  REQUIRE_FALSE(twin.llama_config().packed.has_value());
  Stream& s = lgtest::stream();
  Decoder a(s, lgtest::nn_kernels(), packed.config(), packed.upload<half>(s));
  Decoder b(s, lgtest::nn_kernels(), twin.config(), twin.upload<half>(s));
  lgtest::check_same_decoding(a, b, 7);
  Decoder loaded = load_decoder(s, lgtest::nn_kernels(), dir.path() / "packed");
  Decoder again(s, lgtest::nn_kernels(), twin.config(), twin.upload<half>(s));
  lgtest::check_same_decoding(loaded, again, 11);
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE(
      "a decoder loaded from an AWQ checkpoint computes the logits of the same weights in lazygraph's int4, "
      "bit for bit") {
    check_same_logits_as_lazygraph_int4(Method::awq);
  }
  TEST_CASE(
      "a decoder loaded from a GPTQ checkpoint computes the logits of the same weights in lazygraph's int4, "
      "bit for bit") {
    check_same_logits_as_lazygraph_int4(Method::gptq);
    check_same_logits_as_lazygraph_int4(Method::gptq_symmetric);
  }
}
