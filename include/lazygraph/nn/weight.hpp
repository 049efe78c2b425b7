#pragma once
/// \file
/// Layer 6, nn: the weight seam. A Weight is one weight matrix of a model, [rows x cols] (output channels x inputs),
/// in whichever format it is held: dense, in the model's element type T, or weight-only quantized (quantized.hpp's
/// formats, uploaded as a DeviceQuantizedWeight). The blocks of a model never ask which: they hand a Weight to the
/// projections of projection.hpp, whose format table picks the kernels that read it.
///
/// A Weight is a cheap, copyable handle: copies share the device memory, which lives as long as any copy, and every
/// graph that reads it keeps it alive as it keeps a DeviceBuffer's memory (docs/memory_and_io.md).

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "lazygraph/nn/quantized_kernels.hpp"

namespace lazygraph::nn {

/// One weight matrix in any format the nn kernels read (see the file comment).
template <Element T>
class Weight {
 public:
  /// No matrix: rows() and cols() are 0 (a tensor the model does not have).
  Weight() = default;

  /// A dense `rows` x `cols` matrix, row-major, in `values` (which it shares). `name` (the checkpoint tensor) is used
  /// in messages. \throws UsageError naming it when rows or cols is negative or values does not hold rows * cols
  /// elements.
  Weight(DeviceSpan<T> values, int rows, int cols, std::string name = {})
      : dense_(std::move(values)), rows_(rows), cols_(cols), name_(std::move(name)) {
    if (rows < 0 || cols < 0 || dense_.size() != static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols)) {
      throw UsageError("weight " + describe() + ": " + std::to_string(dense_.size()) + " elements for " +
                       std::to_string(rows) + " x " + std::to_string(cols));
    }
  }
  /// A dense matrix in `values`, which it takes over.
  Weight(DeviceBuffer<T> values, int rows, int cols, std::string name = {})
      : Weight(values.view(), rows, cols, std::move(name)) {}

  /// A quantized matrix (shared); its layout gives the shape and the name. \throws UsageError when it is null.
  explicit Weight(std::shared_ptr<const DeviceQuantizedWeight<T>> quantized) : quantized_(std::move(quantized)) {
    if (quantized_ == nullptr) throw UsageError("Weight: a quantized weight may not be null");
    rows_ = quantized_->layout().rows();
    cols_ = quantized_->layout().cols();
    name_ = quantized_->layout().name();
  }
  /// A quantized matrix, which it takes over.
  explicit Weight(DeviceQuantizedWeight<T> quantized)
      : Weight(std::make_shared<const DeviceQuantizedWeight<T>>(std::move(quantized))) {}

  /// Whether it holds no matrix.
  [[nodiscard]] bool empty() const noexcept { return rows_ == 0 || cols_ == 0; }
  /// How its values are stored: WeightFormat::dense, or the quantized format's kind.
  [[nodiscard]] WeightFormat format() const noexcept {
    return quantized_ ? quantized_->layout().format().kind : WeightFormat::dense;
  }
  /// Whether it is stored in T (not quantized).
  [[nodiscard]] bool is_dense() const noexcept { return quantized_ == nullptr; }
  /// Output channels.
  [[nodiscard]] int rows() const noexcept { return rows_; }
  /// Inputs.
  [[nodiscard]] int cols() const noexcept { return cols_; }
  /// The checkpoint tensor's name, or "" when none was given.
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// The name in messages: the tensor's name, or "(unnamed)".
  [[nodiscard]] std::string describe() const { return name_.empty() ? std::string("(unnamed)") : name_; }
  /// Device bytes a projection reads: rows * cols elements of T, or the quantized layout's bytes for the rows held.
  [[nodiscard]] std::size_t bytes() const noexcept {
    if (!quantized_) return dense_.size_bytes();
    const QuantizedLayout& l = quantized_->layout();
    return l.bytes() / static_cast<std::size_t>(l.tiles()) *
           static_cast<std::size_t>((rows_ + QuantizedLayout::tile_rows - 1) / QuantizedLayout::tile_rows);
  }

  /// The dense values, [rows][cols]. \throws UsageError naming the weight when it is quantized.
  [[nodiscard]] DeviceSpan<const T> dense() const {
    if (quantized_) throw not_dense();
    return dense_.as_const();
  }
  /// The dense values, writable (to fill them). \throws UsageError naming the weight when it is quantized.
  [[nodiscard]] DeviceSpan<T> dense_view() const {
    if (quantized_) throw not_dense();
    return dense_;
  }
  /// The quantized matrix. \throws UsageError naming the weight when it is dense.
  [[nodiscard]] const DeviceQuantizedWeight<T>& quantized() const { return *shared_quantized(); }
  /// The quantized matrix, shared. \throws UsageError naming the weight when it is dense.
  [[nodiscard]] const std::shared_ptr<const DeviceQuantizedWeight<T>>& shared_quantized() const {
    if (!quantized_) throw UsageError("weight " + describe() + " is dense, not quantized");
    return quantized_;
  }
  /// The quantized kernels' argument for the rows held (a view's rows start at its first tile).
  /// \throws UsageError naming the weight when it is dense.
  [[nodiscard]] QuantizedMatrix matrix() const {
    QuantizedMatrix m = shared_quantized()->matrix();
    if (first_row_ > 0) {
      const QuantizedLayout& l = quantized_->layout();
      const std::size_t tile = static_cast<std::size_t>(first_row_ / QuantizedLayout::tile_rows);
      const std::size_t per_tile =
          static_cast<std::size_t>(QuantizedLayout::tile_rows) * static_cast<std::size_t>(l.groups_per_row());
      m.values += tile * static_cast<std::size_t>(QuantizedLayout::tile_rows) * l.row_value_bytes();
      m.scales += tile * per_tile * sizeof(std::uint16_t);
      if (m.zeros != 0) m.zeros += tile * per_tile;
    }
    return m;
  }
  /// What a graph that reads it must keep alive.
  [[nodiscard]] std::shared_ptr<const void> owner() const noexcept {
    return quantized_ ? std::shared_ptr<const void>(quantized_) : dense_.owner();
  }

  /// Rows [first, first + count) as a weight sharing this one's memory, named `name` (this one's when empty).
  /// \throws UsageError naming the weight when the rows are not inside it, or, for a quantized weight, do not start
  /// on a tile of 16 rows or end on one or at its last row (quantized matrices are stored in tiles).
  [[nodiscard]] Weight rows_view(int first, int count, std::string name = {}) const {
    if (first < 0 || count < 1 || first > rows_ - count) {
      throw UsageError("weight " + describe() + ": rows [" + std::to_string(first) + ", " +
                       std::to_string(first + count) + ") are not inside its " + std::to_string(rows_));
    }
    Weight out = *this;
    if (!name.empty()) out.name_ = std::move(name);
    out.rows_ = count;
    if (!quantized_) {
      out.dense_ = dense_.subspan(static_cast<std::size_t>(first) * static_cast<std::size_t>(cols_),
                                  static_cast<std::size_t>(count) * static_cast<std::size_t>(cols_));
      return out;
    }
    constexpr int tile = QuantizedLayout::tile_rows;
    if (first % tile != 0 || (count % tile != 0 && first + count != rows_)) {
      throw UsageError("weight " + describe() + " is quantized in tiles of " + std::to_string(tile) + " rows: rows [" +
                       std::to_string(first) + ", " + std::to_string(first + count) +
                       ") do not lie on whole tiles (give the model q, k and v widths that are multiples of 16)");
    }
    out.first_row_ = first_row_ + first;
    return out;
  }

 private:
  [[nodiscard]] UsageError not_dense() const {
    return UsageError("weight " + describe() + " is quantized (" + format_name(quantized_->layout().format()) +
                      "), where a dense one is needed");
  }

  DeviceSpan<T> dense_;                                        ///< the values of a dense weight
  std::shared_ptr<const DeviceQuantizedWeight<T>> quantized_;  ///< a quantized weight, else null
  int rows_ = 0;
  int cols_ = 0;
  int first_row_ = 0;  ///< the first row of a quantized view (a multiple of 16)
  std::string name_;
};

/// `first` and `second` as one matrix, `second`'s rows under `first`'s, sharing their memory: when both are dense, of
/// the same shape, and `second`'s values start where `first`'s end in one allocation (as assemble_decoder_weights
/// stores a gated MLP's W1 and W3, so that a GEMM over many rows reads both in one product). An empty Weight
/// otherwise (a quantized one, separate buffers, rows in another order): the caller then takes them one by one.
template <Element T>
[[nodiscard]] Weight<T> stacked_rows(const Weight<T>& first, const Weight<T>& second, std::string name = {}) {
  if (!first.is_dense() || !second.is_dense() || first.empty() || second.empty() || first.cols() != second.cols() ||
      first.rows() != second.rows()) {
    return {};
  }
  const DeviceSpan<T> a = first.dense_view();
  const DeviceSpan<T> b = second.dense_view();
  if (a.owner() == nullptr || a.owner() != b.owner() || a.address() + a.size_bytes() != b.address()) return {};
  return Weight<T>(DeviceSpan<T>(a.address(), a.size() + b.size(), a.owner()), first.rows() + second.rows(),
                   first.cols(), std::move(name));
}

}  // namespace lazygraph::nn
