#!/usr/bin/env python3
"""flashladder — scripts/same_ptx.py: do two kernels compile to the same PTX?

A variant step says "the plain problem runs its base step's kernel" (09d against 09c, 08j against
08i). Timing can only say "within noise"; the compiler can say "the same instructions". This compiles
two sources to PTX for sm_90a, with the build's own nvcc flags, and compares the kernels named by
--pair instruction for instruction, after taking out what cannot matter: the kernels' own names and
namespaces, line-number directives, the numbering of virtual registers and of labels. A kernel's
parameter list may grow (an unread VariantArgs); its body may not change.

    scripts/same_ptx.py A.cu B.cu --pair 'PATTERN_A=PATTERN_B' [--pair …] [--nvcc PATH]

A source may be REV:path (a file as git holds it at a revision), so a change can be checked against
the commit before it. A pattern is a regular expression over the demangled kernel name, which must
match exactly one kernel of its file; PATTERN_B may use PATTERN_A's groups (\\1, \\2, …), and each
kernel of A that PATTERN_A matches is paired with the one kernel of B its expansion matches. Example
(09d's plain kernel is 09c's; every variant kernel of 09d unchanged by the last commit, whose kWindow
bit is 1):

    scripts/same_ptx.py steps/09c_tma_warpspec/attention.cu steps/09d_variants/attention.cu \\
        --pair 's09c::backward_kernel<(\\w+), (\\d+)>=s09d::backward_kernel<\\1, \\2, 0>'

Exit status: 0 every pair the same, 1 a pair differs (the first lines that differ are printed) or a
pattern matched no kernel or more than one, 2 a source could not be read (no such file, or a REV:path
git does not hold) or a compile failed.
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def flags_from_build() -> list[str]:
    """The -D/-I/-isystem/-std flags nvcc gets for a step in build/compile_commands.json, if there is one."""
    cc = os.path.join(ROOT, "build", "compile_commands.json")
    keep = []
    if os.path.exists(cc):
        with open(cc, encoding="utf-8") as f:
            for e in json.load(f):
                if e["file"].endswith(".cu") and "/steps/" in e["file"]:
                    for a in shlex.split(e["command"]):
                        if a.startswith(("-D", "-I", "-isystem", "-std", "--expt-")):
                            keep.append(a)
                    break
    return keep or ["-DFLASHLADDER_HAVE_CUDA", f"-I{ROOT}", "-isystem=/usr/include/eigen3", "-std=c++17",
                    "--expt-relaxed-constexpr"]


class SourceError(Exception):
    """A source that cannot be had: a REV:path git does not hold, or a path that is no file."""


def source(spec: str, tmp: str) -> str:
    """A path, or REV:path written out of git into tmp (the includes resolve against the checkout).
    SourceError, naming the source, when there is none (a CalledProcessError traceback used to end the
    run with exit 1, which here means "a pair differs")."""
    if ":" in spec and not os.path.exists(spec):
        rev, path = spec.split(":", 1)
        try:
            r = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:{path}"], capture_output=True, text=True)
        except OSError as e:
            raise SourceError(f"cannot run git for {spec}: {e.strerror}") from None
        if r.returncode != 0:
            raise SourceError(f"{spec}: git show failed: {r.stderr.strip()}")
        text = r.stdout
        out = os.path.join(tmp, re.sub(r"\W", "_", spec) + ".cu")
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
        return out
    if not os.path.isfile(spec):
        raise SourceError(f"cannot read {spec}: no such file")
    return spec


def ptx(nvcc: str, src: str, out: str) -> str:
    cmd = [nvcc, *flags_from_build(), "-O3", "-DNDEBUG", "-arch=sm_90a", "-x", "cu", "-ptx", src, "-o", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        print(f"same_ptx: compiling {src} failed (exit {r.returncode}): {' '.join(cmd)}")
        sys.exit(2)
    with open(out, encoding="utf-8") as f:
        return f.read()


def demangle(names: list[str]) -> dict[str, str]:
    if not names:
        return {}
    r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
    return dict(zip(names, r.stdout.split("\n")))


def kernels(text: str) -> dict[str, list[str]]:
    """Demangled name → the body's lines, normalised (see the module's docstring)."""
    starts = [m.start() for m in re.finditer(r"^\.visible \.entry |^\.func |^\.weak |^\.global ", text, re.M)]
    starts.append(len(text))
    raw = {}
    for a, b in zip(starts, starts[1:]):
        m = re.match(r"\.visible \.entry (\S+)\(", text[a:b])
        if m:
            raw[m.group(1)] = text[a:b].partition("\n)\n")[2]
    names = demangle(list(raw))
    out = {}
    for mangled, body in raw.items():
        body = body.replace(mangled, "KERNEL")
        body = re.sub(r"_ZN2fl4s\w{3}", "_ZN2fl4sSTP", body)  # the step's namespace (s09c, s09d: 4 letters)
        body = re.sub(r"\$L__BB\d+_", "$L__BB_", body)
        regs: dict[str, str] = {}

        def reg(m: re.Match) -> str:
            return regs.setdefault(m.group(0), f"%v{len(regs)}")
        lines = []
        for line in body.split("\n"):
            s = line.strip()
            if not s or s.startswith((".loc", ".file", ".reg", "// .globl", "$L__tmp")):
                continue
            lines.append(re.sub(r"%(?:rd|rs|fd|hh|r|f|p|h)\d+", reg, line))
        out[names[mangled]] = lines
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("a", help="source A (path or REV:path)")
    ap.add_argument("b", help="source B (path or REV:path)")
    ap.add_argument("--pair", action="append", required=True, metavar="PATTERN_A=PATTERN_B",
                    help="kernels to compare (regular expressions over demangled names; B may use A's groups)")
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc"))
    args = ap.parse_args()
    if not os.path.exists(args.nvcc):
        print(f"same_ptx: no nvcc at {args.nvcc} (set --nvcc or NVCC)")
        return 2
    for pair in args.pair:  # refused before anything is compiled
        pa, eq, pb = pair.partition("=")
        if not eq or not pa or not pb:
            print(f"same_ptx: --pair {pair!r} is not PATTERN_A=PATTERN_B (both non-empty, one '=' between)")
            return 1
        try:
            re.compile(pa)
        except re.error as e:
            print(f"same_ptx: --pair {pair!r}: PATTERN_A is not a regular expression: {e}")
            return 1
    with tempfile.TemporaryDirectory(prefix="same-ptx-") as tmp:
        try:  # both sources before either compiles: a wrong second one is not found a minute later
            src_a, src_b = source(args.a, tmp), source(args.b, tmp)
        except SourceError as e:
            print(f"same_ptx: {e}")
            return 2
        ka = kernels(ptx(args.nvcc, src_a, os.path.join(tmp, "a.ptx")))
        kb = kernels(ptx(args.nvcc, src_b, os.path.join(tmp, "b.ptx")))
    bad = 0
    for pair in args.pair:
        pa, _, pb = pair.partition("=")
        matched = [(n, re.search(pa, n)) for n in ka]
        matched = [(n, m) for n, m in matched if m]
        if not matched:
            print(f"NO KERNEL: {pa!r} matches none of A's {len(ka)} kernels")
            bad += 1
            continue
        for name_a, m in matched:
            try:
                want = re.sub(r"\\(\d)", lambda g: re.escape(m.group(int(g.group(1))) or ""), pb)  # A's groups, literally
                hits = [n for n in kb if re.search(want, n)]
            except (re.error, IndexError) as e:
                print(f"same_ptx: --pair {pair!r}: PATTERN_B, with A's groups put in, is not a regular expression "
                      f"or names a group A does not have: {e}")
                return 1
            if len(hits) != 1:
                print(f"NO PAIR: {want!r} matches {len(hits)} of B's kernels (for {name_a})")
                bad += 1
                continue
            la, lb = ka[name_a], kb[hits[0]]
            short_a, short_b = name_a.split("(")[0], hits[0].split("(")[0]
            if la == lb:
                print(f"same   {short_a}  ==  {short_b}  ({len(la)} lines of PTX)")
            else:
                diff = [d for d in difflib.unified_diff(la, lb, "A", "B", lineterm="", n=2)][:40]
                print(f"DIFFER {short_a}  !=  {short_b}  ({len(la)} and {len(lb)} lines); first differences:")
                print("\n".join(diff))
                bad += 1
    print(f"same_ptx: {'every pair the same' if not bad else f'{bad} pair(s) differ or unmatched'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
