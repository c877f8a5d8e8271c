#!/usr/bin/env python3
"""flashladder — scripts/resources_table.py: the registers and spills of a step's kernels, from ptxas.

    scripts/resources_table.py 08a 08b           compile each step with nvcc -Xptxas -v (about a minute
                                                 each on 2 cores) and rewrite its README's resources block
    scripts/resources_table.py --logs DIR 08a    read DIR/<folder>.log (the output of that nvcc command)
                                                 instead of compiling
    scripts/resources_table.py --check …         exit 1 when a README's block differs from what ptxas says
    scripts/resources_table.py --print …         print the blocks, change nothing

The block sits between `<!-- fl:resources -->` and `<!-- /fl:resources -->` in steps/<folder>/README.md;
the prose around it (why the numbers are what they are) belongs to the README's authors. The compile is
the one the build does for sm_90a (CMakeLists.txt), so the numbers are the build's.
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fl_results as flr  # noqa: E402

BEGIN, END = "<!-- fl:resources -->", "<!-- /fl:resources -->"
NVCC = ["nvcc", "-std=c++17", "-I.", "-I/usr/include/eigen3", "--expt-relaxed-constexpr",
        "-gencode=arch=compute_90a,code=sm_90a", "-DFLASHLADDER_HAVE_CUDA", "-O3", "-DNDEBUG",
        "-Xptxas=-warn-spills", "-Xptxas", "-v", "-c"]
TYPES = {"__half": "fp16", "__nv_bfloat16": "bf16"}


def ptxas_log(root: str, step, logs: str | None) -> str:
    if logs:
        with open(os.path.join(logs, step.folder + ".log"), encoding="utf-8") as f:
            return f.read()
    src = os.path.relpath(step.source(root), root)
    r = subprocess.run(NVCC + [src, "-o", os.devnull], cwd=root, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"nvcc {src} failed:\n{r.stderr}")
    return r.stdout + r.stderr


def demangle(names: list[str]) -> list[str]:
    r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return r.stdout.splitlines() if r.returncode == 0 else names


def kernels(log: str) -> list[tuple[str, str, str, int, int]]:
    """(kernel, type, d, registers, spilled bytes stored) per entry function, sorted."""
    found, cur = {}, None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            cur = m.group(1)
            found[cur] = [0, 0]
            continue
        m = re.search(r"(\d+) bytes spill stores", line)
        if m and cur:
            found[cur][1] = int(m.group(1))
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            found[cur][0] = int(m.group(1))
    rows = []
    for mangled, name in zip(found, demangle(list(found))):
        m = re.match(r"void (?:[\w:]+::)?(\w+)<([^>]*)>", name)
        kernel, args = (m.group(1), [a.strip() for a in m.group(2).split(",")]) if m else (name, [])
        t = next((TYPES[a] for a in args if a in TYPES), "–")
        d = next((a for a in args if a.isdigit()), "any")
        rows.append((kernel, t, d, *found[mangled]))
    return sorted(rows, key=lambda r: (r[0], r[1], int(r[2]) if r[2].isdigit() else 0))


def block(rows) -> str:
    out = [BEGIN, "<!-- Written by scripts/resources_table.py from ptxas -v (nvcc, sm_90a, -O3); run it, do not edit. -->",
           "", "| kernel | type | d | registers | spill stores |", "|---|---|--:|--:|--:|"]
    for kernel, t, d, regs, spill in rows:
        out.append(f"| `{kernel}` | {t} | {d} | {regs} | {f'{spill} bytes' if spill else 0} |")
    return "\n".join(out + ["", END])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("steps", nargs="+", help="step numbers or folders")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--logs", help="a folder of <folder>.log files from nvcc -Xptxas -v")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--print", action="store_true")
    args = ap.parse_args()
    steps = {s.number: s for s in flr.parse_ladder(args.root)}
    steps.update({s.folder: s for s in list(steps.values())})
    rc = 0
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    for name in args.steps:
        s = steps.get(name)
        if s is None or s.where != "gpu" or not s.source(args.root):
            print(f"resources_table: '{name}' is not a GPU step with a source")
            return 2
        want = block(kernels(ptxas_log(args.root, s, args.logs)))
        if args.print:
            print(f"{s.folder}:\n{want}\n")
            continue
        path = os.path.join(args.root, "steps", s.folder, "README.md")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if BEGIN not in text:
            print(f"resources_table: {os.path.relpath(path, args.root)} has no {BEGIN} block")
            rc = 1
            continue
        new = pattern.sub(lambda _: want, text, count=1)
        if args.check:
            if new != text:
                sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True), path, "ptxas"))
                rc = 1
        elif new != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            print(f"resources_table: {os.path.relpath(path, args.root)} rewritten")
    return rc


if __name__ == "__main__":
    sys.exit(main())
