#!/usr/bin/env python3
"""flashladder — scripts/sanitize_table.py: the compute-sanitizer log of tools/device-run as a table.

    scripts/sanitize_table.py SANITIZE.LOG [--md TABLE.md] [--json TABLE.json] [--title TEXT]

tools/device-run's `sanitize` stage runs `compute-sanitizer --tool T flashladder check --steps S --backward
-d D ...` for every tool T and head dim D, with every GPU step that supports D in one run, and again one
step at a time when that run did not come back clean (so that a finding names its step). Each run sits
in the log between two marker lines:

    ### sanitize tool=memcheck d=64 steps=03_cuda_naive,04_fa1_tiling shape=-B 1 -H 2 ...
    ... compute-sanitizer's and flashladder's output ...
    ### end tool=memcheck d=64 rc=0 seconds=12

and a run left out for the stage's time budget is one line, `### skipped tool=... d=... steps=...
reason=...`. This script reads those blocks and writes one row per step, one column per tool: the
number of errors the tool reported in that step's kernels, at which head dims it ran, and whether the
oracle check under the tool passed. A step counts as checked at a head dim only if its check printed
its verdict in that run: a run that timed out or crashed before reaching a step leaves it unchecked.
A step run in several shapes at one head dim (10 and 10b alone) shows the errors of every shape, and the
worst of their outcomes.

Errors are attributed to a step by the kernel they name (namespace fl::sNN, or a path steps/NN_name/);
in a run of one step, to that step. What cannot be attributed is reported as such, never dropped:
a count from the tool's ERROR SUMMARY beyond the records it printed (its print limit) included.

Exit status: 0 once the table is written, whatever it shows (a formatter: tools/device-run judges each
run by compute-sanitizer's own exit code, --error-exitcode, and fails the call on any); 2 when the log
cannot be read, holds no runs, or a file cannot be written.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fl_results as flr  # noqa: E402  (run_main, write_text: a lost file or output is one line, exit 2)

BEGIN = re.compile(r"^### sanitize tool=(\S+) d=(\d+) steps=(\S+)(?: shape=(.*))?$")
END = re.compile(r"^### end tool=(\S+) d=(\d+) rc=(-?\d+) seconds=(\d+)")
SKIPPED = re.compile(r"^### skipped tool=(\S+) d=(\d+) steps=(\S+) reason=(.*)$")
VERDICT = re.compile(r"^(\d\d[a-z]?_[A-Za-z0-9_]+): (pass|FAIL|ERROR|not run)\b:? ?(.*)$")
PREFIX = "========="
NAMESPACE = re.compile(r"\bfl::s(\d\d[a-z]?)::")
PATH = re.compile(r"steps/(\d\d[a-z]?_[A-Za-z0-9_]+)/")
ERROR_SUMMARY = re.compile(r"^ERROR SUMMARY: (\d+) errors?")
RACE_SUMMARY = re.compile(r"^RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)")
NOT_FINDINGS = ("COMPUTE-SANITIZER", "LEAK SUMMARY", "Target application returned an error")
UNATTRIBUTED = "(unattributed)"


@dataclass
class Record:
    """One finding of the tool: its first line and the indented lines under it."""
    lines: list[str]
    warning: bool

    def text(self) -> str:
        return "\n".join(self.lines)


@dataclass
class Run:
    tool: str
    d: int
    steps: list[str]
    shape: str = ""
    rc: int | None = None  # None: no end marker (the log was cut)
    seconds: int | None = None
    skipped: str = ""  # the reason, for a run left out
    records: list[Record] = field(default_factory=list)
    summary_errors: int | None = None  # ERROR SUMMARY (or RACECHECK SUMMARY's errors)
    summary_warnings: int | None = None
    verdicts: dict[str, str] = field(default_factory=dict)  # step → pass / FAIL / ERROR / not run
    reasons: dict[str, str] = field(default_factory=dict)  # step → the rest of its verdict line (ERROR, not run)

    def step_of(self, rec: Record) -> str:
        """The step whose kernel a finding names; in a run of one step, that step."""
        text = rec.text()
        for num in NAMESPACE.findall(text):
            for s in self.steps:
                if s.startswith(num + "_"):
                    return s
        for folder in PATH.findall(text):
            if folder in self.steps:
                return folder
        return self.steps[0] if len(self.steps) == 1 else UNATTRIBUTED

    def counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """Errors and warnings per step (and UNATTRIBUTED), the summary's excess over printed ones included."""
        errors: dict[str, int] = {}
        warnings: dict[str, int] = {}
        for rec in self.records:
            bucket = warnings if rec.warning else errors
            s = self.step_of(rec)
            bucket[s] = bucket.get(s, 0) + 1
        printed = sum(errors.values())
        if self.summary_errors is not None and self.summary_errors > printed:
            s = self.steps[0] if len(self.steps) == 1 else UNATTRIBUTED
            errors[s] = errors.get(s, 0) + self.summary_errors - printed
        return errors, warnings

    @property
    def timed_out(self) -> bool:
        return self.rc in (124, 137)


def parse(lines: list[str]) -> list[Run]:
    runs: list[Run] = []
    run: Run | None = None
    rec: Record | None = None

    def close_record():
        nonlocal rec
        if rec is not None and run is not None:
            run.records.append(rec)
        rec = None

    for raw in lines:
        line = raw.rstrip("\n")
        m = SKIPPED.match(line)
        if m:
            close_record()
            run = None
            runs.append(Run(m[1], int(m[2]), m[3].split(","), skipped=m[4].strip()))
            continue
        m = BEGIN.match(line)
        if m:
            close_record()
            run = Run(m[1], int(m[2]), m[3].split(","), shape=(m[4] or "").strip())
            runs.append(run)
            continue
        if run is None:
            continue
        m = END.match(line)
        if m:
            close_record()
            run.rc, run.seconds = int(m[3]), int(m[4])
            run = None
            continue
        if line.startswith(PREFIX):
            body = line[len(PREFIX):]
            text = body[1:] if body.startswith(" ") else body
            if not text.strip():  # "=========" alone ends a finding
                close_record()
            elif text[0].isspace():  # a detail line of the current finding
                if rec is not None:
                    rec.lines.append(text.strip())
            else:  # a new top-level line: a finding, a summary or a banner
                close_record()
                s = ERROR_SUMMARY.match(text)
                r = RACE_SUMMARY.match(text)
                if s:
                    run.summary_errors = max(run.summary_errors or 0, int(s[1]))
                elif r:
                    run.summary_errors = max(run.summary_errors or 0, int(r[2]))
                    run.summary_warnings = int(r[3])
                elif not text.startswith(NOT_FINDINGS):
                    warning = text.startswith(("Warning", "WARN"))
                    rec = Record([text.strip()], warning)
            continue
        close_record()
        v = VERDICT.match(line)
        if v and v[1] in run.steps:
            run.verdicts[v[1]] = v[2]
            if v[2] in ("ERROR", "not run"):
                run.reasons[v[1]] = v[3].strip()
    close_record()
    return runs


@dataclass
class Cell:
    """One (tool, step, d): what the most specific run that covered it says."""
    tool: str
    step: str
    d: int
    status: str  # clean | errors | check-failed | incomplete | skipped | no-run
    errors: int = 0
    warnings: int = 0
    verdict: str = ""
    rc: int | None = None
    alone: bool = False
    seconds: int | None = None
    note: str = ""


VARIANT = re.compile(r"--(?:window|softcap|alibi|seqused-k|cu-seqlens-q|cu-seqlens-k)[= ]\S+")


def variant_of(r: Run) -> str:
    """The variant options of a run's shape ("--softcap 20"), "" for the plain problem: a variant run is
    its own row of the table, never merged with (or hiding) the plain run of the same step and d."""
    return " ".join(VARIANT.findall(r.shape))


# The worst first: a (tool, step, d) run in several shapes shows the worst of them.
WORST = ("errors", "check-failed", "incomplete", "no-run", "clean")


def shape_cell(tool: str, step: str, base: str, d: int, ran: list[Run]) -> Cell:
    """What the runs of one shape say: the step alone (device-run's repeat of a shared run that did not
    come back clean, in the same shape) says more than the shared run."""
    alone = [r for r in ran if r.steps == [base]]
    r = alone[-1] if alone else ran[-1]
    errors, warnings = r.counts()
    c = Cell(tool, step, d, "", errors.get(base, 0), warnings.get(base, 0), r.verdicts.get(base, ""), r.rc,
             bool(alone), r.seconds)
    if c.errors:
        c.status = "errors"
    elif c.verdict in ("FAIL", "ERROR"):
        c.status = "check-failed"
        c.note = f"{c.verdict} {r.reasons.get(base, '')}".strip()
    elif c.verdict == "not run":
        c.status = "no-run"
        c.note = "not run: " + r.reasons.get(base, "")
    elif not c.verdict or r.rc is None or r.timed_out:
        c.status = "incomplete"
        c.note = "timed out" if r.timed_out else "no verdict in the log" if c.verdict == "" else "log cut"
    elif errors.get(UNATTRIBUTED, 0) and not alone:
        c.status = "incomplete"
        c.note = f"{errors[UNATTRIBUTED]} errors in a shared run could not be attributed"
    elif r.rc != 0 and alone:
        # The tool exits 99 on an error (--error-exitcode): a failed run of this step alone that shows
        # no error and a passed check is not clean either.
        c.status = "incomplete"
        c.note = f"exit status {r.rc} with no error counted"
    else:
        c.status = "clean"
    return c


def cells(runs: list[Run]) -> list[Cell]:
    out: list[Cell] = []
    keys = sorted({(r.tool, r.d, s, variant_of(r)) for r in runs for s in r.steps}, key=lambda k: (k[0], k[2], k[3], k[1]))
    for tool, d, base, variant in keys:
        step = f"{base} `{variant}`" if variant else base
        mine = [r for r in runs if r.tool == tool and r.d == d and base in r.steps and variant_of(r) == variant]
        ran = [r for r in mine if not r.skipped]
        if not ran:
            out.append(Cell(tool, step, d, "skipped", note=mine[0].skipped))
            continue
        # device-run runs some steps (10, 10b) alone in several shapes at one d: every shape counts, not
        # only the last (which hid an error of an earlier shape behind a clean 0).
        shapes = list(dict.fromkeys(r.shape for r in ran))
        per = [shape_cell(tool, step, base, d, [r for r in ran if r.shape == sh]) for sh in shapes]
        c = min(per, key=lambda x: WORST.index(x.status))  # the worst shape gives the status and verdict
        c = Cell(tool, step, d, c.status, sum(x.errors for x in per), sum(x.warnings for x in per), c.verdict,
                 next((x.rc for x in per if x.rc != 0), per[-1].rc), all(x.alone for x in per),
                 sum(x.seconds or 0 for x in per) if any(x.seconds is not None for x in per) else None,
                 "; ".join(dict.fromkeys(x.note for x in per if x.note)))
        out.append(c)
    return out


def dims_text(ds: list[int]) -> str:
    return ", ".join(str(d) for d in sorted(ds))


def cell_text(cs: list[Cell]) -> str:
    """One table cell: a step under one tool, over its head dims."""
    if not cs:
        return "–"
    by = lambda st: [c.d for c in cs if c.status == st]  # noqa: E731
    parts = []
    if by("errors"):
        n = sum(c.errors for c in cs)
        parts.append(f"**{n} error{'s' if n != 1 else ''}** (d {dims_text(by('errors'))})")
    if by("check-failed"):
        parts.append(f"**check failed** (d {dims_text(by('check-failed'))})")
    if by("incomplete"):
        parts.append(f"incomplete (d {dims_text(by('incomplete'))})")
    if by("clean"):
        parts.append(f"0 (d {dims_text(by('clean'))})")
    for st, word in (("skipped", "not run, time budget"), ("no-run", "not run")):
        if by(st):
            parts.append(f"{word} (d {dims_text(by(st))})")
    w = sum(c.warnings for c in cs)
    if w:
        parts.append(f"{w} warning{'s' if w != 1 else ''}")
    return "; ".join(parts)


def markdown(runs: list[Run], cs: list[Cell], title: str) -> str:
    tools = list(dict.fromkeys(r.tool for r in runs))
    steps = sorted({c.step for c in cs})
    shapes = sorted({r.shape for r in runs if r.shape})
    lines = [f"# {title}", ""]
    if shapes:
        lines += [f"Problem (each run): `{'`, `'.join(shapes)}`, every GPU step forward, and backward where it has one.", ""]
    lines += ["Errors reported by each compute-sanitizer tool in each step's kernels, and the head dims d at which "
              "the step ran to its oracle verdict under the tool (0 (d …): no error at those d).", ""]
    lines.append("| step | " + " | ".join(tools) + " |")
    lines.append("|---|" + "---|" * len(tools))
    for s in steps:
        row = [cell_text([c for c in cs if c.step == s and c.tool == t]) for t in tools]
        lines.append(f"| {s} | " + " | ".join(row) + " |")
    lines.append("")
    notes = []
    for r in runs:
        if r.skipped:
            continue
        errors, _ = r.counts()
        if errors.get(UNATTRIBUTED):
            notes.append(f"- {r.tool} d={r.d} ({','.join(r.steps)}): {errors[UNATTRIBUTED]} error(s) name no step's "
                         "kernel (host API errors, or more than the tool printed); see the log.")
        if r.rc is None:
            notes.append(f"- {r.tool} d={r.d} ({','.join(r.steps)}): the log ends inside this run.")
        elif r.timed_out:
            notes.append(f"- {r.tool} d={r.d} ({','.join(r.steps)}): timed out after {r.seconds} s.")
    for c in cs:
        if c.note and c.status not in ("skipped",):
            notes.append(f"- {c.tool} d={c.d} {c.step}: {c.note}.")
    total = sum(r.seconds or 0 for r in runs)
    lines.append(f"{sum(1 for r in runs if not r.skipped)} compute-sanitizer runs, {total} s in all; "
                 f"{sum(1 for r in runs if r.skipped)} left out for the time budget.")
    if notes:
        lines += ["", "Notes:", ""] + list(dict.fromkeys(notes))
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", help="the sanitize log of tools/device-run")
    ap.add_argument("--md", help="write the Markdown table here")
    ap.add_argument("--json", help="write every (tool, step, d) and every run here, as JSON")
    ap.add_argument("--title", default="compute-sanitizer over the GPU steps")
    a = ap.parse_args(argv)
    try:
        with open(a.log, encoding="utf-8", errors="replace") as f:
            runs = parse(f.readlines())
    except OSError as e:
        raise flr.Refused(f"cannot read {a.log}: {e.strerror}") from None
    if not runs:
        print(f"{a.log}: no '### sanitize' runs in it", file=sys.stderr)
        return 2
    cs = cells(runs)
    md = markdown(runs, cs, a.title)
    if a.md:
        flr.write_text(a.md, md)
    if a.json:
        doc = {
            "title": a.title,
            "cells": [c.__dict__ for c in cs],
            "runs": [{"tool": r.tool, "d": r.d, "steps": r.steps, "shape": r.shape, "rc": r.rc, "seconds": r.seconds,
                      "skipped": r.skipped, "errors": r.counts()[0], "warnings": r.counts()[1],
                      "summary_errors": r.summary_errors, "verdicts": r.verdicts} for r in runs],
        }
        flr.write_text(a.json, json.dumps(doc, indent=1) + "\n")
    print(md, end="")
    return 0


if __name__ == "__main__":
    sys.exit(flr.run_main("sanitize_table.py", lambda: main(sys.argv[1:])))
