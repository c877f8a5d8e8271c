#!/usr/bin/env python3
"""Run 115 (experiment library, .carry/run115-experiment.patch): A) the L2 qualifiers of the K/V copies
(FLX_PF 0 none, 1 L2::128B, 2 L2::256B, 3 L2::256B + evict_first) on 10b beside cuDNN, interleaved;
B) step 10 at forced tile rows (FLX_R) and splits (FLASHLADDER_SPLITS) with many rows per K/V head."""
import json, os, sys, time
sys.path.insert(0, "scripts")
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
import compare_torch as ct

lib = ct.load("/tmp/capi.so")
env = ct.run_env()
part = sys.argv[1]
out = open(sys.argv[2], "w")
d, H, dt = 64, 32, "fp16"
l2 = torch.cuda.get_device_properties(0).L2_cache_size

def make(B, H_kv, Nq, Nk):
    kv = 2 * B * H_kv * Nk * d * 2
    nsets = max(1, min(64, (2 * l2) // kv + 1))
    g = torch.Generator(device="cuda").manual_seed(17)
    sets = []
    for _ in range(nsets):
        q = torch.randn(B, H, Nq, d, device="cuda", dtype=torch.float16, generator=g).add_(0.5)
        k = torch.randn(B, H_kv, Nk, d, device="cuda", dtype=torch.float16, generator=g).add_(0.5)
        v = torch.randn(B, H_kv, Nk, d, device="cuda", dtype=torch.float16, generator=g).add_(0.5)
        sets.append({"q": q, "k": k, "v": v, "o": torch.empty_like(q), "lse": torch.empty(B, H, Nq, device="cuda")})
    return sets, kv

def ours_time(step, B, H_kv, Nq, Nk, sets, envs, check):
    old = {k: os.environ.get(k) for k in envs}
    try:
        for k, v in envs.items():
            if v is None: os.environ.pop(k, None)
            else: os.environ[k] = str(v)
        o = ct.Ours(lib, step, B, H, None, d, False, dt, H_kv=H_kv, Nq=Nq, Nk=Nk)
        S = max(1, o.ws_bytes[0] // (B * H * Nq * (d + 1) * 4))
        fwd = lambda s: o.forward(s["q"], s["k"], s["v"], s["o"], s["lse"], poison_ws=False)
        poison = lambda s: (s["o"].fill_(float("nan")), s["lse"].fill_(float("nan")), o.poison_ws())
        tol = None
        if check:
            s0 = sets[0]; poison(s0); fwd(s0); torch.cuda.synchronize()
            err, t = ct.tolerance_check(s0["o"], s0["q"], s0["k"], s0["v"], False, dt, gqa=True)
            tol = err / t
            if not err <= t:
                print(f"FAIL {step} {envs} B{B} Hkv{H_kv} Nq{Nq} Nk{Nk}: {err} > {t}", flush=True)
        r = ct.time_launches(fwd, sets, 5, 20, before=poison, settle_ms=30)
        return r, S, tol
    finally:
        for k, v in old.items():
            if v is None: os.environ.pop(k, None)
            else: os.environ[k] = v

def cudnn_time(sets):
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION), torch.no_grad():
        f = lambda s: F.scaled_dot_product_attention(s["q"], s["k"], s["v"], enable_gqa=True)
        return ct.time_launches(f, sets, 5, 20, settle_ms=30)

def emit(rec):
    out.write(json.dumps({**rec, **env}) + "\n"); out.flush()

if part == "pf":
    pts = [(16, 8, 1, 32768), (16, 8, 1, 131072), (16, 32, 1, 8192), (16, 32, 1, 32768), (64, 8, 1, 32768),
           (64, 32, 4, 8192), (64, 32, 1, 8192), (1, 8, 1, 32768), (1, 8, 1, 8192), (1, 32, 1, 32768)]
    for (B, H_kv, Nq, Nk) in pts:
        sets, kv = make(B, H_kv, Nq, Nk)
        res = {}
        for rnd in range(3):
            for mode in (0, 1, 2):
                r, S, tol = ours_time("10b_cluster_merge", B, H_kv, Nq, Nk, sets, {"FLX_PF": mode}, rnd == 0 and kv <= 512 << 20)
                res.setdefault(mode, []).append(r["median_ms"])
                emit({"part": "pf", "impl": "10b", "pf": mode, "round": rnd, "B": B, "H_kv": H_kv, "Nq": Nq, "Nk": Nk, **r, "tol_used": tol})
            r = cudnn_time(sets)
            res.setdefault("cudnn", []).append(r["median_ms"])
            emit({"part": "pf", "impl": "torch_cudnn", "round": rnd, "B": B, "H_kv": H_kv, "Nq": Nq, "Nk": Nk, **r})
        med = {k: sorted(v)[1] * 1e3 for k, v in res.items()}
        c = med["cudnn"]
        print(f"B{B:2d} Hkv{H_kv:2d} Nq{Nq} Nk{Nk:6d} cudnn {c:8.1f} | " +
              " ".join(f"pf{m} {med[m]:8.1f} ({c / med[m]:.4f})" for m in (0, 1, 2)), flush=True)
        del sets; torch.cuda.empty_cache()
else:
    pts = [(16, 4, 8, 8192), (16, 4, 8, 32768), (16, 2, 4, 32768), (8, 4, 8, 32768), (4, 4, 8, 32768), (1, 4, 8, 131072),
           (16, 1, 8, 32768), (4, 1, 16, 32768)]
    cfgs = [("rule", {})] + [(f"R{R}S{S}", {"FLX_R": R, "FLASHLADDER_SPLITS": None if S == 0 else S})
                             for R in (1, 2) for S in (0, 1, 2, 4, 8, 16)]
    for (B, H_kv, Nq, Nk) in pts:
        sets, kv = make(B, H_kv, Nq, Nk)
        line = []
        best = None
        for name, e in cfgs:
            r, S, tol = ours_time("10_split_kv", B, H_kv, Nq, Nk, sets, e, kv <= 64 << 20)
            emit({"part": "rows", "impl": "10", "cfg": name, "R": e.get("FLX_R"), "S": S, "B": B, "H_kv": H_kv, "Nq": Nq, "Nk": Nk, **r, "tol_used": tol})
            us = r["median_ms"] * 1e3
            line.append(f"{name}:{S}={us:.1f}")
            if name != "rule" and (best is None or us < best[1]): best = (name + f"/S{S}", us)
        print(f"B{B:2d} Hkv{H_kv} Nq{Nq:2d} Nk{Nk:6d} best {best[0]} {best[1]:.1f} | " + " ".join(line), flush=True)
        del sets; torch.cuda.empty_cache()
