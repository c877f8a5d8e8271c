"""docs/variants.md's examples run as written: its blocks marked <!-- test: sh --> (flashladder commands)
and <!-- test: py --> (numpy, one namespace) in page order, in a fresh folder. Every `oracle check`
must print PASS, so a page whose numpy disagrees with the oracle fails here."""
import pathlib
import re
import shlex
import subprocess

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "variants.md"
BLOCK = re.compile(r"<!-- test: (sh|py) -->\s*\n```(?:sh|python)\n(.*?)\n```", re.S)


def test_variants_page_examples(flashladder_bin, tmp_path, monkeypatch):
    blocks = BLOCK.findall(PAGE.read_text())
    # The helpers, and for each of the four sections a generate, a numpy candidate and a check.
    assert len(blocks) >= 13, f"{len(blocks)} test blocks in {PAGE}: a marker was lost"
    monkeypatch.chdir(tmp_path)
    ns = {"__name__": "variants_page"}
    checks = 0
    for i, (kind, code) in enumerate(blocks):
        if kind == "py":
            exec(compile(code, f"{PAGE}:block {i + 1}", "exec"), ns)
            continue
        for line in code.splitlines():
            args = shlex.split(line, comments=True)
            if not args:
                continue
            assert args[0] == "flashladder", line
            r = subprocess.run([flashladder_bin, *args[1:]], capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, f"{line}\n{r.stdout}{r.stderr}"
            if args[1:3] == ["oracle", "check"]:
                assert "oracle check: PASS" in r.stdout, r.stdout
                checks += 1
    assert checks == 4
