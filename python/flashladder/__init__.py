"""flashladder from Python: the fp64 oracle, the tolerance rule, and the ladder's steps.

    import flashladder
    o, lse = flashladder.oracle(q, k, v, causal=True)              # float64 numpy, any shapes
    flashladder.check(my_o, q, k, v, causal=True, lse=my_lse).assert_ok()
    o, lse = flashladder.step("08g")(q, k, v, causal=True)          # torch CUDA tensors, zero-copy

Conventions (the project's, ../shared/design/ladder.md): q is [B, H, Nq, d], k and v are
[B, H_kv, Nk, d] with H a multiple of H_kv (query head h reads K/V head h // (H // H_kv)); the causal
mask is aligned bottom-right (query i sees key j iff j <= i + Nk - Nq); a row that sees no key has
o = 0 and lse = +inf; lse is the natural-log logsumexp of the scaled scores; scale defaults to 1/sqrt(d).

The variants (docs/variants.md) are keywords of oracle() and check(): window=(left, right) (-1 =
unbounded), softcap=c, alibi_slopes ([H] or [B, H] float32), and variable length: cu_seqlens_q,
cu_seqlens_k (B + 1 offsets each; q, do then [total_q, H, d], k, v [total_k, H_kv, d], lse [H, total_q])
and seqused_k (B key counts, with or without cu_seqlens).

Inputs are numpy arrays or torch tensors. CUDA tensors are copied to the host for oracle() and check();
non-contiguous inputs are made contiguous (a copy) everywhere, step() included. Every dtype and shape
is checked in Python before any C++ runs; bad ones raise TypeError or ValueError naming the tensor.
What the C++ refuses (an invalid problem, a step's limits) raises flashladder.Error, a RuntimeError
carrying the C++ message.
"""

from __future__ import annotations

import contextlib
import math
import re
import sys
from dataclasses import dataclass, field
from typing import List, NamedTuple, Optional

import numpy as np

try:
    from . import _core
except ImportError as e:  # say what to do rather than only what failed
    raise ImportError(
        "flashladder's C++ module (flashladder._core) is missing or was built for another Python: "
        "install with `pip install ./` from the checkout, or build with tools/build and put "
        "build/python on PYTHONPATH (" + str(e) + ")"
    ) from e

__all__ = ["oracle", "check", "inputs", "Inputs", "step", "steps", "Step", "Report", "TensorCheck", "Error", "Forward",
           "ForwardBackward", "HAS_CUDA"]

Error = _core.Error
#: True when this module was built with nvcc, so the GPU steps are in it.
HAS_CUDA: bool = bool(_core.has_cuda)


class Forward(NamedTuple):
    o: np.ndarray    # [B, H, Nq, d] float64
    lse: np.ndarray  # [B, H, Nq] float64, +inf where a row sees no key


class ForwardBackward(NamedTuple):
    o: np.ndarray
    lse: np.ndarray
    dq: np.ndarray   # [B, H, Nq, d]
    dk: np.ndarray   # [B, H_kv, Nk, d], summed over the query heads that share a K/V head
    dv: np.ndarray


# --- Inputs: numpy arrays or torch tensors, checked before any C++ runs -----------------------------

_NUMPY_KINDS = {np.dtype(np.float16): "fp16", np.dtype(np.float32): "fp32", np.dtype(np.float64): "fp64"}
_STORAGE = {"fp16": "fp16", "f16": "fp16", "float16": "fp16", "half": "fp16",
            "bf16": "bf16", "bfloat16": "bf16",
            "fp32": "fp32", "f32": "fp32", "float32": "fp32", "float": "fp32"}
# The element types a candidate may come in for a storage type: its own or a wider float, as the
# golden files' check accepts (reference/golden.cpp accepted_kinds).
_ACCEPTED = {"fp16": ("fp16", "fp32", "fp64"), "bf16": ("bf16", "fp32", "fp64"), "fp32": ("fp32", "fp64")}


def _torch():
    """torch if the caller has imported it (a tensor cannot exist otherwise); never imports it."""
    return sys.modules.get("torch")


def _is_tensor(x) -> bool:
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def _kind(x, name: str) -> str:
    """The element type of a numpy array or torch tensor as fp16/bf16/fp32/fp64, or TypeError."""
    if _is_tensor(x):
        t = _torch()
        kinds = {t.float16: "fp16", t.bfloat16: "bf16", t.float32: "fp32", t.float64: "fp64"}
        if x.dtype not in kinds:
            raise TypeError(f"{name} is a torch tensor of dtype {x.dtype}; flashladder takes float16, "
                            "bfloat16, float32 or float64")
        return kinds[x.dtype]
    if isinstance(x, np.ndarray):
        if x.dtype not in _NUMPY_KINDS:
            raise TypeError(f"{name} is a numpy array of dtype {x.dtype}; flashladder takes float16, "
                            "float32 or float64 (numpy has no bfloat16: pass bf16 values as float32)")
        return _NUMPY_KINDS[x.dtype]
    raise TypeError(f"{name} must be a numpy array or a torch tensor, not {type(x).__module__}.{type(x).__name__}")


def _host(x, name: str) -> np.ndarray:
    """x's values on the host as a C-contiguous numpy array of float16, float32 or float64 (bfloat16 is
    widened to float32, which holds it exactly). CUDA tensors are copied; autograd is detached."""
    _kind(x, name)
    if _is_tensor(x):
        t = _torch()
        x = x.detach()
        if x.dtype == t.bfloat16:
            x = x.float()
        x = x.cpu().numpy()
    return np.ascontiguousarray(x)


def _index(flat: int, shape) -> tuple:
    return tuple(int(i) for i in np.unravel_index(flat, shape))


def _first(mask: np.ndarray) -> Optional[int]:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def _input(x, name: str) -> np.ndarray:
    """An oracle input as float32 values (the oracle reads inputs in the types the steps store), or
    ValueError: every value finite and, for float64 inputs, exactly representable in float32, since an
    oracle that silently rounded its inputs would answer a question nobody asked."""
    a = _host(x, name)
    bad = _first(~np.isfinite(a))
    if bad is not None:
        raise ValueError(f"{name}{list(_index(bad, a.shape))} = {a.flat[bad]}: inputs must be finite")
    if a.dtype == np.float64:
        f = a.astype(np.float32)
        bad = _first(f.astype(np.float64) != a)
        if bad is not None:
            raise ValueError(f"{name}{list(_index(bad, a.shape))} = {a.flat[bad]!r} is not exactly representable "
                             "in float32, the widest type the oracle reads; round the inputs first "
                             f"({name}.astype(np.float32) or .float()) and give the kernel the same values")
        return f
    return a.astype(np.float32)  # float16 and float32 widen exactly


def _shape_problem(q, k, v, do=None) -> dict:
    """B, H, H_kv, Nq, Nk, d from the shapes, or ValueError naming the disagreeing tensor."""
    shapes = {}
    for name, x in (("q", q), ("k", k), ("v", v), ("do", do)):
        if x is None:
            continue
        _kind(x, name)  # the type first: a list or an int array is refused before its shape is read
        s = tuple(int(n) for n in x.shape)
        if len(s) != 4:
            raise ValueError(f"{name} has shape {list(s)}; it must be 4-D: q, o, do [B, H, Nq, d], "
                             "k, v [B, H_kv, Nk, d]")
        if min(s) < 1:
            raise ValueError(f"{name} has shape {list(s)}: every dimension must be at least 1")
        shapes[name] = s
    B, H, Nq, d = shapes["q"]
    _, H_kv, Nk, _ = shapes["k"]
    if shapes["k"][0] != B or shapes["k"][3] != d:
        raise ValueError(f"k has shape {list(shapes['k'])} but q {list(shapes['q'])}: k must be "
                         f"[B={B}, H_kv, Nk, d={d}]")
    if shapes["v"] != shapes["k"]:
        raise ValueError(f"v has shape {list(shapes['v'])} but k {list(shapes['k'])}: they must agree")
    if H % H_kv:
        raise ValueError(f"q has H = {H} heads and k has H_kv = {H_kv}: H must be a multiple of H_kv (GQA/MQA)")
    if "do" in shapes and shapes["do"] != shapes["q"]:
        raise ValueError(f"do has shape {list(shapes['do'])} but q {list(shapes['q'])}: they must agree")
    return dict(B=B, H=H, H_kv=H_kv, Nq=Nq, Nk=Nk, d=d)


def _options(causal, scale):
    # A string or an int for causal is a likely typo (causal="False" is true); refuse rather than guess.
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be True or False, not {causal!r}")
    if scale is not None:
        if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, (int, float, np.integer, np.floating)):
            raise TypeError(f"scale must be a number or None (1/sqrt(d)), not {scale!r}")
        scale = float(scale)
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"scale = {scale} is not allowed: it must be finite and > 0")
    return bool(causal), scale


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _int_list(x, name: str) -> List[int]:
    """Offsets or lengths as a list of Python ints: a list or tuple of integers, a 1-D numpy integer array
    or a 1-D torch integer tensor (copied to the host); TypeError or ValueError naming `name` otherwise."""
    if _is_tensor(x):
        if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == _torch().bool:
            raise TypeError(f"{name} must hold integers, not {x.dtype}")
        x = x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        if x.ndim != 1 or not np.issubdtype(x.dtype, np.integer):
            raise TypeError(f"{name} must be a 1-D array of integers, not {x.ndim}-D {x.dtype}")
        x = [int(n) for n in x]
    if not isinstance(x, (list, tuple)) or not all(_is_int(n) for n in x):
        raise TypeError(f"{name} must be a list of integers, not {x!r}")
    out = [int(n) for n in x]
    for i, n in enumerate(out):
        if not -2**31 <= n < 2**31:
            raise ValueError(f"{name}[{i}] = {n} does not fit in int32")
    return out


def _variants_text(window, softcap, alibi, varlen, seqused) -> str:
    """What Problem::variants_text() prints: "window=(256,0) softcap=30 alibi=heads varlen seqused_k"."""
    parts = []
    if window != (-1, -1):
        parts.append(f"window=({window[0]},{window[1]})")
    if softcap is not None:
        parts.append(f"softcap={softcap:g}")
    if alibi != "none":
        parts.append(f"alibi={alibi}")
    if varlen:
        parts.append("varlen")
    if seqused:
        parts.append("seqused_k")
    return " ".join(parts)


def _problem(q, k, v, do=None, *, window=None, softcap=None, alibi_slopes=None, cu_seqlens_q=None,
             cu_seqlens_k=None, seqused_k=None):
    """(problem dict, _core.Variants, float32 slopes or None): B, H, H_kv, Nq, Nk, d from the shapes (the
    packed ones with cu_seqlens_q/k, where B is the number of sequences and Nq, Nk the longest), and the
    variants checked for type and shape. ValueError or TypeError naming the field; what only the C++
    judges (offsets that decrease, a sequence longer than allowed) raises flashladder.Error there."""
    # window
    if window is None:
        window = (-1, -1)
    if not isinstance(window, (tuple, list)) or len(window) != 2 or not all(_is_int(w) for w in window):
        raise TypeError(f"window must be a pair of integers (left, right), -1 = unbounded, not {window!r}")
    window = (int(window[0]), int(window[1]))
    for side, w in zip(("window_left", "window_right"), window):
        if w < -1:
            raise ValueError(f"{side} = {w} is not allowed: it must be -1 (unbounded) or a number of keys >= 0")
        if w > 2**40:  # the C++ Problem's limit; above 2^63 the binding could not even take it
            raise ValueError(f"{side} = {w} is more than 2^40 keys, the limit: -1 is the unbounded window")
    # softcap
    if softcap is not None:
        if isinstance(softcap, (bool, np.bool_)) or not isinstance(softcap, (int, float, np.integer, np.floating)):
            raise TypeError(f"softcap must be a number or None (no softcap), not {softcap!r}")
        softcap = float(softcap)
        if not (math.isfinite(softcap) and softcap > 0):
            raise ValueError(f"softcap = {softcap} is not allowed: it must be finite and > 0 (None for no softcap)")
    # shapes: plain or packed
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if varlen:
        if cu_seqlens_q is None or cu_seqlens_k is None:
            given, missing = ("cu_seqlens_q", "cu_seqlens_k") if cu_seqlens_k is None else ("cu_seqlens_k", "cu_seqlens_q")
            raise ValueError(f"{given} is given without {missing}: a variable-length problem needs both")
        cu_q, cu_k = _int_list(cu_seqlens_q, "cu_seqlens_q"), _int_list(cu_seqlens_k, "cu_seqlens_k")
        if len(cu_q) < 2:
            raise ValueError(f"cu_seqlens_q has {len(cu_q)} entries; it needs B + 1 >= 2 (0, then the end of each sequence)")
        if len(cu_k) != len(cu_q):
            raise ValueError(f"cu_seqlens_k has {len(cu_k)} entries but cu_seqlens_q {len(cu_q)}: both are B + 1 offsets")
        shapes = {}
        for name, x in (("q", q), ("k", k), ("v", v), ("do", do)):
            if x is None:
                continue
            _kind(x, name)
            sh = tuple(int(n) for n in x.shape)
            if len(sh) != 3:
                raise ValueError(f"{name} has shape {list(sh)}; with cu_seqlens it must be 3-D (packed): q, o, do "
                                 "[total_q, H, d], k, v [total_k, H_kv, d]")
            if min(sh[1:]) < 1:
                raise ValueError(f"{name} has shape {list(sh)}: heads and d must be at least 1")
            shapes[name] = sh
        total_q, H, d = shapes["q"]
        total_k, H_kv, dk = shapes["k"]
        if dk != d:
            raise ValueError(f"k has shape {list(shapes['k'])} but q {list(shapes['q'])}: k must be [total_k, H_kv, d={d}]")
        if shapes["v"] != shapes["k"]:
            raise ValueError(f"v has shape {list(shapes['v'])} but k {list(shapes['k'])}: they must agree")
        if "do" in shapes and shapes["do"] != shapes["q"]:
            raise ValueError(f"do has shape {list(shapes['do'])} but q {list(shapes['q'])}: they must agree")
        if H % H_kv:
            raise ValueError(f"q has H = {H} heads and k has H_kv = {H_kv}: H must be a multiple of H_kv (GQA/MQA)")
        for name, cu, total, t in (("cu_seqlens_q", cu_q, total_q, "q"), ("cu_seqlens_k", cu_k, total_k, "k")):
            if cu[-1] != total:
                raise ValueError(f"{t} holds {total} tokens (its first dimension) but {name}[-1] = {cu[-1]}: the "
                                 "packed total must agree with the offsets")
        longest = lambda cu: max([1] + [b - a for a, b in zip(cu, cu[1:])])  # noqa: E731
        p = dict(B=len(cu_q) - 1, H=H, H_kv=H_kv, Nq=longest(cu_q), Nk=longest(cu_k), d=d, total_q=total_q,
                 total_k=total_k)
    else:
        cu_q, cu_k = [], []
        p = _shape_problem(q, k, v, do)
    used = [] if seqused_k is None else _int_list(seqused_k, "seqused_k")
    if seqused_k is not None and len(used) != p["B"]:
        raise ValueError(f"seqused_k has {len(used)} entries; it must have B = {p['B']} (one per sequence)")
    # ALiBi slopes: [H] or [B, H] float32
    alibi, slopes = "none", None
    if alibi_slopes is not None:
        _kind(alibi_slopes, "alibi_slopes")
        sh = tuple(int(n) for n in alibi_slopes.shape)
        if sh == (p["H"],):
            alibi = "heads"
        elif sh == (p["B"], p["H"]):
            alibi = "batch_heads"
        else:
            raise ValueError(f"alibi_slopes has shape {list(sh)}; it must be [H] = [{p['H']}] or [B, H] = "
                             f"[{p['B']}, {p['H']}] (fp32)")
        slopes = _input(alibi_slopes, "alibi_slopes").reshape(-1)
    var = _core.Variants(window_left=window[0], window_right=window[1], softcap=softcap, alibi=alibi,
                         cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, seqused_k=used)
    p.update(window=window, softcap=softcap, alibi=alibi, varlen=varlen, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
             seqused_k=used, variants=_variants_text(window, softcap, alibi, varlen, bool(used)))
    return p, var, slopes


def _shapes(p) -> tuple:
    """The shapes of q (o, do, dq), k (v, dk, dv) and lse for problem p: plain or packed."""
    if p.get("varlen"):
        tq, tk = p["total_q"], p["total_k"]
        return (tq, p["H"], p["d"]), (tk, p["H_kv"], p["d"]), (p["H"], tq)
    return ((p["B"], p["H"], p["Nq"], p["d"]), (p["B"], p["H_kv"], p["Nk"], p["d"]), (p["B"], p["H"], p["Nq"]))


def oracle(q, k, v, *, causal: bool = False, scale: Optional[float] = None, do=None, window=None,
           softcap: Optional[float] = None, alibi_slopes=None, cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None):
    """Standard attention in float64 (Eigen): Forward(o, lse), or ForwardBackward(o, lse, dq, dk, dv)
    when the upstream gradient `do` is given.

    q [B, H, Nq, d], k and v [B, H_kv, Nk, d], do [B, H, Nq, d]: numpy arrays or torch tensors of
    float16, bfloat16, float32 or float64 (float64 values must be exact in float32). Nq and Nk are
    independent; causal is aligned bottom-right; scale defaults to 1/sqrt(d). Results are float64 numpy.

    The variants (docs/variants.md): window=(left, right) masks keys further than left before or right
    after the diagonal i + Nk - Nq (-1 = unbounded; intersected with causal); softcap=c makes the logits
    c*tanh(scale*q.k/c); alibi_slopes ([H] or [B, H]) subtracts slope*|i + Nk - Nq - j|; cu_seqlens_q and
    cu_seqlens_k (B + 1 offsets) pack the batch: q, do [total_q, H, d], k, v [total_k, H_kv, d], and the
    results o, dq [total_q, H, d], lse [H, total_q], dk, dv [total_k, H_kv, d], each sequence its own
    problem; seqused_k (B values) limits sequence b to its first seqused_k[b] keys.
    """
    causal, scale = _options(causal, scale)
    p, var, slopes = _problem(q, k, v, do, window=window, softcap=softcap, alibi_slopes=alibi_slopes,
                              cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, seqused_k=seqused_k)
    qa, ka, va = _input(q, "q"), _input(k, "k"), _input(v, "v")
    da = _input(do, "do") if do is not None else None
    out = _core.oracle(p["B"], p["H"], p["H_kv"], p["Nq"], p["Nk"], p["d"], causal, scale, qa, ka, va, da,
                       variants=var, alibi_slopes=slopes)
    return Forward(*out) if do is None else ForwardBackward(*out)


class Inputs(NamedTuple):
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    do: np.ndarray


def inputs(B: int = 1, H: int = 1, Nq: int = 1, d: int = 64, *, H_kv: Optional[int] = None,
           Nk: Optional[int] = None, dtype: str = "fp16", seed: int = 1, mean: float = 0.5,
           q_scale: float = 1.0) -> Inputs:
    """The inputs `flashladder oracle generate` writes for the same problem and --seed: Normal(mean, 1)
    from the project's seeded generator, q times q_scale (20 gives the large-logit case), rounded to
    dtype. numpy arrays: float16 for fp16, float32 for fp32, and float32 holding bf16 values for bf16
    (numpy has no bfloat16; pass dtype='bf16' to check()). H_kv and Nk default to H and Nq."""
    if dtype is None:
        raise ValueError("dtype must be 'fp16', 'bf16' or 'fp32'")
    st = _storage(dtype, "")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        raise TypeError(f"seed must be an integer from 0 to 2^64 - 1, not {seed!r}")
    dims = dict(B=B, H=H, H_kv=H if H_kv is None else H_kv, Nq=Nq, Nk=Nq if Nk is None else Nk, d=d)
    for name, x in dims.items():
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
            raise TypeError(f"{name} must be an integer, not {x!r}")
        if not -2**63 <= x < 2**63:  # pybind11 would refuse it without naming it; the C++ names the limit
            raise ValueError(f"{name} = {x} does not fit in int64 (the problem's limit is 2^40 elements a tensor)")
    for name, x in (("mean", mean), ("q_scale", q_scale)):
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name} must be a number, not {x!r}")
        if not math.isfinite(x):
            raise ValueError(f"{name} = {x} is not allowed: it must be finite")
    out = _core.inputs(dims["B"], dims["H"], dims["H_kv"], dims["Nq"], dims["Nk"], dims["d"], st, int(seed),
                       float(mean), float(q_scale))
    for name, a in zip(("q", "k", "v", "do"), out):
        bad = _first(~np.isfinite(a))
        if bad is not None:  # mean or q_scale beyond what the storage type holds: every later call refuses it
            raise ValueError(f"{name}{list(_index(bad, a.shape))} = {a.flat[bad]} in {st}: mean = {mean} and q_scale = "
                             f"{q_scale} give values beyond what {st} holds; choose smaller ones")
    if st == "fp16":
        out = tuple(a.astype(np.float16) for a in out)  # exact: the values are fp16 already
    return Inputs(*out)


# --- The rule: check() and its report ---------------------------------------------------------------

@dataclass(frozen=True)
class TensorCheck:
    """One tensor against the oracle, by the rule tol = 2 * baseline_err + floor (NaN-proof)."""
    name: str               # "o", "lse", "dq", "dk", "dv" (the golden files' names)
    passed: bool
    max_err: float          # max |candidate - oracle| over entries where both are finite
    tol: float
    baseline_err: float     # max |baseline - oracle|, baseline = Algorithm 0 at the storage type
    floor: float            # unit roundoff of the storage type * max(1, max |oracle|)
    frac: float             # max_err / tol: how much of the tolerance was used
    bad: int                # entries that failed: over tol, NaN, or Inf where the oracle is finite
    nonfinite: int          # NaN or Inf entries where the oracle is finite
    nans: int
    infs: int
    first_bad: str          # "(b, h, i, j) step=... oracle=..." of the first failing entry, or ""
    first_bad_index: Optional[tuple]
    mismatch: str = ""      # a dtype or shape that disagrees with the problem (then nothing was compared)

    def line(self) -> str:
        head = f"{self.name:<5}{'pass' if self.passed else 'FAIL':<6}"
        if self.mismatch:
            return head + self.mismatch
        return (head + f"{self.max_err:>11.3g}{self.tol:>11.3g}{100 * self.frac:>9.1f}%{self.nans:>6}{self.infs:>6}  "
                + ("-" if self.passed else self.first_bad))


@dataclass(frozen=True)
class Report:
    """check()'s verdict: per tensor the rule's numbers, and whether every judged tensor passed."""
    problem: dict
    dtype: str
    tensors: List[TensorCheck] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.tensors) and all(t.passed for t in self.tensors)

    @property
    def tol_used(self) -> float:
        """The largest fraction of the tolerance any tensor used (inf after a mismatch)."""
        return max(((t.frac if not t.mismatch else math.inf) for t in self.tensors), default=math.inf)

    def __getitem__(self, name: str) -> TensorCheck:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(f"{name} was not judged; judged: {', '.join(t.name for t in self.tensors)}")

    def __str__(self) -> str:
        p = self.problem
        scale = p["scale"] if p["scale"] is not None else 1 / math.sqrt(p["d"])
        variants = (" " + p["variants"]) if p.get("variants") else ""
        lines = [f"flashladder check: B={p['B']} H={p['H']} H_kv={p['H_kv']} Nq={p['Nq']} Nk={p['Nk']} "
                 f"d={p['d']} causal={int(p['causal'])} {self.dtype} scale={scale:.4g}{variants}",
                 f"{'':<11}{'max err':>11}{'tol':>11}{'tol used':>10}{'NaN':>6}{'Inf':>6}  first bad entry"]
        lines += [t.line() for t in self.tensors]
        failed = [t.name for t in self.tensors if not t.passed]
        lines.append("PASS" if self.passed else "FAIL: " + " ".join(failed))
        return "\n".join(lines)

    def assert_ok(self) -> "Report":
        """Raises AssertionError with the whole report when any tensor failed; returns self otherwise."""
        if not self.passed:
            raise AssertionError("\n" + str(self))
        return self


def _storage(dtype, q_kind: str) -> str:
    if dtype is None:
        if q_kind == "fp64":
            raise ValueError("q is float64: say which storage type the candidate computed in, "
                             "dtype='fp16', 'bf16' or 'fp32'")
        return q_kind
    name = str(dtype).replace("torch.", "")
    if name not in _STORAGE:
        raise ValueError(f"dtype {dtype!r} is not a storage type; use 'fp16', 'bf16' or 'fp32'")
    return _STORAGE[name]


def _candidate(x, name: str, storage: str, shape: tuple):
    """(float64 values, "") for a candidate the rule can judge, or (None, why) for one that disagrees
    in dtype or shape: that tensor fails, as it does in `flashladder oracle check`."""
    kind = _kind(x, name)
    if kind not in _ACCEPTED[storage]:
        return None, (f"dtype mismatch: {name} is {kind} but its storage type is {storage}; accepted: "
                      + ", ".join(_ACCEPTED[storage]))
    got = tuple(int(n) for n in x.shape)
    if got != shape:
        hint = " (the same dimensions in another order: transposed?)" if sorted(got) == sorted(shape) else ""
        return None, f"shape mismatch: {name} has shape {list(got)} but the problem gives {list(shape)}{hint}"
    return _host(x, name).astype(np.float64), ""


_FIRST_INDEX = re.compile(r"^\(([0-9, ]+)\)")


def check(o, q, k, v, *, causal: bool = False, scale: Optional[float] = None, dtype=None, lse=None, do=None,
          dq=None, dk=None, dv=None, seed: Optional[int] = None, window=None, softcap: Optional[float] = None,
          alibi_slopes=None, cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None) -> Report:
    """Judges a kernel's outputs by the project's rule, with the verdict `flashladder oracle check` gives.

    o (and lse, dq, dk, dv when given) are the kernel's outputs for inputs q, k, v (and upstream
    gradient do, required with dq/dk/dv). dtype is the storage type the kernel computed in ('fp16',
    'bf16', 'fp32'); by default q's (float64 inputs need it named). q, k, v, do must hold values
    exact in that type: the rule feeds the oracle the very inputs the kernel saw. Outputs may come in
    the storage type or a wider float. For each tensor: tol = 2 * max|baseline - oracle| + floor, the
    baseline being standard attention at the storage type; it passes when every entry is within tol,
    NaN and Inf failing (lse must be +inf exactly where a row sees no key). seed, if given, is printed
    with the first bad entry (as the golden files' seed is). The variants' keywords are oracle()'s (with
    cu_seqlens the candidate's o, dq are [total_q, H, d], lse [H, total_q], dk, dv [total_k, H_kv, d]).
    """
    causal, scale = _options(causal, scale)
    if seed is not None and (isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer))
                             or not 0 <= seed < 2**64):
        raise TypeError(f"seed must be None or an integer from 0 to 2^64 - 1, not {seed!r}")
    for name, x in (("o", o), ("lse", lse), ("dq", dq), ("dk", dk), ("dv", dv)):
        if x is not None:
            _kind(x, name)
    if all(x is None for x in (o, lse, dq, dk, dv)):
        raise ValueError("nothing to judge: give o, and/or lse, dq, dk, dv")
    storage = _storage(dtype, _kind(q, "q"))
    p, var, slopes = _problem(q, k, v, do, window=window, softcap=softcap, alibi_slopes=alibi_slopes,
                              cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, seqused_k=seqused_k)
    if do is None and any(x is not None for x in (dq, dk, dv)):
        raise ValueError("dq, dk, dv are judged against the oracle's backward of do: give do too")
    inputs = {}
    for name, x in (("q", q), ("k", k), ("v", v), ("do", do)):
        if x is None:
            continue
        a = _input(x, name)
        bad = _core.first_inexact(a, storage)
        if bad >= 0:
            raise ValueError(f"{name}{list(_index(bad, a.shape))} = {a.flat[bad]!r} is not exactly representable in "
                             f"{storage}: the rule judges a kernel on the inputs it saw, so round the inputs to "
                             f"{storage} first and give the kernel and check() the same values")
        inputs[name] = a
    qs, kvs, ls = _shapes(p)
    wanted = [("o", o, storage, qs), ("lse", lse, "fp32", ls), ("dq", dq, storage, qs), ("dk", dk, storage, kvs),
              ("dv", dv, storage, kvs)]
    candidates, mismatches = {}, {}
    for name, x, st, shape in wanted:
        if x is None:
            continue
        values, why = _candidate(x, name, st, shape)
        if why:
            mismatches[name] = why
        else:
            candidates[name] = values
    judged = {}
    if candidates:
        for r in _core.check(p["B"], p["H"], p["H_kv"], p["Nq"], p["Nk"], p["d"], causal, scale, storage,
                             inputs["q"], inputs["k"], inputs["v"], inputs.get("do"), candidates,
                             0 if seed is None else int(seed), variants=var, alibi_slopes=slopes):
            first = r["first_bad"]
            if seed is None:  # the C++ names a seed; here there is none to name
                first = first.replace(" (seed 0)", "")
            m = _FIRST_INDEX.match(first)
            idx = tuple(int(n) for n in m.group(1).split(",")) if m else None
            judged[r["name"]] = TensorCheck(r["name"], bool(r["passed"]), r["max_err"], r["tol"], r["baseline_err"],
                                            r["floor"], r["frac"], r["bad"], r["nonfinite"], r["nans"], r["infs"],
                                            first, idx)
    nan = math.nan
    tensors = []
    for name, x, _, _ in wanted:
        if name in judged:
            tensors.append(judged[name])
        elif name in mismatches:
            tensors.append(TensorCheck(name, False, nan, nan, nan, nan, nan, 0, 0, 0, 0, "", None, mismatches[name]))
    return Report(dict(p, causal=causal, scale=scale), storage, tensors)


# --- Steps ------------------------------------------------------------------------------------------

class Step:
    """One step of the ladder, callable on tensors. CPU steps (01, 02) take numpy float32 arrays or CPU
    torch tensors; GPU steps take torch CUDA tensors (fp16/bf16; fp32 where the step supports it) and
    run zero-copy on the tensors' memory and torch's current stream of their device. Outputs are
    allocated here, poisoned with NaN before the launch, and returned in the inputs' kind."""

    def __init__(self, name: str):
        info = _core.step_info(str(name))
        self.number: str = info["number"]
        self.folder: str = info["folder"]
        self.change: str = info["change"]
        self.gpu: bool = info["gpu"]
        self.has_backward: bool = info["backward"]
        self.compiled: bool = info["compiled"]
        self.dtypes: List[str] = list(info["dtypes"])
        self.head_dims: List[int] = list(info["head_dims"])

    def __repr__(self) -> str:
        return f"flashladder.step({self.folder!r})"

    # The tensors as this step takes them: contiguous, one dtype, on the step's side of the bus.
    def _take(self, named: dict) -> tuple:
        kinds = {name: _kind(x, name) for name, x in named.items()}
        first = next(iter(named))
        for name, x in named.items():
            if self.gpu:
                if not (_is_tensor(x) and x.is_cuda):
                    raise TypeError(f"step {self.folder} runs on the GPU: {name} must be a torch CUDA tensor, not "
                                    f"{'a CPU tensor' if _is_tensor(x) else type(x).__name__}")
                if x.device != named[first].device:
                    raise ValueError(f"{name} is on {x.device} but {first} on {named[first].device}")
            elif _is_tensor(x) and x.is_cuda:
                raise TypeError(f"step {self.folder} runs on the CPU: {name} must be a numpy array or a CPU tensor")
        if self.gpu and any(not _is_tensor(x) for x in named.values()):
            raise TypeError(f"step {self.folder} runs on the GPU: give torch CUDA tensors")
        if not self.gpu and len({_is_tensor(x) for x in named.values()}) > 1:
            raise TypeError("mix of numpy arrays and torch tensors: give one kind")
        if len(set(kinds.values())) > 1:
            raise TypeError("inputs of different dtypes: " + ", ".join(f"{n} {k}" for n, k in kinds.items()))
        kind = kinds[first]
        if kind == "fp64":
            raise TypeError(f"step {self.folder} takes {', '.join(self.dtypes)} tensors, not float64")
        # Contiguous views are used as they are (zero-copy); others are copied once, as documented.
        if _is_tensor(named[first]):
            out = tuple(x.detach().contiguous() for x in named.values())
        else:
            out = tuple(np.ascontiguousarray(x) for x in named.values())
        return out, kind

    def _refuse(self, p, causal, scale, kind, backward, var):
        why = _core.refusal(self.folder, p["B"], p["H"], p["H_kv"], p["Nq"], p["Nk"], p["d"], causal, scale, kind,
                            backward, variants=var)
        if why:
            raise Error(why)

    def _variant_data(self, like, p, slopes, keep: list) -> dict:
        """The variants' data where the step runs (a CUDA tensor on q's device, or a host array), as the
        pointer keywords of _core.forward/backward; the buffers go into keep, alive until the call returns."""
        def put(values, np_type):
            if values is None or len(values) == 0:
                return 0
            if _is_tensor(like):
                t = _torch()
                x = t.as_tensor(np.asarray(values, dtype=np_type), device=like.device)
            else:
                x = np.ascontiguousarray(values, dtype=np_type)
            keep.append(x)
            return self._ptr(x)
        return dict(alibi_slopes=put(slopes, np.float32),
                    cu_seqlens_q=put(p["cu_seqlens_q"], np.int32),
                    cu_seqlens_k=put(p["cu_seqlens_k"], np.int32),
                    seqused_k=put(p["seqused_k"], np.int32))

    def _alloc(self, like, shape, dtype=None, nbytes=None):
        """An output poisoned with NaN (0xFF bytes for the workspace: NaN in every float type), so an
        entry the step forgets to write can never pass a check."""
        if _is_tensor(like):
            t = _torch()
            if nbytes is not None:
                return t.full((max(nbytes, 1),), 0xFF, dtype=t.uint8, device=like.device)
            return t.full(shape, math.nan, dtype=dtype or like.dtype, device=like.device)
        try:
            if nbytes is not None:
                return np.full(max(nbytes, 1), 0xFF, dtype=np.uint8)
            return np.full(shape, np.nan, dtype=dtype or like.dtype)
        except MemoryError as e:  # numpy's "Unable to allocate 8.00 TiB", said as the module says it
            size = nbytes if nbytes is not None else int(np.prod(shape)) * np.dtype(dtype or like.dtype).itemsize
            raise Error(f"step {self.folder}: its output or workspace of {size} bytes does not fit in this "
                        f"machine's memory; choose a smaller problem") from e

    @staticmethod
    def _ptr(x) -> int:
        return int(x.data_ptr()) if _is_tensor(x) else int(x.ctypes.data)

    def _stream(self, like) -> int:
        if self.gpu:
            return int(_torch().cuda.current_stream(like.device).cuda_stream)
        return 0

    def _device(self, like):
        return _torch().cuda.device(like.device) if self.gpu else contextlib.nullcontext()

    @staticmethod
    def _problem(q, k, v, do, variants):
        return _problem(q, k, v, do, **variants)

    def __call__(self, q, k, v, *, causal: bool = False, scale: Optional[float] = None, **variants):
        """The step's forward: (o, lse), o in the inputs' dtype, lse float32 [B, H, Nq] ([H, total_q]
        packed). The variants' keywords are oracle()'s (window, softcap, alibi_slopes, cu_seqlens_q,
        cu_seqlens_k, seqused_k); a step that does not run one refuses it, naming the steps that do."""
        causal, scale = _options(causal, scale)
        p, var, slopes = self._problem(q, k, v, None, variants)
        (q, k, v), kind = self._take({"q": q, "k": k, "v": v})
        self._refuse(p, causal, scale, kind, False, var)
        lse_type = _torch().float32 if _is_tensor(q) else np.float32
        keep = []
        with self._device(q):
            ws = _core.workspace_bytes(self.folder, p["B"], p["H"], p["H_kv"], p["Nq"], p["Nk"], p["d"], causal,
                                       scale, kind, False, variants=var)
            o = self._alloc(q, q.shape)
            lse = self._alloc(q, _shapes(p)[2], dtype=lse_type)
            w = self._alloc(q, None, nbytes=ws)
            _core.forward(self.folder, p["B"], p["H"], p["H_kv"], p["Nq"], p["Nk"], p["d"], causal, scale, kind,
                          self._ptr(q), self._ptr(k), self._ptr(v), self._ptr(o), self._ptr(lse), self._ptr(w),
                          self._stream(q), variants=var, **self._variant_data(q, p, slopes, keep))
            if keep and self.gpu:  # the launch is asynchronous: the variants' buffers outlive it
                _torch().cuda.current_stream(q.device).synchronize()
        return o, lse

    def backward(self, q, k, v, o, lse, do, *, causal: bool = False, scale: Optional[float] = None, **variants):
        """The step's backward from its own forward's o and lse: (dq, dk, dv) in the inputs' dtype."""
        causal, scale = _options(causal, scale)
        p, var, slopes = self._problem(q, k, v, do, variants)
        _kind(o, "o")  # the types first: a list has no shape to compare
        _kind(lse, "lse")
        if tuple(o.shape) != tuple(q.shape):
            raise ValueError(f"o has shape {list(o.shape)} but q {list(q.shape)}: they must agree")
        want_lse = tuple(_shapes(p)[2])
        if tuple(lse.shape) != want_lse:
            raise ValueError(f"lse has shape {list(lse.shape)}; it must be {list(want_lse)}")
        if _kind(lse, "lse") != "fp32":
            raise TypeError(f"lse must be float32 (the step's forward gives it so), not {_kind(lse, 'lse')}")
        (q, k, v, o, do), kind = self._take({"q": q, "k": k, "v": v, "o": o, "do": do})
        (lse,), _ = self._take({"lse": lse})
        if _is_tensor(lse) != _is_tensor(q) or (_is_tensor(q) and lse.device != q.device):
            raise TypeError("lse must be of the same kind and device as q")
        self._refuse(p, causal, scale, kind, True, var)
        keep = []
        with self._device(q):
            ws = _core.workspace_bytes(self.folder, p["B"], p["H"], p["H_kv"], p["Nq"], p["Nk"], p["d"], causal,
                                       scale, kind, True, variants=var)
            dq, dk, dv = self._alloc(q, q.shape), self._alloc(k, k.shape), self._alloc(v, v.shape)
            w = self._alloc(q, None, nbytes=ws)
            _core.backward(self.folder, p["B"], p["H"], p["H_kv"], p["Nq"], p["Nk"], p["d"], causal, scale, kind,
                           self._ptr(q), self._ptr(k), self._ptr(v), self._ptr(o), self._ptr(lse), self._ptr(do),
                           self._ptr(dq), self._ptr(dk), self._ptr(dv), self._ptr(w), self._stream(q), variants=var,
                           **self._variant_data(q, p, slopes, keep))
            if keep and self.gpu:
                _torch().cuda.current_stream(q.device).synchronize()
        return dq, dk, dv


def step(name: str) -> Step:
    """A step by number ("08g", "8g"), folder ("08g_smem_epilogue") or name; flashladder.Error if none."""
    return Step(name)


def steps() -> List[Step]:
    """Every step of the ladder, in order."""
    return [Step(s["folder"]) for s in _core.steps()]
