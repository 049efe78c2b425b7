#!/usr/bin/env python3
"""examples/bench/kernel_timeline.py on a made-up trace: the steps it finds, their span, the idle time between them,
the kernels between steps, and each kernel's time and gap, as the trace says; the steps --blocks, --with and
--without keep; and its refusal when no step matches.

Usage: kernel_timeline.py ANALYZER
"""
import csv
import os
import subprocess
import sys
import tempfile

ANALYZER = sys.argv[1]


def trace(path, steps, odd_name="gemm"):
    """`steps` steps, 1000 us apart: embedding 10 us; a templated kernel 20 us, 1 us after it (named odd_name in the
    odd steps); sample 5 us, starting 2 us before the kernel before it ends (an early launch), with 64 blocks but in
    the last step (32); then a copy of 3 us, 50 us after sample. Times in ns."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["start_ns", "end_ns", "blocks", "name"])
        for s in range(steps):
            t = s * 1_000_000
            w.writerow([t, t + 10_000, 128, "embedding"])
            name = odd_name if s % 2 else "gemm"
            w.writerow([t + 11_000, t + 31_000, 512, f"void ns::{name}<32, 16, float>(float const*, int)"])
            w.writerow([t + 29_000, t + 34_000, 64 if s < steps - 1 else 32, "sample"])
            w.writerow([t + 84_000, t + 87_000, 1, "staging_copy"])


def run(*args):
    return subprocess.run([sys.executable, ANALYZER, *args], capture_output=True, text=True)


def main():
    failures = []

    def check(condition, what):
        if not condition:
            failures.append(what)

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.csv")
        trace(path, 5)
        r = run(path, "--first", "embedding", "--last", "sample", "--skip", "0")
        out = r.stdout
        check(r.returncode == 0, f"exit {r.returncode}: {r.stderr}")
        check("5 steps of 3 kernels" in out, "five steps of three kernels")
        check("GPU span of a step: median 34.0 us" in out, "a step spans 34 us")
        check("to the next step's first: median 966.0 us" in out, "966 us from sample's end to the next embedding")
        check("| staging_copy | 1.0 | 3.00 |" in out, "one copy of 3 us between steps")
        check("| ns::gemm | 1.0 | 20.00 | 1.00 | 20.0 | 1.0 |" in out, "the templated kernel, named short")
        check("| sample | 1.0 | 5.00 | -2.00 | 5.0 | -2.0 |" in out, "sample's early start as a negative gap")
        check("| embedding | 1.0 | 10.00 | 0.00 | 10.0 | 0.0 |" in out, "embedding, first of its step: no gap")
        check("| all | | | | 35.0 | -1.0 |" in out, "the totals")
        # --blocks keeps the steps whose last kernel has that many blocks; --skip leaves out the first ones.
        r = run(path, "--first", "embedding", "--last", "sample", "--blocks", "64", "--skip", "0.5")
        check("2 steps of 3 kernels" in r.stdout, f"--blocks 64 --skip 0.5: two of the four steps: {r.stdout}")
        # --positions: each kernel of the step in order; "adds" is from the end of the kernel before to its own end.
        r = run(path, "--first", "embedding", "--last", "sample", "--skip", "0", "--positions")
        check("5 of 5 steps have the most common sequence of 3 kernels" in r.stdout, "--positions: the sequence")
        check("| 0 | embedding | 128 | 10.00 | 0.00 | 10.00 |" in r.stdout, "--positions: the first kernel")
        check("| 1 | ns::gemm | 512 | 20.00 | 1.00 | 21.00 |" in r.stdout, "--positions: 1 us gap and 20 us")
        check("| 2 | sample | 64 | 5.00 | -2.00 | 3.00 |" in r.stdout, "--positions: an early start adds less")
        check("| | all | | | | 34.0 |" in r.stdout, "--positions: the step's span")
        # --with keeps the steps with a kernel whose name contains the text: the odd steps' gemm_mma.
        trace(path, 5, "gemm_mma")
        r = run(path, "--first", "embedding", "--last", "sample", "--skip", "0", "--with", "_mma")
        check("2 steps of 3 kernels" in r.stdout and "| ns::gemm_mma | 1.0 | 20.00 |" in r.stdout
              and "| ns::gemm |" not in r.stdout, f"--with _mma: the two odd steps: {r.stdout}")
        # The gemm of steps 3 and 4 (of 0-4) named gemm_mma: those two are kept and follow each other, so their copy
        # counts as between steps, and their idle time is measured.
        trace(path, 5, "gemm")
        with open(path) as f:
            rows = f.read().splitlines()
        rows = [row.replace("ns::gemm<", "ns::gemm_mma<") if i > 2 + 4 * 2 else row for i, row in enumerate(rows)]
        with open(path, "w") as f:
            f.write("\n".join(rows) + "\n")
        r = run(path, "--first", "embedding", "--last", "sample", "--skip", "0", "--with", "_mma")
        check("2 steps of 3 kernels" in r.stdout and "| staging_copy | 1.0 | 3.00 |" in r.stdout
              and "median 966.0 us" in r.stdout, f"--with _mma, two adjacent steps: {r.stdout}")
        trace(path, 5, "gemm_mma")
        r = run(path, "--first", "embedding", "--last", "sample", "--skip", "0", "--with", "_mma")
        check("no two kept steps follow each other" in r.stdout, f"--with _mma, no adjacent steps: {r.stdout}")
        # --without leaves out the steps with a kernel whose name contains the text: the even steps' plain gemm.
        r = run(path, "--first", "embedding", "--last", "sample", "--skip", "0", "--without", "_mma")
        check("3 steps of 3 kernels" in r.stdout and "| ns::gemm | 1.0 | 20.00 |" in r.stdout
              and "gemm_mma" not in r.stdout, f"--without _mma: the three even steps: {r.stdout}")
        r = run(path, "--first", "embedding", "--last", "sample", "--skip", "0", "--with", "gemm", "--without", "_mma")
        check("3 steps of 3 kernels" in r.stdout, f"--with gemm --without _mma: the even steps: {r.stdout}")
        r = run(path, "--first", "embedding", "--last", "sample", "--with", "_mma", "--without", "gemm")
        check(r.returncode == 2, "--with and --without that no step meets together: exit 2")
        r = run(path, "--first", "embedding", "--last", "sample", "--with", "_b8")
        check(r.returncode == 2, "--with a name no step has: exit 2")
        r = run(path, "--first", "prefill", "--last", "sample")
        check(r.returncode == 2 and "no step from 'prefill' to 'sample'" in r.stderr, "no matching step: exit 2")
    for f in failures:
        print("FAILED:", f)
    if failures:
        print(out)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
