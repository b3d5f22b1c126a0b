// Revocation by an operator and lock-delays, against one real tenured
// process.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startNode, eventually } from "./helpers/tenured.js";
import {
  createClient, LeaseHeldError, StaleTokenError, RevokedError, NotFoundError, InvalidArgumentError, LostError, isError, findError,
} from "../dist/node.js";

let node;
before(async () => {
  node = await startNode();
});
after(async () => {
  await node?.kill();
});

const TTL = 2000;

/** queued waits until holder waits for name (the dashboard's history
 * lists the waiters). */
async function queued(name, holder) {
  await eventually(`${holder} to wait for ${name}`, 10_000, async () => {
    const res = await fetch(`http://${node.api}/ui/api/history?name=${encodeURIComponent(name)}`).then((r) => r.json());
    if (!res.waiters?.includes(holder)) throw new Error(`waiters ${res.waiters}`);
  });
}

test("revoke ends a grant; the holder's renewal and writes fail with the reason; the waiter gets a larger token", async () => {
  const c = createClient({ endpoints: [node.api] });
  const a = await c.acquire("rv/x", "a", 30_000);
  await c.put("rv/x/k", "v1", "rv/x", a.token);
  const ac = new AbortController();
  const w = await c.watch("rv/", { signal: ac.signal });
  const waiting = c.acquire("rv/x", "w", TTL, { wait: true, waitTimeoutMs: 30_000 });
  await queued("rv/x", "w");

  // Bad requests change nothing.
  await assert.rejects(c.revoke("rv/x", 0n, ""), InvalidArgumentError, "a reason is required");
  await assert.rejects(c.revoke("rv/x", 0n, "x".repeat(300)), InvalidArgumentError, "the reason is bounded");
  await assert.rejects(c.revoke("rv/none", 0n, "r"), NotFoundError, "a name not held");
  await assert.rejects(c.revoke("rv/x", a.token + 100n, "r"), NotFoundError, "another token");
  assert.equal((await c.get("rv/x")).token, a.token);

  const revoked = await c.revoke("rv/x", 0n, "disk failing on a");
  assert.deepEqual(revoked.map((l) => [l.name, l.holder, l.token]), [["rv/x", "a", a.token]]);
  const g = await waiting;
  assert.equal(g.holder, "w");
  assert.ok(g.token > a.token, "the next grant's token is larger");

  const [r] = await c.renew([{ name: "rv/x", token: a.token }]);
  assert.ok(r.err instanceof RevokedError && r.err instanceof StaleTokenError, `renew result: ${r.err}`);
  assert.deepEqual([r.err.lease, r.err.token, r.err.reason], ["rv/x", a.token, "disk failing on a"]);
  assert.match(r.err.message, /revoked by an operator: disk failing on a/);
  const perr = await c.put("rv/x/k", "late", "rv/x", a.token).catch((e) => e);
  assert.ok(perr instanceof RevokedError && perr.reason === "disk failing on a", `put: ${perr}`);
  assert.equal(new TextDecoder().decode((await c.kvGet("rv/x/k")).value), "v1");

  const events = [];
  for await (const ev of w) {
    events.push([ev.type, ev.lease?.holder, ev.reason]);
    if (ev.type === "granted" && ev.lease?.holder === "w") break;
  }
  assert.deepEqual(events.filter((e) => e[0] === "revoked" || e[0] === "granted"), [
    ["revoked", "a", "disk failing on a"],
    ["granted", "w", undefined],
  ]);
  ac.abort();
  c.close();
});

test("a session's lease ends at its next renewal when revoked, with a LostError that says why", async () => {
  const c = createClient({ endpoints: [node.api] });
  const s = c.session({ ttlMs: 3000, holder: "leader", lockDelayMs: 3000 });
  const l = await s.acquire("rv/leader");
  assert.equal((await c.get("rv/leader")).lockDelayMs, 3000);
  const ended = new Promise((resolve) => l.signal.addEventListener("abort", () => resolve(performance.now()), { once: true }));
  await c.revoke("rv/leader", l.token, "moving to a new host");
  const at = await ended;
  assert.equal(l.state, "lost");
  const lost = l.signal.reason;
  assert.ok(lost instanceof LostError, `reason ${lost}`);
  assert.equal(lost.reason, "revoked by an operator (moving to a new host)");
  const re = findError(lost, RevokedError);
  assert.ok(re !== undefined && re.token === l.token && re.reason === "moving to a new host", `cause ${lost.cause}`);
  assert.ok(isError(lost, StaleTokenError));
  assert.ok(at < l.deadline, "stepped down at the next renewal, before the local deadline");
  await s.close();
  c.close();
});

test("a lock-delay holds the name after the grant expires, counted from the expiry; a release skips it", async () => {
  const c = createClient({ endpoints: [node.api] });
  // a never renews: its grant expires after the TTL.
  const a = await c.acquire("ld/x", "a", TTL, { lockDelayMs: 3000 });
  assert.equal(a.lockDelayMs, 3000);
  const waiting = c.acquire("ld/x", "w", TTL, { wait: true, waitTimeoutMs: 30_000 });
  let delayed;
  await eventually("the lock-delay", 20_000, async () => {
    const err = await c.acquire("ld/x", "b", TTL).catch((e) => e);
    if (!(err instanceof LeaseHeldError)) throw new Error(`try: ${err}`);
    if (!err.lockDelay) throw new Error("held by a, not yet expired");
    delayed = err;
  }, 20);
  assert.equal(delayed.holder, "a");
  assert.equal(delayed.token, a.token);
  assert.ok(Math.abs(delayed.endedMs + delayed.remainingMs - 3000) < 1e-6,
    `ended ${delayed.endedMs}ms ago + ${delayed.remainingMs}ms left: the delay counts from the expiry`);
  assert.match(delayed.message, /lock-delay/);
  const g = await waiting;
  assert.equal(g.holder, "w");
  assert.ok(g.token > a.token);

  // A release skips it.
  const b = await c.acquire("ld/y", "b", 30_000, { lockDelayMs: 60_000 });
  const w2 = c.acquire("ld/y", "w2", TTL, { wait: true, waitTimeoutMs: 30_000 });
  await queued("ld/y", "w2");
  await c.release("ld/y", b.token);
  assert.equal((await w2).holder, "w2");

  await assert.rejects(c.acquire("ld/z", "a", TTL, { lockDelayMs: 61_000 }), InvalidArgumentError, "above the bound");
  await assert.rejects(c.get("ld/z"), NotFoundError);
  c.close();
});
