"""flashladder.step(): the CPU steps on numpy arrays here, the GPU steps on torch CUDA tensors on the
device (skipped here with the reason; failing under FLASHLADDER_REQUIRE_GPU=1). Every step's output
is judged by flashladder.check, and what a step refuses is refused with the step's own message."""
import numpy as np
import pytest

import flashladder
from _reference import random_problem


def test_steps_lists_the_ladder():
    s = flashladder.steps()
    assert [x.folder for x in s][:2] == ["01_cpu_standard", "02_cpu_online_softmax"]
    assert all(flashladder.step(x.number).folder == x.folder for x in s)
    assert flashladder.step("08g").gpu and not flashladder.step("01").gpu
    assert repr(flashladder.step("1")) == "flashladder.step('01_cpu_standard')"


@pytest.mark.parametrize("name", ["01", "02"])
@pytest.mark.parametrize("causal", [False, True])
def test_cpu_step_passes_the_rule(name, causal):
    rng = np.random.default_rng(3)
    q, k, v, _ = random_problem(rng, 2, 6, 2, 17, 33, 16)
    o, lse = flashladder.step(name)(q, k, v, causal=causal)
    assert o.dtype == np.float32 and o.shape == q.shape and lse.dtype == np.float32 and lse.shape == q.shape[:3]
    flashladder.check(o, q, k, v, causal=causal, lse=lse).assert_ok()
    # The same step judged on the wrong problem fails: the check above could have failed.
    assert not flashladder.check(o, q, k, v, causal=not causal, lse=lse).passed
    # NaN uses no finite share of the tolerance: all-NaN reported 0% used, and a gate on tol_used passed it.
    rep = flashladder.check(np.full_like(o, np.nan), q, k, v, causal=causal, lse=lse)
    assert not rep.passed and rep.tol_used == np.inf and rep["o"].frac == np.inf


def test_check_needs_something_to_judge():
    rng = np.random.default_rng(3)
    q, k, v, _ = random_problem(rng, 1, 2, 1, 4, 4, 8)
    with pytest.raises(ValueError, match=r"nothing to judge: give o, and/or lse, dq, dk, dv"):
        flashladder.check(None, q, k, v)


def test_cpu_step_copies_non_contiguous_inputs():
    rng = np.random.default_rng(4)
    q, k, v, _ = random_problem(rng, 1, 2, 1, 9, 12, 8)
    qt = np.ascontiguousarray(q.swapaxes(2, 3)).swapaxes(2, 3)  # same values, not C-contiguous
    assert not qt.flags.c_contiguous
    o1, l1 = flashladder.step("02")(q, k, v, causal=True)
    o2, l2 = flashladder.step("02")(qt, k, v, causal=True)
    assert np.array_equal(o1, o2) and np.array_equal(l1, l2)


def test_step_refusals():
    rng = np.random.default_rng(5)
    q, k, v, do = random_problem(rng, 1, 2, 1, 5, 7, 8)
    with pytest.raises(flashladder.Error, match=r"step 02_cpu_online_softmax has no backward pass"):
        flashladder.step("02").backward(q, k, v, q, np.zeros((1, 2, 5), np.float32), do)
    with pytest.raises(TypeError, match=r"step 08g_smem_epilogue runs on the GPU: q must be a torch CUDA tensor"):
        flashladder.step("08g")(q, k, v)
    with pytest.raises(TypeError, match=r"inputs of different dtypes"):
        flashladder.step("01")(q, k.astype(np.float16), v)
    with pytest.raises(TypeError, match=r"takes fp32 tensors, not float64"):
        flashladder.step("01")(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64))
    with pytest.raises(ValueError, match=r"H must be a multiple of H_kv"):
        flashladder.step("01")(q[:, :1], np.concatenate([k, k], axis=1), np.concatenate([v, v], axis=1))


@pytest.mark.torch
def test_cpu_step_on_torch_cpu_tensors():
    torch = pytest.importorskip("torch", reason="torch not installed")
    rng = np.random.default_rng(6)
    q, k, v, _ = random_problem(rng, 1, 4, 2, 11, 6, 8)
    o, lse = flashladder.step("01")(*(torch.from_numpy(x) for x in (q, k, v)), causal=True)
    assert isinstance(o, torch.Tensor) and o.dtype == torch.float32
    flashladder.check(o, q, k, v, causal=True, lse=lse).assert_ok()


# --- GPU: torch CUDA tensors, zero-copy on torch's current stream -----------------------------------

def _cuda_inputs(torch, B, H, H_kv, Nq, Nk, d, dtype, seed=0):
    rng = np.random.default_rng(seed)
    arrays = random_problem(rng, B, H, H_kv, Nq, Nk, d)
    return [torch.from_numpy(a).to(device="cuda", dtype=dtype) for a in arrays]


GPU_CASES = [(2, 9, 3, 97, 128, 64, True), (1, 4, 1, 17, 1025, 128, False), (3, 9, 9, 128, 17, 128, True)]


@pytest.mark.parametrize("case", GPU_CASES)
@pytest.mark.parametrize("dt", ["fp16", "bf16"])
def test_gpu_forward_08g(cuda_torch, case, dt):
    torch = cuda_torch
    dtype = torch.float16 if dt == "fp16" else torch.bfloat16
    q, k, v, _ = _cuda_inputs(torch, *case[:6], dtype)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):  # the step launches on the current stream, not the default one
        o, lse = flashladder.step("08g")(q, k, v, causal=case[6])
    s.synchronize()
    assert o.is_cuda and o.dtype == dtype and lse.dtype == torch.float32
    flashladder.check(o, q, k, v, causal=case[6], lse=lse).assert_ok()
    assert not flashladder.check(o, q, k, v, causal=not case[6], lse=lse).passed


@pytest.mark.parametrize("name", ["09", "09b"])
def test_gpu_backward(cuda_torch, name):
    torch = cuda_torch
    q, k, v, do = _cuda_inputs(torch, 2, 9, 3, 97, 128, 64, torch.float16, seed=1)
    st = flashladder.step(name)
    o, lse = st(q, k, v, causal=True)
    dq, dk, dv = st.backward(q, k, v, o, lse, do, causal=True)
    torch.cuda.synchronize()
    flashladder.check(o, q, k, v, causal=True, lse=lse, do=do, dq=dq, dk=dk, dv=dv).assert_ok()


def test_gpu_refusals_carry_the_step_message(cuda_torch):
    torch = cuda_torch
    q, k, v, _ = _cuda_inputs(torch, 1, 2, 2, 16, 16, 64, torch.float32)
    with pytest.raises(flashladder.Error, match=r"step 08g_smem_epilogue: does not support storage type fp32"):
        flashladder.step("08g")(q, k, v)
    q, k, v, _ = _cuda_inputs(torch, 1, 2, 2, 16, 16, 40, torch.float16)
    with pytest.raises(flashladder.Error, match=r"does not support head dim d = 40"):
        flashladder.step("08g")(q, k, v)
    with pytest.raises(TypeError, match=r"must be a torch CUDA tensor, not a CPU tensor"):
        flashladder.step("08g")(q.cpu(), k.cpu(), v.cpu())
    # A forward-only step: its backward is refused by name (on a problem it supports, so the refusal
    # is about the backward and not about d).
    q, k, v, do = _cuda_inputs(torch, 1, 2, 2, 16, 16, 64, torch.float16)
    assert not flashladder.step("08g").has_backward
    o, lse = flashladder.step("08g")(q, k, v)
    with pytest.raises(flashladder.Error, match=r"step 08g_smem_epilogue has no backward pass"):
        flashladder.step("08g").backward(q, k, v, o, lse, do)
