#!/usr/bin/env python3
"""flashladder — tests/test_sass_loop.py: scripts/sass_loop.py's reading of cuobjdump's SASS, on a made-up
listing (no GPU, no cuobjdump): two functions; the loop counted is the shortest backward branch that
holds enough HGMMA, predicated opcodes are counted by their opcode, and a function without such a loop
gives none."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import sass_loop  # noqa: E402

SASS = """
        code for sm_90a
                Function : _Z6kernelv
        .headerflags    @"EF_CUDA_SM90"
        /*0000*/                   MOV R1, c[0x0][0x28] ;                 /* 0x00000a0000017a02 */
        /*0010*/                   HGMMA.64x64x16.F32 R24, gdesc[UR4], RZ, !UPT ;  /* 0x0 */
        /*0020*/                   R2UR UR5, R2 ;                         /* 0x0 */
        /*0030*/                   HGMMA.64x64x16.F32 R24, gdesc[UR4], R24 ;  /* 0x0 */
        /*0040*/              @!P0 BSSY B0, 0x60 ;                        /* 0x0 */
        /*0050*/                   HGMMA.64x64x16.F32 R24, gdesc[UR4], R24 ;  /* 0x0 */
        /*0060*/               @P1 BRA 0x20 ;                             /* 0x0 */
        /*0070*/                   BRA 0x0 ;                              /* 0x0 */
        /*0080*/                   EXIT ;                                 /* 0x0 */
                Function : _Z5otherv
        /*0000*/                   IADD3 R1, R1, 1, RZ ;                  /* 0x0 */
        /*0010*/                   BRA 0x0 ;                              /* 0x0 */
"""


class SassLoop(unittest.TestCase):
    def test_functions_and_opcodes(self):
        f = sass_loop.functions(SASS)
        self.assertEqual(sorted(f), ["_Z5otherv", "_Z6kernelv"])
        self.assertEqual(len(f["_Z6kernelv"]), 9)
        self.assertEqual(sass_loop.opcode("@!P0 BSSY B0, 0x60"), "BSSY")
        self.assertEqual(sass_loop.opcode("HGMMA.64x64x16.F32 R24, gdesc[UR4], R24"), "HGMMA")

    def test_the_shortest_loop_with_enough_hgmma(self):
        ins = sass_loop.functions(SASS)["_Z6kernelv"]
        body = sass_loop.inner_loop(ins, 2)  # 0x20 … 0x60 (two HGMMA), not 0x00 … 0x70 (three)
        self.assertEqual(len(body), 5)
        self.assertTrue(body[0].startswith("R2UR"))
        body = sass_loop.inner_loop(ins, 3)  # only the outer loop holds three
        self.assertEqual(len(body), 8)
        self.assertIsNone(sass_loop.inner_loop(ins, 4))
        self.assertIsNone(sass_loop.inner_loop(sass_loop.functions(SASS)["_Z5otherv"], 1))

    def test_bad_options_are_refused_before_anything_runs(self):
        import subprocess
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "sass_loop.py")
        for args, words in ((["--kernel", "(unclosed"], "is not a regular expression"),
                            (["--sed", "no-equals-sign"], "is not OLD=NEW"), (["--sed", "=x"], "is not OLD=NEW")):
            r = subprocess.run([sys.executable, script, "whatever.cu", *args], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn(words, r.stdout)

    def test_a_source_it_cannot_read_is_refused_with_the_reason(self):
        # A REV:path git does not hold, or a missing file with --sed: were tracebacks. Refused before any
        # compile (CUOBJDUMP set so that the missing tool is not the reason given).
        import subprocess
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "sass_loop.py")
        env = dict(os.environ, CUOBJDUMP="/bin/true")
        for args, words in ((["nosuchrev:x.cu"], "nosuchrev:x.cu: git show failed"),
                            (["/nonexistent.cu", "--sed", "a=b"], "cannot read /nonexistent.cu: no such file")):
            r = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, env=env)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertNotIn("Traceback", r.stderr)
            self.assertIn(words, r.stdout)


if __name__ == "__main__":
    unittest.main()
