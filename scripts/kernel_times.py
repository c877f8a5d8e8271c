#!/usr/bin/env python3
"""flashladder — scripts/kernel_times.py: where a backward's (or a decode forward's) time goes, kernel by
kernel, for one of our steps and for PyTorch's FLASH and cuDNN backends on the same inputs.

Each side runs --reps times under torch.profiler (CUPTI's kernel records: the GPU's own start and end
of every kernel, no replay); the table gives each kernel's mean duration per call and their sum, beside
the median time of a whole call by CUDA events in a separate loop (the kernels plus the gaps between
them; the GPU is kept busy by a sleep queued before the start event, as compare_torch times, unless
--no-lead-in). Poisoning our outputs and workspace runs before each timed call, outside the events,
and not at all in the profiled calls.

  python3 scripts/kernel_times.py --lib build-gpu/libflashladder_capi.so --step 09f_dq_writer \\
      -B 4 -H 16 -N 4096 -d 128 [--causal] [--json out.jsonl]
  python3 scripts/kernel_times.py --decode -B 1 -H 32 --heads-kv 8 --nq 1 --nk 8192 -d 128

--decode times the forward of a decode problem instead (Q [B][H][Nq][d], K, V [B][H_kv][Nk][d]; our
--step, default 10_split_kv, beside torch's forward with enable_gqa), on enough input sets to exceed
twice the L2, used in turn, as compare_torch's decode sweep times: where the split kernel, the merge
and the gaps between them put a small read's fixed cost (issue 17: ~10 µs at B 1, H_kv 8, run 47).

Nothing here is a bar: scripts/compare_torch.py times the comparison that bars.py judges.
"""
import argparse
import json
import math
import sys
from collections import defaultdict

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import fl_results as flr  # noqa: E402  (need_torch: --help without PyTorch)


def make_parser():
    """The options (built without PyTorch: flr.need_torch parses them where it is missing)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build-gpu/libflashladder_capi.so", type=flr.library_path, help="our C entry points")
    ap.add_argument("--step", help="our step (default 09f_dq_writer; with --decode 10_split_kv)")
    ap.add_argument("--decode", action="store_true", help="a decode forward (--heads-kv, --nq, --nk) instead of "
                                                          "the backward of -N")
    ap.add_argument("--heads-kv", type=int, help="--decode: K/V heads (default -H)")
    ap.add_argument("--nq", type=int, default=1, help="--decode: query rows per head (default 1)")
    ap.add_argument("--nk", type=int, default=8192, help="--decode: cached keys (default 8192)")
    flr.add_problem_args(ap)
    ap.add_argument("--reps", type=int, default=20, help="calls of each side (default 20)")
    ap.add_argument("--json", type=flr.output_path, help="append one record per side (docs/results' record, with kernels_us: "
                                   "each kernel's µs per call)")
    ap.add_argument("--no-lead-in", action="store_true",
                    help="time the calls with the GPU idle at the start event (the host's call time included), "
                         "as compare_torch did until run 64")
    return ap


flr.need_torch("kernel_times.py", __doc__, make_parser())
import torch  # noqa: E402
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from compare_torch import DTYPES, LEAD_IN, Ours, flops, load, problem_inputs, run_env  # noqa: E402


def short(name, width=90):
    return name if len(name) <= width else name[: width - 1] + "…"


def profile(fn, before, reps, lead_in):
    """Mean duration (µs) per call of each kernel fn launches, and the median of each call by CUDA events
    (with a GPU sleep of lead_in clocks queued before the start event, as compare_torch times)."""
    for _ in range(3):  # warm-up (module loads, cuDNN's plan)
        before()
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    walls = []
    for _ in range(reps):
        before()
        if lead_in:
            torch.cuda._sleep(lead_in)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        walls.append(start.elapsed_time(stop) * 1e3)
    # Profiled: fn alone, so that every kernel recorded is one of fn's (our poisoning is left out; the
    # step initialises what it accumulates into, which the GPU tests check with the poison on).
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    totals, counts = defaultdict(float), defaultdict(int)
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        totals[e.name] += e.time_range.elapsed_us()  # a kernel record: its GPU start to end
        counts[e.name] += 1
    walls.sort()
    n = len(walls)
    t = {"median_ms": walls[n // 2] / 1e3, "min_ms": walls[0] / 1e3, "p90_ms": walls[max(math.ceil(0.9 * n), 1) - 1] / 1e3,
         "reps": n}
    return {k: (totals[k] / reps, counts[k] / reps) for k in totals}, t


def decode_sides(a, lib):
    """The --decode sides: (name, fn, before) of our forward and torch's FLASH and cuDNN forwards, each
    fn using the next of the input sets (as many as exceed twice the L2, at most 64)."""
    dt = DTYPES[a.dtype][0]
    H_kv = a.heads_kv or a.H
    kv_bytes = 2 * a.B * H_kv * a.nk * a.d * 2
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 60 << 20)
    g = torch.Generator(device="cuda").manual_seed(17)
    sets = []
    for _ in range(max(1, min(64, (2 * l2) // kv_bytes + 1))):
        q = torch.randn(a.B, a.H, a.nq, a.d, device="cuda", dtype=dt, generator=g).add_(0.5)
        k, v = (torch.randn(a.B, H_kv, a.nk, a.d, device="cuda", dtype=dt, generator=g).add_(0.5) for _ in range(2))
        sets.append((q, k, v, torch.empty_like(q), torch.empty(a.B, a.H, a.nq, device="cuda", dtype=torch.float32)))
    ob = Ours(lib, a.step, a.B, a.H, None, a.d, a.causal, a.dtype, H_kv=H_kv, Nq=a.nq, Nk=a.nk)
    turn = [0]

    def take():  # the next set; each side walks the sets from the first
        s = sets[turn[0] % len(sets)]
        turn[0] += 1
        return s

    def poison_next():  # the set the next call of ours writes: O, L and the workspace poisoned, as the sweep
        s = sets[turn[0] % len(sets)]
        s[3].fill_(float("nan"))
        s[4].fill_(float("nan"))
        ob.poison_ws()

    def ours():
        q, k, v, o, lse = take()
        ob.forward(q, k, v, o, lse, poison_ws=False)

    def torch_side(backend):
        def fn():
            q, k, v, _, _ = take()
            with sdpa_kernel(backend), torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=a.causal, enable_gqa=True)
        return fn

    return [(a.step, ours, poison_next),
            ("torch_flash", torch_side(SDPBackend.FLASH_ATTENTION), lambda: None),
            ("torch_cudnn", torch_side(SDPBackend.CUDNN_ATTENTION), lambda: None)], H_kv, len(sets)


def main():
    a = make_parser().parse_args()
    if not torch.cuda.is_available():
        sys.exit("kernel_times.py: needs a CUDA device")
    if a.reps < 1:
        sys.exit(f"kernel_times.py: --reps must be at least 1 (got {a.reps})")
    a.step = a.step or ("10_split_kv" if a.decode else "09f_dq_writer")
    if a.decode:
        if a.nq < 1 or a.nk < 1 or (a.heads_kv is not None and (a.heads_kv < 1 or a.H % a.heads_kv)):
            sys.exit(f"kernel_times.py: --decode needs --nq, --nk >= 1 and --heads-kv dividing -H "
                     f"(got {a.nq}, {a.nk}, {a.heads_kv} with H {a.H})")
        return decode_main(a, load(a.lib))
    lib = load(a.lib)
    q, k, v, do = problem_inputs(a)
    o = torch.empty_like(q)
    lse = torch.empty(a.B, a.H, a.N, device="cuda", dtype=torch.float32)
    ob = Ours(lib, a.step, a.B, a.H, a.N, a.d, a.causal, a.dtype)
    ob.forward(q, k, v, o, lse)
    dq, dk, dv = (torch.empty_like(q) for _ in range(3))

    def poison_ours():
        for x in (dq, dk, dv):
            x.fill_(float("nan"))
        ob.poison_bwd_ws()

    sides = [(a.step, lambda: ob.backward(q, k, v, o, lse, do, dq, dk, dv, poison_ws=False), poison_ours)]
    for name, backend in (("torch_flash", SDPBackend.FLASH_ATTENTION), ("torch_cudnn", SDPBackend.CUDNN_ATTENTION)):
        qg, kg, vg = (x.detach().requires_grad_(True) for x in (q, k, v))
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=a.causal)
        sides.append((name, lambda out=out, qg=qg, kg=kg, vg=vg: torch.autograd.grad(out, (qg, kg, vg), do,
                                                                                     retain_graph=True),
                      lambda: None))
    env = run_env()
    dev = env["device"]
    print(f"# {dev}; backward, B {a.B}, H {a.H}, N {a.N}, d {a.d}, {'causal' if a.causal else 'non-causal'}, "
          f"{a.dtype}; {a.reps} calls each; µs per call; calls timed "
          f"{'with the GPU idle at the start' if a.no_lead_in else 'behind a GPU sleep (host time hidden)'}")
    for name, fn, before in sides:
        kernels, tm = profile(fn, before, a.reps, 0 if a.no_lead_in else LEAD_IN)
        wall = tm["median_ms"] * 1e3
        total = sum(kt for kt, _ in kernels.values())
        print(f"\n## {name}: {wall:.1f} µs per call (CUDA events), kernels {total:.1f} µs")
        print("| kernel | launches per call | µs per call | share |")
        print("|---|--:|--:|--:|")
        for kname, (kt, c) in sorted(kernels.items(), key=lambda kv: -kv[1][0]):
            print(f"| `{short(kname)}` | {c:g} | {kt:.1f} | {kt / total:.1%} |")
        if a.json:
            rec = {"impl": name, "pass": "bwd", "dtype": a.dtype, "B": a.B, "H": a.H, "H_kv": a.H, "Nq": a.N,
                   "Nk": a.N, "d": a.d, "causal": a.causal, **tm,
                   "tflops": flops(a.B, a.H, a.N, a.d, a.causal, True) / (tm["median_ms"] * 1e-3) / 1e12,
                   "tol_used": None, **env, "suite": "kernel_times", "lead_in": not a.no_lead_in,
                   "kernels_us": {kn: kt for kn, (kt, _) in kernels.items()}}
            with open(a.json, "a") as f:
                f.write(json.dumps(rec) + "\n")


def decode_main(a, lib):
    sides, H_kv, nsets = decode_sides(a, lib)
    env = run_env()
    kv_bytes = 2 * a.B * H_kv * a.nk * a.d * 2
    print(f"# {env['device']}; decode forward, B {a.B}, H {a.H}, H_kv {H_kv}, Nq {a.nq}, Nk {a.nk}, d {a.d}, "
          f"{'causal' if a.causal else 'non-causal'}, {a.dtype}; K+V {kv_bytes / 2**20:.1f} MiB in {nsets} input "
          f"set(s) used in turn; {a.reps} calls each; µs per call; calls timed "
          f"{'with the GPU idle at the start' if a.no_lead_in else 'behind a GPU sleep (host time hidden)'}")
    for name, fn, before in sides:
        try:
            kernels, tm = profile(fn, before, a.reps, 0 if a.no_lead_in else LEAD_IN)
        except Exception as e:  # a backend that refuses the shape is reported, not hidden
            print(f"\n## {name}: not timed: {e}")
            continue
        wall = tm["median_ms"] * 1e3
        total = sum(kt for kt, _ in kernels.values())
        print(f"\n## {name}: {wall:.1f} µs per call (CUDA events), kernels {total:.1f} µs, "
              f"K+V {kv_bytes / (tm['median_ms'] * 1e-3) / 1e12:.2f} TB/s")
        print("| kernel | launches per call | µs per call | share |")
        print("|---|--:|--:|--:|")
        for kname, (kt, c) in sorted(kernels.items(), key=lambda kv: -kv[1][0]):
            print(f"| `{short(kname)}` | {c:g} | {kt:.1f} | {kt / max(total, 1e-9):.1%} |")
        if a.json:
            fl = 4.0 * a.B * a.H * a.nq * a.nk * a.d
            rec = {"impl": name, "pass": "fwd", "dtype": a.dtype, "B": a.B, "H": a.H, "H_kv": H_kv, "Nq": a.nq,
                   "Nk": a.nk, "d": a.d, "causal": a.causal, **tm, "tflops": fl / (tm["median_ms"] * 1e-3) / 1e12,
                   "tol_used": None, "kv_bytes": kv_bytes, **env, "suite": "kernel_times_decode",
                   "lead_in": not a.no_lead_in, "kernels_us": {kn: kt for kn, (kt, _) in kernels.items()}}
            with open(a.json, "a") as f:
                f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
