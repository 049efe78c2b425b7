#!/usr/bin/env python3
"""public-includes: no public header reaches a foreign-function header.

usage: check_public_includes.py SOURCE_ROOT CUDA_INCLUDE_DIR COMPILER [COMPILER ARGS...]

The foreign-function layer (detail/driver/driver_api.hpp for libcuda, detail/driver/nccl_api.hpp for NCCL,
detail/driver/cublaslt_api.hpp for cuBLASLt, with nccl.h and cublasLt.h) is the library's own: a user's translation
unit never sees it. One preprocessor run (-M, with -H for the include tree) over a file that includes every public
header (include/lazygraph/**.hpp outside detail/ folders) lists what they reach; any of those headers fails the
check, naming the public header that includes it and the chain of includes that leads there.

cuda.h itself is allowed: the driver's types (CUdeviceptr, CUstream, CUgraph...) are part of the public signatures.
"""
import os
import re
import subprocess
import sys
import tempfile

FORBIDDEN = re.compile(r"(lazygraph/detail/driver/\w+_api\.hpp|(^|/)nccl\.h|(^|/)cublasLt\.h)$")


def public_headers(include_dir):
    """Every public header, relative to `include_dir`: under lazygraph/, in no folder named detail."""
    found = []
    for folder, dirs, files in os.walk(os.path.join(include_dir, "lazygraph")):
        dirs[:] = sorted(d for d in dirs if d != "detail")
        found += [os.path.relpath(os.path.join(folder, f), include_dir) for f in sorted(files) if f.endswith(".hpp")]
    return found


def main() -> int:
    root, cuda_include, compiler = sys.argv[1], sys.argv[2], sys.argv[3:]
    if compiler and os.path.basename(compiler[0]) in ("ccache", "sccache"):
        compiler = compiler[1:]  # Meson's compiler command may start with its cache: preprocess with the compiler
    include_dir = os.path.join(root, "include")
    headers = public_headers(include_dir)
    if len(headers) < 20 or "lazygraph/lazygraph.hpp" not in headers:
        print(f"public-includes: found {len(headers)} public headers under {include_dir}, not the library's")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "all_public_headers.cpp")
        with open(source, "w", encoding="utf-8") as f:
            f.writelines(f"#include <{h}>\n" for h in headers)
        command = compiler + ["-std=c++20", "-I", include_dir, "-isystem", cuda_include, "-M", "-H", source]
        proc = subprocess.run(command, capture_output=True, text=True, cwd=tmp)
    if proc.returncode != 0:
        print(f"public-includes: the preprocessor failed: {' '.join(command)}\n{proc.stdout}{proc.stderr}")
        return 1
    reached = proc.stdout.replace("\\\n", " ").split(":", 1)[-1].split()
    if not any(p.endswith("lazygraph/graph/cuda_graph.hpp") for p in reached):
        print(f"public-includes: the dependency list lacks headers lazygraph.hpp includes:\n{proc.stdout}")
        return 1
    bad = sorted({os.path.normpath(p) for p in reached if FORBIDDEN.search(p)})
    if not bad:
        print(f"public-includes: {len(headers)} public headers reach {len(reached)} files, none of them a "
              "foreign-function header")
        return 0
    # -H prints the include tree on stderr, one line per include, its depth as leading dots.
    chain = []
    chains = {}
    for line in proc.stderr.splitlines():
        m = re.match(r"^(\.+) (.+)$", line)
        if not m:
            continue
        depth, path = len(m.group(1)), os.path.normpath(m.group(2))
        del chain[depth - 1:]
        chain.append(path)
        if FORBIDDEN.search(path) and path not in chains:
            chains[path] = list(chain)
    for path in bad:
        print(f"public-includes: {path} is reached from a public header; keep it in src/ or detail/ code that only "
              "src/ includes")
        for i, step in enumerate(chains.get(path, [])):
            print(f"  {'  ' * i}{os.path.relpath(step, include_dir) if step.startswith(include_dir) else step}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
