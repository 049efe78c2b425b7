#!/usr/bin/env python3
"""Test '<program>-help': a program answers --help with its usage and refuses an option it does not take.

usage: check_help.py PROGRAM
Passes when `PROGRAM --help` exits 0 and prints "usage: <its name>" first on stdout, and
`PROGRAM --no-such-option` exits 2 with the usage on stderr: neither may start GPU work. The usage must also
have an "Exit status:" section that lists both statuses seen here, 0 and 2 (as "0 <meaning>, ... 2 <meaning>"),
so that a user reading --help learns what a usage error returns.
"""
import os
import re
import subprocess
import sys


def exit_status_problems(usage: str) -> list:
    """What the usage's exit status section lacks: the section itself, or the statuses 0 and 2."""
    at = usage.lower().find("exit status")
    if at < 0:
        return ["it has no 'Exit status:' section"]
    section = usage[at:]
    missing = [f"{code} ({what})" for code, what in (("0", "success"), ("2", "a usage error"))
               if not re.search(rf"(?<![\w.]){code}\s+[(a-zA-Z]", section)]
    return [f"its exit status section does not list {m}" for m in missing]


def main() -> int:
    program = sys.argv[1]
    name = os.path.basename(program)
    ok = True
    run = subprocess.run([program, "--help"], capture_output=True, text=True, timeout=60)
    if run.returncode != 0 or not run.stdout.startswith(f"usage: {name}"):
        print(f"{name} --help: exit {run.returncode}, expected 0 with 'usage: {name}' first on stdout; got:\n"
              f"{run.stdout}{run.stderr}")
        ok = False
    else:
        for problem in exit_status_problems(run.stdout):
            print(f"{name} --help: {problem}; got:\n{run.stdout}")
            ok = False
    bad = subprocess.run([program, "--no-such-option"], capture_output=True, text=True, timeout=60)
    if bad.returncode != 2 or f"usage: {name}" not in bad.stderr:
        print(f"{name} --no-such-option: exit {bad.returncode}, expected 2 with the usage on stderr; got:\n"
              f"{bad.stdout}{bad.stderr}")
        ok = False
    if ok:
        print(run.stdout, end="")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
