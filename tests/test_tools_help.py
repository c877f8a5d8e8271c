#!/usr/bin/env python3
"""flashladder — tests/test_tools_help.py: every program in tools/ answers --help (exit 0, a text that
names it or says what it does) without doing its work, and the ones that take no arguments refuse a
stray one (exit 2, naming it) before doing anything. tools/device-run --help used to start its build
stage; a timeout here fails the test instead of letting such a regression run a build."""
import os
import shutil
import subprocess
import sys
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TOOLS = os.path.join(ROOT, "tools")
# Programs that take no arguments. tools/test passes its arguments to ctest and tools/ladder to the
# flashladder program (whose --help is checked by the CLI tests), so only their --help is checked here;
# tools/device-bundle takes a folder (argparse refuses an unknown option).
NO_ARGUMENTS = ["build", "carry-capi", "device-run", "docs-refresh", "install-deps"]
NOT_HERE = set()  # tools/ladder --help is the built program's, or its header: neither installs nor builds


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30, cwd=ROOT)


class ToolsHelp(unittest.TestCase):
    def test_every_tool_answers_help(self):
        tools = sorted(f for f in os.listdir(TOOLS) if os.access(os.path.join(TOOLS, f), os.X_OK)
                       and os.path.isfile(os.path.join(TOOLS, f)))
        self.assertIn("device-run", tools)
        for t in tools:
            if t in NOT_HERE:
                continue
            with self.subTest(tool=t):
                r = run(os.path.join(TOOLS, t), "--help")
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertTrue(r.stdout.strip(), f"tools/{t} --help printed nothing")
                self.assertNotIn("=== build", r.stdout)  # device-run's first stage: --help must not start it

    def test_a_stray_argument_is_refused(self):
        for t in NO_ARGUMENTS:
            with self.subTest(tool=t):
                r = run(os.path.join(TOOLS, t), "--no-such-option")
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn("--no-such-option", r.stderr)
                self.assertEqual(r.stdout, "")

    def test_tools_test_refuses_an_option_ctest_does_not_know(self):
        # ctest itself ignores it and runs every test; tools/test refuses it before installing or building.
        if shutil.which("ctest") is None:
            self.skipTest("no ctest on PATH: tools/test would go on to install it")
        r = run(os.path.join(TOOLS, "test"), "-R", "x", "--no-such-option")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("--no-such-option", r.stderr)
        self.assertEqual(r.stdout, "")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[1:])
