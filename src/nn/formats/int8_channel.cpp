// int8 per channel: 8-bit q in [-127, 127], one scale per row (output channel) chosen over all of its columns, no
// zero points. A step of a tile is 32 columns; each q is stored as offset binary, the byte q + 128 (1..255), so that
// one byte permute puts it under a floating-point exponent in the kernels (byte 0, -128, is never stored).
#include "storage_format.hpp"

namespace lazygraph::nn::detail {

static_assert(static_cast<int>(WeightFormat::int8_channel) == 1, "the kernels' kInt8 (qgemv_core.cuh) is this value");

namespace {
/// Word 2j + h of the lane's vector holds row g + 8h, columns 8t + 4j + c (c in 0..3) in byte c.
LanePlace place_int8(int column, int h) {
  const int j = column % 8 / 4;
  const int c = column % 4;
  return {4 * (2 * j + h) + c, false};
}

unsigned encode_int8(int q) { return static_cast<unsigned>(q + 128); }

int decode_int8(unsigned bits, bool /*asymmetric*/) { return static_cast<int>(bits) - 128; }
}  // namespace

extern const StorageFormat int8_channel_format{
    .kind = WeightFormat::int8_channel,
    .name = "int8",
    .family = "int8 per channel",
    .groups = {},
    .allows_asymmetric = false,
    .lacks = "which has one scale per row and no zero points",
    .q_range = {-127, 127},
    .asymmetric_q_range = {-127, 127},
    .value_bits = 8,
    .step_columns = 32,
    .place = place_int8,
    .encode = encode_int8,
    .decode = decode_int8,
    .forbidden_byte = 0,
    .forbidden_why = "offset binary for -128, outside [-127, 127]",
    .pack_kernel = "pack_int8",
    .kernel_suffix = "_int8",
    .asymmetric_kernel_suffix = "",
};

}  // namespace lazygraph::nn::detail
