#!/usr/bin/env python3
"""flashladder — scripts/compare_torch.py: the last step-08 kernel (and step 09's backward) beside
PyTorch's scaled_dot_product_attention with the backend pinned, on the same GPU, same inputs, same run.

Both sides are timed the same way: CUDA events around each launch, warm-up first, the median of
--reps launches, inputs rotated among enough sets to exceed twice the L2. Our kernels are called
through ctypes (build-gpu/libflashladder_capi.so) on PyTorch's own device tensors.

Correctness, by the tolerance rule of ladder.md: the oracle is PyTorch's math backend in fp64 on the
same (rounded) inputs; the baseline is the math backend at the storage type (standard attention at that
precision); our output passes when max|ours - oracle| <= 2 max|baseline - oracle| + floor.

Writes one JSON record per measurement (impl = step folder, torch_flash, torch_cudnn) and prints a
table of ratios. FLOPs: forward 4·B·H·N²·d (halved when causal), backward 2.5x forward.

The decode sweep (--sweeps decode) also records the device-to-device copy (impl d2d_copy), an empty call
(impl empty_call, pass empty: a kernel of one clock, timed as the calls are) and, at every
point, a kernel that only reads the point's K and V (impl read_stream, pass read: fl_read_stream,
app/read_stream.cu; --no-decode-read skips it): the time any kernel of that shape needs for the bytes.
"""
import argparse
import ctypes
import datetime
import json
import math
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fl_results as flr  # noqa: E402  (need_torch: --help without PyTorch)


def make_parser():
    """The options (built without PyTorch: flr.need_torch parses them where it is missing)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build-gpu/libflashladder_capi.so", type=flr.library_path, help="our C entry points")
    ap.add_argument("--fwd-step", default="08i_pingpong,08j_variants,08k_persistent",
                    help="our forward steps to compare, comma-separated (--fwd-step= for none: a backward-only run); "
                         "the ratio columns are the last one's, and it is timed first at each point")
    ap.add_argument("--bwd-deterministic", default="09e_instruction_budget,09f_dq_writer",
                    help="backward steps also timed in their deterministic mode (records: impl STEP+deterministic)")
    ap.add_argument("--bwd-step", default="09d_variants,09e_instruction_budget,09f_dq_writer",
                    help="our backward steps to compare, comma-separated ('' to skip); the ratio column is the last one's, "
                         "and it is timed first at each point")
    ap.add_argument("--json", default="", type=flr.output_path, help="append JSON records here")
    ap.add_argument("--reps", type=flr.whole(1), default=30)
    ap.add_argument("--warmup", type=flr.whole(0), default=5)
    ap.add_argument("--ns", default="512,1024,2048,4096,8192,16384", help="sequence lengths of the FA2 sweep",
                    type=flr.number_list(1, 16384, " (the FA2 sweep's B is 16384 / N)"))
    ap.add_argument("--check-max-n", type=int, default=2048, help="check against fp64 math only up to this N")
    ap.add_argument("--dims", default="64,128", help="head dims of the FA2 sweep (a subset for a quick look)",
                    type=flr.number_list(1, 2048, " (the FA2 sweep's H is 2048 / d)"))
    ap.add_argument("--causal", default="no,yes", type=flr.word_list("no", "yes"),
                    help="which masks of the FA2 sweep: no, yes or both")
    ap.add_argument("--sweeps", default="fa2", type=flr.word_list("fa2", "decode"),
                    help="which sweeps, comma-separated: fa2 (the FA2 paper's), decode")
    ap.add_argument("--decode-steps", default="08g_smem_epilogue,10_split_kv,10b_cluster_merge",
                    help="our forward steps in the decode sweep (the ratios of the last one listed of 10_split_kv "
                         "and 10b_cluster_merge are printed)")
    ap.add_argument("--decode-b", default="1,16,64", type=flr.number_list(1))
    ap.add_argument("--decode-hkv", default="8,32", type=flr.number_list(1, 32, " (H is 32)"))
    ap.add_argument("--decode-nq", default="1,4", type=flr.number_list(1))
    ap.add_argument("--decode-nk", default="1024,8192,32768,131072", type=flr.number_list(1))
    ap.add_argument("--decode-splits", default="", type=flr.number_list(1),
                    help="also time 10_split_kv and 10b_cluster_merge (those of --decode-steps) with FLASHLADDER_SPLITS "
                         "forced to each of these (the heuristic's check)")
    ap.add_argument("--decode-settle-ms", type=float, default=100.0,
                    help="decode sweep: launch each implementation untimed for this long before its warm-up "
                         "(run 45 on an H100 timed the first implementation of a point up to 16%% low without it)")
    ap.add_argument("--decode-max-bytes", type=float, default=40 * 2**30,
                    help="skip decode points whose K+V exceed this many bytes (B=64, H_kv=32, Nk=131072 is 128 GiB)")
    ap.add_argument("--no-decode-read", dest="decode_read", action="store_false",
                    help="decode sweep: do not time the read-only kernel (fl_read_stream) at each point")
    ap.add_argument("--decode-check-max-bytes", type=float, default=512 * 2**20,
                    help="check decode outputs against fp64 math up to this many K+V bytes")
    return ap


flr.need_torch("compare_torch.py", __doc__, make_parser())
import torch  # noqa: E402
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

DTYPES = {"fp16": (torch.float16, 1), "bf16": (torch.bfloat16, 2)}
assert tuple(DTYPES) == flr.DTYPE_NAMES


def load(lib_path):
    try:
        lib = ctypes.CDLL(lib_path)
    except OSError as e:  # a file that is no library for this machine (a missing one: --lib's check)
        print(f"{os.path.basename(sys.argv[0])}: cannot load --lib {lib_path}: {e}", file=sys.stderr)
        sys.exit(2)
    i64, dbl, vp, ci = ctypes.c_int64, ctypes.c_double, ctypes.c_void_p, ctypes.c_int
    prob = [i64] * 6 + [ci, dbl, ci]
    lib.fl_last_error.restype = ctypes.c_char_p
    lib.fl_workspace_bytes.argtypes = [ctypes.c_char_p] + prob + [ci]
    lib.fl_workspace_bytes.restype = ctypes.c_longlong
    lib.fl_forward.argtypes = [ctypes.c_char_p] + prob + [vp] * 7
    lib.fl_forward.restype = ci
    lib.fl_backward.argtypes = [ctypes.c_char_p] + prob + [vp] * 11
    lib.fl_backward.restype = ci
    lib.fl_set_deterministic.argtypes = [ci]
    lib.fl_set_deterministic.restype = None
    if hasattr(lib, "fl_read_stream"):  # a library built before it has none: the decode sweep then skips it
        lib.fl_read_stream.argtypes = [vp, vp, i64, i64, i64, i64, vp]
        lib.fl_read_stream.restype = ci
    return lib


class Ours:
    def __init__(self, lib, step, B, H, N, d, causal, dt, H_kv=None, Nq=None, Nk=None):
        self.lib, self.step = lib, step.encode()
        self.args = (B, H, H if H_kv is None else H_kv, N if Nq is None else Nq, N if Nk is None else Nk, d,
                     int(causal), 0.0, DTYPES[dt][1])
        self.ws, self.ws_bytes = {}, {}
        for bwd in (0, 1):
            n = lib.fl_workspace_bytes(self.step, *self.args, bwd)
            self.ws_bytes[bwd] = n
            self.ws[bwd] = None if n < 0 else torch.empty(max(n, 1), dtype=torch.uint8, device="cuda")
        if self.ws[0] is None:
            raise RuntimeError(self.lib.fl_last_error().decode())

    def poison_ws(self):
        self.ws[0].fill_(255)

    def _check(self, rc):
        if rc != 0:
            raise RuntimeError(self.lib.fl_last_error().decode())

    def forward(self, q, k, v, o, lse, poison_ws=True):
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        if poison_ws:
            self.ws[0].fill_(255)  # poisoned, as in the C++ runner (the decode sweep does it before timing)
        self._check(self.lib.fl_forward(self.step, *self.args, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                        o.data_ptr(), lse.data_ptr(), self.ws[0].data_ptr(), stream))

    def poison_bwd_ws(self):
        self.ws[1].fill_(255)

    def backward(self, q, k, v, o, lse, do, dq, dk, dv, poison_ws=True):
        """poison_ws: fill the workspace with 255 first, on the stream. A timed launch passes False and
        poisons in time_launches' `before`, untimed, as the C++ runner does (app/gpu.cu): the fill of
        09f's workspace (the fp32 dQ accumulator, 135 MB at B 4, H 16, N 4096, d 128) is a memset as
        long as 2% of its backward, which the comparisons until run 63 timed as part of ours."""
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        if poison_ws:
            self.ws[1].fill_(255)
        self._check(self.lib.fl_backward(self.step, *self.args, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                         o.data_ptr(), lse.data_ptr(), do.data_ptr(), dq.data_ptr(), dk.data_ptr(),
                                         dv.data_ptr(), self.ws[1].data_ptr(), stream))


def time_launches(fn, sets, warmup, reps, before=None, lead_in_cycles=None, settle_ms=0.0):
    """CUDA events around each launch; before(i) runs untimed first (e.g. poisoning). A GPU sleep of
    lead_in_cycles clocks (default LEAD_IN, ~1 ms; 0 for none) is queued before the start event, so that
    the GPU is still busy when the host has queued the launch: the events then time the GPU's work, not
    the host's call overhead. Every side of every comparison is timed this way. Without it (the FA2
    sweep until run 64), the GPU sat idle at the start event while the host prepared the call: torch's
    autograd backward spent ~0.3 ms there (H100, B 4, H 16, N 4096, d 128: cuDNN's kernels 2516 µs,
    its call 2875 µs; scripts/kernel_times.py, run 64), and our side hid its own host time behind the
    poisoning fills of `before`, so the comparison favoured us. settle_ms > 0: before the warm-up,
    launch untimed until that much wall time has passed (every implementation gets the same)."""
    if lead_in_cycles is None:
        lead_in_cycles = LEAD_IN
    if settle_ms > 0:
        t0 = time.perf_counter()
        it = 0
        while (time.perf_counter() - t0) * 1e3 < settle_ms:
            fn(sets[it % len(sets)])
            it += 1
            if it % 8 == 0:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
    ms = []
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for it in range(warmup + reps):
        s = sets[it % len(sets)]
        if before:
            before(s)
        if lead_in_cycles:
            torch.cuda._sleep(lead_in_cycles)
        start.record()
        fn(s)
        stop.record()
        stop.synchronize()
        if it >= warmup:
            ms.append(start.elapsed_time(stop))
    ms.sort()
    n = len(ms)
    med = ms[n // 2] if n % 2 else 0.5 * (ms[n // 2 - 1] + ms[n // 2])
    return {"median_ms": med, "min_ms": ms[0], "p90_ms": ms[max(math.ceil(0.9 * n), 1) - 1], "reps": n}


def judged_first(steps):
    """The order in which the steps of one point are timed: the last listed (the one whose ratios the
    table reports and scripts/bars.py judges) first, then the others in their order. At non-causal
    N = 16384 a backward step timed second at a point ran 3-9% slower than timed first, in either order
    of two steps (H100, runs 54-55), and timed first it matched the program's own timing; so the step
    that is judged is not the one that pays for the order."""
    return steps[-1:] + steps[:-1]


def make_sets(B, H, N, d, dt, nsets, grad):
    tdt = DTYPES[dt][0]
    g = torch.Generator(device="cuda").manual_seed(1)
    sets = []
    for _ in range(nsets):
        q, k, v, do = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float32, generator=g).add_(0.5).to(tdt)
                       for _ in range(4))
        sets.append({"q": q.requires_grad_(grad), "k": k.requires_grad_(grad), "v": v.requires_grad_(grad), "do": do})
    return sets


def carried_commit():
    """The commit tools/device-run's callers write to .carry/commit: on the GPU machine the copy's own git
    HEAD is not the working tree's (run 99's second sweep, called beside device-run without
    FLASHLADDER_COMMIT, recorded the last landed commit instead of the one it ran)."""
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".carry", "commit")) as f:
            return f.read().strip()
    except OSError:
        return ""


def record_commit():
    """The commit a record names without FLASHLADDER_COMMIT: git's HEAD when the tracked files are HEAD's;
    else .carry/commit (the GPU machine's copy: files of the working tree on an older HEAD); else HEAD
    marked "-dirty" (as app/record.cpp does); else "unknown"."""
    run = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True).stdout.strip()
    head = run("rev-parse", "--short=12", "HEAD")
    dirty = bool(head) and bool(run("status", "--porcelain", "--untracked-files=no"))
    if head and not dirty:
        return head
    return carried_commit() or (head + "-dirty" if head else "unknown")


def run_env():
    """The fields every record carries about the run: device, SM count, CUDA, driver, commit, date, torch,
    and the GPU's uuid: H200s of one name and driver do not all time alike (on 4 of 14 machines in runs
    210-226 10b's 72 blocks in clusters of 9 ran 12-18% slower, steps/10b_cluster_merge/README.md, "No GPC
    holds two clusters of 9"), so a record names the GPU it came from."""
    props = torch.cuda.get_device_properties(0)
    commit = os.environ.get("FLASHLADDER_COMMIT") or record_commit()
    env = {"device": props.name, "sm_count": props.multi_processor_count, "cuda": torch.version.cuda,
           "driver": "", "commit": commit, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "torch": torch.__version__, "gpu_uuid": str(getattr(props, "uuid", "") or "")}
    try:
        env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                       capture_output=True, text=True).stdout.strip().splitlines()[0]
    except Exception:
        pass
    return env


def problem_inputs(a):
    """Q, K, V, dO of the problem fl_results.add_problem_args parsed: [B][H][N][d], seeded, with a non-zero mean."""
    g = torch.Generator(device="cuda").manual_seed(1)
    return tuple(torch.randn(a.B, a.H, a.N, a.d, device="cuda", generator=g).add_(0.5).to(DTYPES[a.dtype][0])
                 for _ in range(4))


def flops(B, H, N, d, causal, bwd):
    f = 4.0 * B * H * N * N * d / (2 if causal else 1)
    return 2.5 * f if bwd else f


def grad_check(ours, q, k, v, do, causal, dt):
    """Max error of our dQ, dK, dV against autograd through math-fp64, and the tolerance of each:
    2x the error of autograd through math at the storage type + floor. Returns the largest fraction."""
    def grads(x_dtype):
        qq, kk, vv = (t.detach().to(x_dtype).requires_grad_(True) for t in (q, k, v))
        with sdpa_kernel(SDPBackend.MATH):
            out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)
        return torch.autograd.grad(out, (qq, kk, vv), do.to(x_dtype))
    ref, base = grads(torch.float64), grads(q.dtype)
    u = 2.0 ** -11 if dt == "fp16" else 2.0 ** -8
    used = 0.0
    for o, r, b in zip(ours, ref, base):
        if not torch.isfinite(o).all():
            return float("inf")
        err = (o.double() - r).abs().max().item()
        tol = 2 * (b.double() - r).abs().max().item() + u * max(1.0, r.abs().max().item())
        used = max(used, err / tol)
    return used


def tolerance_check(ours_o, q, k, v, causal, dt, gqa=False):
    """Max error of ours against math-fp64, and 2x the math-at-storage-type baseline error + floor."""
    kw = {"enable_gqa": True} if gqa else {}
    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal, **kw)
        base = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **kw)
    if not torch.isfinite(ours_o).all():
        return float("inf"), 0.0
    err = (ours_o.double() - ref).abs().max().item()
    base_err = (base.double() - ref).abs().max().item()
    u = 2.0 ** -11 if dt == "fp16" else 2.0 ** -8
    tol = 2 * base_err + u * max(1.0, ref.abs().max().item())
    return err, tol


# ---- The decode sweep (issue 17) -------------------------------------------------------------------
# A few query rows against a long KV cache: B in {1, 16, 64}, H = 32, H_kv in {8, 32}, Nq in {1, 4},
# Nk in {1024 … 131072}, d = 128, fp16, non-causal (PyTorch's is_causal aligns the mask top-left when
# Nq != Nk; decoding wants bottom-right, where Nq = 1 sees every key anyway). Decoding is a memory
# problem: ~1 multiply-add per byte of K and V, so besides TFLOP/s each record has the K+V bytes moved
# per second and their fraction of the device-to-device copy bandwidth measured in the same run
# (copy: read + write bytes of a 2 GiB cudaMemcpy-like torch copy_, over its time).
# Every launch (ours and torch's) is timed with a GPU sleep queued before its start event
# (time_launches' lead_in_cycles), so the figure is the GPU's time, not Python's call overhead.
LEAD_IN = 2_000_000  # clocks of torch.cuda._sleep, ~1 ms: longer than any host call it has to hide


def copy_bandwidth(warmup, reps, nbytes=2 << 30):
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    t = time_launches(lambda _: dst.copy_(src), [None], warmup, reps, lead_in_cycles=LEAD_IN)
    del src, dst
    torch.cuda.empty_cache()
    return t, 2.0 * nbytes / (t["median_ms"] * 1e-3)


def decode_sweep(args, lib, env, out):
    failures = []
    t_copy, copy_bw = copy_bandwidth(args.warmup, args.reps)
    rec = {"impl": "d2d_copy", "pass": "copy", "dtype": "u8", "B": None, "H": None, "H_kv": None, "Nq": None,
           "Nk": None, "d": None, "causal": None, **t_copy, "tflops": None, "tol_used": None,
           "bytes": 2 << 30, "bytes_per_s": copy_bw, **env, "suite": "compare_torch_decode",
           "note": "device-to-device copy of 2 GiB (torch copy_), bytes_per_s counts read + write"}
    if out:
        out.write(json.dumps(rec) + "\n")
        out.flush()
    print(f"decode sweep: device-to-device copy {copy_bw / 1e12:.2f} TB/s (read + write, 2 GiB, median of {args.reps})",
          flush=True)
    # An empty call, timed as every launch here: a kernel that spins for one clock (torch.cuda._sleep(1)).
    # What no call escapes by this method (the launch between two events, a block's start and end), and so
    # the time that issue 17's 85% line leaves for the bytes at small reads (scripts/bars.py says it).
    t_empty = time_launches(lambda _: torch.cuda._sleep(1), [None], args.warmup, args.reps, lead_in_cycles=LEAD_IN)
    rec = {"impl": "empty_call", "pass": "empty", "dtype": None, "B": None, "H": None, "H_kv": None, "Nq": None,
           "Nk": None, "d": None, "causal": None, **t_empty, "tflops": None, "tol_used": None, **env,
           "suite": "compare_torch_decode", "note": "one launch of torch.cuda._sleep(1), timed as the decode calls"}
    if out:
        out.write(json.dumps(rec) + "\n")
        out.flush()
    print(f"decode sweep: an empty call {t_empty['median_ms'] * 1e3:.1f} µs (median of {args.reps})", flush=True)
    steps = [x for x in args.decode_steps.split(",") if x]
    forced = [int(x) for x in args.decode_splits.split(",") if x]
    dt, d, H, causal = "fp16", 128, 32, False
    tdt = DTYPES[dt][0]
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 60 << 20)
    for B in [int(x) for x in args.decode_b.split(",")]:
        for H_kv in [int(x) for x in args.decode_hkv.split(",")]:
            for Nq in [int(x) for x in args.decode_nq.split(",")]:
                for Nk in [int(x) for x in args.decode_nk.split(",")]:
                    kv_bytes = 2 * B * H_kv * Nk * d * 2
                    if kv_bytes > args.decode_max_bytes:
                        print(f"B={B:2d} H_kv={H_kv:2d} Nq={Nq} Nk={Nk:6d}: not run: K+V are {kv_bytes / 2**30:.0f} GiB, "
                              f"over --decode-max-bytes ({args.decode_max_bytes / 2**30:.0f} GiB)", flush=True)
                        continue
                    nsets = max(1, min(64, (2 * l2) // kv_bytes + 1))
                    # Every implementation of a point reads the same K and V, but where they land depends on
                    # the sweep so far: on the H100 the last point (B 64, H_kv 32, Nq 4, Nk 32768) got a
                    # placement in which kernels that read K and V in step (ours, fl_read_stream) ran 2.5%
                    # slower, cuDNN by under 1% (runs 163-167, steps/10_split_kv/README.md, "Where K and V sit in DRAM").
                    g = torch.Generator(device="cuda").manual_seed(17)
                    sets = []
                    for _ in range(nsets):
                        q = torch.randn(B, H, Nq, d, device="cuda", dtype=tdt, generator=g).add_(0.5)
                        k = torch.randn(B, H_kv, Nk, d, device="cuda", dtype=tdt, generator=g).add_(0.5)
                        v = torch.randn(B, H_kv, Nk, d, device="cuda", dtype=tdt, generator=g).add_(0.5)
                        sets.append({"q": q, "k": k, "v": v, "o": torch.empty_like(q),
                                     "lse": torch.empty(B, H, Nq, device="cuda", dtype=torch.float32)})
                    fl = 4.0 * B * H * Nq * Nk * d

                    def emit(impl, t, tol_used, extra):
                        r = {"impl": impl, "pass": "fwd", "dtype": dt, "B": B, "H": H, "H_kv": H_kv, "Nq": Nq, "Nk": Nk,
                             "d": d, "causal": causal, **t, "tflops": fl / (t["median_ms"] * 1e-3) / 1e12,
                             "tol_used": tol_used, "kv_bytes": kv_bytes,
                             "kv_bytes_per_s": kv_bytes / (t["median_ms"] * 1e-3), "copy_bytes_per_s": copy_bw,
                             **env, "suite": "compare_torch_decode", **extra}
                        r["kv_frac_of_copy"] = r["kv_bytes_per_s"] / copy_bw
                        if out:
                            out.write(json.dumps(r) + "\n")
                            out.flush()
                        return r

                    row = {}
                    split_steps = [st for st in steps if st in ("10_split_kv", "10b_cluster_merge")] or ["10_split_kv"]
                    runs = [(st, None) for st in steps] + [(st, S) for st in split_steps for S in forced]
                    for step, S in runs:
                        label = step if S is None else f"{step}@S={S}"
                        try:
                            if S is not None:
                                os.environ["FLASHLADDER_SPLITS"] = str(S)
                            ours = Ours(lib, step, B, H, None, d, causal, dt, H_kv=H_kv, Nq=Nq, Nk=Nk)
                            extra = {}
                            if step.startswith("10_"):  # the S it used: its workspace is S x rows x (d + 1) floats (10b has none on its clusters)
                                per = B * H * Nq * (d + 1) * 4
                                extra["splits"] = max(1, ours.ws_bytes[0] // per)
                            if step.startswith("10"):
                                extra["splits_forced"] = S is not None
                                if S is not None:
                                    extra["splits_asked"] = S  # 10b clamps it to its largest cluster, unrecorded
                            fwd = lambda s, ours=ours: ours.forward(s["q"], s["k"], s["v"], s["o"], s["lse"], poison_ws=False)
                            poison = lambda s, ours=ours: (s["o"].fill_(float("nan")), s["lse"].fill_(float("nan")),
                                                          ours.poison_ws())
                            tol_used = None
                            if kv_bytes <= args.decode_check_max_bytes:
                                s0 = sets[0]
                                poison(s0)
                                fwd(s0)
                                torch.cuda.synchronize()
                                err, tol = tolerance_check(s0["o"], s0["q"], s0["k"], s0["v"], causal, dt, gqa=True)
                                tol_used = err / tol
                                if not err <= tol:
                                    failures.append(f"{label} decode B={B} H_kv={H_kv} Nq={Nq} Nk={Nk}: error {err:.3g} > "
                                                    f"tolerance {tol:.3g}")
                            t = time_launches(fwd, sets, args.warmup, args.reps, before=poison, lead_in_cycles=LEAD_IN,
                                              settle_ms=args.decode_settle_ms)
                            row[label] = emit(step, t, tol_used, extra)
                        except Exception as e:
                            print(f"  {label} B={B} H_kv={H_kv} Nq={Nq} Nk={Nk}: {e}", file=sys.stderr)
                            failures.append(f"{label} decode B={B} H_kv={H_kv} Nq={Nq} Nk={Nk}: {e}")
                        finally:
                            os.environ.pop("FLASHLADDER_SPLITS", None)
                    for name, backend in (("torch_flash", SDPBackend.FLASH_ATTENTION), ("torch_cudnn", SDPBackend.CUDNN_ATTENTION)):
                        try:
                            with sdpa_kernel(backend), torch.no_grad():
                                f = lambda s: F.scaled_dot_product_attention(s["q"], s["k"], s["v"], enable_gqa=True)
                                t = time_launches(f, sets, args.warmup, args.reps, lead_in_cycles=LEAD_IN,
                                                  settle_ms=args.decode_settle_ms)
                            row[name] = emit(name, t, None, {"gqa": "native"})
                        except Exception as e:  # a backend that refuses a shape is reported, not hidden
                            print(f"  {name} B={B} H_kv={H_kv} Nq={Nq} Nk={Nk} (enable_gqa): {e}", file=sys.stderr)
                            if H_kv == H or kv_bytes * H // H_kv > args.decode_max_bytes:
                                continue
                            # Without native GQA the backend reads K, V expanded to H heads: timed so (the record
                            # says gqa = expanded; kv_bytes stays the problem's own K+V).
                            try:
                                sets_x = [{"q": s["q"], "k": s["k"].repeat_interleave(H // H_kv, 1),
                                           "v": s["v"].repeat_interleave(H // H_kv, 1)} for s in sets[:max(1, nsets // (H // H_kv))]]
                                with sdpa_kernel(backend), torch.no_grad():
                                    f = lambda s: F.scaled_dot_product_attention(s["q"], s["k"], s["v"])
                                    t = time_launches(f, sets_x, args.warmup, args.reps, lead_in_cycles=LEAD_IN)
                                row[name] = emit(name, t, None, {"gqa": "expanded"})
                                del sets_x
                            except Exception as e2:
                                print(f"  {name} B={B} H_kv={H_kv} Nq={Nq} Nk={Nk} (expanded K, V): {e2}", file=sys.stderr)
                    # A kernel that only reads the same K and V (app/read_stream.cu), timed as the steps are: how
                    # long any kernel of this shape takes for the call's bytes (scripts/bars.py sets it beside the
                    # 85% bar). About two blocks per SM, at least one per (batch, K/V head).
                    read = None
                    if args.decode_read:
                        try:
                            if not hasattr(lib, "fl_read_stream"):
                                raise RuntimeError("the library has no fl_read_stream (built before it; --no-decode-read)")
                            grid = max(B * H_kv, 2 * props.multi_processor_count)

                            def read_kv(s):
                                stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
                                if lib.fl_read_stream(s["k"].data_ptr(), s["v"].data_ptr(), B * H_kv, Nk, d * 2, grid, stream):
                                    raise RuntimeError(lib.fl_last_error().decode())
                            t = time_launches(read_kv, sets, args.warmup, args.reps, lead_in_cycles=LEAD_IN,
                                              settle_ms=args.decode_settle_ms)
                            read = {"impl": "read_stream", "pass": "read", "dtype": dt, "B": B, "H": H, "H_kv": H_kv,
                                    "Nq": Nq, "Nk": Nk, "d": d, "causal": causal, **t, "tflops": None, "tol_used": None,
                                    "kv_bytes": kv_bytes,
                                    "kv_bytes_per_s": kv_bytes / (t["median_ms"] * 1e-3), "copy_bytes_per_s": copy_bw,
                                    "blocks_asked": grid, **env, "suite": "compare_torch_decode"}
                            read["kv_frac_of_copy"] = read["kv_bytes_per_s"] / copy_bw
                            if out:
                                out.write(json.dumps(read) + "\n")
                                out.flush()
                        except Exception as e:
                            print(f"  read_stream B={B} H_kv={H_kv} Nk={Nk}: {e}", file=sys.stderr)
                            failures.append(f"read_stream decode B={B} H_kv={H_kv} Nk={Nk}: {e}")
                    del sets
                    torch.cuda.empty_cache()
                    cells = "  ".join(f"{k} {r['tflops']:5.1f} TF {r['kv_bytes_per_s'] / 1e12:4.2f} TB/s"
                                      + (f" (S={r['splits']})" if "splits" in r else "") for k, r in row.items())
                    ratio = ""
                    top = next((st for st in reversed(steps) if st in ("10_split_kv", "10b_cluster_merge") and st in row), None)
                    if top:
                        ms, n = row[top]["median_ms"], top.split("_")[0]
                        ratio = "  {n}/flash {:.2f}  {n}/cudnn {:.2f}  {n} at {:.0%} of copy".format(
                            row["torch_flash"]["median_ms"] / ms if "torch_flash" in row else float("nan"),
                            row["torch_cudnn"]["median_ms"] / ms if "torch_cudnn" in row else float("nan"),
                            row[top]["kv_frac_of_copy"], n=n)
                    if read:
                        ratio += f"  read-only kernel at {read['kv_frac_of_copy']:.0%}"
                    print(f"B={B:2d} H_kv={H_kv:2d} Nq={Nq} Nk={Nk:6d}: {cells}{ratio}", flush=True)
    return failures


def main():
    args = make_parser().parse_args()

    if not torch.cuda.is_available():
        sys.exit("compare_torch.py: needs a CUDA device")
    lib = load(args.lib)
    props = torch.cuda.get_device_properties(0)
    env = run_env()
    try:
        out = open(args.json, "a") if args.json else None
    except OSError as e:
        print(f"compare_torch.py: cannot write --json {args.json}: {e.strerror}", file=sys.stderr)
        sys.exit(2)
    l2 = getattr(props, "L2_cache_size", 60 << 20)

    def emit(impl, pas, B, H, N, d, causal, dt, t, tol_used, extra=None):
        r = {"impl": impl, "pass": pas, "dtype": dt, "B": B, "H": H, "H_kv": H, "Nq": N, "Nk": N, "d": d,
             "causal": causal, **t, "tflops": flops(B, H, N, d, causal, pas == "bwd") / (t["median_ms"] * 1e-3) / 1e12,
             "tol_used": tol_used, **env, "suite": "compare_torch"}
        if extra:
            r.update(extra)
        if out:
            out.write(json.dumps(r) + "\n")
            out.flush()
        return r

    sweeps = [x for x in args.sweeps.split(",") if x]
    points = []
    dims = [int(x) for x in args.dims.split(",") if x]
    masks = [{"no": False, "yes": True}[x] for x in args.causal.split(",") if x]
    for d in (dims if "fa2" in sweeps else ()):
        for causal in masks:
            for N in [int(x) for x in args.ns.split(",")]:
                points.append((16384 // N, 2048 // d, N, d, causal, "fp16"))
    if "fa2" in sweeps and 128 in dims and False in masks:
        points.append((4, 16, 4096, 128, False, "bf16"))  # the headline in bf16 too

    fwd_steps = [x for x in args.fwd_step.split(",") if x]
    failures = []
    rows = []
    for (B, H, N, d, causal, dt) in points:
        set_bytes = 4 * B * H * N * d * 2
        nsets = max(1, min(16, (2 * l2) // set_bytes + 1))
        sets = make_sets(B, H, N, d, dt, nsets, grad=bool(args.bwd_step))
        row = {"B": B, "H": H, "N": N, "d": d, "causal": causal, "dtype": dt}
        # ours, forward: each step of --fwd-step on the same inputs
        for s in sets:
            s["o"] = torch.empty_like(s["q"], requires_grad=False)
            s["lse"] = torch.empty(B, H, N, device="cuda", dtype=torch.float32)
        poison = lambda s: (s["o"].fill_(float("nan")), s["lse"].fill_(float("nan")))
        ours = fwd = None
        for step in judged_first(fwd_steps):
            ours = fwd = None  # the previous step's workspace back to the cache first: every step gets the same addresses
            ours = Ours(lib, step, B, H, N, d, causal, dt)
            fwd = lambda s, ours=ours: ours.forward(s["q"], s["k"], s["v"], s["o"], s["lse"], poison_ws=False)
            poison_f = lambda s, ours=ours: (poison(s), ours.poison_ws())  # untimed (the timed call leaves ws)
            tol_used = None
            if N <= args.check_max_n:
                s = sets[0]
                poison_f(s)
                fwd(s)
                torch.cuda.synchronize()
                err, tol = tolerance_check(s["o"], s["q"].detach(), s["k"].detach(), s["v"].detach(), causal, dt)
                tol_used = err / tol
                row.setdefault("check", "pass")
                if not err <= tol:
                    row["check"] = "FAIL"
                    failures.append(f"{step} forward N={N} d={d} causal={causal} {dt}: error {err:.3g} > tolerance {tol:.3g}")
            t = time_launches(fwd, sets, args.warmup, args.reps, before=poison_f)
            row[step] = emit(step, "fwd", B, H, N, d, causal, dt, t, tol_used)["tflops"]
        row["ours"] = row[fwd_steps[-1]] if fwd_steps else float("nan")
        # torch backends, forward (not timed when no forward step is: --fwd-step= for a backward-only run)
        for name, backend in (("torch_flash", SDPBackend.FLASH_ATTENTION), ("torch_cudnn", SDPBackend.CUDNN_ATTENTION))[:2 if fwd_steps else 0]:
            try:
                with sdpa_kernel(backend):
                    f = lambda s: F.scaled_dot_product_attention(s["q"], s["k"], s["v"], is_causal=causal)
                    with torch.no_grad():
                        t = time_launches(f, sets, args.warmup, args.reps)
                row[name] = emit(name, "fwd", B, H, N, d, causal, dt, t, None)["tflops"]
            except Exception as e:  # a backend that refuses a shape is reported, not hidden
                row[name] = float("nan")
                print(f"  {name} N={N} d={d} causal={causal}: {e}", file=sys.stderr)
        # backward: each step of --bwd-step, then torch FLASH's, on the same inputs
        bwd_steps = [x for x in args.bwd_step.split(",") if x]
        # Every backward step of a point runs on the same buffers at the same addresses: O, dQ, dK, dV are
        # allocated once here, and a step's workspace is returned to PyTorch's cache before the next
        # step's (the same size, so the same block), so that no step is timed on other addresses than
        # the one before it. This was meant to remove an order effect and did not: at non-causal
        # N = 16384 (B 1, d 64 and 128) whichever step is timed second runs 3-9% slower, with per-step
        # buffers (H100, run 54: 09f 453 against 09e 495 TFLOP/s at d 128; swapped, 09f 500 against 09e
        # 486) and with these (run 55: 460 against 503; swapped, 505 against 490), while the program's
        # own timing gave 09f 498-501 against 09e 493-497 in both orders (run 54). The cause is not found;
        # compare two steps at that point in both orders (docs/results/explorations/README.md).
        if bwd_steps:
            for s in sets:
                s["o9"] = torch.empty_like(s["o"])
                s["dq"], s["dk"], s["dv"] = (torch.empty_like(s["o"]) for _ in range(3))
        ob = obd = bwd = bwd_d = None
        for step in judged_first(bwd_steps):
            try:
                ob = obd = bwd = bwd_d = None  # (the lambdas hold the step too)
                ob = Ours(lib, step, B, H, N, d, causal, dt)
                for s in sets:
                    ob.forward(s["q"], s["k"], s["v"], s["o9"], s["lse"])
                bwd = lambda s, ob=ob: ob.backward(s["q"], s["k"], s["v"], s["o9"], s["lse"], s["do"], s["dq"], s["dk"], s["dv"],
                                                   poison_ws=False)
                bwd_used = None
                if N <= args.check_max_n:  # dQ, dK, dV against autograd through math in fp64
                    s = sets[0]
                    for x in ("dq", "dk", "dv"):
                        s[x].fill_(float("nan"))
                    ob.poison_bwd_ws()
                    bwd(s)
                    torch.cuda.synchronize()
                    bwd_used = grad_check((s["dq"], s["dk"], s["dv"]), s["q"], s["k"], s["v"], s["do"], causal, dt)
                    if row.get("bwd_check") != "FAIL":
                        row["bwd_check"] = "pass" if bwd_used <= 1 else "FAIL"
                    if not bwd_used <= 1:
                        failures.append(f"{step} backward N={N} d={d} causal={causal} {dt}: "
                                        f"{bwd_used:.2f} of the tolerance")
                # dQ, dK, dV and the workspace poisoned before each launch, untimed
                poison_g = lambda s, ob=ob: ([s[x].fill_(float("nan")) for x in ("dq", "dk", "dv")], ob.poison_bwd_ws())
                t = time_launches(bwd, sets, args.warmup, args.reps, before=poison_g)
                row[step + "_bwd"] = emit(step, "bwd", B, H, N, d, causal, dt, t, bwd_used)["tflops"]
                if step in args.bwd_deterministic.split(","):  # the same backward, dQ added in a fixed order
                    lib.fl_set_deterministic(1)
                    try:
                        ob = bwd = None
                        obd = Ours(lib, step, B, H, N, d, causal, dt)  # its workspace, with the mode on
                        bwd_d = lambda s, ob=obd: ob.backward(s["q"], s["k"], s["v"], s["o9"], s["lse"], s["do"],
                                                             s["dq"], s["dk"], s["dv"], poison_ws=False)
                        poison_d = lambda s, ob=obd: ([s[x].fill_(float("nan")) for x in ("dq", "dk", "dv")],
                                                      ob.poison_bwd_ws())
                        t = time_launches(bwd_d, sets, args.warmup, args.reps, before=poison_d)
                    finally:
                        lib.fl_set_deterministic(0)
                    row[step + "_det_bwd"] = emit(step + "+deterministic", "bwd", B, H, N, d, causal, dt, t, None,
                                                  {"deterministic": True})["tflops"]
            except Exception as e:
                print(f"  {step} backward N={N} d={d} causal={causal}: {e}", file=sys.stderr)
                failures.append(f"{step} backward N={N} d={d} causal={causal} {dt}: {e}")
        if bwd_steps:
            row["ours_bwd"] = row.get(bwd_steps[-1] + "_bwd", float("nan"))
            # torch's backends, backward: FLASH (FlashAttention-2) and cuDNN, each on its own forward
            for name, backend in (("torch_flash", SDPBackend.FLASH_ATTENTION), ("torch_cudnn", SDPBackend.CUDNN_ATTENTION)):
                try:
                    with sdpa_kernel(backend):
                        for s in sets:
                            s["out_t"] = F.scaled_dot_product_attention(s["q"], s["k"], s["v"], is_causal=causal)
                        g = lambda s: torch.autograd.grad(s["out_t"], (s["q"], s["k"], s["v"]), s["do"], retain_graph=True)
                        t = time_launches(g, sets, args.warmup, args.reps)
                    row[name + "_bwd"] = emit(name, "bwd", B, H, N, d, causal, dt, t, None)["tflops"]
                except Exception as e:
                    print(f"  {name} backward N={N} d={d} causal={causal}: {e}", file=sys.stderr)
        rows.append(row)
        del sets
        torch.cuda.empty_cache()
        others = "".join(f"{st[:3]} {row[st]:6.1f}  " for st in fwd_steps[:-1])
        last = fwd_steps[-1][:3] if fwd_steps else "fwd"
        print(f"d={d:3d} {'causal' if causal else 'full  '} {dt} N={N:5d}: {others}{last} {row['ours']:6.1f}  flash "
              f"{row.get('torch_flash', float('nan')):6.1f}  cudnn {row.get('torch_cudnn', float('nan')):6.1f}  "
              f"ours/flash {row['ours'] / row.get('torch_flash', float('nan')):5.2f}  "
              f"ours/cudnn {row['ours'] / row.get('torch_cudnn', float('nan')):5.2f}  check {row.get('check', '-')}"
              + (f"  | bwd " + "".join(f"{st[:3]} {row.get(st + '_bwd', float('nan')):6.1f}  " for st in bwd_steps[:-1])
                 + f"{bwd_steps[-1][:3]} {row.get('ours_bwd', float('nan')):6.1f} flash {row.get('torch_flash_bwd', float('nan')):6.1f}"
                 f" cudnn {row.get('torch_cudnn_bwd', float('nan')):6.1f}"
                 f" /flash {row.get('ours_bwd', float('nan')) / row.get('torch_flash_bwd', float('nan')):5.2f}"
                 f" /cudnn {row.get('ours_bwd', float('nan')) / row.get('torch_cudnn_bwd', float('nan')):5.2f}"
                 + f" det {row.get(bwd_steps[-1] + '_det_bwd', float('nan')):6.1f}"
                 + f" check {row.get('bwd_check', '-')}" if bwd_steps else ""), flush=True)
    if "decode" in sweeps:
        failures += decode_sweep(args, lib, env, out)
    if out:
        out.close()
    if failures:
        print("compare_torch.py: checks FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
