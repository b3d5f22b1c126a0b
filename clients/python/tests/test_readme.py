"""The README's examples: the runnable ones run as written against a real
tenured (with only the names their text defines supplied), and the
reference listing of the client's calls is checked against the package's
API, so that neither can drift from the code."""

import ast
import inspect
import json
import os
import re
import subprocess
import sys
import unittest

import helpers
import tenure

README = os.path.join(helpers.PKG_DIR, "README.md")


def python_blocks(path):
    """python_blocks returns the README's python blocks as (heading, code)."""
    with open(path) as f:
        text = f.read()
    blocks = []
    heading = ""
    for m in re.finditer(r"^(#{1,6}) ([^\n]*)$|^```(\w*)\n(.*?)^```$", text, re.S | re.M):
        if m.group(1):
            heading = m.group(2).strip()
        elif m.group(3) == "python":
            blocks.append((heading, m.group(4)))
    return blocks


def block_under(heading):
    found = [code for h, code in python_blocks(README) if h == heading]
    if len(found) != 1:
        raise AssertionError("%d python blocks under the heading %r in %s, want 1" % (len(found), heading, README))
    return found[0]


def run_python(code, node, timeout=60):
    env = dict(os.environ, TENURE_ENDPOINTS=node.api,
               PYTHONPATH=helpers.SRC_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)


class ReadmeTest(unittest.TestCase):
    def test_every_block_is_checked(self):
        # A new python block needs a test here, or a place in this list.
        self.assertEqual([h for h, _ in python_blocks(README)],
                         ["Hold a lease and write under it", "Leader election", "The client",
                          "Revocation and lock-delay"])

    def test_example_runs(self):
        node = helpers.Node("n1").start()
        self.addCleanup(node.stop)
        p = run_python(block_under("Hold a lease and write under it"), node)
        if p.returncode != 0:
            helpers.keep_dirs()
        self.assertEqual(p.returncode, 0, "the example failed (%s): %s" % (node.describe(), p.stderr))
        self.assertEqual(p.stdout, "holding jobs/nightly with token 1\nv1 1\n")

    def test_leader_election_runs(self):
        # The block as written, with what its text leaves to the reader:
        # the client of the first example, and the leader's work, which
        # records the token and sets stop (as a signal handler would)
        # on its second round.
        prelude = (
            "import os, threading, tenure\n"
            "client = tenure.Client(os.environ['TENURE_ENDPOINTS'].split(','))\n"
            "tokens = []\n"
            "def do_leader_work(token):\n"
            "    tokens.append(token)\n"
            "    if len(tokens) == 2:\n"
            "        stop.set()\n"
        )
        epilogue = (
            "import json\n"
            "try:\n"
            "    client.get('svc/scheduler')\n"
            "    held = True\n"
            "except tenure.NotFoundError:\n"
            "    held = False\n"
            "print(json.dumps({'tokens': tokens, 'held_after': held}))\n"
        )
        node = helpers.Node("n1").start()
        self.addCleanup(node.stop)
        p = run_python(prelude + block_under("Leader election") + epilogue, node)
        if p.returncode != 0:
            helpers.keep_dirs()
        self.assertEqual(p.returncode, 0, "the example failed (%s): %s" % (node.describe(), p.stderr))
        got = json.loads(p.stdout)
        # It led (one term: both rounds with the same token), stepped down
        # when stop was set, and released the lease on the way out.
        self.assertEqual(len(got["tokens"]), 2, p.stdout)
        self.assertEqual(got["tokens"][0], got["tokens"][1], p.stdout)
        self.assertGreater(got["tokens"][0], 0, p.stdout)
        self.assertFalse(got["held_after"], "the lease is still held after elect returned: %s" % p.stdout)

    def test_revocation_runs(self):
        # The block as written, with the names its text leaves to the
        # reader: the endpoints, and no token (the test's tenured
        # authenticates nobody, so anyone may revoke).
        prelude = ("import os, tenure\n"
                   "endpoints = os.environ['TENURE_ENDPOINTS'].split(',')\n"
                   "admin_token = None\n")
        node = helpers.Node("n1").start()
        self.addCleanup(node.stop)
        p = run_python(prelude + block_under("Revocation and lock-delay"), node)
        if p.returncode != 0:
            helpers.keep_dirs()
        self.assertEqual(p.returncode, 0, "the example failed (%s): %s" % (node.describe(), p.stderr))
        self.assertEqual(p.stdout, "revoked worker-1 1\nrenewal refused: stuck on a bad disk\nlock-delay: True 15\n")

    def test_client_listing_matches_the_api(self):
        # "The client" lists the calls against a three-member cluster with
        # TLS; it is a reference, not a program (a second acquire waits for
        # the first, the watch loops forever), so it is not run: it must
        # compile, and every call on the client or the module must exist
        # and accept the arguments it is given.
        code = block_under("The client")
        tree = ast.parse(code)
        compile(tree, "README.md", "exec")
        checked = []
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            owner = node.func.value
            if not isinstance(owner, ast.Name) or owner.id not in ("c", "tenure"):
                continue
            name = node.func.attr
            if owner.id == "tenure":
                self.assertTrue(hasattr(tenure, name), "tenure.%s is not in the package" % name)
                target = getattr(tenure, name)
                args = [None] * len(node.args)
            else:
                self.assertTrue(hasattr(tenure.Client, name), "Client.%s is not a method of tenure.Client" % name)
                target = getattr(tenure.Client, name)
                args = [None] * (1 + len(node.args))  # self
            sig = inspect.signature(target)
            try:
                sig.bind(*args, **{k.arg: None for k in node.keywords if k.arg is not None})
            except TypeError as e:
                self.fail("%s.%s%s in README.md does not fit %s%s: %s"
                          % (owner.id, name, ast.unparse(node)[len(owner.id) + 1 + len(name):], name, sig, e))
            checked.append(name)
        for name in ("Client", "acquire", "renew", "release", "get", "slots", "list", "status",
                     "transfer_leadership", "put", "kv_get", "kv_list", "delete", "watch"):
            self.assertIn(name, checked, "the listing no longer calls %s" % name)

    def test_error_table_names_the_errors(self):
        # The table of errors names only errors of the package, and every
        # one it exports.
        with open(README) as f:
            text = f.read()
        section = text[text.index("### Errors"):text.index("## Tests")]
        names = re.findall(r"`(\w+Error)`", section)
        for name in names:
            self.assertTrue(hasattr(tenure, name), "README.md's table names tenure.%s, which does not exist" % name)
            self.assertTrue(issubclass(getattr(tenure, name), tenure.TenureError), name)
        exported = {n for n in tenure.__all__ if n.endswith("Error") and n != "TenureError"}
        self.assertEqual(exported - set(names), set(), "errors the package exports and README.md's table omits")


if __name__ == "__main__":
    unittest.main()
