#!/usr/bin/env python3
"""Where a repeated GPU step spends its time, from a kernel trace (examples/bench/kernel_trace.cpp's CSV).

Usage: kernel_timeline.py TRACE.csv --first NAME --last NAME [--blocks N] [--with NAME] [--without NAME] [--skip F]

A step is the kernels from one whose name starts with --first to the next whose name starts with --last (with
--blocks, only steps whose last kernel has that many blocks: one bucket of a decoder's wide step, say; with --with,
only steps with a kernel whose name contains NAME: "_mma" for the tensor-core batch of a run that also times the
fp32 one; with --without, only steps with no kernel whose name contains NAME: --with rms_norm_gemv_swiglu --without
_mma picks the one-row fp16 steps out of a run of `bench_quantized_decoder`, which times every format at 1 and 8 rows).
The first fraction --skip of the steps (default 0.25) is left out as warm-up. Prints, as Markdown:
- the steps' GPU span (first kernel's start to last kernel's end) and the GPU's idle time between a step's last
  kernel and the next step's first (host work between graph replays, copies, launches), medians, over pairs of kept
  steps with no step left out between them;
- the kernels that run between steps;
- per kernel name: launches per step, mean time, and the mean gap between the end of the kernel before it and its
  start (negative when it started early: programmatic dependent launch), with their products per step;
- with --positions, the kernels of the steps whose sequence of names is the most common one, in order: each one's
  blocks, median time, median gap and the median time from the end of the kernel before it to its own end (what it
  adds to the step).
Exit status 0, or 2 with a message when the trace has no such step.
"""
import argparse
import csv
import statistics
import sys


def short(name):
    """A kernel's name without 'void ', its namespace's template arguments and its parameters."""
    if name.startswith("void "):
        name = name[5:]
    for stop in ("(", "<"):
        at = name.find(stop)
        if at > 0:
            name = name[:at]
    return name[:60]


def read(path):
    kernels = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            kernels.append((int(row["start_ns"]), int(row["end_ns"]), int(row["blocks"]), short(row["name"])))
    kernels.sort()
    return kernels


def steps_of(kernels, first, last, blocks, having=None, lacking=None):
    steps = []
    i = 0
    while i < len(kernels):
        if not kernels[i][3].startswith(first):
            i += 1
            continue
        j = i + 1
        while j < len(kernels) and not kernels[j][3].startswith(last):
            if kernels[j][3].startswith(first):
                i = j  # a step that never reached its last kernel: start over from here
            j += 1
        if j >= len(kernels):
            break
        keep = (blocks is None or kernels[j][2] == blocks) and (
            having is None or any(having in kernels[m][3] for m in range(i, j + 1))) and (
            lacking is None or not any(lacking in kernels[m][3] for m in range(i, j + 1)))
        steps.append((i, j, keep))
        i = j + 1
    return steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--first", required=True, help="the name a step's first kernel starts with")
    parser.add_argument("--last", required=True, help="the name a step's last kernel starts with")
    parser.add_argument("--blocks", type=int, help="only steps whose last kernel has this many blocks")
    parser.add_argument("--with", dest="having", help="only steps with a kernel whose name contains this")
    parser.add_argument("--without", dest="lacking", help="only steps with no kernel whose name contains this")
    parser.add_argument("--skip", type=float, default=0.25, help="fraction of the steps left out first")
    parser.add_argument("--positions", action="store_true", help="also each kernel of the most common step, in order")
    a = parser.parse_args()
    kernels = read(a.trace)
    found = steps_of(kernels, a.first, a.last, a.blocks, a.having, a.lacking)
    # Between two kept steps only where no step left out lies between them.
    pairs = [((i, j), (k, n)) for (i, j, keep), (k, n, keep_next) in zip(found, found[1:]) if keep and keep_next]
    steps = [(i, j) for i, j, keep in found if keep]
    steps = steps[int(len(steps) * a.skip):]
    kept = set(steps)
    pairs = [pair for pair in pairs if pair[0] in kept]
    if not steps:
        print(f"kernel_timeline: no step from {a.first!r} to {a.last!r} in {a.trace}", file=sys.stderr)
        return 2
    spans = [(kernels[j][1] - kernels[i][0]) / 1000 for i, j in steps]
    idle = []
    between = {}
    for (_, j), (k, _) in pairs:
        if k > j + 1:  # the kernels between one step and the next
            for m in range(j + 1, k):
                between.setdefault(kernels[m][3], []).append((kernels[m][1] - kernels[m][0]) / 1000)
        idle.append((kernels[k][0] - kernels[j][1]) / 1000)
    print(f"{len(steps)} steps of {statistics.median_low(j - i + 1 for i, j in steps)} kernels")
    print(f"GPU span of a step: median {statistics.median(spans):.1f} us")
    if idle:
        print(f"from a step's last kernel to the next step's first: median {statistics.median(idle):.1f} us")
    elif len(steps) > 1:
        print("from a step's last kernel to the next step's first: no two kept steps follow each other")
    if between:
        print("\n| between steps | launches per gap | mean us |\n|---|---|---|")
        for name, times in sorted(between.items()):
            print(f"| {name} | {len(times) / max(len(idle), 1):.1f} | {statistics.mean(times):.2f} |")
    durations = {}
    gaps = {}
    for i, j in steps:
        for m in range(i, j + 1):
            name = kernels[m][3]
            durations.setdefault(name, []).append((kernels[m][1] - kernels[m][0]) / 1000)
            if m > i:
                gaps.setdefault(name, []).append((kernels[m][0] - kernels[m - 1][1]) / 1000)
    rows = []
    for name, times in durations.items():
        per_step = len(times) / len(steps)
        mean = statistics.mean(times)
        gap = statistics.mean(gaps[name]) if name in gaps else 0.0
        rows.append((per_step * mean, name, per_step, mean, gap))
    print("\n| kernel | per step | mean us | mean gap before us | us per step | gap us per step |")
    print("|---|---|---|---|---|---|")
    total = 0.0
    total_gap = 0.0
    for product, name, per_step, mean, gap in sorted(rows, reverse=True):
        print(f"| {name} | {per_step:.1f} | {mean:.2f} | {gap:.2f} | {product:.1f} | {per_step * gap:.1f} |")
        total += product
        total_gap += per_step * gap
    print(f"| all | | | | {total:.1f} | {total_gap:.1f} |")
    if a.positions:
        print_positions(kernels, steps)
    return 0


def print_positions(kernels, steps):
    """The kernels of the steps with the most common sequence of names, position by position (medians)."""
    by_names = {}
    for i, j in steps:
        by_names.setdefault(tuple(kernels[m][3] for m in range(i, j + 1)), []).append(i)
    names, starts = max(by_names.items(), key=lambda item: len(item[1]))
    print(f"\n{len(starts)} of {len(steps)} steps have the most common sequence of {len(names)} kernels")
    print("\n| # | kernel | blocks | us | gap before us | adds us |\n|---|---|---|---|---|---|")
    total = 0.0
    for p, name in enumerate(names):
        own = [(kernels[i + p][1] - kernels[i + p][0]) / 1000 for i in starts]
        gap = [(kernels[i + p][0] - kernels[i + p - 1][1]) / 1000 for i in starts] if p else [0.0]
        adds = [(kernels[i + p][1] - kernels[i + p - 1][1]) / 1000 for i in starts] if p else own
        total += statistics.median(adds)
        print(f"| {p} | {name} | {kernels[starts[0] + p][2]} | {statistics.median(own):.2f} | "
              f"{statistics.median(gap):.2f} | {statistics.median(adds):.2f} |")
    print(f"| | all | | | | {total:.1f} |")


if __name__ == "__main__":
    sys.exit(main())
