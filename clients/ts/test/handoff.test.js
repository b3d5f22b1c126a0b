// Handoff of a grant to a waiting candidate, and priorities, against one
// real tenured process.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startNode, eventually } from "./helpers/tenured.js";
import { createClient, StaleTokenError, NotFoundError, InvalidArgumentError } from "../dist/node.js";

let node;
before(async () => {
  node = await startNode();
});
after(async () => {
  await node?.kill();
});

/** history reads the dashboard's history of name: terms oldest first,
 * and the waiters. */
async function history(name) {
  return fetch(`http://${node.api}/ui/api/history?name=${encodeURIComponent(name)}`).then((r) => r.json());
}

async function queued(name, holder) {
  await eventually(`${holder} to wait for ${name}`, 10_000, async () => {
    const res = await history(name);
    if (!res.waiters?.includes(holder)) throw new Error(`waiters ${res.waiters}`);
  });
}

test("handoff grants a named waiter, or the first in line, at the cluster time the old term ends", async () => {
  const c = createClient({ endpoints: [node.api] });
  const a = await c.acquire("ho/x", "a", 30_000);
  const waitB = c.acquire("ho/x", "b", 30_000, { wait: true, waitTimeoutMs: 30_000 });
  await queued("ho/x", "b");
  const waitC = c.acquire("ho/x", "c", 30_000, { wait: true, waitTimeoutMs: 30_000 });
  await queued("ho/x", "c");

  // Refusals change nothing.
  await assert.rejects(c.handoff("ho/x", a.token, "nobody"), NotFoundError, "a candidate that is not waiting");
  await assert.rejects(c.handoff("ho/x", a.token + 100n, "c"), StaleTokenError, "a stale token");
  assert.equal((await c.get("ho/x")).token, a.token);

  const toC = await c.handoff("ho/x", a.token, "c");
  assert.equal(toC.holder, "c");
  assert.ok(toC.token > a.token, "the new grant's token is larger");
  const gc = await waitC;
  assert.deepEqual([gc.holder, gc.token], ["c", toC.token], "c's waiting acquire returns the grant");
  const h = await history("ho/x");
  assert.equal(h.terms.length, 2);
  assert.deepEqual([h.terms[0].holder, h.terms[0].ended], ["a", "handed_off"]);
  assert.equal(h.terms[0].end, h.terms[1].start, "no gap, no overlap");
  const [r] = await c.renew([{ name: "ho/x", token: a.token }]);
  assert.ok(r.err instanceof StaleTokenError, "the old token is dead");

  const toB = await c.handoff("ho/x", toC.token);
  assert.equal(toB.holder, "b", "the first in line");
  assert.equal((await waitB).token, toB.token);
  await assert.rejects(c.handoff("ho/x", toB.token), NotFoundError, "nobody waits");
  c.close?.();
});

test("a waiter of a higher priority asks the holder to hand over at its renewal", async () => {
  const c = createClient({ endpoints: [node.api] });
  const low = await c.acquire("ho/p", "low", 30_000, { priority: 1 });
  assert.equal(low.priority, 1);
  const [r0] = await c.renew([low]);
  assert.equal(r0.handoffRequested, "");
  const waitHigh = c.acquire("ho/p", "high", 30_000, { wait: true, waitTimeoutMs: 30_000, priority: 7 });
  await queued("ho/p", "high");
  const [r1] = await c.renew([low]);
  assert.equal(r1.handoffRequested, "high");
  await c.handoff("ho/p", low.token, r1.handoffRequested);
  const high = await waitHigh;
  assert.deepEqual([high.holder, high.priority], ["high", 7]);
  await assert.rejects(c.acquire("ho/q", "h", 30_000, { priority: 2_000_000 }), InvalidArgumentError, "priority out of range");
  c.close?.();
});

test("a session's lease hands off: its signal fires first, then the candidate's campaign resolves; a higher priority asks and gets it", async () => {
  const { Session, HandedOffError, ReleasedError } = await import("../dist/node.js");
  const c = createClient({ endpoints: [node.api] });
  const a = new Session(c, { holder: "a", ttlMs: 3000 });
  const b = new Session(c, { holder: "b", ttlMs: 3000 });
  const la = await a.campaign("ho/s");
  const campaignB = b.campaign("ho/s");
  await queued("ho/s", "b");
  let abortedFirst = false;
  const next = await la.handoff();
  campaignB.then(() => { abortedFirst = la.signal.aborted; });
  const lb = await campaignB;
  await Promise.resolve();
  assert.ok(abortedFirst && la.signal.reason instanceof HandedOffError && la.signal.reason instanceof ReleasedError);
  assert.deepEqual([next.holder, next.token], ["b", lb.token]);
  assert.ok(lb.token > la.token);
  await assert.rejects(la.handoff(), HandedOffError, "a second handoff of the ended term");

  // A session of a higher priority asks b to hand over; b's session does
  // at its next renewal.
  const h = new Session(c, { holder: "h", ttlMs: 3000, priority: 9 });
  const lh = await h.campaign("ho/s");
  assert.ok(lb.signal.aborted && lb.signal.reason instanceof HandedOffError, `b's lease: ${lb.signal.reason}`);
  assert.ok(lh.token > lb.token);
  await Promise.all([a.close(), b.close(), h.close()]);
});
