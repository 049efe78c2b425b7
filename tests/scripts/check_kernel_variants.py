#!/usr/bin/env python3
"""Test 'kernel-variants': src/kernel_variants.py writes a variant table out as documented, and refuses a malformed
table naming its file and line.

usage: check_kernel_variants.py SRC_DIR
Which kernels of kernels/nn/ exist with which parameters is checked on the embedded set by the host tests
(tests/nn/kernels.cpp); this checks the generator's rules on small tables.
"""
import sys

TABLE = """#include "x.cuh"
/* lazygraph:variants
axis T = lg::half_t | lg::bf16_t _bf16
axis B = 1 (256, 3) | kTensorCores _mma (256, 2)

scale[T][B] = scale_body<B>(const T* x, T* out, int n)
copy[T: lg::half_t] __launch_bounds__(128) =
    copy_body(const T* x,
              T* out)
plain[T] = plain_body<T, 4>(const T* x)
tile scale_tile[T: lg::bf16_t][B] = scale_body<B>(const T* x,
    T* out, int n)
*/
int after;
"""

EXPECTED_TAIL = """*/
#ifndef LAZYGRAPH_TILES_ONLY
#line 6
extern "C" __global__ void __launch_bounds__(256, 3) scale(const lg::half_t* x, lg::half_t* out, int n) {
  scale_body<1>(x, out, n);
}
#line 6
extern "C" __global__ void __launch_bounds__(256, 2) scale_mma(const lg::half_t* x, lg::half_t* out, int n) {
  scale_body<kTensorCores>(x, out, n);
}
#line 6
extern "C" __global__ void __launch_bounds__(256, 3) scale_bf16(const lg::bf16_t* x, lg::bf16_t* out, int n) {
  scale_body<1>(x, out, n);
}
#line 6
extern "C" __global__ void __launch_bounds__(256, 2) scale_bf16_mma(const lg::bf16_t* x, lg::bf16_t* out, int n) {
  scale_body<kTensorCores>(x, out, n);
}
#line 7
extern "C" __global__ void __launch_bounds__(128) copy(const lg::half_t* x, lg::half_t* out) {
  copy_body(x, out);
}
#line 10
extern "C" __global__ void plain(const lg::half_t* x) {
  plain_body<lg::half_t, 4>(x);
}
#line 10
extern "C" __global__ void plain_bf16(const lg::bf16_t* x) {
  plain_body<lg::bf16_t, 4>(x);
}
#endif
#line 11
extern "C" __device__ void scale_tile_bf16(lg::Tile tile, const lg::bf16_t* x, lg::bf16_t* out, int n) {
  scale_body<1>(x, out, n, lg::TilePlace{tile});
}
#line 11
extern "C" __device__ void scale_tile_bf16_mma(lg::Tile tile, const lg::bf16_t* x, lg::bf16_t* out, int n) {
  scale_body<kTensorCores>(x, out, n, lg::TilePlace{tile});
}
#line 14
int after;
"""

# (table lines, the message expected to name the problem)
BROKEN = [
    (["scale[U] = body(int n)"], "t.cu:3: kernel scale: no axis U"),
    (["axis T = a | b _b", "k[T: c] = body(int n)"], "t.cu:4: kernel k: axis T has no value c"),
    (["axis T = a (1) | b _b", "axis B = 1 (2)", "k[T][B] = body(int n)"], "t.cu:5: kernel k: more than one axis"),
    (["axis T = a | b", "k[T] = body(int n)"], "t.cu:4: kernel k is written out twice"),
    (["axis T = a | b _b", "k[T] = body(int T)"], "t.cu:4: kernel k: the parameter T is named like an axis"),
    (["axis T = a", "k[T] = body(int x[4])"], "t.cu:4: kernel k: cannot read the parameter 'int x[4]'"),
    (["axis T = a", "k[T] body(int n)"], "t.cu:4: kernel k: write `= BODY(PARAMETERS)`"),
    (["axis T"], "t.cu:3: write an axis as"),
    (["axis T = a", "tile k[T] __launch_bounds__(64) = body(int n)"], "t.cu:4: tile k: a tile function has no launch"),
    (["axis T = a", "k[T] = body(int n)", "tile k[T] = body(int n)"], "t.cu:5: kernel k is written out twice"),
]


def main() -> int:
    sys.path.insert(0, sys.argv[1])
    from kernel_variants import TableError, expand

    failures = []
    got = expand(TABLE, "t.cu")
    head = TABLE[:TABLE.index("*/")]
    if got != head + EXPECTED_TAIL:
        failures.append(f"the table was written out as\n{got}\nexpected\n{head + EXPECTED_TAIL}")
    plain = "extern \"C\" __global__ void k(int n) {}\n"
    if expand(plain, "t.cu") != plain:
        failures.append("a file without a table changed")
    try:
        expand("/* lazygraph:variants\naxis T = a\n", "t.cu")
        failures.append("an unclosed table was accepted")
    except TableError as e:
        if "t.cu:1: the variant table is not closed" not in str(e):
            failures.append(f"unclosed table: {e}")
    for lines, expected in BROKEN:
        text = "\n".join(["// a kernel file", "/* lazygraph:variants"] + lines + ["*/", ""])
        try:
            expand(text, "t.cu")
            failures.append(f"accepted {lines}")
        except TableError as e:
            if expected not in str(e):
                failures.append(f"{lines}: the message '{e}' does not contain '{expected}'")
    for f in failures:
        print("FAILED:", f)
    if failures:
        return 1
    print(f"kernel_variants.py writes out a table as documented and refuses {len(BROKEN) + 1} broken ones")
    return 0


if __name__ == "__main__":
    sys.exit(main())
