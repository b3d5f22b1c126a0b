// A leader-elected worker: run several copies and exactly one of them does
// the work at any time. The leader writes a fenced heartbeat every 500ms;
// when its lease is at risk of being lost, the signal fires before the
// cluster can grant the lease to another copy, and the work stops. Ctrl-C
// (or SIGTERM) steps down and releases the lease, so another copy takes
// over at once.
//
//   go run ./cmd/tenured --dev                    # from the repository root
//   node examples/leader-worker.mjs worker-1      # in two terminals
//   node examples/leader-worker.mjs worker-2
import { createClient } from "@tenure-io/client";

const endpoints = (process.env.TENURE_ENDPOINTS ?? "127.0.0.1:7400").split(",");
const holder = process.argv[2] ?? `worker-${process.pid}`;
const name = process.env.TENURE_NAME ?? "examples/worker";
const c = createClient({ endpoints });
const stop = new AbortController();
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => stop.abort());

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
  });

console.log(`${holder}: campaigning for ${name}`);
await c.runElection(
  name,
  async (signal, lease) => {
    console.log(`${holder}: leading with token ${lease.token}`);
    let beats = 0;
    while (!signal.aborted) {
      // Every write carries the token: a stale leader's is refused.
      await lease.put(`${name}/heartbeat`, `${holder} ${++beats}`).catch((err) => {
        if (!signal.aborted) console.log(`${holder}: write refused: ${err.message}`);
      });
      await sleep(500, signal);
    }
    console.log(`${holder}: stepped down: ${signal.reason?.message ?? signal.reason}`);
  },
  {
    signal: stop.signal,
    session: { holder, ttlMs: 3000 },
    onNewLeader: (ld) => console.log(`${holder}: the leader is ${ld.holder} (token ${ld.token})`),
  },
);
c.close();
console.log(`${holder}: done`);
