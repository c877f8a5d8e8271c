"""flashladder.check gives the verdict `flashladder oracle check` gives, with the same numbers.

Golden sets come from `flashladder oracle generate` (bf16 with GQA, Nq > Nk and causal, so lse has
+inf rows; fp16 MQA non-causal; fp32 causal with a backward). For each, candidates are written from
numpy: right ones (the golden values rounded to the storage type, or kept in f8), ones just inside and
just outside the tolerance, NaN, Inf, a finite lse where the oracle's is +inf, a wrong dtype, a
transposed shape, and wrong gradients. The CLI judges the files, the module judges the same arrays;
the test asserts they agree on the exit status, on every tensor's pass/FAIL, on the tolerances (the
module's equal the manifest's exactly) and on the max errors, and that each scenario's verdict is the
one it was built to give, so agreement cannot come from both sides judging nothing.
"""
import json
import re
import subprocess

import numpy as np
import pytest

import flashladder
from _reference import bf16_bits, from_bf16_bits, round_bf16

GOLDEN = {
    "bf16_gqa_causal": ["-B", "1", "-H", "4", "--heads-kv", "2", "--nq", "21", "--nk", "13", "-d", "16", "--causal",
                        "--dtype", "bf16", "--seed", "7"],
    "fp16_mqa": ["-B", "2", "-H", "3", "--heads-kv", "1", "--nq", "9", "--nk", "30", "-d", "32", "--dtype", "fp16",
                 "--seed", "11"],
    "fp32_causal": ["-B", "1", "-H", "2", "--heads-kv", "2", "--nq", "16", "--nk", "16", "-d", "8", "--causal",
                    "--dtype", "fp32", "--seed", "3"],
}


class Golden:
    def __init__(self, path):
        self.path = path
        self.m = json.loads((path / "manifest.json").read_text())
        self.p = self.m["problem"]
        self.dtype = self.p["dtype"]

    def load(self, name):
        a = np.load(self.path / f"{name}.npy")
        return from_bf16_bits(a) if a.dtype == np.dtype("<u2") else a

    def inputs(self):
        return {n: self.load(n) for n in ("q", "k", "v", "do")}

    def tol(self, name):
        return self.m["tensors"][name]["tol"]

    def storage(self, name, values):
        """values (f8) rounded to the storage type of the tensor, as a kernel would write them."""
        st = "fp32" if name == "lse" else self.dtype
        if st == "fp16":
            return values.astype(np.float16)
        if st == "bf16":
            return round_bf16(values.astype(np.float32))
        return values.astype(np.float32)


@pytest.fixture(scope="module")
def goldens(flashladder_bin, tmp_path_factory):
    out = {}
    for name, args in GOLDEN.items():
        path = tmp_path_factory.mktemp(name)
        r = subprocess.run([flashladder_bin, "oracle", "generate", "--out", str(path), *args], capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        out[name] = Golden(path)
    return out


def bump(a, index, by):
    a = np.array(a, dtype=np.float64)
    a[index] += by
    return a


def set_at(a, index, value):
    a = np.array(a, copy=True)
    a[index] = value
    return a


# Each scenario: (golden set, builder(golden) -> {tensor: array}, expected verdict per tensor).
def right_in_storage(g):
    return {n: g.storage(n, g.load(n)) for n in ("o", "lse")}


def right_in_f8_with_grads(g):
    return {n: g.load(n) for n in ("o", "lse", "dq", "dk", "dv")}


def inside_tol(g):
    return {"o": bump(g.load("o"), (0, 1, 3, 2), 0.9 * g.tol("o")), "lse": g.load("lse")}


def outside_tol(g):
    return {"o": bump(g.load("o"), (0, 1, 3, 2), 1.1 * g.tol("o")), "lse": g.load("lse")}


def nan_in_o(g):
    return {"o": set_at(g.load("o"), (0, 0, 0, 0), np.nan), "lse": g.load("lse")}


def inf_in_lse(g):
    lse = g.load("lse")
    i = tuple(np.argwhere(np.isfinite(lse))[-1])
    return {"o": g.load("o"), "lse": set_at(lse, i, np.inf)}


def finite_where_lse_is_inf(g):
    lse = g.load("lse")
    i = tuple(np.argwhere(np.isinf(lse))[0])
    return {"o": g.load("o"), "lse": set_at(lse, i, 1e30)}


def nan_where_lse_is_inf(g):
    lse = g.load("lse")
    i = tuple(np.argwhere(np.isinf(lse))[0])
    return {"o": g.load("o"), "lse": set_at(lse, i, np.nan)}


def o_as_fp16(g):  # accepted for fp16 storage, a dtype mismatch for bf16 and fp32
    return {"o": g.load("o").astype(np.float16), "lse": g.load("lse")}


def lse_as_fp16(g):  # lse is fp32 whatever the storage type: fp16 is a dtype mismatch even in an fp16 set
    return {"o": g.load("o"), "lse": g.load("lse").astype(np.float16)}


def o_transposed(g):
    return {"o": np.ascontiguousarray(g.load("o").swapaxes(2, 3)), "lse": g.load("lse")}


def dk_outside_tol(g):
    c = right_in_f8_with_grads(g)
    c["dk"] = bump(c["dk"], (1, 0, 5, 3), 1.5 * g.tol("dk"))
    return c


def dv_as_storage_dq_nan(g):
    c = right_in_f8_with_grads(g)
    c["dv"] = g.storage("dv", c["dv"])
    c["dq"] = set_at(c["dq"], (0, 0, 15, 7), np.nan)
    return c


P, F = True, False
SCENARIOS = [
    ("bf16_gqa_causal", right_in_storage, {"o": P, "lse": P}),
    ("bf16_gqa_causal", right_in_f8_with_grads, {"o": P, "lse": P, "dq": P, "dk": P, "dv": P}),
    ("bf16_gqa_causal", inside_tol, {"o": P, "lse": P}),
    ("bf16_gqa_causal", outside_tol, {"o": F, "lse": P}),
    ("bf16_gqa_causal", nan_in_o, {"o": F, "lse": P}),
    ("bf16_gqa_causal", inf_in_lse, {"o": P, "lse": F}),
    ("bf16_gqa_causal", finite_where_lse_is_inf, {"o": P, "lse": F}),
    ("bf16_gqa_causal", nan_where_lse_is_inf, {"o": P, "lse": F}),
    ("bf16_gqa_causal", o_as_fp16, {"o": F, "lse": P}),
    ("bf16_gqa_causal", o_transposed, {"o": F, "lse": P}),
    ("fp16_mqa", right_in_storage, {"o": P, "lse": P}),
    ("fp16_mqa", inside_tol, {"o": P, "lse": P}),
    ("fp16_mqa", outside_tol, {"o": F, "lse": P}),
    ("fp16_mqa", o_as_fp16, {"o": P, "lse": P}),
    ("fp16_mqa", lse_as_fp16, {"o": P, "lse": F}),
    ("fp16_mqa", dk_outside_tol, {"o": P, "lse": P, "dq": P, "dk": F, "dv": P}),
    ("fp32_causal", right_in_f8_with_grads, {"o": P, "lse": P, "dq": P, "dk": P, "dv": P}),
    ("fp32_causal", outside_tol, {"o": F, "lse": P}),
    ("fp32_causal", o_as_fp16, {"o": F, "lse": P}),
    ("fp32_causal", dv_as_storage_dq_nan, {"o": P, "lse": P, "dq": F, "dk": P, "dv": P}),
]


def write_npy(path, name, a, dtype):
    path.mkdir(parents=True, exist_ok=True)
    if dtype == "bf16" and a.dtype == np.float32 and name != "lse":
        a = bf16_bits(a)  # a candidate in its storage type: bf16 bit patterns, as the golden files hold them
    np.save(path / f"{name}.npy", a)


LINE = re.compile(r"^(o|lse|dq|dk|dv)\s+(pass|FAIL)\s*(.*)$")


def parse_cli(stdout):
    """{tensor: (passed, max_err or None, tol or None)} from `oracle check`'s table."""
    out = {}
    for line in stdout.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        nums = m.group(3).split()
        try:
            err, tol = float(nums[0]), float(nums[1])
        except (IndexError, ValueError):  # a dtype or shape mismatch: words, no numbers
            err = tol = None
        out[m.group(1)] = (m.group(2) == "pass", err, tol)
    return out


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: f"{s[0]}-{s[1].__name__}" if isinstance(s, tuple) else "")
def test_check_agrees_with_cli(scenario, goldens, flashladder_bin, tmp_path):
    gname, build, expected = scenario
    g = goldens[gname]
    cand = build(g)
    for name, a in cand.items():
        write_npy(tmp_path, name, a, g.dtype)
    backward = "dq" in cand
    r = subprocess.run([flashladder_bin, "oracle", "check", "--golden", str(g.path), "--candidate", str(tmp_path)]
                       + (["--backward"] if backward else []), capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 1), f"oracle check: bad input (rc {r.returncode})\n{r.stdout}{r.stderr}"
    cli = parse_cli(r.stdout)
    inp = g.inputs()
    rep = flashladder.check(cand["o"], inp["q"], inp["k"], inp["v"], causal=g.p["causal"], scale=g.p["softmax_scale"],
                            dtype=g.dtype, lse=cand["lse"], do=inp["do"] if backward else None, dq=cand.get("dq"),
                            dk=cand.get("dk"), dv=cand.get("dv"), seed=g.m["seed"])
    msg = f"\nCLI (rc {r.returncode}):\n{r.stdout}\nmodule:\n{rep}"
    # The scenario gives the verdict it was built for, on both sides.
    assert set(cli) == set(expected) == {t.name for t in rep.tensors}, msg
    for name, want in expected.items():
        assert cli[name][0] == want, f"CLI: {name} should {'pass' if want else 'fail'}" + msg
        assert rep[name].passed == want, f"module: {name} should {'pass' if want else 'fail'}" + msg
    assert (r.returncode == 0) == rep.passed == all(expected.values()), msg
    # Same numbers. Built together (ctest: this build's module and program) the module's oracle and
    # tolerances are the manifest's to the last bit. A module and a program built for other instruction
    # sets (pip's module is portable, tools/build's program is -march=native) round the oracle's double
    # sums differently (~1e-16), and the fp32 baseline (FMA or not) by enough to move an fp32 tolerance
    # by a factor up to ~2: then only the verdicts (above) and the order of the numbers are held to.
    same_build = np.array_equal(flashladder.oracle(inp["q"], inp["k"], inp["v"], causal=g.p["causal"],
                                                   scale=g.p["softmax_scale"]).o, g.load("o"))
    for t in rep.tensors:
        passed, err, tol = cli[t.name]
        if t.mismatch:
            assert err is None and "mismatch" in r.stdout, msg
            continue
        if same_build:
            assert t.tol == g.tol(t.name), f"{t.name}: tol {t.tol!r} vs manifest {g.tol(t.name)!r}" + msg
            assert tol == pytest.approx(t.tol, rel=6e-3), msg
            assert err == pytest.approx(t.max_err, rel=6e-3, abs=1e-300), msg
        else:
            assert 0.5 * t.tol <= g.tol(t.name) <= 2 * t.tol, msg
            assert err == pytest.approx(t.max_err, rel=6e-3, abs=1e-6 * t.tol), msg  # a millionth of the tolerance
        if not t.passed and t.first_bad_index is not None:
            assert f"({', '.join(map(str, t.first_bad_index))})" in r.stdout, msg
    if not rep.passed:
        with pytest.raises(AssertionError, match="FAIL"):
            rep.assert_ok()
    else:
        assert rep.assert_ok() is rep


@pytest.mark.parametrize("gname", list(GOLDEN))
def test_inputs_are_those_of_oracle_generate(gname, goldens):
    """flashladder.inputs() with a golden set's problem and seed gives its q, k, v, do bit for bit, so a
    Python test can rebuild a golden problem in memory; and check() on the golden outputs then passes."""
    g = goldens[gname]
    p = g.p
    got = flashladder.inputs(p["B"], p["H"], p["Nq"], p["d"], H_kv=p["H_kv"], Nk=p["Nk"], dtype=p["dtype"],
                             seed=g.m["seed"])
    want = g.inputs()
    for name in ("q", "k", "v", "do"):
        a = getattr(got, name)
        assert a.dtype == (np.float16 if p["dtype"] == "fp16" else np.float32), name
        assert a.shape == want[name].shape and np.array_equal(a, want[name]), name
    other = flashladder.inputs(p["B"], p["H"], p["Nq"], p["d"], H_kv=p["H_kv"], Nk=p["Nk"], dtype=p["dtype"],
                               seed=g.m["seed"] + 1)
    assert not np.array_equal(other.q, got.q)  # the seed is used
    flashladder.check(g.load("o"), *got[:3], causal=p["causal"], dtype=p["dtype"], lse=g.load("lse")).assert_ok()
