"""The attention variants of issue 21 (docs/variants.md) from Python: flashladder.oracle and check with
window=, softcap=, alibi_slopes=, cu_seqlens_q/k= and seqused_k=.

The oracle is checked against the fp64 numpy definition in _reference.py (and, where torch is importable,
against PyTorch's math backend in fp64: SDPA with the mask and ALiBi's bias as a float attn_mask, the
softcap through autograd of the written-out scores), against its reductions, and check() against a
golden set made by `flashladder oracle generate` with the same variants, read with numpy only. Every
malformed keyword is refused with a message naming it."""
import json
import subprocess

import numpy as np
import pytest

import flashladder
from _reference import assert_close, attention, attention_variants, from_bf16_bits, random_problem, round_bf16

NAMES = ("o", "lse", "dq", "dk", "dv")


def packed_problem(rng, cu_q, cu_k, H, H_kv, d, q_scale=2.0):
    """Packed inputs [total, heads, d], Normal(0.5, 1), float32."""
    tq, tk = cu_q[-1], cu_k[-1]
    q = (q_scale * (0.5 + rng.standard_normal((tq, H, d)))).astype(np.float32)
    k = (0.5 + rng.standard_normal((tk, H_kv, d))).astype(np.float32)
    v = (0.5 + rng.standard_normal((tk, H_kv, d))).astype(np.float32)
    do = (0.5 + rng.standard_normal((tq, H, d))).astype(np.float32)
    return q, k, v, do


# (name, plain problem (B, H, H_kv, Nq, Nk, d) or packed (cu_q, cu_k, H, H_kv, d), keywords)
CASES = [
    ("window", (2, 4, 2, 9, 13, 8), dict(window=(3, 1))),
    ("window_causal_blind_rows", (1, 2, 1, 12, 5, 8), dict(window=(1, 2), causal=True)),
    ("softcap", (2, 3, 3, 7, 11, 16), dict(softcap=1.5)),
    ("alibi_heads", (1, 4, 1, 10, 10, 8), dict(alibi="heads", causal=True)),
    ("alibi_batch_heads", (2, 2, 2, 6, 9, 8), dict(alibi="batch_heads")),
    ("seqused", (2, 4, 2, 6, 9, 8), dict(seqused_k=[9, 4], causal=True)),
    ("varlen", ([0, 5, 5, 17], [0, 8, 20, 21], 4, 2, 8), dict(causal=True)),
    ("varlen_everything", ([0, 7, 19], [0, 9, 22], 4, 2, 16),
     dict(causal=True, window=(4, 2), softcap=3.0, alibi="batch_heads", seqused_k=[6, 13])),
]


def make_case(case):
    name, shape, kw = case
    rng = np.random.default_rng(len(name) * 7 + 1)
    kw = dict(kw)
    alibi = kw.pop("alibi", None)
    if isinstance(shape[0], list):
        cu_q, cu_k, H, H_kv, d = shape
        q, k, v, do = packed_problem(rng, cu_q, cu_k, H, H_kv, d)
        kw.update(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
        B = len(cu_q) - 1
    else:
        B, H, H_kv, Nq, Nk, d = shape
        q, k, v, do = random_problem(rng, B, H, H_kv, Nq, Nk, d, q_scale=2.0)
    if alibi == "heads":
        kw["alibi_slopes"] = (0.5 ** np.arange(1, H + 1)).astype(np.float32)
    elif alibi == "batch_heads":
        kw["alibi_slopes"] = rng.uniform(0.05, 0.6, (B, H)).astype(np.float32)
    return q, k, v, do, kw


def reference(q, k, v, do, kw):
    kw = dict(kw)
    return attention_variants(q, k, v, causal=kw.pop("causal", False), do=do, slopes=kw.pop("alibi_slopes", None),
                              window=kw.pop("window", (-1, -1)), **kw)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_oracle_matches_the_numpy_definition(case):
    q, k, v, do, kw = make_case(case)
    got = flashladder.oracle(q, k, v, do=do, **kw)
    want = reference(q, k, v, do, kw)
    for name, g, w in zip(NAMES, got, want):
        assert_close(g, w, name)
    if case[0] == "window_causal_blind_rows":  # diag = i - 7: rows 0..6 see no key
        assert np.all(got.lse[:, :, :7] == np.inf) and np.all(got.o[:, :, :7] == 0)
        assert np.all(np.isfinite(got.lse[:, :, 7:]))


def test_reductions():
    rng = np.random.default_rng(3)
    q, k, v, do = random_problem(rng, 2, 4, 2, 9, 13, 8, q_scale=2.0)
    plain, causal = flashladder.oracle(q, k, v, do=do), flashladder.oracle(q, k, v, do=do, causal=True)
    for a, b in zip(flashladder.oracle(q, k, v, do=do, window=(-1, -1)), plain):
        assert np.array_equal(a, b)
    for a, b in zip(flashladder.oracle(q, k, v, do=do, window=(-1, 0)), causal):
        assert np.array_equal(a, b)
    for a, b in zip(flashladder.oracle(q, k, v, do=do, alibi_slopes=np.zeros(4, np.float32)), plain):
        assert np.array_equal(a, b)
    for name, a, b in zip(NAMES, flashladder.oracle(q, k, v, do=do, softcap=1e6), plain):
        assert_close(a, b, name, rtol=1e-9)
    # One packed sequence is the plain B = 1 problem; the packed layout is [N, H, d], lse [H, N].
    pk = [x[0].transpose(1, 0, 2) for x in (q, k, v, do)]
    r = flashladder.oracle(*pk[:3], do=pk[3], causal=True, cu_seqlens_q=[0, 9], cu_seqlens_k=[0, 13])
    one = flashladder.oracle(q[:1], k[:1], v[:1], do=do[:1], causal=True)
    assert np.array_equal(r.o, one.o[0].transpose(1, 0, 2)) and np.array_equal(r.lse, one.lse[0])
    assert np.array_equal(r.dk, one.dk[0].transpose(1, 0, 2))


def test_check_judges_packed_candidates():
    q, k, v, do, kw = make_case(CASES[-1])
    r = flashladder.oracle(q, k, v, do=do, **kw)
    rep = flashladder.check(r.o.astype(np.float32), q, k, v, do=do, lse=r.lse.astype(np.float32),
                            dq=r.dq.astype(np.float32), dk=r.dk.astype(np.float32), dv=r.dv.astype(np.float32),
                            dtype="fp32", **kw)
    rep.assert_ok()
    assert [t.name for t in rep.tensors] == list(NAMES)
    assert "window=(4,2) softcap=3 alibi=batch_heads varlen seqused_k" in str(rep)
    bad = r.o.copy()
    bad[10, 1, 3] = np.nan  # token 10 = sequence 1, row 3
    rep = flashladder.check(bad, q, k, v, dtype="fp32", **kw)
    assert not rep.passed and rep["o"].first_bad_index == (10, 1, 3)
    rep = flashladder.check(r.o[:, :, :8], q, k, v, dtype="fp32", **kw)  # a plain-layout guess of the shape
    assert not rep.passed and "shape mismatch" in rep["o"].mismatch


def test_every_bad_keyword_is_refused_naming_it():
    rng = np.random.default_rng(4)
    q, k, v, _ = random_problem(rng, 2, 4, 2, 5, 7, 8)
    cases = [
        (dict(window=(-2, 0)), ValueError, "window_left = -2 is not allowed: it must be -1 (unbounded)"),
        (dict(window=(0, -3)), ValueError, "window_right = -3 is not allowed"),
        # Above 2^40 keys is refused: 2^63 - 1 used to overflow diag + window in the oracle (wrong answers
        # that check() passed), 2^63 could not reach the binding.
        (dict(window=(2**63 - 1, 0)), ValueError, "window_left = 9223372036854775807 is more than 2^40 keys"),
        (dict(window=(0, 2**63)), ValueError, "window_right = 9223372036854775808 is more than 2^40 keys"),
        (dict(window=5), TypeError, "window must be a pair of integers"),
        (dict(window=(1.5, 0)), TypeError, "window must be a pair of integers"),
        (dict(softcap=0), ValueError, "softcap = 0.0 is not allowed: it must be finite and > 0"),
        (dict(softcap=float("nan")), ValueError, "softcap = nan is not allowed"),
        (dict(softcap="30"), TypeError, "softcap must be a number or None"),
        (dict(alibi_slopes=np.ones(3, np.float32)), ValueError, "alibi_slopes has shape [3]; it must be [H] = [4] or [B, H] = [2, 4]"),
        (dict(alibi_slopes=np.array([1, 2, np.nan, 4], np.float32)), ValueError, "alibi_slopes[2] = nan: inputs must be finite"),
        (dict(seqused_k=[1, 2, 3]), ValueError, "seqused_k has 3 entries; it must have B = 2"),
        (dict(seqused_k=[1, 9]), flashladder.Error, "seqused_k[1] = 9 is more than the 7 keys sequence 1 holds (Nk)"),
        (dict(seqused_k=[1.0, 2.0]), TypeError, "seqused_k must be a list of integers"),
        (dict(cu_seqlens_q=[0, 5, 10]), ValueError, "cu_seqlens_q is given without cu_seqlens_k"),
    ]
    for kw, err, words in cases:
        with pytest.raises(err) as e:
            flashladder.oracle(q, k, v, **kw)
        assert words in str(e.value), (kw, str(e.value))
    # Packed: the totals must agree with the offsets, and the offsets with themselves.
    pq, pk, pv, _ = packed_problem(rng, [0, 4, 9], [0, 3, 7], 4, 2, 8)
    packed = [
        (dict(cu_seqlens_q=[0, 4, 8], cu_seqlens_k=[0, 3, 7]), ValueError,
         "q holds 9 tokens (its first dimension) but cu_seqlens_q[-1] = 8: the packed total must agree with the offsets"),
        (dict(cu_seqlens_q=[0, 4, 9], cu_seqlens_k=[0, 3]), ValueError, "cu_seqlens_k has 2 entries but cu_seqlens_q 3"),
        (dict(cu_seqlens_q=[0, 10, 9], cu_seqlens_k=[0, 3, 7]), flashladder.Error,
         "cu_seqlens_q[2] = 9 is less than cu_seqlens_q[1] = 10: the offsets must not decrease"),
        (dict(cu_seqlens_q=[1, 4, 9], cu_seqlens_k=[0, 3, 7]), flashladder.Error,
         "cu_seqlens_q[0] = 1 is not allowed: the offsets must start at 0"),
        (dict(cu_seqlens_q=np.array([0.0, 4, 9]), cu_seqlens_k=[0, 3, 7]), TypeError, "cu_seqlens_q must be a 1-D array of integers"),
        (dict(cu_seqlens_q=[0, 4, 9], cu_seqlens_k=[0, 3, 7], alibi_slopes=np.ones((3, 4), np.float32)), ValueError,
         "alibi_slopes has shape [3, 4]; it must be [H] = [4] or [B, H] = [2, 4]"),
    ]
    for kw, err, words in packed:
        with pytest.raises(err) as e:
            flashladder.oracle(pq, pk, pv, **kw)
        assert words in str(e.value), (kw, str(e.value))
    with pytest.raises(ValueError, match="with cu_seqlens it must be 3-D"):
        flashladder.oracle(q, k, v, cu_seqlens_q=[0, 5, 10], cu_seqlens_k=[0, 7, 14])
    with pytest.raises(ValueError, match="window_left = -2"):  # check() refuses the same way
        flashladder.check(q, q, k, v, window=(-2, 0))


def test_golden_set_from_the_program_read_with_numpy(flashladder_bin, tmp_path):
    """The docs' numpy example (docs/variants.md): generate with the program, read the files and the
    manifest with numpy and json alone, compute with the numpy definition, judge with check() and with
    `flashladder oracle check`."""
    gold = tmp_path / "golden"
    args = ["oracle", "generate", "--out", str(gold), "-H", "4", "--heads-kv", "2", "-d", "16", "--causal",
            "--cu-seqlens-q", "0,9,30", "--cu-seqlens-k", "0,17,20", "--seqused-k", "12,3", "--window", "8,2",
            "--softcap", "5", "--alibi", "batch_heads", "--dtype", "bf16", "--seed", "3"]
    r = subprocess.run([flashladder_bin, *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    m = json.loads((gold / "manifest.json").read_text())
    p = m["problem"]
    load = lambda n: from_bf16_bits(np.load(gold / f"{n}.npy"))  # noqa: E731  bf16 bits -> float32
    q, k, v = load("q"), load("k"), load("v")
    slopes = np.load(gold / "alibi_slopes.npy")
    assert q.shape == (30, 4, 16) and slopes.shape == (2, 4) and slopes.dtype == np.float32
    o, lse = attention_variants(q, k, v, causal=p["causal"], scale=p["softmax_scale"],
                                window=(p["window_left"], p["window_right"]), softcap=p["softcap"], slopes=slopes,
                                cu_seqlens_q=p["cu_seqlens_q"], cu_seqlens_k=p["cu_seqlens_k"], seqused_k=p["seqused_k"])
    assert_close(o, np.load(gold / "o.npy"), "o")
    assert_close(lse, np.load(gold / "lse.npy"), "lse")
    cand = tmp_path / "cand"
    cand.mkdir()
    np.save(cand / "o.npy", round_bf16(o.astype(np.float32)).astype(np.float32))
    np.save(cand / "lse.npy", lse.astype(np.float32))
    r = subprocess.run([flashladder_bin, "oracle", "check", "--golden", str(gold), "--candidate", str(cand)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "oracle check: PASS" in r.stdout, r.stdout + r.stderr
    rep = flashladder.check(round_bf16(o.astype(np.float32)), q, k, v, dtype="bf16", lse=lse.astype(np.float32),
                            causal=p["causal"], window=(p["window_left"], p["window_right"]), softcap=p["softcap"],
                            alibi_slopes=slopes, cu_seqlens_q=p["cu_seqlens_q"], cu_seqlens_k=p["cu_seqlens_k"],
                            seqused_k=p["seqused_k"])
    rep.assert_ok()
    assert rep["o"].tol == m["tensors"]["o"]["tol"]  # the manifest's number exactly


# --- PyTorch's math backend in fp64 (where torch is installed) ---------------------------------------

def _torch_variants(torch, q, k, v, do, causal, window, softcap, slopes):
    """Plain [B, H, N, d] problems: SDPA pinned to the math backend, the window's mask and ALiBi's bias
    as one float attn_mask; with a softcap (which SDPA cannot express) the scores written out in torch
    and differentiated by autograd. L from logsumexp of the same logits."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from _reference import variant_visible
    tq, tk, tv = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
    B, H, Nq, d = q.shape
    Nk, g = k.shape[2], q.shape[1] // k.shape[1]
    kx, vx = tk.repeat_interleave(g, dim=1), tv.repeat_interleave(g, dim=1)
    vis = torch.tensor(variant_visible(Nq, Nk, causal, window))
    bias = torch.zeros((B, H, Nq, Nk), dtype=torch.float64)
    if slopes is not None:
        dist = torch.tensor(np.abs(np.arange(Nq)[:, None] + Nk - Nq - np.arange(Nk)[None, :]), dtype=torch.float64)
        bias = bias - torch.tensor(np.broadcast_to(slopes, (B, H)), dtype=torch.float64)[:, :, None, None] * dist
    bias = bias.masked_fill(~vis, -torch.inf)
    x = (tq @ kx.transpose(-1, -2)) / np.sqrt(d)
    if softcap is None:
        with sdpa_kernel(SDPBackend.MATH):
            o = F.scaled_dot_product_attention(tq, kx, vx, attn_mask=bias)
        s = x + bias
    else:
        s = softcap * torch.tanh(x / softcap) + bias
        o = torch.softmax(s, dim=-1) @ vx
    lse = torch.logsumexp(s, dim=-1)
    o.backward(torch.tensor(do, dtype=torch.float64))
    return [t.detach().numpy() for t in (o, lse, tq.grad, tk.grad, tv.grad)]


@pytest.mark.torch
@pytest.mark.parametrize("kw", [dict(window=(3, 1)), dict(window=(2, 0), causal=True), dict(softcap=1.5),
                                dict(softcap=2.0, causal=True, alibi=True), dict(alibi=True)],
                         ids=["window", "window_causal", "softcap", "softcap_alibi_causal", "alibi"])
def test_oracle_matches_torch_math_fp64(kw):
    torch = pytest.importorskip("torch", reason="torch not installed: the numpy definition above stands in")
    rng = np.random.default_rng(11)
    q, k, v, do = random_problem(rng, 2, 4, 2, 9, 13, 8, q_scale=2.0)  # every row sees a key
    kw = dict(kw)
    slopes = rng.uniform(0.05, 0.5, (2, 4)).astype(np.float32) if kw.pop("alibi", False) else None
    causal, window, softcap = kw.pop("causal", False), kw.pop("window", (-1, -1)), kw.pop("softcap", None)
    got = flashladder.oracle(q, k, v, do=do, causal=causal, window=window, softcap=softcap, alibi_slopes=slopes)
    for name, g, w in zip(NAMES, got, _torch_variants(torch, q, k, v, do, causal, window, softcap, slopes)):
        assert_close(g, w, name)


@pytest.mark.torch
def test_torch_varlen_is_its_sequences():
    torch = pytest.importorskip("torch", reason="torch not installed")
    rng = np.random.default_rng(12)
    cu_q, cu_k = [0, 6, 15], [0, 10, 21]
    q, k, v, do = packed_problem(rng, cu_q, cu_k, 4, 2, 8)
    got = flashladder.oracle(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), do=torch.from_numpy(do),
                             causal=True, cu_seqlens_q=torch.tensor(cu_q, dtype=torch.int32),
                             cu_seqlens_k=torch.tensor(cu_k, dtype=torch.int32))
    for b in range(2):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        seq = [x[s].transpose(1, 0, 2)[None] for x, s in ((q, qs), (k, ks), (v, ks), (do, qs))]
        want = _torch_variants(torch, *seq, True, (-1, -1), None, None)
        assert_close(got.o[qs], want[0][0].transpose(1, 0, 2), "o")
        assert_close(got.lse[:, qs], want[1][0], "lse")
        assert_close(got.dk[ks], want[3][0].transpose(1, 0, 2), "dk")


def test_plain_reference_agrees_with_the_variants_reference():
    # The two numpy references (the plain one of test_oracle.py and the variants' one) agree where they
    # meet, so the variants' reference is itself checked against something.
    rng = np.random.default_rng(13)
    q, k, v, do = random_problem(rng, 2, 4, 2, 7, 5, 8)
    for name, a, b in zip(NAMES, attention_variants(q, k, v, True, do=do), attention(q, k, v, True, do=do)):
        assert_close(a, b, name, rtol=1e-13)


def test_cpu_steps_run_the_variants():
    # Steps 01 and 02 take every variant through flashladder.step, plain and packed; their outputs pass
    # check() with the same keywords.
    for case in (CASES[0], CASES[3], CASES[-1]):
        q, k, v, do, kw = make_case(case)
        for name in ("01", "02"):
            o, lse = flashladder.step(name)(q, k, v, **kw)
            assert lse.dtype == np.float32 and lse.shape == flashladder.oracle(q, k, v, **kw).lse.shape
            flashladder.check(o, q, k, v, lse=lse, dtype="fp32", **kw).assert_ok()


def test_gpu_steps_refuse_the_variants_they_do_not_run():
    # Whether or not this module has the GPU steps, a step's refusal of a variant comes before its
    # build: it names the variant and the steps that run it.
    var = flashladder._core.Variants(window_left=4, window_right=0)
    for s in flashladder.steps():
        why = flashladder._core.refusal(s.folder, 2, 4, 4, 64, 64, 64, False, None, s.dtypes[0], False, variants=var)
        if s.number in ("01", "02"):
            assert why == "", why
        elif "does not support sliding window" in why:
            assert why.startswith(f"step {s.folder}: does not support sliding window (window_left=4, window_right=0); "
                                  "the steps that do: 01_cpu_standard, 02_cpu_online_softmax"), why
