#!/usr/bin/env python3
"""Compile-fail test: passes only if SNIPPET fails to compile AND the diagnostics match its expected regex.

usage: check.py BUILD_DIR SNIPPET
The snippet names its expected diagnostic on a line `// expect-error: REGEX` (several such lines: each must
match, e.g. the message and the instantiation context naming an argument, which GCC prints before the error and
Clang after it); optional lines
`// reject: REGEX` (a diagnostic that must NOT appear, e.g. a second, wrong suggestion),
`// first-error: REGEX` (the first line that says "error:" must match: the sentence a user reads first, not an
overload list it would otherwise end) and
`// extra-flags: FLAGS` (appended to the command, e.g. -Werror=unused-result so that a warning the
library relies on is tested whatever the build's warning flags). Its exact compile command comes from
BUILD_DIR/compile_commands.json (the snippets are a build_by_default: false target, so Meson records
them with the flags a user's code gets), re-run with -fsyntax-only. lazygraph.hpp, which every snippet includes, is
compiled once per build directory and set of flags into a precompiled header (BUILD_DIR/compile-fail-pch, under a
lock, rebuilt when a header it read has changed) that each snippet's command includes first: parsing it was 2.3 of
the 3.1 s a snippet took on the 2-core CI machine. The snippet's own #include of it is then a no-op (#pragma once), and
the diagnostics are the same (the compiler reports the same instantiations).
"""
import fcntl
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys


def precompiled_header(build_dir, flags, cwd):
    """The path to -include for lazygraph.hpp precompiled with `flags` (the compile command less its source), or None
    when that fails (the snippet then parses the header itself)."""
    folder = os.path.join(build_dir, "compile-fail-pch")
    os.makedirs(folder, exist_ok=True)
    key = hashlib.sha256("\0".join(flags).encode()).hexdigest()[:16]
    header = os.path.join(folder, f"lazygraph_{key}.hpp")
    gch, deps = header + ".gch", header + ".d"
    with open(os.path.join(folder, "lock"), "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one test builds it; the others wait, then use it
        if fresh(gch, deps, cwd):
            return header
        with open(header, "w", encoding="utf-8") as f:
            f.write("#include <lazygraph/lazygraph.hpp>\n")
        proc = subprocess.run(flags + ["-x", "c++-header", header, "-o", gch, "-MD", "-MF", deps], cwd=cwd,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            for stale in (gch, deps):
                if os.path.exists(stale):
                    os.remove(stale)
            return None
        return header


def fresh(gch, deps, cwd):
    """Whether `gch` exists and is newer than every file its dependency file lists (paths relative to `cwd`)."""
    if not (os.path.exists(gch) and os.path.exists(deps)):
        return False
    built = os.path.getmtime(gch)
    with open(deps, encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    files = text.split(":", 1)[1].split() if ":" in text else []
    paths = [os.path.join(cwd, p) for p in files]
    return all(os.path.exists(p) and os.path.getmtime(p) <= built for p in paths)


def main() -> int:
    build_dir, snippet = sys.argv[1], os.path.abspath(sys.argv[2])
    with open(snippet, encoding="utf-8") as f:
        text = f.read()
    expected = [e.strip() for e in re.findall(r"//\s*expect-error:\s*(.+)", text)]
    if not expected:
        print(f"{snippet}: no '// expect-error: REGEX' line")
        return 1
    rejected = [r.strip() for r in re.findall(r"//\s*reject:\s*(.+)", text)]
    first = [r.strip() for r in re.findall(r"//\s*first-error:\s*(.+)", text)]
    extra = [f for line in re.findall(r"//\s*extra-flags:\s*(.+)", text) for f in shlex.split(line)]
    with open(os.path.join(build_dir, "compile_commands.json"), encoding="utf-8") as f:
        entries = json.load(f)
    entry = next((e for e in entries
                  if os.path.abspath(os.path.join(e["directory"], e["file"])) == snippet), None)
    if entry is None:
        print(f"{snippet}: not in compile_commands.json")
        return 1
    args = shlex.split(entry["command"])
    cleaned, skip = [], 0
    for a in args:
        if skip:
            skip -= 1
            continue
        if a in ("-o", "-MQ", "-MF"):
            skip = 1
            continue
        if a in ("-c", "-MD"):
            continue
        cleaned.append(a)
    source = [a for a in cleaned if os.path.abspath(os.path.join(entry["directory"], a)) == snippet]
    flags = [a for a in cleaned if a not in source]
    header = precompiled_header(os.path.abspath(build_dir), flags, entry["directory"])
    command = flags + (["-include", header] if header else []) + source + extra + ["-fsyntax-only"]
    proc = subprocess.run(command, cwd=entry["directory"], capture_output=True, text=True)
    output = proc.stdout + proc.stderr
    if proc.returncode == 0:
        print(f"{os.path.basename(snippet)}: compiled, but it must not")
        return 1
    for e in expected:
        if not re.search(e, output):
            print(f"{os.path.basename(snippet)}: failed to compile, but no diagnostic matches /{e}/:\n{output}")
            return 1
    first_error = next((line for line in output.splitlines() if "error:" in line), "")
    for e in first:
        if not re.search(e, first_error):
            print(f"{os.path.basename(snippet)}: the first error does not match /{e}/: {first_error}\n{output}")
            return 1
    for r in rejected:
        if re.search(r, output):
            print(f"{os.path.basename(snippet)}: the diagnostics also say /{r}/, which they must not:\n{output}")
            return 1
    print(f"{os.path.basename(snippet)}: fails to compile with {' and '.join(f'/{e}/' for e in expected)} as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
