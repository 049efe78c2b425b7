// int4 in groups: 4-bit q, one scale per group of 32, 64 or 128 columns along K, symmetric (q in [-8, 7], stored as
// two's-complement nibbles) or asymmetric (q in [0, 15] with a zero point per group). A step of a tile is 64 columns,
// laid out so that one bit operation makes an mma register of each nibble pair (quantized.hpp's file comment).
#include "storage_format.hpp"

namespace lazygraph::nn::detail {

static_assert(static_cast<int>(WeightFormat::int4_group) == 2, "the kernels' kInt4 (qgemv_core.cuh) is this value");

namespace {
constexpr int int4_groups[] = {32, 64, 128};

/// Word j of the lane's vector feeds mma j of the step, columns 32 (j / 2) + 8t + 4 (j % 2) + c (c in 0..3); the
/// element of row g + 8h at c is nibble n = 4 (c % 2) + 2 (c / 2) + h of the word.
LanePlace place_int4(int column, int h) {
  const int j = 2 * (column / 32) + column % 8 / 4;
  const int c = column % 4;
  const int n = 4 * (c % 2) + 2 * (c / 2) + h;
  return {4 * j + n / 2, n % 2 == 1};
}

unsigned encode_int4(int q) { return static_cast<unsigned>(q) & 0xFU; }

/// Symmetric: sign-extends the two's-complement nibble.
int decode_int4(unsigned bits, bool asymmetric) {
  const auto nibble = static_cast<int>(bits & 0xFU);
  return asymmetric ? nibble : (nibble ^ 8) - 8;
}
}  // namespace

extern const StorageFormat int4_group_format{
    .kind = WeightFormat::int4_group,
    .name = "int4",
    .family = "int4 in groups",
    .groups = int4_groups,
    .allows_asymmetric = true,
    .lacks = "",
    .q_range = {-8, 7},
    .asymmetric_q_range = {0, 15},
    .value_bits = 4,
    .step_columns = 64,
    .place = place_int4,
    .encode = encode_int4,
    .decode = decode_int4,
    .forbidden_byte = -1,
    .forbidden_why = "",
    .pack_kernel = "pack_int4",
    .kernel_suffix = "_int4",
    .asymmetric_kernel_suffix = "_int4z",
};

}  // namespace lazygraph::nn::detail
