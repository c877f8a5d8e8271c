#!/usr/bin/env python3
"""One line per skip reason, from ctest's JUnit report (tools/test writes it with --output-junit).

    skip_summary.py JUNIT_XML

ctest lists every skipped test on its own line ("(Skipped)") without the reason, which the test
printed: 1392 lines without a GPU. This groups the skipped tests by the reason they printed and
prints one line per reason, with a count and an example, so the reasons are visible and the list is
short. A skipped test that printed no reason is its own group, so nothing is hidden.
"""
import argparse
import os
import re
import sys
import xml.etree.ElementTree as ET
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fl_results as flr  # noqa: E402  (run_main: output that never reached stdout is one line, exit 2)

# Lines that carry a reason: gtest's GTEST_SKIP message (the line after "file:line: Skipped"), and
# the project's own "... skipped ...: why" lines (tests/gpu_gate.hpp, tests/expect_gpu_failure.cmake,
# tests/fuzz.cmake, the python3 fallbacks).
SKIPPED_MARK = re.compile(r":\d+: Skipped$")
REASON_LINE = re.compile(r"skipped", re.IGNORECASE)
NOISE = re.compile(r"^\[\s*SKIPPED\s*\]")


def reason_of(output: str) -> str:
    # cmake -P scripts print message(STATUS) lines with a "-- " prefix.
    lines = [re.sub(r"^-- ", "", l.strip()) for l in output.splitlines()]
    for i, line in enumerate(lines):
        if SKIPPED_MARK.search(line) and i + 1 < len(lines) and lines[i + 1]:
            return lines[i + 1]
    for line in lines:
        if REASON_LINE.search(line) and not NOISE.search(line):
            return line
    return "(the test printed no reason)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("junit", help="ctest's JUnit report (ctest --output-junit)")
    a = ap.parse_args()  # --help; a missing or extra argument is refused (exit 2)
    try:
        root = ET.parse(a.junit).getroot()
    except OSError as e:
        print(f"skip_summary.py: cannot read {a.junit}: {e.strerror}", file=sys.stderr)
        return 2
    except ET.ParseError as e:
        print(f"skip_summary.py: {a.junit} is not a JUnit XML report: {e}", file=sys.stderr)
        return 2
    groups: "OrderedDict[str, list[str]]" = OrderedDict()
    for case in root.iter("testcase"):
        if case.get("status") != "notrun":
            continue
        out = case.findtext("system-out") or ""
        name = (case.get("name") or "?").split("  #")[0]  # gtest appends "  # GetParam() = ..."
        groups.setdefault(reason_of(out), []).append(name)
    total = sum(len(v) for v in groups.values())
    if not total:
        print("skipped: none")
        return 0
    print(f"skipped: {total} tests, {len(groups)} reason(s):")
    for reason, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(names):5d} x {reason}  (e.g. {names[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(flr.run_main("skip_summary.py", main))
