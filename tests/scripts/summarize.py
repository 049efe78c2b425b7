#!/usr/bin/env python3
"""The closing report of tests/run_all.sh, from each build directory's meson-logs/testlog.json.

usage: summarize.py BUILD_DIR...
Prints, per build directory and suite, the tests Meson ran (passed / failed / skipped) and the test CASES that
ran: for a doctest run its own count ("[doctest] test cases: N | P passed | F failed | S skipped", where
skipped means left to another suite), for a skipped doctest run the cases it did not run ("[doctest]
unskipped test cases passing the current filters: N"), and one case per test otherwise. Then the reason of
every skipped test (the line of its output that says "skipped", else its last line), and the closing line
    N passed, N failed, N skipped
counting tests: OK and EXPECTEDFAIL as passed, SKIP as skipped, everything else as failed.
"""
import json
import os
import re
import sys

DOCTEST_RUN = re.compile(r"\[doctest\] test cases:\s*(\d+)\s*\|\s*(\d+) passed\s*\|\s*(\d+) failed")
DOCTEST_COUNT = re.compile(r"\[doctest\] unskipped test cases passing the current filters:\s*(\d+)")


def outcome(result):
    if result in ("OK", "EXPECTEDFAIL"):
        return "passed"
    return "skipped" if result == "SKIP" else "failed"


def skip_reason(output):
    """The line of a skipped test's output that says why (the one saying "skipped", else its last line), without
    its "PROGRAM: skipped, ...:" lead, so that tests skipped for one reason group together."""
    lines = [line.strip() for line in output.splitlines()
             if line.strip() and not line.startswith(("[doctest]", "=" * 8))]
    said = [line for line in lines if "skipped" in line.lower()]
    line = (said or lines or ["(no output)"])[-1]
    m = re.search(r"skipped[^:]*:\s*(.+)", line, re.I)
    return m.group(1) if m else line


def main() -> int:
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    rows, skips = [], {}
    for build_dir in sys.argv[1:]:
        log = os.path.join(build_dir, "meson-logs", "testlog.json")
        if not os.path.isfile(log):
            print(f"{log}: missing (did the tests of {build_dir} run?)")
            totals["failed"] += 1
            continue
        suites = {}
        with open(log, encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                # Meson 1.0 names a test "PROJECT:SUITE / NAME" (its suites joined by "+": the first counts), newer
                # ones "SUITE - PROJECT:NAME"; a record's own "suite" list, where there is one, says it too.
                full = r["name"]
                if " / " in full:
                    suite_part, _, name = full.rpartition(" / ")
                    suite = suite_part.split(":")[-1].split("+")[0]
                elif " - " in full:
                    suite, _, rest = full.partition(" - ")
                    name = rest.split(":")[-1]
                else:
                    suite, name = "", full.split(":")[-1]
                if r.get("suite"):
                    suite = r["suite"][0].split(":")[-1]
                suite = suite or "?"
                s = suites.setdefault(suite, {"passed": 0, "failed": 0, "skipped": 0, "cases": 0, "not_run": 0})
                kind = outcome(r["result"])
                s[kind] += 1
                totals[kind] += 1
                output = (r.get("stdout") or "") + (r.get("stderr") or "")
                run = DOCTEST_RUN.search(output)
                count = DOCTEST_COUNT.search(output)
                not_run = 0
                if run:
                    s["cases"] += int(run.group(1))
                elif count:
                    not_run = int(count.group(1))
                elif kind != "skipped":
                    s["cases"] += 1
                else:
                    not_run = 1
                s["not_run"] += not_run
                if kind == "skipped":
                    label = f"{build_dir}/{name}" + (f" ({not_run} cases)" if count else "")
                    skips.setdefault(skip_reason(output), []).append(label)
        for suite, s in suites.items():
            tests = s["passed"] + s["failed"] + s["skipped"]
            rows.append(f"{build_dir:<11} {suite:<13} {tests:>4} {s['passed']:>6} {s['failed']:>6} {s['skipped']:>7}"
                        f"   {s['cases']:>9} {s['not_run']:>7}")
    print(f"{'build dir':<11} {'suite':<13} {'tests':>4} {'passed':>6} {'failed':>6} {'skipped':>7}"
          f"   {'cases run':>9} {'not run':>7}")
    for row in rows:
        print(row)
    print("(cases: a doctest run counts its test cases, any other test is one case)")
    for reason, labels in skips.items():
        print(f"skipped {len(labels)}: {', '.join(labels)}")
        print(f"  because: {reason}")
    print(f"{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
