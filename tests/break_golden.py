#!/usr/bin/env python3
"""Make broken copies of a golden set (issue 13's table, rows 4 to 6) for the CLI tests.

    break_golden.py GOLDEN_DIR OUT_ROOT

writes OUT_ROOT/<variant>/ for every variant below: the golden set with one thing broken, the rest
untouched (text edits of manifest.json keep its layout, so a refused value is quoted as written).
Standard library only: the suite must not need numpy.
"""
import math
import re
import shutil
import struct
import sys
from pathlib import Path

# variant -> (regex on manifest.json, replacement); each must match exactly once.
MANIFEST_EDITS = {
    "b_float": (r'"B": 1,', '"B": 1.9,'),
    "b_huge": (r'"B": 1,', '"B": 1e300,'),
    "b_negative": (r'"B": 1,', '"B": -1,'),
    "version_float": (r'"format_version": 1,', '"format_version": 1.9,'),
    "seed_negative": (r'"seed": \d+,', '"seed": -1,'),
    # o's tol (the first "tol" in the file) no longer 2 * baseline_err + floor.
    "tol_inflated": (r'"tol": [0-9.eE+-]+', '"tol": 1e300'),
    # A scale fp32 cannot hold (the steps' type): `run` wrote outputs of NaN and exited 0.
    "scale_huge": (r'"softmax_scale": [0-9.eE+-]+,', '"softmax_scale": 1e308,'),
}


def copy(src: Path, dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)


def main() -> int:
    src, root = Path(sys.argv[1]), Path(sys.argv[2])
    text = (src / "manifest.json").read_text()
    for name, (pattern, repl) in MANIFEST_EDITS.items():
        new, n = re.subn(pattern, repl, text, count=1)
        if n != 1:
            print(f"break_golden: {name}: pattern {pattern!r} not found in {src}/manifest.json", file=sys.stderr)
            return 1
        copy(src, root / name)
        (root / name / "manifest.json").write_text(new)
    # o.npy with a NaN: the .npy header is kept, the 4th double of the data replaced.
    copy(src, root / "o_nan")
    raw = bytearray((src / "o.npy").read_bytes())
    header_len = struct.unpack_from("<H", raw, 8)[0] if raw[6] == 1 else struct.unpack_from("<I", raw, 8)[0]
    data = 10 + header_len if raw[6] == 1 else 12 + header_len
    struct.pack_into("<d", raw, data + 3 * 8, math.nan)
    (root / "o_nan" / "o.npy").write_bytes(bytes(raw))
    print(f"break_golden: {len(MANIFEST_EDITS) + 1} broken golden sets in {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
