// A paused server (SIGSTOP): renewals go unanswered, the lease turns
// at-risk, then lost, and its signal fires before the server could expire
// the lease and grant it to anyone else. After SIGCONT another holder gets
// a larger token and the paused holder's late write is refused.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { startNode, eventually } from "./helpers/tenured.js";
import { createClient, LostError, StaleTokenError } from "../dist/node.js";

let node;
after(async () => {
  await node?.kill();
});

test("a paused server makes the lease at-risk, then lost, with the signal firing before the server could re-grant", async (t) => {
  node = await startNode();
  const TTL = 3000; // local deadline: last send + 2970 - 300 = last send + 2670
  const c = createClient({ endpoints: [node.api] });
  const s = c.session({ ttlMs: TTL, holder: "a" });
  const l = await s.acquire("paused/x");
  await l.put("paused/x/data", "a-1");
  const transitions = [];
  (async () => {
    for (;;) {
      await l.changed();
      transitions.push([l.state, performance.now()]);
      if (l.state === "lost" || l.state === "released") return;
    }
  })();
  let firedAt;
  l.signal.addEventListener("abort", () => (firedAt = performance.now()));

  node.pause();
  const pausedAt = performance.now();
  try {
    await eventually("the lease's signal to fire while the server is paused", 2 * TTL, async () => {
      assert.ok(l.signal.aborted, `state ${l.state}`);
    }, 10);
  } finally {
    // The server stays paused past the TTL, so its expiry is due at once.
    const left = pausedAt + TTL + 300 - performance.now();
    if (left > 0) await new Promise((r) => setTimeout(r, left));
    node.resume();
  }
  const lastSent = l.lastRenewal;
  t.diagnostic(`transitions after the pause (ms since the last confirmed send): ${transitions.map(([st, at]) => `${st} +${Math.round(at - lastSent)}`).join(", ")}`);
  assert.deepEqual(transitions.map(([st]) => st), ["at-risk", "lost"]);
  assert.ok(l.signal.reason instanceof LostError);
  assert.equal(l.state, "lost");
  // The server cannot expire the grant before lastSent + TTL on its clock.
  assert.ok(firedAt < lastSent + TTL, `signal at +${firedAt - lastSent}ms, server expiry at +${TTL}ms at the earliest`);
  assert.ok(firedAt >= l.deadline, "not before the deadline");
  assert.ok(transitions[0][1] < firedAt);

  // Another holder is granted the lease, with a larger token.
  const b = await eventually("a grant to b after the server resumed", 10_000, () =>
    c.acquire("paused/x", "b", TTL, { wait: true, waitTimeoutMs: 5000 }));
  assert.ok(b.token > l.token);
  await c.put("paused/x/data", "b-1", "paused/x", b.token);

  // a's lease refuses locally; its token is refused by the store.
  await assert.rejects(l.put("paused/x/data", "a-2"), LostError);
  const err = await c.put("paused/x/data", "a-2", "paused/x", l.token).catch((e) => e);
  assert.ok(err instanceof StaleTokenError, `got ${err}`);
  const kv = await c.kvGet("paused/x/data");
  assert.equal(new TextDecoder().decode(kv.value), "b-1");
  await s.close();
  await c.release("paused/x", b.token);
  c.close();
});
