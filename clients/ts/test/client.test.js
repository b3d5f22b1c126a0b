// The client's retry classification, failover and error mapping, against
// in-memory transports: the router transport of @connectrpc/connect
// (answers as a server sends them) and transports that fail like a network.
import { test, mock } from "node:test";
import assert from "node:assert/strict";
import { Code, ConnectError, createRouterTransport } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { LeaseService, KVService, ClusterService, ErrorDetailSchema, LeaseSchema } from "../dist/gen/tenure/v1/tenure_pb.js";
import {
  Client, LeaseHeldError, StaleTokenError, NotFoundError, InvalidArgumentError, IndeterminateError,
  UnavailableError, DeadlineExceededError, CanceledError, isError, fromConnectError, reasonError, TenureError,
  UnauthenticatedError, PermissionDeniedError, ForbiddenError, TLSError, isTLSError,
} from "../dist/core.js";

const detail = (d) => [{ desc: ErrorDetailSchema, value: d }];
const held = () => new ConnectError(`lease: "x" held by "a" (token 3, 4.2s remaining)`, Code.FailedPrecondition, undefined,
  detail({ reason: "LEASE_HELD", holder: "a", token: 3n, remaining: { seconds: 4n, nanos: 200_000_000 } }));
const unavailable = (reason) => new ConnectError("node: no leader", Code.Unavailable, undefined, reason ? detail({ reason }) : undefined);

/** netError is what connect-node reports for a failed connection. */
function netError(code, ceCode = Code.Unavailable) {
  return new ConnectError(`connect ${code}`, ceCode, undefined, undefined, Object.assign(new Error(`connect ${code}`), { code }));
}

/** server returns a router transport whose handlers count their calls. */
function server(handlers) {
  const calls = { n: 0 };
  const wrap = (fn) => async (req, ctx) => {
    calls.n++;
    return fn(req, ctx);
  };
  const t = createRouterTransport(({ service }) => {
    service(LeaseService, Object.fromEntries(Object.entries(handlers.lease ?? {}).map(([k, f]) => [k, wrap(f)])));
    service(KVService, Object.fromEntries(Object.entries(handlers.kv ?? {}).map(([k, f]) => [k, wrap(f)])));
    service(ClusterService, Object.fromEntries(Object.entries(handlers.cluster ?? {}).map(([k, f]) => [k, wrap(f)])));
  });
  t.calls = calls;
  return t;
}

/** broken returns a transport whose every call fails with err. */
function broken(err) {
  const t = {
    calls: { n: 0 },
    async unary() {
      t.calls.n++;
      throw err();
    },
    async stream() {
      t.calls.n++;
      throw err();
    },
  };
  return t;
}

function client(transports, cfg = {}) {
  const byUrl = Object.fromEntries(transports.map((t, i) => [`http://h${i}:1`, t]));
  return new Client({ endpoints: Object.keys(byUrl).map((u) => u.slice(7)), transport: (u) => byUrl[u], ...cfg });
}

const grant = (req) => ({ lease: create(LeaseSchema, { name: req.name, holder: req.holder, token: 7n, ttl: req.ttl, remaining: req.ttl }) });

test("server errors map to the classes of the Go client's table", async (t) => {
  const cases = [
    ["held", held(), LeaseHeldError],
    ["stale", new ConnectError("lease: stale token 2", Code.FailedPrecondition, undefined, detail({ reason: "STALE_TOKEN" })), StaleTokenError],
    ["not found", new ConnectError("lease: not found", Code.NotFound, undefined, detail({ reason: "NOT_FOUND" })), NotFoundError],
    ["not found without reason", new ConnectError("lease: not found", Code.NotFound), NotFoundError],
    ["invalid", new ConnectError("lease: invalid argument: name is empty", Code.InvalidArgument), InvalidArgumentError],
    ["precondition without reason", new ConnectError("something else", Code.FailedPrecondition), ConnectError],
    ["internal", new ConnectError("disk on fire", Code.Internal), ConnectError],
    ["unauthenticated", new ConnectError("auth: unknown bearer token", Code.Unauthenticated), UnauthenticatedError],
    ["permission denied", new ConnectError(`auth: principal "app" may not Get "x": needs read:x`, Code.PermissionDenied), PermissionDeniedError],
    ["forbidden", new ConnectError(`lease: not permitted: grant of "x" belongs to another principal`, Code.PermissionDenied, undefined, detail({ reason: "FORBIDDEN" })), ForbiddenError],
  ];
  for (const [name, ce, cls] of cases) {
    await t.test(name, async () => {
      // Through a transport, so the detail is encoded and decoded as on the wire.
      const c = client([server({ lease: { get() { throw ce; } } })]);
      const err = await c.get("x").catch((e) => e);
      assert.ok(err instanceof cls, `${name}: got ${err?.constructor?.name}: ${err?.message}`);
      if (cls !== ConnectError) {
        assert.equal(err.message, ce.rawMessage, "the server's message");
        assert.ok(err.cause instanceof ConnectError);
        assert.equal(err.code, ce.code);
      }
      assert.ok(!(err instanceof LeaseHeldError) || cls === LeaseHeldError);
      assert.ok(!(err instanceof ForbiddenError) || cls === ForbiddenError, "only FORBIDDEN is a ForbiddenError");
      assert.equal(c.endpoints.length, 1);
    });
  }
  // deadline_exceeded and canceled are retried by reads (the request may
  // have been applied), so they are checked here without a transport.
  assert.ok(fromConnectError(new ConnectError("context deadline exceeded", Code.DeadlineExceeded)) instanceof DeadlineExceededError);
  assert.ok(fromConnectError(new ConnectError("context canceled", Code.Canceled)) instanceof CanceledError);
  const err = fromConnectError(held());
  assert.deepEqual([err.holder, err.token, err.remainingMs], ["a", 3n, 4200]);
  assert.ok(reasonError("STALE_TOKEN", "stale") instanceof StaleTokenError);
  assert.equal(reasonError("", ""), undefined);
  assert.ok(reasonError("SOMETHING_NEW", "new failure") instanceof TenureError);
  assert.ok(reasonError("FORBIDDEN", "not yours") instanceof ForbiddenError);
});

test("refused credentials and failed TLS handshakes are not retried on other endpoints", async (t) => {
  for (const [name, err, cls] of [
    ["unauthenticated", () => new ConnectError("auth: no credentials", Code.Unauthenticated), UnauthenticatedError],
    ["permission denied", () => new ConnectError("auth: needs hold:x", Code.PermissionDenied), PermissionDeniedError],
    ["certificate not verified", () => netError("UNABLE_TO_VERIFY_LEAF_SIGNATURE"), TLSError],
    ["client certificate refused", () => netError("ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED"), TLSError],
  ]) {
    await t.test(name, async () => {
      const first = broken(err);
      const second = server({ lease: { acquire: grant } });
      const c = client([first, second]);
      const got = await c.acquire("x", "a", 2000).catch((e) => e);
      assert.ok(got instanceof cls, `got ${got?.constructor?.name}: ${got?.message}`);
      assert.equal(first.calls.n, 1);
      assert.equal(second.calls.n, 0, "the second endpoint was not tried");
      assert.equal(isTLSError(got), cls === TLSError);
    });
  }
  // A refused connection is still a dial error, retried elsewhere.
  assert.equal(isTLSError(netError("ECONNREFUSED")), false);
});

test("a token goes with every request as a bearer token; https endpoints get https base URLs", async () => {
  const seen = [];
  const t = createRouterTransport(({ service }) => {
    service(LeaseService, {
      acquire(req, ctx) {
        seen.push(ctx.requestHeader.get("authorization"));
        return grant(req);
      },
    });
  });
  const urls = [];
  const c = new Client({ endpoints: ["https://h:1", "h:2"], token: "tnr_abc", transport: (u) => (urls.push(u), t) });
  await c.acquire("x", "a", 2000);
  assert.deepEqual(seen, ["Bearer tnr_abc"]);
  assert.deepEqual(urls, ["https://h:1", "http://h:2"]);
  const all = [];
  new Client({ endpoints: ["h:1", "http://h:2"], https: true, transport: (u) => (all.push(u), t) });
  assert.deepEqual(all, ["https://h:1", "https://h:2"]);
  const none = [];
  await new Client({ endpoints: ["h:1"], transport: () => createRouterTransport(({ service }) => {
    service(LeaseService, { acquire(req, ctx) { none.push(ctx.requestHeader.get("authorization")); return grant(req); } });
  }) }).acquire("x", "a", 2000);
  assert.deepEqual(none, [null], "no token, no header");
  assert.throws(() => new Client({ endpoints: ["h:1"], token: "tnr_a b", transport: () => t }), /token has spaces/);
  assert.throws(() => new Client({ endpoints: ["h:1"], token: "tnr_a\n", transport: () => t }), /token has spaces/);
});

test("acquire names the lease in a held error", async () => {
  const c = client([server({ lease: { acquire() { throw held(); } } })]);
  const err = await c.acquire("jobs/x", "b", 2000).catch((e) => e);
  assert.ok(err instanceof LeaseHeldError);
  assert.deepEqual([err.lease, err.holder, err.token], ["jobs/x", "a", 3n]);
});

test("an endpoint that answers unavailable is skipped, and the one that served is tried first next time", async () => {
  const a = server({ kv: { put() { throw unavailable(); } } });
  const b = server({ kv: { put: () => ({ revision: 9n }) } });
  const c = client([a, b]);
  assert.equal(await c.put("k", "v", "x", 1n), 9n);
  assert.equal(await c.put("k", "v", "x", 1n), 9n);
  assert.deepEqual([a.calls.n, b.calls.n], [1, 2]);
});

test("a write that failed to connect is retried on the next endpoint", async () => {
  const a = broken(() => netError("ECONNREFUSED"));
  const b = server({ kv: { put: () => ({ revision: 3n }) } });
  assert.equal(await client([a, b]).put("k", "v", "x", 1n), 3n);
});

test("a write, delete or release whose connection broke, or that the server calls indeterminate, is retried with its request ID", async (t) => {
  for (const [name, a] of [
    ["connection reset", broken(() => netError("ECONNRESET", Code.Aborted))],
    ["fetch failed", broken(() => new ConnectError("fetch failed", Code.Unknown, undefined, undefined, new TypeError("fetch failed")))],
    ["server: indeterminate", server({
      kv: { put() { throw unavailable("INDETERMINATE"); }, delete() { throw unavailable("INDETERMINATE"); } },
      lease: { release() { throw unavailable("INDETERMINATE"); } },
    })],
  ]) {
    await t.test(name, async () => {
      const ids = [];
      const b = server({
        kv: {
          put: (req) => { ids.push(req.requestId); return { revision: 3n }; },
          delete: (req) => { ids.push(req.requestId); return { revision: 4n }; },
        },
        lease: { release: (req) => { ids.push(req.requestId); return {}; } },
      });
      const c = client([a, b]);
      assert.equal(await c.put("k", "v", "x", 1n), 3n);
      assert.equal(await c.delete("k", "x", 1n), 4n);
      await c.release("x", 1n);
      assert.equal(ids.length, 3, "each call retried once on the other endpoint");
      for (const id of ids) assert.ok(id && id.seq > 0n, "a retry without the call's request ID");
    });
  }
});

test("acquire is retried after a broken connection, and a retry answered held is held", async () => {
  const a = broken(() => netError("ECONNRESET", Code.Aborted));
  const granted = await client([a, server({ lease: { acquire: grant } })]).acquire("x", "h", 2000);
  assert.equal(granted.token, 7n);
  // The retry carries the call's request ID: the cluster answers it with
  // the first attempt's outcome, so "held" is the truth.
  const err = await client([a, server({ lease: { acquire() { throw held(); } } })]).acquire("x", "h", 2000).catch((e) => e);
  assert.ok(err instanceof LeaseHeldError && !(err instanceof IndeterminateError), `got ${err}`);
  // Refused connections never carried the request: held is the truth.
  const refused = broken(() => netError("ECONNREFUSED"));
  const err2 = await client([refused, server({ lease: { acquire() { throw held(); } } })]).acquire("x", "h", 2000).catch((e) => e);
  assert.ok(err2 instanceof LeaseHeldError && !(err2 instanceof IndeterminateError), `got ${err2}`);
});

test("an attempt that times out is retried: a write, a renewal; a leadership transfer is indeterminate", async () => {
  // A slow server: answers after 300ms, long after the 30ms attempt timeout.
  const hang = () => new Promise((_, rej) => setTimeout(() => rej(new ConnectError("too late", Code.Internal)), 300));
  const a = server({ kv: { put: hang }, lease: { renew: hang }, cluster: { transferLeadership: hang } });
  const b = server({ kv: { put: () => ({ revision: 1n }) }, lease: { renew: () => ({ results: [] }) }, cluster: { transferLeadership: () => ({}) } });
  assert.equal(await client([a, b], { requestTimeoutMs: 30 }).put("k", "v", "x", 1n), 1n);
  assert.deepEqual(await client([a, b], { requestTimeoutMs: 30 }).renew([]), []);
  const err = await client([a, b], { requestTimeoutMs: 30 }).transferLeadership("n2").catch((e) => e);
  assert.ok(err instanceof IndeterminateError, `got ${err}`);
});

test("while no endpoint serves, rounds pause 50ms doubling to 1s; the caller's signal ends the call as unavailable", async () => {
  mock.timers.enable({ apis: ["setTimeout"] });
  try {
    const a = server({ lease: { get() { throw unavailable(); } } });
    const b = server({ lease: { get() { throw unavailable(); } } });
    const ac = new AbortController();
    const p = client([a, b]).get("x", { signal: ac.signal }).catch((e) => e);
    const flush = async () => { for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r)); };
    const seen = [];
    await flush();
    for (const pause of [50, 100, 200, 400, 800, 1000, 1000]) {
      seen.push(a.calls.n + b.calls.n);
      mock.timers.tick(pause - 1);
      await flush();
      assert.equal(a.calls.n + b.calls.n, seen.at(-1), `no attempt before the ${pause}ms pause ended`);
      mock.timers.tick(1);
      await flush();
    }
    assert.deepEqual(seen, [2, 4, 6, 8, 10, 12, 14]);
    ac.abort(new Error("caller gave up"));
    const err = await p;
    assert.ok(err instanceof UnavailableError, `got ${err}`);
    assert.equal(err.attempts, 16);
    assert.match(err.message, /no endpoint could serve the request \(16 attempts, last: h1:1: .*no leader/);
  } finally {
    mock.timers.reset();
  }
});

test("endpoints must be host:port", () => {
  const t = () => broken(() => new Error("unused"));
  assert.throws(() => new Client({ endpoints: [], transport: t }), /no endpoints/);
  assert.deepEqual(new Client({ endpoints: ["https://a:1"], transport: t }).endpoints, ["a:1"]);
  assert.throws(() => new Client({ endpoints: ["a"], transport: t }), /not host:port/);
  assert.deepEqual(new Client({ endpoints: ["http://a:1/", " [::1]:2"], transport: t }).endpoints, ["a:1", "[::1]:2"]);
});

test("a term's times are rounded down to the millisecond, so its end passed back as since keeps it", async () => {
  const b = server({
    lease: {
      history: () => ({
        terms: [{ name: "x", holder: "h", token: 1n, startTime: { seconds: 10n, nanos: 400_999_999 }, endTime: { seconds: 12n, nanos: 999_999_999 } }],
      }),
    },
  });
  const [t] = await client([b]).history("x");
  assert.equal(t.start.getTime(), 10_400);
  assert.equal(t.end.getTime(), 12_999, "the end is not rounded up past the term's end");
});
