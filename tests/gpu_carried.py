#!/usr/bin/env python3
"""The GPU suites from programs built elsewhere: a GPU machine without the toolchain's build runs them.

usage: gpu_carried.py pack BUILD DEST
       gpu_carried.py run DEST [--jobs N] [--suite gpu|reliability] [--only NAME]...
       gpu_carried.py check BUILD
`pack` (on the build machine, after `ninja -C BUILD`) reads Meson's list of BUILD's tests
(meson-info/intro-tests.json), keeps the suites 'gpu' and 'reliability', and copies into DEST every program
those tests run or name (bin/) and the shared libraries they need that a GPU machine may lack (lib/: lazygraph's own,
and PCRE2, utf8proc, SentencePiece and cpp-httplib, which Debian ships and Ubuntu's CUDA images do not; also
sentencepiece's programs, bin/spm, where a test names their folder), with
DEST/tests.json: each test's command and environment, their build paths turned into DEST's and their source
paths into the tree's. `run` (on the GPU machine, from the root of the same source tree, DEST carried with it)
runs them as `meson test` would: highest priority first, the parallel ones N at a time (8 by default: one GPU holds
them all), then the others one by one, each with its timeout. Each test's output goes to $OUT/NAME.log (default
./gpu-logs); the run prints a line per test (and its doctest case counts), then
    N passed, N failed, N skipped
(exit status 77 is a skip) and exits 1 when a test failed. Building on the GPU machine (tests/gpu_machine.sh) costs
minutes of its time; this costs the copy (about 35 MB). DEST must be the build's own: the programs find their kernel
sources inside them, not in the tree.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

SUITES = ("gpu", "reliability")
# Shared libraries copied beside the programs (by file name): the build's own and the Debian packages' that an
# Ubuntu GPU machine lacks. Everything else (libc, libstdc++, the toolkit's NVRTC, OpenSSL) is the machine's.
CARRIED_LIBRARIES = re.compile(r"^lib(lazygraph|pcre2|utf8proc|sentencepiece|protobuf|cpp-httplib)")
# sentencepiece's programs, which a test names by their folder (lazygraph-run-gpu trains a tokenizer.model with them):
# a folder of the machine holding spm_train is carried as bin/spm with these (and their libraries).
SPM_PROGRAMS = ("spm_train", "spm_encode", "spm_decode", "spm_export_vocab")
DOCTEST_CASES = re.compile(r"\[doctest\] test cases:.*")


def suite_names(test):
    return {s.split(":")[-1] for s in test["suite"]}


def shared_libraries(program, env):
    """The libraries `program` loads that CARRIED_LIBRARIES names, as ldd resolves them in the test's environment."""
    out = subprocess.run(["ldd", program], env={**os.environ, **env}, capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (\S+)", line)
        if m and CARRIED_LIBRARIES.match(m.group(1)):
            if not os.path.isfile(m.group(2)):
                raise SystemExit(f"pack: {program} needs {m.group(1)}, which ldd does not find ({m.group(2)})")
            found.append(m.group(2))
    return found


def pack(build, dest):
    build = os.path.realpath(build)
    source = os.path.dirname(os.path.realpath(__file__))
    source = os.path.dirname(source)  # tests/ -> the tree's root
    tests = [t for t in json.load(open(os.path.join(build, "meson-info", "intro-tests.json"), encoding="utf-8"))
             if suite_names(t) & set(SUITES)]
    if not tests:
        raise SystemExit(f"pack: {build} has no tests in the suites {', '.join(SUITES)}")
    if os.path.isdir(dest) and os.listdir(dest):
        if not os.path.isfile(os.path.join(dest, "tests.json")):
            raise SystemExit(f"pack: {dest} holds files and no tests.json: give a new folder, or an earlier pack's")
        shutil.rmtree(dest)
    os.makedirs(os.path.join(dest, "bin"))
    os.makedirs(os.path.join(dest, "lib"))
    copied = {}

    def carry(path, env):
        """A path of a test's command or environment as `run` sees it: {bin}/NAME for a program of the build (copied,
        with its libraries), {cache} for a folder of the build, {src}/PATH for the tree's files, anything else as it
        is."""
        real = os.path.realpath(path)
        if real.startswith(build + os.sep) or real == build:
            if os.path.isfile(real):
                name = os.path.basename(real)
                if name in copied:
                    if copied[name] != real:
                        raise SystemExit(f"pack: two programs named {name}: {copied[name]} and {real}")
                    return "{bin}/" + name
                copied[name] = real
                shutil.copy2(real, os.path.join(dest, "bin", name))
                for lib in shared_libraries(real, env):
                    shutil.copy2(lib, os.path.join(dest, "lib", os.path.basename(lib)))
                return "{bin}/" + name
            return "{cache}"
        if real.startswith(source + os.sep):
            return "{src}/" + os.path.relpath(real, source)
        if os.path.isdir(real) and os.path.isfile(os.path.join(real, SPM_PROGRAMS[0])):
            os.makedirs(os.path.join(dest, "bin", "spm"), exist_ok=True)
            for name in SPM_PROGRAMS:
                program = os.path.join(real, name)
                if not os.path.isfile(program):
                    raise SystemExit(f"pack: {real} has spm_train but not {name}")
                shutil.copy2(program, os.path.join(dest, "bin", "spm", name))
                for lib in shared_libraries(program, env):
                    shutil.copy2(lib, os.path.join(dest, "lib", os.path.basename(lib)))
            return "{bin}/spm"
        return path

    def word(text, env):
        """A word of a command: paths, absolute or relative to BUILD (where `meson test` runs a test), carried."""
        if text.startswith("/") and os.path.exists(text):
            return carry(text, env)
        if "/" in text and not text.startswith("-") and os.path.exists(os.path.join(build, text)):
            return carry(os.path.join(build, text), env)
        return text

    listed = []
    for t in tests:
        env = dict(t["env"])
        paths = {k: v for k, v in env.items() if k != "LD_LIBRARY_PATH"}
        command = t["cmd"]
        # The interpreter of a script test is the GPU machine's own python3.
        first = "python3" if os.path.basename(command[0]).startswith("python") else word(command[0], env)
        listed.append({
            "name": t["name"],
            "suites": sorted(suite_names(t)),
            "cmd": [first] + [word(w, env) for w in command[1:]],
            "env": {k: (word(v, env) if k != "LAZYGRAPH_CACHE_DIR" else "{cache}") for k, v in paths.items()},
            "timeout": t["timeout"],
            "parallel": t["is_parallel"],
            "priority": t["priority"],
        })
    with open(os.path.join(dest, "tests.json"), "w", encoding="utf-8") as f:
        json.dump(listed, f, indent=1)
    size = sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(dest) for n in names)
    print(f"pack: {len(listed)} tests, {len(copied)} programs, {len(os.listdir(os.path.join(dest, 'lib')))} "
          f"libraries in {dest} ({size / 1e6:.1f} MB)")
    return 0


def run_one(test, dest, logs):
    root = os.getcwd()
    cache = os.path.join(logs, "kernel-cache")
    def fill(text):
        return (text.replace("{bin}", os.path.join(dest, "bin")).replace("{lib}", os.path.join(dest, "lib"))
                .replace("{cache}", cache).replace("{src}", root))

    env = dict(os.environ)
    env.update({k: fill(v) for k, v in test["env"].items()})
    env["LD_LIBRARY_PATH"] = os.path.join(dest, "lib") + (":" + os.environ["LD_LIBRARY_PATH"]
                                                         if os.environ.get("LD_LIBRARY_PATH") else "")
    log = os.path.join(logs, re.sub(r"[^A-Za-z0-9._-]", "_", test["name"]) + ".log")
    start = time.monotonic()
    with open(log, "w", encoding="utf-8") as out:
        try:
            process = subprocess.Popen([fill(w) for w in test["cmd"]], env=env, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as e:  # a program missing from DEST, or not executable here
            out.write(f"gpu_carried.py: cannot start {test['cmd'][0]}: {e}\n")
            return test["name"], "FAIL (not started)", time.monotonic() - start, [], log
        try:
            code = process.wait(timeout=test["timeout"])
            status = "OK" if code == 0 else "SKIP" if code == 77 else f"FAIL (exit {code})"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            status = f"TIMEOUT ({test['timeout']} s)"
    with open(log, encoding="utf-8", errors="replace") as f:
        cases = DOCTEST_CASES.findall(f.read())
    return test["name"], status, time.monotonic() - start, cases, log


def run(dest, jobs, only, suite):
    dest = os.path.realpath(dest)
    tests = json.load(open(os.path.join(dest, "tests.json"), encoding="utf-8"))
    if suite:
        tests = [t for t in tests if suite in t["suites"]]
    if only:
        unknown = sorted(set(only) - {t["name"] for t in tests})
        if unknown:
            raise SystemExit(f"run: no test named {', '.join(unknown)} in {dest}/tests.json")
        tests = [t for t in tests if t["name"] in only]
    logs = os.path.realpath(os.environ.get("OUT") or "gpu-logs")
    os.makedirs(logs, exist_ok=True)
    tests.sort(key=lambda t: -t["priority"])
    results = []

    def report(result):
        name, status, seconds, cases, _ = result
        print(f"{name:<36} {status:<18} {seconds:7.1f} s  {' '.join(cases)}", flush=True)
        results.append(result)

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for future in concurrent.futures.as_completed(
                [pool.submit(run_one, t, dest, logs) for t in tests if t["parallel"]]):
            report(future.result())
    for t in tests:
        if not t["parallel"]:
            report(run_one(t, dest, logs))
    failed = [r for r in results if r[1] not in ("OK", "SKIP")]
    for name, status, _, _, log in failed:
        print(f"--- {name}: {status}, the end of {log}:")
        with open(log, encoding="utf-8", errors="replace") as f:
            print("".join(f.readlines()[-30:]), end="")
    passed = sum(r[1] == "OK" for r in results)
    skipped = sum(r[1] == "SKIP" for r in results)
    print(f"{passed} passed, {len(failed)} failed, {skipped} skipped")
    return 1 if failed else 0


def check(build):
    """Test 'gpu-carried': packs BUILD into a temporary folder and runs each packed test that is a program of the build
    (not a script: those need torch or a server) with the CUDA driver pointed nowhere, so that each must start, find
    its libraries in DEST/lib alone and skip; fails naming a test that does not."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        dest = os.path.join(tmp, "carried")
        pack(build, dest)
        tests = json.load(open(os.path.join(dest, "tests.json"), encoding="utf-8"))
        programs = [t for t in tests if t["cmd"][0].startswith("{bin}/")]
        if not programs:
            print("gpu-carried: no packed test runs a program of the build")
            return 1
        os.environ["LAZYGRAPH_CUDA_DRIVER"] = "/nonexistent/libcuda.so.1"
        os.environ["LD_LIBRARY_PATH"] = ""  # the build's folders must not be needed
        os.environ["OUT"] = os.path.join(tmp, "logs")
        os.makedirs(os.environ["OUT"])
        bad = []
        for t in programs:
            name, status, _, _, log = run_one(t, os.path.realpath(dest), os.environ["OUT"])
            if status != "SKIP":
                with open(log, encoding="utf-8", errors="replace") as f:
                    bad.append(f"{name}: {status}: {f.read()[-400:]}")
        for line in bad:
            print(f"gpu-carried: {line}")
        print(f"gpu-carried: {len(programs) - len(bad)} of {len(programs)} packed programs started from the copy alone")
        return 1 if bad else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = parser.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("pack", help="copy the GPU suites' programs of BUILD into DEST")
    p.add_argument("build")
    p.add_argument("dest")
    r = sub.add_parser("run", help="run the tests packed in DEST, from the source tree's root")
    r.add_argument("dest")
    r.add_argument("--jobs", type=int, default=8, help="parallel tests at a time (default 8)")
    r.add_argument("--only", action="append", default=[], help="run only the test of this name (repeatable)")
    r.add_argument("--suite", choices=SUITES, help="run only this suite's tests (default: both)")
    c = sub.add_parser("check", help="the test 'gpu-carried': pack BUILD and start its programs from the copy")
    c.add_argument("build")
    args = parser.parse_args()
    if args.verb == "check":
        return check(args.build)
    if args.verb == "pack":
        return pack(args.build, args.dest)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    return run(args.dest, args.jobs, args.only, args.suite)


if __name__ == "__main__":
    sys.exit(main())
