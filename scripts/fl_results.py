"""flashladder — scripts/fl_results.py: the step list and the benchmark records, for the docs scripts.

Shared by scripts/readme_table.py, scripts/docs_pages.py and notebooks/results.ipynb (standard library
only, so it runs on any Python 3.9+):

  parse_ladder(root)   the steps, in ladder order, read from steps/ladder.cpp (THE list of steps)
  load_records(root)   every record of docs/results/*.jsonl, in file order (one JSON object per line)
  headline_view(...)   for the headline problem: the device to report and, per impl, the record to show
  need_torch(name, doc) the torch scripts' --help without PyTorch, and a one-line refusal for the rest
  run_main(name, main) how every script runs: an unreadable or unwritable file, text that is not UTF-8 and
                       output that never reached stdout end it with one line and exit 2, not a traceback
  library_main(name, doc) a module of scripts/ that is imported, not run (this one, variants_torch.py):
                       run alone, --help prints its docstring and anything else says it is a library

Run alone, this file only answers --help (it is a library).

The records' fields are those of app/record.hpp: impl, pass, dtype, B, H, H_kv, Nq, Nk, d, causal,
median_ms, min_ms, p90_ms, tflops, tol_used, device, sm_count, cuda, driver, commit, date (and, from
`flashladder`, extra_bytes, reps and pass_check).
"""
from __future__ import annotations

import glob
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field

# The headline problem of ../shared/design/ladder.md: fp16, B = 4, H = 16, N = 4096, d = 128, non-causal.
HEADLINE = {"pass": "fwd", "dtype": "fp16", "B": 4, "H": 16, "H_kv": 16, "Nq": 4096, "Nk": 4096, "d": 128,
            "causal": False}
BASELINES = ("torch_flash", "torch_cudnn", "cublas_attention", "cublas_gemm")
FLOP_CONVENTION = ("FLOPs by the FlashAttention convention: forward 4·B·H·Nq·Nk·d "
                   "(halved when causal), backward 2.5× forward")


@dataclass
class Step:
    number: str            # "08a"
    folder: str            # "08a_tensor_cores"
    change: str            # the one idea it adds
    where: str             # "cpu" or "gpu"
    backward: bool
    dtypes: list = field(default_factory=list)     # ["fp16", "bf16"]
    head_dims: list = field(default_factory=list)  # [] means any d
    base: str = ""         # number of the step its source is diffed against ("" for the first)
    arch: str = "any"      # "sm90a": Hopper only

    def diff_whole(self, steps) -> bool:
        """The step's source is shown whole against its base: it adds a pass (the backward) that its
        base does not have, and reuses the base's forward (Step::diff_whole in steps/ladder.cpp)."""
        b = next((x for x in steps if x.number == self.base), None)
        return b is not None and self.backward and not b.backward

    def source(self, root: str) -> str | None:
        """The step's one source file (attention.cu or attention.cpp), or None when not written yet."""
        for name in ("attention.cu", "attention.cpp"):
            path = os.path.join(root, "steps", self.folder, name)
            if os.path.exists(path):
                return path
        return None

    def head_dims_text(self) -> str:
        return ", ".join(str(d) for d in self.head_dims) if self.head_dims else "any"


_STRING = r'"((?:[^"\\]|\\.)*)"'
_DTYPE = {"f32": "fp32", "f16": "fp16", "bf16": "bf16"}


def _unescape(s: str) -> str:
    return s.encode("utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8") if "\\" in s else s


def parse_ladder(root: str) -> list[Step]:
    """Reads steps/ladder.cpp. Each entry there looks like
         {"05", "05_fa2_lse", "the change …" ["more of it" …], Where::gpu, false, kGpuTypes, CudaCoreD::list(),
          FL_GPU(s05::impl), "04"[, Arch::sm90a[, /*deterministic_backward=*/true[, kWindow | kSoftcap]]]},
    and the constant lists (kGpuTypes = {DType::f16, DType::bf16} in ladder.cpp; using CudaCoreD =
    HeadDims<64, 128> in steps/ladder.hpp) are read too."""
    path = os.path.join(root, "steps", "ladder.cpp")
    text = read_text(path)  # a wrong --root: "cannot read <root>/steps/ladder.cpp: ..." (run_main)
    consts = {}
    for m in re.finditer(r"using\s+(\w+)\s*=\s*HeadDims<([^>]*)>", read_text(os.path.join(root, "steps", "ladder.hpp"))):
        consts[m.group(1)] = [int(x) for x in m.group(2).split(",") if x.strip()]
    for m in re.finditer(r"const\s+std::vector<\s*(DType|int64_t|int)\s*>\s+(\w+)\s*=\s*\{([^}]*)\}", text):
        kind, name, body = m.groups()
        items = [x.strip() for x in body.split(",") if x.strip()]
        if kind == "DType":
            consts[name] = [_DTYPE.get(x.split("::")[-1], x) for x in items]
        else:
            consts[name] = [int(x) for x in items]
    entry = re.compile(r'\{\s*"(\w+)"\s*,\s*"(\w+)"\s*,\s*((?:' + _STRING + r'\s*)+),\s*Where::(\w+)\s*,\s*(true|false)'
                       r'\s*,\s*(\w+)\s*,\s*(\w+)(?:::list\(\))?\s*,\s*(?:FL_GPU\(\w+::impl\)|&\w+::impl)\s*,'
                       r'\s*"(\w*)"\s*(?:,\s*Arch::(\w+)\s*)?(?:,\s*(?:/\*[^*]*\*/\s*)?(?:true|false)\s*)?'
                       r'(?:,\s*(?:/\*[^*]*\*/\s*)?[A-Za-z_][\w\s|]*)?\}')
    steps = []
    for m in entry.finditer(text):
        number, folder, strings = m.group(1), m.group(2), m.group(3)
        change = "".join(_unescape(s) for s in re.findall(_STRING, strings))
        where, bwd, types, dims = m.group(5), m.group(6), m.group(7), m.group(8)
        steps.append(Step(number, folder, change, where, bwd == "true", consts.get(types, [types]),
                          consts.get(dims, []), m.group(9), m.group(10) or "any"))
    listed = re.findall(r'\{\s*"\w+"\s*,\s*"\d\d\w*"\s*,', text)
    if not steps or len(steps) != len(listed):
        # Refused (a RuntimeError): run_main makes it one line and exit 2 in every script that reads the list.
        raise Refused(f"{path}: read {len(steps)} of {len(listed)} step entries: has the format of "
                           "the list changed? (scripts/fl_results.py parse_ladder reads it)")
    return steps


def shown(path: str, root: str) -> str:
    """A record file as a generated page names it: relative to the repository root when inside it,
    else its base name (so that a page does not carry this machine's absolute paths)."""
    rel = os.path.relpath(os.path.abspath(path), root)
    return os.path.basename(path) if rel.startswith("..") else rel


class Refused(RuntimeError):
    """Input a script refuses, or a file it cannot read or write; the message names the place. run_main
    prints it as one line and exits 2 (a RuntimeError: the scripts that catch those print it as well)."""


def _raise(msg: str):
    raise Refused(msg)


def read_text(path: str) -> str:
    """The text of a UTF-8 file; Refused, naming the path, when it cannot be read or is not UTF-8."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise Refused(f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise Refused(f"{path}: not UTF-8 text: {e}") from None


def write_text(path: str, text: str) -> None:
    """Writes text to path; Refused, naming the path, when that fails (a full disk shows at the write or
    the close, where open() has no name to put in the error)."""
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise Refused(f"cannot write {path}: {e.strerror}") from None


class _StdoutError(Exception):
    pass


class _Stdout:
    """sys.stdout under run_main: a failed write or flush says it was stdout's (an OSError has no name)."""
    def __init__(self, f):
        self._f = f

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except OSError as e:
            raise _StdoutError(e.strerror or str(e)) from None

    def write(self, s):
        return self._call(self._f.write, s)

    def writelines(self, lines):
        return self._call(self._f.writelines, lines)

    def flush(self):
        return self._call(self._f.flush)

    def __getattr__(self, name):
        return getattr(self._f, name)


def run_main(name: str, main) -> int:
    """main()'s exit status, with stdout flushed here rather than at the interpreter's exit (where a full
    disk or a closed pipe is a traceback after the fact). Refused, an OSError, text that is not UTF-8 or
    output that never reached stdout ends the script with one line on stderr, `<name>: <what failed>:
    <reason>` (cannot read|write <path>, or stdout), and exit 2."""
    out = sys.stdout = _Stdout(sys.stdout)
    try:
        rc = main()
        sys.stdout.flush()
        return rc
    except Refused as e:
        msg = str(e)
    except _StdoutError as e:
        msg = f"cannot write stdout: {e}"
        # Point fd 1 at /dev/null: the interpreter flushes stdout again at exit, and would fail there too.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
        except (OSError, ValueError):
            pass
    except UnicodeDecodeError as e:
        msg = f"input is not UTF-8 text: {e}"
    except OSError as e:
        msg = f"cannot use {e.filename}: {e.strerror}" if e.filename is not None else f"{e.strerror or e}"
    print(f"{name}: {msg}", file=sys.stderr)
    return 2


# argparse types for the torch scripts' options: a bad value is refused by argparse, naming the option,
# the value and the limit (exit 2), where PyTorch is missing too (need_torch parses with the same
# parser), instead of a traceback after minutes of GPU work (--ns 0 was a ZeroDivisionError).
def number_list(least: int = 1, most: int | None = None, why: str = ""):
    """Comma-separated whole numbers ("512,1024"), each least..most; checked, and kept as the text given
    (the scripts split it where they use it). Empty items are skipped, as the scripts skip them."""
    import argparse

    def check(text: str) -> str:
        for x in text.split(","):
            if not x.strip():
                continue
            try:
                v = int(x)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{x.strip()!r} is not a whole number") from None
            if v < least or (most is not None and v > most):
                limit = f"from {least} to {most}" if most is not None else f"at least {least}"
                raise argparse.ArgumentTypeError(f"{v} is not allowed: each must be {limit}{why}")
        return text
    return check


def word_list(*choices: str):
    """Comma-separated words, each one of choices, at least one ("no,yes"); kept as the text given."""
    import argparse

    def check(text: str) -> str:
        words = [x for x in text.split(",") if x]
        bad = [x for x in words if x not in choices]
        if bad or not words:
            raise argparse.ArgumentTypeError(f"{text!r}: give one or more of {', '.join(choices)}, comma-separated")
        return text
    return check


def whole(least: int):
    """A whole number >= least."""
    import argparse

    def check(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if v < least:
            raise argparse.ArgumentTypeError(f"{v} is not allowed: it must be at least {least}")
        return v
    return check


def library_path(text: str) -> str:
    """--lib: a path (with a '/') must be a file; a bare name is left to the loader's search."""
    import argparse
    if os.sep in text and not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"{text}: no such file (build it with tools/build, or name another)")
    return text


def output_path(text: str) -> str:
    """A file to write or append to: its folder must exist, and it must not be a folder itself."""
    import argparse
    folder = os.path.dirname(text) or "."
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"{text}: no folder {folder} to write it in")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    return text


# The storage types the torch scripts compare (compare_torch.DTYPES maps each to torch's dtype and the C
# API's code): here, so that their options can be parsed where PyTorch is missing.
DTYPE_NAMES = ("fp16", "bf16")


def add_problem_args(ap):
    """One problem's options for the single-shape scripts (profile_pair.py, kernel_times.py): the
    headline problem by default."""
    ap.add_argument("-B", type=int, default=4)
    ap.add_argument("-H", type=int, default=16)
    ap.add_argument("-N", type=int, default=4096)
    ap.add_argument("-d", type=int, default=128)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", default="fp16", choices=sorted(DTYPE_NAMES))


def need_torch(name: str, doc: str, parser=None) -> None:
    """For the scripts that time PyTorch: without it, the script's options are still parsed first when
    `parser` (its argparse parser, built without PyTorch) is given: --help prints them and an unknown
    option is refused by name (exit 2), as with PyTorch; then anything else exits 1 naming what is
    missing, instead of an import traceback. Without a parser, --help prints the docstring."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        if parser is not None:
            parser.parse_args()  # exits on --help (0) or a bad option (2)
        elif {"-h", "--help"} & set(sys.argv[1:]):
            print((doc or "").strip())
            sys.exit(0)
        sys.exit(f"{name}: needs PyTorch (with CUDA, on the GPU machine): {e}")


def library_main(name: str, doc: str) -> None:
    """For a module of scripts/ that the other scripts import: run as a program, --help prints its
    docstring (exit 0), and anything else (nothing included) says it is a library, on stderr (exit 2)."""
    if {"-h", "--help"} & set(sys.argv[1:]):
        sys.exit(run_main(name, lambda: print((doc or "").strip()) or 0))
    print(f"{name}: a library that the other scripts import, not a program: nothing to run "
          f"(--help says what it holds)", file=sys.stderr)
    sys.exit(2)


def read_jsonl(path: str, refuse):
    """(where, record) for each non-blank line of a JSON-lines file, where = "path:line". A file that
    cannot be read, a line that is not JSON or not a JSON object goes to refuse(message), which must
    not return (the table scripts exit there, naming the place)."""
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        refuse(f"cannot read {path}: {e.strerror}")
    with f:
        n = 0
        lines = iter(f)
        while True:
            try:
                line = next(lines)
            except StopIteration:
                return
            except UnicodeDecodeError as e:
                refuse(f"{path}:{n + 1}: not UTF-8 text: {e}")
            except OSError as e:
                refuse(f"cannot read {path}: {e.strerror}")
            n += 1
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                refuse(f"{where}: not a JSON record: {e}")
            if not isinstance(r, dict):
                refuse(f"{where}: not a JSON object")
            yield where, r


def is_rate(v) -> bool:
    """A time or rate a table may show: positive and finite, or NaN (a broken run's honest value: it meets
    no bar, scripts/bars.py). A negative, zero, infinite or string one is no measurement, and would reach
    a table as a number (or crash it)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and (math.isnan(v) or (math.isfinite(v) and v > 0))


def is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _name(v) -> bool:
    return isinstance(v, str) and v != ""


# What a record's field must be where it is there and not null, for the fields the scripts read:
# (test, what it is not). A list impl is a TypeError in a dict, "false" reads as true, a string
# tol_used a ValueError at its format: refused with the file and line instead (field_problem).
FIELD_CHECKS = {
    "impl": (_name, "a name (a non-empty string)"), "pass": (_name, "a name (a non-empty string)"),
    "dtype": (_name, "a storage type's name (a string)"),
    "causal": (lambda v: isinstance(v, bool), "true or false"),
    "splits_forced": (lambda v: isinstance(v, bool), "true or false"),
    **{f: (is_count, "a positive whole number") for f in ("d", "B", "H", "H_kv", "Nq", "Nk", "splits", "splits_asked")},
    **{f: (is_rate, "a positive number (nor NaN, a broken run's)")
       for f in ("tflops", "median_ms", "bytes_per_s", "kv_bytes_per_s")},
    "pass_check": (lambda v: isinstance(v, bool), "true or false"),
    # NaN or infinite: an error the check could not bound, which the README shows as a FAIL.
    "tol_used": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and (math.isnan(v) or v >= 0),
                 "a number >= 0"),
}


def field_problem(rec: dict) -> str | None:
    """The first field of FIELD_CHECKS that rec holds wrongly, as "f = value is not ..."; None: none."""
    for f, (ok, what) in FIELD_CHECKS.items():
        if rec.get(f) is not None and not ok(rec[f]):
            return f"{f} = {rec[f]!r} is not {what}"
    return None


def load_records(root: str) -> list[dict]:
    """Every record of docs/results/*.jsonl, files in name order, lines in file order. A line that is
    not a JSON object, a record whose time or rate no table could show, or one holding a field of the
    wrong type (FIELD_CHECKS), is an error that names the file and line (Refused; tables are never made
    from guesses)."""
    out = []
    for path in sorted(glob.glob(os.path.join(root, "docs", "results", "*.jsonl"))):
        for where, rec in read_jsonl(path, _raise):
            if "impl" not in rec:
                raise Refused(f"{where}: a record must be a JSON object with an 'impl' field")
            why = field_problem(rec)
            if why:
                raise Refused(f"{where}: {why}")
            for f in ("tflops", "median_ms"):
                # null or absent: a record with no rate (a copy's, a read's; pass copy or read).
                if rec.get(f) is None and rec.get("pass") in ("fwd", "bwd"):
                    raise Refused(f"{where}: {f} is null or missing: a record of a {rec['pass']} pass needs a number")
            rec["_file"] = os.path.relpath(path, root)
            rec["_line"] = int(where.rsplit(":", 1)[1])
            out.append(rec)
    return out


# The fields a record of an attention variant carries (app/record.cpp make_record); a plain record has none.
# "variant": scripts/compare_variants.py's label, on its records of the plain causal problem too (its
# reference rows, timed without the sweeps' input rotation): none of its records feeds a plain table.
VARIANT_FIELDS = ("window", "softcap", "alibi", "varlen", "seqused_k", "variant")


def is_variant(rec: dict) -> bool:
    return any(rec.get(f) not in (None, False) for f in VARIANT_FIELDS)


def matches(rec: dict, problem: dict) -> bool:
    """rec is a record of problem: every field of problem agrees, and a record of a variant (a window,
    a softcap, ...) matches only a problem that names its variant fields."""
    if is_variant(rec) and not any(f in problem for f in VARIANT_FIELDS):
        return False
    return all(rec.get(k) == v for k, v in problem.items())


def record_flops(rec: dict) -> float:
    """A record's FLOPs as the program counts them (common/problem.cpp flops_forward, ×2.5 backward):
    4·H·d per visible (query, key) pair with a window (Problem::visible_pairs), each sequence its own
    problem in a packed batch, 4·B·H·Nq·Nk·d otherwise; halved when causal except with a window."""
    B, H, Nq, Nk, d, causal = rec["B"], rec["H"], rec["Nq"], rec["Nk"], rec["d"], rec["causal"]
    if rec.get("window"):
        left, right = rec["window"]
        pairs = 0
        for q in range(Nq):
            diag = q + Nk - Nq
            hi = min(Nk - 1, diag) if causal else Nk - 1
            if right >= 0:
                hi = min(hi, diag + right)
            lo = max(0, diag - left) if left >= 0 else 0
            pairs += max(0, hi - lo + 1)
        f = 4.0 * B * H * d * pairs
    elif rec.get("seqlens"):
        f = sum(4.0 * H * n * n * d for n in rec["seqlens"]) / (2 if causal else 1)
    else:
        f = 4.0 * B * H * Nq * Nk * d / (2 if causal else 1)
    return f * (2.5 if rec.get("pass") == "bwd" else 1)


def is_gpu_record(rec: dict) -> bool:
    return bool(rec.get("sm_count"))


def _order(rec: dict):
    """A record checked against the oracle outranks an unchecked one; then later is newer: by date,
    then by position in the files."""
    return (rec.get("tol_used") is not None, str(rec.get("date", "")), rec.get("_file", ""), rec.get("_line", 0))


@dataclass
class HeadlineView:
    device: str | None            # the GPU whose records are shown; None when there are none
    env: dict | None              # a record of that device (cuda, driver, sm_count, commit, date)
    rows: dict                    # impl -> the record shown for it (GPU steps and baselines on `device`)
    cpu_rows: dict                # CPU step impl -> its newest record at the headline shape (any dtype)


def headline_view(steps: list[Step], records: list[dict], problem: dict | None = None) -> HeadlineView:
    """Picks what the README table shows. The device is the GPU of the newest GPU record at the headline
    problem; on it, each impl's newest record. CPU steps run fp32 on the CPU (the storage type of CPU
    steps), so for them the newest record at the headline shape, whatever its dtype."""
    problem = problem or HEADLINE
    gpu = [r for r in records if matches(r, problem) and is_gpu_record(r)]
    device, env, rows = None, None, {}
    if gpu:
        env = max(gpu, key=_order)
        device = env.get("device")
        for r in sorted((r for r in gpu if r.get("device") == device), key=_order):
            rows[r["impl"]] = r  # newest wins
    shape = {k: v for k, v in problem.items() if k != "dtype"}
    cpu_rows = {}
    cpu_steps = {s.folder for s in steps if s.where == "cpu"}
    for r in sorted((r for r in records if r.get("impl") in cpu_steps and matches(r, shape)), key=_order):
        cpu_rows[r["impl"]] = r
    return HeadlineView(device, env, rows, cpu_rows)


def problem_text(problem: dict | None = None) -> str:
    p = problem or HEADLINE
    return (f"{p['dtype']}, B = {p['B']}, H = {p['H']}, N = {p['Nq']}, d = {p['d']}, "
            f"{'causal' if p['causal'] else 'non-causal'}, forward")


# ------------------------------------------------------------------------------------------------------
# The lab marks (issue 20, app/lab_cmd.cpp): `// LAB:BEGIN hint`, `// LAB:STUB code`, `// LAB:END` lines
# in a step's source delimit its exercise. They are not part of the step's idea, so every rendering of a
# source (the docs' diffs, docs/diff_lines.md's counts, `flashladder diff`) leaves them out.
# ------------------------------------------------------------------------------------------------------
LAB_MARK = re.compile(r"^[ \t]*// LAB:")


def without_lab_marks(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not LAB_MARK.match(line))


def diff_u(old: str, new: str, labels: tuple[str, str] | None = None):
    """`diff -u old new` (a subprocess.CompletedProcess, text) of the two sources without their lab marks."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for k, path in enumerate((old, new)):
            if path == os.devnull:
                paths.append(path)
                continue
            with open(path, encoding="utf-8") as f:
                text = without_lab_marks(f.read())
            p = os.path.join(tmp, f"{k}_{os.path.basename(path)}")
            with open(p, "w", encoding="utf-8") as f:
                f.write(text)
            paths.append(p)
        label_args = ["--label", labels[0], "--label", labels[1]] if labels else ["--label", old, "--label", new]
        return subprocess.run(["diff", "-u", *label_args, *paths], capture_output=True, text=True)


if __name__ == "__main__":
    library_main("fl_results.py", __doc__)
