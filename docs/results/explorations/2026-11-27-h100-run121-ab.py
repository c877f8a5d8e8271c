#!/usr/bin/env python3
"""Run 121 (run 119 again, new = this build, the M >= d rule): the tile/split rule of main (capi_old, commit 16c1c06) against the new one (capi_new: 32-row
tiles for M >= 64 unless their grid is short, two blocks per SM from M >= 128), steps 10 and 10b, at
run 116's points, three interleaved rounds, medians of 20 launches each; the median round is printed."""
import json, sys
sys.path.insert(0, "scripts")
import torch
import compare_torch as ct

libs = {"old": ct.load("/tmp/capi_old.so"), "new": ct.load("build-gpu/libflashladder_capi.so")}
env = ct.run_env()
out = open(sys.argv[1], "w")
H, dt = 32, "fp16"
l2 = torch.cuda.get_device_properties(0).L2_cache_size
pts = [(64, 1, 1, 8, 32768), (64, 1, 1, 8, 131072), (64, 1, 1, 4, 8192), (64, 1, 2, 4, 131072), (64, 4, 1, 16, 32768),
       (64, 16, 1, 8, 8192), (64, 16, 1, 8, 32768), (64, 16, 4, 8, 32768), (64, 16, 2, 16, 8192), (64, 1, 1, 1, 131072), (64, 1, 4, 8, 131072), (64, 16, 2, 4, 32768), (64, 4, 4, 8, 32768),
       (128, 1, 8, 1, 32768), (128, 1, 8, 4, 32768), (128, 16, 8, 1, 32768)]  # the last three: M <= 16, unchanged
for (d, B, H_kv, Nq, Nk) in pts:
    kv = 2 * B * H_kv * Nk * d * 2
    nsets = max(1, min(64, (2 * l2) // kv + 1))
    g = torch.Generator(device="cuda").manual_seed(17)
    sets = []
    for _ in range(nsets):
        q = torch.randn(B, H, Nq, d, device="cuda", dtype=torch.float16, generator=g).add_(0.5)
        k = torch.randn(B, H_kv, Nk, d, device="cuda", dtype=torch.float16, generator=g).add_(0.5)
        v = torch.randn(B, H_kv, Nk, d, device="cuda", dtype=torch.float16, generator=g).add_(0.5)
        sets.append({"q": q, "k": k, "v": v, "o": torch.empty_like(q), "lse": torch.empty(B, H, Nq, device="cuda")})
    res = {}
    for rnd in range(3):
        for step in ("10_split_kv", "10b_cluster_merge"):
            for name, lib in libs.items():
                o = ct.Ours(lib, step, B, H, None, d, False, dt, H_kv=H_kv, Nq=Nq, Nk=Nk)
                fwd = lambda s: o.forward(s["q"], s["k"], s["v"], s["o"], s["lse"], poison_ws=False)
                poison = lambda s: (s["o"].fill_(float("nan")), s["lse"].fill_(float("nan")), o.poison_ws())
                tol = None
                if rnd == 0 and kv <= 256 << 20:
                    s0 = sets[0]; poison(s0); fwd(s0); torch.cuda.synchronize()
                    err, t = ct.tolerance_check(s0["o"], s0["q"], s0["k"], s0["v"], False, dt, gqa=True)
                    tol = err / t
                    if not err <= t:
                        print(f"FAIL {name} {step} B{B} Hkv{H_kv} Nq{Nq} Nk{Nk}: {err} > {t}", flush=True)
                r = ct.time_launches(fwd, sets, 5, 20, before=poison, settle_ms=30)
                S = max(1, o.ws_bytes[0] // (B * H * Nq * (d + 1) * 4))
                res.setdefault((step, name), []).append(r["median_ms"] * 1e3)
                out.write(json.dumps({"lib": name, "impl": step, "round": rnd, "B": B, "H": H, "H_kv": H_kv, "Nq": Nq,
                                      "Nk": Nk, "d": d, "dtype": dt, "ws_splits": S, **r, "tol_used": tol, **env}) + "\n")
                out.flush()
    med = {k: sorted(v)[1] for k, v in res.items()}
    print(f"d{d} B{B:2d} Hkv{H_kv} Nq{Nq:2d} Nk{Nk:6d} | " + " | ".join(
        f"{st[:3]} old {med[(st, 'old')]:8.1f} new {med[(st, 'new')]:8.1f} ({med[(st, 'old')] / med[(st, 'new')]:.2f}x)"
        for st in ("10_split_kv", "10b_cluster_merge")), flush=True)
    del sets; torch.cuda.empty_cache()
