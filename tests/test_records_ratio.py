#!/usr/bin/env python3
"""flashladder — tests/test_records_ratio.py: scripts/records_ratio.py on made-up records: a step B that
is 10% slower than A at one point and equal at another, A's own run-to-run ratios, a variant record and a
gemm record left out, the before/after mode, and a malformed file refused with its line number."""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from records_case import RecordsScriptCase  # noqa: E402

SCRIPT = os.path.join(HERE, "..", "scripts", "records_ratio.py")


def rec(impl, n, tf, **kw):
    r = {"impl": impl, "pass": "fwd", "dtype": "fp16", "B": 16384 // n, "H": 16, "H_kv": 16, "Nq": n, "Nk": n,
         "d": 128, "causal": False, "tflops": tf, "device": "GPU X", "commit": "abc"}
    r.update(kw)
    return r


class RecordsRatio(RecordsScriptCase):
    SCRIPT = SCRIPT

    def test_pair_ratios_and_noise(self):
        r1 = self.write("r1.jsonl", [rec("A", 1024, 100), rec("B", 1024, 90), rec("A", 2048, 200), rec("B", 2048, 200),
                                     rec("B", 1024, 10, window=[4, 0]), {"impl": "cublas_gemm", "pass": "gemm", "tflops": 700}])
        r2 = self.write("r2.jsonl", [rec("A", 1024, 105), rec("B", 1024, 95), rec("A", 2048, 190)])
        out = self.run_script("pair", "--a", "A", "--b", "B", r1, r2)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("| 0.900 |", out.stdout)           # B / A = 90 / 100, same run
        self.assertIn("| 1.000 |", out.stdout)           # 200 / 200
        self.assertNotIn("| 0.100 |", out.stdout)        # the windowed record is not a plain point
        self.assertIn("3 points: median 0.905", out.stdout)  # 0.9, 1.0, 95/105
        self.assertIn("2 points: median 1.000", out.stdout)  # A: 105/100 and 190/200
        self.assertIn("1 of 3 same-run ratios lie inside", out.stdout)

    def test_runs_before_after(self):
        b = self.write("b.jsonl", [rec("A", 1024, 100), rec("C", 1024, 50)])
        a = self.write("a.jsonl", [rec("A", 1024, 110), rec("D", 1024, 70)])
        out = self.run_script("runs", b, a)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("| A | fwd fp16 d 128 full B 16 H 16 N 1024 | 100.0 | 110.0 | 1.100 |", out.stdout)
        self.assertNotIn("| C |", out.stdout)
        self.assertIn("1 points: median 1.100", out.stdout)

    def test_malformed_record_is_refused_with_its_line(self):
        p = self.write("bad.jsonl", [rec("A", 1024, 100), "{not json"])
        out = self.run_script("pair", "--a", "A", "--b", "B", p)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("bad.jsonl:2", out.stderr)
        missing = self.run_script("runs", p, os.path.join(self.dir, "none.jsonl"))
        self.assertNotEqual(missing.returncode, 0)
        self.assertIn("no such file", missing.stderr)

    def test_nan_or_zero_tflops_is_refused_with_its_line(self):
        for bad in (float("nan"), 0.0, float("inf")):
            p = self.write("nan.jsonl", [rec("A", 1024, 100), rec("B", 1024, bad)])
            out = self.run_script("pair", "--a", "A", "--b", "B", p)
            self.assertNotEqual(out.returncode, 0, bad)
            self.assertIn("nan.jsonl:2", out.stderr)
            self.assertIn("not a finite positive number", out.stderr)

    def test_a_decode_file_with_its_copy_and_reads(self):
        # The copy's and the read kernel's records have no tflops by design: a decode file is read, and
        # only its forward records compared.
        copy = {"impl": "d2d_copy", "pass": "copy", "tflops": None, "bytes_per_s": 3e12, "device": "GPU X"}
        read = dict(rec("read_stream", 1024, None), **{"pass": "read"})
        b = self.write("b.jsonl", [copy, read, rec("A", 1024, 100)])
        a = self.write("a.jsonl", [copy, read, rec("A", 1024, 110)])
        out = self.run_script("runs", b, a)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("1 points: median 1.100", out.stdout)

    def test_a_field_of_the_wrong_type_or_an_empty_file_is_refused(self):
        for bad, says in ((rec("A", 1024, True), "bad.jsonl:1: tflops = True is not a finite positive number"),
                          (rec(["A"], 1024, 100), "bad.jsonl:1: impl = ['A'] is not a name"),
                          (rec("A", 1024, 100, causal="false"), "bad.jsonl:1: causal = 'false' is not true or false")):
            with self.subTest(says=says):
                p = self.write("bad.jsonl", [bad])
                out = self.run_script("runs", p, p)
                self.assertEqual(out.returncode, 2, out.stderr)
                self.assertNotIn("Traceback", out.stderr)
                self.assertIn(says, out.stderr)
        for text in ([], [""]):
            p = self.write("empty.jsonl", text)
            out = self.run_script("pair", "--a", "A", "--b", "B", p)
            self.assertEqual(out.returncode, 2, out.stderr)
            self.assertEqual(out.stderr.strip(), f"records_ratio.py: {p}: no records in it")

    def test_a_file_that_is_not_utf8_is_refused_with_its_line(self):
        p = os.path.join(self.dir, "latin1.jsonl")
        with open(p, "wb") as f:
            f.write(b'{"impl": "A", "tflops": 1.0, "device": "caf\xe9"}\n')
        out = self.run_script("runs", p, p)
        self.assertEqual(out.returncode, 2)
        self.assertNotIn("Traceback", out.stderr)
        self.assertIn("latin1.jsonl:1: not UTF-8 text", out.stderr)

    def test_unwritable_output_is_an_error(self):
        p = self.write("r.jsonl", [rec("A", 1024, 100), rec("B", 1024, 90)])
        out = self.run_script("pair", "--a", "A", "--b", "B", p, "--out", os.path.join(self.dir, "no", "dir", "x.md"))
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("cannot write", out.stderr)


if __name__ == "__main__":
    unittest.main()
