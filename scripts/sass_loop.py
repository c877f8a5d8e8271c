#!/usr/bin/env python3
"""flashladder — scripts/sass_loop.py: how many instructions does a kernel's hot loop issue?

A Hopper kernel that waits on its own instruction stream (a profile shows the tensor cores idle at
the same issue rate as a faster kernel's, with more instructions issued) is made faster by issuing
fewer. This counts them without a GPU: it compiles step sources to cubins for sm_90a with the build's
nvcc flags, disassembles them (cuobjdump -sass), finds in each kernel matching --kernel the innermost
loop that holds at least --min-wgmma HGMMA instructions, and counts that loop's body by opcode.

    scripts/sass_loop.py SRC [SRC …] [--kernel REGEX] [--sed OLD=NEW] [--classes R2UR,BSSY,…] [--out F.md]

Each SRC may be REV:path (git) as in scripts/same_ptx.py; --sed applies a literal substitution to
every source before compiling (e.g. 'if (need_mask)=if (false && need_mask)' to count the loop as a
tile with no mask runs it). The counts are static: one pass through the loop's body, every branch
included, the instructions a warp issues per iteration where no branch is skipped. --out writes the
table to a page with the sources, commit and nvcc version, so a number quoted from it is reproducible.

cuobjdump comes with the CUDA toolkit (/usr/local/cuda/bin), or from PyPI's nvidia-cuda-cuobjdump
wheel (found in this interpreter's site-packages); set CUOBJDUMP to name another. Exit status: 0, or
1 with the reason (no cuobjdump, a source that cannot be read, a compile failed, no kernel matched).
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import same_ptx  # noqa: E402  (the build's flags, REV:path sources, c++filt)

ROOT = same_ptx.ROOT
DEFAULT_CLASSES = "HGMMA,R2UR,UMOV,UIADD3,BSSY,BRA,ISETP,MUFU,FFMA,FMUL,LDL,STL,SHFL"


def find_cuobjdump() -> str | None:
    if os.environ.get("CUOBJDUMP"):
        return os.environ["CUOBJDUMP"]
    for c in (shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"):
        if c and os.path.exists(c):
            return c
    for sp in site.getsitepackages() + [site.getusersitepackages()]:
        for c in glob.glob(os.path.join(sp, "nvidia", "cu*", "bin", "cuobjdump")):
            return c
    return None


def functions(sass: str) -> dict[str, list[tuple[int, str]]]:
    parts = re.split(r"\n\s*Function : (\S+)\n", sass)
    out = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        ins = []
        for line in body.split("\n"):
            m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
            if m:
                ins.append((int(m.group(1), 16), m.group(2).strip()))
        out[name] = ins
    return out


def opcode(text: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0]


def inner_loop(ins: list[tuple[int, str]], min_wgmma: int) -> list[str] | None:
    """The shortest backward-branch span holding at least min_wgmma HGMMA: the loop a warp iterates."""
    at = {a: i for i, (a, _) in enumerate(ins)}
    best = None
    for i, (a, text) in enumerate(ins):
        m = re.search(r"BRA\s+(?:\S+\s+)?0x([0-9a-f]+)", text)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target < a and target in at:
            body = [t for _, t in ins[at[target]:i + 1]]
            if sum(opcode(t) == "HGMMA" for t in body) >= min_wgmma and (best is None or len(body) < len(best)):
                best = body
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("sources", nargs="+", help="step sources (path or REV:path)")
    ap.add_argument("--kernel", default="backward_kernel|attention_kernel",
                    help="regular expression over the demangled kernel names (default: %(default)s)")
    ap.add_argument("--min-wgmma", type=int, default=8, help="HGMMA a loop must hold to count (default 8)")
    ap.add_argument("--sed", action="append", default=[], metavar="OLD=NEW", help="literal substitution before compiling")
    ap.add_argument("--classes", default=DEFAULT_CLASSES, help="opcodes to give a column each")
    ap.add_argument("--out", help="write the table to this markdown page")
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc"))
    a = ap.parse_args()
    try:
        re.compile(a.kernel)
    except re.error as e:
        print(f"sass_loop: --kernel {a.kernel!r} is not a regular expression: {e}")
        return 1
    for rule in a.sed:
        if "=" not in rule or not rule.partition("=")[0]:
            print(f"sass_loop: --sed {rule!r} is not OLD=NEW (OLD non-empty)")
            return 1
    tool = find_cuobjdump()
    if not tool:
        print("sass_loop: no cuobjdump (CUDA toolkit's bin/, or `pip install nvidia-cuda-cuobjdump`; or set CUOBJDUMP)")
        return 1
    classes = [c for c in a.classes.split(",") if c]
    rows = []
    with tempfile.TemporaryDirectory(prefix="sass-loop-") as tmp:
        for n, spec in enumerate(a.sources):
            try:
                src = same_ptx.source(spec, tmp)
            except same_ptx.SourceError as e:  # a REV:path git lacks, a missing file: was a traceback
                print(f"sass_loop: {e}")
                return 1
            if a.sed:
                with open(src, encoding="utf-8") as f:
                    text = f.read()
                for rule in a.sed:
                    old, _, new = rule.partition("=")
                    if old not in text:
                        print(f"sass_loop: --sed {rule!r}: {old!r} is not in {spec}")
                        return 1
                    text = text.replace(old, new)
                src = os.path.join(tmp, f"sed{n}.cu")
                with open(src, "w", encoding="utf-8") as f:
                    f.write(text)
            cubin = os.path.join(tmp, f"{n}.cubin")
            cmd = [a.nvcc, *same_ptx.flags_from_build(), "-O3", "-DNDEBUG", "-arch=sm_90a", "-x", "cu", "-cubin",
                   src, "-o", cubin]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                sys.stderr.write(r.stderr)
                print(f"sass_loop: compiling {spec} failed (exit {r.returncode})")
                return 1
            r = subprocess.run([tool, "-sass", cubin], capture_output=True, text=True)
            if r.returncode != 0:
                sys.stderr.write(r.stderr)
                print(f"sass_loop: {tool} -sass {spec}'s cubin failed (exit {r.returncode})")
                return 1
            sass = r.stdout
            funcs = functions(sass)
            names = same_ptx.demangle(list(funcs))
            for mangled, ins in funcs.items():
                name = names[mangled].split("(")[0]
                if not re.search(a.kernel, name):
                    continue
                body = inner_loop(ins, a.min_wgmma)
                if body is None:
                    continue
                c = collections.Counter(opcode(t) for t in body)
                rows.append([spec, name.replace("void ", ""), str(len(ins)), str(len(body))] +
                            [str(c.get(k, 0)) for k in classes])
    if not rows:
        print(f"sass_loop: no kernel matching {a.kernel!r} has a loop with {a.min_wgmma} or more HGMMA")
        return 1
    head = ["source", "kernel", "kernel instructions", "loop body"] + classes
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "--:|" * (len(head) - 2)]
    lines += ["| " + " | ".join([f"`{r[0]}`", f"`{r[1]}`"] + r[2:]) + " |" for r in rows]
    table = "\n".join(lines)
    print(table)
    if a.out:
        nvcc = next((l for l in subprocess.run([a.nvcc, "--version"], capture_output=True, text=True).stdout.split("\n")
                     if "release" in l), "nvcc (version unknown)").strip()
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        argv, kept = sys.argv[1:], []
        for i, x in enumerate(argv):  # the command, --out and its value left out (added once at the end)
            if x == "--out" or x.startswith("--out=") or (i > 0 and argv[i - 1] == "--out"):
                continue
            kept.append(f"'{x}'" if re.search(r"[\s|()&*\[\]\\]", x) else x)
        cmdline = " ".join(["scripts/sass_loop.py"] + kept + ["--out", a.out])
        page = (f"# SASS of the hot loops: instructions per iteration, counted without a GPU\n\n"
                f"<!-- Written by scripts/sass_loop.py; run it, do not edit. -->\n\n"
                f"`{cmdline}`\n\n"
                f"Commit {commit}{'-dirty' if dirty else ''}; {nvcc}; sm_90a; cuobjdump -sass. Static counts: one pass "
                f"through the innermost loop holding at least {a.min_wgmma} HGMMA, every branch included"
                + (f"; sources changed by --sed {', '.join(repr(s) for s in a.sed)}" if a.sed else "") + ".\n\n"
                + table + "\n")
        try:
            with open(a.out, "w", encoding="utf-8") as f:
                f.write(page)
        except OSError as e:
            print(f"sass_loop: could not write {a.out}: {e}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
