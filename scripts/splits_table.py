#!/usr/bin/env python3
"""flashladder — scripts/splits_table.py: step 10's table of key splits over issue 17's decode sweep.

    scripts/splits_table.py            rewrite the block in steps/10_split_kv/README.md
    scripts/splits_table.py --check    exit 1 when the block differs from what the build's rule gives
                                       (exit 77, "SKIPPED: why", when the build cannot say)
    scripts/splits_table.py --print    print the block, change nothing
    --build DIR                        the build folder (default: build/ beside scripts/)

A file it cannot read or write, or output that never reached stdout, is one line and exit 2.

The numbers are the rule's own: `flashladder_launches --splits` (app/launch_probe.cpp) runs step 10's
host code against a stand-in CUDA runtime of 132 SMs (an H100 or H200) and reads S from the workspace
the step asks for. So the README's table cannot drift from `splits()` in attention.cu: change the rule,
rebuild, run this. The block sits between `<!-- fl:splits -->` and `<!-- /fl:splits -->`.
"""
from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fl_results as flr  # noqa: E402  (run_main, read_text, write_text: a lost file or output is one line, exit 2)

SKIP = 77
BEGIN, END = "<!-- fl:splits -->", "<!-- /fl:splits -->"
NKS = (1024, 8192, 32768, 131072)


def rows_from_probe(exe: str) -> list[dict]:
    if not os.path.exists(exe):
        raise FileNotFoundError(f"{exe} is missing: it is built with CUDA (tools/build)")
    out = subprocess.run([exe, "--splits"], capture_output=True, text=True)
    if out.returncode != 0:
        raise flr.Refused(f"{exe} --splits failed (exit {out.returncode}): {out.stderr.strip()}")
    try:
        recs = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    except json.JSONDecodeError as e:
        raise flr.Refused(f"{exe} --splits printed a line that is not JSON: {e}") from None
    if not recs:
        raise flr.Refused(f"{exe} --splits printed nothing")
    return recs


def block(recs: list[dict]) -> str:
    by = {}
    for r in recs:
        by.setdefault((r["B"], r["H_kv"], r["Nq"]), {})[r["Nk"]] = r["splits"]
    sms = {r["sms"] for r in recs}
    lines = [BEGIN,
             "<!-- Written by scripts/splits_table.py from `flashladder_launches --splits` (step 10's own rule on a",
             "     stand-in of " + "/".join(str(s) for s in sorted(sms)) + " SMs); rebuild and run it, do not edit. -->",
             "| $B$ | $H_{kv}$ | $N_q$ | tiles unsplit | " + " | ".join(f"$N_k$ = {nk}" if i == 0 else str(nk)
                                                          for i, nk in enumerate(NKS)) + " |",
             "|--:|--:|--:|--:|" + "--:|" * len(NKS)]
    for (B, H_kv, Nq), row in sorted(by.items()):
        G = 32 // H_kv
        tiles = B * H_kv * math.ceil(G * Nq / 16)  # 16-row tiles: a group's G·Nq rows (≤ 16 here)
        lines.append(f"| {B} | {H_kv} | {Nq} | {tiles} | " + " | ".join(str(row.get(nk, "–")) for nk in NKS) + " |")
    lines.append(END)
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--root", default=here)
    ap.add_argument("--build", default=None, help="the build folder (default: <root>/build)")
    # One or the other: with both, --print won and the check never ran (exit 0 on a stale README).
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="compare, change nothing; exit 1 when stale")
    mode.add_argument("--print", action="store_true", help="print the block, change nothing")
    args = ap.parse_args()
    build = args.build or os.path.join(args.root, "build")
    try:
        recs = rows_from_probe(os.path.join(build, "flashladder_launches"))
    except FileNotFoundError as e:
        print(f"SKIPPED: splits_table: {e}")
        return SKIP
    want = block(recs)
    if args.print:
        print(want)
        return 0
    path = os.path.join(args.root, "steps", "10_split_kv", "README.md")
    text = flr.read_text(path)  # a --root without the step's README: one line, exit 2
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        print(f"splits_table: {os.path.relpath(path, args.root)} has no {BEGIN} … {END} block")
        return 1
    new = pattern.sub(lambda _: want, text, count=1)
    if args.check:
        if new != text:
            sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True), path, "the build"))
            print(f"splits_table: {os.path.relpath(path, args.root)} is stale: run scripts/splits_table.py")
            return 1
        return 0
    if new != text:
        flr.write_text(path, new)
        print(f"splits_table: {os.path.relpath(path, args.root)} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(flr.run_main("splits_table", main))
