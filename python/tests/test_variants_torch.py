"""scripts/variants_torch.py's flex_attention definitions of the variants are the oracle's: the same
problem, so that scripts/compare_variants.py times PyTorch on what our steps solve. Eager flex_attention
in float64 on the CPU against flashladder.oracle, with Nq != Nk (the bottom-right diagonal), GQA
expanded, and rows that see no key left out (flex gives them O = 0 too, but its L is -inf where ours is
+inf)."""
import pathlib
import sys

import numpy as np
import pytest

import flashladder

torch = pytest.importorskip("torch", reason="torch not installed")
flex = pytest.importorskip("torch.nn.attention.flex_attention", reason="this torch has no flex_attention")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
import variants_torch as vt  # noqa: E402

pytestmark = pytest.mark.torch

CASES = [  # Nq, Nk, causal, window, softcap, alibi
    (40, 72, True, None, None, False),
    (72, 40, True, None, None, False),
    (64, 96, False, (16, 0), None, False),
    (64, 96, True, (24, -1), None, False),
    (80, 50, False, (10, 7), None, False),
    (50, 80, False, (-1, 5), None, False),
    (48, 64, True, None, 5.0, False),
    (48, 64, False, None, None, True),
    (64, 48, True, (20, 0), 8.0, True),
]


@pytest.mark.parametrize("Nq,Nk,causal,window,softcap,alibi", CASES)
def test_flex_definition_is_the_oracles(Nq, Nk, causal, window, softcap, alibi):
    torch._dynamo.reset()  # eager flex_attention traces each score_mod; stale traces broke a later case
    B, H, H_kv, d = 2, 4, 2, 32
    rng = np.random.default_rng(Nq * 1000 + Nk)
    q = rng.standard_normal((B, H, Nq, d)).astype(np.float32)
    k = rng.standard_normal((B, H_kv, Nk, d)).astype(np.float32)
    v = rng.standard_normal((B, H_kv, Nk, d)).astype(np.float32)
    slopes = vt.alibi_slopes(H) if alibi else None
    o_ref, lse_ref = flashladder.oracle(q, k, v, causal=causal, window=window, softcap=softcap,
                                        alibi_slopes=None if slopes is None else slopes.numpy())
    t = lambda x: torch.from_numpy(x).double()
    kx, vx = (t(x).repeat_interleave(H // H_kv, dim=1) for x in (k, v))
    mm = vt.mask_mod(Nq, Nk, causal, window)
    bm = flex.create_block_mask(mm, None, None, Nq, Nk, device="cpu") if mm else None
    sm = vt.score_mod(Nq, Nk, softcap, None if slopes is None else slopes.double())
    o = flex.flex_attention(t(q), kx, vx, score_mod=sm, block_mask=bm).numpy()
    seen = np.isfinite(lse_ref)
    assert seen.any()
    err = np.abs(o - o_ref)[seen].max()
    assert err < 1e-10, f"flex and the oracle differ by {err:.3g}"
