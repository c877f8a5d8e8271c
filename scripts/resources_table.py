#!/usr/bin/env python3
"""flashladder — scripts/resources_table.py: what each GPU step's kernels use, from the build.

    scripts/resources_table.py                   rewrite the resources block of every GPU step's README
    scripts/resources_table.py 08h 09c           … of these steps only
    scripts/resources_table.py --check           exit 1 when a block differs from what the build says
                                                 (exit 77, "SKIPPED: why", when the build cannot say)
    scripts/resources_table.py --print 08h       print the blocks, change nothing
    --build DIR                                  the build folder (default: build/ beside scripts/)

The block sits between `<!-- fl:resources -->` and `<!-- /fl:resources -->` in steps/<folder>/README.md;
the prose around it (why the numbers are what they are) belongs to the README's authors. One row per
kernel, storage type and head dim, from three things a CUDA build already has, so nothing is compiled
again (a compile of every step with `nvcc -Xptxas -v` takes 10–15 minutes on two cores; reading the
build takes a second):

  - ptxas's own report (registers, spill stores, static shared memory), kept beside each step's object
    as <object>.ptxas.txt by the build's CUDA compiler launcher (cmake/ptxas_report.sh): the numbers of
    the very compile the build did, its flags included. (`cuobjdump --dump-resource-usage` on the
    objects would give registers and shared memory too, but not spill stores, and it is not installed
    where the build runs here or in CI: only nvcc and ptxas are.)
  - the `setmaxnreg` counts of each kernel, from the PTX the object carries (the build embeds
    compute_90a PTX beside the sm_90a code): what the compiled kernel asks for, per role — the warp
    group that lowers its registers (the producer) and the ones that raise theirs (the consumers).
  - block size and dynamic shared memory of every launch, which the steps' launchers compute at run
    time, from `flashladder_launches` (app/launch_probe.cpp): it runs each step's host code against a
    stand-in for the CUDA runtime and records each launch instead of running it. Step 11 (the ring) is
    not run by it (NCCL, several GPUs): its launches are read from its source when they are plain.

Blocks per SM are computed from those numbers for a Hopper SM (H100 and H200 alike): 65 536 registers
allocated per warp in units of 256, 228 KiB of shared memory with 1 KiB reserved per block, 2 048
threads, 32 blocks.
"""
from __future__ import annotations

import argparse
import difflib
import glob
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fl_results as flr  # noqa: E402

BEGIN, END = "<!-- fl:resources -->", "<!-- /fl:resources -->"
TYPES = {"__half": "fp16", "__nv_bfloat16": "bf16", "float": "fp32"}
RING = "11_ring_attention"
SKIP = 77

# One Hopper SM (H100, H200): what bounds the blocks resident at once.
SM_REGS, REG_UNIT, SM_SMEM, SMEM_RESERVED, SM_THREADS, SM_BLOCKS = 65536, 256, 228 * 1024, 1024, 2048, 32


class Unavailable(Exception):
    """The build cannot say (no CUDA, another target, another compiler): a skip, never a pass."""


def read_cache(build: str) -> dict[str, str]:
    path = os.path.join(build, "CMakeCache.txt")
    if not os.path.exists(path):
        raise Unavailable(f"{build} is not a configured build (no CMakeCache.txt)")
    out = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = re.match(r"([A-Za-z_0-9]+):[A-Z]+=(.*)$", line.rstrip("\n"))
            if m:
                out[m.group(1)] = m.group(2)
    return out


def compiler_of(build: str) -> str:
    """The nvcc release of the build ("13.0"), or Unavailable naming what is missing."""
    cache = read_cache(build)
    if not cache.get("CMAKE_CUDA_COMPILER") or cache.get("CMAKE_CUDA_COMPILER", "").endswith("NOTFOUND"):
        raise Unavailable("this build has no CUDA (nvcc was not found when it was configured), so it has no "
                          "ptxas report of the GPU steps to compare the step pages with")
    version = ""
    for path in glob.glob(os.path.join(build, "CMakeFiles", "*", "CMakeCUDACompiler.cmake")):
        with open(path, encoding="utf-8") as f:
            m = re.search(r'set\(CMAKE_CUDA_COMPILER_VERSION "(\d+\.\d+)', f.read())
        if m:
            version = m.group(1)
    if not version:
        raise Unavailable(f"{build}: the CUDA compiler's version is not recorded (CMakeCUDACompiler.cmake)")
    return version


def step_object(build: str, folder: str) -> str:
    hits = sorted(glob.glob(os.path.join(build, "**", "steps", folder, "*.cu.o"), recursive=True))
    if not hits:
        raise Unavailable(f"{build} has no object of steps/{folder} (build it first: tools/build)")
    return hits[0]


def ptxas_report(obj: str) -> str:
    path = obj + ".ptxas.txt"
    if not os.path.exists(path):
        raise Unavailable(f"{path} is missing: the build's CUDA compiler launcher (cmake/ptxas_report.sh) "
                          "writes it; reconfigure and rebuild")
    if os.path.getmtime(path) + 1 < os.path.getmtime(obj):
        raise Unavailable(f"{path} is older than its object: rebuild")
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def ptxas_kernels(report: str) -> dict[str, dict]:
    """mangled entry name → {registers, spill (bytes stored), smem (static bytes)}."""
    found, cur = {}, None
    for line in report.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            cur = found.setdefault(m.group(1), {"registers": 0, "spill": 0, "smem": 0})
            continue
        if re.search(r"Function properties for ", line) and cur is not None:
            name = line.split("Function properties for ", 1)[1].strip()
            cur = found.get(name)  # a non-entry function's properties are not a kernel's
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes spill stores", line)
        if m:
            cur["spill"] = int(m.group(1))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["registers"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            cur["smem"] = int(s.group(1)) if s else 0
    return found


def setmaxnreg(obj: str) -> dict[str, tuple[list[int], list[int]]]:
    """mangled entry name → (setmaxnreg.dec counts, setmaxnreg.inc counts), from the object's PTX."""
    with open(obj, "rb") as f:
        data = f.read()
    out = {}
    entries = list(re.finditer(rb"\.entry\s+([\w$]+)\s*\(", data))
    for i, m in enumerate(entries):
        body = data[m.end(): entries[i + 1].start() if i + 1 < len(entries) else len(data)]
        dec, inc = [], []
        for kind, n in re.findall(rb"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", body):
            (dec if kind == b"dec" else inc).append(int(n))
        if dec or inc:
            out[m.group(1).decode()] = (sorted(set(dec)), sorted(set(inc)))
    return out


def probe_launches(build: str) -> dict[str, dict]:
    """mangled kernel → {threads: set, dynamic: set} over every launch flashladder_launches records."""
    exe = os.path.join(build, "flashladder_launches")
    if not os.path.exists(exe):
        raise Unavailable(f"{exe} is missing: it is built with CUDA (tools/build)")
    r = subprocess.run([exe], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"{exe} failed ({r.returncode}):\n{r.stderr}")
    out: dict[str, dict] = {}
    for line in r.stdout.splitlines():
        rec = json.loads(line)
        k = out.setdefault(rec["kernel"], {"threads": set(), "dynamic": set(), "variants": None})
        k["threads"].add(rec["threads"])
        k["dynamic"].add(rec["dynamic_smem"])
        tags = variant_tags(rec.get("problem", ""))
        k["variants"] = tags if k["variants"] is None else k["variants"] & tags
    return out


def variant_tags(problem: str) -> frozenset:
    """The variants of a probed problem (Problem::describe()) that may select a kernel of their own:
    softcap, ALiBi, per-sequence lengths (variable length or seqused_k: one template bit in the steps),
    and the window (09d's kWindow bit; a kernel launched for plain problems too keeps the label plain,
    as the tags of a kernel are those common to every problem that launched it)."""
    words = set(re.findall(r"\b(softcap|alibi|varlen|seqused_k|window)\b", problem))
    tags = {w for w in words if w in ("softcap", "alibi", "window")}
    if words & {"varlen", "seqused_k"}:
        tags.add("lengths")
    return frozenset(tags)


VARIANT_LABEL = {"window": "window", "softcap": "softcap", "alibi": "ALiBi", "lengths": "per-sequence lengths"}


def variant_cell(tags) -> str:
    if tags is None:
        return "–"
    return " + ".join(VARIANT_LABEL[t] for t in ("window", "softcap", "alibi", "lengths") if t in tags) or "plain"


def source_launches(src: str) -> dict[str, dict]:
    """kernel → {threads, dynamic} from `kernel<…><<<grid, block, smem, stream>>>` launches whose block
    and shared memory are literals or products of the file's integer constants (the ring's)."""
    with open(src, encoding="utf-8") as f:
        text = f.read()
    consts = {m.group(1): int(m.group(2)) for m in re.finditer(r"\b(k\w+)\s*=\s*(\d+)\s*[;,]", text)}

    def value(expr: str):
        total = 1
        for factor in expr.split("*"):
            factor = factor.strip()
            if factor.isdigit():
                total *= int(factor)
            elif factor in consts:
                total *= consts[factor]
            else:
                return None
        return total

    out: dict[str, dict] = {}
    for m in re.finditer(r"\b(\w+)\s*(?:<[^<>;]*>)?\s*<<<(.*?)>>>", text, re.S):
        args, depth, cur = [], 0, ""
        for c in m.group(2):
            if c == "," and depth == 0:
                args.append(cur)
                cur = ""
                continue
            depth += c in "(<[{"
            depth -= c in ")>]}"
            cur += c
        args.append(cur)
        if len(args) < 3:
            continue
        k = out.setdefault(m.group(1), {"threads": set(), "dynamic": set()})
        k["threads"].add(value(args[1]))
        k["dynamic"].add(value(args[2]))
    return out


def demangle(names: list[str]) -> list[str]:
    r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return r.stdout.splitlines() if r.returncode == 0 else names


def split_name(demangled: str) -> tuple[str, str, str]:
    """(kernel, type, d) from "void fl::s08h::attention_kernel<__half, 128>(…)" or
    "fl::ring::(anonymous namespace)::fill_kernel(float*, long, float)"."""
    m = re.match(r"(?:void )?(?:(?:\w+|\(anonymous namespace\))::)*(\w+)(?:<([^()]*)>)?\(", demangled)
    if not m:
        return demangled, "–", "any"
    args = [a.strip() for a in (m.group(2) or "").split(",") if a.strip()]
    t = next((TYPES[a] for a in args if a in TYPES), "–")
    d = next((a for a in args if a.isdigit()), "any")
    return m.group(1), t, d


def blocks_per_sm(registers: int, threads: int, smem: int) -> int:
    warps = -(-threads // 32)
    per_warp = -(-registers * 32 // REG_UNIT) * REG_UNIT
    by_regs = (SM_REGS // per_warp) // warps if per_warp else SM_BLOCKS
    by_smem = SM_SMEM // (smem + SMEM_RESERVED)
    return max(0, min(by_regs, by_smem, SM_THREADS // (warps * 32), SM_BLOCKS))


def nbytes(n: int) -> str:
    s = f"{n:,}".replace(",", " ")
    return f"{s} ({n / 1024:.1f} KiB)" if n >= 1024 else s


def span(values: set) -> str:
    v = sorted(values)
    return str(v[0]) if len(v) == 1 else f"{v[0]}–{v[-1]}"


def rows_of(step, root: str, build: str, probe: dict | None) -> tuple[list[list[str]], list[str], str, bool]:
    """The table's rows, the notes under it, the target ptxas compiled for ("sm_90a"), and whether the
    rows carry a variant column."""
    obj = step_object(build, step.folder)
    # A source changed after its object was built (an edit, or a `git checkout` undoing an experiment
    # that was built): the report is of other code. 2026-11-27: a table was written from an experiment's
    # objects after its source had been reverted, and CI's --check caught it a commit later.
    for src in sorted(glob.glob(os.path.join(root, "steps", step.folder, "*.cu*"))):
        if os.path.getmtime(src) > os.path.getmtime(obj) + 1:
            raise Unavailable(f"{obj} is older than {os.path.relpath(src, root)}: build first (ninja -C {build})")
    report = ptxas_report(obj)
    kernels = ptxas_kernels(report)
    if not kernels:
        raise RuntimeError(f"{obj}.ptxas.txt reports no kernel")
    regs_of = setmaxnreg(obj)
    from_source = source_launches(step.source(root)) if probe is None else {}
    names = sorted(kernels)
    rows, notes, unlaunched, has_regs = [], [], [], bool(regs_of)
    # A "variant" column where some kernel of the step was launched for a variant's problem only.
    variant_col = any((probe or {}).get(m, {}).get("variants") for m in names)
    for mangled, pretty in zip(names, demangle(names)):
        kernel, t, d = split_name(pretty)
        k = kernels[mangled]
        launch = (probe or {}).get(mangled) if probe is not None else from_source.get(kernel)
        threads = smem = "–"
        fits = "–"
        if launch and None not in launch["threads"] and None not in launch["dynamic"]:
            threads = span(launch["threads"])
            total = {k["smem"] + dyn for dyn in launch["dynamic"]}
            smem = nbytes(min(total)) if len(total) == 1 else f"{nbytes(min(total))} – {nbytes(max(total))}"
            fits = span({blocks_per_sm(k["registers"], th, s) for th in launch["threads"] for s in total})
        else:
            unlaunched.append(kernel)
            smem = f"{nbytes(k['smem'])} static" if k["smem"] else "0 static"
        row = [f"`{kernel}`", t, d] + ([variant_cell(launch.get("variants") if launch else None)] if variant_col else []) \
            + [threads, str(k["registers"])]
        if has_regs:
            dec, inc = regs_of.get(mangled, ([], []))
            row.append(f"{'/'.join(map(str, dec)) or '–'} / {'/'.join(map(str, inc)) or '–'}")
        row += [f"{k['spill']} bytes" if k["spill"] else "0", smem, fits]
        rows.append(row)
    order = {"any": 0}
    vorder = lambda v: (0 if v == "plain" else 1 + v.count("+"), v)  # plain first, then by how many bits
    rows.sort(key=lambda r: (r[0], r[1], order.get(r[2], int(r[2]) if r[2].isdigit() else 0))
              + ((vorder(r[3]),) if variant_col else ()))
    if has_regs:
        notes.append("Registers: ptxas's count is the launch's (what every thread starts with); `setmaxnreg` "
                     "then moves them between roles, as the kernel's PTX says: the producer warpgroup lowers "
                     "its count to the first number (`setmaxnreg.dec`), the consumer warpgroups raise theirs to "
                     "the second (`setmaxnreg.inc`).")
    if probe is None:
        notes.append(f"Threads and dynamic shared memory from the launches in {os.path.relpath(step.source(root), root)} "
                     "(the launch probe does not run this step).")
    for kernel in sorted(set(unlaunched)):
        notes.append(f"`{kernel}`: no launch of it was recorded, so threads, dynamic shared memory and blocks "
                     "per SM are not known here; its static shared memory is ptxas's.")
    targets = sorted(set(re.findall(r"Compiling entry function '\S+' for '(\w+)'", report)))
    return rows, notes, ", ".join(targets), variant_col


def block(rows: list[list[str]], notes: list[str], nvcc: str, target: str, variant_col: bool = False) -> str:
    has_regs = len(rows[0]) == 9 + variant_col
    head = ["kernel", "type", "d"] + (["variant"] if variant_col else []) + ["threads", "registers"] \
        + (["setmaxnreg (producer / consumers)"] if has_regs else []) \
        + ["spill stores", "shared memory per block (bytes)", "blocks per SM"]
    align = ["---", "---", "--:"] + (["---"] if variant_col else []) + ["--:", "--:"] + (["--:"] if has_regs else []) \
        + ["--:", "--:", "--:"]
    out = [BEGIN,
           f"<!-- Written by scripts/resources_table.py from the build (ptxas -v of nvcc {nvcc}, {target}, and "
           "flashladder_launches); run it, do not edit. -->",
           "", "| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    out += [""] + [n + "\n" for n in notes]
    out += ["Shared memory is ptxas's static count plus the launch's dynamic request; blocks per SM, the most that "
            "fit on one Hopper SM (65 536 registers, 228 KiB of shared memory less 1 KiB per block, 2 048 threads).",
            "", END]
    return "\n".join(out)


def gpu_steps(root: str) -> list:
    steps = [s for s in flr.parse_ladder(root) if s.where == "gpu" and s.source(root)]
    if os.path.exists(os.path.join(root, "steps", RING, "ring.cu")):
        steps.append(flr.Step(number="11", folder=RING, change="", where="gpu", backward=False, dtypes=[]))
        steps[-1].source = lambda r: os.path.join(r, "steps", RING, "ring.cu")  # type: ignore[method-assign]
    return steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("steps", nargs="*", help="step numbers or folders (default: every GPU step)")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--root", default=here)
    ap.add_argument("--build", default=None, help="the build folder (default: <root>/build)")
    # One or the other: with both, --print won, the check never ran, and the run still said the pages
    # "agree with the build" (exit 0 on a stale page).
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 when a step page's block is stale")
    mode.add_argument("--print", action="store_true", help="print the blocks and change nothing")
    args = ap.parse_args()
    build = args.build or os.path.join(args.root, "build")
    steps = gpu_steps(args.root)
    by_name = {s.number: s for s in steps} | {s.folder: s for s in steps}
    chosen = []
    for name in args.steps or [s.folder for s in steps]:
        if name not in by_name:
            print(f"resources_table: '{name}' is not a GPU step with a source")
            return 2
        chosen.append(by_name[name])
    try:
        nvcc = compiler_of(build)
        probe = probe_launches(build)
        blocks, targets = {}, {}
        for s in chosen:
            rows, notes, targets[s.folder], vcol = rows_of(s, args.root, build, None if s.folder == RING else probe)
            blocks[s.folder] = block(rows, notes, nvcc, targets[s.folder], vcol)
    except Unavailable as e:
        print(f"SKIPPED: resources_table: {e}")
        return SKIP
    rc = 0
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    stated = re.compile(r"ptxas -v of nvcc (\S+), (sm_\w+),")
    for s in chosen:
        want = blocks[s.folder]
        if args.print:
            print(f"{s.folder}:\n{want}\n")
            continue
        path = os.path.join(args.root, "steps", s.folder, "README.md")
        text = flr.read_text(path)
        if BEGIN not in text:
            print(f"resources_table: {os.path.relpath(path, args.root)} has no {BEGIN} block")
            rc = 1
            continue
        if args.check:
            m = stated.search(pattern.search(text).group(0))
            if m and (m.group(1), m.group(2)) != (nvcc, targets[s.folder]):
                # Another compiler or target gives other numbers: that is no staleness of the page.
                print(f"SKIPPED: resources_table: {s.folder}'s block was written from nvcc {m.group(1)}, "
                      f"{m.group(2)}; this build has nvcc {nvcc}, {targets[s.folder]}")
                return SKIP
        new = pattern.sub(lambda _: want, text, count=1)
        if args.check:
            if new != text:
                sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True), path,
                                                           "the build"))
                print(f"resources_table: {os.path.relpath(path, args.root)} is stale: run scripts/resources_table.py")
                rc = 1
        elif new != text:
            flr.write_text(path, new)
            print(f"resources_table: {os.path.relpath(path, args.root)} rewritten")
    if args.check and rc == 0:
        print(f"resources_table: the resources blocks of {len(chosen)} step pages agree with the build "
              f"(nvcc {nvcc}, {', '.join(sorted(set(targets.values())))})")
    return rc


if __name__ == "__main__":
    sys.exit(flr.run_main("resources_table", main))
