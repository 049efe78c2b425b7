#!/usr/bin/env python3
"""Writes out the kernel variants a kernel file lists in a variant table, so that each kernel is written once.

usage: kernel_variants.py FILE...   prints each file as embed_kernels.py embeds it (tables written out)

A table is a block comment that opens with `/* lazygraph:variants` on a line of its own and ends with `*/`:

    /* lazygraph:variants
    axis T = lg::half_t | lg::bf16_t _bf16
    axis B = 1 (256, 3) | 2 _b2 (256, 3) | 8 _b8 (256, 2)

    gemv[T][B] = gemv_body<B>(const T* W, const T* x, T* out, int rows, int cols, int batch)
    gemv_dual[T: lg::half_t][B] = gemv_dual_body<B>(const T* W1, const T* W3, const T* x, T* out1,
        T* out3, int rows, int cols, int batch)
    attention[T] __launch_bounds__(1024) = attention_body(const T* q, float scale)
    */

An axis names a template argument and lists its values, each `ARGUMENT [SUFFIX] [(LAUNCH BOUNDS)]`; SUFFIX starts
with `_` (none: the value adds nothing to the name). A kernel line names a kernel, the axes it varies over
(`[T: a, b]` takes only those values of T), optional launch bounds, and the body it calls with the kernel's
parameters; a line that starts with white space continues the one before. Each combination of the kernel's axis
values becomes, right after the table,

    #line <the kernel line's number>
    extern "C" __global__ void __launch_bounds__(256, 3) gemv_bf16_b2(const lg::bf16_t* W, ..., int batch) {
      gemv_body<2>(W, x, out, rows, cols, batch);
    }

named by the kernel's name and the values' suffixes in the order of its axes (gemv, gemv_b2, ..., gemv_bf16_b8),
every axis name replaced (as a whole word) by the value's argument. Launch bounds: the kernel line's, else those of
the one value that has some, else none. The `#line` makes NVRTC's messages and the host's signature reader
(KernelDeclarations) name the kernel line; a `#line` after the written-out kernels gives the lines below the table
their own numbers back. The written-out kernels stand between `#ifndef LAZYGRAPH_TILES_ONLY` and `#endif`: a
persistent program's generated source, which includes kernel files for their tile functions only, defines it, so that
NVRTC does not compile every kernel of every such file again (src/kernels/persistent_source.cpp).

A line that starts with `tile` writes out tile functions of persistent programs instead (kernels/include/lazygraph/
tile.cuh), without launch bounds, the tile passed to the body last as a place:

    tile qgemv_add_tile[T][F] = qgemv_add_body<F>(QuantizedMatrix W, const T* x, T* out, int rows, int cols, int batch)

becomes, for each combination, outside the `#ifndef` (a program's source includes the file for them),

    extern "C" __device__ void qgemv_add_tile_bf16_int8(lg::Tile tile, QuantizedMatrix W, ..., int batch) {
      qgemv_add_body<kInt8>(W, x, out, rows, cols, batch, lg::TilePlace{tile});
    }

This is a build step: the texts embedded into the library (and so what NVRTC compiles and the host's signature reader
reads) are written out; a KernelSet read from a directory at run time is not. A malformed table stops the build with
a message naming its file and line.
"""
import itertools
import re
import sys

OPEN = "/* lazygraph:variants"


class TableError(Exception):
    pass


def balanced_end(text, start):
    """The index just past the bracket that closes the one at text[start]."""
    pairs = {"(": ")", "[": "]", "<": ">"}
    opening, closing = text[start], pairs[text[start]]
    depth = 0
    for i in range(start, len(text)):
        depth += text[i] == opening
        depth -= text[i] == closing
        if depth == 0:
            return i + 1
    raise TableError(f"'{opening}' is never closed")


def split_top_level(text, separator):
    """Splits at `separator` outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += c == "("
        depth -= c == ")"
        if c == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [p.strip() for p in parts + [text[start:]]]


def substitute(text, values):
    """`text` with each axis name (a whole word, not after `::` or `.`) replaced by its value's argument."""
    if not values:
        return text
    pattern = r"(?<![\w:.])(" + "|".join(re.escape(name) for name in values) + r")(?!\w)"
    return re.sub(pattern, lambda m: values[m.group(1)], text)


def parse_axis(spec):
    """`T = lg::half_t | lg::bf16_t _bf16` as ("T", [(argument, suffix, bounds), ...])."""
    m = re.fullmatch(r"([A-Za-z_]\w*)\s*=\s*(.+)", spec)
    if not m:
        raise TableError("write an axis as `axis NAME = ARGUMENT [SUFFIX] [(BOUNDS)] | ...`")
    values = []
    for value in split_top_level(m.group(2), "|"):
        v = re.fullmatch(r"(.+?)(?:\s+(_\w+))?(?:\s+(\([^()]*\)))?", value)
        if not v:
            raise TableError(f"axis {m.group(1)}: cannot read the value '{value}'")
        values.append((v.group(1).strip(), v.group(2) or "", v.group(3)))
    return m.group(1), values


def parameter_name(parameter):
    m = re.fullmatch(r".*[\s*&](\w+)", parameter.strip())
    if not m or re.search(r"[\[\]()]", parameter):
        raise TableError(f"cannot read the parameter '{parameter.strip()}': write `TYPE name`")
    return m.group(1)


def parse_kernel(spec, axes):
    """A kernel line as (name, [(axis, values)], bounds or None, body, parameters)."""
    m = re.match(r"([A-Za-z_]\w*)\s*", spec)
    if m and m.group(1) == "tile":
        raise TableError("write a tile line as `tile NAME[AXIS]... = BODY(PARAMETERS)`")
    if not m:
        raise TableError("write a kernel as `NAME[AXIS]... [__launch_bounds__(...)] = BODY(PARAMETERS)`")
    name, i = m.group(1), m.end()
    chosen = []
    while i < len(spec) and spec[i] == "[":
        end = balanced_end(spec, i)
        inner = spec[i + 1:end - 1]
        axis, _, only = inner.partition(":")
        axis = axis.strip()
        if axis not in axes:
            raise TableError(f"kernel {name}: no axis {axis} (declare it with `axis {axis} = ...` first)")
        values = axes[axis]
        if only.strip():
            wanted = [w.strip() for w in only.split(",")]
            for w in wanted:
                if w not in [v[0] for v in values]:
                    raise TableError(f"kernel {name}: axis {axis} has no value {w}")
            values = [v for v in values if v[0] in wanted]
        chosen.append((axis, values))
        i = end
        while i < len(spec) and spec[i].isspace():
            i += 1
    bounds = None
    if spec.startswith("__launch_bounds__", i):
        open_paren = spec.index("(", i)
        end = balanced_end(spec, open_paren)
        bounds = spec[open_paren:end]
        i = end
    rest = spec[i:].strip()
    if not rest.startswith("=") or not rest.endswith(")"):
        raise TableError(f"kernel {name}: write `= BODY(PARAMETERS)` after its axes and launch bounds")
    call = rest[1:].strip()
    # The parameter list is the parenthesised group that ends the line.
    depth = 0
    for open_paren in range(len(call) - 1, -1, -1):
        depth += call[open_paren] == ")"
        depth -= call[open_paren] == "("
        if depth == 0:
            break
    body, parameters = call[:open_paren].strip(), call[open_paren + 1:-1].strip()
    if not body:
        raise TableError(f"kernel {name}: name the body it calls before its parameters")
    params = split_top_level(parameters, ",") if parameters else []
    for p in params:
        try:
            if parameter_name(p) in axes:
                raise TableError(f"the parameter {parameter_name(p)} is named like an axis")
        except TableError as e:
            raise TableError(f"kernel {name}: {e}") from None
    return name, chosen, bounds, body, params


def variants(kernel, tile=False):
    """The written-out kernels (or tile functions) of one table line: (name, bounds, parameters, call), in table
    order."""
    name, chosen, bounds, body, params = kernel
    for combination in itertools.product(*[values for _, values in chosen]):
        values = {axis: value[0] for (axis, _), value in zip(chosen, combination)}
        value_bounds = [value[2] for value in combination if value[2]]
        if bounds is None and len(value_bounds) > 1:
            raise TableError(f"kernel {name}: more than one axis value gives launch bounds; give the kernel its own")
        variant = name + "".join(value[1] for value in combination)
        args = ", ".join([parameter_name(p) for p in params] + (["lg::TilePlace{tile}"] if tile else []))
        yield (variant, bounds or (value_bounds[0] if value_bounds else None),
               [substitute(p, values) for p in params], f"{substitute(body, values)}({args})")


def write_out(kernel_line, kernel, tile=False):
    lines = []
    for variant, bounds, params, call in variants(kernel, tile):
        if tile:
            lines += [f"#line {kernel_line}",
                      f'extern "C" __device__ void {variant}({", ".join(["lg::Tile tile"] + params)}) {{',
                      f"  {call};",
                      "}"]
            continue
        launch = f" __launch_bounds__{bounds}" if bounds else ""
        lines += [f"#line {kernel_line}",
                  f'extern "C" __global__ void{launch} {variant}({", ".join(params)}) {{',
                  f"  {call};",
                  "}"]
    return lines


def expand_table(table_lines, first_line):
    """The written-out kernels and tile functions of a table whose lines (between its opening and closing lines) start
    at first_line, as two lists of lines."""
    axes, out, tiles, names = {}, [], [], set()
    entries = []  # (line number, text) of each axis or kernel line, continuations joined
    for offset, line in enumerate(table_lines):
        if not line.strip():
            continue
        if line[0].isspace() and entries:
            entries[-1] = (entries[-1][0], entries[-1][1] + " " + line.strip())
        else:
            entries.append((first_line + offset, line.strip()))
    for number, text in entries:
        try:
            if text.startswith("axis "):
                axis, values = parse_axis(text[len("axis "):])
                axes[axis] = values
                continue
            tile = re.match(r"tile\s", text) is not None
            kernel = parse_kernel(text[len("tile"):].strip() if tile else text, axes)
            if tile and kernel[2] is not None:
                raise TableError(f"tile {kernel[0]}: a tile function has no launch bounds (its program's block has)")
            for variant in variants(kernel, tile):
                if variant[0] in names:
                    raise TableError(f"kernel {variant[0]} is written out twice")
                names.add(variant[0])
            if tile:
                tiles += write_out(number, kernel, tile=True)
            else:
                out += write_out(number, kernel)
        except TableError as e:
            raise TableError(f"{number}: {e}") from None
    return out, tiles


def expand(text, name="<text>"):
    """`text` with the kernels of every variant table written out after it (see the file comment); text without a
    table is returned as it is. \raises TableError naming `name` and the line."""
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        out.append(lines[i])
        if lines[i].strip() != OPEN:
            i += 1
            continue
        close = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "*/"), None)
        if close is None:
            raise TableError(f"{name}:{i + 1}: the variant table is not closed by a line `*/`")
        out += lines[i + 1:close + 1]
        try:
            kernels, tiles = expand_table(lines[i + 1:close], i + 2)
            out += ["#ifndef LAZYGRAPH_TILES_ONLY"] + kernels + ["#endif"] + tiles
        except TableError as e:
            raise TableError(f"{name}:{e}") from None
        if close + 1 < len(lines):
            out.append(f"#line {close + 2}")
        i = close + 1
    return "\n".join(out)


def main() -> int:
    for path in sys.argv[1:]:
        with open(path, encoding="utf-8") as f:
            try:
                sys.stdout.write(expand(f.read(), path))
            except TableError as e:
                print(f"error: {e}", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
