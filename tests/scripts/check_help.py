#!/usr/bin/env python3
"""Test '<program>-help': a program answers --help with its usage and refuses an option it does not take.

usage: check_help.py PROGRAM
Passes when `PROGRAM --help` exits 0 and prints "usage: <its name>" first on stdout, and
`PROGRAM --no-such-option` exits 2 with the usage on stderr: neither may start GPU work.
"""
import os
import subprocess
import sys


def main() -> int:
    program = sys.argv[1]
    name = os.path.basename(program)
    ok = True
    run = subprocess.run([program, "--help"], capture_output=True, text=True, timeout=60)
    if run.returncode != 0 or not run.stdout.startswith(f"usage: {name}"):
        print(f"{name} --help: exit {run.returncode}, expected 0 with 'usage: {name}' first on stdout; got:\n"
              f"{run.stdout}{run.stderr}")
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
