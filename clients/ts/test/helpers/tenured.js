// Real tenured processes for the tests: built once with go build from the
// repository (or taken from TENURED_BIN, which test/run.mjs sets), started
// on free loopback ports, and killed when the test process ends.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, existsSync } from "node:fs";
import { createServer } from "node:net";
import { get as httpsGet } from "node:https";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as delay } from "node:timers/promises";

export const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const repoDir = resolve(pkgDir, "../..");

const live = new Set();
const tmpDirs = new Set();
const groups = new Set();

/** spawnGroup starts a process in a process group of its own, killed
 * (with everything it started) by killGroup or when the test process
 * ends. */
export function spawnGroup(cmd, args, opts) {
  const p = spawn(cmd, args, { ...opts, detached: true });
  groups.add(p);
  p.on("exit", () => groups.delete(p));
  return p;
}

/** killGroup kills p's process group with SIGKILL. */
export function killGroup(p) {
  try {
    process.kill(-p.pid, "SIGKILL");
  } catch {}
}
function killAll() {
  for (const p of live) {
    try {
      process.kill(p.pid, "SIGCONT");
      p.kill("SIGKILL");
    } catch {}
  }
  for (const p of groups) {
    try {
      process.kill(-p.pid, "SIGKILL");
    } catch {}
  }
  for (const d of tmpDirs) rmSync(d, { recursive: true, force: true });
}
process.on("exit", killAll);
// The test runner ends a file that timed out with a signal: kill the
// servers first.
for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"]) {
  process.on(sig, () => {
    killAll();
    process.exit(128 + (sig === "SIGINT" ? 2 : sig === "SIGHUP" ? 1 : 15));
  });
}

/** tempDir makes a directory that is removed when the process exits. */
export function tempDir(prefix = "tenure-ts-") {
  const d = mkdtempSync(join(tmpdir(), prefix));
  tmpDirs.add(d);
  return d;
}

let bin;
/** tenuredBin returns the path of a tenured binary, building it once. */
export function tenuredBin() {
  if (bin) return bin;
  if (process.env.TENURED_BIN && existsSync(process.env.TENURED_BIN)) return (bin = process.env.TENURED_BIN);
  const out = join(tempDir("tenure-ts-bin-"), "tenured");
  execFileSync("go", ["build", "-o", out, "./cmd/tenured"], { cwd: repoDir, stdio: "inherit" });
  return (bin = out);
}

let cliBin;
/** tenureBin returns the path of a tenure (CLI) binary, building it once. */
export function tenureBin() {
  if (cliBin) return cliBin;
  if (process.env.TENURE_BIN && existsSync(process.env.TENURE_BIN)) return (cliBin = process.env.TENURE_BIN);
  const out = join(tempDir("tenure-ts-bin-"), "tenure");
  execFileSync("go", ["build", "-o", out, "./cmd/tenure"], { cwd: repoDir, stdio: "inherit" });
  return (cliBin = out);
}

/**
 * portRange is where freePort picks ports: [lo, hi), below the kernel's
 * ephemeral range, as the Go tests' internal/tenuredproc does. A port
 * from listen(0), or from that range, can be handed to any outgoing
 * connection as its local port once it is free again, and then a node
 * restarted on it (after a SIGKILL, say) cannot bind it.
 */
function portRange() {
  let lo = 20000;
  let hi = 32768;
  try {
    const [eph] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(Number);
    if (eph > 12000) {
      hi = eph;
      lo = Math.max(10000, hi - 12768);
    }
  } catch {
    // not Linux: the defaults
  }
  return [lo, hi];
}

const handedOut = new Set();

/**
 * freePort returns a loopback port below the ephemeral range that was free
 * a moment ago and that this process has not handed out before.
 */
export async function freePort() {
  const [lo, hi] = portRange();
  for (let i = 0; i < 200; i++) {
    const port = lo + Math.floor(Math.random() * (hi - lo));
    if (handedOut.has(port)) continue;
    const free = await new Promise((res) => {
      const s = createServer();
      s.on("error", () => res(false));
      s.listen(port, "127.0.0.1", () => s.close(() => res(true)));
    });
    if (free) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error(`no free port in [${lo}, ${hi}) after 200 tries`);
}

/**
 * eventually calls fn until it returns without throwing or timeoutMs
 * passes; the failure says what was awaited and the last error.
 */
export async function eventually(what, timeoutMs, fn, everyMs = 50) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`waited ${timeoutMs}ms for ${what}; last error: ${last?.message ?? last}`);
    }
    await delay(everyMs);
  }
}

/** Node is one tenured process. */
export class Node {
  /** args are extra flags (TLS, auth); tlsCa, the CA's PEM, makes
   * waitReady use https. */
  constructor(id, { join: joinAddr, electionTimeout = "300ms", args = [], tlsCa } = {}) {
    this.id = id;
    this.extraArgs = args;
    this.tlsCa = tlsCa;
    this.joinAddr = joinAddr;
    this.electionTimeout = electionTimeout;
    this.dataDir = join(tempDir(`tenure-ts-${id}-`), "data");
    this.log = [];
    this.proc = undefined;
  }

  /** start picks ports (the first time) and starts the process. */
  async start() {
    if (!this.api) {
      this.api = `127.0.0.1:${await freePort()}`;
      this.raft = `127.0.0.1:${await freePort()}`;
    }
    const args = ["--node-id", this.id, "--data-dir", this.dataDir, "--listen", this.api, "--raft-listen", this.raft,
      "--election-timeout", this.electionTimeout, "--log-level", "warn"];
    if (this.joinAddr) args.push("--join", this.joinAddr);
    args.push(...this.extraArgs);
    const p = spawn(tenuredBin(), args, { stdio: ["ignore", "pipe", "pipe"] });
    this.proc = p;
    live.add(p);
    const keep = (b) => {
      this.log.push(b.toString());
      if (this.log.length > 200) this.log.shift();
    };
    p.stdout.on("data", keep);
    p.stderr.on("data", keep);
    p.exited = new Promise((r) => p.on("exit", (code, sig) => {
      live.delete(p);
      r({ code, sig });
    }));
    return this;
  }

  /** waitReady polls /readyz until it answers 200. */
  async waitReady(timeoutMs = 20_000) {
    await eventually(`${this.id} (${this.api}) to answer /readyz with 200`, timeoutMs, async () => {
      if (this.proc.exitCode !== null) throw new Error(`exited with ${this.proc.exitCode}: ${this.log.join("")}`);
      const status = this.tlsCa ? await httpsStatus(`https://${this.api}/readyz`, this.tlsCa)
        : (await fetch(`http://${this.api}/readyz`, { signal: AbortSignal.timeout(1000) })).status;
      if (status !== 200) throw new Error(`status ${status}`);
    }, 100);
  }

  /** kill sends SIGKILL and waits for the exit. */
  async kill() {
    if (!this.proc || this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    try { process.kill(this.proc.pid, "SIGCONT"); } catch {}
    this.proc.kill("SIGKILL");
    await this.proc.exited;
  }

  pause() { this.proc.kill("SIGSTOP"); }
  resume() { this.proc.kill("SIGCONT"); }
}

/** httpsStatus GETs url over TLS verified with ca and returns the status. */
function httpsStatus(url, ca) {
  return new Promise((res, rej) => {
    const req = httpsGet(url, { ca, timeout: 1000 }, (r) => {
      r.resume();
      res(r.statusCode);
    });
    req.on("timeout", () => req.destroy(new Error("timed out")));
    req.on("error", rej);
  });
}

/** startNode starts a single-node cluster and waits until it serves. */
export async function startNode(opts) {
  const n = new Node("n1", opts);
  await n.start();
  await n.waitReady();
  return n;
}

/** startCluster starts size nodes, the others joining the first, and waits
 * until the first sees them all as voters with a leader. */
export async function startCluster(size, statusOf, opts = {}) {
  const first = new Node("n1", opts);
  await first.start();
  await first.waitReady();
  const nodes = [first];
  for (let i = 2; i <= size; i++) nodes.push(new Node(`n${i}`, { ...opts, join: first.api }));
  await Promise.all(nodes.slice(1).map((n) => n.start()));
  await eventually(`${size} voters and a leader`, 30_000, async () => {
    const st = await statusOf(first.api);
    const voters = st.members.filter((m) => m.suffrage === "voter").length;
    if (voters !== size || !st.leaderId) throw new Error(`${voters} voters, leader "${st.leaderId}"`);
  }, 100);
  return nodes;
}

/** stopAll kills every node. */
export async function stopAll(nodes) {
  await Promise.all(nodes.map((n) => n.kill()));
}
