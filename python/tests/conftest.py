"""Shared fixtures of the flashladder pytest suite (python/tests).

GPU tests ask for the `cuda_torch` fixture: it skips with the reason when torch, a CUDA device or a
module built with CUDA is missing, and fails instead under FLASHLADDER_REQUIRE_GPU=1 (the device
script's setting), so a GPU machine can never report a skipped GPU test as a pass. The CLI tests ask
for `flashladder_bin`: ctest names this build's program in FLASHLADDER_BIN; run by hand, the suite
looks in build/ and skips (visibly) when there is no program.
"""
import os
import pathlib
import shutil

import pytest

import flashladder

REPO = pathlib.Path(__file__).resolve().parents[2]


def _gpu_missing():
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, "torch sees no CUDA device"
    if not flashladder.HAS_CUDA:
        return None, "this flashladder module was built without CUDA (no nvcc at build time)"
    return torch, None


@pytest.fixture
def cuda_torch():
    torch, why = _gpu_missing()
    if why:
        if os.environ.get("FLASHLADDER_REQUIRE_GPU") == "1":
            pytest.fail(f"FLASHLADDER_REQUIRE_GPU=1 but the GPU tests cannot run: {why}")
        pytest.skip(f"GPU test: {why}")
    return torch


@pytest.fixture(scope="session")
def flashladder_bin():
    named = os.environ.get("FLASHLADDER_BIN")
    if named:
        if not os.access(named, os.X_OK):
            pytest.fail(f"FLASHLADDER_BIN={named} is not an executable")
        return named
    for cand in (REPO / "build" / "flashladder", shutil.which("flashladder")):
        if cand and os.access(str(cand), os.X_OK):
            return str(cand)
    pytest.skip("no flashladder program: build it (tools/build) or set FLASHLADDER_BIN")


# --- Markers, so ctest can run the suite in parts that skip visibly ----------------------------------
# gpu: the test needs a CUDA device (every test that asks for cuda_torch is marked here, so none is
# forgotten); torch: the test needs torch on the CPU. python/CMakeLists.txt runs "not gpu and not torch",
# "torch and not gpu" and "gpu" as three ctest tests.

def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device, torch and a module built with CUDA")
    config.addinivalue_line("markers", "torch: needs torch (CPU is enough)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "cuda_torch" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.gpu)


# With FLASHLADDER_ALL_SKIPPED_RC set (ctest sets 77), a run in which tests were collected but every one
# of them skipped exits with that status, so ctest reports the part as skipped, not as passed.
def pytest_sessionfinish(session, exitstatus):
    rc = os.environ.get("FLASHLADDER_ALL_SKIPPED_RC")
    rep = session.config.pluginmanager.get_plugin("terminalreporter")
    if not rc or rep is None or exitstatus != 0:
        return
    stats = rep.stats
    ran = sum(len(stats.get(k, [])) for k in ("passed", "failed", "error", "xpassed", "xfailed"))
    if ran == 0 and stats.get("skipped"):
        session.exitstatus = int(rc)
