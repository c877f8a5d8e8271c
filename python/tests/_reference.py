"""An fp64 attention written here in numpy, independent of the C++ oracle, to check the oracle against
(and, where torch is importable, PyTorch's math backend is used too). It follows the project's
conventions literally: GQA by repeating K/V heads, the causal mask aligned bottom-right, a row that sees
no key with O = 0 and L = +inf, and the backward of the seeds: dV = Pᵀ dO, dP = dO Vᵀ,
D = rowsum(dO ∘ O), dS = P ∘ (dP − D), dQ = scale · dS K, dK = scale · dSᵀ Q, summed over the query
heads that share a K/V head."""
import numpy as np


def visible(nq, nk, causal):
    i = np.arange(nq)[:, None]
    j = np.arange(nk)[None, :]
    return (j <= i + nk - nq) if causal else np.ones((nq, nk), dtype=bool)


def attention(q, k, v, causal=False, scale=None, do=None):
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, H, Nq, d = q.shape
    H_kv, Nk = k.shape[1], k.shape[2]
    g = H // H_kv
    scale = 1 / np.sqrt(d) if scale is None else scale
    kx, vx = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)  # head h reads K/V head h // g
    s = scale * q @ kx.swapaxes(-1, -2)
    s = np.where(visible(Nq, Nk, causal), s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    seen = np.isfinite(m)
    with np.errstate(invalid="ignore", divide="ignore"):
        e = np.where(seen, np.exp(s - np.where(seen, m, 0)), 0.0)
        l = e.sum(axis=-1, keepdims=True)
        p = np.where(seen, e / np.where(seen, l, 1), 0.0)
        lse = np.where(seen, m + np.log(np.where(seen, l, 1)), np.inf)[..., 0]
    o = p @ vx
    if do is None:
        return o, lse
    do = np.asarray(do, dtype=np.float64)
    dvx = p.swapaxes(-1, -2) @ do
    dp = do @ vx.swapaxes(-1, -2)
    D = (do * o).sum(axis=-1, keepdims=True)
    ds = p * (dp - D)
    dq = scale * ds @ kx
    dkx = scale * ds.swapaxes(-1, -2) @ q
    dk = dkx.reshape(B, H_kv, g, Nk, d).sum(axis=2)
    dv = dvx.reshape(B, H_kv, g, Nk, d).sum(axis=2)
    return o, lse, dq, dk, dv


def assert_close(got, want, name, rtol=1e-10):
    """float64 against float64, NaN-proof: the same shape, +-inf exactly where want has it, and every
    finite entry within rtol of the tensor's largest magnitude (written err <= tol, so NaN fails)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == np.float64, f"{name}: dtype {got.dtype}, not float64"
    assert got.shape == want.shape, f"{name}: shape {got.shape}, want {want.shape}"
    inf = ~np.isfinite(want)
    assert np.array_equal(got[inf], want[inf]), f"{name}: infinities differ"
    scale = max(1.0, float(np.abs(want[~inf]).max(initial=0.0)))
    err = np.abs(got[~inf] - want[~inf])
    ok = err <= rtol * scale
    assert ok.all(), f"{name}: {int((~ok).sum())} entries off; max err {np.nanmax(err) if err.size else 0:.3g} " \
                     f"(NaN counts as off), tol {rtol * scale:.3g}"


def random_problem(rng, B, H, H_kv, Nq, Nk, d, mean=0.5, q_scale=1.0, dtype=np.float32):
    """Normal(mean, 1) inputs (a non-zero mean, as the C++ tests use), rounded to dtype."""
    q = (q_scale * (mean + rng.standard_normal((B, H, Nq, d)))).astype(dtype)
    k = (mean + rng.standard_normal((B, H_kv, Nk, d))).astype(dtype)
    v = (mean + rng.standard_normal((B, H_kv, Nk, d))).astype(dtype)
    do = (mean + rng.standard_normal((B, H, Nq, d))).astype(dtype)
    return q, k, v, do


def round_bf16(x):
    """float32 values rounded to bfloat16 (nearest, ties to even) and widened back: numpy has no bf16."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return b.astype(np.uint32).view(np.float32)


def bf16_bits(x):
    """float32 values exact in bf16 as the <u2 bit patterns the golden files hold."""
    return (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) >> 16).astype("<u2")


def from_bf16_bits(a):
    return (a.astype("<u4") << 16).view("<f4")


# --- The variants of issue 21 (docs/variants.md), written out here in numpy -----------------------------

def variant_visible(nq, nk, causal, window=(-1, -1)):
    """Query i sees key j iff (not causal or j <= diag) and the window holds it, diag = i + nk - nq."""
    i = np.arange(nq)[:, None]
    j = np.arange(nk)[None, :]
    diag = i + nk - nq
    ok = np.ones((nq, nk), dtype=bool)
    if causal:
        ok &= j <= diag
    if window[0] >= 0:
        ok &= j >= diag - window[0]
    if window[1] >= 0:
        ok &= j <= diag + window[1]
    return ok


def _one(q, k, v, do, causal, scale, window, softcap, slopes):
    """One problem [B, H, Nq, d] with every variant but varlen: logits cap(scale q.k) - slope |diag - j|,
    the softcap's derivative 1 - tanh² in the backward, ALiBi's bias without one."""
    B, H, Nq, d = q.shape
    H_kv, Nk = k.shape[1], k.shape[2]
    g = H // H_kv
    kx, vx = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    x = scale * q @ kx.swapaxes(-1, -2)
    t = np.tanh(x / softcap) if softcap is not None else None
    s = softcap * t if softcap is not None else x
    if slopes is not None:  # [B, H]
        dist = np.abs(np.arange(Nq)[:, None] + Nk - Nq - np.arange(Nk)[None, :])
        s = s - slopes[:, :, None, None] * dist
    s = np.where(variant_visible(Nq, Nk, causal, window), s, -np.inf)
    m = s.max(axis=-1, keepdims=True) if Nk else np.full((B, H, Nq, 1), -np.inf)
    seen = np.isfinite(m)
    with np.errstate(invalid="ignore", divide="ignore"):
        e = np.where(seen, np.exp(s - np.where(seen, m, 0)), 0.0)
        l = e.sum(axis=-1, keepdims=True)
        p = np.where(seen, e / np.where(seen, l, 1), 0.0)
        lse = np.where(seen, m + np.log(np.where(seen, l, 1)), np.inf)[..., 0]
    o = p @ vx
    if do is None:
        return o, lse
    dvx = p.swapaxes(-1, -2) @ do
    dp = do @ vx.swapaxes(-1, -2)
    ds = p * (dp - (do * o).sum(axis=-1, keepdims=True))
    if softcap is not None:
        ds = ds * (1 - t * t)
    dq = scale * ds @ kx
    dkx = scale * ds.swapaxes(-1, -2) @ q
    return o, lse, dq, dkx.reshape(B, H_kv, g, Nk, d).sum(axis=2), dvx.reshape(B, H_kv, g, Nk, d).sum(axis=2)


def attention_variants(q, k, v, causal=False, scale=None, do=None, window=(-1, -1), softcap=None, slopes=None,
                       cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None):
    """The oracle's answer by the definition: plain [B, H, N, d] tensors, or packed [total, H, d] ones
    with cu_seqlens (each sequence its own problem; lse [H, total_q]). slopes: [H] or [B, H]."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    do = None if do is None else np.asarray(do, dtype=np.float64)
    d = q.shape[-1]
    scale = 1 / np.sqrt(d) if scale is None else scale
    packed = cu_seqlens_q is not None
    B = len(cu_seqlens_q) - 1 if packed else q.shape[0]
    H = q.shape[-2] if packed else q.shape[1]
    sl = None if slopes is None else np.broadcast_to(np.asarray(slopes, dtype=np.float64), (B, H))
    if not packed and seqused_k is None:
        return _one(q, k, v, do, causal, scale, window, softcap, sl)
    outs = [np.zeros_like(q), np.full((H, q.shape[0]) if packed else q.shape[:3], np.inf)]
    if do is not None:
        outs += [np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)]
    for b in range(B):
        if packed:
            qs, ks = slice(cu_seqlens_q[b], cu_seqlens_q[b + 1]), slice(cu_seqlens_k[b], cu_seqlens_k[b + 1])
            nk = ks.stop - ks.start if seqused_k is None else seqused_k[b]
            take_q = lambda x: x[qs].transpose(1, 0, 2)[None]  # noqa: E731  [1, H, n, d]
            take_k = lambda x: x[ks][:nk].transpose(1, 0, 2)[None]  # noqa: E731
        else:
            nk = seqused_k[b]
            take_q = lambda x: x[b:b + 1]  # noqa: E731
            take_k = lambda x: x[b:b + 1, :, :nk]  # noqa: E731
        if take_q(q).shape[2] == 0:
            continue
        r = _one(take_q(q), take_k(k), take_k(v), None if do is None else take_q(do), causal, scale, window,
                 softcap, None if sl is None else sl[b:b + 1])
        if packed:
            outs[0][qs] = r[0][0].transpose(1, 0, 2)
            outs[1][:, qs] = r[1][0]
            if do is not None:
                outs[2][qs] = r[2][0].transpose(1, 0, 2)
                outs[3][ks.start:ks.start + nk] = r[3][0].transpose(1, 0, 2)
                outs[4][ks.start:ks.start + nk] = r[4][0].transpose(1, 0, 2)
        else:
            outs[0][b] = r[0][0]
            outs[1][b] = r[1][0]
            if do is not None:
                outs[2][b] = r[2][0]
                outs[3][b, :, :nk] = r[3][0]
                outs[4][b, :, :nk] = r[4][0]
    return tuple(outs)
