#!/usr/bin/env python3
"""flashladder — tests/test_sanitize_table.py: scripts/sanitize_table.py on a made-up sanitize log
(tests/data/sanitize_sample.log) holding each thing the table must get right: a shared run whose error is
found again when its steps run alone, errors beyond the printed ones (print limit), a racecheck error and
a racecheck warning, a run that timed out, a failed oracle check, a run left out for the time budget, a
host API error that names no step, and a log cut inside a run."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
import sanitize_table as st  # noqa: E402

SAMPLE = os.path.join(HERE, "data", "sanitize_sample.log")


class SanitizeTable(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(SAMPLE, encoding="utf-8") as f:
            cls.runs = st.parse(f.readlines())
        cls.cells = {(c.tool, c.step, c.d): c for c in st.cells(cls.runs)}

    def cell(self, tool, step, d):
        return self.cells[(tool, step, d)]

    def test_a_variant_run_is_its_own_row(self):
        # The plain run of 08j at d = 128 is clean; the --softcap run of the same step and d is not. The
        # table must show both: a variant's errors never hide behind (or hide) the plain run's row.
        log = [
            "### sanitize tool=memcheck d=128 steps=08j_variants shape=-B 1 --nq 200\n",
            "08j_variants: pass (forward)\n",
            "========= ERROR SUMMARY: 0 errors\n",
            "### end tool=memcheck d=128 rc=0 seconds=3\n",
            "### sanitize tool=memcheck d=128 steps=08j_variants shape=-B 1 --nq 200 --softcap 20\n",
            "========= Invalid __global__ read of size 4 bytes\n",
            "=========     at fl::s08j::attention_kernel+0x10\n",
            "=========\n",
            "08j_variants: pass (forward)\n",
            "========= ERROR SUMMARY: 1 error\n",
            "### end tool=memcheck d=128 rc=99 seconds=3\n",
        ]
        cs = {(c.tool, c.step, c.d): c for c in st.cells(st.parse(log))}
        self.assertEqual(cs[("memcheck", "08j_variants", 128)].status, "clean")
        v = cs[("memcheck", "08j_variants `--softcap 20`", 128)]
        self.assertEqual((v.status, v.errors), ("errors", 1))

    def test_every_shape_of_a_step_alone_counts(self):
        # tools/device-run runs 10 and 10b alone in several shapes at one d: an error in the 2nd of 3
        # must reach the table, not hide behind the last shape's clean run (run 197's log with one added).
        def run(shape, err, rc):
            return ([f"### sanitize tool=memcheck d=128 steps=10b_cluster_merge shape={shape}\n"] +
                    (["========= Invalid __global__ read of size 4 bytes\n",
                      "=========     at void fl::s10b::merge_kernel<int>(...)+0x100\n", "=========\n"] if err else []) +
                    ["10b_cluster_merge: pass (forward)\n", f"========= ERROR SUMMARY: {err} errors\n",
                     f"### end tool=memcheck d=128 rc={rc} seconds=1\n"])
        log = run("-B 1 --nk 65", 0, 0) + run("-B 2 --nk 1000", 1, 99) + run("-B 1 --nk 8192", 0, 0)
        c = {(c.tool, c.step, c.d): c for c in st.cells(st.parse(log))}[("memcheck", "10b_cluster_merge", 128)]
        self.assertEqual((c.status, c.errors, c.rc), ("errors", 1, 99))
        self.assertIn("**1 error** (d 128)", st.markdown(st.parse(log), [c], "t"))
        # A failed run (rc 99) of the step alone that shows no error is not clean either.
        log = run("-B 1 --nk 65", 0, 0) + run("-B 2 --nk 1000", 0, 99) + run("-B 1 --nk 8192", 0, 0)
        c = st.cells(st.parse(log))[0]
        self.assertEqual(c.status, "incomplete")
        self.assertIn("exit status 99 with no error counted", c.note)

    def test_every_run_is_read(self):
        self.assertEqual(len(self.runs), 11)
        self.assertEqual([r.tool for r in self.runs if r.skipped], ["synccheck"])
        self.assertIsNone(self.runs[-1].rc, "the last run has no end marker")

    def test_a_step_alone_is_preferred_to_the_shared_run(self):
        c = self.cell("memcheck", "06_seq_parallel", 64)
        self.assertTrue(c.alone)
        self.assertEqual(c.status, "errors")
        self.assertEqual(c.errors, 5, "2 printed + 3 more in ERROR SUMMARY")
        self.assertEqual(self.cell("memcheck", "05_fa2_lse", 64).status, "clean")
        self.assertEqual(self.cell("memcheck", "09_backward", 64).status, "clean")

    def test_errors_in_a_shared_run_go_to_the_kernel_they_name(self):
        shared = self.runs[0]
        errors, _ = shared.counts()
        self.assertEqual(errors, {"06_seq_parallel": 1})

    def test_racecheck_errors_and_warnings(self):
        shared = self.runs[4]
        errors, warnings = shared.counts()
        self.assertEqual(errors, {"09_backward": 1})
        self.assertEqual(warnings, {"05_fa2_lse": 1})
        c = self.cell("racecheck", "05_fa2_lse", 64)
        self.assertEqual((c.status, c.warnings), ("clean", 1))

    def test_a_timed_out_run_never_counts_as_clean(self):
        c = self.cell("racecheck", "09_backward", 64)
        self.assertEqual(c.rc, 124)
        self.assertEqual(c.status, "errors")  # it reported one before it was stopped
        shared_clean = self.cell("racecheck", "06_seq_parallel", 64)
        self.assertEqual(shared_clean.status, "clean")

    def test_a_failed_check_and_a_skipped_run(self):
        self.assertEqual(self.cell("initcheck", "09_backward", 64).status, "check-failed")
        self.assertEqual(self.cell("initcheck", "05_fa2_lse", 64).status, "clean")
        self.assertEqual(self.cell("synccheck", "05_fa2_lse", 64).status, "skipped")

    def test_unattributed_errors_and_a_cut_log_leave_steps_incomplete(self):
        cut = self.runs[-1]
        self.assertEqual(cut.counts()[0], {st.UNATTRIBUTED: 1})
        for s in ("05_fa2_lse", "06_seq_parallel"):
            self.assertEqual(self.cell("memcheck", s, 128).status, "incomplete")

    def test_an_error_or_a_refusal_keeps_its_reason(self):
        runs = st.parse([
            "### sanitize tool=memcheck d=64 steps=03_cuda_naive,04_fa1_tiling shape=-B 1",
            "03_cuda_naive: ERROR: step 03_cuda_naive (forward): CUDA error in cudaMemcpy(...): an illegal memory access",
            "04_fa1_tiling: not run: step 04_fa1_tiling needs a CUDA device: none here",
            "========= ERROR SUMMARY: 0 errors",
            "### end tool=memcheck d=64 rc=1 seconds=2",
        ])
        cs = {c.step: c for c in st.cells(runs)}
        self.assertEqual(cs["03_cuda_naive"].status, "check-failed")
        self.assertIn("an illegal memory access", cs["03_cuda_naive"].note)
        self.assertEqual(cs["04_fa1_tiling"].status, "no-run")
        self.assertIn("needs a CUDA device", cs["04_fa1_tiling"].note)
        self.assertIn("not run (d 64)", st.cell_text([cs["04_fa1_tiling"]]))

    def test_the_table_and_the_json(self):
        with tempfile.TemporaryDirectory() as tmp:
            md, js = os.path.join(tmp, "t.md"), os.path.join(tmp, "t.json")
            r = subprocess.run([sys.executable, os.path.join(HERE, "..", "scripts", "sanitize_table.py"), SAMPLE,
                                "--md", md, "--json", js], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(md, encoding="utf-8") as f:
                table = f.read()
            with open(js, encoding="utf-8") as f:
                doc = json.load(f)
        self.assertIn("| step | memcheck | racecheck | initcheck | synccheck |", table)
        self.assertIn("| 06_seq_parallel | **5 errors** (d 64); incomplete (d 128) |", table)
        self.assertIn("**check failed** (d 64)", table)
        self.assertIn("not run, time budget (d 64)", table)
        self.assertIn("timed out after 240 s", table)
        self.assertEqual(len(doc["runs"]), 11)
        self.assertEqual(sum(c["errors"] for c in doc["cells"]), 5 + 1)

    def test_an_empty_log_is_an_error(self):
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
            f.write("nothing here\n")
        try:
            r = subprocess.run([sys.executable, os.path.join(HERE, "..", "scripts", "sanitize_table.py"), f.name],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)
            self.assertIn("no '### sanitize' runs", r.stderr)
        finally:
            os.unlink(f.name)

    def test_a_missing_log_or_lost_table_is_one_line(self):
        # A missing log, a table on a full disk or under a file: exit 2 naming the path, no traceback.
        script = os.path.join(HERE, "..", "scripts", "sanitize_table.py")
        for args, want in ((["/nonexistent"], "cannot read /nonexistent: No such file or directory"),
                           ([SAMPLE, "--md", "/dev/full"], "cannot write /dev/full: No space left on device"),
                           ([SAMPLE, "--json", "/dev/full"], "cannot write /dev/full: No space left on device"),
                           ([SAMPLE, "--md", SAMPLE + "/x"], f"cannot write {SAMPLE}/x: Not a directory")):
            if "/dev/full" in args and not os.path.exists("/dev/full"):
                continue
            with self.subTest(args=args):
                r = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertEqual(r.stderr.strip(), f"sanitize_table.py: {want}")


if __name__ == "__main__":
    unittest.main()
