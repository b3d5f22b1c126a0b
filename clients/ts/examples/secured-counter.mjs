// Counts the runs of a nightly job on a secured cluster: connects over TLS
// with a bearer token (or a client certificate), takes the job's lease and
// increments a counter in the fenced store with a read-modify-write that
// is fenced on the read as well as on the write. Each run prints the new
// count and the token that wrote it.
//
// The cluster is set up as in docs/security.md (tenure certs init,
// tenured --tls-cert --tls-key --client-ca --auth-file); certs/ holds the
// files of tenure certs init (ca.crt, and app.crt, app.key for a client
// certificate):
//
//   TENURE_AUTH_TOKEN=tnr_... node examples/secured-counter.mjs   # with a token
//   node examples/secured-counter.mjs                              # with certs/app.crt
//
// TENURE_ENDPOINTS=host:port,... points it at the cluster, TENURE_CERTS at
// another directory of certificates.
import { readFileSync } from "node:fs";
import { createClient } from "@tenure-io/client";

const endpoints = (process.env.TENURE_ENDPOINTS ?? "127.0.0.1:7400").split(",");
const certs = process.env.TENURE_CERTS ?? "certs";

const client = process.env.TENURE_AUTH_TOKEN
  ? createClient({
      endpoints,
      tls: { ca: readFileSync(`${certs}/ca.crt`) }, // makes every endpoint https
      token: process.env.TENURE_AUTH_TOKEN, // sent as Authorization: Bearer ...
    })
  : // or a client certificate (its CN is the principal) instead of a token:
    createClient({
      endpoints,
      tls: { ca: readFileSync(`${certs}/ca.crt`), cert: readFileSync(`${certs}/app.crt`), key: readFileSync(`${certs}/app.key`) },
    });

const s = client.session({ ttlMs: 10_000 });
try {
  const lease = await s.acquire("jobs/nightly");
  // Reads the count, refuses if a newer token wrote it, writes count+1 with lease.token:
  const kv = await lease.update("jobs/nightly/count", (cur) => {
    const n = cur === undefined ? 0 : Number(new TextDecoder().decode(cur.value));
    return String(n + 1);
  });
  console.log(`count = ${new TextDecoder().decode(kv.value)} (written with token ${kv.token})`);
} finally {
  await s.close(); // releases the lease
  client.close();
}
