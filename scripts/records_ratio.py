#!/usr/bin/env python3
"""flashladder — scripts/records_ratio.py: is a difference between two timings more than the noise?

Two questions the issues ask of records, answered from the records alone (standard library only):

  pair   "does step B make the plain problem slower than step A?" (issue 21: a variant step against
         its base). Per point of each run (d, causal, N, dtype, pass): B / A measured in the same run.
         Beside it the noise: A against itself across the runs given (every pair of runs, same point).
             scripts/records_ratio.py pair --a 08i_pingpong --b 08j_variants R1.jsonl R2.jsonl ... [--out F.md]
  runs   "did a change (a refactor) change the speed?" (issue 14): the same step, the same problem, in
         a run before and a run after it: after / before, per record present in both.
             scripts/records_ratio.py runs BEFORE.jsonl AFTER.jsonl [--out F.md]

Records that name a variant (fl_results.VARIANT_FIELDS) are left out: these are questions about the
plain problem. The page says which files, devices and commits the figures come from.
"""
from __future__ import annotations

import argparse
import itertools
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fl_results as flr  # noqa: E402

KEY = ("pass", "dtype", "B", "H", "H_kv", "Nq", "Nk", "d", "causal")


def refuse(msg: str):
    print(f"records_ratio.py: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path: str) -> list[dict]:
    out, n = [], 0
    # read_jsonl: an unreadable file, a line that is not UTF-8 or not a JSON object is refused with its place.
    for where, rec in flr.read_jsonl(path, refuse):
        n += 1
        if "impl" not in rec:
            refuse(f"{where}: a record needs 'impl'")
        # A forward or backward needs its rate; a copy's or a read's record (in a decode file) has none.
        timed = rec.get("pass") in ("fwd", "bwd")
        tf = rec.get("tflops")
        # A NaN would pass through every ratio and min/max unnoticed: refused, with its line (so is true).
        if timed and (not isinstance(tf, (int, float)) or isinstance(tf, bool) or not math.isfinite(tf) or tf <= 0):
            refuse(f"{where}: tflops = {tf!r} is not a finite positive number")
        why = flr.field_problem(rec)  # a list impl, "causal": "false" ...
        if why:
            refuse(f"{where}: {why}")
        if timed and not flr.is_variant(rec):
            out.append(rec)
    if not n:
        refuse(f"{path}: no records in it")
    return out


def by_point(recs: list[dict], impl: str) -> dict:
    """(pass, dtype, B, …) -> TFLOP/s of impl; a point timed twice in one file keeps its first record."""
    out = {}
    for r in recs:
        if r["impl"] == impl:
            out.setdefault(tuple(r.get(k) for k in KEY), r["tflops"])
    return out


def point_text(k) -> str:
    p = dict(zip(KEY, k))
    return (f"{p['pass']} {p['dtype']} d {p['d']} {'causal' if p['causal'] else 'full'} "
            f"B {p['B']} H {p['H']} N {p['Nq']}" + (f"/{p['Nk']}" if p["Nk"] != p["Nq"] else ""))


def describe(paths: list[str], runs: list[list[dict]]) -> list[str]:
    lines = []
    for path, recs in zip(paths, runs):
        devs = sorted({r.get("device", "?") for r in recs})
        commits = sorted({str(r.get("commit", "?")) for r in recs})
        lines.append(f"- `{path}`: {', '.join(devs)}; commit {', '.join(commits)}")
    return lines


def summary(xs: list[float]) -> str:
    if not xs:
        return "no point"
    return (f"{len(xs)} points: median {statistics.median(xs):.3f}, geometric mean "
            f"{statistics.geometric_mean(xs):.3f}, min {min(xs):.3f}, max {max(xs):.3f}")


def pair(args) -> list[str]:
    runs = [load(p) for p in args.files]
    out = [f"# {args.b} against {args.a}, plain problems, same run", "",
           "<!-- Written by scripts/records_ratio.py from the records below; run it, do not edit. -->", ""]
    out += describe(args.files, runs) + [""]
    same = []
    out += ["| run | point | " + args.a + " TFLOP/s | " + args.b + " TFLOP/s | B / A |", "|---|---|--:|--:|--:|"]
    for path, recs in zip(args.files, runs):
        a, b = by_point(recs, args.a), by_point(recs, args.b)
        for k in sorted(set(a) & set(b), key=str):
            r = b[k] / a[k]
            same.append(r)
            out.append(f"| {os.path.basename(path)} | {point_text(k)} | {a[k]:.1f} | {b[k]:.1f} | {r:.3f} |")
    noise = []
    for (pa, ra), (pb, rb) in itertools.combinations(list(zip(args.files, runs)), 2):
        a1, a2 = by_point(ra, args.a), by_point(rb, args.a)
        noise += [a2[k] / a1[k] for k in set(a1) & set(a2)]
    out += ["", f"**{args.b} / {args.a} in the same run:** {summary(same)}.", "",
            f"**The noise, {args.a} / {args.a} across runs** (every pair of the runs above, the same point): "
            f"{summary(noise)}.", ""]
    if same and noise:
        inside = sum(min(noise) <= r <= max(noise) for r in same)
        out.append(f"{inside} of {len(same)} same-run ratios lie inside the range of {args.a}'s own run-to-run "
                   f"ratios [{min(noise):.3f}, {max(noise):.3f}].")
    return out


def runs_cmp(args) -> list[str]:
    before, after = load(args.before), load(args.after)
    out = ["# The same steps before and after", "",
           "<!-- Written by scripts/records_ratio.py from the records below; run it, do not edit. -->", ""]
    out += describe([args.before, args.after], [before, after]) + [""]
    out += ["| impl | point | before TFLOP/s | after TFLOP/s | after / before |", "|---|---|--:|--:|--:|"]
    ratios = []
    impls = sorted({r["impl"] for r in before} & {r["impl"] for r in after})
    for impl in impls:
        a, b = by_point(before, impl), by_point(after, impl)
        for k in sorted(set(a) & set(b), key=str):
            r = b[k] / a[k]
            ratios.append(r)
            out.append(f"| {impl} | {point_text(k)} | {a[k]:.1f} | {b[k]:.1f} | {r:.3f} |")
    out += ["", f"**after / before:** {summary(ratios)}."]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pair", help="step B against step A in the same runs, and A's run-to-run noise")
    p.add_argument("--a", required=True, help="the base step (impl of the records)")
    p.add_argument("--b", required=True, help="the step compared with it")
    p.add_argument("files", nargs="+", help="records (.jsonl), one run each")
    p.add_argument("--out", default="", help="write the Markdown here (default: print)")
    r = sub.add_parser("runs", help="every step in two runs: after / before")
    r.add_argument("before")
    r.add_argument("after")
    r.add_argument("--out", default="", help="write the Markdown here (default: print)")
    args = ap.parse_args()
    for f in getattr(args, "files", []) + [getattr(args, "before", None), getattr(args, "after", None)]:
        if f is not None and not os.path.isfile(f):
            refuse(f"no such file: {f}")
    lines = pair(args) if args.cmd == "pair" else runs_cmp(args)
    text = "\n".join(lines) + "\n"
    if args.out:
        try:
            with open(args.out, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            refuse(f"cannot write {args.out}: {e.strerror}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(flr.run_main("records_ratio.py", main))
