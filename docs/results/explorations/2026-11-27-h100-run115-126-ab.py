#!/usr/bin/env python3
"""The A/B programs of runs 115-126 (issue 17, H100), one file: `python3 THIS RUN OUT.jsonl`, run from the
repository root on the GPU machine, with the libraries where each run put them (below). Three kinds:

- knob (runs 115, 116, 118, 124): 10b with an experiment build's environment knob at each mode, beside cuDNN, three
  interleaved rounds at each point; the median round is printed. FLX_PF chose the K/V copies' L2 prefetch
  qualifier (run 115: a run-time branch in the copy loop, modes 0 none, 1 L2::128B, 2 L2::256B, 3 L2::256B +
  evict_first; run 116: a template parameter, modes 0-2); FLX_ST the unsplit launch's ring stages at d 128
  (run 118: 0 = 3, 4, 5); FLX_LS = 1 a barrier per round of the block's warps (run 124). Library /tmp/capi.so,
  built from …-run115/116/118/124-experiment.patch.
- grid (runs 116, 120): step 10 at forced tile rows (FLX_R, the run-116 build) and splits (FLASHLADDER_SPLITS),
  "rule" = neither forced; d 128 (run 116) or d 64 (run 120). Library /tmp/capi.so (run 116's build).
- rule (runs 117, 119, 121, 125, 126): two libraries, "old" = main at 16c1c06 (/tmp/capi_old.so) and "new" (run 117 and
  119: 2fc417475bda at /tmp/capi_new.so; run 121: 0e9865c67f28 built on the device, build-gpu/; runs 125 and
  126: "old" = a719a61 (main before the barrier), "new" = e34d09e95823 and 30d5a4bf3afb), steps 10 and 10b,
  three interleaved rounds.
Each launch is timed by compare_torch.time_launches (5 warm-up, 20 timed, outputs poisoned before each);
outputs are checked against the fp64 reference on the first round where K+V are small enough.
The runs used one copy of this per run; they were merged into this file afterwards, same points, modes
and timing, so the records' keys differ a little from what this file writes ("part", "pf", no "run")."""
import json, os, sys
sys.path.insert(0, "scripts")
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
import compare_torch as ct

H, dt = 32, "fp16"
ISSUE_B16 = [(16, 8, 1, 32768), (16, 8, 1, 131072), (16, 32, 1, 8192), (16, 32, 1, 32768), (64, 8, 1, 32768),
             (64, 32, 4, 8192), (64, 32, 1, 8192)]
ROWS = [(B, H_kv, Nq, Nk) for B in (1, 4, 16) for H_kv in (1, 2, 4) for Nq in (4, 8, 16)
        for Nk in (8192, 32768, 131072) if 32 // H_kv * Nq >= 64]
D64 = [(64, 1, 1, 8, 32768), (64, 1, 1, 8, 131072), (64, 1, 1, 4, 8192), (64, 1, 2, 4, 131072), (64, 4, 1, 16, 32768),
       (64, 16, 1, 8, 8192), (64, 16, 1, 8, 32768), (64, 16, 4, 8, 32768), (64, 16, 2, 16, 8192), (64, 1, 1, 1, 131072)]
D128_SWEEP = [(128, 1, 8, 1, 32768), (128, 1, 8, 4, 32768), (128, 16, 8, 1, 32768)]  # M <= 16: unchanged
RUNS = {
    "115": ("knob", "FLX_PF", (0, 1, 2, 3), [(128,) + p for p in ISSUE_B16 + [(1, 8, 1, 32768), (1, 8, 1, 8192), (1, 32, 1, 32768)]]),
    "116": ("knob", "FLX_PF", (0, 1, 2), [(128,) + p for p in ISSUE_B16 + [(1, 8, 1, 32768), (1, 8, 1, 8192), (1, 32, 1, 32768)]]),
    "118": ("knob", "FLX_ST", (0, 4, 5), [(128,) + p for p in ISSUE_B16[:2] + [(16, 8, 1, 8192)] + ISSUE_B16[2:5] +
                                          [(64, 8, 1, 131072)] + ISSUE_B16[5:] + [(16, 8, 4, 32768)]]),
    "124": ("knob", "FLX_LS", (0, 1), [(128,) + p for p in ISSUE_B16 + [(16, 8, 1, 8192), (64, 8, 1, 131072), (16, 32, 1, 131072),
                                                                  (1, 8, 1, 32768), (1, 8, 1, 8192), (1, 32, 1, 8192)]]),
    "125": ("rule", "/tmp/capi_new.so", [(128,) + p for p in ISSUE_B16 + [(16, 8, 1, 8192), (64, 8, 1, 131072), (16, 32, 1, 131072),
             (64, 32, 4, 32768), (16, 8, 4, 32768), (1, 8, 1, 8192), (1, 8, 1, 32768), (1, 8, 4, 8192), (1, 32, 1, 32768),
             (16, 1, 16, 32768), (1, 1, 8, 131072), (1, 1, 1, 131072)]] + [(64, 16, 4, 8, 32768), (64, 1, 1, 8, 32768)]),
    "126": ("rule", "/tmp/capi_new.so", [(128, 16, 1, 16, 32768), (128, 1, 1, 8, 131072), (64, 16, 4, 8, 32768),
             (128, 16, 8, 1, 131072), (128, 16, 32, 1, 32768), (128, 1, 8, 1, 32768)]),
    "116-rows": ("grid", (0, 1, 2, 4, 8, 16, 32), [(128,) + p for p in ROWS]),
    "120": ("grid", (0, 1, 2, 4, 8, 16), [(64, 16, 4, 8, 8192), (64, 16, 4, 8, 32768), (64, 16, 2, 4, 32768), (64, 8, 4, 8, 32768),
                                          (64, 4, 4, 8, 32768), (64, 1, 4, 8, 131072), (64, 16, 1, 8, 32768), (64, 4, 1, 16, 32768)]),
    "117": ("rule", "/tmp/capi_new.so", [(128,) + p for p in ROWS + [(1, 1, 1, 131072), (1, 2, 2, 32768)]]),
    "119": ("rule", "/tmp/capi_new.so", D64 + D128_SWEEP),
    "121": ("rule", "build-gpu/libflashladder_capi.so",
            D64 + [(64, 1, 4, 8, 131072), (64, 16, 2, 4, 32768), (64, 4, 4, 8, 32768)] + D128_SWEEP),
}
l2 = torch.cuda.get_device_properties(0).L2_cache_size
env = ct.run_env()


def make(B, H_kv, Nq, Nk, d):
    kv = 2 * B * H_kv * Nk * d * 2
    g = torch.Generator(device="cuda").manual_seed(17)
    sets = []
    for _ in range(max(1, min(64, (2 * l2) // kv + 1))):
        q = torch.randn(B, H, Nq, d, device="cuda", dtype=torch.float16, generator=g).add_(0.5)
        k = torch.randn(B, H_kv, Nk, d, device="cuda", dtype=torch.float16, generator=g).add_(0.5)
        v = torch.randn(B, H_kv, Nk, d, device="cuda", dtype=torch.float16, generator=g).add_(0.5)
        sets.append({"q": q, "k": k, "v": v, "o": torch.empty_like(q), "lse": torch.empty(B, H, Nq, device="cuda")})
    return sets, kv


def ours_time(lib, step, shape, sets, envs, check):
    """Times one step of one library with the environment `envs` set (None: unset) while it is built and run."""
    d, B, H_kv, Nq, Nk = shape
    old = {k: os.environ.get(k) for k in envs}
    try:
        for k, v in envs.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, str(v))
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
                print(f"FAIL {step} {envs} {shape}: {err} > {t}", flush=True)
        return ct.time_launches(fwd, sets, 5, 20, before=poison, settle_ms=30), S, tol
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def cudnn_time(sets):
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION), torch.no_grad():
        return ct.time_launches(lambda s: F.scaled_dot_product_attention(s["q"], s["k"], s["v"], enable_gqa=True),
                                sets, 5, 20, settle_ms=30)


def main():
    run, out = sys.argv[1], open(sys.argv[2], "w")
    kind = RUNS[run][0]
    emit = lambda rec: (out.write(json.dumps({**rec, **env}) + "\n"), out.flush())
    for shape in RUNS[run][-1]:
        d, B, H_kv, Nq, Nk = shape
        sets, kv = make(B, H_kv, Nq, Nk, d)
        where = {"d": d, "B": B, "H": H, "H_kv": H_kv, "Nq": Nq, "Nk": Nk, "dtype": dt}
        res = {}
        if kind == "knob":
            knob, modes = RUNS[run][1], RUNS[run][2]
            lib = ct.load("/tmp/capi.so")
            for rnd in range(3):
                for m in modes:
                    r, S, tol = ours_time(lib, "10b_cluster_merge", shape, sets, {knob: m}, rnd == 0 and kv <= 512 << 20)
                    res.setdefault(m, []).append(r["median_ms"] * 1e3)
                    emit({"run": run, "impl": "10b", knob: m, "round": rnd, **where, **r, "tol_used": tol})
                r = cudnn_time(sets)
                res.setdefault("cudnn", []).append(r["median_ms"] * 1e3)
                emit({"run": run, "impl": "torch_cudnn", "round": rnd, **where, **r})
            med = {k: sorted(v)[1] for k, v in res.items()}
            print(f"d{d} B{B:2d} Hkv{H_kv:2d} Nq{Nq} Nk{Nk:6d} cudnn {med['cudnn']:8.1f} | " +
                  " ".join(f"{knob}={m} {med[m]:8.1f} ({med['cudnn'] / med[m]:.4f})" for m in modes), flush=True)
        elif kind == "grid":
            lib = ct.load("/tmp/capi.so")
            cfgs = [("rule", {})] + [(f"R{R}S{S}", {"FLX_R": R, "FLASHLADDER_SPLITS": S or None})
                                     for R in (1, 2) for S in RUNS[run][1]]
            line = []
            for name, e in cfgs:
                r, S, tol = ours_time(lib, "10_split_kv", shape, sets, e, kv <= 64 << 20)
                emit({"run": run, "impl": "10", "cfg": name, "R": e.get("FLX_R"), "S": S, **where, **r, "tol_used": tol})
                line.append(f"{name}:{S}={r['median_ms'] * 1e3:.1f}")
            print(f"d{d} B{B:2d} Hkv{H_kv} Nq{Nq:2d} Nk{Nk:6d} | " + " ".join(line), flush=True)
        else:
            libs = {"old": ct.load("/tmp/capi_old.so"), "new": ct.load(RUNS[run][1])}
            steps = ("10_split_kv", "10b_cluster_merge")
            for rnd in range(3):
                for step in steps:
                    for name, lib in libs.items():
                        r, S, tol = ours_time(lib, step, shape, sets, {}, rnd == 0 and kv <= 256 << 20)
                        res.setdefault((step, name), []).append(r["median_ms"] * 1e3)
                        emit({"run": run, "lib": name, "impl": step, "round": rnd, **where, "ws_splits": S, **r, "tol_used": tol})
            med = {k: sorted(v)[1] for k, v in res.items()}
            print(f"d{d} B{B:2d} Hkv{H_kv} Nq{Nq:2d} Nk{Nk:6d} | " + " | ".join(
                f"{st[:3]} old {med[(st, 'old')]:8.1f} new {med[(st, 'new')]:8.1f} ({med[(st, 'old')] / med[(st, 'new')]:.2f}x)"
                for st in steps), flush=True)
        del sets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
