"""The package builds into a wheel offline, installs from it, and its
sources parse as Python 3.9."""

import ast
import base64
import glob
import hashlib
import os
import subprocess
import sys
import unittest
import zipfile

import helpers


class PackTest(unittest.TestCase):
    def test_wheel_builds_offline_and_installs(self):
        out = helpers.temp_dir("tenure-py-wheel-")
        p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                            "--no-index", "-w", out, helpers.PKG_DIR], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, "pip wheel failed: %s%s" % (p.stdout, p.stderr))
        wheels = glob.glob(os.path.join(out, "tenure-*-py3-none-any.whl"))
        self.assertEqual(len(wheels), 1, os.listdir(out))
        with zipfile.ZipFile(wheels[0]) as z:
            names = z.namelist()
            for mod in ["__init__", "client", "session", "election", "errors", "_wire"]:
                self.assertIn("tenure/%s.py" % mod, names)
            record = [n for n in names if n.endswith(".dist-info/RECORD")][0]
            for line in z.read(record).decode().splitlines():
                path, digest, size = line.rsplit(",", 2)
                if not digest:
                    continue
                data = z.read(path)
                want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                self.assertEqual((digest, int(size)), (want, len(data)), "RECORD entry of " + path)
            meta = z.read([n for n in names if n.endswith(".dist-info/METADATA")][0]).decode()
            self.assertIn("Requires-Python: >=3.9", meta)
        target = helpers.temp_dir("tenure-py-site-")
        p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", target,
                            wheels[0]], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, "pip install failed: %s%s" % (p.stdout, p.stderr))
        p = subprocess.run([sys.executable, "-c", "import tenure; print(tenure.__file__)"],
                           env=dict(os.environ, PYTHONPATH=target), capture_output=True, text=True, cwd=target)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(p.stdout.strip().startswith(target), p.stdout)

    def test_sources_parse_as_python_3_9(self):
        files = glob.glob(os.path.join(helpers.SRC_DIR, "tenure", "*.py"))
        files += glob.glob(os.path.join(helpers.PKG_DIR, "_build", "*.py"))
        files += glob.glob(os.path.join(helpers.PKG_DIR, "examples", "*.py"))
        self.assertGreater(len(files), 6)
        for f in files:
            with self.subTest(file=os.path.basename(f)), open(f) as fh:
                ast.parse(fh.read(), f, feature_version=(3, 9))


if __name__ == "__main__":
    unittest.main()
