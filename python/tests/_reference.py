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
