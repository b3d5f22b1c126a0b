// Against three real tenured processes: the leader is killed with SIGKILL
// and the client fails over to another member.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startCluster, stopAll, eventually } from "./helpers/tenured.js";
import { createClient } from "../dist/node.js";

let nodes = [];
const statusOf = async (api) => {
  const c = createClient({ endpoints: [api], requestTimeoutMs: 1000 });
  try {
    return await c.status({ signal: AbortSignal.timeout(2000) });
  } finally {
    c.close();
  }
};
before(async () => {
  nodes = await startCluster(3, statusOf);
});
after(async () => {
  await stopAll(nodes);
});

test("after SIGKILL of the leader the client fails over, the lease is kept with its token, the watch resets, tokens grow", async (t) => {
  const st = await statusOf(nodes[0].api);
  const leader = nodes.find((n) => n.id === st.leaderId);
  assert.ok(leader, `leader ${st.leaderId} among ${nodes.map((n) => n.id)}`);
  // The leader first, so that every call starts there and must fail over.
  const endpoints = [leader, ...nodes.filter((n) => n !== leader)].map((n) => n.api);
  const c = createClient({ endpoints });

  const s = c.session({ ttlMs: 3000, holder: "keeper" });
  const l = await s.acquire("fo/x");
  const states = [];
  (async () => {
    for (;;) {
      await l.changed();
      states.push(l.state);
      if (l.state === "lost" || l.state === "released") return;
    }
  })();
  const ac = new AbortController();
  const w = await c.watch("fo/", { signal: ac.signal });
  const events = [];
  const watching = (async () => {
    for await (const ev of w) events.push(ev);
  })();
  await eventually("the watch's first events", 5000, async () => {
    assert.ok(events.some((e) => e.type === "synced"));
  });

  const killedAt = performance.now();
  await leader.kill();

  // Any request fails over to the survivors once they elect a leader.
  const other = await eventually("a grant through the survivors", 15_000, () => c.acquire("fo/after", "other", 3000, { signal: AbortSignal.timeout(3000) }));
  t.diagnostic(`served again ${Math.round(performance.now() - killedAt)}ms after the leader was killed`);
  assert.ok(other.token > l.token, `token after failover ${other.token} > ${l.token}`);

  // The session renewed through the new leader with the same token.
  await eventually("a renewal of the lease sent after the kill", 10_000, async () => {
    assert.ok(l.lastRenewal > killedAt, `last renewal ${l.lastRenewal} before the kill at ${killedAt}`);
  });
  assert.equal(l.signal.aborted, false, `states: ${states}`);
  assert.notEqual(l.state, "lost");
  const now = await c.get("fo/x");
  assert.equal(now.token, l.token);
  assert.equal(now.holder, "keeper");

  // The watch was on the killed member: it reset and sent the state again.
  await eventually("a reset of the watch and the current state after it", 10_000, async () => {
    const i = events.findIndex((e) => e.type === "reset");
    assert.ok(i >= 0, `events: ${events.map((e) => e.type)}`);
    const after = events.slice(i + 1);
    assert.ok(after.some((e) => e.type === "current" && e.lease.name === "fo/x" && e.lease.token === l.token));
    assert.ok(after.some((e) => e.type === "synced"));
  });

  ac.abort();
  await watching;
  await s.close();
  await c.release("fo/after", other.token);
  c.close();
});
