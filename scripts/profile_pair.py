#!/usr/bin/env python3
"""flashladder — scripts/profile_pair.py: one launch each of our forward/backward and of PyTorch's
FlashAttention-2 (SDPA pinned to FLASH_ATTENTION, or with --backend cudnn to cuDNN's attention) on the
same inputs, for Nsight Compute to profile side
by side. Run it under ncu (tools/device-run's `profile` stage does):

  ncu --clock-control none -k regex:'attention_kernel|backward_kernel|flash_fwd|flash_bwd|cudnn|sdpa' \
      python3 scripts/profile_pair.py --lib build-gpu/libflashladder_capi.so

Each side runs twice (the first launch loads modules; ncu's --launch-skip can drop it). Nothing is timed
here: the benchmark and scripts/compare_torch.py time; this only gives the profiler the same work.

A decode shape (issue 17): --nq, --nk and --h-kv give Q [B][H][Nq][d] and K, V [B][H_kv][Nk][d] (forward
only; PyTorch's side with enable_gqa), e.g. the 10b/cuDNN pair of the bars' sweep:

  python3 scripts/profile_pair.py --fwd-step 10b_cluster_merge --backend cudnn -B 16 -H 32 --h-kv 8 --nq 1 --nk 32768

(through tools/device-run: PROFILE_ARGS="--fwd-step 10b_cluster_merge --backend cudnn -B 16 -H 32 --h-kv 8 --nq 1
--nk 32768"; "none" names no step where an empty value cannot be passed).
"""
import argparse
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import fl_results as flr  # noqa: E402  (need_torch: --help without PyTorch)


def make_parser():
    """The options (built without PyTorch: flr.need_torch parses them where it is missing)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build-gpu/libflashladder_capi.so", type=flr.library_path, help="our C entry points")
    ap.add_argument("--fwd-step", default="08g_smem_epilogue", help="our forward step ('' or none to skip)")
    ap.add_argument("--bwd-step", default=None,
                    help="our backward step ('' or none to skip; default 09_backward, none with a decode shape)")
    flr.add_problem_args(ap)
    ap.add_argument("--times", type=int, default=2, help="launches of each side")
    ap.add_argument("--h-kv", type=int, default=0, help="K/V heads (GQA; 0: H)")
    ap.add_argument("--nq", type=int, default=0, help="query rows (a decode shape with --nk; 0: N)")
    ap.add_argument("--nk", type=int, default=0, help="keys (a decode shape with --nq; 0: N)")
    ap.add_argument("--backend", default="flash", choices=["flash", "cudnn"],
                    help="PyTorch's side: SDPA's FLASH_ATTENTION (FlashAttention-2) or CUDNN_ATTENTION")
    return ap


flr.need_torch("profile_pair.py", __doc__, make_parser())
import torch  # noqa: E402
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from compare_torch import DTYPES, Ours, load, problem_inputs  # noqa: E402


def main():
    a = make_parser().parse_args()
    if not torch.cuda.is_available():
        sys.exit("profile_pair.py: needs a CUDA device")
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[a.backend]
    lib = load(a.lib)
    decode = bool(a.h_kv or a.nq or a.nk)
    a.fwd_step = "" if a.fwd_step == "none" else a.fwd_step
    a.bwd_step = ("" if decode else "09_backward") if a.bwd_step is None else "" if a.bwd_step == "none" else a.bwd_step
    if decode:  # a decode (or GQA) shape: forward only
        if a.bwd_step:
            sys.exit(f"profile_pair.py: --h-kv, --nq and --nk profile the forward only (--bwd-step {a.bwd_step} given)")
        H_kv, Nq, Nk = a.h_kv or a.H, a.nq or a.N, a.nk or a.N
        if a.H % H_kv:
            sys.exit(f"profile_pair.py: H = {a.H} is not a multiple of --h-kv {H_kv}")
        g = torch.Generator(device="cuda").manual_seed(1)
        tdt = DTYPES[a.dtype][0]
        q = torch.randn(a.B, a.H, Nq, a.d, device="cuda", generator=g).add_(0.5).to(tdt)
        k, v = (torch.randn(a.B, H_kv, Nk, a.d, device="cuda", generator=g).add_(0.5).to(tdt) for _ in range(2))
        o = torch.empty_like(q)
        lse = torch.empty(a.B, a.H, Nq, device="cuda", dtype=torch.float32)
        ours = Ours(lib, a.fwd_step, a.B, a.H, None, a.d, a.causal, a.dtype, H_kv=H_kv, Nq=Nq, Nk=Nk) if a.fwd_step else None
        for _ in range(a.times):
            if ours:
                ours.forward(q, k, v, o, lse)
            with sdpa_kernel(backend), torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=a.causal, enable_gqa=H_kv != a.H)
        torch.cuda.synchronize()
        print("profile_pair: done")
        return
    q, k, v, do = problem_inputs(a)
    o = torch.empty_like(q)
    lse = torch.empty(a.B, a.H, a.N, device="cuda", dtype=torch.float32)
    for _ in range(a.times):
        if a.fwd_step:
            Ours(lib, a.fwd_step, a.B, a.H, a.N, a.d, a.causal, a.dtype).forward(q, k, v, o, lse)
        with sdpa_kernel(backend), torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=a.causal)
    if a.bwd_step:
        ob = Ours(lib, a.bwd_step, a.B, a.H, a.N, a.d, a.causal, a.dtype)
        ob.forward(q, k, v, o, lse)
        dq, dk, dv = (torch.empty_like(q) for _ in range(3))
        qg, kg, vg = (x.detach().requires_grad_(True) for x in (q, k, v))
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=a.causal)
        for _ in range(a.times):
            ob.backward(q, k, v, o, lse, do, dq, dk, dv)
            torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)
    torch.cuda.synchronize()
    print("profile_pair: done")


if __name__ == "__main__":
    main()
