#!/usr/bin/env python3
"""flashladder — scripts/readme_table.py: the ladder table of README.md, written from docs/results/*.jsonl.

    scripts/readme_table.py           rewrite the block between the markers in README.md (and in every
                                    steps/*/README.md that has the step-measured markers)
    scripts/readme_table.py --check   exit 1 (and show the difference) when a README and the results disagree
    scripts/readme_table.py --print   print the block, change nothing

The block sits between `<!-- ladder-table:begin -->` and `<!-- ladder-table:end -->`; everything else in
README.md belongs to its authors and is left alone. The rows are the steps of steps/ladder.cpp in ladder
order (never sorted by speed), for the headline problem (fp16, B = 4, H = 16, N = 4096, d = 128,
non-causal). Each GPU row shows that step's newest record on the GPU of the newest headline record, and
its fraction of PyTorch's FlashAttention-2 (`torch_flash`) measured on that same GPU and shape. A cell with
no record says "not yet measured": no number appears here that a run did not produce.
"""
from __future__ import annotations

import argparse
import difflib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fl_results as flr  # noqa: E402

BEGIN = "<!-- ladder-table:begin -->"
END = "<!-- ladder-table:end -->"
NOT_YET = "not yet measured"
PLOT = "docs/img/ladder_tflops.png"


def fmt_ms(ms: float) -> str:
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    return f"{ms:.3f}"


def fmt_tflops(t: float) -> str:
    return f"{t:.1f}" if t >= 10 else f"{t:.2f}" if t >= 0.1 else f"{t:.4f}"


def error_cell(rec: dict) -> str:
    tol = rec.get("tol_used")
    if tol is None:
        return "unchecked"
    cell = f"{100 * tol:.0f}%"
    if rec.get("pass_check") is False or not (tol <= 1.0):
        cell = f"**FAIL** ({cell})"
    return cell


def block(root: str) -> str:
    steps = flr.parse_ladder(root)
    records = flr.load_records(root)
    view = flr.headline_view(steps, records)
    lines = [BEGIN,
             "<!-- Written by scripts/readme_table.py from docs/results/*.jsonl; edit those, not this block. -->"]
    if os.path.exists(os.path.join(root, PLOT)):
        lines += ["", f"![TFLOP/s of each step against N, with PyTorch's FlashAttention-2 and cuDNN]({PLOT})"]
    lines += ["",
              "| step | its one change | median ms | TFLOP/s | of FA2 (torch_flash) | error / tolerance |",
              "|---|---|--:|--:|--:|--:|"]

    # The backward rows (step 09 on) compare with torch_flash's backward on the same device and shape.
    bwd_view = flr.headline_view(steps, records, dict(flr.HEADLINE, **{"pass": "bwd"}))
    bwd_rows = bwd_view.rows if bwd_view.device == view.device else {}

    for s in steps:
        passes = ["fwd", "bwd"] if s.backward else ["fwd"]
        for pass_ in passes:
            name = f"[{s.folder}](steps/{s.folder})" + (" (backward pass)" if pass_ == "bwd" else "")
            change = s.change.replace("|", "\\|") if pass_ == "fwd" else "the same step's backward pass, timed against torch_flash's backward"
            if s.where == "cpu":
                rec = view.cpu_rows.get(s.folder)
            else:
                rec = (view.rows if pass_ == "fwd" else bwd_rows).get(s.folder)
            if rec is None:
                lines.append(f"| {name} | {change} | {NOT_YET} | – | – | – |")
                continue
            ms, tf = rec["median_ms"], rec["tflops"]
            if s.where == "cpu":
                note = f" ({rec.get('dtype')}, CPU)"
                frac = "– (CPU)"
            else:
                note = ""
                ref = (view.rows if pass_ == "fwd" else bwd_rows).get("torch_flash")
                frac = f"{100 * ref['median_ms'] / ms:.0f}%" if ref else f"torch_flash {NOT_YET}"
            lines.append(f"| {name} | {change} | {fmt_ms(ms)}{note} | {fmt_tflops(tf)} | {frac} | {error_cell(rec)} |")
    for base in ("torch_flash", "torch_cudnn"):
        rec = view.rows.get(base)
        if rec:
            ref = view.rows.get("torch_flash")
            lines.append(f"| {base} (PyTorch SDPA baseline) | – | {fmt_ms(rec['median_ms'])} | "
                         f"{fmt_tflops(rec['tflops'])} | {100 * ref['median_ms'] / rec['median_ms']:.0f}% | – |")
    lines.append("")
    if view.device:
        e = view.env
        reps = e.get("reps")
        lines.append(f"GPU: {view.device} ({e.get('sm_count')} SMs), CUDA {e.get('cuda') or '?'}, driver "
                     f"{e.get('driver') or '?'} · problem: {flr.problem_text()} (backward rows: its backward pass) · "
                     f"{flr.FLOP_CONVENTION} · "
                     f"GPU times are medians{f' of {reps} launches' if reps else ''} · results of commit "
                     f"{e.get('commit')}, {e.get('date')}, in `{e.get('_file')}`"
                     + "".join(f"; the rows of {', '.join(impls)} from commit {c}, `{f}`"
                               for (f, c), impls in other_runs(view.rows, e).items())
                     + ". A ratio between rows of different runs is not a same-run comparison.")
    else:
        lines.append(f"GPU: none yet — no GPU record of the headline problem ({flr.problem_text()}) is in "
                     f"`docs/results/`, so every GPU cell says *{NOT_YET}*. {flr.FLOP_CONVENTION}.")
    cpu = [r for r in view.cpu_rows.values()]
    if cpu:
        devs = sorted({r.get("device", "?") for r in cpu})
        runs: dict = {}
        for r in cpu:
            runs.setdefault((r.get("_file"), r.get("commit"), r.get("date"), r.get("reps")), []).append(r.get("impl"))
        lines.append(f"CPU rows: {', '.join(devs)}, fp32 (the CPU steps' storage type), same shape; "
                     + "; ".join(f"{', '.join(sorted(str(i) for i in impls))}: medians"
                                 f"{f' of {reps} runs' if reps else ''}, commit {c}, {d}, in `{f}`"
                                 for (f, c, d, reps), impls in sorted(runs.items(), key=str)) + ".")
    lines.append(END)
    return "\n".join(lines)


STEP_BEGIN = "<!-- step-measured:begin -->"
STEP_END = "<!-- step-measured:end -->"


def same_run(a: dict, b: dict) -> bool:
    """Two records of one program run (as near as the records tell): the same file and commit."""
    return all(a.get(k) == b.get(k) for k in ("_file", "commit"))


def other_runs(rows: dict, e: dict) -> dict:
    """(file, commit) -> the impls whose rows come from a run other than e's."""
    out: dict = {}
    for impl, r in sorted(rows.items()):
        if not same_run(r, e):
            out.setdefault((r.get("_file"), r.get("commit")), []).append(impl)
    return out


def step_block(root: str, step, prev, view, bwd_view) -> str:
    """The measured effect of one step at the headline problem, for its README: its time, the step
    before it, and PyTorch's FlashAttention-2 on the same GPU (the records the README table shows)."""
    lines = [STEP_BEGIN, "<!-- Written by scripts/readme_table.py from docs/results/*.jsonl; edit those, not this block. -->"]
    rows = view.cpu_rows if step.where == "cpu" else view.rows
    rec = rows.get(step.folder)
    if rec is None:
        lines.append(f"Headline problem ({flr.problem_text()}): {NOT_YET}.")
        lines.append(STEP_END)
        return "\n".join(lines)
    where = f"{rec.get('device')}" + (f" ({rec.get('sm_count')} SMs)" if rec.get("sm_count") else "")
    shape = flr.problem_text(dict(flr.HEADLINE, dtype=rec.get("dtype", "fp32")) if step.where == "cpu" else None)
    text = (f"On {where}, headline problem ({shape}): {fmt_ms(rec['median_ms'])} ms, "
            f"{fmt_tflops(rec['tflops'])} TFLOP/s, error {error_cell(rec)} of the tolerance")
    before = (view.cpu_rows if prev is not None and prev.where == "cpu" else view.rows).get(prev.folder) if prev else None
    if before is not None and before.get("device") == rec.get("device"):
        text += f"; {before['median_ms'] / rec['median_ms']:.2f}× the speed of {prev.folder}"
    ref = view.rows.get("torch_flash") if step.where == "gpu" else None
    if ref is not None:
        text += (f"; {100 * ref['median_ms'] / rec['median_ms']:.0f}% of PyTorch's FlashAttention-2 (torch_flash) "
                 + ("in the same run" if same_run(ref, rec) else
                    f"as timed in another run on the same GPU model (`{ref.get('_file')}`, {ref.get('date')}): "
                    f"not a same-run ratio"))
    text += "."
    lines.append(text)
    if step.backward:
        brec = bwd_view.rows.get(step.folder) if bwd_view.device == view.device else None
        bref = bwd_view.rows.get("torch_flash") if brec else None
        if brec:
            lines.append("")
            lines.append(f"Backward pass, same problem: {fmt_ms(brec['median_ms'])} ms, {fmt_tflops(brec['tflops'])} "
                         f"TFLOP/s (FLOPs 2.5× the forward's), error {error_cell(brec)} of the tolerance"
                         + (f"; {100 * bref['median_ms'] / brec['median_ms']:.0f}% of torch_flash's backward"
                            + ("." if same_run(bref, brec) else f" as timed in another run (`{bref.get('_file')}`).")
                            if bref else "."))
    lines.append("")
    lines.append(f"Commit {rec.get('commit')}, {rec.get('date')}, `{rec.get('_file')}`; "
                 f"{flr.FLOP_CONVENTION}; medians of {rec.get('reps', 30)} launches.")
    lines.append(STEP_END)
    return "\n".join(lines)


def step_readmes(root: str) -> dict:
    """path -> (old text, new text) for every step README that carries the markers."""
    steps = flr.parse_ladder(root)
    records = flr.load_records(root)
    view = flr.headline_view(steps, records)
    bwd_view = flr.headline_view(steps, records, dict(flr.HEADLINE, **{"pass": "bwd"}))
    out = {}
    for k, s in enumerate(steps):
        path = os.path.join(root, "steps", s.folder, "README.md")
        if not os.path.exists(path):
            continue
        text = flr.read_text(path)
        b, e = text.find(STEP_BEGIN), text.find(STEP_END)
        if b < 0 or e < b:
            continue
        new = text[:b] + step_block(root, s, steps[k - 1] if k else None, view, bwd_view) + text[e + len(STEP_END):]
        out[path] = (text, new)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # One or the other: with both, --print won and the check never ran (exit 0 on a stale README).
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 when README.md disagrees with the results")
    mode.add_argument("--print", action="store_true", help="print the block and change nothing")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="the repository root (default: this script's ../)")
    a = ap.parse_args()
    try:
        new = block(a.root)
    except RuntimeError as e:
        print(f"readme_table: {e}", file=sys.stderr)
        return 2
    if a.print:
        print(new)
        return 0
    readme = os.path.join(a.root, "README.md")
    if not os.path.exists(readme):
        if a.check:
            print("readme_table: README.md does not exist; run scripts/readme_table.py to create it", file=sys.stderr)
            return 1
        flr.write_text(readme, new + "\n")
        print("readme_table: created README.md holding only the table block")
        return 0
    text = flr.read_text(readme)
    b, e = text.find(BEGIN), text.find(END)
    if b < 0 or e < 0 or e < b:
        print(f"readme_table: README.md lacks the markers {BEGIN} … {END} (in that order)", file=sys.stderr)
        return 1
    old = text[b:e + len(END)]
    steps_md = step_readmes(a.root)
    if a.check:
        bad = 0
        if old != new:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                                       "README.md (committed)", "README.md (from docs/results)"))
            bad += 1
        for path, (o, n) in steps_md.items():
            if o != n:
                rel = os.path.relpath(path, a.root)
                sys.stdout.writelines(difflib.unified_diff(o.splitlines(True), n.splitlines(True),
                                                           f"{rel} (committed)", f"{rel} (from docs/results)"))
                bad += 1
        if bad:
            print("\nreadme_table: README.md or a step README disagrees with docs/results; run scripts/readme_table.py")
            return 1
        print(f"readme_table: README.md's table and {len(steps_md)} step READMEs agree with docs/results")
        return 0
    for path, (o, n) in steps_md.items():
        if o != n:
            flr.write_text(path, n)
            print(f"readme_table: {os.path.relpath(path, a.root)} measured block rewritten")
    if old != new:
        flr.write_text(readme, text[:b] + new + text[e + len(END):])
        print("readme_table: README.md's table rewritten")
    else:
        print("readme_table: README.md's table already agrees with docs/results")
    return 0


if __name__ == "__main__":
    sys.exit(flr.run_main("readme_table", main))
