#!/usr/bin/env python3
"""flashladder — tests/test_script_errors.py: the docs and record scripts fail in one line, never a
traceback (scripts/fl_results.py run_main): output that never reached stdout (/dev/full) for every table
script, a --root that is not the repository, docs_pages' --out that is not a folder, a missing or
garbled notebook, diff_table's --check with --print; and readme_table's records (load_records): a
negative, zero, infinite, string or null time or rate, and a file that is not UTF-8, refused with the
file, line and field; NaN, a broken run's honest value (scripts/bars.py), shown as nan."""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
SCRIPTS = os.path.join(ROOT, "scripts")
RESULTS = os.path.join(ROOT, "docs", "results")


def script(name, *args, stdout=subprocess.PIPE):
    return subprocess.run([sys.executable, os.path.join(SCRIPTS, name), *args], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=300)


def first(pattern):
    paths = sorted(glob.glob(os.path.join(RESULTS, pattern)))
    if not paths:
        raise unittest.SkipTest(f"no docs/results/{pattern} to read")
    return paths[0]


class OneLine(unittest.TestCase):
    def assertOneLine(self, r, *parts):
        """Exit 2, and one line on stderr naming the script and each of parts."""
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        self.assertNotIn("Exception ignored", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        for p in parts:
            self.assertIn(p, r.stderr)

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name


@unittest.skipUnless(os.path.exists("/dev/full"), "needs /dev/full")
class LostOutput(OneLine):
    def test_stdout_on_a_full_disk(self):
        log = os.path.join(self.dir, "san.log")
        with open(log, "w") as f:
            f.write("### sanitize tool=memcheck d=64 steps=03_cuda_naive shape=-B 1\n03_cuda_naive: pass\n"
                    "### end tool=memcheck d=64 rc=0 seconds=1\n")
        junit = os.path.join(self.dir, "j.xml")
        with open(junit, "w") as f:
            f.write('<testsuite><testcase name="a" status="notrun"><system-out>skipped: no GPU</system-out>'
                    "</testcase></testsuite>")
        runs = {
            "bars.py": ["--torch", first("*-torch.jsonl")],
            "ring_table.py": [first("*-ring.jsonl")],
            "window_table.py": [first("*-variants.jsonl")],
            "records_ratio.py": ["runs", first("*-torch.jsonl"), first("*-torch.jsonl")],
            "readme_table.py": ["--print"],
            "diff_table.py": ["--print"],
            "sanitize_table.py": [log],
            "skip_summary.py": [junit],
            "check_links.py": [os.path.join(HERE, "data", "broken_site")],  # exit 1 is "broken links"
        }
        for name, args in runs.items():
            with self.subTest(script=name), open("/dev/full", "w") as full:
                self.assertOneLine(script(name, *args, stdout=full), name.replace(".py", ""),
                                   "cannot write stdout: No space left on device")

    def test_docs_pages_out_not_a_folder(self):
        self.assertOneLine(script("docs_pages.py", "--root", ROOT, "--out", "/dev/full"),
                           "docs_pages: --out /dev/full is not a folder")


class BadArguments(OneLine):
    def test_root_that_is_not_the_repository(self):
        missing = os.path.join(self.dir, "nonexistent")
        for name, args in (("readme_table.py", ["--print"]), ("diff_table.py", ["--print"]),
                           ("resources_table.py", ["--print"]), ("docs_pages.py", ["--out", self.dir])):
            with self.subTest(script=name):
                self.assertOneLine(script(name, "--root", missing, *args),
                                   f"cannot read {missing}/steps/ladder.cpp: No such file or directory")

    def test_a_ladder_list_it_cannot_read(self):
        # parse_ladder's refusal of a list whose format changed: one line, exit 2, in every script that
        # reads it (it was a RuntimeError traceback, exit 1, outside readme_table).
        os.makedirs(os.path.join(self.dir, "steps"))
        shutil.copy(os.path.join(ROOT, "steps", "ladder.hpp"), os.path.join(self.dir, "steps", "ladder.hpp"))
        with open(os.path.join(self.dir, "steps", "ladder.cpp"), "w") as f:
            f.write('const Step kSteps[] = {{"01", "01_cpu_standard", garbled}};\n')
        for name, args in (("readme_table.py", ["--print"]), ("diff_table.py", ["--check"]),
                           ("resources_table.py", ["--print"]), ("docs_pages.py", ["--out", os.path.join(self.dir, "o")])):
            with self.subTest(script=name):
                self.assertOneLine(script(name, "--root", self.dir, *args), "steps/ladder.cpp: read 0 of 1 step entries")

    def test_splits_table_lost_output_or_missing_readme(self):
        # A stand-in for the CUDA build's flashladder_launches: splits_table had no run_main, and these
        # were OSError and FileNotFoundError tracebacks.
        build = os.path.join(self.dir, "build")
        os.makedirs(build)
        probe = os.path.join(build, "flashladder_launches")
        with open(probe, "w") as f:
            f.write('#!/bin/sh\necho \'{"B": 1, "H_kv": 8, "Nq": 1, "Nk": 1024, "splits": 4, "sms": 132}\'\n')
        os.chmod(probe, 0o755)
        self.assertOneLine(script("splits_table.py", "--build", build, "--root", self.dir),
                           f"splits_table: cannot read {self.dir}/steps/10_split_kv/README.md")
        if os.path.exists("/dev/full"):
            with open("/dev/full", "w") as full:
                self.assertOneLine(script("splits_table.py", "--build", build, "--print", stdout=full),
                                   "splits_table: cannot write stdout: No space left on device")

    def test_check_links_with_no_page_to_check(self):
        # An empty folder said "0 pages, every local link resolves", exit 0.
        self.assertOneLine(script("check_links.py", self.dir), "check_links.py: no .html page under")

    def test_missing_or_garbled_notebook(self):
        bad = os.path.join(self.dir, "bad.ipynb")
        with open(bad, "w") as f:
            f.write("{garbled")
        self.assertOneLine(script("run_notebook.py", os.path.join(self.dir, "none.ipynb")),
                           "cannot read", "none.ipynb: No such file or directory")
        self.assertOneLine(script("run_notebook.py", bad), "bad.ipynb is not a notebook")

    def test_notebook_out_that_cannot_hold_the_copy(self):
        # --out the notebook's own folder would write the executed copy over the source; --out a file is
        # no folder. Both refused (exit 2) before anything runs, the source untouched.
        nb = os.path.join(self.dir, "t.ipynb")
        shutil.copy(os.path.join(ROOT, "notebooks", "online_softmax.ipynb"), nb)
        with open(nb, "rb") as f:
            before = f.read()
        r = subprocess.run([sys.executable, os.path.join(SCRIPTS, "run_notebook.py"), "t.ipynb", "--out", "."],
                           cwd=self.dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
        self.assertOneLine(r, "run_notebook.py: --out . is the notebook's own folder", "overwrite t.ipynb")
        with open(nb, "rb") as f:
            self.assertEqual(f.read(), before)
        self.assertOneLine(script("run_notebook.py", nb, "--out", nb), f"--out {nb} is not a folder")
        if os.path.exists("/dev/full"):
            self.assertOneLine(script("run_notebook.py", nb, "--out", "/dev/full"), "--out /dev/full is not a folder")

    def test_check_and_print_exclude_each_other(self):
        # With both, --print won and the check never ran: exit 0 on a stale file.
        for name in ("diff_table.py", "readme_table.py", "resources_table.py", "splits_table.py"):
            with self.subTest(script=name):
                r = script(name, "--check", "--print")
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("not allowed with argument --check", r.stderr)


class TorchScriptArguments(OneLine):
    """The GPU scripts refuse a bad option before PyTorch or a GPU is needed (argparse: exit 2, naming
    the option, the value and the limit); they were tracebacks past the GPU check (--ns 0 a
    ZeroDivisionError, --cases 99 an IndexError) or ran nothing and passed (--sweeps fa3)."""

    def refused(self, name, *args):
        lib = os.path.join(self.dir, "lib.so")  # a --lib that exists: the option under test is the one refused
        open(lib, "w").close()
        r = script(name, "--lib", lib, *args)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        return r.stderr.strip().splitlines()[-1]

    def test_bad_values_are_refused_by_name(self):
        for args, says in ((["--causal", "maybe"], "argument --causal: 'maybe': give one or more of no, yes"),
                           (["--ns", "0"], "argument --ns: 0 is not allowed: each must be from 1 to 16384"),
                           (["--ns", "512,x"], "argument --ns: 'x' is not a whole number"),
                           (["--sweeps", "fa3"], "argument --sweeps: 'fa3': give one or more of fa2, decode"),
                           (["--json", "/nonexistent/x"], "argument --json: /nonexistent/x: no folder /nonexistent"),
                           (["--reps", "0"], "argument --reps: 0 is not allowed: it must be at least 1")):
            with self.subTest(args=args):
                self.assertIn(says, self.refused("compare_torch.py", *args))
        self.assertIn("argument --cases: 99 is not allowed: each must be from 0 to 6",
                      self.refused("compare_variants.py", "--cases", "99"))
        self.assertIn("argument --cases: 'x' is not a whole number", self.refused("compare_variants.py", "--cases", "x"))

    def test_a_missing_or_unloadable_library(self):
        for name in ("compare_torch.py", "compare_variants.py", "kernel_times.py", "profile_pair.py"):
            with self.subTest(script=name):
                r = script(name, "--lib", "/nope.so")
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("argument --lib: /nope.so: no such file", r.stderr)
        # A file that is no library, past the GPU check: a stand-in torch module gets there without one
        # (ctypes.CDLL's OSError was a traceback).
        fake = os.path.join(self.dir, "fake")
        for path, text in (("torch/__init__.py", "float16, bfloat16, uint8, float32 = 'f16', 'bf16', 'u8', 'f32'\n"
                                                 "__version__ = 'stand-in'\n"
                                                 "class cuda:\n    is_available = staticmethod(lambda: True)\n"),
                           ("torch/nn/__init__.py", ""), ("torch/nn/functional.py", ""),
                           ("torch/nn/attention/__init__.py", "class SDPBackend:\n    FLASH_ATTENTION = CUDNN_ATTENTION = 0\n"
                                                               "def sdpa_kernel(b):\n    pass\n")):
            os.makedirs(os.path.dirname(os.path.join(fake, path)), exist_ok=True)
            with open(os.path.join(fake, path), "w") as f:
                f.write(text)
        lib = os.path.join(self.dir, "notalib.so")
        with open(lib, "w") as f:
            f.write("not a shared object\n")
        for name in ("compare_torch.py", "compare_variants.py", "kernel_times.py", "profile_pair.py"):
            with self.subTest(script=name, lib="not a library"):
                r = subprocess.run([sys.executable, os.path.join(SCRIPTS, name), "--lib", lib], capture_output=True,
                                   text=True, timeout=300, env=dict(os.environ, PYTHONPATH=fake))
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertNotIn("Traceback", r.stderr)
                self.assertIn(f"{name}: cannot load --lib {lib}", r.stderr)


class DocsPagesOut(OneLine):
    """docs_pages removes and overwrites only the pages it wrote: `--out .` once removed README.md."""

    def test_only_its_own_pages_are_removed(self):
        mine = os.path.join(self.dir, "README.md")
        with open(mine, "w") as f:
            f.write("# not a page of docs_pages\n")
        r = script("docs_pages.py", "--root", ROOT, "--out", self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.exists(mine), "docs_pages removed a file it did not write")
        # A page that went away (written here: it carries the mark) is removed; the README still stays.
        shutil.copy(os.path.join(self.dir, "ladder.md"), os.path.join(self.dir, "step_99.md"))
        r = script("docs_pages.py", "--root", ROOT, "--out", self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "step_99.md")))
        self.assertTrue(os.path.exists(mine))

    def test_a_file_it_did_not_write_is_not_overwritten(self):
        theirs = os.path.join(self.dir, "theory.md")
        with open(theirs, "w") as f:
            f.write("# someone's theory\n")
        self.assertOneLine(script("docs_pages.py", "--root", ROOT, "--out", self.dir), "docs_pages",
                           "theory.md is there and was not written by docs_pages.py")
        with open(theirs) as f:
            self.assertEqual(f.read(), "# someone's theory\n")
        self.assertEqual(os.listdir(self.dir), ["theory.md"])  # refused before writing anything


class ReadmeRecords(OneLine):
    """readme_table --print over a made-up root: the ladder's list and one headline record."""
    HEADLINE = {"impl": "08k_persistent", "pass": "fwd", "dtype": "fp16", "B": 4, "H": 16, "H_kv": 16, "Nq": 4096,
                "Nk": 4096, "d": 128, "causal": False, "device": "made-up GPU", "sm_count": 132, "tol_used": 0.1,
                "commit": "abc", "date": "2030-01-01", "median_ms": 1.5, "tflops": 90.0}

    def table(self, line: bytes):
        os.makedirs(os.path.join(self.dir, "steps"))
        for f in ("ladder.cpp", "ladder.hpp"):
            shutil.copy(os.path.join(ROOT, "steps", f), os.path.join(self.dir, "steps", f))
        os.makedirs(os.path.join(self.dir, "docs", "results"))
        with open(os.path.join(self.dir, "docs", "results", "run.jsonl"), "wb") as f:
            f.write(line + b"\n")
        return script("readme_table.py", "--root", self.dir, "--print")

    def test_a_good_record_is_shown(self):
        r = self.table(json.dumps(self.HEADLINE).encode())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| 1.500 | 90.0 |", r.stdout)

    def test_a_bad_time_or_rate_is_refused_with_its_place(self):
        for field in ("tflops", "median_ms"):
            for bad in (-3.0, 0, float("inf"), "fast", None):
                with self.subTest(field=field, value=bad):
                    shutil.rmtree(os.path.join(self.dir, "steps"), ignore_errors=True)
                    shutil.rmtree(os.path.join(self.dir, "docs"), ignore_errors=True)
                    r = self.table(json.dumps(dict(self.HEADLINE, **{field: bad})).encode())
                    self.assertOneLine(r, "readme_table", "run.jsonl:1", f"{field} = " if bad is not None
                                       else f"{field} is null or missing")

    def test_a_field_of_the_wrong_type_is_refused_with_its_place(self):
        # load_records: a list impl was a TypeError traceback (readme_table --check, docs_pages), a string
        # tol_used a ValueError (exit 1, which --check reads as "stale"), "false" read as true.
        for field, bad, says in (("impl", ["x"], "impl = ['x'] is not a name"),
                                 ("tol_used", "0.5", "tol_used = '0.5' is not a number >= 0"),
                                 ("pass_check", "false", "pass_check = 'false' is not true or false"),
                                 ("causal", "false", "causal = 'false' is not true or false"),
                                 ("H_kv", -16, "H_kv = -16 is not a positive whole number")):
            with self.subTest(field=field):
                shutil.rmtree(os.path.join(self.dir, "steps"), ignore_errors=True)
                shutil.rmtree(os.path.join(self.dir, "docs"), ignore_errors=True)
                self.assertOneLine(self.table(json.dumps(dict(self.HEADLINE, **{field: bad})).encode()),
                                   "readme_table", "run.jsonl:1: " + says)

    def test_nan_is_a_broken_run_shown_as_such(self):
        # NaN is a broken run's honest value in the records (scripts/bars.py: it meets no bar): kept.
        r = self.table(json.dumps(dict(self.HEADLINE, tflops=float("nan"))).encode())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| 1.500 | nan |", r.stdout)

    def test_a_file_that_is_not_utf8_is_refused(self):
        self.assertOneLine(self.table(b'{"impl": "x", "note": "\xff"}'), "run.jsonl:1: not UTF-8 text")


if __name__ == "__main__":
    unittest.main()
