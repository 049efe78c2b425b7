#!/usr/bin/env python3
"""Compile-fail test: passes only if SNIPPET fails to compile AND the diagnostics match its expected regex.

usage: check.py BUILD_DIR SNIPPET
The snippet names its expected diagnostic on a line `// expect-error: REGEX` (several such lines: each must
match, e.g. the message and the instantiation context naming an argument, which GCC prints before the error and
Clang after it); optional lines
`// reject: REGEX` (a diagnostic that must NOT appear, e.g. a second, wrong suggestion) and
`// extra-flags: FLAGS` (appended to the command, e.g. -Werror=unused-result so that a warning the
library relies on is tested whatever the build's warning flags). Its exact compile command comes from
BUILD_DIR/compile_commands.json (the snippets are a build_by_default: false target, so Meson records
them with the flags a user's code gets), re-run with -fsyntax-only.
"""
import json
import os
import re
import shlex
import subprocess
import sys


def main() -> int:
    build_dir, snippet = sys.argv[1], os.path.abspath(sys.argv[2])
    with open(snippet, encoding="utf-8") as f:
        text = f.read()
    expected = [e.strip() for e in re.findall(r"//\s*expect-error:\s*(.+)", text)]
    if not expected:
        print(f"{snippet}: no '// expect-error: REGEX' line")
        return 1
    rejected = [r.strip() for r in re.findall(r"//\s*reject:\s*(.+)", text)]
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
    cleaned.extend(extra)
    cleaned.append("-fsyntax-only")
    proc = subprocess.run(cleaned, cwd=entry["directory"], capture_output=True, text=True)
    output = proc.stdout + proc.stderr
    if proc.returncode == 0:
        print(f"{os.path.basename(snippet)}: compiled, but it must not")
        return 1
    for e in expected:
        if not re.search(e, output):
            print(f"{os.path.basename(snippet)}: failed to compile, but no diagnostic matches /{e}/:\n{output}")
            return 1
    for r in rejected:
        if re.search(r, output):
            print(f"{os.path.basename(snippet)}: the diagnostics also say /{r}/, which they must not:\n{output}")
            return 1
    print(f"{os.path.basename(snippet)}: fails to compile with {' and '.join(f'/{e}/' for e in expected)} as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
