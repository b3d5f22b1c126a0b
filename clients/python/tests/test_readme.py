"""The README's first example runs as written against a real tenured."""

import os
import re
import subprocess
import sys
import unittest

import helpers


def first_python_block(path):
    with open(path) as f:
        text = f.read()
    m = re.search(r"```python\n(.*?)```", text, re.S)
    if m is None:
        raise AssertionError("no python block in " + path)
    return m.group(1)


class ReadmeTest(unittest.TestCase):
    def test_example_runs(self):
        node = helpers.Node("n1").start()
        self.addCleanup(node.stop)
        code = first_python_block(os.path.join(helpers.PKG_DIR, "README.md"))
        env = dict(os.environ, TENURE_ENDPOINTS=node.api,
                   PYTHONPATH=helpers.SRC_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            helpers.keep_dirs()
        self.assertEqual(p.returncode, 0, "the example failed (%s): %s" % (node.describe(), p.stderr))
        self.assertEqual(p.stdout, "holding jobs/nightly with token 1\nv1 1\n")


if __name__ == "__main__":
    unittest.main()
