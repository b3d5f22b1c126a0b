// Real processes for the browser tests: tenured and tenure built once with
// go build (test/run.mjs passes them in TENURED_BIN and TENURE_BIN),
// started on free loopback ports and killed when the test process ends;
// and a headless Chromium driven by playwright-core.
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
// The TypeScript client's test helpers use only Node's own modules; their
// processes and directories go when the test process ends.
import { eventually, freePort, Node as TenuredNode, tempDir, tenuredBin } from "../../../clients/ts/test/helpers/tenured.js";

export { eventually, freePort, tempDir };

export const webDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const repoDir = resolve(webDir, "../..");

let tenureBin;
/** bin returns the path of the tenured or tenure binary, building it once. */
export function bin(name) {
  if (name === "tenured") return tenuredBin();
  if (tenureBin) return tenureBin;
  if (process.env.TENURE_BIN && existsSync(process.env.TENURE_BIN)) return (tenureBin = process.env.TENURE_BIN);
  const out = join(tempDir("tenure-ui-bin-"), "tenure");
  execFileSync("go", ["build", "-o", out, "./cmd/tenure"], { cwd: repoDir, stdio: "inherit" });
  return (tenureBin = out);
}

/** Node is one tenured process, with the dashboard's address. */
export class Node extends TenuredNode {
  constructor(id, opts = {}) {
    // Slow raft timing: the machine running the tests may be busy, and
    // a leader lost to a late heartbeat is not what these tests are about.
    super(id, { electionTimeout: "1s", ...opts });
  }

  url(path = "/ui/") {
    return `http://${this.api}${path}`;
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
