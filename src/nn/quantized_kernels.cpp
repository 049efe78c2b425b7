#include "lazygraph/nn/quantized_kernels.hpp"

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "formats/storage_format.hpp"

namespace lazygraph::nn {

namespace detail {

std::vector<std::string> quantized_kernel_suffixes() {
  std::vector<std::string> out;
  for (const StorageFormat* f : storage_formats()) {
    out.emplace_back(f->kernel_suffix);
    if (!f->asymmetric_kernel_suffix.empty()) out.emplace_back(f->asymmetric_kernel_suffix);
  }
  return out;
}

namespace {
/// The row of `kind`; throws naming `what` and every quantized format when no row has it.
const StorageFormat& quantized_row(std::string_view what, int kind) {
  if (const StorageFormat* f = find_storage_format(static_cast<WeightFormat>(kind)); f != nullptr) return *f;
  std::string formats;
  const auto all = storage_formats();
  for (std::size_t i = 0; i < all.size(); ++i) {
    formats += i == 0 ? "neither " : i + 1 == all.size() ? " nor " : ", ";
    formats += std::string(all[i]->family) + " (" + std::to_string(static_cast<int>(all[i]->kind)) + ")";
  }
  throw UsageError(std::string(what) + ": weight format " + std::to_string(kind) + " is " + formats);
}
}  // namespace

std::size_t quantized_kernel_variant(std::string_view kernel, int kind, bool zeros) {
  const StorageFormat& row = quantized_row("quantized kernel " + std::string(kernel), kind);
  std::size_t index = 0;
  for (const StorageFormat* f : storage_formats()) {
    if (f == &row) return index + (zeros && !f->asymmetric_kernel_suffix.empty() ? 1 : 0);
    index += f->asymmetric_kernel_suffix.empty() ? 1 : 2;
  }
  return index;  // not reached: the row is one of them
}

int quantized_step_columns(int kind) { return quantized_row("quantized kernels' launch shape", kind).step_columns; }

}  // namespace detail

namespace {
template <Element T>
const QuantizedWeight& checked_scale_type(const QuantizedWeight& weight) {
  if (weight.layout().format().scale_type != scale_type_of<T>) {
    throw UsageError("tensor " + weight.layout().name() + ": " + format_name(weight.layout().format()) +
                     ", but the kernels over " + std::string(element_name<T>) + " activations read " +
                     std::string(element_name<T>) + " scales");
  }
  return weight;
}
}  // namespace

template <Element T>
DeviceQuantizedWeight<T>::DeviceQuantizedWeight(const Stream& stream, const QuantizedWeight& weight)
    : layout_(checked_scale_type<T>(weight).layout()),
      values_(from_host(weight.values()).sync_on(stream)),
      scales_(from_host(weight.scale_bits()).sync_on(stream)) {
  if (!weight.zeros().empty()) zeros_ = from_host(weight.zeros()).sync_on(stream);
  if (const std::span<const std::int32_t> order = weight.input_order(); !order.empty()) {
    std::vector<std::int32_t> both(order.begin(), order.end());  // the order, then its inverse
    both.resize(2 * order.size());
    for (std::size_t j = 0; j < order.size(); ++j)
      both[order.size() + static_cast<std::size_t>(order[j])] = static_cast<std::int32_t>(j);
    order_ = from_host(std::span<const std::int32_t>(both)).sync_on(stream);
  }
}

template <Element T>
DeviceQuantizedWeight<T>::DeviceQuantizedWeight(QuantizedLayout layout, DeviceBuffer<std::uint8_t> values,
                                                DeviceBuffer<std::uint16_t> scales,
                                                std::optional<DeviceBuffer<std::uint8_t>> zeros,
                                                std::optional<DeviceBuffer<std::int32_t>> order)
    : layout_(std::move(layout)),
      values_(std::move(values)),
      scales_(std::move(scales)),
      zeros_(std::move(zeros)),
      order_(std::move(order)) {
  const auto fail = [&](const std::string& problem) { throw UsageError("tensor " + layout_.name() + ": " + problem); };
  if (layout_.format().scale_type != scale_type_of<T>) {
    fail(format_name(layout_.format()) + ", but the kernels over " + std::string(element_name<T>) +
         " activations read " + std::string(element_name<T>) + " scales");
  }
  const auto sizes = [](std::string_view what, std::size_t found, std::size_t expected) {
    return std::string(what) + ": " + std::to_string(found) + " on the device, the layout has " +
           std::to_string(expected);
  };
  if (values_.size() != layout_.value_bytes()) fail(sizes("value bytes", values_.size(), layout_.value_bytes()));
  if (scales_.size() != layout_.scale_count()) fail(sizes("scales", scales_.size(), layout_.scale_count()));
  const std::size_t zero_bytes = zeros_ ? zeros_->size() : 0;
  if (zero_bytes != layout_.zero_bytes() || zeros_.has_value() != layout_.format().asymmetric) {
    fail(sizes("zero points", zero_bytes, layout_.zero_bytes()));
  }
  if (order_ && (order_->size() != 2 * static_cast<std::size_t>(layout_.cols()) || !layout_.format().asymmetric ||
                 layout_.storage().value_bits != 4)) {
    fail(sizes("input order and inverse entries", order_->size(), 2 * static_cast<std::size_t>(layout_.cols())) +
         " (only int4 with zero points takes one)");
  }
}

template <Element T>
QuantizedWeight DeviceQuantizedWeight<T>::download(const Stream& stream) const {
  std::vector<std::uint8_t> values(values_.size());
  std::vector<std::uint16_t> scales(scales_.size());
  std::vector<std::uint8_t> zeros(zeros_ ? zeros_->size() : 0);
  copy_async(stream, std::span<std::uint8_t>(values), values_.cview());
  copy_async(stream, std::span<std::uint16_t>(scales), scales_.cview());
  std::vector<std::int32_t> order(order_ ? order_->size() / 2 : 0);
  if (zeros_) copy_async(stream, std::span<std::uint8_t>(zeros), zeros_->cview());
  if (order_) copy_async(stream, std::span<std::int32_t>(order), input_order());
  stream.synchronize();
  return {layout_, std::move(values), std::move(scales), std::move(zeros), std::move(order)};
}

template <Element T>
QuantizedMatrix DeviceQuantizedWeight<T>::matrix() const {
  return {values_.cview().address(),
          scales_.cview().address(),
          zeros_ ? zeros_->cview().address() : 0,
          order_ ? order_->cview().address() : 0,
          static_cast<int>(layout_.format().kind),
          layout_.group()};
}

template <Element T>
void check_quantized(const DeviceQuantizedWeight<T>& w, int rows, int cols, int batch) {
  const QuantizedLayout& l = w.layout();
  if (l.rows() != rows || l.cols() != cols) {
    throw UsageError("tensor " + l.name() + ": a quantized weight of " + std::to_string(l.rows()) + " x " +
                     std::to_string(l.cols()) + ", where " + std::to_string(rows) + " x " + std::to_string(cols) +
                     " is needed");
  }
  if (batch < 1 || batch > 8) {
    throw UsageError("tensor " + l.name() + ": batch " + std::to_string(batch) + " is outside 1..8");
  }
}

template <Element T>
BasicQuantizedKernels<T>::BasicQuantizedKernels(const KernelLibrary& library)
    : qgemv((check_tensor_cores(library.device().compute_capability()), library),
            "qgemv" + std::string(kernel_suffix<T>)),
      qgemv_add(library, "qgemv_add" + std::string(kernel_suffix<T>)),
      rms_norm_qgemv(library, "rms_norm_qgemv" + std::string(kernel_suffix<T>)),
      rms_norm_qgemv_swiglu(library, "rms_norm_qgemv_swiglu" + std::string(kernel_suffix<T>)),
      rms_norm_qgemv_geglu(library, "rms_norm_qgemv_geglu" + std::string(kernel_suffix<T>)),
      quantized_qkv_rope_append(library, "quantized_qkv_rope_append" + std::string(kernel_suffix<T>)),
      qdequantize(library, "qdequantize" + std::string(kernel_suffix<T>)),
      qgemv_all_reduce(library, "qgemv_all_reduce" + std::string(kernel_suffix<T>)),
      moe_qgate_up(library, "moe_qgate_up" + std::string(kernel_suffix<T>)),
      moe_qdown(library, "moe_qdown" + std::string(kernel_suffix<T>)),
      multiprocessors(library.device().sm_count()) {}

template class DeviceQuantizedWeight<half>;
template class DeviceQuantizedWeight<bfloat16>;
template struct BasicQuantizedKernels<half>;
template struct BasicQuantizedKernels<bfloat16>;
template void check_quantized(const DeviceQuantizedWeight<half>&, int, int, int);
template void check_quantized(const DeviceQuantizedWeight<bfloat16>&, int, int, int);

}  // namespace lazygraph::nn
