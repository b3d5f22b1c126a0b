// Request IDs: every attempt of a call that changes state carries the
// same (session, seq), with the lowest seq still in flight as its floor,
// so the cluster answers a retry with the first attempt's outcome.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Code, ConnectError, createRouterTransport } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { LeaseService, KVService, ErrorDetailSchema, LeaseSchema } from "../dist/gen/tenure/v1/tenure_pb.js";
import { Client, IndeterminateError, NotAppliedError, RequestIds, isError, systemClock } from "../dist/core.js";

/** lossy returns a transport that serves handlers and loses the answer
 * to the calls for which lose() is true, as a connection that broke
 * after the request was applied. */
function lossy(handlers, lose) {
  const inner = createRouterTransport(({ service }) => {
    service(LeaseService, handlers.lease ?? {});
    service(KVService, handlers.kv ?? {});
  });
  return {
    async unary(...args) {
      const res = await inner.unary(...args);
      if (lose()) {
        throw new ConnectError("read ECONNRESET", Code.Aborted, undefined, undefined, Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" }));
      }
      return res;
    },
    stream: (...args) => inner.stream(...args),
  };
}

test("a retried acquire carries the first attempt's request ID and gets its outcome, with the first send time", async () => {
  // A cluster that remembers outcomes by request ID, as tenured does: the
  // first attempt is granted (token 1); before the retry the grant
  // expires and another holder takes the name, which a new acquire would
  // be told is held.
  const remembered = new Map();
  const ids = [];
  let now = 1000;
  let attempts = 0;
  const acquire = (req) => {
    ids.push(req.requestId);
    const key = `${req.requestId.session}/${req.requestId.seq}`;
    if (!remembered.has(key)) {
      const token = BigInt(remembered.size + 1);
      remembered.set(key, { lease: create(LeaseSchema, { name: req.name, holder: req.holder, token, ttl: req.ttl, remaining: req.ttl }) });
    }
    return remembered.get(key);
  };
  const t = lossy({ lease: { acquire } }, () => {
    if (++attempts > 1) return false;
    now += 5000; // the answer is lost; time passes before the retry
    return true;
  });
  const c = new Client({ endpoints: ["h0:1"], transport: () => t, clock: { ...systemClock, now: () => now }, retryBackoffMs: 1 });
  const l = await c.acquire("x", "h", 2000);
  assert.equal(l.token, 1n, "the first grant, not a second one");
  assert.equal(l.sentAt, 1000, "sentAt is the first attempt's");
  assert.equal(ids.length, 2);
  assert.deepEqual([ids[0].session, ids[0].seq, ids[0].floor], [c.requestSession, 1n, 1n]);
  assert.deepEqual([ids[1].session, ids[1].seq], [ids[0].session, ids[0].seq], "the retry carries the same request ID");
});

test("calls take seqs in order and carry the lowest seq in flight as their floor", async () => {
  const ids = [];
  let release;
  const parked = new Promise((r) => (release = r));
  let arrived;
  const waiting = new Promise((r) => (arrived = r));
  const lease = (n) => create(LeaseSchema, { name: n, holder: "h", token: 7n, ttl: { seconds: 2n }, remaining: { seconds: 2n } });
  const handlers = {
    lease: {
      async acquire(req) {
        ids.push(req.requestId);
        if (req.wait) {
          arrived();
          await parked;
        }
        return { lease: lease(req.name) };
      },
      renew(req) {
        ids.push(req.requestId);
        return { results: [{ name: "a", token: 7n, lease: lease("a") }] };
      },
      release(req) {
        ids.push(req.requestId);
        return {};
      },
    },
    kv: {
      put(req) {
        ids.push(req.requestId);
        return { revision: 1n };
      },
      delete(req) {
        ids.push(req.requestId);
        return { revision: 2n };
      },
    },
  };
  const t = lossy(handlers, () => false);
  const c = new Client({ endpoints: ["h0:1"], transport: () => t });
  await c.acquire("a", "h", 2000);
  await c.renewOne("a", 7n);
  await c.put("k", "v", "a", 7n);
  await c.delete("k", "a", 7n);
  const w = c.acquire("b", "h", 2000, { wait: true });
  await waiting;
  await c.release("a", 7n); // seq 6, while seq 5 waits: floor 5
  release();
  await w;
  await c.release("a", 7n);
  assert.deepEqual(ids.map((id) => [id.session === c.requestSession, id.seq, id.floor]),
    [[true, 1n, 1n], [true, 2n, 2n], [true, 3n, 3n], [true, 4n, 4n], [true, 5n, 5n], [true, 6n, 5n], [true, 7n, 7n]]);
});

test("a retry the cluster no longer remembers is indeterminate", async () => {
  const notApplied = new ConnectError("lease: request below its session's floor, not applied: seq 1, floor 3", Code.FailedPrecondition, undefined,
    [{ desc: ErrorDetailSchema, value: { reason: "NOT_APPLIED" } }]);
  const t = lossy({ kv: { put() { throw notApplied; } } }, () => false);
  const err = await new Client({ endpoints: ["h0:1"], transport: () => t }).put("k", "v", "a", 7n).catch((e) => e);
  assert.ok(err instanceof IndeterminateError, `got ${err}`);
  assert.ok(isError(err, NotAppliedError), "its cause is a NotAppliedError");
});

test("the floor moves past every ended call below the lowest in flight", () => {
  const r = new RequestIds();
  const a = r.begin(), b = r.begin(), c = r.begin();
  r.end(b);
  const d = r.begin();
  assert.equal(d.floor, 1n, "a is still in flight");
  r.end(a);
  const e = r.begin();
  assert.equal(e.floor, 3n, "b ended before a: both passed");
  r.end(c);
  r.end(d);
  r.end(e);
  // Many calls, ended out of order, keep the bookkeeping bounded.
  const open = [];
  for (let i = 0; i < 5000; i++) open.push(r.begin());
  for (let i = open.length - 1; i >= 0; i--) r.end(open[i]);
  const last = r.begin();
  assert.equal(last.floor, last.seq, "nothing else in flight");
});
