// The dashboard against a real single-node tenured: a lease acquired with
// the CLI shows up with its holder and token within a second, counts down
// and leaves when it expires; a waiter shows in queue order; a write with
// a stale token shows up rejected in the events and on the timeline; an
// operator's revocation shows with its reason; the
// page works with the keyboard and at 360px.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { browser, cliOK, eventually, shot, startNode, bin } from "./helpers.mjs";
import { spawn } from "node:child_process";

let node, ctx, page;
before(async () => {
  node = await startNode();
  ctx = await browser();
  page = await ctx.newPage();
  page.on("pageerror", (e) => console.error("page error:", e));
  await page.goto(node.url("/ui/"));
  await page.waitForSelector("body[data-loaded=true]", { timeout: 10_000 });
});
after(async () => {
  await ctx?.close();
  await node?.kill();
});

const row = (name) => `#leases tbody tr[data-name="${name}"]`;

test("an acquired lease shows up within 1s with its holder and token, then expires and leaves", async () => {
  const ep = node.api;
  // The page notes when the row appears; the browser's and this process's
  // clocks are the same machine's.
  await page.evaluate((sel) => {
    window.__rowAt = 0;
    const o = new MutationObserver(() => {
      if (document.querySelector(sel)) {
        window.__rowAt = Date.now();
        o.disconnect();
      }
    });
    o.observe(document.querySelector("#leases tbody"), { childList: true });
  }, row("jobs/nightly"));
  const { out } = await cliOK(ep, ["acquire", "jobs/nightly", "--holder", "alice", "--ttl", "3s", "-o", "json"]);
  const acked = Date.now();
  const lease = JSON.parse(out);
  await page.waitForSelector(row("jobs/nightly"), { timeout: 1000 });
  const waited = Date.now() - acked;
  const shownAfter = (await page.evaluate(() => window.__rowAt)) - acked;
  console.log(`# lease row in the page ${shownAfter}ms after the acquire returned (the test saw it after ${waited}ms)`);
  assert.ok(waited < 1000, `the row was seen ${waited}ms after the CLI returned`);
  const r = page.locator(row("jobs/nightly"));
  assert.equal(await r.locator("td.holder").textContent(), "alice");
  assert.equal(Number(await r.locator("td.token").textContent()), lease.token);
  // The countdown runs.
  const left1 = parseFloat(await r.locator(".left").textContent());
  await page.waitForFunction(([sel, v]) => parseFloat(document.querySelector(sel + " .left")?.textContent ?? "99") < v,
    [row("jobs/nightly"), left1], { timeout: 2500 });

  // A second lease with a queued waiter.
  await cliOK(ep, ["acquire", "queue/report", "--holder", "worker-1", "--ttl", "20s"]);
  const waiter = spawn(bin("tenure"), ["--endpoints", ep, "acquire", "queue/report", "--holder", "worker-2", "--ttl", "5s", "--wait", "--timeout", "30s"], { stdio: "ignore" });
  try {
    await page.waitForFunction((sel) => document.querySelector(sel + " td.waiters")?.textContent?.includes("1. worker-2"),
      row("queue/report"), { timeout: 8000 });
    await shot(page, "leases");

    // The prefix filter.
    // The filter applies at the next frame (queueRender): wait for it.
    await page.fill("#prefix", "queue/");
    await page.waitForSelector(row("jobs/nightly"), { state: "hidden", timeout: 2000 });
    assert.equal(await page.locator(row("queue/report")).isVisible(), true);
    await page.fill("#prefix", "");

    // Expiry: the row is marked and then leaves.
    await page.waitForSelector(`${row("jobs/nightly")}[data-leaving=expired]`, { timeout: 10_000 });
    await shot(page, "leases-expiring");
    await page.waitForSelector(row("jobs/nightly"), { state: "detached", timeout: 6000 });
    await page.click('nav a[data-view="events"]');
    await page.waitForSelector('#events tr[data-kind=expired][data-name="jobs/nightly"]', { timeout: 4000 });
  } finally {
    waiter.kill("SIGKILL");
  }
});

test("a write with a stale token shows up rejected in the events and on the timeline", async () => {
  const ep = node.api;
  const a = JSON.parse((await cliOK(ep, ["acquire", "demo/fenced", "--holder", "A", "--ttl", "10s", "-o", "json"])).out);
  await cliOK(ep, ["kv", "put", "report", "A-1", "--lease", "demo/fenced", "--token", String(a.token)]);
  await cliOK(ep, ["release", "demo/fenced", "--token", String(a.token)]);
  const b = JSON.parse((await cliOK(ep, ["acquire", "demo/fenced", "--holder", "B", "--ttl", "10s", "-o", "json"])).out);
  await cliOK(ep, ["kv", "put", "report", "B-1", "--lease", "demo/fenced", "--token", String(b.token)]);
  await cliOK(ep, ["kv", "put", "report", "A-2", "--lease", "demo/fenced", "--token", String(a.token)], 4);
  const rejectedAt = Date.now();

  await page.goto(node.url("/ui/#events"));
  const rejected = page.locator('#events tr[data-kind=write_rejected][data-name="demo/fenced"]');
  await rejected.first().waitFor({ timeout: 1000 });
  console.log(`# rejected write shown ${Date.now() - rejectedAt}ms after the CLI returned (page reloaded)`);
  assert.equal(Number(await rejected.first().locator("td.token").textContent()), a.token);
  assert.match(await rejected.first().locator("td.detail").textContent(), /stale token/);
  assert.equal(await page.locator('#events tr[data-kind=write_accepted][data-name="demo/fenced"]').count(), 2);
  await shot(page, "events");

  // Live, without reloading: a second stale write.
  await cliOK(ep, ["kv", "put", "report", "A-3", "--lease", "demo/fenced", "--token", String(a.token)], 4);
  await eventually("a second rejected write on the live page", 1000, async () => {
    assert.equal(await rejected.count(), 2);
  });

  // The timeline: two terms with their tokens, the stale writes marked.
  await page.click(`#events tr[data-kind=write_rejected] a`);
  await page.waitForSelector(`#tl-list .term[data-token="${b.token}"]`, { timeout: 3000 });
  assert.equal(await page.locator(`#tl-list .term[data-token="${a.token}"].released`).count(), 1);
  assert.equal(await page.locator(`#tl-list .stale[data-token="${a.token}"]`).count(), 2);
  assert.match(await page.locator(".tl-chart").getAttribute("aria-label"), new RegExp(`A with token ${a.token}, released; B with token ${b.token}, held; 2 stale writes rejected`));
  await shot(page, "timeline");
});

test("an operator's revocation shows in the events and on the timeline with its reason", async () => {
  const ep = node.api;
  const a = JSON.parse((await cliOK(ep, ["acquire", "ops/rotate", "--holder", "stuck-worker", "--ttl", "30s", "-o", "json"])).out);
  await page.goto(node.url("/ui/#events"));
  await page.waitForSelector("body[data-loaded=true]", { timeout: 10_000 });
  // Live: the revocation arrives on the open page.
  await cliOK(ep, ["revoke", "ops/rotate", "--token", String(a.token), "--reason", "stuck on a bad disk"]);
  const revoked = page.locator('#events tr[data-kind=revoked][data-name="ops/rotate"]');
  await revoked.first().waitFor({ timeout: 2000 });
  assert.equal(Number(await revoked.first().locator("td.token").textContent()), a.token);
  assert.equal(await revoked.first().locator("td.holder").textContent(), "stuck-worker");
  assert.match(await revoked.first().locator("td.detail").textContent(), /stuck on a bad disk/);

  await revoked.first().locator("a").click();
  await page.waitForSelector(`#tl-list .term[data-token="${a.token}"].revoked`, { timeout: 3000 });
  assert.match(await page.locator(`#tl-list .term[data-token="${a.token}"] title`).textContent(), /revoked: stuck on a bad disk/);
  assert.match(await page.locator(".tl-chart").getAttribute("aria-label"), new RegExp(`stuck-worker with token ${a.token}, revoked \\(stuck on a bad disk\\)`));
});

test("shared grants show as shared, each with its own token", async () => {
  const ep = node.api;
  const r1 = JSON.parse((await cliOK(ep, ["acquire", "db/schema", "--holder", "reader-1", "--shared", "--ttl", "30s", "-o", "json"])).out);
  const r2 = JSON.parse((await cliOK(ep, ["acquire", "db/schema", "--holder", "reader-2", "--shared", "--ttl", "30s", "-o", "json"])).out);
  assert.notEqual(r1.token, r2.token);
  await page.goto(node.url("/ui/#leases"));
  await page.waitForSelector("body[data-loaded=true]", { timeout: 10_000 });
  for (const g of [r1, r2]) {
    const r = page.locator(`#leases tbody tr[data-name="db/schema"][data-token="${g.token}"]`);
    await r.waitFor({ timeout: 2000 });
    assert.equal(await r.locator(".slot.shared").textContent(), "shared");
  }
});

test("the keyboard reaches every view and the page fits 360px", async () => {
  await page.goto(node.url("/ui/"));
  await page.waitForSelector("body[data-loaded=true]");
  // Tab from the top: the skip link, the title, then the views.
  const seen = [];
  for (let i = 0; i < 8; i++) {
    await page.keyboard.press("Tab");
    seen.push(await page.evaluate(() => document.activeElement?.textContent?.trim() ?? ""));
  }
  assert.ok(seen.includes("Cluster"), `tabbing reached ${JSON.stringify(seen)}`);
  while ((await page.evaluate(() => document.activeElement?.textContent?.trim())) !== "Cluster") await page.keyboard.press("Shift+Tab");
  const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
  assert.notEqual(outline, "none", "the focused link shows no outline");
  await page.keyboard.press("Enter");
  await page.waitForSelector("#view-cluster:not([hidden])");
  await page.waitForSelector("#members tbody tr[data-leader=true]", { timeout: 3000 });

  await page.setViewportSize({ width: 360, height: 740 });
  for (const v of ["leases", "events", "timeline/demo/fenced", "cluster", "metrics"]) {
    await page.goto(node.url("/ui/#" + v));
    await page.waitForSelector("body[data-loaded=true]");
    const over = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(over <= 0, `#${v} is ${over}px wider than 360px`);
  }
  await page.goto(node.url("/ui/#leases"));
  await page.waitForSelector("body[data-loaded=true]");
  await shot(page, "narrow-leases");
  await page.goto(node.url("/ui/#metrics"));
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.waitForSelector("#chart-ops svg", { timeout: 5000 });
  await shot(page, "metrics");
});
