// Timing of sessions and leases on mocked timers: renewal every TTL/3 from
// the send time, the local deadline, Held/AtRisk/Lost/Released, the signal
// firing at the deadline, fenced writes refused without a request, and
// every term starting with a larger token.
import { test, mock, beforeEach, afterEach } from "node:test";
import assert from "node:assert/strict";
import { FakeCluster, advance, flush, testClock, useTimers } from "./helpers/fake.js";
import { Session, LostError, ReleasedError, StaleTokenError, lifetime, isError, DuplicateError, SessionClosedError } from "../dist/core.js";

let clock, fake;
beforeEach(() => {
  mock.timers.enable({ apis: ["setTimeout", "Date"], now: 100_000 });
  useTimers(mock);
  clock = testClock();
  fake = new FakeCluster(clock);
});
afterEach(() => mock.timers.reset());

const TTL = 3000; // deadline: sent + 3000*0.99 - 300 = sent + 2670; renew every 1000, timeout 500

test("defaults derive from the TTL", () => {
  const s = new Session(fake, { ttlMs: TTL, holder: "a" });
  assert.deepEqual(
    { ...s.config, clock: undefined },
    { holder: "a", ttlMs: 3000, renewIntervalMs: 1000, renewTimeoutMs: 500, drift: 0.01, marginMs: 300, lockDelayMs: 0, priority: 0,
      keepOnHandoffRequest: false, clock: undefined },
  );
  assert.equal(lifetime({ ttlMs: 10_000 }), 8900);
  assert.equal(new Session(fake, { ttlMs: 600 }).config.marginMs, 100);
  assert.throws(() => new Session(fake, { ttlMs: 3000, renewIntervalMs: 2700 }), /not shorter/);
  assert.throws(() => new Session(fake, { drift: 0.6 }), /drift/);
  assert.throws(() => new Session(fake, { lockDelayMs: -1 }), /lockDelayMs/);
  assert.equal(new Session(fake, { lockDelayMs: 5000 }).config.lockDelayMs, 5000);
  assert.throws(() => new Session(fake, { priority: -1 }), /priority/);
});

test("the deadline is the send time + TTL*(1-drift) - margin, and renewals go every TTL/3 from the send time", async () => {
  const s = new Session(fake, { ttlMs: TTL, holder: "a" });
  const start = clock.now();
  const l = await s.tryAcquire("x");
  assert.equal(l.state, "held");
  assert.equal(l.lastRenewal, start);
  assert.equal(l.deadline, start + 2670);
  await advance(3500);
  const renewals = fake.calls.filter((c) => c.op === "renew").map((c) => c.at - start);
  assert.deepEqual(renewals, [1000, 2000, 3000]);
  assert.equal(l.deadline, start + 3000 + 2670);
  assert.equal(l.state, "held");
  assert.equal(l.signal.aborted, false);
  await s.close();
});

test("a lease is at risk after a failed renewal and held again when one succeeds", async () => {
  const s = new Session(fake, { ttlMs: TTL, holder: "a" });
  const l = await s.tryAcquire("x");
  fake.paused = true;
  await advance(1000);
  assert.equal(l.state, "held", "at the send of the renewal");
  await advance(499);
  assert.equal(l.state, "held", "before the renewal timeout");
  const changed = l.changed();
  await advance(1);
  assert.equal(l.state, "at-risk", "at the renewal timeout");
  await changed;
  assert.match(l.err.message, /not confirmed within 500ms/);
  fake.paused = false;
  await advance(100); // retried after the pause (renewIntervalMs/10)
  assert.equal(l.state, "held");
  assert.equal(l.err, undefined);
  await s.close();
});

test("with no renewal confirmed the signal fires exactly at the deadline, before the server could re-grant", async () => {
  const s = new Session(fake, { ttlMs: TTL, holder: "a" });
  const sent = clock.now();
  const l = await s.tryAcquire("x");
  let firedAt;
  l.signal.addEventListener("abort", () => (firedAt = clock.now()));
  fake.paused = true;
  await advance(2669, 1);
  assert.equal(l.signal.aborted, false);
  assert.equal(l.state, "at-risk");
  await advance(1, 1);
  assert.equal(l.signal.aborted, true);
  assert.equal(firedAt, sent + 2670);
  assert.equal(l.state, "lost");
  assert.ok(l.signal.reason instanceof LostError);
  assert.match(l.signal.reason.message, /no renewal confirmed within 2670ms/);
  // The server's expiry is sent + TTL at the earliest: 330ms later.
  assert.ok(firedAt < sent + TTL);
  assert.ok(fake.live("x"), "the server still holds the grant at the local deadline");
  await s.close();
});

test("put and delete refuse without a request once the deadline passed, even before the timer ran", async () => {
  const s = new Session(fake, { ttlMs: TTL, holder: "a" });
  const l = await s.tryAcquire("x");
  await l.put("k", "v1");
  fake.paused = true;
  clock.skew = 2670; // the event loop was blocked: no timer has run
  assert.equal(l.signal.aborted, false);
  await assert.rejects(l.put("k", "v2"), LostError);
  await assert.rejects(l.delete("k"), LostError);
  assert.equal(l.signal.aborted, true);
  assert.equal(fake.count("put"), 1, "no request for the refused writes");
  s.orphan();
});

test("a renewal confirmed after the deadline does not revive the lease", async () => {
  const s = new Session(fake, { ttlMs: TTL, holder: "a" });
  const l = await s.tryAcquire("x");
  await advance(999);
  clock.skew = 1700; // the renewal at 1000 is sent at 2700, past the deadline at 2670
  await advance(1);
  await flush();
  assert.equal(l.state, "lost");
  assert.equal(fake.live("x").token, l.token, "the server did renew");
  s.orphan();
});

test("a grant the server reports gone is lost at once, with the server's error", async () => {
  const s = new Session(fake, { ttlMs: TTL, holder: "a" });
  const l = await s.tryAcquire("x");
  fake.leases.delete("x");
  await advance(1000);
  assert.equal(l.state, "lost");
  assert.ok(isError(l.err, StaleTokenError));
  assert.ok(l.signal.reason instanceof LostError);
  s.orphan();
});

test("release fires the signal before the request is sent", async () => {
  const s = new Session(fake, { ttlMs: TTL, holder: "a" });
  const l = await s.tryAcquire("x");
  let abortedAtSend;
  fake.onRelease = () => (abortedAtSend = l.signal.aborted);
  await l.release();
  assert.equal(abortedAtSend, true);
  assert.equal(l.state, "released");
  assert.ok(l.signal.reason instanceof ReleasedError);
  assert.equal(fake.live("x"), undefined);
  await advance(2000);
  assert.equal(fake.count("renew"), 0, "no renewals after release");
  await s.close();
});

test("a new term after a loss starts with a larger token, releasing the old grant first", async () => {
  const s = new Session(fake, { ttlMs: TTL, holder: "a" });
  const l1 = await s.tryAcquire("x");
  fake.paused = true;
  await advance(2670);
  assert.equal(l1.state, "lost");
  fake.paused = false;
  assert.ok(fake.live("x"), "the server still holds the lost grant");
  const l2 = await s.acquire("x");
  assert.ok(l2.token > l1.token, `token ${l2.token} after ${l1.token}`);
  assert.deepEqual(fake.calls.filter((c) => c.op === "release").map((c) => c.token), [l1.token]);
  await s.close();
});

test("if the old grant could not be released, the renewal of it is released and the session asks again", async () => {
  const s = new Session(fake, { ttlMs: TTL, holder: "a" });
  const l1 = await s.tryAcquire("x");
  fake.paused = true;
  await advance(2670);
  fake.paused = false;
  fake.failRelease = 1; // the first release is lost
  const p = s.acquire("x");
  await advance(200);
  const l2 = await p;
  assert.ok(l2.token > l1.token, `token ${l2.token} after ${l1.token}`);
  const releases = fake.calls.filter((c) => c.op === "release").map((c) => c.token);
  assert.deepEqual(releases, [l1.token, l1.token], "released before asking, and again after the acquire renewed it");
  await s.close();
});

test("a grant after a wait is confirmed with a renewal, and its deadline counts from that", async () => {
  const s = new Session(fake, { ttlMs: TTL, holder: "a" });
  const other = new Session(fake, { ttlMs: TTL, holder: "b" });
  const lb = await other.tryAcquire("x");
  other.orphan(); // b stops renewing: its grant expires on the server at 3000
  const start = clock.now();
  const p = s.acquire("x");
  await advance(3100);
  const l = await p;
  assert.ok(l.token > lb.token);
  const renew = fake.calls.filter((c) => c.op === "renew").at(-1);
  assert.ok(renew.at >= start + 3000, "confirmed after the grant");
  assert.equal(l.lastRenewal, renew.at);
  assert.equal(l.deadline, renew.at + 2670);
  await s.close();
});

test("one session holds a name once; a closed session refuses", async () => {
  const s = new Session(fake, { ttlMs: TTL, holder: "a" });
  await s.tryAcquire("x");
  await assert.rejects(s.tryAcquire("x"), DuplicateError);
  await s.close();
  await assert.rejects(s.tryAcquire("y"), SessionClosedError);
  assert.equal(fake.live("x"), undefined, "close released the lease");
});

test("all leases of a session are renewed in one request", async () => {
  const s = new Session(fake, { ttlMs: TTL, holder: "a" });
  await s.tryAcquire("x");
  await s.tryAcquire("y");
  await advance(1000);
  const renewals = fake.calls.filter((c) => c.op === "renew");
  assert.equal(renewals.length, 1);
  assert.deepEqual(renewals[0].names, ["x", "y"]);
  await s.close();
});
