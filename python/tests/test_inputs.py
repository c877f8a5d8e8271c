"""Every bad input raises a clear exception before any C++ runs (TypeError or ValueError naming the
tensor), what the C++ refuses comes back as flashladder.Error with the C++ message, and check()'s
report fails on NaN and Inf wherever they are."""
import math

import numpy as np
import pytest

import flashladder
from _reference import random_problem

RNG = np.random.default_rng(42)
Q, K, V, DO = random_problem(RNG, 1, 4, 2, 6, 9, 8)


@pytest.mark.parametrize("args, exc, match", [
    ((Q[0], K, V), ValueError, r"q has shape \[4, 6, 8\]; it must be 4-D"),
    ((Q, K[:, :, :, :4], V), ValueError, r"k must be \[B=1, H_kv, Nk, d=8\]"),
    ((Q, np.concatenate([K, K]), V), ValueError, r"k must be \[B=1"),
    ((Q, K, V[:, :, :5]), ValueError, r"v has shape .* but k .*: they must agree"),
    ((Q, K[:, :1].repeat(3, axis=1), V[:, :1].repeat(3, axis=1)), ValueError, r"H = 4 .* H_kv = 3: H must be a multiple"),
    ((Q[:, :, :0], K, V), ValueError, r"every dimension must be at least 1"),
    ((Q.astype(np.int32), K, V), TypeError, r"q is a numpy array of dtype int32"),
    ((Q.astype(np.complex64), K, V), TypeError, r"dtype complex64"),
    ((Q.tolist(), K, V), TypeError, r"q must be a numpy array or a torch tensor, not builtins.list"),
    ((Q, K, V.astype(np.float64) + 1e-12), ValueError, r"v\[0, 0, 0, 0\] = .* is not exactly representable in float32"),
    ((np.where(np.arange(8) == 3, np.nan, Q).astype(np.float32), K, V), ValueError,
     r"q\[0, 0, 0, 3\] = nan: inputs must be finite"),
    ((Q, np.where(np.arange(8) == 0, np.inf, K).astype(np.float32), V), ValueError, r"k\[0, 0, 0, 0\] = inf"),
])
def test_oracle_refuses_bad_tensors(args, exc, match):
    with pytest.raises(exc, match=match):
        flashladder.oracle(*args)


@pytest.mark.parametrize("kw, exc, match", [
    (dict(causal="False"), TypeError, r"causal must be True or False, not 'False'"),
    (dict(causal=1), TypeError, r"causal must be True or False"),
    (dict(scale=0), ValueError, r"scale = 0.0 is not allowed: it must be finite and > 0"),
    (dict(scale=-1.0), ValueError, r"must be finite and > 0"),
    (dict(scale=math.nan), ValueError, r"scale = nan is not allowed"),
    (dict(scale=math.inf), ValueError, r"scale = inf is not allowed"),
    (dict(scale="0.1"), TypeError, r"scale must be a number or None"),
    (dict(do=DO[:, :, :3]), ValueError, r"do has shape \[1, 4, 3, 8\] but q \[1, 4, 6, 8\]"),
])
def test_oracle_refuses_bad_options(kw, exc, match):
    with pytest.raises(exc, match=match):
        flashladder.oracle(Q, K, V, **kw)


def test_cpp_errors_become_flashladder_error():
    assert issubclass(flashladder.Error, RuntimeError)
    with pytest.raises(flashladder.Error, match=r"unknown step 'nope'"):
        flashladder.step("nope")
    with pytest.raises(flashladder.Error, match=r"step 01_cpu_standard: does not support storage type fp16; it supports fp32"):
        flashladder.step("01")(Q.astype(np.float16), K.astype(np.float16), V.astype(np.float16))


# --- check(): bad inputs raise; bad candidates fail in the report ----------------------------------

O, L = (x.astype(np.float32) for x in flashladder.oracle(Q, K, V, causal=True))


@pytest.mark.parametrize("kw, exc, match", [
    (dict(dtype="int8"), ValueError, r"dtype 'int8' is not a storage type"),
    (dict(dtype="fp16"), ValueError, r"q\[0, 0, 0, 0\] = .* is not exactly representable in fp16: the rule judges"),
    (dict(dq=O), ValueError, r"give do too"),
    (dict(lse=L.astype(np.int64)), TypeError, r"lse is a numpy array of dtype int64"),
    (dict(causal=None), TypeError, r"causal must be True or False"),
])
def test_check_refuses_bad_inputs(kw, exc, match):
    kw = dict(dict(causal=True, lse=L), **kw)
    with pytest.raises(exc, match=match):
        flashladder.check(O, Q, K, V, **kw)


def test_check_needs_a_dtype_for_float64_inputs():
    with pytest.raises(ValueError, match=r"q is float64: say which storage type"):
        flashladder.check(O, Q.astype(np.float64), K, V, causal=True)
    assert flashladder.check(O, Q.astype(np.float64), K, V, causal=True, dtype="fp32").passed


def test_check_passes_the_oracle_itself_and_reports_numbers():
    r = flashladder.check(O, Q, K, V, causal=True, lse=L)
    assert r.passed and r.dtype == "fp32" and [t.name for t in r.tensors] == ["o", "lse"]
    for t in r.tensors:
        assert 0 <= t.max_err <= t.tol and t.tol == 2 * t.baseline_err + t.floor and t.floor > 0
        assert t.frac == pytest.approx(t.max_err / t.tol) and t.bad == t.nans == t.infs == 0
        assert t.first_bad == "" and t.first_bad_index is None
    assert r.tol_used == max(t.frac for t in r.tensors) and "PASS" in str(r)


@pytest.mark.parametrize("where, value", [("o", np.nan), ("o", np.inf), ("o", -np.inf), ("lse", np.nan),
                                          ("lse", np.inf)])
def test_nan_and_inf_fail(where, value):
    o, lse = O.copy(), L.copy()
    idx = (0, 3, 5, 2) if where == "o" else (0, 3, 5)  # row 5 sees keys: the oracle's lse is finite there
    (o if where == "o" else lse)[idx] = value
    r = flashladder.check(o, Q, K, V, causal=True, lse=lse)
    t = r[where]
    assert not r.passed and not t.passed and t.bad == 1
    assert t.first_bad_index == idx
    assert (t.nans, t.infs) == ((1, 0) if np.isnan(value) else (0, 1))
    with pytest.raises(AssertionError, match=rf"{where} +FAIL"):
        r.assert_ok()


def test_a_bad_candidate_fails_in_the_report():
    r = flashladder.check(O.swapaxes(2, 3), Q, K, V, causal=True, lse=L.astype(np.float16))
    assert not r.passed
    assert "shape mismatch" in r["o"].mismatch and "transposed?" in r["o"].mismatch
    assert "dtype mismatch: lse is fp16 but its storage type is fp32" in r["lse"].mismatch
    with pytest.raises(AssertionError, match="shape mismatch"):
        r.assert_ok()
    with pytest.raises(KeyError, match="dq was not judged"):
        r["dq"]


def test_check_uses_causal_and_scale():
    assert not flashladder.check(O, Q, K, V, causal=False, lse=L).passed
    assert not flashladder.check(O, Q, K, V, causal=True, scale=0.5, lse=L).passed


def test_the_audits_bad_values_name_themselves():
    # seed: pybind11 refused -1 and 2^64 without naming it, and int() took 1.5 as 1
    for seed in (-1, 2**64, 1.5, "x", True):
        with pytest.raises(TypeError, match=r"seed must be None or an integer from 0 to 2\^64 - 1"):
            flashladder.check(O, Q, K, V, causal=True, seed=seed)
    with pytest.raises(ValueError, match=r"B = 9223372036854775808 does not fit in int64"):
        flashladder.inputs(2**63, 1, 1, 8)
    with pytest.raises(TypeError, match=r"seed must be an integer from 0 to 2\^64 - 1"):
        flashladder.inputs(1, 1, 1, 8, seed=2**64)
    with pytest.raises(TypeError, match=r"mean must be a number, not 'a'"):
        flashladder.inputs(1, 1, 1, 8, mean="a")
    # values the storage type cannot hold: inputs() gave arrays of inf
    with pytest.raises(ValueError, match=r"q\[0, 0, 0, 0\] = inf in fp16: mean = 1e\+300"):
        flashladder.inputs(1, 1, 1, 8, mean=1e300)
    with pytest.raises(TypeError, match=r"o must be a numpy array or a torch tensor, not builtins.list"):
        flashladder.step("02").backward(Q, K, V, O.tolist(), L, DO)


def test_logits_beyond_double_are_refused():
    # scale * q.k overflows double: the oracle gave NaN (row 0) and o = 0, lse = +inf (row 1, which sees
    # both keys) without a word
    q = np.array([[[[1.0, 0], [-1.0, 0]]]], np.float32)
    k = np.array([[[[2.0, 0], [3.0, 0]]]], np.float32)
    with pytest.raises(flashladder.Error, match=r"the logits overflow double"):
        flashladder.oracle(q, k, k, scale=1e308)
    o, lse = flashladder.oracle(q, k, k, scale=1e300)  # just inside: row 1 is key 0's
    assert np.isfinite(o).all() and np.isfinite(lse).all() and o[0, 0, 1].tolist() == [2.0, 0.0]
