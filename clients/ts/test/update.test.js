// The fenced read-modify-write of the built-in store (client.update and
// lease.update) against a real tenured.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startNode } from "./helpers/tenured.js";
import { createClient, StaleTokenError } from "../dist/node.js";

let node;
let c;
before(async () => {
  node = await startNode();
  c = createClient({ endpoints: [node.api] });
});
after(async () => {
  c?.close();
  await node?.kill();
});

// Long enough that a loaded machine does not expire the grants mid-test.
const TTL = 10_000;
const text = (kv) => new TextDecoder().decode(kv.value);

test("update reads, computes and writes with the grant's token", async () => {
  const g = await c.acquire("upd/counter", "a", TTL);
  const seen = [];
  for (let i = 0; i < 3; i++) {
    const w = await c.update("upd/counter/n", "upd/counter", g.token, (cur) => {
      seen.push(cur === undefined ? undefined : text(cur));
      return String(cur === undefined ? 1 : Number(text(cur)) + 1);
    });
    assert.equal(w.token, g.token);
    assert.equal(w.lease, "upd/counter");
  }
  assert.deepEqual(seen, [undefined, "1", "2"]);
  const kv = await c.kvGet("upd/counter/n");
  assert.equal(text(kv), "3");
  assert.equal(await c.update("upd/counter/n", "upd/counter", g.token, () => undefined), undefined, "undefined writes nothing");
  assert.equal((await c.kvGet("upd/counter/n")).revision, kv.revision);
  await c.release("upd/counter", g.token);
});

test("a late holder's update never computes on the next holder's value, and writes nothing", async () => {
  const a = await c.acquire("upd/late", "a", TTL);
  await c.update("upd/late/v", "upd/late", a.token, () => "A-1");
  await c.release("upd/late", a.token); // as if A's lease had expired while it was paused
  const b = await c.acquire("upd/late", "b", TTL);
  await c.update("upd/late/v", "upd/late", b.token, (cur) => `${text(cur)}+B`);
  let called = false;
  const err = await c.update("upd/late/v", "upd/late", a.token, () => {
    called = true;
    return "A-2";
  }).catch((e) => e);
  assert.ok(err instanceof StaleTokenError, `got ${err}`);
  assert.match(err.message, new RegExp(`written by token ${b.token}`));
  assert.equal(called, false, "the stale read was refused before fn ran");
  const kv = await c.kvGet("upd/late/v");
  assert.deepEqual([text(kv), kv.token], ["A-1+B", b.token]);

  // A value the late holder reads before the next holder wrote still
  // cannot be written back: the store fences the write.
  const b2 = await c.acquire("upd/late2", "b", TTL);
  const a2token = b2.token - 1n; // an older grant of any lease
  const err2 = await c.update("upd/late2/v", "upd/late2", a2token, () => "stale").catch((e) => e);
  assert.ok(err2 instanceof StaleTokenError, `got ${err2}`);
  await c.release("upd/late", b.token);
  await c.release("upd/late2", b2.token);
});

test("lease.update refuses without a request once the lease is lost", async () => {
  const s = c.session({ ttlMs: TTL });
  const lease = await s.acquire("upd/session");
  assert.equal(text(await lease.update("upd/session/v", () => "S-1")), "S-1");
  await lease.release();
  let called = false;
  const err = await lease.update("upd/session/v", () => {
    called = true;
    return "S-2";
  }).catch((e) => e);
  assert.equal(err?.constructor?.name, "ReleasedError", `got ${err}`);
  assert.equal(called, false);
  assert.equal(text(await c.kvGet("upd/session/v")), "S-1");
  await s.close();
});
