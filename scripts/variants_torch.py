"""flashladder — scripts/variants_torch.py: issue 21's variants written for PyTorch's flex_attention, in
the ladder's conventions (docs/variants.md), so that scripts/compare_variants.py times PyTorch on the
very problem our steps solve. python/tests/test_variants_torch.py checks each definition against
flashladder's oracle (fp64, CPU) on problems with Nq != Nk, so a mistake here (a top-left diagonal, the
bias on the unscaled score) fails a test instead of skewing a benchmark.

Conventions (docs/variants.md): the diagonal is bottom-right, diag = Nk - Nq, so query row r meets key
c at distance r + diag - c; flex_attention's `score` is already scaled (tau·q·k), which is where both
the softcap and the ALiBi bias apply:
  window (L, R):  diag_r - L <= c <= diag_r + R   (-1: unbounded; causal is (-1, 0))
  softcap c:      z = c · tanh(score / c)
  ALiBi slope_h:  z = score - slope_h · |r + diag - c|
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # a library (compare_variants.py and a test import it): run alone, it says so
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import fl_results
    fl_results.library_main("variants_torch.py", __doc__)

import torch  # noqa: E402


def mask_mod(Nq: int, Nk: int, causal: bool, window: tuple[int, int] | None = None):
    """The mask of a (causal, window) problem as a flex_attention mask_mod, or None when nothing is masked."""
    diag = Nk - Nq
    left, right = window if window is not None else (-1, -1)
    if causal:
        right = 0 if right < 0 else min(right, 0)
    if left < 0 and right < 0:
        return None

    def mm(b, h, q, k):
        ok = k >= 0  # all True, as a tensor of the right shape
        if right >= 0:
            ok = ok & (k <= q + diag + right)
        if left >= 0:
            ok = ok & (k >= q + diag - left)
        return ok
    return mm


def score_mod(Nq: int, Nk: int, softcap: float | None = None, slopes: torch.Tensor | None = None):
    """The softcap and ALiBi of a problem as a flex_attention score_mod (slopes fp32 [H]), or None."""
    diag = Nk - Nq
    if not softcap and slopes is None:
        return None

    def sm(score, b, h, q, k):
        if softcap:
            score = softcap * torch.tanh(score / softcap)
        if slopes is not None:
            score = score - slopes[h] * (q + diag - k).abs()
        return score
    return sm


def alibi_slopes(H: int) -> torch.Tensor:
    """ALiBi's slopes for H heads (Press et al.: 2^(-8 i / H), i = 1 … H), fp32."""
    return torch.tensor([2.0 ** (-8.0 * (i + 1) / H) for i in range(H)], dtype=torch.float32)
