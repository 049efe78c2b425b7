#!/usr/bin/env python3
"""layers: the library's layers and the nn wing's seams hold.

usage: check_layers.py SOURCE_ROOT

Four rules, each failure named with the file and the include or line that breaks it:
  1. A header of layer L (include/lazygraph/L/, detail/L/, or the umbrella L.hpp) includes only headers of L or of
     the layers below it: driver, ops, kernels, graph, module, nn (docs/design.md's layers); lazygraph.hpp counts
     as module's.
  2. The nn wing has no include cycle between its rooms. A room is a file's stem, its header and its source together
     (decoder.hpp with decoder.cpp); src/nn/architectures/ is one room, and so are src/nn/formats/ and
     src/nn/methods/.
  3. nn's private parts live in include/lazygraph/nn/detail/: no other nn header opens `namespace detail`.
  4. The weight seam: a quantized WeightFormat (`WeightFormat::` followed by anything but `dense`) is named only in
     its format's file (src/nn/formats/), in the header that declares the enum and in projection.hpp's table; the
     library's other files (include/, src/, tools/) ask the tables, so a new format is a row and never a branch.
"""
import os
import re
import sys

LAYERS = ["driver", "ops", "kernels", "graph", "module", "nn"]
INCLUDE = re.compile(r'^\s*#\s*include\s+[<"](lazygraph/[^">]+)[">]', re.M)
LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/][^"]*\.hpp)"', re.M)


def layer_of(rel):
    """The layer of a path relative to include/ (lazygraph/...), or None for lazygraph.hpp and the like."""
    parts = rel.split("/")[1:]
    if parts and parts[0] == "detail":
        parts = parts[1:]
    if len(parts) == 1:
        stem = os.path.splitext(parts[0])[0]
        if stem == "lazygraph":
            return "module"  # lazygraph.hpp: every layer up to module (nn has its own nn.hpp)
        return stem if stem in LAYERS else None
    return parts[0] if parts else None


def check_layers(include_dir):
    errors = []
    for folder, _, files in os.walk(os.path.join(include_dir, "lazygraph")):
        for name in sorted(files):
            if not name.endswith(".hpp"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, include_dir)
            layer = layer_of(rel)
            if layer is None:
                continue
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for included in INCLUDE.findall(text):
                other = layer_of(included)
                if other is None:
                    errors.append(f"{rel} (layer {layer}) includes {included}, the whole library's header")
                elif LAYERS.index(other) > LAYERS.index(layer):
                    errors.append(f"{rel} (layer {layer}) includes {included} of layer {other}, above it")
    return errors


def room(root, path):
    """The nn room of a file under include/lazygraph/nn/ or src/nn/."""
    for base in (os.path.join(root, "include", "lazygraph", "nn"), os.path.join(root, "src", "nn")):
        if path.startswith(base + os.sep):
            rel = os.path.splitext(os.path.relpath(path, base))[0]
            for seam in ("architectures", "formats", "methods"):
                if rel.startswith(seam + os.sep):
                    return seam
            return rel
    return None


def nn_edges(root):
    edges = {}
    for base in (os.path.join(root, "include", "lazygraph", "nn"), os.path.join(root, "src", "nn")):
        for folder, _, files in os.walk(base):
            for name in sorted(files):
                if not name.endswith((".hpp", ".cpp")):
                    continue
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                targets = [os.path.join(root, "include", inc) for inc in INCLUDE.findall(text)]
                targets += [os.path.normpath(os.path.join(folder, inc)) for inc in LOCAL_INCLUDE.findall(text)]
                source = room(root, path)
                for target in targets:
                    other = room(root, target)
                    if other is not None and other != source:
                        edges.setdefault(source, {})[other] = os.path.relpath(path, root)
    return edges


def find_cycle(edges):
    """One cycle of rooms as a list (first == last), or None."""
    state = {}
    stack = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for other in sorted(edges.get(node, {})):
            if state.get(other) == 1:
                return stack[stack.index(other):] + [other]
            if other not in state:
                found = visit(other)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def check_nn_detail(root):
    errors = []
    base = os.path.join(root, "include", "lazygraph", "nn")
    for folder, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if d != "detail"]
        for name in sorted(files):
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    if re.match(r"\s*namespace\s+detail\s*\{", line):
                        errors.append(f"{os.path.relpath(path, root)}:{number} opens namespace detail; move it to "
                                      "include/lazygraph/nn/detail/")
    return errors


QUANTIZED_FORMAT = re.compile(r"\bWeightFormat::(?!dense\b)\w+")
# Where a quantized WeightFormat may be named: each format's file, the enum's header, the projections' table.
FORMAT_PLACES = [os.path.join("src", "nn", "formats") + os.sep,
                 os.path.join("include", "lazygraph", "nn", "weight_format.hpp"),
                 os.path.join("include", "lazygraph", "nn", "projection.hpp")]


def check_format_seam(root):
    errors = []
    for top in ("include", "src", "tools"):
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".hpp", ".cpp", ".cu", ".cuh", ".h")):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, root)
                if any(rel == place or rel.startswith(place) for place in FORMAT_PLACES):
                    continue
                with open(path, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        found = QUANTIZED_FORMAT.search(line)
                        if found:
                            errors.append(f"{rel}:{number} names {found.group(0)}; ask the format's row of the "
                                          "storage table (src/nn/formats/storage_format.hpp) instead")
    return errors


def main() -> int:
    root = os.path.abspath(sys.argv[1])
    errors = check_layers(os.path.join(root, "include"))
    edges = nn_edges(root)
    if len(edges) < 10:
        errors.append(f"found {len(edges)} nn rooms with includes under {root}, not the library's")
    cycle = find_cycle(edges)
    if cycle:
        steps = [f"{a} -> {b} ({edges[a][b]})" for a, b in zip(cycle, cycle[1:])]
        errors.append("the nn rooms include each other in a cycle: " + "; ".join(steps))
    if os.path.isdir(os.path.join(root, "include", "lazygraph", "nn")):
        errors += check_nn_detail(root)
        errors += check_format_seam(root)
    for e in errors:
        print(f"layers: {e}")
    if not errors:
        print(f"layers: every header includes only its layer and those below; {len(edges)} nn rooms, no cycle; "
              "nn's private parts in nn/detail/; quantized formats named only in their rows")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
