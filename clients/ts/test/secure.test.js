// Against a real tenured with TLS on its API (certificates from tenure
// certs init), client certificates and an auth file of bearer tokens:
// every Node.js protocol over https with the cluster's CA, tokens and
// client certificates as principals, and refusals as typed errors that
// are not retried.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Node, tempDir, tenureBin, pkgDir, spawnGroup, killGroup } from "./helpers/tenured.js";
import {
  createClient, UnauthenticatedError, PermissionDeniedError, NotFoundError, ForbiddenError, TLSError, StaleTokenError, isError,
} from "../dist/node.js";
import { createClient as createWebClient } from "../dist/web.js";

const TTL = 10_000; // long enough for a loaded machine
const tokens = { app: "tnr_app-token-for-the-ts-tests", other: "tnr_other-token-for-the-ts-tests", reader: "tnr_reader-token-for-the-ts-tests" };
const hash = (t) => `sha256:${createHash("sha256").update(t).digest("hex")}`;

let dir;
let tlsNode;
let plainNode;
let ca;
const pem = (f) => readFileSync(join(dir, "certs", f));

before(async () => {
  dir = tempDir("tenure-ts-secure-");
  execFileSync(tenureBin(), ["certs", "init", join(dir, "certs"), "--members", "n1", "--clients", "app-cert,nobody-cert"]);
  // A second PKI: its client certificate is from a CA the server does not know.
  execFileSync(tenureBin(), ["certs", "init", join(dir, "foreign"), "--members", "n1", "--clients", "app-cert"]);
  const auth = {
    principals: {
      app: { roles: ["hold:jobs/", "read:"], tokens: [hash(tokens.app)] },
      other: { roles: ["hold:jobs/", "read:"], tokens: [hash(tokens.other)] },
      reader: { roles: ["read:"], tokens: [hash(tokens.reader)] },
      "app-cert": { roles: ["hold:jobs/", "read:"] },
    },
  };
  writeFileSync(join(dir, "auth.json"), JSON.stringify(auth), { mode: 0o600 });
  ca = pem("ca.crt");
  const c = (f) => join(dir, "certs", f);
  tlsNode = new Node("n1", {
    args: ["--tls-cert", c("n1.crt"), "--tls-key", c("n1.key"), "--client-ca", c("client-ca.crt"), "--auth-file", join(dir, "auth.json")],
    tlsCa: ca,
  });
  // Plain HTTP on loopback with the same auth file: the browser build's
  // fetch cannot be given a CA, but it sends the token the same way.
  plainNode = new Node("p1", { args: ["--auth-file", join(dir, "auth.json")] });
  await Promise.all([tlsNode.start(), plainNode.start()]);
  await Promise.all([tlsNode.waitReady(), plainNode.waitReady()]);
});
after(async () => {
  await tlsNode?.kill();
  await plainNode?.kill();
});

const tls = () => ({ ca });
const logs = () => `tenured log:\n${tlsNode.log.join("")}`;

for (const protocol of ["grpc", "connect", "grpc-web"]) {
  test(`a bearer token over https with the cluster's CA (${protocol}): acquire, fenced put, renew, release`, async () => {
    const c = createClient({ endpoints: [tlsNode.api], tls: tls(), token: tokens.app, protocol });
    try {
      const name = `jobs/tls-${protocol}`;
      const g = await c.acquire(name, "a", TTL);
      assert.ok(g.token > 0n);
      await c.put(`${name}/k`, "v1", name, g.token);
      assert.equal(new TextDecoder().decode((await c.kvGet(`${name}/k`)).value), "v1");
      assert.equal((await c.renewOne(name, g.token)).token, g.token);
      await c.release(name, g.token);
      assert.match(c.clusterId, /.+/, "the cluster ID came over TLS too");
    } finally {
      c.close();
    }
  });
}

test("https:// endpoints with the CA; a client certificate is a principal of its own", async () => {
  const c = createClient({ endpoints: [`https://${tlsNode.api}`], tls: { ca, cert: pem("app-cert.crt"), key: pem("app-cert.key") } });
  const name = "jobs/by-cert";
  try {
    const g = await c.acquire(name, "cert-holder", TTL);
    await c.put(`${name}/k`, "from the certificate", name, g.token);
    // The same grant, from the principal of a token: not the owner.
    const other = createClient({ endpoints: [tlsNode.api], tls: tls(), token: tokens.app });
    try {
      const err = await other.put(`${name}/k`, "not mine", name, g.token).catch((e) => e);
      assert.ok(err instanceof ForbiddenError, `got ${err?.constructor?.name}: ${err?.message}`);
    } finally {
      other.close();
    }
    await c.release(name, g.token);
  } finally {
    c.close();
  }
});

test("refused credentials are typed errors, not retried, and change nothing", async () => {
  const ep = tlsNode.api;
  // Two endpoints (the same node twice): a retry would show as a second
  // request; the refusal comes at once instead of after the backoff.
  const make = (cfg) => createClient({ endpoints: [ep, ep], tls: tls(), requestTimeoutMs: 3000, ...cfg });
  const cases = [
    ["no credentials", {}, UnauthenticatedError],
    ["an unknown token", { token: "tnr_nobody-knows-this-one" }, UnauthenticatedError],
    ["a principal without hold:", { token: tokens.reader }, PermissionDeniedError],
  ];
  for (const [what, cfg, cls] of cases) {
    const c = make(cfg);
    try {
      const t0 = performance.now();
      const err = await c.acquire("jobs/refused", "x", TTL, { signal: AbortSignal.timeout(10_000) }).catch((e) => e);
      assert.ok(err instanceof cls, `${what}: got ${err?.constructor?.name}: ${err?.message}`);
      assert.ok(!(err instanceof ForbiddenError), `${what}: not about a grant`);
      assert.ok(performance.now() - t0 < 2000, `${what}: answered at once, not after retries`);
    } finally {
      c.close();
    }
  }
  const app = make({ token: tokens.app });
  try {
    await assert.rejects(app.get("jobs/refused"), (e) => e.constructor.name === "NotFoundError", "nothing was granted");
    // Another principal's grant: renew, release and writes are forbidden
    // whatever the token.
    const g = await app.acquire("jobs/owned", "a", TTL);
    const other = make({ token: tokens.other });
    try {
      const [r] = await other.renew([{ name: "jobs/owned", token: g.token }]);
      assert.ok(r.err instanceof ForbiddenError, `renew: got ${r.err}`);
      assert.ok(isError(await other.release("jobs/owned", g.token).catch((e) => e), PermissionDeniedError), "release");
      await assert.rejects(other.put("jobs/owned/k", "v", "jobs/owned", g.token), ForbiddenError);
    } finally {
      other.close();
    }
    assert.equal((await app.get("jobs/owned")).token, g.token, "the grant is untouched");
    await app.release("jobs/owned", g.token);
  } finally {
    app.close();
  }
});

test("a server certificate that does not verify, and a client certificate from another CA, fail as TLSError at once", async () => {
  const cases = [
    ["the system's roots", { endpoints: [`https://${tlsNode.api}`, `https://${tlsNode.api}`], token: tokens.app }],
    ["another CA", { endpoints: [tlsNode.api, tlsNode.api], tls: { ca: readFileSync(join(dir, "foreign", "ca.crt")) }, token: tokens.app }],
    ["a foreign client certificate", {
      endpoints: [tlsNode.api, tlsNode.api],
      tls: { ca, cert: readFileSync(join(dir, "foreign", "app-cert.crt")), key: readFileSync(join(dir, "foreign", "app-cert.key")) },
    }],
  ];
  cases.push(["TLS to a plain-text port", { endpoints: [plainNode.api, plainNode.api], tls: { ca }, token: tokens.app }]);
  for (const [what, cfg] of cases) {
    const c = createClient(cfg);
    try {
      const t0 = performance.now();
      const err = await c.acquire("jobs/tls-refused", "x", TTL, { signal: AbortSignal.timeout(10_000) }).catch((e) => e);
      assert.ok(err instanceof TLSError, `${what}: got ${err?.constructor?.name}: ${err?.message} (cause ${err?.cause?.cause?.code})\n${logs()}`);
      assert.equal(err.endpoint, cfg.endpoints[0].replace("https://", ""));
      assert.ok(performance.now() - t0 < 2000, `${what}: not retried`);
    } finally {
      c.close();
    }
  }
  assert.throws(() => createClient({ endpoints: [tlsNode.api], tls: { ca, cert: pem("app-cert.crt") } }), /cert and tls.key go together/);
});

test("a session and runElection over TLS with a token; a stale token stays fenced", async () => {
  const c = createClient({ endpoints: [tlsNode.api], tls: tls(), token: tokens.app });
  try {
    let token;
    const out = await c.runElection("jobs/elect", async (signal, lease) => {
      token = lease.token;
      await lease.put("jobs/elect/state", "leader wrote");
      return "done";
    }, { session: { ttlMs: TTL } });
    assert.equal(out, "done");
    const g = await c.acquire("jobs/elect", "next", TTL);
    assert.ok(g.token > token, "the next grant has a larger token");
    await assert.rejects(c.put("jobs/elect/state", "late", "jobs/elect", token), StaleTokenError);
    await c.release("jobs/elect", g.token);
  } finally {
    c.close();
  }
});

test("the browser build sends the token (fetch, plain HTTP on loopback)", async () => {
  for (const protocol of ["connect", "grpc-web"]) {
    const ok = createWebClient({ endpoints: [plainNode.api], token: tokens.app, protocol });
    const g = await ok.acquire(`jobs/web-${protocol}`, "w", TTL);
    await ok.release(`jobs/web-${protocol}`, g.token);
    const none = createWebClient({ endpoints: [plainNode.api], protocol });
    await assert.rejects(none.acquire(`jobs/web-${protocol}`, "w", TTL), UnauthenticatedError);
    const reader = createWebClient({ endpoints: [plainNode.api], token: tokens.reader, protocol });
    await assert.rejects(reader.acquire(`jobs/web-${protocol}`, "w", TTL), PermissionDeniedError);
  }
});

// examples/secured-counter.mjs, which the README quotes for TLS, bearer
// tokens, client certificates and lease.update, run as a person would.
function runExample(env) {
  const base = { ...process.env };
  delete base.TENURE_AUTH_TOKEN;
  const p = spawnGroup(process.execPath, [join(pkgDir, "examples", "secured-counter.mjs")], {
    env: { ...base, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  p.stdout.on("data", (b) => (out += b));
  p.stderr.on("data", (b) => (out += b));
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      killGroup(p);
      resolve({ code: "timeout after 30s", out });
    }, 30_000);
    p.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

test("examples/secured-counter.mjs counts over TLS with a token, then with a client certificate", async () => {
  // The example reads ca.crt, app.crt and app.key from TENURE_CERTS; here
  // the client certificate is app-cert's.
  const certs = join(dir, "example-certs");
  mkdirSync(certs);
  copyFileSync(join(dir, "certs", "ca.crt"), join(certs, "ca.crt"));
  copyFileSync(join(dir, "certs", "app-cert.crt"), join(certs, "app.crt"));
  copyFileSync(join(dir, "certs", "app-cert.key"), join(certs, "app.key"));
  const env = { TENURE_ENDPOINTS: tlsNode.api, TENURE_CERTS: certs };
  const count = (r) => {
    const m = r.out.match(/^count = (\d+) \(written with token (\d+)\)$/m);
    assert.ok(m, `no count in the example's output:\n${r.out}\n${logs()}`);
    return { n: Number(m[1]), token: BigInt(m[2]) };
  };

  const withToken = await runExample({ ...env, TENURE_AUTH_TOKEN: tokens.app });
  assert.equal(withToken.code, 0, `${withToken.out}\n${logs()}`);
  const first = count(withToken);
  assert.equal(first.n, 1);

  const withCert = await runExample(env);
  assert.equal(withCert.code, 0, `${withCert.out}\n${logs()}`);
  const second = count(withCert);
  assert.equal(second.n, 2, "the second run read the first run's count");
  assert.ok(second.token > first.token, `the second grant's token ${second.token} is not larger than ${first.token}`);

  const badToken = await runExample({ ...env, TENURE_AUTH_TOKEN: "tnr_not-a-known-token" });
  assert.notEqual(badToken.code, 0, badToken.out);
  assert.match(badToken.out, /UnauthenticatedError|unauthenticated/, badToken.out);

  const c = createClient({ endpoints: [tlsNode.api], tls: tls(), token: tokens.reader });
  try {
    const kv = await c.kvGet("jobs/nightly/count");
    assert.equal(new TextDecoder().decode(kv.value), "2", "a refused run changed nothing");
    assert.equal(kv.token, second.token);
    await assert.rejects(c.get("jobs/nightly"), (err) => isError(err, NotFoundError), "the example released its lease");
  } finally {
    c.close();
  }
});
