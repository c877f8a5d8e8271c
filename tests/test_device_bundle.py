#!/usr/bin/env python3
"""tools/device-bundle on made-up $OUT folders: one that fits is left alone; one over the device tool's
limits (too many files, too deep, an odd name, a file over 16 MiB) comes out within them, and unpacking
what is left gives back every file byte for byte; a pack over 60 MiB is refused and changes nothing."""
import io
import os
import subprocess
import sys
import tarfile
import tempfile

TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "device-bundle")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def write(root, rel, data):
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(data)


def snapshot(root):
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


def unpack(root):
    parts = sorted(n for n in os.listdir(root) if n.startswith("bundle.tar.gz"))
    data = b"".join(open(os.path.join(root, n), "rb").read() for n in parts)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def random_and_nine_small(root, mib):
    """mib MiB of random (incompressible) bytes and 9 one-byte files: too many files, a pack of ~mib MiB."""
    write(root, "random.bin", os.urandom(mib << 20))
    for i in range(9):
        write(root, f"s{i}.txt", b"s")
    return snapshot(root)


def within_limits(root):
    files = snapshot(root)
    ok = len(files) <= 8 and sum(map(len, files.values())) <= 64 << 20
    for rel, data in files.items():
        ok &= len(rel.split(os.sep)) - 1 <= 2 and len(data) <= 16 << 20
    return ok, files


with tempfile.TemporaryDirectory() as t:
    # 1. Fits: left alone.
    a = os.path.join(t, "a")
    for i in range(5):
        write(a, f"f{i}.log", b"x" * 100)
    before = snapshot(a)
    r = run(a)
    check(r.returncode == 0 and snapshot(a) == before, f"a fitting folder is left alone ({r.stdout}{r.stderr})")

    # 2. Too many files, one too deep, one oddly named, one over 16 MiB (compressible): packed.
    b = os.path.join(t, "b")
    for i in range(20):
        write(b, f"run/f{i}.log", f"line {i}\n".encode() * 1000)
    write(b, "x/y/z/deep.txt", b"deep")
    write(b, "odd name.txt", b"odd")
    write(b, "big.log", b"0123456789abcdef" * (1 << 20) + b"end")
    write(b, "env.txt", b"NVIDIA H100")
    before = snapshot(b)
    r = run(b, "--keep", "env.txt", "run/f3.log", "missing.txt")
    ok, after = within_limits(b)
    check(r.returncode == 0, f"a folder over the limits is packed: {r.stderr}")
    check(ok, f"the packed folder fits the limits: {sorted(after)}")
    check(after.get("env.txt") == before["env.txt"] and after.get(os.path.join("run", "f3.log")) == before["run/f3.log"],
          "the kept files stay readable beside the pack")
    check("missing.txt" in r.stderr and "no such file" in r.stderr, "a kept file that is missing is named")
    check(unpack(b) == before, "unpacking gives back every file byte for byte")

    # 3. Incompressible 40 MiB: parts of 15 MiB, joined they unpack.
    c = os.path.join(t, "c")
    before = random_and_nine_small(c, 40)
    r = run(c, "--keep", "s0.txt")
    ok, after = within_limits(c)
    parts = [n for n in after if n.startswith("bundle.tar.gz.part")]
    check(r.returncode == 0 and ok and len(parts) == 3, f"40 MiB of random bytes come back in 3 parts ({sorted(after)})")
    check(unpack(c) == before, "the parts, joined, unpack to the files")

    # 4. Over the 60 MiB a pack may take: refused, nothing changed.
    d = os.path.join(t, "d")
    before = random_and_nine_small(d, 62)
    r = run(d)
    check(r.returncode == 2 and "over the 60 MiB" in r.stderr and snapshot(d) == before,
          f"a pack over 60 MiB is refused and changes nothing ({r.returncode}: {r.stderr})")

    # 5. Not a folder.
    r = run(os.path.join(t, "nope"))
    check(r.returncode == 2 and "is not a folder" in r.stderr, "a missing folder is refused by name")

    # 6. Its report on a full disk: one line, exit 2 (was an OSError traceback).
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            r = subprocess.run([sys.executable, TOOL, a], stdout=full, stderr=subprocess.PIPE, text=True)
        check(r.returncode == 2 and "Traceback" not in r.stderr and
              r.stderr.strip() == "device-bundle: cannot write stdout: No space left on device",
              f"a lost stdout is one line, exit 2 ({r.returncode}: {r.stderr})")

print("device-bundle:", "FAILED" if failures else "all checks passed")
sys.exit(1 if failures else 0)
