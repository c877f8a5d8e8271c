#!/usr/bin/env python3
"""flashladder — scripts/compare_variants.py: issue 21's variants on our last rungs (08k forward, 09d
backward) beside what PyTorch has for them, same GPU, same inputs, same timing as compare_torch.py.

scaled_dot_product_attention's FLASH and cuDNN backends take none of these variants, so PyTorch's side is:
  - torch_flex: flex_attention, compiled (Triton kernels generated from the mask and score functions of
    scripts/variants_torch.py, which python/tests/test_variants_torch.py checks against our oracle):
    the sliding window (a block mask), the softcap and ALiBi (score functions), forward and backward;
  - torch_varlen: torch.nn.attention.varlen.varlen_attn (FlashAttention's packed kernels) where this
    torch has it: variable length, causal through window_size or is_causal, whichever its signature has;
    forward, and backward through autograd.
Each record names its variant ("variant", e.g. "window 4096,0") and the route ("impl"). A backend that
cannot run a case is reported on stderr and in a record-free line, never hidden. Our outputs are compared
with flex's (max |ours - torch| in the record as max_abs_diff; a non-finite output fails the run).

    python3 scripts/compare_variants.py --lib build-gpu/libflashladder_capi.so --json out.jsonl
"""
import argparse
import ctypes
import datetime
import inspect
import json
import os
import subprocess
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fl_results as flr  # noqa: E402  (need_torch: --help without PyTorch; record_flops: the program's FLOP count)


# name, B, H, lengths (one N, or the packed batch's sequence lengths), causal, window, softcap, ALiBi
CASES = [
    ("causal", 1, 16, 16384, True, None, None, False),
    ("window 4096,0", 1, 16, 16384, True, (4096, 0), None, False),
    ("causal", 1, 16, 65536, True, None, None, False),
    ("window 4096,0", 1, 16, 65536, True, (4096, 0), None, False),
    ("softcap 30", 4, 16, 4096, True, None, 30.0, False),
    ("alibi", 4, 16, 4096, True, None, None, True),
    ("varlen", None, 16, [8192, 4096, 2048, 1024, 512, 256, 128, 64, 3000, 1000], True, None, None, False),
]


def make_parser():
    """The options (built without PyTorch: flr.need_torch parses them where it is missing)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build-gpu/libflashladder_capi.so", type=flr.library_path, help="our C entry points")
    ap.add_argument("--fwd-step", default="08k_persistent")
    ap.add_argument("--bwd-step", default="09d_variants")
    ap.add_argument("--json", default="", type=flr.output_path, help="append JSON records here")
    ap.add_argument("--reps", type=flr.whole(1), default=10)
    ap.add_argument("--warmup", type=flr.whole(0), default=3)
    ap.add_argument("--cases", default="", type=flr.number_list(0, len(CASES) - 1, f" (CASES has {len(CASES)})"),
                    help="comma-separated indices into CASES (default all)")
    return ap


flr.need_torch("compare_variants.py", __doc__, make_parser())
import torch  # noqa: E402

import compare_torch as ct  # noqa: E402  (load, Ours, time_launches, DTYPES, record_commit)
import variants_torch as vt  # noqa: E402


def load(lib_path):
    lib = ct.load(lib_path)
    i64, i32p, vp = ctypes.c_int64, ctypes.POINTER(ctypes.c_int32), ctypes.c_void_p
    lib.fl_set_window.argtypes, lib.fl_set_window.restype = [i64, i64], None
    lib.fl_set_softcap.argtypes, lib.fl_set_softcap.restype = [ctypes.c_double], None
    lib.fl_set_alibi.argtypes, lib.fl_set_alibi.restype = [ctypes.c_int, vp], None
    lib.fl_set_varlen.argtypes, lib.fl_set_varlen.restype = [ctypes.c_int, i32p, i32p, vp, vp], None
    lib.fl_reset_variants.argtypes, lib.fl_reset_variants.restype = [], None
    return lib


def main():
    args = make_parser().parse_args()
    if not torch.cuda.is_available():
        sys.exit("compare_variants.py: needs a CUDA device")
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        # Each case compiles its own kernels, and with and without grad: in run 34 the 9th compile hit
        # dynamo's recompile limit (8) and flex fell back to its unfused path (5 TF/s, scores
        # materialized), recorded as if it were flex. Now each case starts from a reset, and a fallback
        # anyway (the limit, or flex's "called without torch.compile" warning) raises instead of timing.
        if hasattr(torch._dynamo.config, "fail_on_recompile_limit_hit"):
            torch._dynamo.config.fail_on_recompile_limit_hit = True
        warnings.filterwarnings("error", message=".*flex_attention called without torch.compile")

        def flex(*a, **kw):
            return flex.compiled(*a, **kw)
        flex.compiled = None
    except Exception as e:  # no flex here: our side is still timed, PyTorch's is reported missing
        print(f"compare_variants.py: no flex_attention in torch {torch.__version__}: {e}", file=sys.stderr)
        flex = None
    try:
        from torch.nn.attention.varlen import varlen_attn
        varlen_params = inspect.signature(varlen_attn).parameters
    except Exception as e:
        print(f"compare_variants.py: no torch.nn.attention.varlen in torch {torch.__version__}: {e}", file=sys.stderr)
        varlen_attn = None
    lib = load(args.lib)
    props = torch.cuda.get_device_properties(0)
    env = {"device": props.name, "sm_count": props.multi_processor_count, "cuda": torch.version.cuda,
           "commit": os.environ.get("FLASHLADDER_COMMIT") or ct.record_commit(), "torch": torch.__version__,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "suite": "compare_variants"}
    try:
        env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                       capture_output=True, text=True).stdout.strip().splitlines()[0]
    except Exception:
        env["driver"] = ""
    try:
        out = open(args.json, "a") if args.json else None
    except OSError as e:
        print(f"compare_variants.py: cannot write --json {args.json}: {e.strerror}", file=sys.stderr)
        sys.exit(2)
    dt, tdt, d = "fp16", torch.float16, 128
    failures = []
    picked = [CASES[int(i)] for i in args.cases.split(",") if i] if args.cases else CASES
    for (name, B, H, lens, causal, window, softcap, alibi) in picked:
        packed = isinstance(lens, list)
        g = torch.Generator(device="cuda").manual_seed(21)
        slopes = vt.alibi_slopes(H).cuda() if alibi else None
        if packed:
            B, N = len(lens), max(lens)
            cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)
            total = int(cu[-1])
            shape, lse_shape = (total, H, d), (H, total)
        else:
            N = lens
            shape, lse_shape = (B, H, N, d), (B, H, N)
        q, k, v, do = (torch.randn(*shape, device="cuda", dtype=torch.float32, generator=g).to(tdt) for _ in range(4))
        base = {"variant": name, "dtype": dt, "B": B, "H": H, "H_kv": H, "Nq": N, "Nk": N, "d": d, "causal": causal}
        # The variant's fields as the program's records name them (app/record.cpp), so that the tables made
        # from plain records (scripts/fl_results.py matches) never pick these up.
        if window is not None:
            base["window"] = list(window)
        if softcap:
            base["softcap"] = softcap
        if alibi:
            base["alibi"] = "heads"
        if packed:
            base["varlen"] = True
            base["cu_seqlens_q"] = base["cu_seqlens_k"] = [int(x) for x in cu]
            base["seqlens"] = lens

        def emit(impl, pas, t, extra=None):
            r = {"impl": impl, "pass": pas, **base, **t,
                 "tflops": flr.record_flops({**base, "pass": pas}) / (t["median_ms"] * 1e-3) / 1e12, "tol_used": None,
                 **env, **(extra or {})}
            if out:
                out.write(json.dumps(r) + "\n")
                out.flush()
            return r

        row = {}
        # ---- ours
        lib.fl_reset_variants()
        cu_dev = cu.cuda() if packed else None
        if window is not None:
            lib.fl_set_window(*window)
        if softcap:
            lib.fl_set_softcap(softcap)
        if alibi:
            lib.fl_set_alibi(1, slopes.data_ptr())
        if packed:
            host = (ctypes.c_int32 * (B + 1))(*[int(x) for x in cu])
            lib.fl_set_varlen(B + 1, host, host, cu_dev.data_ptr(), cu_dev.data_ptr())
        o_ours = None
        try:
            o, lse = torch.empty_like(q), torch.empty(lse_shape, device="cuda", dtype=torch.float32)
            ours = ct.Ours(lib, args.fwd_step, B, H, N, d, causal, dt)
            fwd = lambda s: ours.forward(q, k, v, o, lse, poison_ws=False)  # poisoned untimed, in `before`
            t = ct.time_launches(fwd, [None], args.warmup, args.reps,
                                 before=lambda s: (o.fill_(float("nan")), lse.fill_(float("nan")), ours.poison_ws()))
            o_ours = o.clone()
            if not torch.isfinite(o_ours).all():
                failures.append(f"{args.fwd_step} {name} N={N}: non-finite output")
            row["ours"] = emit(args.fwd_step, "fwd", t)
            ob = ct.Ours(lib, args.bwd_step, B, H, N, d, causal, dt)
            o9, dq, dk, dv = (torch.empty_like(q) for _ in range(4))
            ob.forward(q, k, v, o9, lse)
            bwd = lambda s: ob.backward(q, k, v, o9, lse, do, dq, dk, dv, poison_ws=False)
            t = ct.time_launches(bwd, [None], args.warmup, args.reps,
                                 before=lambda s: ([x.fill_(float("nan")) for x in (dq, dk, dv)], ob.poison_bwd_ws()))
            if not all(torch.isfinite(x).all() for x in (dq, dk, dv)):
                failures.append(f"{args.bwd_step} {name} N={N}: non-finite gradient")
            row["ours_bwd"] = emit(args.bwd_step, "bwd", t)
        except Exception as e:
            print(f"  ours {name} N={N}: {e}", file=sys.stderr)
            failures.append(f"ours {name} N={N}: {e}")
        finally:
            lib.fl_reset_variants()
        # ---- torch flex (not for the packed batch: flex would need a document mask over one long row)
        if flex is not None and not packed:
            try:
                torch._dynamo.reset()
                flex.compiled = torch.compile(flex_attention, dynamic=False)
                qf, kf, vf = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
                mm = vt.mask_mod(N, N, causal, window)
                bm = create_block_mask(mm, None, None, N, N, device="cuda") if mm else None
                sm = vt.score_mod(N, N, softcap, slopes)
                f = lambda s: flex(qf, kf, vf, score_mod=sm, block_mask=bm)
                with torch.no_grad():
                    t = ct.time_launches(f, [None], args.warmup, args.reps)
                    of = f(None)
                extra = {}
                if o_ours is not None:
                    extra["max_abs_diff_vs_ours"] = float((of.float() - o_ours.float()).abs().max())
                row["flex"] = emit("torch_flex", "fwd", t, extra)
                out_t = f(None)
                gb = lambda s: torch.autograd.grad(out_t, (qf, kf, vf), do, retain_graph=True)
                row["flex_bwd"] = emit("torch_flex", "bwd", ct.time_launches(gb, [None], args.warmup, args.reps))
            except Exception as e:
                print(f"  torch_flex {name} N={N}: {e}", file=sys.stderr)
        # ---- torch varlen_attn (packed; a single sequence for the window where it takes window_size)
        if varlen_attn is not None and (packed or (window is not None and "window_size" in varlen_params)):
            try:
                if packed:
                    qv, kv_, vv = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
                    cuv, mx = cu_dev, N
                else:  # [B = 1][H][N][d] as one packed sequence [N][H][d]
                    qv, kv_, vv = (x[0].transpose(0, 1).contiguous().requires_grad_(True) for x in (q, k, v))
                    cuv, mx = torch.tensor([0, N], dtype=torch.int32, device="cuda"), N
                kw = {}
                if "window_size" in varlen_params:
                    kw["window_size"] = tuple(window) if window is not None else ((-1, 0) if causal else (-1, -1))
                elif causal:
                    kw["is_causal"] = True
                f = lambda s: varlen_attn(qv, kv_, vv, cuv, cuv, mx, mx, **kw)
                with torch.no_grad():
                    t = ct.time_launches(f, [None], args.warmup, args.reps)
                row["varlen"] = emit("torch_varlen", "fwd", t, {"torch_args": {k: str(v) for k, v in kw.items()}})
                out_v = f(None)
                dov = do if packed else do[0].transpose(0, 1).contiguous()
                gb = lambda s: torch.autograd.grad(out_v, (qv, kv_, vv), dov, retain_graph=True)
                row["varlen_bwd"] = emit("torch_varlen", "bwd", ct.time_launches(gb, [None], args.warmup, args.reps))
            except Exception as e:
                print(f"  torch_varlen {name} N={N}: {e}", file=sys.stderr)
        cells = "  ".join(f"{key} {r['median_ms']:.3f} ms ({r['tflops']:.0f} TF)" for key, r in row.items())
        print(f"{name:14s} B={B:2d} N={N:6d}: {cells}", flush=True)
        del q, k, v, do
        torch.cuda.empty_cache()
    if out:
        out.close()
    if failures:
        print("compare_variants.py: FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
