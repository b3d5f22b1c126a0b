// A leader pauses past its lease, wakes up, and its write is rejected.
//
// Worker A (a child process) takes the lease and writes. This script then
// freezes A with SIGSTOP for longer than the lease's TTL: a stop-the-world
// pause. A's lease runs out on the server and worker B is granted it, with
// a larger token, and writes. A is thawed with SIGCONT and, still believing
// it leads, writes with its old token: the fenced store refuses it.
//
//   go run ./cmd/tenured --dev          # in another terminal, from the repository root
//   node examples/paused-leader.mjs     # TENURE_ENDPOINTS=host:port,... to use another cluster
import { fork } from "node:child_process";
import { createClient, LostError, StaleTokenError } from "@tenure-io/client";

const endpoints = (process.env.TENURE_ENDPOINTS ?? "127.0.0.1:7400").split(",");
const NAME = process.env.EXAMPLE_LEASE ?? `examples/paused-${process.pid}`;
const KEY = `${NAME}/report`;
const TTL = 2000;
const start = Number(process.env.EXAMPLE_START ?? Date.now());
const log = (actor, event, token = "", outcome = "") =>
  console.log(
    `${((Date.now() - start) / 1000).toFixed(3).padStart(8)}s  ${actor.padEnd(7)}${event.padEnd(52)}${String(token).padStart(5)}  ${outcome}`,
  );

if (process.argv[2] === "worker-a") {
  // Worker A: take the lease, write, then keep "working" until woken.
  const c = createClient({ endpoints });
  const s = c.session({ holder: "A", ttlMs: TTL });
  const lease = await s.acquire(NAME);
  log("A", `acquire ${NAME}, ttl ${TTL / 1000}s`, lease.token, "granted");
  await lease.put(KEY, "A-1");
  log("A", `put report = "A-1"`, lease.token, "ok");
  process.send("ready");
  let last = performance.now();
  await new Promise((resolve) => {
    const tick = setInterval(() => {
      const now = performance.now();
      if (now - last > 1000) {
        clearInterval(tick);
        log("A", `wakes up after ${((now - last) / 1000).toFixed(1)}s, still believing it leads`);
        resolve();
      }
      last = now;
    }, 50);
  });
  // The library refuses at once: the lease's deadline has passed.
  try {
    await lease.put(KEY, "A-2");
  } catch (err) {
    if (!(err instanceof LostError)) throw err;
    log("A", `lease.put report = "A-2"`, lease.token, "refused locally: the lease is lost");
  }
  // A write that was already on its way when the pause began carries the
  // old token: the store refuses it.
  try {
    await c.put(KEY, "A-2", NAME, lease.token);
    log("A", `put report = "A-2"`, lease.token, "ACCEPTED (this must not happen)");
    process.exitCode = 1;
  } catch (err) {
    if (!(err instanceof StaleTokenError)) throw err;
    log("A", `put report = "A-2"`, lease.token, "REJECTED: stale token");
  }
  s.orphan();
  c.close();
  process.exit();
}

console.log(`A leader pauses past its lease; tenure at ${endpoints.join(",")}\n`);
console.log(`     TIME  ACTOR  EVENT${" ".repeat(47)}TOKEN  OUTCOME`);
const a = fork(new URL(import.meta.url).pathname, ["worker-a"], {
  env: { ...process.env, TENURE_ENDPOINTS: endpoints.join(","), EXAMPLE_LEASE: NAME, EXAMPLE_START: String(start) },
});
const aExited = new Promise((r) => a.on("exit", r));
process.on("exit", () => a.exitCode === null && a.signalCode === null && a.kill("SIGKILL")); // never leave A frozen
await new Promise((resolve, reject) => {
  a.on("message", resolve);
  a.on("exit", (code) => reject(new Error(`worker A exited with ${code}`)));
});

const c = createClient({ endpoints });
const pause = TTL * 1.5;
await new Promise((r) => setTimeout(r, 300)); // A works for a moment
a.kill("SIGSTOP");
const pausedAt = Date.now();
log("script", `SIGSTOP A (pid ${a.pid}) for ${pause / 1000}s`, "", "frozen");
const b = c.session({ holder: "B", ttlMs: TTL });
log("B", `acquire ${NAME}: held by A, waits`, "", "queued");
const lb = await b.acquire(NAME);
log("B", `acquire ${NAME}, ttl ${TTL / 1000}s`, lb.token, "granted");
await lb.put(KEY, "B-1");
log("B", `put report = "B-1"`, lb.token, "ok");
await new Promise((r) => setTimeout(r, Math.max(0, pause - (Date.now() - pausedAt))));
log("script", "SIGCONT A", "", "resumed");
a.kill("SIGCONT");
const code = await aExited;
const kv = await c.kvGet(KEY);
const value = new TextDecoder().decode(kv.value);
log("check", `read report = "${value}"`, kv.token, value === "B-1" ? "B's write kept" : "LOST UPDATE");
await lb.release();
await b.close();
c.close();
if (code !== 0 || value !== "B-1") {
  console.log("\nnot as expected");
  process.exit(1);
}
console.log(`\nThe store rejected A's late write because B had been granted token ${lb.token}; the value is B's "B-1".`);
