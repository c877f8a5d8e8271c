#!/usr/bin/env python3
"""flashladder — scripts/profile_pair.py: one launch each of our forward/backward and of PyTorch's
FlashAttention-2 (SDPA pinned to FLASH_ATTENTION, or with --backend cudnn to cuDNN's attention) on the
same inputs, for Nsight Compute to profile side
by side. Run it under ncu (tools/device-run's `profile` stage does):

  ncu --clock-control none -k regex:'attention_kernel|backward_kernel|flash_fwd|flash_bwd|cudnn|sdpa' \
      python3 scripts/profile_pair.py --lib build-gpu/libflashladder_capi.so

Each side runs twice (the first launch loads modules; ncu's --launch-skip can drop it). Nothing is timed
here: the benchmark and scripts/compare_torch.py time; this only gives the profiler the same work.
"""
import argparse
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from compare_torch import Ours, add_problem_args, load, problem_inputs  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build-gpu/libflashladder_capi.so", help="our C entry points")
    ap.add_argument("--fwd-step", default="08g_smem_epilogue", help="our forward step ('' to skip)")
    ap.add_argument("--bwd-step", default="09_backward", help="our backward step ('' to skip)")
    add_problem_args(ap)
    ap.add_argument("--times", type=int, default=2, help="launches of each side")
    ap.add_argument("--backend", default="flash", choices=["flash", "cudnn"],
                    help="PyTorch's side: SDPA's FLASH_ATTENTION (FlashAttention-2) or CUDNN_ATTENTION")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("profile_pair.py: needs a CUDA device")
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[a.backend]
    lib = load(a.lib)
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
