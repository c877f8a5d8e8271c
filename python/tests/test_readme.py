"""python/README.md's code runs as written: the blocks marked <!-- test: cpu --> in one namespace, on
every machine (CI included); the blocks marked <!-- test: gpu --> after them where a GPU can run them
(skipped otherwise, failing under FLASHLADDER_REQUIRE_GPU=1)."""
import pathlib
import re

import pytest

PAGE = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"<!-- test: (cpu|gpu|triton) -->\s*\n```python\n(.*?)\n```", re.S)


def blocks(kind):
    return [code for k, code in BLOCK.findall(PAGE.read_text()) if k == kind]


def run_cpu_blocks():
    ns = {"__name__": "readme"}
    for i, code in enumerate(blocks("cpu")):
        exec(compile(code, f"{PAGE}:cpu block {i + 1}", "exec"), ns)
    return ns


def test_readme_cpu_example(capsys):
    # The page's own claims: the kernel passes, the top-left-causal kernel fails. At least the kernel,
    # the 10 lines and the failing kernel must be there, so losing a marker cannot empty this test.
    assert len(blocks("cpu")) >= 3
    ns = run_cpu_blocks()
    assert ns["report"].passed and not ns["bad"].passed
    out = capsys.readouterr().out
    assert "o    pass" in out and "lse  pass" in out and "PASS" in out


def test_readme_gpu_example(cuda_torch):
    assert len(blocks("gpu")) >= 1
    ns = run_cpu_blocks()
    for i, code in enumerate(blocks("gpu")):
        exec(compile(code, f"{PAGE}:gpu block {i + 1}", "exec"), ns)


def test_readme_triton_example(cuda_torch):
    # The Triton kernel of the page, compiled for this GPU and judged by check(). triton.jit reads its
    # function's source (inspect), so each block is registered in linecache under its own name first.
    pytest.importorskip("triton", reason="Triton is not installed (it comes with PyTorch's CUDA wheels)")
    import linecache
    assert len(blocks("triton")) >= 1
    ns = run_cpu_blocks()
    for code in blocks("gpu"):
        exec(compile(code, f"{PAGE}:gpu", "exec"), ns)
    for i, code in enumerate(blocks("triton")):
        name = f"<{PAGE.name}: triton block {i + 1}>"
        linecache.cache[name] = (len(code), None, code.splitlines(keepends=True), name)
        exec(compile(code, name, "exec"), ns)
