#!/usr/bin/env python3
"""Test 'documented': every environment variable the tree reads and every Meson option is in README.md's tables.

usage: check_docs.py SOURCE_ROOT
Environment variables are found where they are read: getenv("NAME") in C++, os.environ / os.getenv in Python,
${NAME:-default} and $LAZYGRAPH_* in shell scripts. Options are the option('NAME', ...) lines of
meson_options.txt. README.md must hold a table row naming each (a line starting with `| ` and containing
`NAME` in backquotes); fails listing the ones it lacks.
"""
import os
import re
import sys

SKIP_DIRS = {".git", "subprojects", "__pycache__", ".debs", "gpu-logs"}


def sources(root):
    for dirpath, dirs, names in os.walk(root):
        # Hidden folders other than .ci are a checkout's own (a scratch folder, an editor's): not the tree's.
        dirs[:] = [
            d
            for d in dirs
            if d not in SKIP_DIRS and not d.startswith("build") and (d == ".ci" or not d.startswith("."))
        ]
        for name in names:
            yield os.path.join(dirpath, name)


def env_vars(root):
    found = {}
    patterns = {
        (".cpp", ".hpp", ".h", ".cc"): [r'getenv\("([A-Za-z_][A-Za-z0-9_]*)"\)'],
        (".py",): [r'os\.environ(?:\.get)?[\[(]\s*"([A-Za-z_][A-Za-z0-9_]*)"', r'os\.getenv\(\s*"([A-Za-z_][A-Za-z0-9_]*)"'],
        (".sh", "run"): [r"\$\{([A-Z_][A-Z0-9_]*):?-", r"\$\{?(LAZYGRAPH_[A-Z0-9_]+)"],
    }
    for path in sources(root):
        for suffixes, regexes in patterns.items():
            if path.endswith(suffixes) or os.path.basename(path) in suffixes:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for rx in regexes:
                    for name in re.findall(rx, text):
                        found.setdefault(name, os.path.relpath(path, root))
    return found


def main() -> int:
    root = sys.argv[1]
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        rows = [line for line in f if line.startswith("| ")]
    with open(os.path.join(root, "meson_options.txt"), encoding="utf-8") as f:
        options = re.findall(r"option\(\s*'([^']+)'", f.read())
    if not options:
        print("meson_options.txt: no option('NAME', ...) found")
        return 1

    def documented(name):
        return any(f"`{name}`" in row or f"`-D{name}=" in row for row in rows)

    missing = [f"environment variable {name} (read in {where})"
               for name, where in sorted(env_vars(root).items()) if not documented(name)]
    missing += [f"Meson option {name} (meson_options.txt)" for name in options if not documented(name)]
    for m in missing:
        print(f"README.md has no table row for the {m}")
    if missing:
        return 1
    print(f"README.md documents all {len(env_vars(root))} environment variables and {len(options)} Meson options")
    return 0


if __name__ == "__main__":
    sys.exit(main())
