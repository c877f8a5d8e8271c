#!/usr/bin/env python3
"""flashladder — tests/test_tools_help.py: every program in tools/ (and .ci/run) answers --help (exit 0,
a text that names it or says what it does) without doing its work, and the ones that take no arguments
refuse a stray one (exit 2, naming it) before doing anything; every script in scripts/ answers --help
and refuses an unknown option in one line, not a traceback. tools/device-run --help used to start its build
stage; a timeout here fails the test instead of letting such a regression run a build."""
import os
import re
import shutil
import subprocess
import sys
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TOOLS = os.path.join(ROOT, "tools")
SCRIPTS = os.path.join(ROOT, "scripts")
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

    def test_every_script_answers_help_and_refuses_an_unknown_option(self):
        # scripts/fl_results.py printed nothing for either, scripts/variants_torch.py was an import
        # traceback without PyTorch. The torch scripts say they need PyTorch where it is missing.
        scripts = sorted(f for f in os.listdir(SCRIPTS) if f.endswith(".py"))
        self.assertIn("compare_torch.py", scripts)
        for f in scripts:
            with self.subTest(script=f):
                r = run(sys.executable, os.path.join(SCRIPTS, f), "--help")
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertTrue(r.stdout.strip(), f"scripts/{f} --help printed nothing")
                self.assertNotIn("Traceback", r.stderr)
                r = run(sys.executable, os.path.join(SCRIPTS, f), "--no-such-option")
                self.assertIn(r.returncode, (1, 2), r.stdout + r.stderr)
                self.assertNotIn("Traceback", r.stderr)
                self.assertTrue(r.stderr.strip(), f"scripts/{f} --no-such-option said nothing")

    def test_ci_run_answers_help_and_refuses_a_stray_argument(self):
        # .ci/run used to drop its arguments and exec tools/test: .ci/run --help ran the whole suite.
        ci = os.path.join(ROOT, ".ci", "run")
        r = run(ci, "--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("tools/test", r.stdout)
        r = run(ci, "--no-such-option")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(".ci/run", r.stderr)
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

    def test_ci_run_answers_help_from_another_folder(self):
        # It changed folder before reading its own header: started as a relative path from elsewhere,
        # --help printed "sed: can't read" and exited 2.
        parent = os.path.dirname(os.path.abspath(ROOT))
        rel = os.path.join(os.path.relpath(os.path.abspath(ROOT), parent), ".ci", "run")
        r = subprocess.run([rel, "--help"], capture_output=True, text=True, timeout=30, cwd=parent)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("tools/test", r.stdout)
        self.assertEqual(r.stderr, "")

    def test_tools_test_refuses_a_bare_word_or_an_option_without_its_value(self):
        # ctest 3.25 reads `ctest docs`, `ctest -L` and `ctest -R` as no filter and runs every test, so
        # `tools/test docs` (meaning -L docs) ran the whole suite. Refused before installing or building.
        if shutil.which("ctest") is None:
            self.skipTest("no ctest on PATH: tools/test would go on to install it")
        for args in (["docs"], ["-L"], ["-R"], ["--timeout"], ["-R", "x", "y"], ["-j2", "-L", "docs", "-E"]):
            with self.subTest(args=args):
                r = run(os.path.join(TOOLS, "test"), *args)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn("nothing was run", r.stderr)
                self.assertEqual(r.stdout, "")

    def test_device_run_refuses_a_bad_setting_before_any_stage(self):
        # STAGES="biuld tetss" ran nothing and ended "done status=0"; TORCH_REPEATS=0 skipped the torch
        # stage with status 0. A regression would start the build stage here (cmake), caught by the
        # empty stdout (its first stage prints "=== device").
        import tempfile
        for setting, named in ((("STAGES", "biuld tetss"), "biuld"), (("STAGES", " "), "STAGES is empty"),
                               (("TORCH_REPEATS", "0"), "TORCH_REPEATS"), (("DECODE_TIMEOUT", "ten"), "DECODE_TIMEOUT"),
                               (("BUNDLE", "yes"), "BUNDLE")):
            with self.subTest(setting=setting), tempfile.TemporaryDirectory() as out:
                env = dict(os.environ, OUT=out)
                env.pop("STAGES", None)
                env[setting[0]] = setting[1]
                r = subprocess.run([os.path.join(TOOLS, "device-run")], capture_output=True, text=True,
                                   timeout=30, cwd=ROOT, env=env)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn(named, r.stderr)
                self.assertIn("nothing was run", r.stderr)
                self.assertEqual(r.stdout, "")

    def test_tools_ladder_refuses_an_unknown_option_before_installing(self):
        # It used to install the dependencies and build (minutes on a fresh machine) before the program
        # refused the option; a regression would start apt here, and the 30 s timeout fails the test.
        r = run(os.path.join(TOOLS, "ladder"), "-N", "256", "--no-such-option")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("'--no-such-option'", r.stderr)
        self.assertIn("nothing installed or built", r.stderr)
        self.assertEqual(r.stdout, "")

    def test_tools_ladder_passes_every_option_of_the_program(self):
        # Every --option in the built program's --help-all, each followed by an unknown one: the refusal
        # must name the unknown one, so the real one passed tools/ladder's check (no false refusal).
        prog = os.environ.get("FL_PROGRAM", "")
        if not (prog and os.access(prog, os.X_OK)):
            self.skipTest("FL_PROGRAM (the built flashladder) not given: ctest gives it")
        out = subprocess.run([prog, "--help-all"], capture_output=True, text=True, timeout=30).stdout
        options = sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", out)))
        self.assertGreater(len(options), 30, out[:500])
        for o in options:
            with self.subTest(option=o):
                r = run(os.path.join(TOOLS, "ladder"), "-N", "256", o, "--no-such-option")  # not first: --help there is the program's
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn("'--no-such-option'", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[1:])
