#!/usr/bin/env python3
"""flashladder — scripts/window_table.py: issue 21's sliding-window bar, from the records of a run.

    scripts/window_table.py A.jsonl B.jsonl …                print the Markdown page
    scripts/window_table.py A.jsonl … --out FILE.md          write it to a file
    scripts/window_table.py A.jsonl … --note TEXT …          add TEXT (Markdown) to the page's header

Issue 21's bar: a sliding window (w = 4096) at N = 16384 and 65536 runs at least 3× faster than the
full causal problem, and a window of w keys costs ∝ w, not ∝ Nk. Each file is one run and gets its own
table. Three modes of one point (impl, pass, problem): causal (causal true, no window), window (a
`window` [left, right]) and full (neither). A causal record with a window is the window (left, 0)
(docs/variants.md), the same point as a non-causal record of (left, 0). Kept: every windowed record,
and the causal and full records of a problem (dtype, B, H, H_kv, Nq, Nk, d) that has a windowed one;
records of other variants (softcap, ALiBi, packed sequences, seqused_k) are left out.

Per windowed record, one row (N, impl, pass): the causal, window and full times (`median_ms`, "–"
where the run has none), causal / window and full / window, and the arithmetic bound of each: the
(query, key) pairs each mode leaves visible, counted exactly as Problem::visible_pairs counts them
(common/problem.cpp; bottom-right convention: query i sees key j iff j ≤ i + Nk − Nq when causal, and
i + Nk − Nq − left ≤ j ≤ i + Nk − Nq + right with a window, −1 = that side unbounded, clipped to
[0, Nk)). A kernel that spends the same per visible pair in both modes gets exactly the pairs ratio;
the measured ratio as a fraction of it is the causal (or full) run's cost per pair over the windowed
run's. Then the bar (≥ 3×) against causal and against full, separately. Per (impl, pass, window)
with windowed records at two N or more, the "cost ∝ w" line: the windowed time's growth from the
smallest N to the largest beside the growth of its visible pairs (the full problem's pairs grow as N²).
The summary names the rows that meet the bar against each, and every N where the bar against causal
(or full) cannot be met by equal cost per pair: its pairs ratio is below 3.

Refused (exit 2, naming the file and line): a line that is not a JSON object, a record lacking a
field the table needs or holding a wrong one, and two records of one point in one file (impl, pass,
mode, dtype, B, H, H_kv, Nq, Nk, d), naming both lines: which one is meant is not for this script to
guess. Standard library only.
"""
from __future__ import annotations

import argparse
import functools
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fl_results as flr  # noqa: E402  (read_jsonl: the records, refused with their place)

BAR = 3.0
NOTE = "<!-- Written by scripts/window_table.py from the records named below; run it, do not edit. -->"
SHAPE = ("dtype", "B", "H", "H_kv", "Nq", "Nk", "d")
NEEDED = ("impl", "pass", "causal", "median_ms", "device", "commit", "date") + SHAPE
OTHER_VARIANTS = ("softcap", "alibi", "varlen", "seqused_k")
PASSES = ("fwd", "bwd")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FULL, CAUSAL = (-1, -1), (-1, 0)


def refuse(msg: str):
    print(f"window_table.py: {msg}", file=sys.stderr)
    sys.exit(2)


def shown(path: str) -> str:
    return flr.shown(path, ROOT)


@functools.lru_cache(maxsize=None)
def visible_pairs(nq: int, nk: int, causal: bool, left: int = -1, right: int = -1) -> int:
    """The visible (query, key) pairs of one head of one sequence, as Problem::visible_pairs counts
    them: query i sees key j in [0, Nk) iff j ≤ diag when causal, diag − left ≤ j (left ≥ 0) and
    j ≤ diag + right (right ≥ 0), where diag = i + Nk − Nq."""
    pairs = 0
    for i in range(nq):
        diag = i + nk - nq
        lo, hi = 0, nk - 1
        if causal:
            hi = min(hi, diag)
        if right >= 0:
            hi = min(hi, diag + right)
        if left >= 0:
            lo = max(lo, diag - left)
        if hi >= lo:
            pairs += hi - lo + 1
    return pairs


def mode_of(r: dict) -> tuple[int, int]:
    """The record's mask as (left, right): (-1, -1) full, (-1, 0) causal, anything else a window."""
    left, right = r.get("window") or FULL
    if r["causal"]:
        right = 0 if right < 0 else min(right, 0)
    return (left, right)


def mode_pairs(nq: int, nk: int, mode: tuple[int, int]) -> int:
    return visible_pairs(nq, nk, False, mode[0], mode[1])


def whole(x, least: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= least


def problem(r: dict) -> str | None:
    """What is wrong with a record (None: nothing)."""
    missing = [k for k in NEEDED if k not in r]
    if missing:
        return f"a record needs {', '.join(missing)}"
    if r["pass"] not in PASSES:
        return f"pass = {r['pass']!r} is not one of {', '.join(PASSES)}"
    if not isinstance(r["causal"], bool):
        return f"causal = {r['causal']!r} is not true or false"
    for f in SHAPE[1:]:
        if not whole(r[f], 1):
            return f"{f} = {r[f]!r} is not a positive whole number"
    if not isinstance(r["impl"], str) or not r["impl"] or not isinstance(r["dtype"], str):
        return "impl and dtype must be names"
    m = r["median_ms"]
    if not isinstance(m, (int, float)) or isinstance(m, bool) or not math.isfinite(m) or m <= 0:
        return f"median_ms = {m!r} is not a finite positive number"
    w = r.get("window")
    if w is not None and not (isinstance(w, list) and len(w) == 2 and all(whole(x, -1) for x in w)):
        return f"window = {w!r} is not [left, right] (whole numbers, -1 = unbounded)"
    return None


def describe(r: dict) -> str:
    return (f"{r['impl']} {r['pass']} {mode_name(mode_of(r))} {r['dtype']} B {r['B']} H {r['H']} H_kv {r['H_kv']} "
            f"Nq {r['Nq']} Nk {r['Nk']} d {r['d']}")


def mode_name(mode: tuple[int, int]) -> str:
    return "full" if mode == FULL else "causal" if mode == CAUSAL else f"window ({mode[0]}, {mode[1]})"


def load(path: str) -> tuple[list[dict], int]:
    """One file's records of the modes, each with its place ("_at"); and how many lines were left out."""
    recs, seen, other = [], {}, 0
    for where, r in flr.read_jsonl(path, refuse):
        if any(r.get(v) not in (None, False) for v in OTHER_VARIANTS):
            other += 1
            continue
        why = problem(r)
        if why:
            refuse(f"{where}: {why}")
        k = (r["impl"], r["pass"], mode_of(r)) + tuple(r[f] for f in SHAPE)
        if k in seen:
            refuse(f"{where}: the same point as {seen[k]} ({describe(r)}): keep one of the two records")
        seen[k] = where
        r["_at"] = where
        recs.append(r)
    windowed = {tuple(r[f] for f in SHAPE) for r in recs if mode_of(r) not in (FULL, CAUSAL)}
    kept = [r for r in recs if tuple(r[f] for f in SHAPE) in windowed]
    return kept, other + len(recs) - len(kept)


def ratio_text(x: float) -> str:
    """Two decimals, more where two would round across the bar."""
    s = f"{x:.2f}"
    return s if (float(s) >= BAR) == (x >= BAR) else f"{x:.4f}"


def ms(x: float) -> str:
    return f"{x:.3f}"


class Row:
    """One windowed record with the causal and full records of its impl, pass and problem."""

    def __init__(self, w: dict, causal: dict | None, full: dict | None):
        self.w, self.causal, self.full = w, causal, full
        self.mode = mode_of(w)
        nq, nk = w["Nq"], w["Nk"]
        self.pairs = {"window": mode_pairs(nq, nk, self.mode), "causal": mode_pairs(nq, nk, CAUSAL),
                      "full": mode_pairs(nq, nk, FULL)}
        self.shape, self.window = "", ""  # set by table(): only where the run holds more than one

    def bound(self, other: str) -> float:
        return self.pairs[other] / self.pairs["window"]

    def measured(self, other: str) -> float | None:
        r = getattr(self, other)
        return r["median_ms"] / self.w["median_ms"] if r else None

    def cell(self) -> str:
        """The N cell: N, then the problem and the window where the run holds more than one."""
        return n_text(self.w) + self.shape + self.window

    def name(self) -> str:
        return f"N {self.cell()} {self.w['impl']} {self.w['pass']}"


def n_text(r: dict) -> str:
    return str(r["Nq"]) if r["Nq"] == r["Nk"] else f"{r['Nq']}×{r['Nk']}"


def rows_of(recs: list[dict]) -> list[Row]:
    by = {(r["impl"], r["pass"], mode_of(r)) + tuple(r[f] for f in SHAPE): r for r in recs}
    rows = []
    for r in recs:
        m = mode_of(r)
        if m in (FULL, CAUSAL):
            continue
        base = (r["impl"], r["pass"])
        shape = tuple(r[f] for f in SHAPE)
        rows.append(Row(r, by.get(base + (CAUSAL,) + shape), by.get(base + (FULL,) + shape)))
    rows.sort(key=lambda x: (tuple(x.w[f] for f in SHAPE[:4] + ("d", "Nq", "Nk")), x.w["impl"],
                             PASSES.index(x.w["pass"]), x.mode))
    return rows


def verdict(row: Row, other: str) -> str:
    x = row.measured(other)
    if x is None:
        return f"– (no {other} record)"
    return "met" if x >= BAR else "**not met**"


def table(path: str, recs: list[dict], left_out: int) -> tuple[list[str], list[Row]]:
    rows = rows_of(recs)
    shapes = sorted({tuple(r[f] for f in SHAPE if f not in ("Nq", "Nk")) for r in recs})
    windows = sorted({r.mode for r in rows})

    def meta(f):
        return ", ".join(sorted({str(r[f])[:10] if f == "date" else str(r[f]) for r in recs})) or "–"

    for row in rows:
        w = row.w
        if len(shapes) > 1:
            row.shape = f" ({w['dtype']} B {w['B']} H {w['H']}/{w['H_kv']} d {w['d']})"
        if len(windows) > 1:
            row.window = f", window ({row.mode[0]}, {row.mode[1]})"

    out = [f"## `{shown(path)}`", ""]
    head = (f"{meta('device')}; commit {meta('commit')}; {meta('date')}. {len(recs)} records kept"
            + (f" ({left_out} left out: other problems or variants)" if left_out else "") + ".")
    if len(shapes) == 1:
        (dt, b, h, hkv, d), = shapes
        head += f" B = {b}, H = {h}, H_kv = {hkv}, d = {d}, {dt}."
    if len(windows) == 1:
        head += f" Window (left, right) = ({windows[0][0]}, {windows[0][1]})."
    checked = [r for r in recs if r.get("pass_check") is not None]
    failed = [r for r in checked if r["pass_check"] is not True]
    head += (f" Checked against the oracle: {len(checked)} of {len(recs)} records"
             + (f", {len(failed)} failed: {'; '.join(r['_at'] for r in failed)}" if failed else "")
             + ("; the others timed unchecked." if checked and len(checked) < len(recs) else
                " (timed unchecked)." if not checked else "."))
    out.append(head)
    if not rows:
        return out + ["", "No windowed record."], rows
    out += ["",
            "| N | impl | pass | causal ms | window ms | full ms | causal / window | full / window "
            "| causal / window pairs | full / window pairs | causal: of bound | full: of bound "
            f"| ≥ {BAR:g}× vs causal | ≥ {BAR:g}× vs full |",
            "|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|"]
    for row in rows:
        cells = [row.cell(), row.w["impl"], row.w["pass"],
                 ms(row.causal["median_ms"]) if row.causal else "–", ms(row.w["median_ms"]),
                 ms(row.full["median_ms"]) if row.full else "–"]
        for other in ("causal", "full"):
            x = row.measured(other)
            cells.append(ratio_text(x) if x is not None else "–")
        cells += [f"{row.bound('causal'):.2f}", f"{row.bound('full'):.2f}"]
        for other in ("causal", "full"):
            x = row.measured(other)
            cells.append(f"{x / row.bound(other):.0%}" if x is not None else "–")
        cells += [verdict(row, "causal"), verdict(row, "full")]
        out.append("| " + " | ".join(cells) + " |")
    out += scaling(rows, shapes)
    return out, rows


def scaling(rows: list[Row], shapes) -> list[str]:
    """Cost ∝ w: per (problem, impl, pass, window), the windowed time from the smallest N to the largest
    beside its visible pairs (and the full problem's)."""
    groups: dict = {}
    for row in rows:
        w = row.w
        k = (w["dtype"], w["B"], w["H"], w["H_kv"], w["d"], w["impl"], PASSES.index(w["pass"]), row.mode)
        groups.setdefault(k, []).append(row)
    out = []
    for k in sorted(groups):
        g = sorted(groups[k], key=lambda x: (x.w["Nq"], x.w["Nk"]))
        if len(g) < 2:
            continue
        a, b = g[0], g[-1]
        t = b.w["median_ms"] / a.w["median_ms"]
        p = b.pairs["window"] / a.pairs["window"]
        f = b.pairs["full"] / a.pairs["full"]
        where = f" ({a.w['dtype']} B {a.w['B']} H {a.w['H']}/{a.w['H_kv']} d {a.w['d']})" if len(shapes) > 1 else ""
        out.append(f"- {a.w['impl']} {a.w['pass']}{where}, window ({a.mode[0]}, {a.mode[1]}), N {n_text(a.w)} → "
                   f"{n_text(b.w)}: window time ×{t:.2f}, window pairs ×{p:.2f} (time / pairs {t / p:.2f}); "
                   f"the full problem's pairs ×{f:.2f}.")
    if out:
        out = ["", "**Cost ∝ w** (windowed time against windowed pairs, smallest N to largest):", ""] + out
    return out


def summary(path: str, rows: list[Row]) -> list[str]:
    out = [f"**Summary, `{shown(path)}`** (bar: window ≥ {BAR:g}× faster):", ""]
    for other in ("causal", "full"):
        met = [r for r in rows if r.measured(other) is not None and r.measured(other) >= BAR]
        missed = [r for r in rows if r.measured(other) is not None and r.measured(other) < BAR]
        absent = [r for r in rows if r.measured(other) is None]
        judged = len(met) + len(missed)
        line = f"- Against {other}: " + (f"met by {len(met)} of {judged}" if judged else "not judged")
        line += (f": {'; '.join(f'{r.name()} ({ratio_text(r.measured(other))}×)' for r in met)}" if met else "")
        line += (f". Not met: {'; '.join(f'{r.name()} ({ratio_text(r.measured(other))}×)' for r in missed)}"
                 if missed else "")
        line += (f"{'. N' if judged else ', n'}o {other} record: {'; '.join(r.name() for r in absent)}"
                 if absent else "") + "."
        out.append(line)
        # The bound is a property of (N, window), whichever kernel runs it.
        low: dict = {}
        for r in rows:
            if r.bound(other) < BAR:
                low.setdefault((r.w["Nq"], r.w["Nk"], r.mode, r.bound(other), r.pairs[other], r.pairs["window"]),
                               []).append(r)
        for (nq, nk, mode, bound, po, pw), rs in sorted(low.items()):
            n = str(nq) if nq == nk else f"{nq}×{nk}"
            names = ", ".join(f"{r.w['impl']} {r.w['pass']}{r.shape}" for r in rs)
            out.append(f"  - Cannot be met against {other} at N = {n}, window ({mode[0]}, {mode[1]}), by a kernel "
                       f"that spends the same per visible pair in both modes: {other} / window pairs = {po} / {pw} "
                       f"= {bound:.2f} < {BAR:g} ({names}); meeting it would take the {other} run costing "
                       f"{BAR / bound:.2f}× the windowed run's time per pair.")
    return out


def page(paths: list[str], runs: list[tuple[list[dict], int]], notes: list[str]) -> str:
    allr = [r for recs, _ in runs for r in recs]

    def meta(f):
        return ", ".join(sorted({str(r[f])[:10] if f == "date" else str(r[f]) for r in allr})) or "–"

    out = ["# Sliding window against causal and full attention (issue 21's bar)", "", NOTE, "",
           f"Records: {', '.join(f'`{shown(p)}`' for p in paths)}; {meta('device')}; commit {meta('commit')}; "
           f"{meta('date')}.", "",
           f"Issue 21's bar: a window of w = 4096 keys at least {BAR:g}× faster than the full causal problem "
           "at N = 16384 and 65536, and a window's cost ∝ w, not ∝ Nk. Modes of one step, pass and problem: "
           "causal (no window), window, full (non-causal, no window). Times are `median_ms`. The pairs "
           "columns are the arithmetic bound: the (query, key) pairs each mode leaves visible, counted "
           "exactly (Problem::visible_pairs' rule, bottom-right: query i sees key j ≤ i + Nk − Nq when "
           "causal, i + Nk − Nq − left ≤ j ≤ i + Nk − Nq + right with a window), so a kernel that spends the "
           "same per visible pair in both modes gets exactly that ratio. \"of bound\" is the measured ratio "
           "over it: the causal (or full) run's time per visible pair over the windowed run's (above 100%: "
           "the other mode spends more per pair, e.g. on its masked diagonal blocks)."]
    for n in notes:
        out += ["", n]
    summaries = []
    for path, (recs, left_out) in zip(paths, runs):
        lines, rows = table(path, recs, left_out)
        out += [""] + lines
        if rows:
            summaries += [""] + summary(path, rows)
    if summaries:
        out += ["", "## Summary"] + summaries
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="records (.jsonl) of flashladder bench / the variants stage, one run each")
    ap.add_argument("--out", default="", help="write the Markdown page here (default: print)")
    ap.add_argument("--note", action="append", default=[], help="a paragraph for the page's header (repeatable)")
    a = ap.parse_args()
    runs = [load(p) for p in a.files]
    text = page(a.files, runs, a.note)
    if a.out:
        try:
            with open(a.out, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            refuse(f"cannot write {a.out}: {e.strerror}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(flr.run_main("window_table.py", main))
