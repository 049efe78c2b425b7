#!/usr/bin/env python3
"""format-files: which library files know each quantized format, and docs/adding.md's table of them.

usage: format_files.py SOURCE_ROOT            prints the table
       format_files.py SOURCE_ROOT --check    fails when docs/adding.md's table differs from the code
       format_files.py SOURCE_ROOT --lines    prints each file's lines that count, to audit a pattern

A library file (include/, src/, kernels/ of the nn wing: not tests, tools or docs) knows a format when its code, comments left out,
names it (its WeightFormat or PackedMethod enumerator, its name in config.json, its kernels' suffix, its own file, row
or helpers) or branches on it (a test that tells it from the other formats, such as PackedQuantization::fp8(), which
tells the FP8 methods from AWQ and GPTQ, or a comparison of PackedMethods). A file that reads the format's row of a
table (the storage formats', src/nn/formats/; the checkpoint methods', src/nn/methods/) and names no format does not
count: the readers the methods share (packed_int4.cpp, packed_fp8.cpp) count only where they tell methods apart. Adding a format touches at least these files; issue 64's target is 6.
"""
import os
import re
import sys

# Each format: how code names it or branches on it. Patterns are matched against code with comments removed.
FORMATS = {
    "int8_channel": [r"\bint8_channel", r'"int8"', r"_int8(_body)?\b", r"\bkInt8\b", r"int8 per channel"],
    "int4_group": [r"\bint4_group", r'"int4"', r"(?<!packed)_int4z?(_body)?\b", r"\bkInt4(Zero)?\b", r"\bis_int4\b",
                   r"int4 in groups", r"value_bits == 4 && \w+->allows_asymmetric"],
    "fp8_block": [r"\bfp8_block", r'_fp8"', r"\bkFp8", r"_fp8_(body|f32|f16|bf16)\b", r"\bquantize_blocks_fp8",
                  r"\bpack_fp8\b", r"\bdequantize_fp8\b", r"\be4m3_values\b", r"fp8 e4m3 in groups"],
    # A checkpoint method is also known where its family's other method is compared with (`method == awq`: the else is
    # GPTQ's), and where PackedQuantization::fp8() tells the families apart.
    "AWQ": [r"^\s*awq,\s*$", r"PackedMethod::awq\b", r'"awq"', r"\bawq\w*\(", r"\bkAwq", r"\bawq_method\b", r"methods/awq\.cpp",
            r"[=!]=\s*PackedMethod::gptq\b", r"\.fp8\(\)"],
    "GPTQ": [r"^\s*gptq,\s*$", r"PackedMethod::gptq\b", r'"gptq"', r"\bgptq\w*\(", r"\bkGptq", r"\bgptq_method\b", r"methods/gptq\.cpp",
             r"[=!]=\s*PackedMethod::awq\b", r"\.fp8\(\)"],
    "FP8": [r"^\s*fp8,\s*$", r"PackedMethod::fp8\b", r'(?<!name = )"fp8"', r"\bread_fp8\b", r"\bfp8_method\b", r"methods/fp8\.cpp",
            r"weight_scale_inv", r"[=!]=\s*PackedMethod::compressed_tensors\b", r"\.fp8\(\)"],
    "compressed-tensors": [r"^\s*compressed_tensors,\s*$", r"PackedMethod::compressed_tensors\b", r'"compressed-tensors"', r"\bcompressed_tensors",
                           r"float-quantized", r"[=!]=\s*PackedMethod::fp8\b", r"\.fp8\(\)"],
}
STORAGE = ["int8_channel", "int4_group", "fp8_block"]
SOURCES = (".hpp", ".cpp", ".cu", ".cuh", ".h", "meson.build")
BEGIN = "<!-- format-files: begin (tests/scripts/format_files.py writes this table) -->"
END = "<!-- format-files: end -->"


def code_of(path, text):
    """`text` without its comments (C++ and CUDA: // and /* */; meson.build: #), string literals and the kernels'
    `lazygraph:variants` blocks (which the build reads) kept."""
    if path.endswith("meson.build"):
        return re.sub(r"#[^\n]*", "", text)
    out = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':  # a string literal, escapes kept
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/* lazygraph:variants", i):  # the kernels' variant tables: read by the build
            i += 2
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            out.append("\n" * text.count("\n", i, n if j < 0 else j))
            i = n if j < 0 else j + 2
        elif c == "'":  # a character literal, so that '"' opens no string
            j = i + 1
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def library_files(root):
    """The nn wing's library files: the formats are its concept (the core's "int8" is NCCL's type)."""
    for top in (os.path.join("include", "lazygraph", "nn"), os.path.join("src", "nn"), os.path.join("kernels", "nn")):
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(SOURCES):
                    yield os.path.join(folder, name)


def measure(root):
    """{format: {relative path: [(line number, line), ...]}}, for the files that know each format."""
    found = {f: {} for f in FORMATS}
    for path in library_files(root):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        with open(path, encoding="utf-8") as f:
            lines = code_of(path, f.read()).split("\n")
        for fmt, patterns in FORMATS.items():
            rx = re.compile("|".join(f"(?:{p})" for p in patterns))
            hits = [(i + 1, line.strip()) for i, line in enumerate(lines) if rx.search(line)]
            if hits:
                found[fmt][rel] = hits
    return found


def table(found):
    rows = ["| format | files | which |", "|---|---|---|"]
    for fmt, files in found.items():
        kind = "storage" if fmt in STORAGE else "checkpoint method"
        names = ", ".join(f"`{p}`" for p in sorted(files))
        rows.append(f"| {fmt} ({kind}) | {len(files)} | {names} |")
    return "\n".join(rows)


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[1]
    found = measure(root)
    if "--lines" in argv:
        for fmt, files in found.items():
            print(f"== {fmt}: {len(files)} files")
            for rel, hits in sorted(files.items()):
                for number, line in hits:
                    print(f"{rel}:{number}: {line}")
        return 0
    want = table(found)
    if "--check" not in argv:
        print(want)
        return 0
    doc = os.path.join(root, "docs", "adding.md")
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        print(f"docs/adding.md: no table between {BEGIN} and {END}", file=sys.stderr)
        return 1
    have = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    if have != want:
        print("docs/adding.md's table of the files each format touches is not the code's; run "
              "tests/scripts/format_files.py SOURCE_ROOT and paste its table there:\n" + want, file=sys.stderr)
        return 1
    print("format-files: docs/adding.md's table matches the code")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
