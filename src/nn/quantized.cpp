#include "lazygraph/nn/quantized.hpp"

#include <lazygraph/driver/bfloat16.hpp>
#include <lazygraph/driver/half.hpp>

#include <algorithm>
#include <cmath>
#include <exception>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "formats/storage_format.hpp"

namespace lazygraph::nn {

namespace {

[[noreturn]] void fail(std::string_view name, const std::string& problem) {
  throw UsageError("tensor " + std::string(name) + ": " + problem);
}

std::string_view scale_type_name(ScaleType type) { return type == ScaleType::f16 ? "fp16" : "bf16"; }

float scale_value(std::uint16_t bits, ScaleType type) {
  return type == ScaleType::f16 ? half{bits}.to_float() : bfloat16{bits}.to_float();
}

std::uint16_t scale_bits_of(double scale, ScaleType type) {
  const auto f = static_cast<float>(scale);
  return type == ScaleType::f16 ? half::from_float(f).bits : bfloat16::from_float(f).bits;
}

/// The nearest integer to x, ties to even (as the GPU quantizer's rint will round).
long long round_even(double x) { return std::llrint(x); }

/// The sum of 32 partial sums in the order a warp's butterfly (__shfl_xor_sync over 16, 8, 4, 2, 1) adds them, so
/// that the GPU quantizer (kernels/nn/quantize.cu), which sums lane l's elements l, l + 32, ... in `partial[l]`, picks
/// the same clip ratio on a near tie.
double warp_order_sum(std::array<double, 32> partial) {
  for (std::size_t offset = 16; offset >= 1; offset /= 2) {
    std::array<double, 32> next{};
    for (std::size_t l = 0; l < 32; ++l) next[l] = partial[l] + partial[l ^ offset];
    partial = next;
  }
  return partial[0];
}

/// One group's scale, zero point and the squared error of its dequantized values, for one clip ratio.
struct GroupChoice {
  std::uint16_t scale_bits = 0;
  int zero = 0;
  double squared_error = 0;
};

/// The smallest and largest weight of a group (or of a block of groups), each taken with 0.
struct Range {
  double low = 0;
  double high = 0;
};

/// The range of `w`.
Range range_of(std::span<const float> w) {
  Range r;
  for (const float x : w) {
    r.low = std::min(r.low, static_cast<double>(x));
    r.high = std::max(r.high, static_cast<double>(x));
  }
  return r;
}

/// The nearest q the format stores to x (in q's units), ties to even: the format's rounding, or the nearest integer.
double nearest_q(const detail::StorageFormat& storage, double x) {
  return storage.nearest != nullptr ? storage.nearest(x) : static_cast<double>(round_even(x));
}

/// Quantizes the group `w`, whose range (or its block's) is `range`, clipped to `ratio`, writing q into `q` and the
/// rest into `choice`. Returns false for a scale beyond the scale type's range (the caller names the group).
bool quantize_group(std::span<const float> w, const QuantizedLayout& layout, Range range, double ratio,
                    std::span<int> q, GroupChoice& choice) {
  const QuantizedFormat& format = layout.format();
  const detail::StorageFormat& storage = layout.storage();
  const auto [q_min, q_max] = layout.q_range();
  const double unit = storage.value_unit;  // a power of two: scale * unit is exact
  double low = range.low;
  double high = range.high;
  double exact = 0;
  if (format.asymmetric) {
    low *= ratio;
    high *= ratio;
    exact = (high - low) / (q_max - q_min);
  } else {
    high = std::max(-low, high) * ratio;
    low = -high;
    exact = high / (q_max * unit);
  }
  choice = {};
  if (exact == 0) {  // an all-zero group: scale 0, q 0, zero point 0 dequantize to exact zeros
    std::fill(q.begin(), q.end(), 0);
    return true;
  }
  std::uint16_t bits = scale_bits_of(exact, format.scale_type);
  if (scale_value(bits, format.scale_type) == 0) bits = 1;  // the smallest positive value (fp16 and bf16 alike)
  // q is monotonic in w, so the ends of the range decide whether anything inside it saturates; a scale rounded down
  // may make them do so, and then the next larger scale value is taken (at most a few steps).
  double step = 0;  // scale * unit: what one unit of q stands for
  int zero = 0;
  for (;; ++bits) {
    const double scale = scale_value(bits, format.scale_type);
    if (!std::isfinite(scale)) return false;
    step = scale * unit;
    zero = format.asymmetric ? static_cast<int>(std::clamp<long long>(round_even(-low / step), q_min, q_max)) : 0;
    if (nearest_q(storage, low / step) + zero >= q_min && nearest_q(storage, high / step) + zero <= q_max) break;
  }
  choice.scale_bits = bits;
  choice.zero = zero;
  std::array<double, 32> partial{};
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double stored = std::clamp<double>(nearest_q(storage, static_cast<double>(w[i]) / step) + zero, q_min, q_max);
    q[i] = static_cast<int>(stored);
    const double error = static_cast<double>(w[i]) - static_cast<double>(static_cast<float>(q[i] - zero)) * step;
    partial[i % 32] += error * error;
  }
  choice.squared_error = warp_order_sum(partial);
  return true;
}

/// The bits of the value at `at` (the whole byte for 8-bit values).
unsigned value_mask(const detail::StorageFormat& storage, const QuantizedLayout::ValuePosition& at) {
  return ((1U << static_cast<unsigned>(storage.value_bits)) - 1U) << (at.high_nibble ? 4U : 0U);
}

void store_value(std::vector<std::uint8_t>& values, const QuantizedLayout& layout, int row, int col, int q) {
  const detail::StorageFormat& storage = layout.storage();
  const QuantizedLayout::ValuePosition at = layout.value_position(row, col);
  std::uint8_t& byte = values[at.byte];
  const unsigned bits = storage.encode(q) << (at.high_nibble ? 4U : 0U);
  byte = static_cast<std::uint8_t>((byte & ~value_mask(storage, at)) | bits);
}

/// The byte of values that are all q = 0: what padding rows hold.
std::uint8_t zero_byte(const detail::StorageFormat& storage) {
  unsigned byte = 0;
  for (int shift = 0; shift < 8; shift += storage.value_bits) byte |= storage.encode(0) << static_cast<unsigned>(shift);
  return static_cast<std::uint8_t>(byte);
}

/// "<name> value at byte <i> is <byte>, <why>" for the first value byte the format forbids, or empty.
std::string forbidden_value(const detail::StorageFormat& storage, std::span<const std::uint8_t> values) {
  if (storage.forbidden_byte < 0) return {};
  const auto it =
      std::find_if(values.begin(), values.end(), [&](std::uint8_t b) { return detail::forbidden(storage, b); });
  if (it == values.end()) return {};
  return detail::forbidden_value_at(storage, static_cast<std::size_t>(it - values.begin()), *it);
}

}  // namespace

std::string format_name(const QuantizedFormat& format) {
  if (format.kind == WeightFormat::dense) return "dense (not quantized)";
  const detail::StorageFormat* storage = detail::find_storage_format(format.kind);
  std::string out;  // an unknown kind: nothing, as before the table
  if (storage != nullptr) {
    out = storage->scale_per_row() ? std::string(storage->family)
                                   : std::string(storage->name) + " g" + std::to_string(format.group);
  }
  if (format.asymmetric) out += " asymmetric";
  return out + ", " + std::string(scale_type_name(format.scale_type)) + " scales";
}

QuantizedLayout::QuantizedLayout(std::string name, QuantizedFormat format, int rows, int cols)
    : name_(std::move(name)), format_(format), rows_(rows), cols_(cols) {
  const std::string shape = std::to_string(rows) + " x " + std::to_string(cols);
  if (rows < 1 || cols < 1) fail(name_, "a quantized weight needs at least one row and column, found " + shape);
  if (format.scale_type != ScaleType::f16 && format.scale_type != ScaleType::bf16) fail(name_, "unknown scale type");
  if (format.kind == WeightFormat::dense) fail(name_, "format 'dense' is not a quantized format");
  const detail::StorageFormat* storage = detail::find_storage_format(format.kind);
  if (storage == nullptr) fail(name_, "unknown weight format");
  storage_ = storage;
  group_ = storage->scale_per_row() ? cols : format.group;
  const std::string kind(storage->name);
  if (format.asymmetric && !storage->allows_asymmetric) {
    fail(name_, kind + " is symmetric only (no zero points); asymmetric " + kind + " was asked for");
  }
  if (!storage->scale_per_row()) {
    const std::span<const int> groups = storage->groups;
    if (std::find(groups.begin(), groups.end(), format.group) == groups.end()) {
      fail(name_, kind + " group size " + std::to_string(format.group) + " is not " + detail::listed(groups));
    }
    if (cols % format.group != 0) {
      fail(name_, kind + " group size " + std::to_string(format.group) + " does not divide the input dimension (" +
                      std::to_string(cols) + ")");
    }
  }
  if (cols % storage->step_columns != 0) {
    fail(name_, kind + " needs the input dimension (" + std::to_string(cols) + ") to be a multiple of " +
                    std::to_string(storage->step_columns) + ", the columns of one step of its kernels");
  }
}

std::array<int, 2> QuantizedLayout::q_range() const noexcept {
  return format_.asymmetric ? storage_->asymmetric_q_range : storage_->q_range;
}

std::size_t QuantizedLayout::row_value_bytes() const noexcept {
  return static_cast<std::size_t>(cols_) * static_cast<std::size_t>(storage_->value_bits) / 8;
}

QuantizedLayout::ValuePosition QuantizedLayout::value_position(int row, int col) const noexcept {
  const int g = row % 8;       // the lane's row pair within the tile
  const int h = row % 16 / 8;  // 0: row g of the tile, 1: row g + 8
  const auto tile = static_cast<std::size_t>(row / tile_rows);
  const detail::StorageFormat& storage = *storage_;
  const int s = col / storage.step_columns;  // the step along K
  const int c_step = col % storage.step_columns;
  const int t = c_step % 32 / 8;  // the lane's place in its row group
  const int lane = 4 * g + t;
  const std::size_t byte =
      tile * tile_rows * row_value_bytes() + 512 * static_cast<std::size_t>(s) + 16 * static_cast<std::size_t>(lane);
  const detail::LanePlace place = storage.place(c_step, h);  // the format's order inside the lane's 16 bytes
  return {byte + static_cast<std::size_t>(place.byte), place.high_nibble};
}

std::size_t QuantizedLayout::scale_index(int row, int col) const noexcept {
  const auto tile = static_cast<std::size_t>(row / tile_rows);
  const auto k = static_cast<std::size_t>(col / group());
  return ((tile * static_cast<std::size_t>(groups_per_row()) + k) * 8 + static_cast<std::size_t>(row % 8)) * 2 +
         static_cast<std::size_t>(row % 16 / 8);
}

QuantizedWeight::QuantizedWeight(QuantizedLayout layout, std::vector<std::uint8_t> values,
                                 std::vector<std::uint16_t> scale_bits, std::vector<std::uint8_t> zeros)
    : layout_(std::move(layout)),
      values_(std::move(values)),
      scale_bits_(std::move(scale_bits)),
      zeros_(std::move(zeros)) {
  const auto sizes = [](std::string_view what, std::size_t found, std::size_t expected) {
    return std::string(what) + ": " + std::to_string(found) + " given, the layout has " + std::to_string(expected);
  };
  const std::string& name = layout_.name();
  if (values_.size() != layout_.value_bytes()) fail(name, sizes("value bytes", values_.size(), layout_.value_bytes()));
  if (scale_bits_.size() != layout_.scale_count()) {
    fail(name, sizes("scales", scale_bits_.size(), layout_.scale_count()));
  }
  if (zeros_.size() != layout_.zero_bytes()) fail(name, sizes("zero points", zeros_.size(), layout_.zero_bytes()));
  const ScaleType type = layout_.format().scale_type;
  for (std::size_t i = 0; i < scale_bits_.size(); ++i) {
    const float s = scale_value(scale_bits_[i], type);
    if (!(std::isfinite(s) && s >= 0)) {
      fail(name, "scale " + std::to_string(i) + " (" + std::to_string(s) + ") is not a finite non-negative number");
    }
  }
  for (int row = layout_.rows(); row < layout_.tiles() * QuantizedLayout::tile_rows; ++row) {
    for (int k = 0; k < layout_.groups_per_row(); ++k) {
      const std::size_t i = layout_.scale_index(row, k * layout_.group());
      if (scale_value(scale_bits_[i], type) != 0) {
        fail(name, "scale " + std::to_string(i) + " belongs to padding row " + std::to_string(row) +
                       " of the last tile and must be 0");
      }
    }
  }
  for (std::size_t i = 0; i < zeros_.size(); ++i) {
    if (zeros_[i] > 15)
      fail(name, "zero point " + std::to_string(i) + " (" + std::to_string(zeros_[i]) + ") is above 15");
  }
  if (std::string why = forbidden_value(layout_.storage(), values_); !why.empty()) {
    fail(name, why);
  }
}

QuantizedWeight::QuantizedWeight(QuantizedLayout layout, std::vector<std::uint8_t> values,
                                 std::vector<std::uint16_t> scale_bits, std::vector<std::uint8_t> zeros,
                                 std::vector<std::int32_t> input_order)
    : QuantizedWeight(std::move(layout), std::move(values), std::move(scale_bits), std::move(zeros)) {
  if (input_order.empty()) return;
  const std::string& name = layout_.name();
  if (!(layout_.storage().value_bits == 4 && layout_.format().asymmetric)) {
    fail(name,
         "an input order is read by the kernels of int4 with zero points only, not " + format_name(layout_.format()));
  }
  const auto cols = static_cast<std::size_t>(layout_.cols());
  if (input_order.size() != cols) {
    fail(name,
         "input order of " + std::to_string(input_order.size()) + " columns, the layout has " + std::to_string(cols));
  }
  std::vector<bool> seen(cols, false);
  for (std::size_t j = 0; j < cols; ++j) {
    const std::int32_t k = input_order[j];
    if (k < 0 || static_cast<std::size_t>(k) >= cols || seen[static_cast<std::size_t>(k)]) {
      fail(name, "input order's column " + std::to_string(j) + " names input " + std::to_string(k) +
                     (k < 0 || static_cast<std::size_t>(k) >= cols ? ", outside the matrix"
                                                                   : ", which an earlier column names too") +
                     ": it must be a permutation of the inputs");
    }
    seen[static_cast<std::size_t>(k)] = true;
  }
  input_order_ = std::move(input_order);
}

void QuantizedWeight::check_element(int row, int col) const {
  if (row < 0 || row >= layout_.rows() || col < 0 || col >= layout_.cols()) {
    fail(layout_.name(), "element (" + std::to_string(row) + ", " + std::to_string(col) + ") is outside the " +
                             std::to_string(layout_.rows()) + " x " + std::to_string(layout_.cols()) + " matrix");
  }
}

int QuantizedWeight::value(int row, int col) const {
  check_element(row, col);
  const QuantizedLayout::ValuePosition at = layout_.value_position(row, col);
  const detail::StorageFormat& storage = layout_.storage();
  const unsigned bits = (values_[at.byte] & value_mask(storage, at)) >> (at.high_nibble ? 4U : 0U);
  return storage.decode(bits, layout_.format().asymmetric);
}

float QuantizedWeight::scale(int row, int col) const {
  check_element(row, col);
  return scale_value(scale_bits_[layout_.scale_index(row, col)], layout_.format().scale_type);
}

int QuantizedWeight::zero(int row, int col) const {
  check_element(row, col);
  return layout_.format().asymmetric ? zeros_[layout_.scale_index(row, col)] : 0;
}

float QuantizedWeight::dequantized(int row, int col) const {
  const auto unit = static_cast<float>(layout_.storage().value_unit);  // a power of two: the product stays exact
  return static_cast<float>(value(row, col) - zero(row, col)) * unit * scale(row, col);
}

std::vector<float> QuantizedWeight::dequantize() const {
  const auto cols = static_cast<std::size_t>(layout_.cols());
  std::vector<float> out(static_cast<std::size_t>(layout_.rows()) * cols);
  for (int r = 0; r < layout_.rows(); ++r) {
    for (int c = 0; c < layout_.cols(); ++c) {
      const auto to = static_cast<std::size_t>(input_order_.empty() ? c : input_order_[static_cast<std::size_t>(c)]);
      out[static_cast<std::size_t>(r) * cols + to] = dequantized(r, c);
    }
  }
  return out;
}

QuantizedWeight quantize(const QuantizedFormat& format, std::string_view name, int rows, int cols,
                         std::span<const float> weights, const QuantizeOptions& options) {
  QuantizedLayout layout(std::string(name), format, rows, cols);
  const auto k = static_cast<std::size_t>(cols);
  const std::size_t count = static_cast<std::size_t>(rows) * k;
  if (weights.size() != count) {
    fail(name, std::to_string(weights.size()) + " weights given for a " + std::to_string(rows) + " x " +
                   std::to_string(cols) + " matrix (" + std::to_string(count) + ")");
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (!std::isfinite(weights[i])) {
      fail(name, "weight at row " + std::to_string(i / k) + ", column " + std::to_string(i % k) + " is " +
                     std::to_string(weights[i]) + ", not finite");
    }
  }
  // Padding rows are zero weights: q 0 (int8: offset binary 128) with scale 0.
  std::vector<std::uint8_t> values(layout.value_bytes(), zero_byte(layout.storage()));
  std::vector<std::uint16_t> scale_bits(layout.scale_count());
  std::vector<std::uint8_t> zeros(layout.zero_bytes());
  const auto group = static_cast<std::size_t>(layout.group());
  const int groups = layout.groups_per_row();
  const int block_rows = layout.storage().quantize_rows;  // rows sharing a scale: 1, or fp8's blocks of 128
  const std::span<const double> ratios = options.clip_search && block_rows == 1
                                             ? std::span<const double>(clip_ratios)
                                             : std::span<const double>(clip_ratios).first(1);
  // A format of blocks of rows takes each group's scale from its block's range, found first in one pass.
  std::vector<Range> block_ranges;
  const auto block_of = [&](int r, int g) {  // the index of the block holding row r's group g
    return static_cast<std::size_t>(r / block_rows) * static_cast<std::size_t>(groups) + static_cast<std::size_t>(g);
  };
  if (block_rows > 1) {
    block_ranges.resize(static_cast<std::size_t>((rows + block_rows - 1) / block_rows) *
                        static_cast<std::size_t>(groups));
    for (int r = 0; r < rows; ++r) {
      for (int g = 0; g < groups; ++g) {
        const Range row_range =
            range_of(weights.subspan(static_cast<std::size_t>(r) * k + static_cast<std::size_t>(g) * group, group));
        Range& block = block_ranges[block_of(r, g)];
        block.low = std::min(block.low, row_range.low);
        block.high = std::max(block.high, row_range.high);
      }
    }
  }
  // Tiles [first, last) of rows, groups in order; the first (row, group) whose scale overflows, or none. A tile's
  // bytes are its own (rows g and g + 8 share bytes, tiles never do), so tiles can go to threads of their own.
  const auto quantize_tiles = [&](int first, int last) -> std::optional<std::pair<int, int>> {
    std::vector<int> q(group);
    std::vector<int> best_q(group);
    for (int r = first * QuantizedLayout::tile_rows; r < std::min(rows, last * QuantizedLayout::tile_rows); ++r) {
      for (int g = 0; g < groups; ++g) {
        const std::size_t first_col = static_cast<std::size_t>(g) * group;
        const std::span<const float> w = weights.subspan(static_cast<std::size_t>(r) * k + first_col, group);
        const Range range = block_rows == 1 ? range_of(w) : block_ranges[block_of(r, g)];
        GroupChoice best;
        bool have_best = false;
        for (const double ratio : ratios) {
          GroupChoice choice;
          // ratio 1 comes first; a block's scale fails in its first row
          if (!quantize_group(w, layout, range, ratio, q, choice)) return std::pair{r, g};
          if (!have_best || choice.squared_error < best.squared_error) {
            best = choice;
            best_q.swap(q);
            have_best = true;
          }
        }
        const std::size_t index = layout.scale_index(r, static_cast<int>(first_col));
        scale_bits[index] = best.scale_bits;
        if (format.asymmetric) zeros[index] = static_cast<std::uint8_t>(best.zero);
        for (std::size_t i = 0; i < group; ++i) {
          store_value(values, layout, r, static_cast<int>(first_col + i), best_q[i]);
        }
      }
    }
    return std::nullopt;
  };
  // A thread per share of the tiles for large matrices (quantizing on load reads every weight of a model); the
  // bytes are the same however the tiles are shared out.
  constexpr std::size_t weights_per_thread = std::size_t{1} << 20U;
  const int tiles = layout.tiles();
  const auto threads = static_cast<int>(std::clamp<std::size_t>(
      std::min<std::size_t>(std::max(1U, std::thread::hardware_concurrency()), count / weights_per_thread), 1,
      static_cast<std::size_t>(tiles)));
  std::vector<std::optional<std::pair<int, int>>> overflow(static_cast<std::size_t>(threads));
  std::vector<std::exception_ptr> failed(static_cast<std::size_t>(threads));  // std::bad_alloc, say
  {
    std::vector<std::jthread> workers;
    for (int i = 1; i < threads; ++i) {
      workers.emplace_back([&, i] {
        try {
          overflow[static_cast<std::size_t>(i)] = quantize_tiles(tiles * i / threads, tiles * (i + 1) / threads);
        } catch (...) {
          failed[static_cast<std::size_t>(i)] = std::current_exception();
        }
      });
    }
    try {
      overflow[0] = quantize_tiles(0, tiles / threads);
    } catch (...) {
      failed[0] = std::current_exception();
    }
  }  // the workers join here
  for (const std::exception_ptr& e : failed) {
    if (e) std::rethrow_exception(e);
  }
  for (const auto& at : overflow) {  // shares in row order: the first overflow found is the first in the matrix
    if (at) {
      fail(name, "row " + std::to_string(at->first) + ", group " + std::to_string(at->second) +
                     " needs a scale beyond the range of " + std::string(scale_type_name(format.scale_type)) +
                     " (use bf16 scales)");
    }
  }
  return {std::move(layout), std::move(values), std::move(scale_bits), std::move(zeros)};
}

}  // namespace lazygraph::nn
