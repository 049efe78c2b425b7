#!/usr/bin/env python3
"""Writes README.md's first ```cpp block to OUTPUT, so the build compiles it and a test runs it.

usage: readme_snippet.py README OUTPUT
The first snippet is what a newcomer copies: it must be a whole program that builds as it stands and, without
a GPU, says why instead of aborting (the test 'readme-snippet' runs it: exit 0, or 77 with the reason).
"""
import re
import sys


def main() -> int:
    readme, output = sys.argv[1], sys.argv[2]
    with open(readme, encoding="utf-8") as f:
        m = re.search(r"^```cpp\n(.*?)^```", f.read(), re.S | re.M)
    if not m:
        print(f"{readme}: no ```cpp block", file=sys.stderr)
        return 1
    with open(output, "w", encoding="utf-8") as f:
        f.write(f"// Generated from the first C++ snippet of {readme}. Do not edit.\n{m.group(1)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
