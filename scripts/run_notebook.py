#!/usr/bin/env python3
"""flashladder — scripts/run_notebook.py: execute one notebook headless, as the test suite does.

    scripts/run_notebook.py notebooks/online_softmax.ipynb [--out DIR] [--img-dir DIR]

1. The committed notebook must carry no outputs (outputs stay out of git: they would make every run a
   diff); a notebook with outputs fails here with the command that strips them.
2. Debian's jupyter-nbconvert (python3-nbconvert, python3-nbclient, python3-ipykernel) executes it with
   a fresh kernel; the executed copy goes to --out (default: a temporary folder), never over the source.
   An exception in any cell — the notebooks end with assertions — fails the run.

The notebooks find the repository through FLASHLADDER_ROOT and write their figures to FLASHLADDER_IMG_DIR
(results.ipynb: docs/img/ by default; the test points it into the build folder so a test run never
changes tracked files; tools/docs-refresh points it at docs/img/).
Exit status: 0 pass, 1 fail, 2 no notebook to run (missing or not JSON) or an --out that cannot hold
the executed copy (not a folder, or the notebook's own folder), 77 skipped (a package missing; FLASHLADDER_REQUIRE_DOCS=1 turns that into 1).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stripped_problems(nb: dict) -> list:
    bad = []
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        if cell.get("outputs"):
            bad.append(f"cell {i} has outputs")
        if cell.get("execution_count") is not None:
            bad.append(f"cell {i} has an execution count")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("notebook")
    ap.add_argument("--out", help="folder for the executed copy (default: a temporary folder)")
    ap.add_argument("--img-dir", help="where the notebook writes its PNGs (default: <out>/img/<notebook name>)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    a = ap.parse_args()

    # A missing, unreadable or garbled notebook: one line naming it (exit 2), not a traceback.
    try:
        with open(a.notebook, encoding="utf-8") as f:
            nb = json.load(f)
    except OSError as e:
        print(f"run_notebook.py: cannot read {a.notebook}: {e.strerror}", file=sys.stderr)
        return 2
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        print(f"run_notebook.py: {a.notebook} is not a notebook (JSON text): {e}", file=sys.stderr)
        return 2
    if not isinstance(nb, dict) or not isinstance(nb.get("cells", []), list) or \
            not all(isinstance(c, dict) for c in nb.get("cells", [])):
        print(f"run_notebook.py: {a.notebook} is not a notebook (a JSON object whose cells are objects)",
              file=sys.stderr)
        return 2
    bad = stripped_problems(nb)
    if bad:
        print(f"FAIL: {a.notebook} is committed with outputs ({'; '.join(bad[:5])}). Strip them with:\n"
              f"  jupyter-nbconvert --clear-output --inplace {a.notebook}")
        return 1

    # --out: a folder, and never the notebook's own (nbconvert writes the executed copy under the
    # notebook's name, over the source). Checked before the packages, so it holds wherever it runs.
    nb_path = os.path.abspath(a.notebook)
    if a.out is not None:
        if os.path.exists(a.out) and not os.path.isdir(a.out):
            print(f"run_notebook.py: --out {a.out} is not a folder (the executed copy is written into it)",
                  file=sys.stderr)
            return 2
        if os.path.realpath(os.path.join(a.out, os.path.basename(nb_path))) == os.path.realpath(nb_path):
            print(f"run_notebook.py: --out {a.out} is the notebook's own folder: the executed copy would "
                  f"overwrite {a.notebook} (its source); give another folder", file=sys.stderr)
            return 2

    missing = []
    for mod in ("nbconvert", "nbclient", "ipykernel", "numpy", "matplotlib"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        print(f"SKIPPED: {sys.executable} lacks {', '.join(missing)}; tools/install-deps installs Debian's "
              "jupyter-nbconvert, python3-nbclient, python3-ipykernel, python3-numpy, python3-matplotlib")
        return 1 if os.environ.get("FLASHLADDER_REQUIRE_DOCS") == "1" else 77

    out = os.path.abspath(a.out or tempfile.mkdtemp(prefix="flashladder-nb-"))
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        print(f"run_notebook.py: cannot create the folder {a.out}: {e.strerror}", file=sys.stderr)
        return 2
    env = dict(os.environ)
    env["FLASHLADDER_ROOT"] = ROOT
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # quiets the kernel's debugger notes
    # One figure folder per notebook by default: the tests run the notebooks in parallel, and with one
    # shared folder a notebook counted the figures another was writing as its own ("wrote 19 figure(s)
    # but shows none", seen under ctest -j2).
    stem = os.path.splitext(os.path.basename(a.notebook))[0]
    env["FLASHLADDER_IMG_DIR"] = os.path.abspath(a.img_dir or os.path.join(out, "img", stem))
    cmd = [sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute", f"--output-dir={out}",
           f"--ExecutePreprocessor.timeout={a.timeout}", "--ExecutePreprocessor.kernel_name=python3",
           nb_path]
    img_dir = env["FLASHLADDER_IMG_DIR"]

    def pngs_now() -> dict:  # name -> mtime of the PNGs in the figure folder (shared by the notebooks)
        if not os.path.isdir(img_dir):
            return {}
        return {f: os.stat(os.path.join(img_dir, f)).st_mtime_ns for f in os.listdir(img_dir) if f.endswith(".png")}
    pngs_before = pngs_now()
    print("running:", " ".join(cmd), flush=True)
    # A kernel that never started is tried again, at most twice; nothing of the notebook ran, so no
    # failure of the notebook is hidden. jupyter_client picks the kernel's five ports by binding port 0
    # and closing it, and the kernel binds them a moment later: another process may take one between
    # (CI's run of 2026-11-25 lost notebook.backward to "zmq.error.ZMQError: Address already in use",
    # then "Kernel didn't respond in 60 seconds", with the four notebooks running in parallel; the
    # notebooks now also hold one ctest RESOURCE_LOCK, docs/CMakeLists.txt).
    start_failures = ("Address already in use", "Kernel didn't respond", "Kernel died before replying")
    for attempt in range(1, 4):
        r = subprocess.run(cmd, env=env, cwd=os.path.dirname(nb_path),  # the kernel starts in notebooks/
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        sys.stdout.write(r.stdout)
        sys.stdout.flush()
        if r.returncode == 0 or attempt == 3:
            break
        hit = next((s for s in start_failures if s in r.stdout), None)
        if hit is None:
            break
        print(f"RETRY: the kernel did not start (\"{hit}\" above; try {attempt} of 3); starting a new one",
              flush=True)
    if r.returncode != 0:
        print(f"FAIL: {a.notebook} did not execute cleanly (exit {r.returncode}); the error is above")
        return 1
    # Show the notebook's printed summary lines, so the test log says what was checked.
    with open(os.path.join(out, os.path.basename(a.notebook)), encoding="utf-8") as f:
        done = json.load(f)
    for cell in done.get("cells", []):
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                sys.stdout.write("".join(o.get("text", [])))
    # A notebook that writes figures must also show them: a figure closed before its cell ends is
    # written to disk but missing from the notebook a reader opens.
    pngs = [f for f, t in pngs_now().items() if pngs_before.get(f) != t]  # written by this run
    shown = sum(1 for cell in done.get("cells", []) for o in cell.get("outputs", [])
                if o.get("output_type") in ("display_data", "execute_result") and "image/png" in o.get("data", {}))
    if pngs and not shown:
        print(f"FAIL: {a.notebook} wrote {len(pngs)} figure(s) to {img_dir} but shows none (closed before display?)")
        return 1
    if pngs:
        print(f"{a.notebook}: {shown} figure(s) shown, {len(pngs)} written")
    print(f"PASS: {a.notebook} executed; the executed copy is in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
