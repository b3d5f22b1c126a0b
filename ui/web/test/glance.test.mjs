// The dashboard reads at a glance, against a real tenured with a workload:
// a lease renewed every second, a semaphore with two of its three slots
// held, fenced writes (one rejected) and a term that lasted milliseconds.
// The charts show the minutes before the page was opened; the events are
// newest first with renewals counted, not listed; times are wall-clock
// times with the cluster time on hover; a semaphore's rows say which
// slot; a short term on the timeline is visible and labelled; and at 400
// px nothing scrolls sideways while at 1400 px no chart shows scrollbars.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { bin, browser, cliOK, eventually, shot, startNode } from "./helpers.mjs";

let node, ctx, page, renewer;
const tokens = {};
let rejectedAround; // [before, after] the rejected write, Unix ms

/** metric reads a counter from the node's Prometheus endpoint (not the
 * dashboard's, which the tests below must be the first to ask). */
async function metric(name) {
  const text = await (await fetch(node.url("/metrics"))).text();
  const m = text.match(new RegExp(`^${name} (\\S+)$`, "m"));
  return m ? Number(m[1]) : 0;
}

before(async () => {
  node = await startNode();
  const ep = node.api;
  // Renewed every second (TTL/3) until the test ends.
  renewer = spawn(bin("tenure"), ["--endpoints", ep, "run", "renew/steady", "--holder", "cron", "--ttl", "3s", "--", "sleep", "300"], { stdio: "ignore" });
  // A semaphore of 3 with two holders.
  await cliOK(ep, ["acquire", "pool/gpu", "--limit", "3", "--holder", "gpu-a", "--ttl", "60s"]);
  await cliOK(ep, ["acquire", "pool/gpu", "--limit", "3", "--holder", "gpu-b", "--ttl", "60s"]);
  // A long term, then one of a few milliseconds, on one name.
  const long = JSON.parse((await cliOK(ep, ["acquire", "demo/short", "--holder", "slow", "--ttl", "60s", "-o", "json"])).out);
  await cliOK(ep, ["kv", "put", "s", "1", "--lease", "demo/short", "--token", String(long.token)]);
  // Renewals before anything else is looked at: the term above lasts
  // while they happen, and the charts get seconds of history.
  await eventually("3 renewals", 20_000, async () => {
    const n = await metric("tenure_renewals_total");
    if (n < 3) throw new Error(`${n} renewals`);
  }, 100);
  await cliOK(ep, ["release", "demo/short", "--token", String(long.token)]);
  const short = JSON.parse((await cliOK(ep, ["acquire", "demo/short", "--holder", "quick", "--ttl", "60s", "-o", "json"])).out);
  await cliOK(ep, ["release", "demo/short", "--token", String(short.token)]);
  tokens.long = long.token;
  tokens.short = short.token;
  // The write with the long term's token, after the short term: rejected.
  // It is the last event.
  const t0 = Date.now();
  await cliOK(ep, ["kv", "put", "s", "2", "--lease", "demo/short", "--token", String(long.token)], 4);
  rejectedAround = [t0, Date.now()];

  ctx = await browser();
  page = await ctx.newPage();
  page.on("pageerror", (e) => console.error("page error:", e));
  await page.setViewportSize({ width: 1400, height: 900 });
});
after(async () => {
  renewer?.kill("SIGTERM");
  await ctx?.close();
  await node?.kill();
});

test("the charts show the minutes before the page was opened", async () => {
  const opened = Date.now();
  const first = page.waitForResponse((r) => r.url().includes("/ui/api/metrics"));
  await page.goto(node.url("/ui/#metrics"));
  const samples = (await (await first).json()).samples;
  const earlier = samples.filter((s) => s.t <= opened);
  assert.ok(earlier.length >= 2, `the first metrics the page got had ${earlier.length} samples from before it opened (${JSON.stringify(samples)}), want those since the node started`);
  assert.ok(earlier.some((s) => s.ops > 0), `no operations in the samples before the page opened: ${JSON.stringify(samples)}`);
  await page.waitForSelector("#chart-ops svg path.line.s1");
  const label = await page.locator("#chart-ops").getAttribute("aria-label");
  assert.match(label, /latest of \d+ seconds/);
  await shot(page, "glance-metrics");
});

test("the events are newest first, with renewals counted rather than listed", async () => {
  await page.goto(node.url("/ui/#events"));
  await page.waitForSelector("#events tbody tr[data-kind=write_rejected]", { timeout: 5000 });
  assert.equal(await page.locator("#events tbody tr[data-kind=renewed]").count(), 0, "renewals are listed one row per second");
  const walls = await page.locator("#events tbody tr").evaluateAll((trs) => trs.map((tr) => Number(tr.dataset.wall)));
  for (let i = 1; i < walls.length; i++) {
    assert.ok(walls[i - 1] >= walls[i], `row ${i} (${walls[i]}) is newer than the row above it (${walls[i - 1]})`);
  }
  // The renewals: counted above the table, and counting.
  await page.waitForFunction(() => Number(document.querySelector("#renewals")?.dataset.minute) >= 3, null, { timeout: 5000 });
  const before = Number(await page.locator("#renewals").getAttribute("data-minute"));
  await page.waitForFunction((n) => Number(document.querySelector("#renewals")?.dataset.minute) > n, before, { timeout: 5000 });
  assert.match(await page.locator("#renewals").textContent(), /Renewals.*in the last minute/);
  await shot(page, "glance-events");
});

const wallRE = /^\d{2}:\d{2}:\d{2}\.\d{3}$/;

test("times are wall-clock times, with the cluster time on hover", async () => {
  await page.goto(node.url("/ui/#events"));
  const row = page.locator("#events tbody tr[data-kind=write_rejected]").first();
  await row.waitFor({ timeout: 5000 });
  const time = row.locator("td.at time");
  assert.equal(await time.count(), 1, `the rejected write's time is not a <time>: ${await row.locator("td.at").innerHTML()}`);
  const text = await time.textContent();
  assert.match(text, wallRE, `the rejected write's time reads ${JSON.stringify(text)}`);
  assert.match(await time.getAttribute("title"), /^cluster time \d+\.\d{3}s$/);
  const wall = Date.parse(await time.getAttribute("datetime"));
  const [t0, t1] = rejectedAround;
  assert.ok(wall >= t0 - 5 && wall <= t1 + 5, `the rejected write shows as ${new Date(wall).toISOString()}, want between ${new Date(t0).toISOString()} and ${new Date(t1).toISOString()}`);
  const d = new Date(wall);
  const p2 = (n) => String(n).padStart(2, "0");
  assert.equal(text, `${p2(d.getHours())}:${p2(d.getMinutes())}:${p2(d.getSeconds())}.${String(d.getMilliseconds()).padStart(3, "0")}`);
  // Every event's time.
  for (const t of await page.locator("#events tbody td.at").allTextContents()) assert.match(t, wallRE);

  // The timeline: its table and its axis.
  await page.goto(node.url("/ui/#timeline/demo/short"));
  await page.waitForSelector("#tl-list .tl-table tbody tr");
  for (const t of await page.locator("#tl-list .tl-table td.at").allTextContents()) assert.match(t, wallRE);
  for (const title of await page.locator("#tl-list .tl-table td.at time").evaluateAll((ts) => ts.map((t) => t.title))) {
    assert.match(title, /^cluster time \d+\.\d{3}s$/);
  }
  for (const t of await page.locator("#tl-list .tl-chart .tick").allTextContents()) assert.match(t, /^\d{2}:\d{2}:\d{2}(\.\d{3})?$/);
});

test("a semaphore's rows say which slot each is", async () => {
  await page.goto(node.url("/ui/#leases"));
  await page.waitForSelector('#leases tbody tr[data-name="pool/gpu"]');
  const slots = await page.locator('#leases tbody tr[data-name="pool/gpu"] .slot').allTextContents();
  assert.deepEqual(slots, ["slot 1 of 3", "slot 2 of 3"]);
  assert.equal(await page.locator('#leases tbody tr[data-name="renew/steady"] .slot').count(), 0, "a plain lease is marked as a slot");
  await shot(page, "glance-leases");
});

test("a renewed lease's countdown goes back up", async () => {
  await page.goto(node.url("/ui/#leases"));
  const left = '#leases tbody tr[data-name="renew/steady"] .left';
  await page.waitForSelector(left);
  // Renewed every second with a TTL of 3s: the time left falls, then
  // rises with the next renewal, in the same page.
  await page.evaluate(() => delete window.__left);
  await page.waitForFunction((sel) => {
    const v = parseFloat(document.querySelector(sel)?.textContent ?? "");
    const before = window.__left;
    window.__left = v;
    return before !== undefined && v > before + 0.3;
  }, left, { polling: 100, timeout: 10_000 });
});

test("a short term on the timeline is visible, labelled where it fits and explained on hover", async () => {
  await page.goto(node.url("/ui/#timeline/demo/short"));
  await page.waitForSelector("#view-timeline:not([hidden])");
  await page.waitForSelector(`#tl-list g.term[data-token="${tokens.short}"] rect`, { state: "visible" });
  const terms = await page.locator("#tl-list g.term").evaluateAll((gs) => gs.map((g) => {
    const r = g.querySelector("rect").getBBox();
    const label = g.querySelector("text");
    const b = label?.getBBox();
    return {
      token: g.dataset.token, x: r.x, y: r.y, width: r.width, rect: g.querySelector("rect").outerHTML, title: g.querySelector("title")?.textContent ?? "",
      label: label ? { text: label.textContent, out: label.classList.contains("out"), x: b.x, width: b.width } : null,
    };
  }));
  const others = (t) => terms.filter((o) => o !== t);
  for (const t of terms) {
    assert.ok(t.width >= 6, `term ${t.token} is drawn ${t.width.toFixed(1)}px wide: ${t.rect}`);
    if (!t.label) continue;
    if (t.label.out) {
      // Beside its bar, and over no other bar.
      assert.ok(t.label.x >= t.x + t.width, `term ${t.token}'s label starts inside its bar`);
      for (const o of others(t).filter((o) => o.y === t.y)) {
        assert.ok(t.label.x + t.label.width <= o.x || t.label.x >= o.x + o.width, `term ${t.token}'s label runs over term ${o.token}'s bar`);
      }
    } else {
      assert.ok(t.label.width <= t.width - 2, `term ${t.token}'s label "${t.label.text}" (${t.label.width.toFixed(0)}px) overflows its bar (${t.width.toFixed(0)}px)`);
    }
  }
  // Every bar explains itself on hover, with wall-clock times.
  for (const t of terms) {
    assert.match(t.title, new RegExp(`token ${t.token}: \\d{2}:\\d{2}:\\d{2}\\.\\d{3} to `), `term ${t.token}'s tooltip`);
  }
  const short = terms.find((t) => t.token === String(tokens.short));
  const long = terms.find((t) => t.token === String(tokens.long));
  assert.ok(short.width < long.width / 4, `the short term (${short.width}px) is not drawn shorter than the long one (${long.width}px)`);
  await shot(page, "glance-timeline");
});

const ready = {
  leases: "#leases tbody tr[data-name]",
  events: "#events tbody tr",
  "timeline/demo/short": "#tl-list .tl-chart svg",
  cluster: "#members tbody tr",
  metrics: "#chart-lat svg",
};

/** overflows lists what in the page's main part scrolls: sideways (tables,
 * their frames, charts) or, for charts, down. */
function overflows(page) {
  return page.evaluate(() => {
    const bad = [];
    const name = (e) => e.id ? "#" + e.id : e.className ? "." + String(e.className).split(" ").join(".") : e.tagName;
    if (document.documentElement.scrollWidth > window.innerWidth) bad.push(`the page is ${document.documentElement.scrollWidth}px wide`);
    for (const e of document.querySelectorAll("main .scroll, main table, main .chart")) {
      if (!e.getClientRects().length) continue; // not shown
      if (e.scrollWidth > e.clientWidth) bad.push(`${name(e)} scrolls sideways (${e.scrollWidth} > ${e.clientWidth})`);
      if (e.classList.contains("chart") && e.scrollHeight > e.clientHeight) bad.push(`${name(e)} scrolls down (${e.scrollHeight} > ${e.clientHeight})`);
    }
    return bad;
  });
}

test("at 400px no view scrolls sideways: its tables stack or drop columns", async () => {
  await page.setViewportSize({ width: 400, height: 860 });
  for (const v of Object.keys(ready)) {
    await page.goto(node.url("/ui/#" + v));
    await page.waitForSelector(ready[v], { timeout: 5000 });
    assert.deepEqual(await overflows(page), [], `#${v} at 400px`);
    await shot(page, `glance-${v.replace(/\//g, "_")}-400`);
  }
});

test("at 400px the timeline shows its newest end", async () => {
  await page.setViewportSize({ width: 400, height: 860 });
  await page.goto(node.url("/ui/#timeline/demo/short"));
  await page.waitForSelector(`#tl-list g.term[data-token="${tokens.short}"] rect`);
  const seen = await page.evaluate((token) => {
    const host = document.querySelector("#tl-list .tl-chart");
    const cs = getComputedStyle(host);
    const box = host.getBoundingClientRect();
    const inner = [box.left + parseFloat(cs.borderLeftWidth), box.right - parseFloat(cs.borderRightWidth)];
    const chart = host.querySelector("svg").getBoundingClientRect();
    const bar = host.querySelector(`g.term[data-token="${token}"] rect`).getBoundingClientRect();
    return { inner, chart: [chart.left, chart.right], bar: [bar.left, bar.right], scrolled: host.scrollLeft };
  }, tokens.short);
  assert.ok(seen.chart[1] <= seen.inner[1] + 0.5, `the timeline is drawn to ${seen.chart[1]}px, past its frame's ${seen.inner[1]}px (scrolled ${seen.scrolled}px)`);
  assert.ok(seen.bar[0] >= seen.inner[0] && seen.bar[1] <= seen.inner[1], `the newest term is drawn at ${seen.bar} outside the frame's ${seen.inner}`);
});

test("at 1400px no chart has scrollbars", async () => {
  await page.setViewportSize({ width: 1400, height: 900 });
  for (const v of ["timeline/demo/short", "metrics"]) {
    await page.goto(node.url("/ui/#" + v));
    await page.waitForSelector(ready[v], { timeout: 5000 });
    assert.deepEqual(await overflows(page), [], `#${v} at 1400px`);
    await shot(page, `glance-${v.replace(/\//g, "_")}-1400`);
  }
});
