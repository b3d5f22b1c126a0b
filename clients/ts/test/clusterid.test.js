// Cluster identity against in-memory transports: the client pins the
// cluster ID of the first answer (or of its config) and refuses answers
// from another cluster, successes and errors alike.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Code, ConnectError, createRouterTransport } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { LeaseService, KVService, ClusterService, ErrorDetailSchema, LeaseSchema, WatchEvent_Type } from "../dist/gen/tenure/v1/tenure_pb.js";
import { Client, OtherClusterError, UnavailableError, LeaseHeldError, IndeterminateError, isError, findError } from "../dist/core.js";

/** member returns a router transport for a member of cluster id (none if
 * empty) whose grants carry token, counting its calls. */
function member(id, token, overrides = {}) {
  const calls = { n: 0 };
  const answer = (fn) => async (req, ctx) => {
    calls.n++;
    if (id) ctx.responseHeader.set("Tenure-Cluster-Id", id);
    return fn(req, ctx);
  };
  const lease = (name) => create(LeaseSchema, { name, holder: "h", token, ttl: { seconds: 5n }, remaining: { seconds: 5n } });
  const handlers = {
    acquire: (req) => ({ lease: lease(req.name) }),
    get: (req) => ({ lease: lease(req.name) }),
    release: () => ({}),
    async *watch() {
      yield { event: { type: WatchEvent_Type.CURRENT, lease: lease("a") } };
      yield { event: { type: WatchEvent_Type.SYNCED } };
    },
    ...overrides,
  };
  const t = createRouterTransport(({ service }) => {
    service(LeaseService, Object.fromEntries(Object.entries(handlers).map(([k, f]) => [k, k === "watch" ? watchOf(f) : answer(f)])));
    service(KVService, { put: answer(() => ({ revision: token })) });
    service(ClusterService, { status: answer(() => ({ clusterId: id, lastToken: token })) });
  });
  // A streaming handler sets the header before its first message.
  function watchOf(gen) {
    return async function* (req, ctx) {
      calls.n++;
      if (id) ctx.responseHeader.set("Tenure-Cluster-Id", id);
      yield* gen(req, ctx);
    };
  }
  t.calls = calls;
  return t;
}

function client(transports, cfg = {}) {
  const byUrl = Object.fromEntries(transports.map((t, i) => [`http://h${i}:1`, t]));
  return new Client({ endpoints: Object.keys(byUrl).map((u) => u.slice(7)), transport: (u) => byUrl[u], retryBackoffMs: 1, maxRetryBackoffMs: 5, ...cfg });
}

const calls = {
  acquire: (c) => c.acquire("a", "h", 5000).then((l) => l.token),
  get: (c) => c.get("a").then((l) => l.token),
  release: (c) => c.release("a", 7n).then(() => 7n),
  put: (c) => c.put("k", "v", "a", 7n),
  status: (c) => c.status().then((s) => s.lastToken),
  watch: async (c) => {
    const ac = new AbortController();
    const w = await c.watch("", { signal: ac.signal });
    for await (const ev of w) {
      ac.abort();
      return ev.lease.token;
    }
  },
};

for (const [name, call] of Object.entries(calls)) {
  test(`${name}: only another cluster answers: OtherClusterError; with both, the pinned cluster's answer`, async () => {
    const a = member("cluster-a", 7n);
    const b = member("cluster-b", 1n);
    const err = await call(client([b], { clusterId: "cluster-a" })).catch((e) => e);
    assert.ok(err instanceof OtherClusterError, `got ${err?.constructor?.name}: ${err}`);
    assert.deepEqual([err.endpoint, err.expected, err.seen], ["h0:1", "cluster-a", "cluster-b"]);
    assert.match(err.message, /h0:1 .*cluster-b.*cluster-a/);
    assert.ok(b.calls.n > 0, "cluster B was asked");

    const c = client([b, a], { clusterId: "cluster-a" });
    assert.equal(await call(c), 7n, "cluster A's answer");
    assert.equal(c.clusterId, "cluster-a");
  });
}

test("the first answer pins the cluster; another cluster's error is refused, not believed", async () => {
  const held = new ConnectError("lease: held by other", Code.FailedPrecondition, undefined,
    [{ desc: ErrorDetailSchema, value: { reason: "LEASE_HELD", holder: "other", token: 1n } }]);
  const a = member("cluster-a", 7n);
  const b = member("cluster-b", 1n, { acquire() { throw held; } });
  const c = client([a]);
  assert.equal(c.clusterId, "");
  assert.equal((await c.acquire("a", "h", 5000)).token, 7n);
  assert.equal(c.clusterId, "cluster-a");

  // Pinned by that first answer, a client sharing nothing else with c.
  const c2 = client([a, b]);
  await c2.get("a");
  assert.equal(c2.clusterId, "cluster-a");
  const onlyB = client([b], { clusterId: c2.clusterId });
  const err = await onlyB.acquire("a", "h", 5000).catch((e) => e);
  assert.ok(err instanceof OtherClusterError, `got ${err}`);
  assert.ok(!isError(err, LeaseHeldError), "cluster B's held error is not believed");
});

test("a write refused as another cluster's is retried on the right one, not indeterminate", async () => {
  const a = member("cluster-a", 7n);
  const b = member("cluster-b", 1n);
  const c = client([b, a], { clusterId: "cluster-a" });
  await c.release("a", 7n);
  assert.equal(await c.put("k", "v", "a", 7n), 7n);
  assert.ok(b.calls.n >= 1 && a.calls.n === 2, `calls: b ${b.calls.n}, a ${a.calls.n}`);
  const err = await client([b], { clusterId: "cluster-a" }).put("k", "v", "a", 7n).catch((e) => e);
  assert.ok(err instanceof OtherClusterError && !(err instanceof IndeterminateError), `got ${err}`);
});

test("while the pinned cluster is unavailable and another answers, the caller's signal ends the call: unavailable and other cluster", async () => {
  const a = member("cluster-a", 7n, { get() { throw new ConnectError("node: no leader", Code.Unavailable); } });
  const b = member("cluster-b", 1n);
  const err = await client([a, b], { clusterId: "cluster-a" }).get("a", { signal: AbortSignal.timeout(200) }).catch((e) => e);
  assert.ok(err instanceof UnavailableError, `got ${err}`);
  assert.ok(isError(err, OtherClusterError), `${err.message} matches OtherClusterError`);
  assert.equal(findError(err, OtherClusterError).seen, "cluster-b");
});

test("answers without a cluster ID are accepted and pin nothing", async () => {
  for (const id of [undefined, "cluster-a"]) {
    const c = client([member("", 3n)], { clusterId: id });
    assert.equal((await c.get("a")).token, 3n);
    assert.equal(c.clusterId, id ?? "");
  }
  assert.throws(() => client([member("", 3n)], { clusterId: " a" }), /leading or trailing space/);
});
