#!/usr/bin/env python3
"""flashladder — tests/test_bars.py: scripts/bars.py on made-up records: one run's table (a point under
0.9x cuDNN marked **no**, the lowest ratio named), and repetitions (--torch given three times): each
run's ratio, the median, "met in k of n" with a point that misses in one run only, and the spread line
naming whose time moved; the decode bars of issue 17 for one run, and over two (--decode given twice)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "scripts", "bars.py")


def decode_rec(impl, B, Nk, ms, tflops, pas="fwd"):
    """A decode record at H 32, H_kv 8, Nq 1, d 128, fp16."""
    return {"impl": impl, "pass": pas, "dtype": "fp16", "d": 128, "causal": False, "B": B, "H": 32,
            "H_kv": 8, "Nq": 1, "Nk": Nk, "median_ms": ms, "tflops": tflops,
            "device": "made-up GPU", "commit": "abc", "date": "2026-11-27"}


def two_decode_points():
    """A copy at 3e12 B/s and two points, step 10, FLASH and cuDNN each: B 1, Nk 8192 and B 16, Nk 32768."""
    dec = decode_rec
    return [{"impl": "d2d_copy", "pass": "copy", "bytes_per_s": 3e12, "device": "made-up GPU"},
            dec("10_split_kv", 1, 8192, 0.022, 6.1), dec("torch_flash", 1, 8192, 0.03, 4.6),
            dec("torch_cudnn", 1, 8192, 0.0225, 6.0),
            dec("10_split_kv", 16, 32768, 0.6927, 12.4), dec("torch_flash", 16, 32768, 0.7, 12.2),
            dec("torch_cudnn", 16, 32768, 0.6930, 12.3)]


def rec(impl, pas, n, tflops, d=128, causal=False):
    return {"impl": impl, "pass": pas, "dtype": "fp16", "d": d, "causal": causal, "B": 16384 // n,
            "H": 2048 // d, "H_kv": 2048 // d, "Nq": n, "Nk": n, "tflops": tflops, "median_ms": 1.0,
            "device": "made-up GPU", "commit": "abc", "date": "2026-11-26"}


def run_file(folder, name, ours_fwd, cudnn_fwd):
    """One run: two points (N 2048 and 4096) of ours, cuDNN and FLASH, forward and backward."""
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        for n, o, c in zip((2048, 4096), ours_fwd, cudnn_fwd):
            for r in (rec("08k_persistent", "fwd", n, o), rec("torch_cudnn", "fwd", n, c), rec("torch_flash", "fwd", n, 300.0),
                      rec("09f_dq_writer", "bwd", n, 400.0), rec("torch_cudnn", "bwd", n, 420.0),
                      rec("torch_flash", "bwd", n, 280.0)):
                f.write(json.dumps(r) + "\n")
    return path


def bars(*args):
    p = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError(p.stderr)
    return p.stdout


def decode_bars(recs):
    """bars.py --decode on these records, written to a temporary file."""
    with tempfile.TemporaryDirectory() as t:
        path = os.path.join(t, "decode.jsonl")
        with open(path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in recs)
        return bars("--decode", path)


class Bars(unittest.TestCase):
    def test_one_run_marks_a_miss(self):
        with tempfile.TemporaryDirectory() as t:
            out = bars("--torch", run_file(t, "a.jsonl", (500.0, 600.0), (600.0, 600.0)))
        self.assertIn("| fp16 | 128 | no | 2048 | 500.0 | 300.0 | 600.0 | 1.67 | 0.83 | **no** |", out)
        self.assertIn("| fp16 | 128 | no | 4096 | 600.0 | 300.0 | 600.0 | 2.00 | 1.00 | yes |", out)
        self.assertIn("Lowest / cuDNN at N ≥ 2048: 0.83 (fp16, d = 128, non-causal, N = 2048)", out)
        self.assertNotIn("Over the", out)

    def test_repetitions(self):
        with tempfile.TemporaryDirectory() as t:
            files = [run_file(t, "r1.jsonl", (560.0, 600.0), (600.0, 600.0)),   # 0.93: met
                     run_file(t, "r2.jsonl", (520.0, 600.0), (600.0, 600.0)),   # 0.87: missed
                     run_file(t, "r3.jsonl", (580.0, 600.0), (600.0, 660.0))]   # 0.97, and cuDNN moved at 4096
            out = bars(*sum((["--torch", f] for f in files), []))
        self.assertEqual(out.count("# The bars of issues 15 and 16"), 3)
        self.assertIn("# Over the 3 runs above", out)
        self.assertIn("| 128 | no | 2048 | 0.93 | 0.87 | 0.97 | 0.93 | 1.87 | 2 of 3 **(not every run)** |", out)
        self.assertIn("| 128 | no | 4096 | 1.00 | 1.00 | 0.91 | 1.00 | 2.00 | 3 of 3 |", out)
        self.assertIn("1 of 2 points met their bars in every run.", out)
        # cuDNN's 4096 point moved by 60/600 = 10%; ours by 60/560 at 2048 (10.7%) and 0 at 4096.
        self.assertIn("torch_cudnn median 5.0%, largest 10.0%", out)
        self.assertIn("08k_persistent median 5.4%, largest 10.7%", out)
        # The backward is steady: 400 / 420 in every run, met everywhere.
        self.assertIn("| 128 | no | 2048 | 0.95 | 0.95 | 0.95 | 0.95 | 1.43 | 3 of 3 |", out)
        self.assertIn("2 of 2 points met their bars in every run.", out)


    def test_decode_times_and_what_the_copy_bar_allows(self):
        # d2d copy at 3e12 B/s (read + write). B 1, H_kv 8, Nk 8192: K+V = 33554432 bytes, 11.2 µs at the
        # copy's speed; step 10 takes 22.0 µs (51%): 10.8 µs over, where 85% allows 0.176 × 11.2 = 2.0.
        # B 16, H_kv 8, Nk 32768: 2 GiB in 692.7 µs (103% of the copy), faster than both torch rows: met.
        dec = decode_rec
        recs = two_decode_points()
        out = decode_bars(recs)
        self.assertIn("| 1 | 32 | 8 | 1 | 8192 | 22.0 | 11.2 | 6.1 | 1.53 | 50.8% | 1.326 | 1.017 | **no** |", out)
        self.assertIn("| 16 | 32 | 8 | 1 | 32768 | 692.7 | 715.8 | 12.4 | 3.10 | 103.3% | 1.016 | 1.008 | yes |", out)
        self.assertIn("B 1, H_kv 8, Nq 1, Nk 8192: 10.8 µs over, 2.0 allowed.", out)
        self.assertNotIn("Nk 32768: ", out.split("Under 85%")[1])
        # The count: of the two points (both Nk >= 8192), the first misses the copy's bar, the second meets all.
        self.assertIn("Step 10: bars met at 1 of 2 points with Nk ≥ 8192 (≥ 1.0× FLASH at 2, ≥ 1.0× cuDNN at 2, "
                      "≥ 85% of the copy at 1).", out)
        # With 10b's records beside, 10b is the step judged, with its time against step 10's (6.1 / 5.5
        # TFLOP/s at the first point); a point step 10 has no record of gets "–".
        recs += [dec("10b_cluster_merge", 1, 8192, 0.020, 6.1 * 1.1), dec("10b_cluster_merge", 1, 32768, 0.05, 10.0)]
        out = decode_bars(recs)
        self.assertIn("| B | H | H_kv | Nq | Nk | 10b µs | copy's µs |", out)
        self.assertIn("| 1 | 32 | 8 | 1 | 8192 | 20.0 | 11.2 | 6.7 | 1.68 | 55.9% | 1.459 | 1.118 | 1.10 | **no** |", out)
        self.assertIn("| 1 | 32 | 8 | 1 | 32768 | 50.0 | 44.7 | 10.0 | 2.68 | 89.5% | nan | nan | – | **no** |", out)
        self.assertIn("step 10b's time over the copy's time", out)
        # Counted at 10b's points: its 32768 point has no FLASH or cuDNN record (bars missed), and step 10
        # has no record there at all; step 10's B 16 point is not one of 10b's.
        self.assertIn("Step 10b: bars met at 0 of 2 points with Nk ≥ 8192 (≥ 1.0× FLASH at 1, ≥ 1.0× cuDNN at 1, "
                      "≥ 85% of the copy at 1).", out)
        self.assertIn("Step 10: bars met at 0 of 2 points with Nk ≥ 8192 (≥ 1.0× FLASH at 1, ≥ 1.0× cuDNN at 1, "
                      "≥ 85% of the copy at 0).", out)
        # 10b at forced splits: its own table, cells named by the S asked, its heuristic's S unknown ("–").
        forced = dict(dec("10b_cluster_merge", 1, 8192, 0.025, 5.4), splits_forced=True, splits_asked=4)
        out = decode_bars(recs + [forced])
        self.assertIn("Step 10b's number of splits S", out)
        self.assertIn("| 1 | 8 | 1 | 8192 | – | 1.68 | 4: 1.34 | – | 1.00 |", out)
        self.assertNotIn("Step 10's number of splits S", out)

    def test_decode_read_only_kernel_beside_the_copy_bar(self):
        # compare_torch's read_stream records (a kernel that only reads the point's K and V): B 1, H_kv 8,
        # Nk 8192 in 14.8 µs is 33554432 / 14.8e-6 = 2.27e12 B/s, 76% of a 3e12 copy; B 16, H_kv 8,
        # Nk 32768 (2 GiB) in 690 µs is 104%. One record per size whatever Nq: the point's bytes.
        recs = two_decode_points()
        reads = [decode_rec("read_stream", 1, 8192, 0.0148, None, "read"),
                 decode_rec("read_stream", 16, 32768, 0.690, None, "read")]
        out = decode_bars(recs + reads)
        self.assertIn("B 1, H_kv 8, Nq 1, Nk 8192: 10.8 µs over, 2.0 allowed (a kernel that only reads the same "
                      "bytes: 14.8 µs, 76% of the copy).", out)
        self.assertIn("The read-only kernel reached 85% of the copy at 1 of the 2 sizes of K and V with Nk ≥ 8192; "
                      "not at B 1, H_kv 8, Nk 8192: 76%.", out)
        # The read-only records are not a step's: the table and the counts are those without them.
        table = lambda text: text.split("made-up GPU", 1)[1].split("\nUnder 85%")[0]  # past the file's name
        self.assertEqual(table(decode_bars(recs)), table(out))
        self.assertNotIn("read-only kernel", decode_bars(recs))

    def test_decode_empty_call_beside_the_copy_bar(self):
        # compare_torch's empty_call record: a call of one clock took 2.7 µs. At B 1, H_kv 8, Nk 8192 the
        # copy's time is 33554432 / 3e12 = 11.18 µs and the 85% line 13.16 µs: 10.46 µs are left for the
        # bytes, a rate 11.18 / 10.46 = 1.07× the copy's. An empty call longer than the line takes it all.
        recs = two_decode_points()
        empty = {"impl": "empty_call", "pass": "empty", "median_ms": 0.0027, "device": "made-up GPU"}
        out = decode_bars(recs + [empty])
        self.assertIn("B 1, H_kv 8, Nq 1, Nk 8192: 10.8 µs over, 2.0 allowed; after an empty call's 2.7 µs, the line "
                      "leaves the bytes 10.5 µs: 1.07× the copy's rate.", out)
        self.assertIn("An empty call (a kernel of one clock, timed as the calls are): 2.7 µs.", out)
        out = decode_bars(recs + [dict(empty, median_ms=0.014)])
        self.assertIn("; an empty call (14.0 µs) takes all of the line's 13.2 µs.", out)
        # Without the record nothing is said of it; the table is the same either way.
        self.assertNotIn("empty call", decode_bars(recs))
        table = lambda text: text.split("made-up GPU", 1)[1].split("\nUnder 85%")[0]
        self.assertEqual(table(decode_bars(recs)), table(out))


class DecodeRepetitions(unittest.TestCase):
    def test_met_in_k_of_n(self):
        # Two runs of one point (B 16, H_kv 8, Nk 32768: 2 GiB, 692.7 µs at 3e12 B/s is 103% of the copy):
        # 10b beats cuDNN in the first run (12.4 against 12.3 TFLOP/s) and not in the second (12.4 against
        # 12.5): met in 1 of 2, the ratio shown with three decimals and the miss marked.
        def dec(impl, tflops):
            return {"impl": impl, "pass": "fwd", "dtype": "fp16", "d": 128, "causal": False, "B": 16, "H": 32,
                    "H_kv": 8, "Nq": 1, "Nk": 32768, "median_ms": 0.6927, "tflops": tflops,
                    "device": "made-up GPU", "commit": "abc", "date": "2026-11-27"}
        copy = {"impl": "d2d_copy", "pass": "copy", "bytes_per_s": 3e12, "device": "made-up GPU"}
        with tempfile.TemporaryDirectory() as t:
            paths = []
            for i, cu in enumerate((12.3, 12.5)):
                path = os.path.join(t, f"r{i}.jsonl")
                with open(path, "w") as f:
                    for r in (copy, dec("10b_cluster_merge", 12.4), dec("torch_flash", 12.0), dec("torch_cudnn", cu)):
                        f.write(json.dumps(r) + "\n")
                paths.append(path)
            out = bars("--decode", paths[0], "--decode", paths[1])
        self.assertEqual(out.count("# The bars of issue 17"), 2)
        self.assertIn("# Issue 17's bars over the 2 runs above", out)
        self.assertIn("| 16 | 8 | 1 | 32768 | 1.008 / 103.3% | 0.992 / 103.3% ✗ | 1 of 2 |", out)
        # Each run's table shows the miss by 0.8% as one (three places), not as "0.99" beside **no**.
        self.assertRegex(out, r"\| 1\.0\d\d \| 0\.992 \| \*\*no\*\* \|")
        self.assertIn("0 of 1 points met their bars in every run, 1 in at least one", out)

    def test_nan_meets_no_bar(self):
        # A record whose time and rate are NaN (a broken run) meets none of the three bars, in the table,
        # in the count and over repetitions.
        nan = float("nan")
        recs = [{"impl": "d2d_copy", "pass": "copy", "bytes_per_s": 3e12, "device": "made-up GPU"}]
        for impl, tf, ms in (("10b_cluster_merge", nan, nan), ("torch_flash", 12.0, 0.7), ("torch_cudnn", 12.3, 0.7)):
            recs.append({"impl": impl, "pass": "fwd", "dtype": "fp16", "d": 128, "causal": False, "B": 16, "H": 32,
                         "H_kv": 8, "Nq": 1, "Nk": 32768, "median_ms": ms, "tflops": tf,
                         "device": "made-up GPU", "commit": "abc", "date": "2026-11-27"})
        with tempfile.TemporaryDirectory() as t:
            path = os.path.join(t, "nan.jsonl")
            with open(path, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in recs)
            out = bars("--decode", path, "--decode", path)
        self.assertIn("**no** |", out)
        self.assertIn("Step 10b: bars met at 0 of 1 points with Nk ≥ 8192 (≥ 1.0× FLASH at 0, ≥ 1.0× cuDNN at 0, "
                      "≥ 85% of the copy at 0).", out)
        self.assertIn("| 0 of 2 |", out)


class BadRecords(unittest.TestCase):
    """A record a table would skip ("bars met at 31 of 33" for a null tflops), read wrongly ("false" as
    true) or crash on, and a file with no record, are refused with the file and line (exit 2)."""

    def refused(self, option, recs, text=None):
        with tempfile.TemporaryDirectory() as t:
            path = os.path.join(t, "bad.jsonl")
            with open(path, "w") as f:
                f.write(text if text is not None else "".join(json.dumps(r) + "\n" for r in recs))
            p = subprocess.run([sys.executable, SCRIPT, option, path], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertNotIn("Traceback", p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        return p.stderr.strip().replace(path, "bad.jsonl")

    def test_a_wrong_decode_field_is_refused_with_its_line(self):
        for field, value, says in (("tflops", None, "tflops is null or missing"),
                                   ("tflops", "12.3", "tflops = '12.3' is not a positive number"),
                                   ("median_ms", None, "median_ms is null or missing"),
                                   ("H_kv", None, "H_kv is null or missing"),
                                   ("H_kv", -8, "H_kv = -8 is not a positive whole number"),
                                   ("H_kv", "8", "H_kv = '8' is not a positive whole number"),
                                   ("causal", "false", "causal = 'false' is not true or false"),
                                   ("splits_forced", "false", "splits_forced = 'false' is not true or false"),
                                   ("kv_bytes_per_s", -1e12, "kv_bytes_per_s = -1000000000000.0 is not a positive"),
                                   ("kv_bytes_per_s", "1e12", "kv_bytes_per_s = '1e12' is not a positive"),
                                   ("impl", 5, "impl = 5 is not a name"), ("impl", ["x"], "impl = ['x'] is not a name"),
                                   ("dtype", ["fp16"], "dtype = ['fp16'] is not a storage type's name")):
            with self.subTest(field=field, value=value):
                recs = two_decode_points()
                recs[4][field] = value  # line 5: 10_split_kv at B 16, Nk 32768
                self.assertIn(f"bars.py: bad.jsonl:5: {says}", self.refused("--decode", recs))
        recs = two_decode_points()
        del recs[2]["tflops"]
        self.assertIn("bad.jsonl:3: tflops is null or missing", self.refused("--decode", recs))

    def test_a_copy_without_its_bandwidth_is_refused(self):
        recs = two_decode_points()
        del recs[0]["bytes_per_s"]
        self.assertIn("bad.jsonl:1: bytes_per_s is null or missing", self.refused("--decode", recs))

    def test_an_empty_call_without_its_time_is_refused(self):
        recs = two_decode_points() + [{"impl": "empty_call", "pass": "empty", "device": "made-up GPU"}]
        self.assertIn("bad.jsonl:8: median_ms is null or missing", self.refused("--decode", recs))

    def test_a_wrong_torch_field_is_refused(self):
        good = rec("08k_persistent", "fwd", 2048, 500.0)
        self.assertIn("bad.jsonl:2: dtype = 16 is not", self.refused("--torch", [good, dict(good, dtype=16)]))
        self.assertIn("bad.jsonl:1: tflops = True is not", self.refused("--torch", [dict(good, tflops=True)]))

    def test_an_empty_file_is_refused(self):
        for option in ("--torch", "--decode"):
            for text in ("", "\n\n"):
                self.assertEqual(self.refused(option, [], text), "bars.py: bad.jsonl: no records in it")


if __name__ == "__main__":
    unittest.main()
