#!/usr/bin/env python3
"""flashladder — scripts/ring_table.py: issue 18's bars for step 11 (ring attention), from its records.

    scripts/ring_table.py A.jsonl B.jsonl …                  print the Markdown block
    scripts/ring_table.py A.jsonl … --out FILE.md            write it to a file
    scripts/ring_table.py A.jsonl … --readme PATH            put it between <!-- fl:ring --> and
                                                             <!-- /fl:ring --> in PATH
    scripts/ring_table.py A.jsonl … --readme PATH --check    exit 1 when PATH's block differs from
                                                             what the records give (0 when equal)

The records are `flashladder ring --json` lines ("impl": "11_ring_attention"; other impls are left
out). Issue 18's bars, per pass (forward, backward), N and causal: the 2-GPU time (`median_ms`, the
slowest rank) is at most 0.55 × the 1-GPU time of the same step at the same point (≥ 90% scaling
efficiency, efficiency = 1-GPU / (2 × 2-GPU)), and the causal zigzag's two ranks compute within 10% of
each other (busiest / idlest `rank_busy_ms` ≤ 1.10). The 2-GPU run judged is the contiguous layout
without causal and the zigzag layout with it; a causal contiguous run is shown for contrast, not
judged. The 1-GPU baseline is the gpus 1 contiguous record of the same point; without one the row says
"no 1-GPU record" and counts as not met. Below the bars, per ring step of every 2-GPU run, each rank's
compute and transfer (`step_compute_ms`, `step_transfer_ms`: the transfer runs on its own stream beside
the compute, and is hidden while shorter). Records that name their rows (`step_labels`, and
`step_moves`: what the transfer beside each row moves, "" for nothing) are shown by those names: the
backward's order "own keys last" (own keys part A, steps 1 … G − 1, own keys part B beside the final
hop of dK, dV to their owner). Records without them (runs 39–40) are read as the order before it: ring
steps 0 … G − 1, and the backward's last row the final hop, a transfer with no compute beside it.

Refused (exit 2, naming the file and line): a line that is not a JSON object, a ring record lacking a
field the tables need or holding a wrong one, a file with no record (or files with no ring record), and
two records of the same point (pass, N, causal, gpus, layout, dtype, B, H, H_kv, d): which one is meant
is not for this script to guess. Standard library only.
"""
from __future__ import annotations

import argparse
import difflib
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fl_results as flr  # noqa: E402  (read_jsonl: the records, refused with their place)

IMPL = "11_ring_attention"
BEGIN, END = "<!-- fl:ring -->", "<!-- /fl:ring -->"
NOTE = "<!-- Written by scripts/ring_table.py from the records named below; run it, do not edit. -->"
TIME_BAR, BALANCE_BAR = 0.55, 1.10
KEY = ("pass", "Nq", "causal", "gpus", "layout", "dtype", "B", "H", "H_kv", "d")
NEEDED = KEY + ("median_ms", "rank_busy_ms", "step_compute_ms", "step_transfer_ms", "step_pairs",
                "commit", "device", "date")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PASSES = {"fwd": "Forward", "bwd": "Backward"}


def refuse(msg: str):
    print(f"ring_table.py: {msg}", file=sys.stderr)
    sys.exit(2)


def shown(path: str) -> str:
    return flr.shown(path, ROOT)


def number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


def problem(r: dict) -> str | None:
    """What is wrong with a ring record (None: nothing)."""
    missing = [k for k in NEEDED if k not in r]
    if missing:
        return f"a ring record needs {', '.join(missing)}"
    if r["pass"] not in PASSES or r["layout"] not in ("contiguous", "zigzag") or not isinstance(r["causal"], bool):
        return f"pass {r['pass']!r}, layout {r['layout']!r}, causal {r['causal']!r}: not a ring point"
    for f in ("Nq", "B", "H", "H_kv", "d"):
        if not isinstance(r[f], int) or isinstance(r[f], bool) or r[f] < 1:
            return f"{f} = {r[f]!r} is not a positive whole number"
    if not isinstance(r["dtype"], str):
        return f"dtype = {r['dtype']!r} is not a storage type's name"
    g = r["gpus"]
    if not isinstance(g, int) or isinstance(g, bool) or g < 1:
        return f"gpus = {g!r} is not a positive whole number"
    if not number(r["median_ms"]) or r["median_ms"] == 0:
        return f"median_ms = {r['median_ms']!r} is not a positive number"
    busy = r["rank_busy_ms"]
    if not isinstance(busy, list) or len(busy) != g or not all(number(x) for x in busy) or min(busy) == 0:
        return f"rank_busy_ms must hold {g} positive numbers (one per rank)"
    steps = g + 1 if r["pass"] == "bwd" and g > 1 else g  # the backward's final hop (or part B) of dK, dV
    for f in ("step_compute_ms", "step_transfer_ms", "step_pairs"):
        v = r[f]
        if not (isinstance(v, list) and len(v) == g and all(isinstance(s, list) and len(s) == steps and
                                                            all(number(x) for x in s) for s in v)):
            return f"{f} must be {g} lists (one per rank) of {steps} numbers (one per ring step)"
    # Optional, but never wrong: a string or NaN tflops on a 1-GPU record, or a string kv_bytes_per_step,
    # silently removed "How far this link hides the transfer"; "pass_check": "false" counted as passed.
    if "tflops" in r and not (number(r["tflops"]) and r["tflops"] > 0):
        return f"tflops = {r['tflops']!r} is not a positive number"
    b = r.get("kv_bytes_per_step")
    if "kv_bytes_per_step" in r and not (isinstance(b, int) and not isinstance(b, bool) and b >= 0):
        return f"kv_bytes_per_step = {b!r} is not a whole number >= 0"
    if r.get("pass_check") is not None and not isinstance(r["pass_check"], bool):
        return f"pass_check = {r['pass_check']!r} is not true, false or null"
    if ("step_labels" in r) != ("step_moves" in r):
        return "step_labels and step_moves go together: a record has both or neither"
    for f in ("step_labels", "step_moves"):
        v = r.get(f, [])
        if f in r and not (isinstance(v, list) and len(v) == steps and all(isinstance(x, str) for x in v)):
            return f"{f} must be {steps} strings (one per ring step)"
    return None


def named(r: dict) -> bool:
    """Whether the record names its rows (step_labels, step_moves; `flashladder ring` since the order
    "own keys last"); the records of runs 39–40 do not."""
    return "step_labels" in r


def load(paths: list[str]) -> list[dict]:
    out, seen = [], {}
    for path in paths:
        n = 0
        for where, r in flr.read_jsonl(path, refuse):
            n += 1
            if r.get("impl") != IMPL:
                continue
            why = problem(r)
            if why:
                refuse(f"{where}: {why}")
            k = tuple(r[f] for f in KEY)
            if k in seen:
                refuse(f"{where}: the same point as {seen[k]} ({point(r)}): keep one of the two records")
            seen[k] = where
            out.append(r)
        if not n:
            refuse(f"{path}: no records in it")
    if not out:  # a table of 0 of 0 points says nothing: the wrong files were given
        refuse(f"no {IMPL} record in {', '.join(paths)}")
    return out


def point(r: dict) -> str:
    return (f"{r['pass']} N {r['Nq']} {'causal' if r['causal'] else 'non-causal'} {r['layout']} "
            f"{r['gpus']} GPU{'s' if r['gpus'] > 1 else ''} {r['dtype']} B {r['B']} H {r['H']} H_kv {r['H_kv']} "
            f"d {r['d']}")


def judged(r: dict) -> bool:
    """The 2-GPU run the bars judge: zigzag with causal, contiguous without."""
    return r["layout"] == ("zigzag" if r["causal"] else "contiguous")


def order(r: dict):
    return (r["dtype"], r["B"], r["H"], r["H_kv"], r["d"], r["Nq"], r["causal"], not judged(r), r["layout"])


def ms(x: float) -> str:
    return f"{x:.3f}"


def block(paths: list[str], recs: list[dict]) -> str:
    by = {tuple(r[f] for f in KEY): r for r in recs}
    twos = sorted((r for r in recs if r["gpus"] == 2), key=order)
    shapes = {(r["dtype"], r["B"], r["H"], r["H_kv"], r["d"]) for r in recs}

    def n_cell(r):  # the problem beside N only where the records hold more than one
        shape = f" ({r['dtype']} B {r['B']} H {r['H']}/{r['H_kv']} d {r['d']})"
        return str(r["Nq"]) + (shape if len(shapes) > 1 else "")

    def meta(f):
        return ", ".join(sorted({str(r[f])[:10] if f == "date" else str(r[f]) for r in recs})) or "–"

    out = [f"Records: {', '.join(f'`{shown(p)}`' for p in paths)}; {meta('device')}; commit {meta('commit')}; "
           f"{meta('date')}."]
    if len(shapes) == 1:
        (dt, b, h, hkv, d), = shapes
        out[-1] += f" B = {b}, H = {h}, H_kv = {hkv}, d = {d}, {dt}."
    checked = [r for r in recs if r.get("pass_check") is not None]
    failed = [r for r in checked if not r["pass_check"]]
    out += ["", f"Times: `median_ms`, the slowest rank's. Checked against the oracle: {len(checked)} of {len(recs)} "
            f"records, {len(checked) - len(failed)} passed"
            + (f", failed: {'; '.join(point(r) for r in failed)}" if failed else "")
            + ("; the others were timed with `--check none`." if len(checked) < len(recs) else ".")]
    others = sorted({r["gpus"] for r in recs} - {1, 2})
    if others:
        out[-1] += f" Records of {', '.join(map(str, others))} GPUs are not in these bars."
    met, missed, bal = 0, [], []
    for pas, title in PASSES.items():
        rows = [r for r in twos if r["pass"] == pas]
        if not rows:
            continue
        out += ["", f"**{title}** (bars: 2-GPU ≤ {TIME_BAR} × 1-GPU; causal zigzag busiest / idlest rank ≤ "
                f"{BALANCE_BAR:.2f})", "",
                "| N | causal | layout | 1-GPU ms | 2-GPU ms | 2-GPU / 1-GPU | scaling efficiency | time bar met "
                "| busiest / idlest rank compute | balance bar met |",
                "|--:|---|---|--:|--:|--:|--:|---|--:|---|"]
        for r in rows:
            base = by.get((pas, r["Nq"], r["causal"], 1, "contiguous") + tuple(r[f] for f in KEY[5:]))
            imb = max(r["rank_busy_ms"]) / min(r["rank_busy_ms"])
            name = f"{title.lower()} N {n_cell(r)} {'causal' if r['causal'] else 'non-causal'} {r['layout']}"
            if base:
                ratio = r["median_ms"] / base["median_ms"]
                cells = [ms(base["median_ms"]), ms(r["median_ms"]), f"{ratio:.3f}",
                         f"{base['median_ms'] / (2 * r['median_ms']):.1%}"]
                ok = ratio <= TIME_BAR
            else:
                ratio, ok = None, False
                cells = ["no 1-GPU record", ms(r["median_ms"]), "–", "–"]
            if not judged(r):
                verdict, bcell = "contrast (not judged)", "contrast"
            else:
                verdict = ("yes" if ok else "**no**") if base else "**no** (no 1-GPU record)"
                met += ok
                if not ok:
                    missed.append(f"{name} ({f'{ratio:.3f}' if base else 'no 1-GPU record'})")
                bcell = "–"
                if r["causal"]:
                    bcell = "yes" if imb <= BALANCE_BAR else "**no**"
                    bal.append((imb <= BALANCE_BAR, f"{name} ({imb:.3f})"))
            causal = "yes" if r["causal"] else "no"
            out.append(f"| {n_cell(r)} | {causal} | {r['layout']} | " + " | ".join(cells) +
                       f" | {verdict} | {imb:.3f} | {bcell} |")
    out += overlap(twos, n_cell)
    out += scaling(recs)
    total = met + len(missed)
    line = f"**Summary:** {met} of {total} points meet the time bar (2-GPU ≤ {TIME_BAR} × 1-GPU)"
    line += f"; not met: {'; '.join(missed)}" if missed else ""
    if bal:
        off = [t for ok, t in bal if not ok]
        line += (f". Causal zigzag ranks within 10%: {len(bal) - len(off)} of {len(bal)}"
                 + (f"; not: {'; '.join(off)}" if off else ""))
    out += ["", line + "."]
    return "\n".join(out)


def scaling(recs: list[dict]) -> list[str]:
    """README's "How it scales" with its two inputs taken from these records: W, the link's rate while the
    first ring step computes (a step's K|V bytes over step 0's transfer time, each rank of each 2-GPU run
    that computed a pair beside it, the median at the largest message: the backward's own keys part A
    is empty on a contiguous ring, and its transfer then runs with nothing beside it), and F, the local step's rate on one GPU (non-causal, the longest
    N). A rank's slice hides its transfer while N/G is at least (H_kv/H)·F/W positions (forward; twice that
    for the causal zigzag, whose steps carry half the work; the backward: 1.2× (H_kv/H)·F_b/W, its 2.5× the
    work against 3× the bytes)."""
    rates = {}
    for r in recs:
        b = r.get("kv_bytes_per_step")
        if r["gpus"] != 2 or not number(b) or b == 0:
            continue
        for rank in range(2):
            x = r["step_transfer_ms"][rank][0]
            if x > 0 and r["step_pairs"][rank][0] > 0:
                rates.setdefault(b, []).append(b / (x * 1e-3))
    ones = [r for r in recs if r["gpus"] == 1 and not r["causal"]]
    shapes = {(r["H"], r["H_kv"]) for r in recs}
    if not rates:  # no 2-GPU record measured the link beside a pair: nothing to compute from
        return []
    # The link was measured, but F is not in these records: say so instead of leaving the section out.
    left_out = lambda why: ["", f"**How far this link hides the transfer**: not computed: {why}."]
    if len(shapes) != 1:
        return left_out("the records hold " + ", ".join(f"H {h}, H_kv {k}" for h, k in sorted(shapes))
                        + ", and the sum needs one (H, H_kv)")
    if not ones:
        return left_out("no non-causal 1-GPU record gives F, the local step's rate")
    (h, hkv), = shapes
    n1 = max(r["Nq"] for r in ones)
    rate = {r["pass"]: r for r in ones if r["Nq"] == n1 and number(r.get("tflops"))}
    if set(rate) != {"fwd", "bwd"}:
        lacking = " and ".join({"fwd": "forward", "bwd": "backward"}[p] for p in ("fwd", "bwd") if p not in rate)
        return left_out(f"no non-causal 1-GPU {lacking} record at N = {n1} with its TFLOP/s gives F")
    big = max(rates)
    w = statistics.median(rates[big])
    f_f, f_b = rate["fwd"]["tflops"] * 1e12, rate["bwd"]["tflops"] * 1e12
    pos = {"non-causal forward": hkv / h * f_f / w, "causal forward (zigzag)": 2 * hkv / h * f_f / w,
           "non-causal backward": 1.2 * hkv / h * f_b / w, "causal backward (zigzag)": 2.4 * hkv / h * f_b / w}
    first = ("the first row (forward step 0, backward own keys part A) computes" if any(named(r) for r in recs)
             else "step 0 computes")
    out = ["", "**How far this link hides the transfer** (README's \"How it scales\", inputs from these records). "
           f"W, the link while {first}: " + "; ".join(
               f"{statistics.median(v) / 1e9:.0f} GB/s with {k / 2**20:.0f} MiB steps ({len(v)} transfers)"
               for k, v in sorted(rates.items())) + f"; the {big / 2**20:.0f} MiB figure is used. F, one GPU at "
           f"N = {n1}: {rate['fwd']['tflops']:.0f} TFLOP/s forward, {rate['bwd']['tflops']:.0f} backward. A rank's "
           "slice must hold at least this many positions, and G = N / that many is where the link stops hiding:",
           "", "| pass | positions per rank | " + " | ".join(f"G at N = {n}" for n in sorted({r['Nq'] for r in recs}))
           + " |", "|---|--:|" + "--:|" * len({r['Nq'] for r in recs})]
    for name, p in pos.items():
        out.append(f"| {name} | {p:.0f} | " + " | ".join(f"{n / p:.0f}" for n in sorted({r['Nq'] for r in recs}))
                   + " |")
    return out


def overlap(twos: list[dict], n_cell) -> list[str]:
    """Per ring step of each 2-GPU run: every rank's compute and transfer, in ms."""
    new = any(named(r) for r in twos if r["pass"] == "bwd")
    old = any(not named(r) for r in twos if r["pass"] == "bwd")
    if not new:  # the records of runs 39–40: the order before "own keys last"
        caption = ("ms; compute / transfer of each rank. Transfer s, the step's NCCL group on its own stream, runs "
                   "beside compute s and is hidden while shorter; it includes any wait for the peer, and a backward "
                   "step's compute (s ≥ 1) any wait for the incoming dK, dV sum. The forward sends nothing after its "
                   "last step; the backward's last row is the final hop of the dK, dV sums to their owner, a transfer "
                   "with no compute beside it.")
    else:
        caption = ("ms; compute / transfer of each rank. A row's transfer, its NCCL group on its own stream, runs "
                   "beside the row's compute and is hidden while shorter; it includes any wait for the peer; — : "
                   "nothing moves beside that row. The forward sends nothing after its last step. The backward "
                   "computes its own keys last: \"own keys, part A\" is the part of the rank's own launches computed "
                   "first, beside the first K|V transfer (zigzag: the earlier query slot's, with causal its chunk's "
                   "diagonal; contiguous: none); steps 1 … G − 1 are the launches with the travelling K, V (step 1 "
                   "starts the dK, dV sum of its origin and receives none; a later step's compute includes any wait "
                   "for the incoming sum); \"own keys, part B\" is the rest of the own launches, beside the final "
                   "hop of the dK, dV sums to their owner, hidden while shorter than its compute (its launches; the "
                   "pass that writes dK, dV once the hop is in is in no row). \"pairs\": the launches of the local "
                   "step in that row, per rank (plan.hpp's pairs: one query slot against the keys it sees of the "
                   "K, V in hand; records before run 69 counted one per chunk pair).")
        if old:
            caption += (" Backward records without named rows (the order before, own keys first): the last row is "
                        "the final hop, a transfer with no compute beside it.")
    out = ["", f"**Per ring step, 2-GPU runs** ({caption})", "",
           "| pass | N | causal | layout | step | pairs | rank 0 compute / transfer | rank 1 compute / transfer |",
           "|---|--:|---|---|---|---|--:|--:|"]
    for r in sorted(twos, key=lambda r: (r["pass"] != "fwd",) + order(r)):
        steps = len(r["step_compute_ms"][0])
        for s in range(steps):
            if named(r):
                hop, quiet, label = False, r["step_moves"][s] == "", r["step_labels"][s]
            else:
                hop = r["pass"] == "bwd" and s == steps - 1
                quiet = r["pass"] == "fwd" and s == steps - 1
                label = "final dK, dV hop (transfer only)" if hop else str(s)
            cells = []
            for rank in range(2):
                c, x = r["step_compute_ms"][rank][s], r["step_transfer_ms"][rank][s]
                cells.append(f"— / {ms(x)}" if hop else f"{ms(c)} / —" if quiet else f"{ms(c)} / {ms(x)}")
            pairs = "–" if hop else " / ".join(str(p[s]) for p in r["step_pairs"])
            out.append(f"| {r['pass']} | {n_cell(r)} | {'yes' if r['causal'] else 'no'} | {r['layout']} | {label} | "
                       f"{pairs} | " + " | ".join(cells) + " |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="records (.jsonl) of `flashladder ring --json`")
    ap.add_argument("--out", default="", help="write the Markdown block here (default: print)")
    ap.add_argument("--readme", default="", help=f"replace the text between {BEGIN} and {END} in this file")
    ap.add_argument("--check", action="store_true", help="with --readme: exit 1 if its block differs, change nothing")
    a = ap.parse_args()
    if a.check and not a.readme:
        ap.error("--check needs --readme")
    recs = load(a.files)
    text = "\n".join([BEGIN, NOTE, "", block(a.files, recs), "", END])
    if a.out:
        try:
            with open(a.out, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        except OSError as e:
            refuse(f"cannot write {a.out}: {e.strerror}")
    if not a.readme:
        if not a.out:
            print(text)
        return 0
    try:
        with open(a.readme, encoding="utf-8") as f:
            page = f.read()
    except OSError as e:
        refuse(f"cannot read {a.readme}: {e.strerror}")
    i, j = page.find(BEGIN), page.find(END)
    if i < 0 or j < i:
        refuse(f"{a.readme} has no {BEGIN} … {END} block to fill")
    new = page[:i] + text + page[j + len(END):]
    if a.check:
        if new != page:
            sys.stdout.writelines(difflib.unified_diff(page.splitlines(True), new.splitlines(True), a.readme,
                                                       "the records"))
            print(f"ring_table.py: {a.readme} is stale: run scripts/ring_table.py --readme {a.readme} with the records")
            return 1
        print(f"ring_table.py: {a.readme} agrees with the {len(recs)} ring records")
        return 0
    if new != page:
        flr.write_text(a.readme, new)
        print(f"ring_table.py: {a.readme} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(flr.run_main("ring_table.py", main))
