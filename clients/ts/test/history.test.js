// The lease history (Client.history), against one real tenured process
// that is restarted in between: the terms survive it.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startNode, eventually } from "./helpers/tenured.js";
import { createClient, NotFoundError, StaleTokenError, InvalidArgumentError } from "../dist/node.js";

let node;
before(async () => {
  node = await startNode();
});
after(async () => {
  await node?.kill();
});

const shape = (terms) => terms.map((t) => [t.holder, t.token, t.ending, t.reason, t.writesAccepted, t.writesRefused]);

test("history shows every term with its token, ending and writes, also after a restart", async () => {
  const n = "ts/history";
  const before = Date.now();
  let c = createClient({ endpoints: [node.api] });
  const a = await c.acquire(n, "a", 30_000);
  await c.put(`${n}/k`, "v1", n, a.token);
  await c.release(n, a.token);
  const b = await c.acquire(n, "b", 2000);
  await eventually("b's grant to expire", 10_000, async () => {
    await assert.rejects(c.get(n), NotFoundError);
  });
  await assert.rejects(c.put(`${n}/k`, "late", n, b.token), StaleTokenError);
  const d = await c.acquire(n, "d", 60_000);
  await c.revoke(n, 0n, "moving hosts");
  const e = await c.acquire(n, "e", 60_000);
  const want = [
    ["e", e.token, "held", "", 0n, 0n],
    ["d", d.token, "revoked", "moving hosts", 0n, 0n],
    ["b", b.token, "expired", "", 0n, 1n],
    ["a", a.token, "released", "", 1n, 0n],
  ];
  const terms = await c.history(n);
  assert.deepEqual(shape(terms), want, `history (tenured at ${node.api})`);
  for (const t of terms) {
    assert.equal(t.name, n);
    assert.ok(t.start instanceof Date && t.start.getTime() >= before - 5000, `a recent wall-clock start: ${t.start}`);
    assert.equal(t.end === undefined, t.ending === "held", "an end unless held");
  }
  assert.ok(terms[1].clusterEndMs > terms[1].clusterStartMs);
  c.close();

  // The history is replicated state: it survives a restart.
  await node.kill();
  await node.start();
  await node.waitReady();
  c = createClient({ endpoints: [node.api] });
  assert.deepEqual(shape(await c.history(n)), want, "history after a restart");
  assert.deepEqual(shape(await c.history(n, { limit: 2 })), want.slice(0, 2), "limit 2");
  assert.deepEqual(shape(await c.history(n, { since: terms[1].end })), want.slice(0, 2), "since d's end");
  assert.deepEqual(await c.history("ts/never"), []);
  await assert.rejects(c.history(""), InvalidArgumentError);
  c.close();
});
