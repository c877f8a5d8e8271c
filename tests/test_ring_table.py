#!/usr/bin/env python3
"""flashladder — tests/test_ring_table.py: scripts/ring_table.py on made-up ring records: the ratio and
scaling efficiency, a missed time bar and a missed balance bar shown as **no**, the causal contiguous run
shown for contrast and not judged, a point without a 1-GPU record, the per-step table (records of runs
39–40, without row names: the backward's final hop as a transfer only; records with `step_labels` and
`step_moves`: the backward's own keys last, its rows by name, — where nothing moves, and the link's
rate W taken only where a pair computed beside the transfer), refusals of a malformed line, a record
lacking a field, malformed row names and a duplicate point (each naming its line), and the README
block: --readme fills it, --check compares, no markers is refused."""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from records_case import RecordsScriptCase  # noqa: E402

SCRIPT = os.path.join(HERE, "..", "scripts", "ring_table.py")


def rec(pas, n, causal, gpus, layout, ms, busy=None, **kw):
    steps = gpus + 1 if pas == "bwd" and gpus > 1 else gpus
    busy = busy or [ms] * gpus
    r = {"impl": "11_ring_attention", "pass": pas, "Nq": n, "Nk": n, "causal": causal, "gpus": gpus,
         "layout": layout, "dtype": "fp16", "B": 1, "H": 16, "H_kv": 16, "d": 128, "median_ms": ms,
         "rank_ms": [ms] * gpus, "rank_busy_ms": busy,
         "step_compute_ms": [[b / gpus] * gpus + [0.0] * (steps - gpus) for b in busy],
         "step_transfer_ms": [[0.25] * steps for _ in busy], "step_pairs": [[1] * gpus + [0] * (steps - gpus)] * gpus,
         "commit": "abc123", "device": "GPU X", "date": "2026-01-02T03:04:05Z", "pass_check": True}
    r.update(kw)
    return r


def named(r):
    """The record as `flashladder ring` writes it since the backward's order "own keys last": its rows
    named, with what moves beside each (G = 2: the backward's step 1 moves nothing)."""
    r = dict(r)
    g = r["gpus"]
    if r["pass"] == "fwd":
        r["step_labels"] = [str(s) for s in range(g)]
        r["step_moves"] = ["K|V"] * (g - 1) + [""]
    elif g == 1:
        r["step_labels"], r["step_moves"] = ["0"], [""]
    else:
        r["step_labels"] = ["own keys, part A"] + [str(s) for s in range(1, g)] + ["own keys, part B"]
        r["step_moves"] = ["K|V"] + ["K|V, dK|dV"] * (g - 2) + [""] + ["dK|dV to its owner"]
        if g >= 3:
            r["step_moves"][g - 1] = "dK|dV"
            r["step_moves"][1] = "K|V"
    return r


GOOD = [rec("fwd", 1024, False, 1, "contiguous", 10.0), rec("fwd", 1024, False, 2, "contiguous", 5.2),
        rec("fwd", 1024, True, 1, "contiguous", 6.0), rec("fwd", 1024, True, 2, "zigzag", 3.6, busy=[3.0, 3.36]),
        rec("fwd", 1024, True, 2, "contiguous", 4.5, busy=[1.0, 4.4]),
        rec("bwd", 1024, False, 1, "contiguous", 20.0), rec("bwd", 1024, False, 2, "contiguous", 10.8),
        {"impl": "08i_pingpong", "pass": "fwd", "tflops": 600}]


class RingTable(RecordsScriptCase):
    SCRIPT = SCRIPT

    def test_ratio_efficiency_and_bars(self):
        out = self.run_script(self.write("r.jsonl", GOOD))
        self.assertEqual(out.returncode, 0, out.stderr)
        t = out.stdout
        self.assertIn("`r.jsonl`; GPU X; commit abc123; 2026-01-02.", t)
        # 5.2 / 10 = 0.520, efficiency 10 / (2 · 5.2) = 96.2%: met.
        self.assertIn("| 1024 | no | contiguous | 10.000 | 5.200 | 0.520 | 96.2% | yes | 1.000 | – |", t)
        # 3.6 / 6 = 0.600: missed; ranks 3.36 / 3.0 = 1.120: missed too.
        self.assertIn("| 1024 | yes | zigzag | 6.000 | 3.600 | 0.600 | 83.3% | **no** | 1.120 | **no** |", t)
        # The causal contiguous run: shown, not judged.
        self.assertIn("| 1024 | yes | contiguous | 6.000 | 4.500 | 0.750 | 66.7% | contrast (not judged) | 4.400 |", t)
        # Backward 10.8 / 20 = 0.540 (met); its last step is the final hop.
        self.assertIn("| 1024 | no | contiguous | 20.000 | 10.800 | 0.540 | 92.6% | yes |", t)
        self.assertIn("| bwd | 1024 | no | contiguous | final dK, dV hop (transfer only) | – | — / 0.250 | — / 0.250 |", t)
        self.assertIn("| fwd | 1024 | no | contiguous | 1 | 1 / 1 | 2.600 / — | 2.600 / — |", t)
        self.assertIn("**Summary:** 2 of 3 points meet the time bar (2-GPU ≤ 0.55 × 1-GPU); not met: forward N 1024 "
                      "causal zigzag (0.600). Causal zigzag ranks within 10%: 0 of 1; not: forward N 1024 causal "
                      "zigzag (1.120).", t)
        self.assertNotIn("08i", t)

    def test_scaling_from_the_records(self):
        # W: 2^27 bytes in 0.5 ms = 268.4 GB/s (both ranks of both 2-GPU runs); F: 600 and 500 TFLOP/s on one
        # GPU. Positions: 600e12 / 268.4e9 = 2235 (forward), twice that causal; 1.2 · 500e12 / 268.4e9 = 2235
        # (backward), twice that causal; G at N = 4096: 4096 / 2235 = 2 and 4096 / 4470 = 1.
        x = {"kv_bytes_per_step": 2 ** 27, "step_transfer_ms": [[0.5, 0.0], [0.5, 0.0]]}
        xb = {"kv_bytes_per_step": 2 ** 27, "step_transfer_ms": [[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]}
        recs = [rec("fwd", 4096, False, 1, "contiguous", 10.0, tflops=600.0),
                rec("bwd", 4096, False, 1, "contiguous", 25.0, tflops=500.0),
                rec("fwd", 4096, False, 2, "contiguous", 5.0, **x), rec("bwd", 4096, False, 2, "contiguous", 13.0, **xb)]
        out = self.run_script(self.write("s.jsonl", recs))
        self.assertEqual(out.returncode, 0, out.stderr)
        t = out.stdout
        self.assertIn("W, the link while step 0 computes: 268 GB/s with 128 MiB steps (4 transfers)", t)
        self.assertIn("F, one GPU at N = 4096: 600 TFLOP/s forward, 500 backward", t)
        self.assertIn("| non-causal forward | 2235 | 2 |", t)
        self.assertIn("| causal forward (zigzag) | 4470 | 1 |", t)
        self.assertIn("| non-causal backward | 2235 | 2 |", t)
        # Without the bytes of a step there is no W, and no such table.
        out = self.run_script(self.write("g.jsonl", GOOD))
        self.assertNotIn("How far this link hides", out.stdout)
        # With W but no F (a 1-GPU record without its TFLOP/s, or none), the section says what is missing.
        no_rate = [{k: v for k, v in recs[0].items() if k != "tflops"}] + recs[1:]
        out = self.run_script(self.write("f.jsonl", no_rate))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("**How far this link hides the transfer**: not computed: no non-causal 1-GPU forward record "
                      "at N = 4096 with its TFLOP/s gives F.", out.stdout)
        out = self.run_script(self.write("o.jsonl", recs[2:]))
        self.assertIn("not computed: no non-causal 1-GPU record gives F, the local step's rate.", out.stdout)
        two = recs + [rec("fwd", 4096, False, 1, "contiguous", 10.0, tflops=600.0, H_kv=4)]
        out = self.run_script(self.write("h.jsonl", two))
        self.assertIn("not computed: the records hold H 16, H_kv 4, H 16, H_kv 16, and the sum needs one (H, H_kv).",
                      out.stdout)

    def test_named_rows_own_keys_last(self):
        # A causal zigzag backward on 2 GPUs in the order "own keys last": part A (two pairs) beside the
        # K|V, step 1 (two pairs) with nothing beside it, part B (one pair) beside the final hop.
        zz = named(rec("bwd", 1024, True, 2, "zigzag", 6.0, step_compute_ms=[[1.5, 3.0, 1.6], [1.4, 3.1, 1.7]],
                       step_transfer_ms=[[0.25, 0.0, 0.9], [0.26, 0.0, 1.0]], step_pairs=[[2, 2, 1], [2, 2, 1]]))
        recs = [named(r) for r in GOOD[:5]] + [zz]
        out = self.run_script(self.write("n.jsonl", recs))
        self.assertEqual(out.returncode, 0, out.stderr)
        t = out.stdout
        self.assertIn("| bwd | 1024 | yes | zigzag | own keys, part A | 2 / 2 | 1.500 / 0.250 | 1.400 / 0.260 |", t)
        self.assertIn("| bwd | 1024 | yes | zigzag | 1 | 2 / 2 | 3.000 / — | 3.100 / — |", t)
        self.assertIn("| bwd | 1024 | yes | zigzag | own keys, part B | 1 / 1 | 1.600 / 0.900 | 1.700 / 1.000 |", t)
        # The forward's rows are what they were without names.
        self.assertIn("| fwd | 1024 | no | contiguous | 0 | 1 / 1 | 2.600 / 0.250 | 2.600 / 0.250 |", t)
        self.assertIn("| fwd | 1024 | no | contiguous | 1 | 1 / 1 | 2.600 / — | 2.600 / — |", t)
        self.assertIn("The backward computes its own keys last", t)
        self.assertNotIn("final dK, dV hop (transfer only)", t)
        self.assertNotIn("without named rows", t)
        # Beside a record of runs 39–40 (no names), each is read its own way, and the caption says both.
        old = rec("bwd", 1024, False, 2, "contiguous", 10.8)
        out = self.run_script(self.write("m.jsonl", recs + [old]))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("| bwd | 1024 | no | contiguous | final dK, dV hop (transfer only) | – | — / 0.250 | — / 0.250 |",
                      out.stdout)
        self.assertIn("Backward records without named rows (the order before, own keys first)", out.stdout)
        self.assertIn("| bwd | 1024 | yes | zigzag | own keys, part B | 1 / 1 |", out.stdout)

    def test_link_rate_only_beside_a_pair(self):
        # W from step 0's transfer: 2^27 bytes in 0.5 ms = 268 GB/s. A named contiguous backward has no pair
        # in its part A (its K|V moves with nothing beside it, 2^27 bytes in 0.4 ms): left out of W.
        x = {"kv_bytes_per_step": 2 ** 27, "step_transfer_ms": [[0.5, 0.0], [0.5, 0.0]]}
        xb = {"kv_bytes_per_step": 2 ** 27, "step_transfer_ms": [[0.4, 0.0, 0.5], [0.4, 0.0, 0.5]],
              "step_pairs": [[0, 1, 1], [0, 1, 1]], "step_compute_ms": [[0.0, 6.5, 6.5], [0.0, 6.5, 6.5]]}
        recs = [named(rec("fwd", 4096, False, 1, "contiguous", 10.0, tflops=600.0)),
                named(rec("bwd", 4096, False, 1, "contiguous", 25.0, tflops=500.0)),
                named(rec("fwd", 4096, False, 2, "contiguous", 5.0, **x)),
                named(rec("bwd", 4096, False, 2, "contiguous", 13.0, **xb))]
        out = self.run_script(self.write("w.jsonl", recs))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("W, the link while the first row (forward step 0, backward own keys part A) computes: 268 GB/s "
                      "with 128 MiB steps (2 transfers)", out.stdout)
        self.assertIn("| bwd | 4096 | no | contiguous | own keys, part A | 0 / 0 | 0.000 / 0.400 | 0.000 / 0.400 |",
                      out.stdout)

    def test_missing_baseline(self):
        out = self.run_script(self.write("r.jsonl", [rec("bwd", 2048, True, 2, "zigzag", 4.0)]))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("| 2048 | yes | zigzag | no 1-GPU record | 4.000 | – | – | **no** (no 1-GPU record) |", out.stdout)
        self.assertIn("0 of 1 points meet the time bar", out.stdout)
        self.assertIn("not met: backward N 2048 causal zigzag (no 1-GPU record)", out.stdout)

    def test_duplicate_point_is_refused_naming_both_lines(self):
        a = self.write("a.jsonl", GOOD[:2])
        b = self.write("b.jsonl", [GOOD[2], rec("fwd", 1024, False, 2, "contiguous", 5.0)])
        out = self.run_script(a, b)
        self.assertEqual(out.returncode, 2)
        self.assertIn("b.jsonl:2: the same point as " + a + ":2", out.stderr)
        # Another layout, dtype or GPU count is another point.
        ok = self.run_script(self.write("c.jsonl", GOOD[:2] + [rec("fwd", 1024, False, 2, "contiguous", 5.0, dtype="bf16")]))
        self.assertEqual(ok.returncode, 0, ok.stderr)

    def test_malformed_line_and_missing_field_are_refused(self):
        out = self.run_script(self.write("bad.jsonl", [GOOD[0], "{not json"]))
        self.assertEqual(out.returncode, 2)
        self.assertIn("bad.jsonl:2: not a JSON record", out.stderr)
        lacking = dict(GOOD[1])
        del lacking["rank_busy_ms"]
        out = self.run_script(self.write("lack.jsonl", [GOOD[0], "", lacking]))
        self.assertEqual(out.returncode, 2)
        self.assertIn("lack.jsonl:3: a ring record needs rank_busy_ms", out.stderr)
        short = rec("bwd", 1024, False, 2, "contiguous", 9.0)
        short["step_transfer_ms"] = [[0.1, 0.1], [0.1, 0.1]]  # the backward's final hop missing
        out = self.run_script(self.write("short.jsonl", [short]))
        self.assertEqual(out.returncode, 2)
        self.assertIn("short.jsonl:1: step_transfer_ms must be 2 lists (one per rank) of 3 numbers", out.stderr)
        few = named(rec("bwd", 1024, False, 2, "contiguous", 9.0))
        few["step_labels"] = few["step_labels"][:2]
        out = self.run_script(self.write("few.jsonl", [few]))
        self.assertEqual(out.returncode, 2)
        self.assertIn("few.jsonl:1: step_labels must be 3 strings (one per ring step)", out.stderr)
        half = named(rec("bwd", 1024, False, 2, "contiguous", 9.0))
        del half["step_moves"]
        out = self.run_script(self.write("half.jsonl", [half]))
        self.assertEqual(out.returncode, 2)
        self.assertIn("half.jsonl:1: step_labels and step_moves go together", out.stderr)

    def test_a_wrong_optional_field_or_an_empty_file_is_refused(self):
        # A string or NaN tflops on a 1-GPU record, or a string kv_bytes_per_step, silently removed "How
        # far this link hides the transfer"; "pass_check": "false" counted as passed.
        for field, bad, says in (("tflops", "12.3", "tflops = '12.3' is not a positive number"),
                                 ("tflops", float("nan"), "tflops = nan is not a positive number"),
                                 ("kv_bytes_per_step", "1e6", "kv_bytes_per_step = '1e6' is not a whole number"),
                                 ("pass_check", "false", "pass_check = 'false' is not true, false or null")):
            with self.subTest(field=field, value=bad):
                out = self.run_script(self.write("bad.jsonl", [GOOD[0], dict(GOOD[1], **{field: bad})]))
                self.assertEqual(out.returncode, 2, out.stderr)
                self.assertIn("bad.jsonl:2: " + says, out.stderr)
        for lines in ([], [""]):
            p = self.write("empty.jsonl", lines)
            out = self.run_script(p)
            self.assertEqual(out.returncode, 2, out.stderr)
            self.assertEqual(out.stderr.strip(), f"ring_table.py: {p}: no records in it")
        out = self.run_script(self.write("other.jsonl", [GOOD[-1]]))  # records, none of step 11
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn("no 11_ring_attention record in", out.stderr)

    def test_readme_block_and_check(self):
        recs = self.write("r.jsonl", GOOD)
        readme = os.path.join(self.dir, "README.md")
        with open(readme, "w") as f:
            f.write("# Step\n\nbefore\n<!-- fl:ring -->\nold table\n<!-- /fl:ring -->\nafter\n")
        self.assertEqual(self.run_script("--check", "--readme", readme, recs).returncode, 1)
        out = self.run_script("--readme", readme, recs)
        self.assertEqual(out.returncode, 0, out.stderr)
        with open(readme) as f:
            text = f.read()
        self.assertTrue(text.startswith("# Step\n\nbefore\n<!-- fl:ring -->\n<!-- Written by scripts/ring_table.py "
                                        "from the records named below; run it, do not edit. -->\n"), text)
        self.assertTrue(text.endswith("\n<!-- /fl:ring -->\nafter\n"), text)
        self.assertNotIn("old table", text)
        self.assertIn("**Summary:** 2 of 3", text)
        self.assertEqual(self.run_script("--check", "--readme", readme, recs).returncode, 0)
        # The records change: the block is stale.
        other = self.write("r.jsonl", GOOD[:1] + [rec("fwd", 1024, False, 2, "contiguous", 5.0)])
        stale = self.run_script("--check", "--readme", readme, other)
        self.assertEqual(stale.returncode, 1)
        self.assertIn("is stale", stale.stdout)
        with open(readme) as f:
            self.assertEqual(f.read(), text)  # --check changes nothing
        bare = os.path.join(self.dir, "BARE.md")
        with open(bare, "w") as f:
            f.write("# no block\n")
        out = self.run_script("--readme", bare, recs)
        self.assertEqual(out.returncode, 2)
        self.assertIn("has no <!-- fl:ring -->", out.stderr)
        self.assertNotEqual(self.run_script("--check", recs).returncode, 0)  # --check needs --readme


if __name__ == "__main__":
    unittest.main()
