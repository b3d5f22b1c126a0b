// Shared (read) and exclusive (write) grants, against one real tenured
// process.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startNode, eventually } from "./helpers/tenured.js";
import { createClient, LeaseHeldError, InvalidArgumentError } from "../dist/node.js";

let node;
before(async () => {
  node = await startNode();
});
after(async () => {
  await node?.kill();
});

/** queued waits until holder waits for name (the dashboard's history
 * lists the waiters). */
async function queued(name, holder) {
  await eventually(`${holder} to wait for ${name}`, 10_000, async () => {
    const res = await fetch(`http://${node.api}/ui/api/history?name=${encodeURIComponent(name)}`).then((r) => r.json());
    if (!res.waiters?.includes(holder)) throw new Error(`waiters ${res.waiters}`);
  });
}

test("shared grants coexist; a writer waits for them; a reader behind the writer waits for it", async () => {
  const c = createClient({ endpoints: [node.api] });
  const r1 = await c.acquire("sh/db", "r1", 30_000, { shared: true });
  const r2 = await c.acquire("sh/db", "r2", 30_000, { shared: true });
  assert.ok(r1.shared && r2.shared, "both grants are shared");
  assert.ok(r2.token > r1.token, "each grant has its own, larger token");

  // Readers do not write.
  await assert.rejects(c.put("sh/db/k", "v", "sh/db", r1.token), InvalidArgumentError, "a shared token does not write");
  // No upgrade.
  await assert.rejects(c.acquire("sh/db", "r1", 30_000), InvalidArgumentError, "no upgrade");

  // The writer waits for both; a reader after it waits too.
  await assert.rejects(c.acquire("sh/db", "w0", 30_000), LeaseHeldError, "a writer's try is held");
  const writer = c.acquire("sh/db", "w", 30_000, { wait: true, waitTimeoutMs: 30_000 });
  await queued("sh/db", "w");
  await assert.rejects(c.acquire("sh/db", "r3try", 30_000, { shared: true }), LeaseHeldError, "a reader's try behind a writer is held");
  let r3done = false;
  const reader = c.acquire("sh/db", "r3", 30_000, { shared: true, wait: true, waitTimeoutMs: 30_000 }).finally(() => {
    r3done = true;
  });
  await queued("sh/db", "r3");

  await c.release("sh/db", r1.token);
  await c.release("sh/db", r2.token);
  const w = await writer;
  assert.ok(!w.shared && w.token > r2.token, `writer got ${w.token}, shared ${w.shared}`);
  assert.equal(r3done, false, "the reader still waits while the writer holds");
  await c.put("sh/db/k", "v", "sh/db", w.token);
  await c.release("sh/db", w.token);
  const r3 = await reader;
  assert.ok(r3.shared && r3.token > w.token, "the reader goes once the writer is done");

  const terms = await c.history("sh/db");
  assert.deepEqual(terms.map((t) => [t.holder, t.shared]), [["r3", true], ["w", false], ["r2", true], ["r1", true]]);
  c.close?.();
});
