// Against one real tenured process: acquire, renew, release, typed errors,
// fencing, sessions, watch, observe and runElection, over each protocol.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startNode } from "./helpers/tenured.js";
import {
  createClient, LeaseHeldError, StaleTokenError, NotFoundError, InvalidArgumentError, ReleasedError, isError,
} from "../dist/node.js";
import { createClient as createWebClient } from "../dist/web.js";

let node;
before(async () => {
  node = await startNode();
});
after(async () => {
  await node?.kill();
});

const TTL = 2000;

for (const [label, make] of [
  ["grpc (node)", () => createClient({ endpoints: [node.api] })],
  ["connect (node)", () => createClient({ endpoints: [node.api], protocol: "connect" })],
  ["grpc-web (node)", () => createClient({ endpoints: [node.api], protocol: "grpc-web" })],
  ["connect (web, fetch)", () => createWebClient({ endpoints: [node.api] })],
  ["grpc-web (web, fetch)", () => createWebClient({ endpoints: [node.api], protocol: "grpc-web" })],
]) {
  test(`acquire, renew, release and typed errors over ${label}`, async () => {
    const c = make();
    const name = `basic/${label}`;
    const a = await c.acquire(name, "a", TTL);
    assert.equal(a.holder, "a");
    assert.equal(a.ttlMs, TTL);
    assert.ok(a.token > 0n);
    assert.ok(a.sentAt > 0);

    const held = await c.acquire(name, "b", TTL).catch((e) => e);
    assert.ok(held instanceof LeaseHeldError, `got ${held}`);
    assert.deepEqual([held.lease, held.holder, held.token], [name, "a", a.token]);
    assert.ok(held.remainingMs > 0 && held.remainingMs <= TTL);

    const again = await c.acquire(name, "a", TTL);
    assert.equal(again.token, a.token, "acquire by the holder renews with the same token");
    const renewed = await c.renewOne(name, a.token);
    assert.equal(renewed.token, a.token);
    assert.equal((await c.get(name)).holder, "a");
    assert.deepEqual((await c.list("basic/")).map((l) => l.name).includes(name), true);

    await c.put(`${name}/k`, "v1", name, a.token);
    const kv = await c.kvGet(`${name}/k`);
    assert.equal(new TextDecoder().decode(kv.value), "v1");
    assert.equal(kv.token, a.token);

    await c.release(name, a.token);
    await assert.rejects(c.get(name), NotFoundError);
    await assert.rejects(c.release(name, a.token), StaleTokenError);
    const [r] = await c.renew([{ name, token: a.token }]);
    assert.ok(r.err instanceof StaleTokenError, `renew result: ${r.err}`);
    await assert.rejects(c.acquire("", "a", TTL), InvalidArgumentError);
    await assert.rejects(c.acquire(name, "a", 10), InvalidArgumentError, "below the minimum TTL");

    const b = await c.acquire(name, "b", TTL);
    assert.ok(b.token > a.token);
    c.close();
  });
}

test("the fenced store refuses a write with an old token after a new grant", async () => {
  const c = createClient({ endpoints: [node.api] });
  const a = await c.acquire("fence/x", "a", TTL);
  await c.put("fence/x/data", "a", "fence/x", a.token);
  await c.release("fence/x", a.token);
  const b = await c.acquire("fence/x", "b", TTL);
  await c.put("fence/x/data", "b", "fence/x", b.token);
  const err = await c.put("fence/x/data", "a late", "fence/x", a.token).catch((e) => e);
  assert.ok(err instanceof StaleTokenError, `got ${err}`);
  await assert.rejects(c.delete("fence/x/data", "fence/x", a.token), StaleTokenError);
  const kv = await c.kvGet("fence/x/data");
  assert.equal(new TextDecoder().decode(kv.value), "b");
  assert.equal(kv.token, b.token);
  c.close();
});

test("a session renews its lease past the TTL and release frees it for a waiter at once", async () => {
  const c = createClient({ endpoints: [node.api] });
  const s = c.session({ ttlMs: TTL, holder: "s1" });
  const l = await s.acquire("session/x");
  await l.put("session/x/k", "v");
  // Past the TTL: renewed, same token.
  await new Promise((r) => setTimeout(r, TTL + 300));
  assert.equal(l.state, "held");
  assert.equal((await c.get("session/x")).token, l.token);
  assert.ok(l.deadline > l.lastRenewal);

  const s2 = c.session({ ttlMs: TTL, holder: "s2" });
  const waiting = s2.acquire("session/x");
  const t0 = performance.now();
  await l.release();
  assert.ok(l.signal.reason instanceof ReleasedError);
  const l2 = await waiting;
  assert.ok(performance.now() - t0 < 1000, "the waiter is granted at release");
  assert.ok(l2.token > l.token);
  await assert.rejects(l.put("session/x/k", "late"), ReleasedError, "the released lease refuses without a request");
  await s.close();
  await s2.close();
  await assert.rejects(c.get("session/x"), NotFoundError);
  c.close();
});

test("watch sends the current state, then grants, releases and expiries in order", async () => {
  const c = createClient({ endpoints: [node.api] });
  const first = await c.acquire("watched/1", "a", TTL);
  const ac = new AbortController();
  const w = await c.watch("watched/", { signal: ac.signal });
  const second = await c.acquire("watched/2", "b", TTL);
  await c.release("watched/1", first.token);
  const events = [];
  for await (const ev of w) {
    events.push([ev.type, ev.lease?.name, ev.lease?.token]);
    if (events.length === 5) break;
  }
  assert.deepEqual(events, [
    ["current", "watched/1", first.token],
    ["synced", undefined, undefined],
    ["granted", "watched/2", second.token],
    ["released", "watched/1", first.token],
    ["expired", "watched/2", second.token],
  ]);
  ac.abort();
  c.close();
});

test("observe reports each new leader with its token; runElection returns fn's result and releases", async () => {
  const c = createClient({ endpoints: [node.api] });
  const ac = new AbortController();
  const leaders = c.observe("primary", { signal: ac.signal });
  await leaders.ready;
  const tokens = [];
  for (const holder of ["db-1", "db-2"]) {
    const out = await c.runElection("primary", async (signal, lease) => {
      assert.equal(signal.aborted, false);
      tokens.push(lease.token);
      return `${holder} led`;
    }, { session: { ttlMs: TTL, holder } });
    assert.equal(out, `${holder} led`);
  }
  const seen = [];
  for await (const ld of leaders) {
    seen.push([ld.holder, ld.token]);
    if (seen.length === 2) break;
  }
  assert.deepEqual(seen, [["db-1", tokens[0]], ["db-2", tokens[1]]]);
  await assert.rejects(c.get("primary"), NotFoundError, "runElection released the lease");
  const err = await c.runElection("primary", async () => { throw new Error("job failed"); }, { session: { ttlMs: TTL } }).catch((e) => e);
  assert.equal(err.message, "job failed");
  ac.abort();
  c.close();
});

test("a second session cannot take a held lease; tryAcquire says who holds it", async () => {
  const c = createClient({ endpoints: [node.api] });
  const s1 = c.session({ ttlMs: TTL, holder: "one" });
  const s2 = c.session({ ttlMs: TTL, holder: "two" });
  const l = await s1.tryAcquire("try/x");
  const err = await s2.tryAcquire("try/x").catch((e) => e);
  assert.ok(isError(err, LeaseHeldError) && err.holder === "one" && err.token === l.token, `got ${err}`);
  await s1.close();
  await s2.close();
  c.close();
});
