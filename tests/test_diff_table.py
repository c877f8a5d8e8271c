#!/usr/bin/env python3
"""flashladder — tests/test_diff_table.py: scripts/diff_table.py's count of changed lines against
`diff -u`'s own + and − lines, on made-up sources whose lines start with ++ and -- (an added "++c;" shows
as "+++c;", a removed "--b;" as "---b;": only the two file-name lines before the first hunk are not
counted)."""
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
import diff_table  # noqa: E402


class Count(unittest.TestCase):
    def sources(self, old: str, new: str):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        paths = []
        for name, text in (("old.cu", old), ("new.cu", new)):
            paths.append(os.path.join(tmp.name, name))
            with open(paths[-1], "w") as f:
                f.write(text)
        return paths

    def test_lines_that_start_with_plus_plus_or_minus_minus_count(self):
        old, new = self.sources("a;\n--b;\nkeep;\n", "++c;\n--d;\nkeep;\n")
        # diff -u: −a; −--b; +++c; +--d;
        self.assertEqual(diff_table.count(old, new), (2, 2))

    def test_a_new_file_counts_every_line(self):
        _, new = self.sources("", "--b;\n++c;\n")
        self.assertEqual(diff_table.count(os.devnull, new), (2, 0))

    def test_no_change(self):
        old, new = self.sources("x;\n", "x;\n")
        self.assertEqual(diff_table.count(old, new), (0, 0))


if __name__ == "__main__":
    unittest.main()
