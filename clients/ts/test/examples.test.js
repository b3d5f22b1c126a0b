// The examples, run as a person would against a real tenured.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { startNode, eventually, pkgDir, spawnGroup, killGroup } from "./helpers/tenured.js";

let node;
const procs = [];
before(async () => {
  node = await startNode();
});
after(async () => {
  for (const p of procs) killGroup(p);
  await node?.kill();
});

function run(script, args = []) {
  const p = spawnGroup(process.execPath, [join(pkgDir, "examples", script), ...args], {
    env: { ...process.env, TENURE_ENDPOINTS: node.api },
    stdio: ["ignore", "pipe", "pipe"],
  });
  procs.push(p);
  p.out = "";
  p.stdout.on("data", (b) => (p.out += b));
  p.stderr.on("data", (b) => (p.out += b));
  p.done = new Promise((r) => p.on("exit", (code) => r(code)));
  return p;
}

test("paused-leader prints the rejected stale write", async (t) => {
  const p = run("paused-leader.mjs");
  const code = await Promise.race([p.done, new Promise((r) => setTimeout(() => r("timeout"), 30_000))]);
  for (const line of p.out.trimEnd().split("\n")) t.diagnostic(line);
  assert.equal(code, 0, p.out);
  assert.match(p.out, /A\s+lease\.put report = "A-2"\s+\d+\s+refused locally: the lease is lost/);
  assert.match(p.out, /A\s+put report = "A-2"\s+\d+\s+REJECTED: stale token/);
  assert.match(p.out, /check\s+read report = "B-1"\s+\d+\s+B's write kept/);
});

test("leader-worker leads, writes its heartbeat and steps down on SIGTERM", async () => {
  const p = run("leader-worker.mjs", ["worker-1"]);
  await eventually("worker-1 to lead", 15_000, async () => assert.match(p.out, /worker-1: leading with token \d+/));
  await eventually("a heartbeat in the store", 5000, async () => {
    const r = await fetch(`http://${node.api}/tenure.v1.KVService/Get`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ key: "examples/worker/heartbeat" }),
    });
    assert.equal(r.status, 200, await r.text());
  });
  p.kill("SIGTERM");
  assert.equal(await p.done, 0, p.out);
  assert.match(p.out, /worker-1: stepped down/);
  assert.match(p.out, /worker-1: done/);
});

// Every code block of README.md marked <!-- example: examples/NAME --> is
// a verbatim excerpt of that example, which the tests run, so the README
// cannot drift from code that works.
test("README.md quotes the examples verbatim", async () => {
  const md = readFileSync(join(pkgDir, "README.md"), "utf8");
  const re = /<!-- example: (examples\/[\w.-]+) -->\n```\w*\n([\s\S]*?)\n```\n/g;
  const quoted = [];
  for (const [, file, block] of md.matchAll(re)) {
    const src = readFileSync(join(pkgDir, file), "utf8");
    assert.ok(src.includes(`${block}\n`), `README.md's block marked ${file} is not a verbatim excerpt of it:\n${block}`);
    quoted.push(file);
  }
  const markers = md.match(/<!-- example: /g)?.length ?? 0;
  assert.equal(quoted.length, markers, "every example marker is followed by a code block");
  // secure.test.js runs secured-counter.mjs: TLS, bearer token, client certificate, lease.update.
  assert.deepEqual(quoted, ["examples/secured-counter.mjs", "examples/secured-counter.mjs"]);
});
