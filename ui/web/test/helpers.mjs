// Real processes for the browser tests: tenured and tenure built once with
// go build (test/run.mjs passes them in TENURED_BIN and TENURE_BIN),
// started on free loopback ports and killed when the test process ends;
// and a headless Chromium driven by playwright-core.
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
// The TypeScript client's test helpers use only Node's own modules.
import { eventually, freePort } from "../../../clients/ts/test/helpers/tenured.js";

export { eventually, freePort };

export const webDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const repoDir = resolve(webDir, "../..");

const live = new Set();
const tmpDirs = new Set();
function killAll() {
  for (const p of live) {
    try {
      p.kill("SIGKILL");
    } catch {}
  }
  for (const d of tmpDirs) rmSync(d, { recursive: true, force: true });
}
process.on("exit", killAll);
for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"]) {
  process.on(sig, () => {
    killAll();
    process.exit(128 + (sig === "SIGINT" ? 2 : sig === "SIGHUP" ? 1 : 15));
  });
}

export function tempDir(prefix = "tenure-ui-") {
  const d = mkdtempSync(join(tmpdir(), prefix));
  tmpDirs.add(d);
  return d;
}

const bins = {};
/** bin returns the path of the tenured or tenure binary, building it once. */
export function bin(name) {
  if (bins[name]) return bins[name];
  const env = process.env[name === "tenured" ? "TENURED_BIN" : "TENURE_BIN"];
  if (env && existsSync(env)) return (bins[name] = env);
  const out = join(tempDir("tenure-ui-bin-"), name);
  execFileSync("go", ["build", "-o", out, "./cmd/" + name], { cwd: repoDir, stdio: "inherit" });
  return (bins[name] = out);
}

/** Node is one tenured process. */
export class Node {
  constructor(id, { join: joinAddr } = {}) {
    this.id = id;
    this.joinAddr = joinAddr;
    this.dataDir = join(tempDir(`tenure-ui-${id}-`), "data");
    this.log = [];
  }

  async start() {
    this.api = `127.0.0.1:${await freePort()}`;
    this.raft = `127.0.0.1:${await freePort()}`;
    const args = ["--node-id", this.id, "--data-dir", this.dataDir, "--listen", this.api, "--raft-listen", this.raft,
      // Slow raft timing: the machine running the tests may be busy, and
      // a leader lost to a late heartbeat is not what these tests are about.
      "--election-timeout", "1s", "--log-level", "warn"];
    if (this.joinAddr) args.push("--join", this.joinAddr);
    const p = spawn(bin("tenured"), args, { stdio: ["ignore", "pipe", "pipe"] });
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

  async waitReady(timeoutMs = 20_000) {
    await eventually(`${this.id} (${this.api}) to answer /readyz with 200`, timeoutMs, async () => {
      if (this.proc.exitCode !== null) throw new Error(`exited with ${this.proc.exitCode}: ${this.log.join("")}`);
      const r = await fetch(`http://${this.api}/readyz`, { signal: AbortSignal.timeout(1000) });
      if (r.status !== 200) throw new Error(`status ${r.status}`);
    }, 100);
  }

  url(path = "/ui/") {
    return `http://${this.api}${path}`;
  }

  async kill() {
    if (!this.proc || this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    this.proc.kill("SIGKILL");
    await this.proc.exited;
  }
}

export async function startNode() {
  const n = new Node("n1");
  await n.start();
  await n.waitReady();
  return n;
}

/** startCluster starts size nodes, the others joining the first, and
 * waits until the dashboard's cluster view sees them all as voters with a
 * leader. */
export async function startCluster(size) {
  const first = new Node("n1");
  await first.start();
  await first.waitReady();
  const nodes = [first];
  for (let i = 2; i <= size; i++) nodes.push(new Node(`n${i}`, { join: first.api }));
  await Promise.all(nodes.slice(1).map((n) => n.start()));
  await eventually(`${size} voters and a leader`, 30_000, async () => {
    const c = await (await fetch(first.url("/ui/api/cluster"))).json();
    const voters = c.members.filter((m) => m.voter && m.reachable).length;
    if (voters !== size || !c.leader_id) throw new Error(`${voters} reachable voters, leader "${c.leader_id}"`);
  }, 100);
  await Promise.all(nodes.slice(1).map((n) => n.waitReady()));
  return nodes;
}

/** cli runs the tenure CLI against endpoints and returns its exit code and output. */
export function cli(endpoints, ...args) {
  return new Promise((res) => {
    const p = spawn(bin("tenure"), ["--endpoints", endpoints, ...args], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    p.stdout.on("data", (b) => (out += b));
    p.stderr.on("data", (b) => (err += b));
    p.on("exit", (code) => res({ code, out, err }));
  });
}

/** cliOK runs the CLI and fails unless it exits with want (default 0). */
export async function cliOK(endpoints, args, want = 0) {
  const r = await cli(endpoints, ...args);
  if (r.code !== want) throw new Error(`tenure ${args.join(" ")}: exit ${r.code}, want ${want}: ${r.err}${r.out}`);
  return r;
}

export const chromiumPath = process.env.CHROMIUM ?? "/usr/bin/chromium";

/** browser launches a headless Chromium with a fresh profile. */
export async function browser() {
  if (!existsSync(chromiumPath)) throw new Error(`no Chromium at ${chromiumPath}: install it (apt-get install -y chromium) or set CHROMIUM`);
  return chromium.launchPersistentContext(tempDir("tenure-ui-profile-"), {
    executablePath: chromiumPath,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1280, height: 800 },
  });
}

/** artifacts is the directory the screenshots go to (printed once). */
let artifactDir;
export function artifacts() {
  if (artifactDir) return artifactDir;
  artifactDir = process.env.UI_ARTIFACTS || join(tmpdir(), `tenure-ui-artifacts-${process.pid}`);
  mkdirSync(artifactDir, { recursive: true });
  console.log(`# screenshots: ${artifactDir}`);
  return artifactDir;
}

/** shot saves a screenshot of page as NAME.png in the artifact directory. */
export async function shot(page, name) {
  const file = join(artifacts(), name + ".png");
  await page.screenshot({ path: file, fullPage: false });
  return file;
}
