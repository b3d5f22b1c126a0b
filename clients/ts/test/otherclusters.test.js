// Against real tenured processes: two single-node clusters. A client that
// talked to one refuses the other over every protocol, uses the right one
// when both are in its endpoints, and refuses a new cluster that took over
// its endpoint's address.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Node, freePort } from "./helpers/tenured.js";
import { createClient, OtherClusterError, LeaseHeldError, isError } from "../dist/node.js";
import { createClient as createWebClient } from "../dist/web.js";

let a, b;
const nodes = [];
before(async () => {
  a = new Node("a");
  b = new Node("b");
  nodes.push(a, b);
  await Promise.all([a.start(), b.start()]);
  await Promise.all([a.waitReady(), b.waitReady()]);
});
after(async () => {
  await Promise.all(nodes.map((n) => n.kill()));
});

const clusterOf = async (api) => {
  const c = createClient({ endpoints: [api] });
  try {
    return (await c.status()).clusterId;
  } finally {
    c.close();
  }
};

const protocols = [
  ["grpc (node)", (cfg) => createClient(cfg)],
  ["connect (node)", (cfg) => createClient({ ...cfg, protocol: "connect" })],
  ["grpc-web (node)", (cfg) => createClient({ ...cfg, protocol: "grpc-web" })],
  ["connect (web, fetch)", (cfg) => createWebClient(cfg)],
  ["grpc-web (web, fetch)", (cfg) => createWebClient({ ...cfg, protocol: "grpc-web" })],
];

test("a client pinned to A refuses B's answers and errors over every protocol, and uses A when both are listed", async (t) => {
  const idA = await clusterOf(a.api);
  const idB = await clusterOf(b.api);
  assert.ok(idA && idB && idA !== idB, `cluster IDs ${idA}, ${idB}`);
  // B holds x for someone else: its held error must not be believed.
  const cb = createClient({ endpoints: [b.api] });
  await cb.acquire("x", "someone", 30_000);
  cb.close();

  for (const [label, make] of protocols) {
    await t.test(label, async () => {
      const first = make({ endpoints: [a.api] });
      const l = await first.acquire(`x/${label}`, "me", 5000);
      assert.equal(first.clusterId, idA, "pinned on first contact");
      first.close();

      const onlyB = make({ endpoints: [b.api], clusterId: idA });
      for (const [what, call] of [
        ["acquire (held on B)", () => onlyB.acquire("x", "me", 5000)],
        ["get", () => onlyB.get("x")],
        ["watch", () => onlyB.watch("x")],
      ]) {
        const err = await call().catch((e) => e);
        assert.ok(err instanceof OtherClusterError, `${what}: got ${err?.constructor?.name}: ${err}`);
        assert.deepEqual([err.endpoint, err.expected, err.seen], [b.api, idA, idB], what);
        assert.ok(!isError(err, LeaseHeldError), `${what}: B's held error is not believed`);
      }
      onlyB.close();

      const both = make({ endpoints: [b.api, a.api], clusterId: idA });
      const again = await both.acquire(`x/${label}`, "me", 5000);
      assert.equal(again.token, l.token, "A renewed its own grant");
      both.close();
    });
  }
});

test("a new cluster on the address the client talked to is refused, though it granted", async () => {
  const idA = await clusterOf(a.api);
  const c = createClient({ endpoints: [a.api] });
  const before = await c.acquire("jobs/x", "a-holder", 5000);
  assert.equal(c.clusterId, idA);

  // A stops; a fresh node, not joined to anything, bootstraps a cluster
  // of its own on A's API address.
  await a.kill();
  const n = new Node("c");
  nodes.push(n);
  n.api = a.api;
  n.raft = `127.0.0.1:${await freePort()}`;
  await n.start();
  await n.waitReady();
  const idC = await clusterOf(a.api);
  assert.notEqual(idC, idA);

  const err = await c.acquire("jobs/x", "after", 5000).catch((e) => e);
  assert.ok(err instanceof OtherClusterError, `got ${err?.constructor?.name}: ${err}`);
  assert.deepEqual([err.endpoint, err.expected, err.seen], [a.api, idA, idC]);
  assert.equal(c.clusterId, idA);
  c.close();

  // The refused request took effect over there, with a token from 1.
  const other = createClient({ endpoints: [a.api] });
  const there = await other.get("jobs/x");
  assert.deepEqual([there.holder, there.token], ["after", 1n]);
  assert.ok(before.token > there.token, `A's token ${before.token} is above the new cluster's ${there.token}: believing it would break fencing`);
  other.close();
});
