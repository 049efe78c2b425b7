#include "lazygraph/driver/memcpy.hpp"

#include <string>

#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/driver/error.hpp"

namespace lazygraph::detail {

void throw_size_mismatch(std::string_view what, std::size_t dst, std::size_t src) {
  throw UsageError(std::string(what) + ": the destination holds " + std::to_string(dst) +
                   " elements but the source holds " + std::to_string(src) + "; the sizes must match");
}

void copy_h2d(const Stream& s, CUdeviceptr dst, const void* src, std::size_t bytes) {
  driver::copy_host_to_device(s.device().context(), dst, src, bytes, s.get());
}

void copy_d2h(const Stream& s, void* dst, CUdeviceptr src, std::size_t bytes) {
  driver::copy_device_to_host(s.device().context(), dst, src, bytes, s.get());
}

void copy_d2d(const Stream& s, CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) {
  driver::copy_device_to_device(s.device().context(), dst, src, bytes, s.get());
}

namespace {
/// Checks that the rows of a 2-D copy fit one of its spans (`side`). \throws UsageError saying why they do not.
void check_rows_fit(std::string_view what, std::string_view side, std::size_t size, std::size_t pitch,
                    std::size_t width, std::size_t height) {
  const auto shape = [&] {
    return std::string(what) + ": " + std::to_string(height) + " rows of " + std::to_string(width) + " elements, " +
           std::to_string(pitch) + " elements apart in the " + std::string(side);
  };
  if (width > pitch && height > 1) {
    throw UsageError(shape() +
                     ": a row is longer than the pitch, so the rows would overlap; the pitch is the "
                     "distance between the starts of two rows (a matrix's row length), at least the width");
  }
  std::size_t end = 0;
  if (__builtin_mul_overflow(height - 1, pitch, &end) || __builtin_add_overflow(end, width, &end) || end > size) {
    throw UsageError(shape() + ", end past the " + std::string(side) + "'s " + std::to_string(size) +
                     " elements; pass a span that holds all the rows, from the first row's start");
  }
}
}  // namespace

void check_copy_2d(std::string_view what, std::size_t dst_size, std::size_t dst_pitch, std::size_t src_size,
                   std::size_t src_pitch, std::size_t width, std::size_t height) {
  if (width == 0 || height == 0) return;
  check_rows_fit(what, "destination", dst_size, dst_pitch, width, height);
  check_rows_fit(what, "source", src_size, src_pitch, width, height);
}

void copy_d2d_2d(const Stream& s, CUdeviceptr dst, std::size_t dst_pitch, CUdeviceptr src, std::size_t src_pitch,
                 std::size_t width, std::size_t height) {
  driver::copy_device_to_device_2d(s.device().context(), dst, dst_pitch, src, src_pitch, width, height, s.get());
}

}  // namespace lazygraph::detail
