#!/usr/bin/env python3
"""Host tests of lazygraph-info: what it prints on a machine without a CUDA driver, and its options.

Usage: lazygraph_info.py TOOL VERSION [STUB_LIBCUDA]
Every run points LAZYGRAPH_CUDA_DRIVER at a missing file (or at the toolkit's stub), so these tests see the
no-driver path whatever machine they run on, and a scratch LAZYGRAPH_CACHE_DIR holding fake entries.
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

TOOL, VERSION = sys.argv[1], sys.argv[2]
STUB = sys.argv[3] if len(sys.argv) > 3 else ""
MISSING_DRIVER = "/nonexistent/libcuda.so.1"
KEY_A, KEY_B, KEY_C = "0123456789abcdef" * 2, "fedcba9876543210" * 2, "00112233445566778899aabbccddeeff"


def run(*args, cache_dir=None, driver=MISSING_DRIVER, env_changes=None):
    env = dict(os.environ, LAZYGRAPH_CUDA_DRIVER=driver)
    if cache_dir is not None:
        env["LAZYGRAPH_CACHE_DIR"] = cache_dir
    for name, value in (env_changes or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return subprocess.run([TOOL, *args], env=env, capture_output=True, text=True, timeout=60)


def field(output, label):
    """The value of a 'label: value' line of the report."""
    m = re.search(r"^\s*" + re.escape(label) + r":\s+(.*)$", output, re.MULTILINE)
    if m is None:
        raise AssertionError(f"no '{label}:' line in:\n{output}")
    return m.group(1)


class LazygraphInfo(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.TemporaryDirectory(prefix="lazygraph-info-test-")
        self.cache = os.path.join(self.scratch.name, "cache")
        os.makedirs(self.cache)
        for key, size in ((KEY_A, 100), (KEY_B, 250), (KEY_C, 4000)):
            self.write(key + ".bin", size)
        self.write(KEY_A + ".tmp.4242.17.0", 30)  # a writer killed mid-store
        self.write("notes.txt", 5)  # not the cache's: never counted or removed

    def tearDown(self):
        self.scratch.cleanup()

    def write(self, name, size):
        with open(os.path.join(self.cache, name), "wb") as f:
            f.write(b"x" * size)

    def report(self, **kwargs):
        r = run(cache_dir=self.cache, **kwargs)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout

    def test_without_a_driver_the_report_names_the_missing_driver_and_why_and_exits_0(self):
        out = self.report()
        self.assertEqual(field(out, "status"), "not loaded")
        reason = field(out, "reason")
        self.assertIn("cannot load CUDA driver", reason)
        self.assertIn(MISSING_DRIVER, reason)
        self.assertIn("cannot open shared object file", reason)  # the loader's own words
        self.assertIn(MISSING_DRIVER + " (from LAZYGRAPH_CUDA_DRIVER)", field(out, "library"))
        self.assertIn("GPUs: none listed: the CUDA driver is not loaded", out)
        self.assertIn("Summary: no GPU work is possible here: the CUDA driver is not loaded", out)

    def test_without_a_driver_the_report_still_shows_version_nvrtc_and_features(self):
        out = self.report()
        self.assertTrue(out.startswith(f"lazygraph {VERSION} (built against CUDA "), out)
        self.assertRegex(field(out, "version"), r"^\d+\.\d+$")  # NVRTC's; the driver has none here
        self.assertRegex(field(out, "architectures"), r"^sm_\d+( sm_\d+)*$")
        self.assertIn("unknown without a driver", field(out, "conditional nodes"))
        self.assertIn("12.4", field(out, "conditional nodes"))
        self.assertIn("12.8", field(out, "conditional nodes"))
        self.assertIn("unknown without a GPU", field(out, "early launch"))

    def test_the_report_shows_the_cache_directory_its_entries_and_bytes(self):
        out = self.report()
        self.assertEqual(field(out, "directory"), f"{self.cache} (from LAZYGRAPH_CACHE_DIR)")
        self.assertEqual(field(out, "exists"), "yes")
        self.assertEqual(field(out, "entries"), "3")
        self.assertEqual(field(out, "size"), "4350 bytes (4.2 KiB)")
        self.assertTrue(field(out, "temporary files").startswith("1 (30 bytes)"))

    def test_clear_cache_removes_entries_and_temporaries_and_says_how_many_and_how_many_bytes(self):
        r = run("--clear-cache", cache_dir=self.cache)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(f"removed 3 entries, 4350 bytes (4.2 KiB), and 1 temporary file, 30 bytes, from {self.cache}\n",
                      r.stdout)
        self.assertEqual(sorted(os.listdir(self.cache)), ["notes.txt"])
        out = self.report()
        self.assertEqual(field(out, "entries"), "0")
        self.assertEqual(field(out, "size"), "0 bytes")
        self.assertNotIn("temporary files:", out)

    def test_clear_cache_of_a_missing_or_disabled_cache_removes_nothing_and_succeeds(self):
        missing = os.path.join(self.scratch.name, "never-made")
        r = run("--clear-cache", cache_dir=missing)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("removed 0 entries, 0 bytes, and 0 temporary files, 0 bytes", r.stdout)
        self.assertFalse(os.path.exists(missing))
        r = run("--clear-cache", cache_dir="")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("nothing to clear: caching is disabled", r.stdout)

    def test_the_report_names_the_variable_that_chose_the_cache_directory(self):
        out = self.report(env_changes={"LAZYGRAPH_CACHE_DIR": None, "XDG_CACHE_HOME": self.scratch.name})
        self.assertEqual(field(out, "directory"),
                         os.path.join(self.scratch.name, "lazygraph") + " (from XDG_CACHE_HOME)")
        self.assertTrue(field(out, "exists").startswith("no"))
        out = self.report(env_changes={"LAZYGRAPH_CACHE_DIR": None, "XDG_CACHE_HOME": None,
                                       "HOME": self.scratch.name})
        self.assertEqual(field(out, "directory"),
                         os.path.join(self.scratch.name, ".cache", "lazygraph") + " (from HOME)")
        out = run(cache_dir="").stdout
        self.assertIn("none: caching is disabled (LAZYGRAPH_CACHE_DIR is set and empty)", field(out, "directory"))

    def test_help_describes_the_options_and_exits_0(self):
        r = run("--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("Usage: lazygraph-info"), r.stdout)
        for word in ("--clear-cache", "--help", "--version", "LAZYGRAPH_CUDA_DRIVER", "LAZYGRAPH_CACHE_DIR"):
            self.assertIn(word, r.stdout)
        self.assertEqual(run("-h").stdout, r.stdout)

    def test_version_prints_the_project_version(self):
        r = run("--version")
        self.assertEqual((r.returncode, r.stdout), (0, f"lazygraph {VERSION}\n"))

    def test_an_unknown_option_exits_non_zero_naming_it(self):
        r = run("--bogus", cache_dir=self.cache)
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(r.stdout, "")
        self.assertIn("unknown option '--bogus'", r.stderr)
        self.assertIn("--help", r.stderr)
        r = run("--clear-cache", "extra", cache_dir=self.cache)
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(len(os.listdir(self.cache)), 5)  # nothing cleared on a bad command line

    @unittest.skipUnless(STUB and os.path.isfile(STUB), "no CUDA toolkit stub libcuda to test with")
    def test_the_toolkits_stub_libcuda_is_reported_as_not_a_driver(self):
        out = self.report(driver=STUB)
        self.assertEqual(field(out, "status"), "not loaded")
        self.assertIn("stub library, not a driver", field(out, "reason"))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
