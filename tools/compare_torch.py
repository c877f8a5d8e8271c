#!/usr/bin/env python3
"""flashladder — tools/compare_torch.py: the last step-08 kernel (and step 09's backward) beside
PyTorch's scaled_dot_product_attention with the backend pinned, on the same GPU, same inputs, same run.

Both sides are timed the same way: CUDA events around each launch, warm-up first, the median of
--reps launches, inputs rotated among enough sets to exceed twice the L2. Our kernels are called
through ctypes (build-gpu/libflashladder_capi.so) on PyTorch's own device tensors.

Correctness, by the tolerance rule of ladder.md: the oracle is PyTorch's math backend in fp64 on the
same (rounded) inputs; the baseline is the math backend at the storage type (standard attention at that
precision); our output passes when max|ours - oracle| <= 2 max|baseline - oracle| + floor.

Writes one JSON record per measurement (impl = step folder, torch_flash, torch_cudnn) and prints a
table of ratios. FLOPs: forward 4·B·H·N²·d (halved when causal), backward 2.5x forward.
"""
import argparse
import ctypes
import datetime
import json
import math
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

DTYPES = {"fp16": (torch.float16, 1), "bf16": (torch.bfloat16, 2)}


def load(lib_path):
    lib = ctypes.CDLL(lib_path)
    i64, dbl, vp, ci = ctypes.c_int64, ctypes.c_double, ctypes.c_void_p, ctypes.c_int
    prob = [i64] * 6 + [ci, dbl, ci]
    lib.fl_last_error.restype = ctypes.c_char_p
    lib.fl_workspace_bytes.argtypes = [ctypes.c_char_p] + prob + [ci]
    lib.fl_workspace_bytes.restype = ctypes.c_longlong
    lib.fl_forward.argtypes = [ctypes.c_char_p] + prob + [vp] * 7
    lib.fl_forward.restype = ci
    lib.fl_backward.argtypes = [ctypes.c_char_p] + prob + [vp] * 11
    lib.fl_backward.restype = ci
    return lib


class Ours:
    def __init__(self, lib, step, B, H, N, d, causal, dt):
        self.lib, self.step = lib, step.encode()
        self.args = (B, H, H, N, N, d, int(causal), 0.0, DTYPES[dt][1])
        self.ws = {}
        for bwd in (0, 1):
            n = lib.fl_workspace_bytes(self.step, *self.args, bwd)
            self.ws[bwd] = None if n < 0 else torch.empty(max(n, 1), dtype=torch.uint8, device="cuda")

    def _check(self, rc):
        if rc != 0:
            raise RuntimeError(self.lib.fl_last_error().decode())

    def forward(self, q, k, v, o, lse):
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.ws[0].fill_(255)  # poisoned, as in the C++ runner (not inside the timed region)
        self._check(self.lib.fl_forward(self.step, *self.args, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                        o.data_ptr(), lse.data_ptr(), self.ws[0].data_ptr(), stream))

    def backward(self, q, k, v, o, lse, do, dq, dk, dv):
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.ws[1].fill_(255)
        self._check(self.lib.fl_backward(self.step, *self.args, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                         o.data_ptr(), lse.data_ptr(), do.data_ptr(), dq.data_ptr(), dk.data_ptr(),
                                         dv.data_ptr(), self.ws[1].data_ptr(), stream))


def time_launches(fn, sets, warmup, reps, before=None):
    """CUDA events around each launch; before(i) runs untimed first (e.g. poisoning)."""
    ms = []
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for it in range(warmup + reps):
        s = sets[it % len(sets)]
        if before:
            before(s)
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


def make_sets(B, H, N, d, dt, nsets, grad):
    tdt = DTYPES[dt][0]
    g = torch.Generator(device="cuda").manual_seed(1)
    sets = []
    for _ in range(nsets):
        q, k, v, do = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float32, generator=g).add_(0.5).to(tdt)
                       for _ in range(4))
        sets.append({"q": q.requires_grad_(grad), "k": k.requires_grad_(grad), "v": v.requires_grad_(grad), "do": do})
    return sets


def flops(B, H, N, d, causal, bwd):
    f = 4.0 * B * H * N * N * d / (2 if causal else 1)
    return 2.5 * f if bwd else f


def tolerance_check(ours_o, q, k, v, causal, dt):
    """Max error of ours against math-fp64, and 2x the math-at-storage-type baseline error + floor."""
    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
        base = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    if not torch.isfinite(ours_o).all():
        return float("inf"), 0.0
    err = (ours_o.double() - ref).abs().max().item()
    base_err = (base.double() - ref).abs().max().item()
    u = 2.0 ** -11 if dt == "fp16" else 2.0 ** -8
    tol = 2 * base_err + u * max(1.0, ref.abs().max().item())
    return err, tol


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build-gpu/libflashladder_capi.so", help="our C entry points")
    ap.add_argument("--fwd-step", default="08d_exp2_tuned", help="our forward step to compare (default: the last step-08)")
    ap.add_argument("--bwd-step", default="09_backward", help="our backward step to compare ('' to skip)")
    ap.add_argument("--json", default="", help="append JSON records here")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--ns", default="512,1024,2048,4096,8192,16384", help="sequence lengths of the FA2 sweep")
    ap.add_argument("--check-max-n", type=int, default=2048, help="check against fp64 math only up to this N")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        sys.exit("compare_torch.py: needs a CUDA device")
    lib = load(args.lib)
    props = torch.cuda.get_device_properties(0)
    commit = os.environ.get("FLASHLADDER_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip() or "unknown"
    env = {"device": props.name, "sm_count": props.multi_processor_count, "cuda": torch.version.cuda,
           "driver": "", "commit": commit, "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
           "torch": torch.__version__}
    try:
        env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                       capture_output=True, text=True).stdout.strip().splitlines()[0]
    except Exception:
        pass
    out = open(args.json, "a") if args.json else None
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

    points = []
    for d in (64, 128):
        for causal in (False, True):
            for N in [int(x) for x in args.ns.split(",")]:
                points.append((16384 // N, 2048 // d, N, d, causal, "fp16"))
    points.append((4, 16, 4096, 128, False, "bf16"))  # the headline in bf16 too

    rows = []
    for (B, H, N, d, causal, dt) in points:
        set_bytes = 4 * B * H * N * d * 2
        nsets = max(1, min(16, (2 * l2) // set_bytes + 1))
        sets = make_sets(B, H, N, d, dt, nsets, grad=bool(args.bwd_step))
        row = {"B": B, "H": H, "N": N, "d": d, "causal": causal, "dtype": dt}
        # ours, forward
        ours = Ours(lib, args.fwd_step, B, H, N, d, causal, dt)
        for s in sets:
            s["o"] = torch.empty_like(s["q"], requires_grad=False)
            s["lse"] = torch.empty(B, H, N, device="cuda", dtype=torch.float32)
        fwd = lambda s: ours.forward(s["q"], s["k"], s["v"], s["o"], s["lse"])
        poison = lambda s: (s["o"].fill_(float("nan")), s["lse"].fill_(float("nan")))
        tol_used = None
        if N <= args.check_max_n:
            s = sets[0]
            poison(s)
            fwd(s)
            torch.cuda.synchronize()
            err, tol = tolerance_check(s["o"], s["q"].detach(), s["k"].detach(), s["v"].detach(), causal, dt)
            tol_used = err / tol
            row["check"] = "pass" if err <= tol else "FAIL"
        t = time_launches(fwd, sets, args.warmup, args.reps, before=poison)
        row["ours"] = emit(args.fwd_step, "fwd", B, H, N, d, causal, dt, t, tol_used)["tflops"]
        # torch backends, forward
        for name, backend in (("torch_flash", SDPBackend.FLASH_ATTENTION), ("torch_cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    f = lambda s: F.scaled_dot_product_attention(s["q"], s["k"], s["v"], is_causal=causal)
                    with torch.no_grad():
                        t = time_launches(f, sets, args.warmup, args.reps)
                row[name] = emit(name, "fwd", B, H, N, d, causal, dt, t, None)["tflops"]
            except Exception as e:  # a backend that refuses a shape is reported, not hidden
                row[name] = float("nan")
                print(f"  {name} N={N} d={d} causal={causal}: {e}", file=sys.stderr)
        # backward
        if args.bwd_step:
            try:
                ob = Ours(lib, args.bwd_step, B, H, N, d, causal, dt)
                for s in sets:
                    s["o9"] = torch.empty_like(s["o"])
                    ob.forward(s["q"], s["k"], s["v"], s["o9"], s["lse"])
                    s["dq"], s["dk"], s["dv"] = (torch.empty_like(s["o"]) for _ in range(3))
                bwd = lambda s: ob.backward(s["q"], s["k"], s["v"], s["o9"], s["lse"], s["do"], s["dq"], s["dk"], s["dv"])
                t = time_launches(bwd, sets, args.warmup, args.reps)
                row["ours_bwd"] = emit(args.bwd_step, "bwd", B, H, N, d, causal, dt, t, None)["tflops"]
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    for s in sets:
                        s["out_t"] = F.scaled_dot_product_attention(s["q"], s["k"], s["v"], is_causal=causal)
                    g = lambda s: torch.autograd.grad(s["out_t"], (s["q"], s["k"], s["v"]), s["do"], retain_graph=True)
                    t = time_launches(g, sets, args.warmup, args.reps)
                row["torch_flash_bwd"] = emit("torch_flash", "bwd", B, H, N, d, causal, dt, t, None)["tflops"]
            except Exception as e:
                print(f"  backward N={N} d={d} causal={causal}: {e}", file=sys.stderr)
        rows.append(row)
        del sets
        torch.cuda.empty_cache()
        print(f"d={d:3d} {'causal' if causal else 'full  '} {dt} N={N:5d}: ours {row['ours']:6.1f}  flash "
              f"{row.get('torch_flash', float('nan')):6.1f}  cudnn {row.get('torch_cudnn', float('nan')):6.1f}  "
              f"ours/flash {row['ours'] / row.get('torch_flash', float('nan')):5.2f}  check {row.get('check', '-')}"
              + (f"  | bwd ours {row.get('ours_bwd', float('nan')):6.1f} flash {row.get('torch_flash_bwd', float('nan')):6.1f}"
                 f" ratio {row.get('ours_bwd', float('nan')) / row.get('torch_flash_bwd', float('nan')):5.2f}"
                 if args.bwd_step else ""), flush=True)
    if out:
        out.close()


if __name__ == "__main__":
    main()
