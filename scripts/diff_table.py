#!/usr/bin/env python3
"""flashladder — scripts/diff_table.py: the changed lines of every step against its base, from the sources.

    scripts/diff_table.py           write docs/diff_lines.md, and the diff-count block of every step README
    scripts/diff_table.py --check   exit 1 (and show the difference) when either is stale, or when a pair
                                    over the limit has no reason on its step's page
    scripts/diff_table.py --print   print the table, change nothing (--check and --print exclude each other)

A pair is (the step's base, the step), the base as steps/ladder.cpp names it (`flashladder diff N` shows the
same diff). Its count is the + and − lines of `diff -u`, comments included: what a reader holding both
files has to read. A step that adds the backward and runs its base's forward (Step::diff_whole: step 09)
is counted whole, as added lines.

The limit (issue 14): 150 changed lines per pair from 04 on. A pair over it must say why on its step's page:
its README holds a paragraph between `<!-- fl:diff-why -->` and `<!-- /fl:diff-why -->`.

In each step README the block between `<!-- fl:diff-lines -->` and `<!-- /fl:diff-lines -->` is written here;
the rest of the README belongs to its authors.
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fl_results as flr  # noqa: E402

LIMIT = 150
FIRST_LIMITED = "05"  # the first step whose diff against its base (04→05) is held to LIMIT
TABLE = os.path.join("docs", "diff_lines.md")
BEGIN, END = "<!-- fl:diff-lines -->", "<!-- /fl:diff-lines -->"
WHY = re.compile(r"<!-- fl:diff-why -->(.+?)<!-- /fl:diff-why -->", re.S)


def count(old: str, new: str) -> tuple[int, int]:
    """(+ lines, − lines) of `diff -u old new`, the two file-name lines and the lab marks not counted."""
    r = flr.diff_u(old, new)  # without the lab marks (// LAB:…): they are not the step's idea
    if r.returncode not in (0, 1):
        raise RuntimeError(f"diff -u {old} {new} failed: {r.stderr.strip()}")
    added = removed = 0
    in_hunks = False
    for line in r.stdout.splitlines():
        # Only the two file-name lines before the first hunk are skipped: inside a hunk, an added line
        # "++c;" shows as "+++c;" and a removed "--b;" as "---b;", and they count.
        if line.startswith("@@"):
            in_hunks = True
            continue
        if not in_hunks:
            continue
        if line.startswith("+"):
            added += 1
        elif line.startswith("-"):
            removed += 1
    return added, removed


def pairs(root: str):
    """(base, step, added, removed, whole) for every step with a base and both sources."""
    steps = flr.parse_ladder(root)
    by_number = {s.number: s for s in steps}
    for s in steps:
        base = by_number.get(s.base)
        if base is None:
            continue
        src, bsrc = s.source(root), base.source(root)
        if not src or not bsrc:
            continue
        whole = s.diff_whole(steps)
        added, removed = count(os.devnull if whole else bsrc, src)
        yield base, s, added, removed, whole


def limited(s, steps) -> bool:
    order = [x.number for x in steps]
    return order.index(s.number) >= order.index(FIRST_LIMITED)


def readme(root: str, s) -> str:
    return os.path.join(root, "steps", s.folder, "README.md")


def read(path: str) -> str:
    if not os.path.exists(path):
        return ""
    return flr.read_text(path)


def reason(root: str, s) -> str | None:
    m = WHY.search(read(readme(root, s)))
    return " ".join(m.group(1).split()) if m else None


def table(root: str) -> str:
    steps = flr.parse_ladder(root)
    out = ["# Changed lines per step {#diff_lines}", "",
           "<!-- Written by scripts/diff_table.py from the step sources; run it, do not edit this page. -->", "",
           f"Every step against its base (the step its ladder entry names; `flashladder diff N` shows the same "
           f"diff): the + and − lines of `diff -u`, comments included. From 04→05 on, a pair over {LIMIT} lines "
           "says why on its step's page.", "",
           "| base → step | added | removed | changed | |", "|---|--:|--:|--:|---|"]
    for base, s, added, removed, whole in pairs(root):
        note = ""
        if whole:
            note = f"the backward alone, shown whole ({s.folder} runs {base.folder}'s forward)"
        elif limited(s, steps) and added + removed > LIMIT:
            why = reason(root, s)
            note = f"over {LIMIT}: " + (why if why else "**no reason on the step's page**")
        out.append(f"| {base.number} → {s.number} | {added} | {removed} | {added + removed} | {note} |")
    return "\n".join(out) + "\n"


def block(base, s, added: int, removed: int, whole: bool) -> str:
    if whole:
        text = (f"**Lines against {base.folder}.** This step runs {base.folder}'s forward and adds the "
                f"backward: `flashladder diff {s.number}` shows its source whole, {added} lines.")
    else:
        text = (f"**Lines against {base.folder}.** `flashladder diff {s.number}`: {added} lines added, "
                f"{removed} removed ({added + removed} changed, comments included).")
    return f"{BEGIN}\n{text}\n{END}"


def updated_readmes(root: str) -> dict[str, tuple[str, str]]:
    """path → (current text, text with its diff-lines block rewritten), for READMEs that have the block."""
    out = {}
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    for base, s, added, removed, whole in pairs(root):
        path = readme(root, s)
        text = read(path)
        if BEGIN not in text:
            continue
        out[path] = (text, pattern.sub(lambda _: block(base, s, added, removed, whole), text, count=1))
    return out


def problems(root: str) -> list[str]:
    steps = flr.parse_ladder(root)
    bad = []
    for base, s, added, removed, whole in pairs(root):
        if not whole and limited(s, steps) and added + removed > LIMIT and not reason(root, s):
            bad.append(f"{base.number} → {s.number}: {added + removed} changed lines (over {LIMIT}) and "
                       f"steps/{s.folder}/README.md gives no reason between <!-- fl:diff-why --> markers")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # One or the other: with both, --print used to win and the check never ran (exit 0 on a stale table).
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 when the table or a README block is stale")
    mode.add_argument("--print", action="store_true", help="print the table and change nothing")
    args = ap.parse_args()
    root = args.root
    want = table(root)
    if args.print:
        sys.stdout.write(want)
        return 0
    path = os.path.join(root, TABLE)
    readmes = updated_readmes(root)
    if args.check:
        rc = 0
        have = read(path)
        if have != want:
            sys.stdout.writelines(difflib.unified_diff(have.splitlines(True), want.splitlines(True), path, "wanted"))
            print(f"{TABLE} is stale: run scripts/diff_table.py")
            rc = 1
        for p, (old, new) in readmes.items():
            if old != new:
                sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), p, "wanted"))
                print(f"{os.path.relpath(p, root)}: its diff-lines block is stale: run scripts/diff_table.py")
                rc = 1
        for b in problems(root):
            print(b)
            rc = 1
        return rc
    flr.write_text(path, want)
    for p, (old, new) in readmes.items():
        if old != new:
            flr.write_text(p, new)
    for b in problems(root):
        print("warning:", b)
    return 0


if __name__ == "__main__":
    sys.exit(flr.run_main("diff_table", main))
