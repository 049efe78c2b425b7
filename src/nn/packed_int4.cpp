// AWQ's and GPTQ's packed 4-bit matrices (packed_int4.hpp): checked where the files are mapped, then repacked into
// quantized.hpp's int4 layout with zero points, nibble by nibble, with no copy of the matrix in floats.
#include "packed_int4.hpp"

#include <lazygraph/driver/half.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "formats/storage_format.hpp"
#include "lazygraph/nn/checkpoint_error.hpp"
#include "lazygraph/nn/decoder_tensors.hpp"

namespace lazygraph::nn::detail {

namespace {

constexpr std::array<DType, 1> kI32 = {DType::i32};
constexpr std::array<DType, 1> kF16 = {DType::f16};

/// Word `i` of an I32 tensor's bytes (little-endian, as the file and this host are).
std::uint32_t word(std::span<const std::byte> bytes, std::size_t i) {
  std::uint32_t w = 0;
  std::memcpy(&w, bytes.data() + 4 * i, 4);
  return w;
}

std::uint16_t half_bits(std::span<const std::byte> bytes, std::size_t i) {
  std::uint16_t h = 0;
  std::memcpy(&h, bytes.data() + 2 * i, 2);
  return h;
}

unsigned nibble(std::uint32_t w, int i) { return (w >> (4 * i)) & 0xFU; }

/// The zero point of output n, group gi: the stored nibble plus the packing's zero_offset.
int zero_point(const Int4Packing& packing, std::span<const std::byte> qzeros, int outputs, int gi, int n) {
  const std::uint32_t w = word(
      qzeros, static_cast<std::size_t>(gi) * static_cast<std::size_t>(outputs / 8) + static_cast<std::size_t>(n / 8));
  return static_cast<int>(nibble(w, packing.nibble[static_cast<std::size_t>(n % 8)])) + packing.zero_offset;
}

}  // namespace

QuantizedFormat int4_with_zeros(const PackedQuantization& packed) {
  // the storage table's 4-bit row with zero points: both packings store 4-bit q in [0, 15] with a zero point a group
  const auto rows = storage_formats();
  const auto int4 = std::find_if(rows.begin(), rows.end(),
                                 [](const StorageFormat* f) { return f->value_bits == 4 && f->allows_asymmetric; });
  return {.kind = (*int4)->kind, .group = packed.group, .asymmetric = true, .scale_type = ScaleType::f16};
}

PackedTensors require_packed(const Checkpoint& checkpoint, const PackedQuantization& packed, const std::string& module,
                             int outputs, int inputs, const Int4Packing& packing) {
  const std::string method = packed_method_name(packed.method);
  const auto refuse = [&](const TensorInfo& t, const std::string& why) {
    throw CheckpointError(checkpoint.file_of(t).path(), t.name, why);
  };
  const TensorInfo* first = checkpoint.find(module + ".qweight");
  if (outputs % 8 != 0) {
    throw CheckpointError(checkpoint.file_of(*first).path(), first->name,
                          "has " + std::to_string(outputs) + " outputs, which " + method +
                              " cannot pack: its zero points hold 8 outputs a word");
  }
  if (inputs % packed.group != 0) {
    throw CheckpointError(checkpoint.file_of(*first).path(), first->name,
                          "has " + std::to_string(inputs) +
                              " inputs, not whole groups of quantization_config's "
                              "group_size " +
                              std::to_string(packed.group));
  }
  const std::int64_t n = outputs;
  const std::int64_t k = inputs;
  const std::int64_t groups = k / packed.group;
  PackedTensors t;
  t.outputs = outputs;
  t.inputs = inputs;
  if (packing.words_hold_outputs) {
    t.qweight = &checkpoint.require(module + ".qweight", kI32, std::array<std::int64_t, 2>{k, n / 8});
  } else {
    if (inputs % 8 != 0) {
      refuse(*first, "has " + std::to_string(inputs) + " inputs, which " + method + " cannot pack: 8 inputs a word");
    }
    t.qweight = &checkpoint.require(module + ".qweight", kI32, std::array<std::int64_t, 2>{k / 8, n});
  }
  t.qzeros = &checkpoint.require(module + ".qzeros", kI32, std::array<std::int64_t, 2>{groups, n / 8});
  t.scales = &checkpoint.require(module + ".scales", kF16, std::array<std::int64_t, 2>{groups, n});
  const std::span<const std::byte> scales = checkpoint.data(*t.scales);
  for (std::size_t i = 0; i < static_cast<std::size_t>(groups * n); ++i) {
    if (const float s = half{half_bits(scales, i)}.to_float(); !(std::isfinite(s) && s >= 0)) {
      refuse(*t.scales, "scale " + std::to_string(i) + " (group " + std::to_string(i / static_cast<std::size_t>(n)) +
                            ", output " + std::to_string(i % static_cast<std::size_t>(n)) + ") is " +
                            std::to_string(s) + ", not a finite number >= 0");
    }
  }
  if (packing.zero_offset != 0) {
    const std::span<const std::byte> qzeros = checkpoint.data(*t.qzeros);
    for (int gi = 0; gi < groups; ++gi) {
      for (int o = 0; o < outputs; ++o) {
        if (const int zero = zero_point(packing, qzeros, outputs, gi, o); zero > 15) {
          refuse(*t.qzeros, "zero point of group " + std::to_string(gi) + ", output " + std::to_string(o) +
                                " is stored as " + std::to_string(zero - packing.zero_offset) + ", meaning " +
                                std::to_string(zero) + " (" + method + " stores zero - " +
                                std::to_string(packing.zero_offset) + "), outside [0, 15]");
        }
      }
    }
  }
  if (packing.g_idx) {
    if (packed.desc_act && checkpoint.find(module + ".g_idx") == nullptr) {
      refuse(*first, "has no " + module + ".g_idx: with desc_act true, g_idx must say each input's group");
    }
    if (checkpoint.find(module + ".g_idx") != nullptr) {
      t.g_idx = &checkpoint.require(module + ".g_idx", kI32, std::array<std::int64_t, 1>{k});
      const std::span<const std::byte> g_idx = checkpoint.data(*t.g_idx);
      std::vector<int> members(static_cast<std::size_t>(groups), 0);
      for (int i = 0; i < inputs; ++i) {
        const auto got = static_cast<std::int32_t>(word(g_idx, static_cast<std::size_t>(i)));
        if (got == i / packed.group) {
          ++members[static_cast<std::size_t>(got)];
          continue;
        }
        if (!packed.desc_act) {
          refuse(*t.g_idx, "puts input " + std::to_string(i) + " in group " + std::to_string(got) + ", not " +
                               std::to_string(i / packed.group) +
                               " (input / group_size): with desc_act false g_idx must be that grouping");
        }
        if (got < 0 || got >= groups) {
          refuse(*t.g_idx, "puts input " + std::to_string(i) + " in group " + std::to_string(got) + ", outside the " +
                               std::to_string(groups) + " groups of " + std::to_string(inputs) + " inputs");
        }
        ++members[static_cast<std::size_t>(got)];
      }
      for (std::size_t gi = 0; gi < members.size(); ++gi) {
        if (members[gi] != packed.group) {
          refuse(*t.g_idx, "puts " + std::to_string(members[gi]) + " inputs in group " + std::to_string(gi) +
                               ", not group_size " + std::to_string(packed.group) +
                               ": it is not a permutation of the groups");
        }
      }
    }
  }
  return t;
}

std::vector<std::int32_t> input_order(const Checkpoint& checkpoint, const PackedTensors& t) {
  if (t.g_idx == nullptr) return {};
  const std::span<const std::byte> g_idx = checkpoint.data(*t.g_idx);
  std::vector<std::int32_t> order(static_cast<std::size_t>(t.inputs));
  std::iota(order.begin(), order.end(), 0);
  const auto group_of = [&](std::int32_t k) {
    return static_cast<std::int32_t>(word(g_idx, static_cast<std::size_t>(k)));
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int32_t a, std::int32_t b) { return group_of(a) < group_of(b); });
  for (std::size_t j = 0; j < order.size(); ++j) {
    if (order[j] != static_cast<std::int32_t>(j)) return order;
  }
  return {};  // the plain grouping
}

void require_same_order(const Checkpoint& checkpoint, const PackedTensors& first, const std::string& first_name,
                        const PackedTensors& other) {
  if (input_order(checkpoint, first) == input_order(checkpoint, other)) return;
  const TensorInfo& t = other.g_idx != nullptr ? *other.g_idx : *other.qweight;
  throw CheckpointError(checkpoint.file_of(t).path(), t.name,
                        "groups its inputs otherwise than " + first_name +
                            " does: lazygraph multiplies the two with one x, gathered in one order, so their g_idx "
                            "must be equal");
}

QuantizedWeight repack(const Checkpoint& checkpoint, const PackedQuantization& packed, const QuantizedLayout& layout,
                       std::span<const PackedPart> parts, int head_dim, const Int4Packing& packing) {
  std::vector<std::uint8_t> values(layout.value_bytes());
  std::vector<std::uint16_t> scales(layout.scale_count());
  std::vector<std::uint8_t> zeros(layout.zero_bytes());
  const int group = packed.group;
  // Where element (r, k) of a tile lies in the tile's bytes, r in 0..15, as 2 * byte + high nibble: the same for
  // every tile, which starts 16 * row_value_bytes after the one before.
  const int cols = layout.cols();
  std::vector<std::uint32_t> place(static_cast<std::size_t>(QuantizedLayout::tile_rows) *
                                   static_cast<std::size_t>(cols));
  for (int r = 0; r < QuantizedLayout::tile_rows; ++r) {
    for (int k = 0; k < cols; ++k) {
      const QuantizedLayout::ValuePosition at = layout.value_position(r, k);
      place[static_cast<std::size_t>(r) * static_cast<std::size_t>(cols) + static_cast<std::size_t>(k)] =
          static_cast<std::uint32_t>(2 * at.byte + (at.high_nibble ? 1 : 0));
    }
  }
  const std::size_t tile_bytes = QuantizedLayout::tile_rows * layout.row_value_bytes();
  // Every part's order (open() checked they are one): stored column j is input order[j], which puts each group's
  // inputs together, group by group.
  std::vector<std::int32_t> order = input_order(checkpoint, parts.front().tensors);
  std::vector<int> column_of(static_cast<std::size_t>(cols));
  for (std::size_t j = 0; j < column_of.size(); ++j) {
    column_of[order.empty() ? j : static_cast<std::size_t>(order[j])] = static_cast<int>(j);
  }
  int first_row = 0;  // of the part in the matrix
  for (const PackedPart& part : parts) {
    const PackedTensors& t = part.tensors;
    const int n_out = t.outputs;
    const int k_in = t.inputs;
    std::vector<int> row_of(static_cast<std::size_t>(n_out));  // the matrix row of each output of the tensor
    for (int r = 0; r < n_out; ++r) {
      const int output = part.rope_rows              ? rotate_half_row(r, head_dim)
                         : part.output_order.empty() ? r
                                                     : part.output_order[static_cast<std::size_t>(r)];
      row_of[static_cast<std::size_t>(output)] = first_row + r;
    }
    const auto put = [&](int n, int k, unsigned q) {
      const auto row = static_cast<std::size_t>(row_of[static_cast<std::size_t>(n)]);
      const std::uint32_t at = place[(row % QuantizedLayout::tile_rows) * static_cast<std::size_t>(cols) +
                                     static_cast<std::size_t>(column_of[static_cast<std::size_t>(k)])];
      values[row / QuantizedLayout::tile_rows * tile_bytes + at / 2] |= static_cast<std::uint8_t>(q << (4 * (at % 2)));
    };
    const std::span<const std::byte> qweight = checkpoint.data(*t.qweight);
    const auto words_per_row = static_cast<std::size_t>(packing.words_hold_outputs ? n_out / 8 : n_out);
    if (packing.words_hold_outputs) {  // word (k, c): outputs 8c + j
      for (int k = 0; k < k_in; ++k) {
        for (int c = 0; c < n_out / 8; ++c) {
          const std::uint32_t w =
              word(qweight, static_cast<std::size_t>(k) * words_per_row + static_cast<std::size_t>(c));
          for (int j = 0; j < 8; ++j) put(8 * c + j, k, nibble(w, packing.nibble[static_cast<std::size_t>(j)]));
        }
      }
    } else {  // word (r, n): inputs 8r + i
      for (int r = 0; r < k_in / 8; ++r) {
        for (int n = 0; n < n_out; ++n) {
          const std::uint32_t w =
              word(qweight, static_cast<std::size_t>(r) * words_per_row + static_cast<std::size_t>(n));
          for (int i = 0; i < 8; ++i) put(n, 8 * r + i, nibble(w, packing.nibble[static_cast<std::size_t>(i)]));
        }
      }
    }
    const std::span<const std::byte> scale_bytes = checkpoint.data(*t.scales);
    const std::span<const std::byte> qzeros = checkpoint.data(*t.qzeros);
    for (int gi = 0; gi < k_in / group; ++gi) {
      for (int n = 0; n < n_out; ++n) {
        const std::size_t at = layout.scale_index(row_of[static_cast<std::size_t>(n)], gi * group);
        scales[at] = half_bits(
            scale_bytes, static_cast<std::size_t>(gi) * static_cast<std::size_t>(n_out) + static_cast<std::size_t>(n));
        zeros[at] = static_cast<std::uint8_t>(zero_point(packing, qzeros, n_out, gi, n));
      }
    }
    first_row += n_out;
  }
  if (parts.front().ordered_input) order.clear();  // its x arrives in that order (PackedPart::ordered_input)
  return {layout, std::move(values), std::move(scales), std::move(zeros), std::move(order)};
}

}  // namespace lazygraph::nn::detail
