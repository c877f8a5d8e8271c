#!/usr/bin/env python3
"""flashladder — tests/test_window_table.py: scripts/window_table.py on made-up records: the visible-pair
count against brute-force counting of the mask at small N (square and not, causal, windows with either
side unbounded), the ratios, their bounds and fractions, the bar met / **not met** against causal and
against full separately, a missing full record, the cost ∝ w line, the summary's "cannot be met" line
with the bound computed, the records kept (a problem without a window and another variant left out),
and refusals of a malformed line, a wrong field and a duplicate point (naming both lines)."""
import itertools
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from records_case import RecordsScriptCase  # noqa: E402

SCRIPT = os.path.join(HERE, "..", "scripts", "window_table.py")
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
import window_table as wt  # noqa: E402


def brute(nq, nk, causal, left, right):
    """The mask as docs/variants.md states it, one (i, j) at a time."""
    n = 0
    for i, j in itertools.product(range(nq), range(nk)):
        diag = i + nk - nq
        ok = (not causal or j <= diag) and (left < 0 or j >= diag - left) and (right < 0 or j <= diag + right)
        n += ok
    return n


def rec(impl, pas, n, ms, causal=False, window=None, **kw):
    r = {"impl": impl, "pass": pas, "dtype": "fp16", "B": 1, "H": 16, "H_kv": 16, "Nq": n, "Nk": n, "d": 128,
         "causal": causal, "median_ms": ms, "device": "GPU X", "commit": "abc123",
         "date": "2026-01-02T03:04:05Z"}
    if window is not None:
        r["window"] = window
    r.update(kw)
    return r


W = [4096, 0]
GOOD = [
    rec("08k", "fwd", 16384, 1.7, causal=True), rec("08k", "fwd", 16384, 0.9, window=W),
    rec("08k", "fwd", 16384, 3.2),
    rec("08k", "fwd", 65536, 29.0, causal=True), rec("08k", "fwd", 65536, 3.6, window=W),
    rec("08k", "fwd", 65536, 56.0),
    rec("09e", "bwd", 16384, 5.3, causal=True), rec("09e", "bwd", 16384, 2.5, window=W),  # no full record
    rec("09e", "fwd", 8192, 1.0, causal=True),  # a problem without a windowed record: left out
    rec("08k", "fwd", 16384, 2.0, causal=True, softcap=30.0),  # another variant: left out
]


class Pairs(unittest.TestCase):
    def test_pairs_match_brute_force(self):
        for nq, nk in [(1, 1), (5, 5), (7, 7), (4, 9), (9, 4), (16, 16)]:
            for causal in (False, True):
                for left, right in [(-1, -1), (-1, 0), (0, 0), (2, 0), (3, 1), (-1, 2), (2, -1), (0, -1), (20, 20)]:
                    with self.subTest(nq=nq, nk=nk, causal=causal, window=(left, right)):
                        self.assertEqual(wt.visible_pairs(nq, nk, causal, left, right),
                                         brute(nq, nk, causal, left, right))

    def test_modes(self):
        self.assertEqual(wt.mode_of(rec("a", "fwd", 8, 1.0)), (-1, -1))
        self.assertEqual(wt.mode_of(rec("a", "fwd", 8, 1.0, causal=True)), (-1, 0))
        self.assertEqual(wt.mode_of(rec("a", "fwd", 8, 1.0, window=[4, 0])), (4, 0))
        # Causal with a window is the window intersected with the causal mask (docs/variants.md).
        self.assertEqual(wt.mode_of(rec("a", "fwd", 8, 1.0, causal=True, window=[4, 3])), (4, 0))
        self.assertEqual(wt.mode_of(rec("a", "fwd", 8, 1.0, causal=True, window=[4, -1])), (4, 0))

    def test_closed_forms(self):
        # N = 16384, window (4096, 0): rows 0..4096 see i + 1 keys, the rest 4097 each.
        n, w = 16384, 4096
        self.assertEqual(wt.mode_pairs(n, n, (w, 0)), (w + 1) * (w + 2) // 2 + (n - w - 1) * (w + 1))
        self.assertEqual(wt.mode_pairs(n, n, wt.CAUSAL), n * (n + 1) // 2)
        self.assertEqual(wt.mode_pairs(n, n, wt.FULL), n * n)

    def test_ratio_text_never_rounds_across_the_bar(self):
        self.assertEqual(wt.ratio_text(2.2853), "2.29")
        self.assertEqual(wt.ratio_text(2.999), "2.9990")
        self.assertEqual(wt.ratio_text(3.0), "3.00")


class WindowTable(RecordsScriptCase):
    SCRIPT = SCRIPT

    def test_table_bars_and_summary(self):
        out = self.run_script(self.write("r.jsonl", GOOD), "--note", "A note for the header.")
        self.assertEqual(out.returncode, 0, out.stderr)
        t = out.stdout
        self.assertIn("Records: `r.jsonl`; GPU X; commit abc123; 2026-01-02.", t)
        self.assertIn("\nA note for the header.\n", t)
        self.assertIn("8 records kept (2 left out: other problems or variants). B = 1, H = 16, H_kv = 16, d = 128, "
                      "fp16. Window (left, right) = (4096, 0). Checked against the oracle: 0 of 8 records (timed unchecked).", t)
        p16 = wt.mode_pairs(16384, 16384, (4096, 0))
        c16, f16 = 16384 * 16385 / 2 / p16, 16384 ** 2 / p16
        c64 = 65536 * 65537 / 2 / wt.mode_pairs(65536, 65536, (4096, 0))
        self.assertEqual(f"{c16:.2f}", "2.29")
        # 1.7 / 0.9 = 1.89 (not met, 83% of 2.29); 3.2 / 0.9 = 3.56 (met).
        self.assertIn(f"| 16384 | 08k | fwd | 1.700 | 0.900 | 3.200 | 1.89 | 3.56 | 2.29 | {f16:.2f} | "
                      f"{1.7 / 0.9 / c16:.0%} | {3.2 / 0.9 / f16:.0%} | **not met** | met |", t)
        self.assertIn(f"| 65536 | 08k | fwd | 29.000 | 3.600 | 56.000 | 8.06 | 15.56 | {c64:.2f} |", t)
        self.assertIn("| 16384 | 09e | bwd | 5.300 | 2.500 | – | 2.12 | – | 2.29 |", t)
        self.assertIn("| **not met** | – (no full record) |", t)
        self.assertNotIn("8192", t.split("## Summary")[0].split("| N |")[1])
        p64 = wt.mode_pairs(65536, 65536, (4096, 0))
        self.assertIn(f"- 08k fwd, window (4096, 0), N 16384 → 65536: window time ×4.00, window pairs ×{p64 / p16:.2f} "
                      f"(time / pairs {4.0 / (p64 / p16):.2f}); the full problem's pairs ×16.00.", t)
        self.assertNotIn("- 09e bwd, window", t)  # one N only: no scaling line
        self.assertIn("- Against causal: met by 1 of 3: N 65536 08k fwd (8.06×). Not met: N 16384 08k fwd (1.89×); "
                      "N 16384 09e bwd (2.12×).", t)
        self.assertIn(f"  - Cannot be met against causal at N = 16384, window (4096, 0), by a kernel that spends the "
                      f"same per visible pair in both modes: causal / window pairs = {16384 * 16385 // 2} / {p16} = 2.29 "
                      f"< 3 (08k fwd, 09e bwd); meeting it would take the causal run costing {3 / c16:.2f}×", t)
        self.assertIn("- Against full: met by 2 of 2: N 16384 08k fwd (3.56×); N 65536 08k fwd (15.56×). "
                      "No full record: N 16384 09e bwd.", t)
        self.assertNotIn("Cannot be met against full", t)  # full / window pairs is 4.57 at N = 16384

    def test_one_table_per_file(self):
        a = self.write("a.jsonl", GOOD[:3])
        b = self.write("b.jsonl", GOOD[:3])  # the same points in another run: not duplicates
        out = self.run_script(a, b)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.count("| N | impl | pass |"), 2)
        self.assertIn("**Summary, `a.jsonl`**", out.stdout)
        self.assertIn("**Summary, `b.jsonl`**", out.stdout)

    def test_checked_records_are_counted(self):
        recs = [dict(GOOD[0], pass_check=True), dict(GOOD[1], pass_check=False), GOOD[2]]
        p = self.write("c.jsonl", recs)
        out = self.run_script(p)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn(f"Checked against the oracle: 2 of 3 records, 1 failed: {p}:2; the others timed unchecked.",
                      out.stdout)

    def test_bar_boundary(self):
        out = self.run_script(self.write("r.jsonl", [rec("x", "fwd", 64, 3.0, causal=True),
                                                     rec("x", "fwd", 64, 1.0, window=[1, 0]),
                                                     rec("x", "fwd", 64, 2.99)]))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("| 3.00 | 2.99 |", out.stdout)
        self.assertIn("| met | **not met** |", out.stdout)

    def test_duplicate_point_is_refused_naming_both_lines(self):
        p = self.write("d.jsonl", GOOD[:2] + [rec("08k", "fwd", 16384, 0.95, window=W)])
        out = self.run_script(p)
        self.assertEqual(out.returncode, 2)
        self.assertIn(f"{p}:3: the same point as {p}:2 (08k fwd window (4096, 0) fp16", out.stderr)
        # A causal record of window (4096, 0) is the same mask, so the same point.
        p = self.write("e.jsonl", GOOD[:2] + [rec("08k", "fwd", 16384, 0.95, causal=True, window=W)])
        out = self.run_script(p)
        self.assertEqual(out.returncode, 2)
        self.assertIn(f"{p}:3: the same point as {p}:2", out.stderr)
        # Another pass, impl, dtype or window is another point.
        ok = self.run_script(self.write("f.jsonl", GOOD[:2] + [rec("08k", "bwd", 16384, 0.95, window=W),
                                                               rec("08k", "fwd", 16384, 0.95, window=W, dtype="bf16"),
                                                               rec("08k", "fwd", 16384, 0.95, window=[2048, 0])]))
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertIn("| 16384 (fp16 B 1 H 16/16 d 128), window (2048, 0) | 08k | fwd | 1.700 | 0.950 |", ok.stdout)
        self.assertIn("Not met: N 16384 (fp16 B 1 H 16/16 d 128), window (2048, 0) 08k fwd (1.79×)", ok.stdout)

    def test_malformed_lines_are_refused(self):
        cases = [
            ("{not json", "not a JSON record"),
            ("[1, 2]", "not a JSON object"),
            ({k: v for k, v in GOOD[1].items() if k != "median_ms"}, "a record needs median_ms"),
            (dict(GOOD[1], median_ms=float("nan")), "median_ms = nan is not a finite positive number"),
            (dict(GOOD[1], median_ms=0), "median_ms = 0 is not a finite positive number"),
            (dict(GOOD[1], window=[4096]), "window = [4096] is not [left, right]"),
            (dict(GOOD[1], window=[-2, 0]), "window = [-2, 0] is not [left, right]"),
            (dict(GOOD[1], causal="yes"), "causal = 'yes' is not true or false"),
            (dict(GOOD[1], Nq=0), "Nq = 0 is not a positive whole number"),
            (dict(GOOD[1], **{"pass": "both"}), "pass = 'both' is not one of fwd, bwd"),
        ]
        for bad, why in cases:
            with self.subTest(why=why):
                p = self.write("bad.jsonl", [GOOD[0], "", bad])
                out = self.run_script(p)
                self.assertEqual(out.returncode, 2)
                self.assertIn(f"{p}:3: {why}", out.stderr)
        out = self.run_script(os.path.join(self.dir, "missing.jsonl"))
        self.assertEqual(out.returncode, 2)
        self.assertIn("cannot read", out.stderr)

    def test_out_file_and_help(self):
        target = os.path.join(self.dir, "page.md")
        out = self.run_script(self.write("r.jsonl", GOOD), "--out", target)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout, "")
        with open(target) as f:
            self.assertTrue(f.read().startswith("# Sliding window"))
        h = self.run_script("--help")
        self.assertEqual(h.returncode, 0)
        self.assertIn("issue 21", h.stdout)


if __name__ == "__main__":
    unittest.main()
