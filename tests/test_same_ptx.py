#!/usr/bin/env python3
"""flashladder — tests/test_same_ptx.py: scripts/same_ptx.py on two made-up sources. A kernel that only
gains an unread parameter, a namespace and a template argument is "the same"; one whose body gains one
instruction differs (exit 1, the line shown); a pattern that matches no kernel is refused (exit 1); a
source that does not compile is exit 2. Needs nvcc (skipped with the reason without it)."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "scripts", "same_ptx.py")
NVCC = os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc")

A = r"""
namespace fl::sAAA {
template <class T, int d>
__global__ void scale_kernel(T* x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = T(float(x[i]) * s * d);
}
template __global__ void scale_kernel<float, 64>(float*, float, int);
}
"""
B = r"""
struct Unread { int a, b; const float* p; };
namespace fl::sBBB {
template <class T, int d, int kV>
__global__ void scale_kernel(T* x, float s, int n, Unread u) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    x[i] = T(float(x[i]) * s * d);
    if constexpr (kV != 0) x[i] += T(u.a);
  }
}
template __global__ void scale_kernel<float, 64, 0>(float*, float, int, Unread);
template __global__ void scale_kernel<float, 64, 1>(float*, float, int, Unread);
}
"""


class SamePtx(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(NVCC):
            raise unittest.SkipTest(f"no nvcc at {NVCC}")
        cls.dir = tempfile.mkdtemp()
        cls.a, cls.b, cls.bad = (os.path.join(cls.dir, n) for n in ("a.cu", "b.cu", "bad.cu"))
        for path, text in ((cls.a, A), (cls.b, B), (cls.bad, "this is not C++\n")):
            with open(path, "w") as f:
                f.write(text)

    def run_it(self, *args):
        r = subprocess.run([sys.executable, SCRIPT, *args, "--nvcc", NVCC], capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr

    def test_unread_parameter_and_names_are_the_same(self):
        rc, out = self.run_it(self.a, self.b, "--pair", r"sAAA::scale_kernel<(\w+), (\d+)>=sBBB::scale_kernel<\1, \2, 0>")
        self.assertEqual(rc, 0, out)
        self.assertIn("same   void fl::sAAA::scale_kernel<float, 64>", out)
        self.assertIn("every pair the same", out)

    def test_one_more_instruction_differs(self):
        rc, out = self.run_it(self.a, self.b, "--pair", r"sAAA::scale_kernel<(\w+), (\d+)>=sBBB::scale_kernel<\1, \2, 1>")
        self.assertEqual(rc, 1, out)
        self.assertIn("DIFFER", out)
        self.assertIn("+", out)  # the diff's added lines are shown

    def test_pattern_matching_nothing_is_refused(self):
        rc, out = self.run_it(self.a, self.b, "--pair", r"no_such_kernel=sBBB::scale_kernel")
        self.assertEqual(rc, 1, out)
        self.assertIn("NO KERNEL", out)
        rc, out = self.run_it(self.a, self.b, "--pair", r"sAAA::scale_kernel<(\w+), (\d+)>=sBBB::scale_kernel<\1, \2, 7>")
        self.assertEqual(rc, 1, out)
        self.assertIn("NO PAIR", out)

    def test_malformed_pairs_are_refused_with_the_reason(self):
        for pair, words in (("no-equals-sign", "not PATTERN_A=PATTERN_B"), ("=x", "not PATTERN_A=PATTERN_B"),
                            ("(unclosed=x", "not a regular expression")):
            rc, out = self.run_it(self.a, self.b, "--pair", pair)
            self.assertEqual(rc, 1, out)
            self.assertIn(words, out)
        rc, out = self.run_it(self.a, self.b, "--pair", r"sAAA::scale_kernel<(\w+)=sBBB::scale_kernel<\3")
        self.assertEqual(rc, 1, out)
        self.assertIn("names a group A does not have", out)

    def test_a_source_that_does_not_compile_is_exit_2(self):
        rc, out = self.run_it(self.bad, self.b, "--pair", "x=y")
        self.assertEqual(rc, 2, out)
        self.assertIn("failed", out)

    def test_a_source_it_cannot_read_is_exit_2(self):
        # A REV:path git does not hold was a CalledProcessError traceback, exit 1 ("a pair differs").
        for spec, words in (("nosuchrev:x.cu", "nosuchrev:x.cu: git show failed"),
                            (os.path.join(self.dir, "none.cu"), "none.cu: no such file")):
            rc, out = self.run_it(self.a, spec, "--pair", "x=y")
            self.assertEqual(rc, 2, out)
            self.assertNotIn("Traceback", out)
            self.assertIn(words, out)


if __name__ == "__main__":
    unittest.main()
