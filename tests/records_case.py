"""flashladder — tests/records_case.py: what the tests of the record-table scripts (records_ratio.py,
ring_table.py, window_table.py) share: a temporary folder for made-up record files, removed after each
test, and a run of the script under test as its own process (its exit status and messages are part of
what is tested)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest


class RecordsScriptCase(unittest.TestCase):
    SCRIPT = ""  # the script under test: set by each test class

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name

    def write(self, name, recs):
        """A JSON-lines file of records (a str is written as it is: a malformed line on purpose)."""
        p = os.path.join(self.dir, name)
        with open(p, "w") as f:
            for r in recs:
                f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
        return p

    def run_script(self, *args):
        return subprocess.run([sys.executable, self.SCRIPT, *args], capture_output=True, text=True)
