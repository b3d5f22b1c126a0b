// Takes the screenshots docs/dashboard.md shows: `tenure demo --ui` with a
// workload beside it (leases renewed by `tenure run`, a semaphore with two
// of its three slots held, a holder waiting in a queue, a fenced write
// rejected), each view at 1400 px (docs/img/dashboard-VIEW.png) and 400 px
// (dashboard-VIEW-narrow.png) wide, in headless Chromium. Run with `npm run
// screenshots` after changing the page; look at the result before
// committing it.
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const web = dirname(fileURLToPath(import.meta.url));
const repo = resolve(web, "../..");
const out = join(repo, "docs/img");
const chromiumPath = process.env.CHROMIUM ?? "/usr/bin/chromium";
const dir = mkdtempSync(join(tmpdir(), "tenure-shots-"));
const tenure = join(dir, "tenure");
const procs = [];

function start(args, opts = {}) {
  const p = spawn(tenure, args, { stdio: ["ignore", "ignore", "pipe"], ...opts });
  procs.push(p);
  return p;
}

/** cli runs tenure to its end and fails unless it exits 0. */
function cli(...args) {
  execFileSync(tenure, args, { stdio: ["ignore", "ignore", "pipe"] });
}

const delay = (ms) => new Promise((r) => setTimeout(r, ms));

try {
  execFileSync("go", ["build", "-o", tenure, "./cmd/tenure"], { cwd: repo, stdio: "inherit" });
  // The demo runs its scenarios (with a leader crash) and keeps its
  // cluster up; its address comes on stderr.
  const demo = start(["demo", "--ui"]);
  const base = await new Promise((res, rej) => {
    let err = "";
    demo.stderr.on("data", (b) => {
      err += b;
      const m = err.match(/stays up at (http:\/\/[^/\s]+)/);
      if (m) res(m[1]);
    });
    demo.on("exit", (code) => rej(new Error(`tenure demo exited ${code}: ${err}`)));
  });
  const ep = ["--endpoints", new URL(base).host];
  console.log(`demo dashboard at ${base}/ui/`);

  // The workload.
  for (const [name, holder, ttl, limit] of [
    ["jobs/nightly-report", "batch-7", "6s"],
    ["svc/scheduler", "sched-a", "10s"],
    ["pool/gpu", "trainer-1", "8s", "3"],
    ["pool/gpu", "trainer-2", "8s", "3"],
  ]) {
    start([...ep, "run", name, "--holder", holder, "--ttl", ttl, ...(limit ? ["--limit", limit] : []), "--", "sleep", "600"]);
  }
  cli(...ep, "acquire", "queue/export", "--holder", "exporter-1", "--ttl", "120s");
  start([...ep, "acquire", "queue/export", "--holder", "exporter-2", "--ttl", "10s", "--wait", "--timeout", "300s"]);
  // Some seconds of it for the rates and the renewal counts, then a
  // fenced write with a token that is no longer current: rejected.
  await delay(10_000);
  const token = (name, holder) => {
    const out = execFileSync(tenure, [...ep, "acquire", name, "--holder", holder, "--ttl", "30s", "-o", "json"], { encoding: "utf8" });
    return String(JSON.parse(out).token);
  };
  const a = token("billing/invoices", "invoicer-a");
  cli(...ep, "kv", "put", "invoices/run", "a-1", "--lease", "billing/invoices", "--token", a);
  cli(...ep, "release", "billing/invoices", "--token", a);
  const b = token("billing/invoices", "invoicer-b");
  cli(...ep, "kv", "put", "invoices/run", "b-1", "--lease", "billing/invoices", "--token", b);
  try {
    cli(...ep, "kv", "put", "invoices/run", "a-2", "--lease", "billing/invoices", "--token", a);
    throw new Error("the stale write was accepted");
  } catch (e) {
    if (e.status !== 4) throw e; // 4: rejected by fencing
  }
  await delay(2_000);

  const browser = await chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox", "--disable-gpu"] });
  mkdirSync(out, { recursive: true });
  for (const [width, height] of [[1400, 900], [400, 860]]) {
    const page = await browser.newPage({ viewport: { width, height } });
    page.on("pageerror", (e) => console.error("page error:", e));
    for (const [view, file] of [["leases", "leases"], ["events", "events"], ["timeline/demo/", "timeline"], ["cluster", "cluster"], ["metrics", "metrics"]]) {
      await page.goto(`${base}/ui/#${view}`);
      await page.reload(); // a fresh page for each view
      await page.waitForSelector("#conn[data-state=live]", { timeout: 10_000 });
      const ready = { leases: "#leases tbody tr[data-name]", events: "#events tbody tr", timeline: "#tl-list .tl-chart svg", cluster: "#members tbody tr", metrics: "#chart-lat svg" }[file];
      await page.waitForSelector(ready, { timeout: 10_000 });
      await delay(300); // countdowns and fonts settle
      const path = join(out, `dashboard-${file}${width < 1000 ? "-narrow" : ""}.png`);
      await page.screenshot({ path });
      console.log(path);
    }
    await page.close();
  }
  await browser.close();
} finally {
  for (const p of procs.reverse()) p.kill("SIGINT"); // as Ctrl-C
  await Promise.all(procs.map((p) => (p.exitCode === null && p.signalCode === null ? new Promise((r) => p.on("exit", r)) : null)));
  rmSync(dir, { recursive: true, force: true });
}
