#!/usr/bin/env python3
"""flashladder — scripts/bars.py: the benchmark bars of the open issues, computed from records.

    scripts/bars.py --torch docs/results/X-torch.jsonl [--decode docs/results/Y-decode.jsonl] [--out FILE.md]
    scripts/bars.py --torch R1.jsonl --torch R2.jsonl --torch R3.jsonl   (repetitions of one sweep)
    scripts/bars.py --decode D1.jsonl --decode D2.jsonl --decode D3.jsonl   (repetitions of the decode sweep)

From one run's records (scripts/compare_torch.py), per point of the FA2 sweep: our last forward rung
against torch cuDNN and FLASH (issue 15: >= 0.9x cuDNN at N >= 2048, >= 1.0x FLASH at N >= 1024), our
last backward rung and its deterministic mode against both (issue 16: the same bars); per point of the
decode sweep: step 10b (else step 10) against both and its K+V bytes/s against the run's copy bandwidth (issue 17:
>= 1.0x both and >= 85% of the copy at Nk >= 8192). Each row says whether it meets its bar, so a
missed bar shows by how much. Standard library only: it runs anywhere the records are.

With --torch given more than once (repetitions of the same sweep, e.g. in one device call), each run
gets its own tables, as above, and then one table per pass over the repetitions: per fp16 point, the
ratio to cuDNN in each run, their median, and in how many runs the point met its bars. A bar met in
one run and missed in another is within the runs' noise, and the table shows it. --decode given more
than once does the same for issue 17: per point with Nk >= 8192, the step's ratio to cuDNN and its
fraction of the copy in each run, and in how many runs it met all three bars.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fl_results as flr  # noqa: E402  (read_jsonl: the records, refused with their place)


def refuse(msg):
    print(f"bars.py: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    """The records of one file; a line that is not a JSON object, or a record whose fields the tables
    read are missing or wrong, is refused (exit 2), naming the file and line: a record that a table
    would skip, read wrongly ("false" as true) or crash on never reaches one. So is a file with none."""
    out = []
    for where, r in flr.read_jsonl(path, refuse):
        need = ["impl", "pass"]
        if isinstance(r.get("pass"), str) and r["pass"] == "empty":  # an empty call: its time alone
            need.append("median_ms")
        elif isinstance(r.get("pass"), str) and r["pass"] != "copy":
            # An attention record, or a read of its K and V (pass read): the problem and its time; a
            # forward or backward needs its rate too (one without was dropped from the tables unsaid).
            need += ["dtype", "causal", "d", "B", "H", "H_kv", "Nq", "Nk", "median_ms"]
            if r["pass"] in ("fwd", "bwd"):
                need.append("tflops")
        elif r.get("impl") == "d2d_copy":  # the copy has no problem: its bandwidth is the decode bar's
            need.append("bytes_per_s")
        for f in need:
            if r.get(f) is None:
                refuse(f"{where}: {f} is null or missing: a record of pass {r.get('pass')!r} needs it")
        why = flr.field_problem(r)  # an optional field (kv_bytes_per_s, splits, ...) may be absent, never wrong
        if why:
            refuse(f"{where}: {why}")
        out.append(r)
    if not out:
        refuse(f"{path}: no records in it")
    return out


def key(r):
    # A variant's record (window, softcap, alibi, varlen, seqused_k: app/record.cpp) is a point of its own.
    variant = tuple(json.dumps(r.get(f), sort_keys=True) for f in ("window", "softcap", "alibi", "varlen", "seqused_k"))
    return (r["dtype"], r["d"], bool(r["causal"]), r["B"], r["H"], r.get("H_kv"), r["Nq"], r["Nk"]) + variant


def index(records, pas):
    out = {}
    for r in records:
        # A decode record of step 10 at a forced number of splits (compare_torch --decode-splits) is the
        # heuristic's check, not the step as it runs: the bars are the heuristic's choice.
        if r.get("pass") == pas and r.get("tflops") and not r.get("splits_forced"):
            out.setdefault(r["impl"], {})[key(r)] = r  # the last record of a point wins
    return out


def mark(ok):
    return "yes" if ok else "**no**"


def fa2_table(records, pas, ours, bar_cudnn_n, bar_flash_n, extra=None):
    by = index(records, pas)
    if ours not in by:
        return f"(no `{ours}` {pas} records)\n"
    lines = [f"| dtype | d | causal | N | {ours} TFLOP/s | torch FLASH | torch cuDNN | / FLASH | / cuDNN |"
             + (f" {extra} | {extra} / cuDNN |" if extra else "") + " bars met |",
             "|---|--:|---|--:|--:|--:|--:|--:|--:|" + ("--:|--:|" if extra else "") + "---|"]
    worst = None
    for k in sorted(by[ours], key=lambda k: (k[0], k[1], k[2], k[6])):
        o = by[ours][k]["tflops"]
        fl = by.get("torch_flash", {}).get(k, {}).get("tflops")
        cu = by.get("torch_cudnn", {}).get(k, {}).get("tflops")
        n = k[6]
        rf = o / fl if fl else float("nan")
        rc = o / cu if cu else float("nan")
        ok = (n < bar_flash_n or rf >= 1.0) and (n < bar_cudnn_n or rc >= 0.9)
        if k[0] == "fp16" and n >= bar_cudnn_n and cu and (worst is None or rc < worst[0]):
            worst = (rc, k)
        row = f"| {k[0]} | {k[1]} | {'yes' if k[2] else 'no'} | {n} | {o:.1f} | {fl or float('nan'):.1f} | " \
              f"{cu or float('nan'):.1f} | {rf:.2f} | {rc:.2f} |"
        if extra:
            e = by.get(extra, {}).get(k, {}).get("tflops")
            row += f" {e or float('nan'):.1f} | {(e / cu) if e and cu else float('nan'):.2f} |"
        lines.append(row + (f" {mark(ok)} |" if k[0] == "fp16" else " – (the bars are fp16's) |"))
    if worst:
        lines.append(f"\nLowest / cuDNN at N ≥ {bar_cudnn_n}: {worst[0]:.2f} ({worst[1][0]}, d = {worst[1][1]}, "
                     f"{'causal' if worst[1][2] else 'non-causal'}, N = {worst[1][6]}).")
    return "\n".join(lines) + "\n"


def repeat_table(runs, pas, ours, bar_cudnn_n, bar_flash_n):
    """Per fp16 point with N >= bar_flash_n: each run's ours / cuDNN, the median, runs meeting the bars."""
    idx = [index(rec, pas) for rec in runs]
    points = sorted({k for by in idx for k in by.get(ours, {}) if k[0] == "fp16" and k[6] >= bar_flash_n},
                    key=lambda k: (k[1], k[2], k[6]))
    if not points:
        return f"(no fp16 `{ours}` {pas} records with N ≥ {bar_flash_n})\n"
    lines = ["| d | causal | N | " + " | ".join(f"run {i + 1} / cuDNN" for i in range(len(runs)))
             + " | median / cuDNN | median / FLASH | runs meeting the bars |",
             "|--:|---|--:|" + "--:|" * len(runs) + "--:|--:|---|"]
    short = 0
    for k in points:
        rc, rf, met = [], [], 0
        for by in idx:
            o = by.get(ours, {}).get(k, {}).get("tflops")
            fl = by.get("torch_flash", {}).get(k, {}).get("tflops")
            cu = by.get("torch_cudnn", {}).get(k, {}).get("tflops")
            c = o / cu if o and cu else float("nan")
            f = o / fl if o and fl else float("nan")
            rc.append(c)
            rf.append(f)
            met += int(f >= 1.0 and (k[6] < bar_cudnn_n or c >= 0.9))
        have = [x for x in rc if x == x]
        med_c = statistics.median(have) if have else float("nan")
        have_f = [x for x in rf if x == x]
        med_f = statistics.median(have_f) if have_f else float("nan")
        short += int(met < len(runs))
        cells = " | ".join(f"{x:.2f}" for x in rc)
        lines.append(f"| {k[1]} | {'yes' if k[2] else 'no'} | {k[6]} | {cells} | {med_c:.2f} | {med_f:.2f} | "
                     f"{met} of {len(runs)}{'' if met == len(runs) else ' **(not every run)**'} |")
    lines.append(f"\n{len(points) - short} of {len(points)} points met their bars in every run.")
    # Whose time moved between the runs: each implementation's (max − min) / median TFLOP/s per point.
    spreads = []
    for impl in (ours, "torch_cudnn", "torch_flash"):
        sp = []
        for k in points:
            v = [by.get(impl, {}).get(k, {}).get("tflops") for by in idx]
            if all(v):
                sp.append((max(v) - min(v)) / statistics.median(v))
        if sp:
            spreads.append(f"{impl} median {100 * statistics.median(sp):.1f}%, largest {100 * max(sp):.1f}%")
    if spreads:
        lines.append("Spread of each one's TFLOP/s over the runs, (max − min) / median per point: "
                     + "; ".join(spreads) + ".")
    return "\n".join(lines) + "\n"


def decode_kv(r):
    """K + V bytes per second of a decode record: its own figure, or the bytes over the median time."""
    kv = r.get("kv_bytes_per_s")
    return kv if kv is not None else 2 * r["B"] * r["H_kv"] * r["Nk"] * r["d"] * 2 / (r["median_ms"] * 1e-3)


def decode_verdict(by, bw, step, k):
    """Issue 17's three bars for `step` at point k: (>= 1.0x FLASH, >= 1.0x cuDNN, >= 85% of the copy
    bandwidth bw). A missing record of the step, of FLASH or of cuDNN is a bar missed; NaN fails."""
    r = by.get(step, {}).get(k)
    fl = by.get("torch_flash", {}).get(k, {}).get("tflops")
    cu = by.get("torch_cudnn", {}).get(k, {}).get("tflops")
    if not r or not bw:
        return False, False, False
    return bool(fl) and r["tflops"] / fl >= 1.0, bool(cu) and r["tflops"] / cu >= 1.0, decode_kv(r) / bw >= 0.85


def decode_table(records, ours=None):
    """The bars of issue 17 for `ours` (default: 10b_cluster_merge where the records have it, else
    10_split_kv); beside 10b, its time against step 10's at the same point."""
    copy = [r for r in records if r.get("impl") == "d2d_copy"]
    bw = copy[-1]["bytes_per_s"] if copy else None
    by = index(records, "fwd")
    ours = ours or ("10b_cluster_merge" if "10b_cluster_merge" in by else "10_split_kv")
    if ours not in by:
        return f"(no {ours} decode records)\n"
    n = ours.split("_")[0]  # the column label: 10, 10b
    base = "10_split_kv" if ours != "10_split_kv" and "10_split_kv" in by else None
    # "copy's µs": the K+V bytes at the copy's bytes/s. Step 10's time over it is what the copy does not
    # pay (launches, the first loads' latency, the merge); 85% of the copy allows 1/0.85 − 1 = 0.176 of
    # the copy's time for it, so a small read misses that bar whatever its kernel streams at.
    # Ratios to three places and the copy's share to one: the verdict is on the unrounded values, and at
    # two places a miss by 0.2% (0.996×, 84.9%) read as "1.00" and "85%" beside its **no** (run 177).
    lines = [f"Device-to-device copy in the same run: {bw / 1e12:.2f} TB/s (read + write).\n" if bw else "",
             f"| B | H | H_kv | Nq | Nk | {n} µs | copy's µs | {n} TFLOP/s | {n} K+V TB/s | of copy | / FLASH | / cuDNN | "
             + ("/ 10 | " if base else "") + "bars met |",
             "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|" + ("--:|" if base else "") + "---|"]
    excess = []  # (step 10's µs − the copy's µs, the copy's µs, point) at Nk >= 8192
    for k in sorted(by[ours], key=lambda k: (k[3], k[5], k[6], k[7])):
        r = by[ours][k]
        fl = by.get("torch_flash", {}).get(k, {}).get("tflops")
        cu = by.get("torch_cudnn", {}).get(k, {}).get("tflops")
        kv_bytes = 2 * r["B"] * r["H_kv"] * r["Nk"] * r["d"] * 2
        kv = decode_kv(r)
        frac = kv / bw if bw else float("nan")
        us = r["median_ms"] * 1e3
        copy_us = kv_bytes / bw * 1e6 if bw else float("nan")
        if bw and k[7] >= 8192:
            excess.append((us - copy_us, copy_us, k))
        rf = r["tflops"] / fl if fl else float("nan")
        rc = r["tflops"] / cu if cu else float("nan")
        ok = k[7] < 8192 or all(decode_verdict(by, bw, ours, k))
        b10 = by[base].get(k, {}).get("tflops") if base else None
        vs10 = (f"{r['tflops'] / b10:.2f} | " if b10 else "– | ") if base else ""
        lines.append(f"| {k[3]} | {k[4]} | {k[5]} | {k[6]} | {k[7]} | {us:.1f} | {copy_us:.1f} | {r['tflops']:.1f} | "
                     f"{kv / 1e12:.2f} | {100 * frac:.1f}% | {rf:.3f} | {rc:.3f} | {vs10}{mark(ok)} |")
    # How many of the points with Nk >= 8192 met all three bars, and each bar alone (a missing FLASH or
    # cuDNN record, or a missing record of the step, is a bar missed, as in the table); for step 10 too
    # when 10b is judged, at 10b's points and against the same FLASH and cuDNN records.
    barred = [k for k in by[ours] if k[7] >= 8192]
    for step in [ours] + ([base] if base else []):
        v = [decode_verdict(by, bw, step, k) for k in barred]
        if v:
            lines.append(f"\nStep {step.split('_')[0]}: bars met at {sum(all(x) for x in v)} of {len(v)} points with "
                         f"Nk ≥ 8192 (≥ 1.0× FLASH at {sum(x[0] for x in v)}, ≥ 1.0× cuDNN at {sum(x[1] for x in v)}, "
                         f"≥ 85% of the copy at {sum(x[2] for x in v)}).")
    # The kernel that only reads the same K and V (compare_torch's read_stream records, app/read_stream.cu):
    # its time is what any kernel of this shape needs for the bytes, so where it misses 85% too, no
    # kernel we have meets that bar at that point.
    reads = {(r["dtype"], r["d"], r["B"], r["H_kv"], r["Nk"]): r for r in records
             if r.get("impl") == "read_stream" and r.get("pass") == "read" and r.get("median_ms")}
    read_of = lambda k: reads.get((k[0], k[1], k[3], k[5], k[7]))

    def read_text(k):
        rd = read_of(k)
        if not rd or not bw:
            return ""
        return f" (a kernel that only reads the same bytes: {rd['median_ms'] * 1e3:.1f} µs, " \
               f"{decode_kv(rd) / bw:.0%} of the copy)"
    # An empty call timed the same way (compare_torch's empty_call record): no call takes less, so the 85%
    # line's time less the empty call's is what is left for the bytes, at a rate no kernel may need above
    # the copy's own (the copy counts read + write; a read-only kernel has not beaten it at these sizes).
    empty = [r for r in records if r.get("impl") == "empty_call" and r.get("median_ms")]
    empty_us = empty[-1]["median_ms"] * 1e3 if empty else None

    def empty_text(c):
        if empty_us is None:
            return ""
        left = c / 0.85 - empty_us  # µs for the bytes within the line, after the empty call's share
        if left <= 0:
            return f"; an empty call ({empty_us:.1f} µs) takes all of the line's {c / 0.85:.1f} µs"
        return f"; after an empty call's {empty_us:.1f} µs, the line leaves the bytes {left:.1f} µs: {c / left:.2f}× the copy's rate"
    under = [e for e in excess if e[1] / (e[1] + e[0]) < 0.85]
    if under:
        lines.append(f"\nUnder 85% of the copy at Nk ≥ 8192, step {n}'s time over the copy's time for the same bytes, "
                     "against the 0.176 × the copy's time that 85% allows: "
                     + "; ".join(f"B {k[3]}, H_kv {k[5]}, Nq {k[6]}, Nk {k[7]}: {e:.1f} µs over, {0.176 * c:.1f} allowed"
                                 + read_text(k) + empty_text(c) for e, c, k in under) + ".")
    if empty_us is not None:
        lines.append(f"\nAn empty call (a kernel of one clock, timed as the calls are): {empty_us:.1f} µs.")
    if reads and bw:
        # The bytes of a point are read once per (B, H_kv, Nk): the read-only kernel's records, once each.
        seen = sorted({(k[3], k[5], k[7]): read_of(k) for k in barred if read_of(k)}.items())
        slow = [f"B {b}, H_kv {h}, Nk {nk}: {decode_kv(rd) / bw:.0%}" for (b, h, nk), rd in seen
                if decode_kv(rd) / bw < 0.85]
        lines.append(f"\nThe read-only kernel reached 85% of the copy at {len(seen) - len(slow)} of the {len(seen)} "
                     "sizes of K and V with Nk ≥ 8192" + (f"; not at {'; '.join(slow)}." if slow else "."))
    # The heuristic's check: steps 10 and 10b at forced splits (compare_torch --decode-splits) beside their
    # own choice. 10b records no S of its own (no workspace to read it from) and clamps a forced one to its
    # largest cluster: its cells name the S asked.
    for step in ("10_split_kv", "10b_cluster_merge"):
        lines += forced_table(records, by, step)
    return "\n".join(lines) + "\n"


def forced_table(records, by, step):
    """The heuristic's S beside forced ones for one step, or nothing when the records have none forced."""
    forced = {}
    for r in records:
        if r.get("impl") == step and r.get("pass") == "fwd" and r.get("splits_forced"):
            forced.setdefault(key(r), []).append(r)
    if not forced:
        return []
    s_of = lambda r: r.get("splits") if r.get("splits") is not None else r.get("splits_asked")
    lines = ["", f"Step {step.split('_')[0]}'s number of splits S: the heuristic's choice beside the forced ones "
             "(K+V TB/s; the best of all in bold, and the heuristic's time over the best's"
             + ("; S as asked, before the clamp to one cluster" if step != "10_split_kv" else "") + ").", "",
             "| B | H_kv | Nq | Nk | heuristic S | its TB/s | forced S: TB/s | best S | best time / heuristic's |",
             "|--:|--:|--:|--:|--:|--:|---|--:|--:|"]
    worse = 0
    for k in sorted(forced, key=lambda k: (k[3], k[5], k[6], k[7])):
        h = by.get(step, {}).get(k)
        if not h:
            continue
        cand = [(h["median_ms"], s_of(h) or "–", "heuristic")] + [(r["median_ms"], s_of(r), "forced") for r in forced[k]]
        best = min(cand, key=lambda c: c[0])
        tb = lambda ms: 2 * k[3] * k[5] * k[7] * h["d"] * 2 / (ms * 1e-3) / 1e12
        cells = ", ".join((f"**{s_of(r)}: {tb(r['median_ms']):.2f}**" if r["median_ms"] == best[0]
                           else f"{s_of(r)}: {tb(r['median_ms']):.2f}")
                          for r in sorted(forced[k], key=lambda r: s_of(r) or 0))
        ratio = best[0] / h["median_ms"]
        worse += int(ratio < 0.95)
        lines.append(f"| {k[3]} | {k[5]} | {k[6]} | {k[7]} | {s_of(h) or '–'} | {tb(h['median_ms']):.2f} | {cells} | "
                     f"{best[1]} | {ratio:.2f} |")
    lines.append(f"\nPoints where a forced S was more than 5% faster than the heuristic's: {worse} of {len(forced)}.")
    return lines


def decode_repeat_table(runs):
    """Issue 17's bars over several decode runs: per point with Nk >= 8192, the step judged in each
    (10b where the records have it), its ratio to cuDNN and its fraction of the copy in every run, and in
    how many runs it met all three bars. Where two kernels both read at the memory's speed, a >= 1.0
    bar between them is decided by noise; this table shows which points are such coin tosses."""
    per_run = []
    for rec in runs:
        copy = [r for r in rec if r.get("impl") == "d2d_copy"]
        bw = copy[-1]["bytes_per_s"] if copy else None
        by = index(rec, "fwd")
        ours = "10b_cluster_merge" if "10b_cluster_merge" in by else "10_split_kv"
        per_run.append((bw, by, ours))
    steps = {o for _, _, o in per_run}
    points = sorted({k for _, by, o in per_run for k in by.get(o, {}) if k[7] >= 8192},
                    key=lambda k: (k[3], k[5], k[6], k[7]))
    lines = [f"Step judged: {', '.join(sorted(steps))}; per run, its ratio to cuDNN / its K+V bytes as a "
             "fraction of the copy's bandwidth.\n",
             "| B | H_kv | Nq | Nk | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " | met in |",
             "|--:|--:|--:|--:|" + "---|" * len(runs) + "--:|"]
    every = some = 0
    for k in points:
        cells, met = [], 0
        for bw, by, ours in per_run:
            r = by.get(ours, {}).get(k)
            cu = by.get("torch_cudnn", {}).get(k, {}).get("tflops")
            if not r or not bw:
                cells.append("–")
                continue
            kv = decode_kv(r)
            rc = r["tflops"] / cu if cu else float("nan")
            ok = all(decode_verdict(by, bw, ours, k))
            met += int(ok)
            cells.append(f"{rc:.3f} / {100 * kv / bw:.1f}%" + ("" if ok else " ✗"))
        every += int(met == len(runs))
        some += int(met > 0)
        lines.append(f"| {k[3]} | {k[5]} | {k[6]} | {k[7]} | " + " | ".join(cells) + f" | {met} of {len(runs)} |")
    lines.append(f"\n{every} of {len(points)} points met their bars in every run, {some} in at least one "
                 "(✗: a bar missed in that run).")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--torch", action="append", default=[],
                    help="records of scripts/compare_torch.py (the FA2 sweep); again for each repetition")
    ap.add_argument("--decode", action="append", default=[],
                    help="records of scripts/compare_torch.py --sweeps decode; again for each repetition")
    ap.add_argument("--fwd", default="08k_persistent")
    ap.add_argument("--bwd", default="09f_dq_writer")
    ap.add_argument("--out", help="write the Markdown here (default: print)")
    a = ap.parse_args()
    if not a.torch and not a.decode:
        ap.error("give --torch and/or --decode")
    parts = ["<!-- Written by scripts/bars.py from the records named below; run it, do not edit. -->\n"]
    runs = [load(path) for path in a.torch]
    for path, rec in zip(a.torch, runs):
        meta = rec[0] if rec else {}
        parts.append(f"# The bars of issues 15 and 16 (`{path}`)\n\n{meta.get('device')}, commit "
                     f"{meta.get('commit')}, {meta.get('date')}; FA2 sweep: hidden 2048 (H = 2048/d), B·N = 16384; "
                     "TFLOP/s by the FlashAttention convention (backward 2.5× forward).\n")
        parts.append(f"## Forward: {a.fwd} (bars: ≥ 0.9× cuDNN at N ≥ 2048, ≥ 1.0× FLASH at N ≥ 1024)\n")
        parts.append(fa2_table(rec, "fwd", a.fwd, 2048, 1024))
        parts.append(f"\n## Backward: {a.bwd} (the same bars), and its deterministic mode\n")
        parts.append(fa2_table(rec, "bwd", a.bwd, 2048, 1024, extra=a.bwd + "+deterministic"))
    if len(runs) > 1:
        parts.append(f"# Over the {len(runs)} runs above\n")
        for pas, ours in (("fwd", a.fwd), ("bwd", a.bwd)):
            parts.append(f"## {'Forward' if pas == 'fwd' else 'Backward'}: {ours}\n")
            parts.append(repeat_table(runs, pas, ours, 2048, 1024))
    decode_runs = [load(path) for path in a.decode]
    for path, rec in zip(a.decode, decode_runs):
        meta = next((r for r in rec if r.get("impl") != "d2d_copy"), {})
        parts.append(f"\n# The bars of issue 17 (`{path}`)\n\n{meta.get('device')}, commit {meta.get('commit')}, "
                     f"{meta.get('date')}; d = 128, fp16, H = 32 (bars at Nk ≥ 8192: ≥ 1.0× FLASH and cuDNN, "
                     "K+V at ≥ 85% of the copy bandwidth).\n")
        parts.append(decode_table(rec))
    if len(decode_runs) > 1:
        parts.append(f"\n# Issue 17's bars over the {len(decode_runs)} runs above\n")
        parts.append(decode_repeat_table(decode_runs))
    text = "\n".join(parts)
    if a.out:
        flr.write_text(a.out, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(flr.run_main("bars.py", main))
