// The tenure dashboard: live leases, events, per-name timelines, the
// cluster and its rates, read from tenured's /ui/api (one Server-Sent
// Events stream for leases and activity, JSON for the rest). No writes.

import { $, el, fmtDuration, fmtClock } from "./dom";
import { api, streamEvents, setToken, getToken, AuthError } from "./api";
import type { Lease, Activity, Snapshot, LeaseEvent, Tick, ClusterView, History, Sample } from "./types";
import { drawTimeline } from "./timeline";
import { sparkline } from "./spark";

const views = ["leases", "events", "timeline", "cluster", "metrics"] as const;
type View = (typeof views)[number];

// Cluster time: the server's last word plus what this page's monotonic
// clock says has passed since (cluster time stands still without a
// leader; the next tick corrects it).
let clusterNow = 0;
let clusterAt = performance.now();
function now(): number {
  return clusterNow + (performance.now() - clusterAt);
}
function setNow(t: number) {
  clusterNow = t;
  clusterAt = performance.now();
}

// ---- leases -------------------------------------------------------------
//
// The table is windowed: only the rows in (and near) its scrolled view are
// in the DOM, each of a fixed height, between two spacer rows that stand
// for the others. A page with thousands of leases lays out as fast as one
// with fifty.

interface Rec {
  lease: Lease;
  leaving?: string; // "expired" or "released" while it fades out
  arrived?: boolean;
}

interface Shown {
  rec: Rec;
  tr: HTMLTableRowElement;
  left: HTMLElement;
  bar: HTMLElement;
}

const recs = new Map<string, Rec>(); // key: name + "\u0000" + token
const waiters = new Map<string, string[]>();
const leasesTable = $<HTMLTableElement>("#leases");
const leasesBody = $<HTMLTableSectionElement>("#leases tbody");
const leasesScroll = $("#leases-scroll");
const prefixInput = $<HTMLInputElement>("#prefix");
const key = (l: Lease) => l.name + "\u0000" + l.token;
const rowHeight = 34; // px; app.css gives every lease row this height
const overscan = 15;
let order: Rec[] = []; // the records that match the filter, sorted
let orderDirty = true;
let shown: Shown[] = [];
let renderQueued = false;

function byNameToken(a: Rec, b: Rec): number {
  const x = a.lease, y = b.lease;
  return x.name < y.name ? -1 : x.name > y.name ? 1 : x.token - y.token;
}

function leaseRow(rec: Rec, index: number): Shown {
  const l = rec.lease;
  const link = el("a", { href: "#timeline/" + encodeURIComponent(l.name), title: "Timeline of " + l.name }, l.name);
  const left = el("span", { class: "left" });
  const bar = el("span", { class: "fill" });
  const w = waiters.get(l.name) ?? [];
  const tr = el("tr", { "data-name": l.name, "data-token": String(l.token), "aria-rowindex": String(index + 2) },
    el("th", { scope: "row", class: "name" }, link),
    el("td", { class: "holder" }, l.holder),
    el("td", { class: "token num" }, String(l.token)),
    el("td", { class: "ttl num" }, fmtDuration(l.ttl)),
    el("td", { class: "countdown" }, left, el("span", { class: "meter", "aria-hidden": "true" }, bar)),
    el("td", { class: "waiters" }, w.length ? w.map((h, i) => `${i + 1}. ${h}`).join("  ") : "—")) as HTMLTableRowElement;
  if (rec.arrived) tr.classList.add("arrived");
  if (rec.leaving) {
    tr.classList.add("leaving", rec.leaving);
    tr.dataset.leaving = rec.leaving;
    left.textContent = rec.leaving;
    bar.style.width = "0";
  }
  return { rec, tr, left, bar };
}

function matches(name: string): boolean {
  return name.startsWith(prefixInput.value);
}

function spacer(px: number): HTMLTableRowElement {
  const tr = el("tr", { class: "spacer", "aria-hidden": "true" }, el("td", { colspan: "6" })) as HTMLTableRowElement;
  tr.style.height = px + "px";
  return tr;
}

/** render draws the rows in view now. */
function render() {
  renderQueued = false;
  if (orderDirty) {
    order = [...recs.values()].filter((r) => matches(r.lease.name)).sort(byNameToken);
    orderDirty = false;
    countLeases();
  }
  const top = leasesScroll.scrollTop;
  const height = leasesScroll.clientHeight || 600;
  const first = Math.max(0, Math.floor(top / rowHeight) - overscan);
  const last = Math.min(order.length, Math.ceil((top + height) / rowHeight) + overscan);
  shown = [];
  const frag = document.createDocumentFragment();
  if (first > 0) frag.append(spacer(first * rowHeight));
  for (let i = first; i < last; i++) {
    const s = leaseRow(order[i], i);
    shown.push(s);
    frag.append(s.tr);
  }
  if (last < order.length) frag.append(spacer((order.length - last) * rowHeight));
  leasesBody.replaceChildren(frag);
  leasesTable.setAttribute("aria-rowcount", String(order.length + 1));
  tickCountdowns();
}

function queueRender(reorder = false) {
  if (reorder) orderDirty = true;
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(render);
}

leasesScroll.addEventListener("scroll", () => queueRender(), { passive: true });
window.addEventListener("resize", () => queueRender());

function setLeases(ls: Lease[]) {
  recs.clear();
  for (const l of ls) recs.set(key(l), { lease: l });
  orderDirty = true;
  render();
}

function onLeaseEvent(ev: LeaseEvent) {
  const k = key(ev.lease);
  if (ev.type === "granted") {
    if (recs.has(k)) return;
    const rec: Rec = { lease: ev.lease, arrived: true };
    recs.set(k, rec);
    setTimeout(() => {
      rec.arrived = false;
    }, 1500);
  } else {
    const rec = recs.get(k);
    if (!rec) return;
    rec.leaving = ev.type;
    setTimeout(() => {
      if (recs.get(k) === rec) recs.delete(k);
      queueRender(true);
    }, 2000);
  }
  queueRender(true);
  addNames([ev.lease.name]);
}

function countLeases() {
  let live = 0;
  for (const r of recs.values()) if (!r.leaving) live++;
  const match = order.filter((r) => !r.leaving).length;
  $("#lease-count").textContent = prefixInput.value
    ? `${match} of ${live} live leases match “${prefixInput.value}”`
    : `${live} live leases`;
  $("#leases-empty").hidden = order.length > 0;
}

function tickCountdowns() {
  const t = now();
  for (const s of shown) {
    const l = s.rec.lease;
    if (s.rec.leaving) continue;
    const left = Math.max(0, l.expires_at - t);
    const text = fmtDuration(left, true);
    if (s.left.textContent !== text) s.left.textContent = text;
    const pct = l.ttl > 0 ? Math.min(100, (left / l.ttl) * 100) : 0;
    s.bar.style.width = pct.toFixed(1) + "%";
    s.tr.classList.toggle("low", left < l.ttl * 0.25);
  }
}

prefixInput.addEventListener("input", () => {
  leasesScroll.scrollTop = 0;
  queueRender(true);
  sessionStorage.setItem("tenure-prefix", prefixInput.value);
});

// ---- events -------------------------------------------------------------

const eventsBody = $<HTMLTableSectionElement>("#events tbody");
const eventPrefix = $<HTMLInputElement>("#event-prefix");
const maxEvents = 500;
const shownKinds = new Set(["granted", "renewed", "released", "expired", "write_accepted", "write_rejected", "reset", "leader"]);
let lastSeq = 0;

const kindLabel: Record<string, string> = {
  granted: "granted",
  released: "released",
  expired: "expired",
  write_accepted: "write accepted",
  write_rejected: "write REJECTED",
  renewed: "renewed",
  reset: "state replaced by a snapshot",
  leader: "leader change",
};

function eventRow(kind: string, at: number, name: string, holder: string, token: number | undefined, detail: string) {
  const tr = el("tr", { class: "ev " + kind, "data-kind": kind, "data-name": name },
    el("td", { class: "num at" }, fmtClock(at)),
    el("td", { class: "kind" }, kindLabel[kind] ?? kind),
    el("td", { class: "name" }, name ? el("a", { href: "#timeline/" + encodeURIComponent(name) }, name) : ""),
    el("td", { class: "holder" }, holder),
    el("td", { class: "token num" }, token ? String(token) : ""),
    el("td", { class: "detail" }, detail)) as HTMLTableRowElement;
  tr.hidden = !eventVisible(tr);
  return tr;
}

function eventVisible(tr: HTMLTableRowElement): boolean {
  return shownKinds.has(tr.dataset.kind!) && (tr.dataset.name ?? "").startsWith(eventPrefix.value);
}

function prependEvents(trs: HTMLTableRowElement[]) {
  if (!trs.length) return;
  const frag = document.createDocumentFragment();
  for (let i = trs.length - 1; i >= 0; i--) frag.append(trs[i]);
  eventsBody.prepend(frag);
  while (eventsBody.rows.length > maxEvents) eventsBody.lastElementChild!.remove();
}

function activityRow(a: Activity): HTMLTableRowElement {
  let detail = "";
  if (a.kind === "write_accepted" || a.kind === "write_rejected") {
    detail = `${a.delete ? "delete" : "put"} ${a.key}`;
    if (a.error) detail += ": " + a.error;
  } else if (a.kind === "reset") {
    detail = "events before this one were not applied on this node";
  }
  return eventRow(a.kind, a.at, a.name ?? "", a.holder ?? "", a.token, detail);
}

function onActivities(acts: Activity[], missed: number) {
  const trs: HTMLTableRowElement[] = [];
  if (missed > 0 && lastSeq > 0) trs.push(eventRow("reset", now(), "", "", undefined, `${missed} events were not shown (the page fell behind)`));
  for (const a of acts) {
    if (a.seq <= lastSeq) continue;
    lastSeq = a.seq;
    trs.push(activityRow(a));
    if (a.kind === "write_rejected" || a.kind === "write_accepted") noteTimeline(a.name ?? "");
    if (a.kind === "granted" || a.kind === "released" || a.kind === "expired") noteTimeline(a.name ?? "");
  }
  prependEvents(trs);
}

// Renewals arrive as counts per second of cluster time; each second is
// shown once, when it is over.
const renewalsShown = new Set<number>();
function onRenewals(rs: { second: number; count: number }[], final: boolean) {
  const current = Math.floor(now() / 1000) * 1000;
  const trs: HTMLTableRowElement[] = [];
  for (const r of rs) {
    if (renewalsShown.has(r.second) || (final && r.second >= current)) continue;
    renewalsShown.add(r.second);
    trs.push(eventRow("renewed", r.second + 999, "", "", undefined, `${r.count} renewal${r.count === 1 ? "" : "s"} in this second`));
  }
  prependEvents(trs);
}

function refilterEvents() {
  for (const tr of eventsBody.rows) tr.hidden = !eventVisible(tr);
}
eventPrefix.addEventListener("input", refilterEvents);
for (const box of document.querySelectorAll<HTMLInputElement>(".kinds input")) {
  box.addEventListener("change", () => {
    if (box.checked) shownKinds.add(box.dataset.kind!);
    else shownKinds.delete(box.dataset.kind!);
    refilterEvents();
  });
}

// ---- timeline -----------------------------------------------------------

const tlName = $<HTMLInputElement>("#tl-name");
const names = new Set<string>();
let tlCurrent = "";
let tlDirty = false;

// Names for the timeline's list, kept as a set and put in the page only
// while the timeline is shown.
let namesListed = 0;
function addNames(ns: string[]) {
  for (const n of ns) if (n && names.size < 5000) names.add(n);
  if (currentView === "timeline") listNames();
}

function listNames() {
  if (namesListed === names.size) return;
  namesListed = names.size;
  $("#tl-names").replaceChildren(...[...names].sort().map((n) => el("option", { value: n })));
}

function noteTimeline(name: string) {
  if (name && (name === tlCurrent || (tlCurrent.endsWith("/") && name.startsWith(tlCurrent)))) tlDirty = true;
}

async function loadTimeline() {
  if (!tlCurrent) {
    $("#tl-list").replaceChildren(el("p", { class: "empty" }, "Choose a lease, or a prefix ending in “/” (like demo/) to see every lease under it."));
    return;
  }
  tlDirty = false;
  const want = tlCurrent;
  let hs: History[];
  let at: number;
  try {
    if (want.endsWith("/")) {
      const r = await api<{ now: number; histories: History[] }>("history?prefix=" + encodeURIComponent(want));
      hs = r.histories;
      at = r.now;
    } else {
      const h = await api<History>("history?name=" + encodeURIComponent(want));
      hs = [h];
      at = h.now;
    }
  } catch (e) {
    report(e);
    return;
  }
  if (want !== tlCurrent) return;
  const t = Math.max(at, now());
  if (!hs.length) {
    $("#tl-list").replaceChildren(el("p", { class: "empty" }, `No lease under “${want}” has a history on this node yet.`));
    return;
  }
  $("#tl-list").replaceChildren(...hs.map((h) => timelineBlock(h, t, hs.length > 1)));
  // Drawn once in the page, to fit its width.
  hs.forEach((h, i) => drawTimeline(document.querySelectorAll<HTMLElement>("#tl-list .tl-chart")[i], h, t));
}

function timelineBlock(h: History, t: number, titled: boolean): HTMLElement {
  const chart = el("div", { class: "chart tl-chart", role: "img", "data-name": h.name });
  const block = el("section", { class: "tl-block", "data-name": h.name, "aria-label": "Timeline of " + h.name },
    titled ? el("h3", {}, el("a", { href: "#timeline/" + encodeURIComponent(h.name) }, h.name)) : "",
    chart);
  const items: [number, HTMLElement][] = [];
  const plural = (n: number) => `${n} write${n === 1 ? "" : "s"} accepted`;
  for (const term of h.terms) {
    items.push([term.start, el("tr", { class: "term" },
      el("td", { class: "num" }, fmtClock(term.start)), el("td", {}, "granted"), el("td", {}, term.holder),
      el("td", { class: "num" }, String(term.token)),
      el("td", {}, term.ended ? `${term.ended} after ${fmtDuration(term.end! - term.start)}; ${plural(term.writes)}` : `held; ${plural(term.writes)}`))]);
    if (term.ended) {
      items.push([term.end!, el("tr", { class: "term-end" },
        el("td", { class: "num" }, fmtClock(term.end!)), el("td", {}, term.ended), el("td", {}, term.holder),
        el("td", { class: "num" }, String(term.token)), el("td", {}, ""))]);
    }
  }
  for (const s of h.stale) {
    items.push([s.at, el("tr", { class: "stale" },
      el("td", { class: "num" }, fmtClock(s.at)), el("td", {}, "write REJECTED"), el("td", {}, ""),
      el("td", { class: "num" }, String(s.token)),
      el("td", {}, `${s.key}: stale token ${s.token}${s.current ? `, current token ${s.current}` : ""}`))]);
  }
  items.sort((a, b) => a[0] - b[0]);
  if (items.length) {
    block.append(el("div", { class: "scroll" }, el("table", { class: "tl-table" },
      el("caption", { class: "sr-only" }, `Terms and refused writes of ${h.name}, oldest first`),
      el("thead", {}, el("tr", {}, ...["Cluster time", "What", "Holder", "Token", "Detail"].map((c, i) => el("th", { scope: "col", class: i === 0 || i === 3 ? "num" : "" }, c)))),
      el("tbody", {}, ...items.map((i) => i[1])))));
  }
  return block;
}

$<HTMLFormElement>("#tl-form").addEventListener("submit", (e) => {
  e.preventDefault();
  location.hash = "#timeline/" + encodeURIComponent(tlName.value);
});

// ---- cluster ------------------------------------------------------------

let leaderID = "";
let leaderTerm = 0;

function noteLeader(id: string, term: number, where: string) {
  if (id === leaderID) return;
  const before = leaderID;
  leaderID = id;
  leaderTerm = term;
  if (!before && !id) return;
  const text = id ? (before ? `${before} → ${id} (term ${term})` : `${id} leads (term ${term})`) : `${before} lost leadership: no leader`;
  const li = el("li", {}, el("time", {}, new Date().toLocaleTimeString()), " ", text, where ? ` (seen by ${where})` : "");
  const ol = $("#leader-changes");
  ol.prepend(li);
  while (ol.children.length > 50) ol.lastElementChild!.remove();
  if (before) prependEvents([eventRow("leader", now(), "", id, undefined, text)]);
  renderSummary();
}

let clusterData: ClusterView | undefined;
function renderSummary() {
  const c = clusterData;
  $("#cluster-summary").textContent = c
    ? `Leader: ${leaderID || "none"} · term ${Math.max(c.term, leaderTerm)} · last token ${c.last_token} · ${c.leases} live leases · viewed from ${c.node}`
    : "";
}

async function loadCluster() {
  let c: ClusterView;
  try {
    c = await api<ClusterView>("cluster");
  } catch (e) {
    report(e);
    return;
  }
  clusterData = c;
  noteLeader(c.leader_id, c.term, c.node);
  const body = $<HTMLTableSectionElement>("#members tbody");
  body.replaceChildren(...c.members.map((m) => {
    const role = m.reachable ? m.state || "?" : "unreachable";
    return el("tr", { "data-member": m.id, "data-leader": String(m.id === c.leader_id), class: (m.id === c.leader_id ? "leader " : "") + (m.reachable ? "" : "down") },
      el("th", { scope: "row" }, m.id, m.id === c.leader_id ? el("span", { class: "badge" }, "★ leader") : "", m.self ? el("span", { class: "badge self" }, "this node") : ""),
      el("td", { class: "role" }, role + (m.voter ? "" : " (non-voter)")),
      el("td", {}, m.reachable ? "yes" : el("span", { title: m.error ?? "" }, "no")),
      el("td", { class: "num" }, m.self ? "—" : m.last_contact_ms_ago < 0 ? "never" : fmtDuration(m.last_contact_ms_ago) + " ago"),
      el("td", { class: "num" }, m.reachable ? String(m.applied_index ?? 0) : "?"),
      el("td", { class: "num" }, m.reachable ? String(m.term ?? 0) : "?"),
      el("td", { class: "num" }, m.reachable ? fmtClock(m.cluster_time ?? 0) : "?"),
      el("td", { class: "addr" }, m.api_address));
  }));
  renderSummary();
}

// ---- metrics ------------------------------------------------------------

async function loadMetrics() {
  let m: { samples: Sample[] };
  try {
    m = await api<{ samples: Sample[] }>("metrics");
  } catch (e) {
    report(e);
    return;
  }
  const s = m.samples;
  sparkline($("#chart-ops"), s.map((x) => x.t), [
    { label: "ops applied/s", values: s.map((x) => x.ops), cls: "s1" },
    { label: "requests/s", values: s.map((x) => x.requests), cls: "s2" },
  ]);
  sparkline($("#chart-lat"), s.map((x) => x.t), [
    { label: "mean ms", values: s.map((x) => (x.commit_mean < 0 ? NaN : x.commit_mean)), cls: "s1" },
    { label: "p99 ms", values: s.map((x) => (x.commit_p99 < 0 ? NaN : x.commit_p99)), cls: "s2" },
  ]);
}

// ---- connection, auth, routing -----------------------------------------

const conn = $("#conn");
function setConn(state: string, text: string) {
  conn.dataset.state = state;
  conn.textContent = text;
}

function report(e: unknown) {
  if (e instanceof AuthError) {
    $("#auth-msg").textContent = e.message;
    setConn("auth", "not permitted");
    return;
  }
  setConn("down", "disconnected: " + String((e as Error)?.message ?? e));
}

let pending: Snapshot | undefined;
function flushPending() {
  const s = pending;
  if (!s) return;
  pending = undefined;
  addNames(s.activities.map((a) => a.name ?? ""));
  onActivities(s.activities, 0);
  onRenewals(s.renewals, true);
}

function onSnapshot(s: Snapshot) {
  performance.mark("snapshot");
  setNow(s.now);
  waiters.clear();
  for (const l of s.leases) if (l.waiters?.length) waiters.set(l.name, l.waiters);
  setLeases(s.leases);
  performance.mark("leases");
  addNames(s.leases.map((l) => l.name));
  // The events come after the leases are painted.
  pending = s;
  setTimeout(flushPending);
  noteLeader(s.status.leader_id, s.status.term, s.node);
  $("#where").textContent = `node ${s.node} · ${s.status.state}`;
  if (s.reason) prependEvents([eventRow("reset", s.now, "", "", undefined, s.reason === "lagged" ? "the page fell behind; reloaded the state" : "the node installed a snapshot; reloaded the state")]);
  document.body.dataset.loaded = "true";
  // When the table is laid out and painted: the first load's measure.
  if (!document.body.dataset.renderedMs) {
    performance.mark("end-snapshot");
    requestAnimationFrame(() => { performance.mark("raf"); setTimeout(() => (document.body.dataset.renderedMs = performance.now().toFixed(1))); });
  }
}

function onTick(t: Tick) {
  setNow(t.now);
  onRenewals(t.renewals, true);
  if (t.waiters) {
    waiters.clear();
    for (const [n, w] of Object.entries(t.waiters)) waiters.set(n, w);
    queueRender();
  }
  noteLeader(t.status.leader_id, t.status.term, "");
  $("#where").textContent = `node ${document.body.dataset.node ?? ""} · ${t.status.state}`.replace("node  · ", "");
}

// scope is the prefix the page asks the server for, from ?prefix= in the
// page's address: a principal whose read role covers only a prefix opens
// /ui/?prefix=jobs/. Empty: every lease.
const scope = new URLSearchParams(location.search).get("prefix") ?? "";

async function runStream() {
  let delay = 250;
  for (;;) {
    const started = performance.now();
    try {
      await streamEvents(scope ? "stream?prefix=" + encodeURIComponent(scope) : "stream", (event, data) => {
        switch (event) {
          case "snapshot": {
            const s = data as Snapshot;
            document.body.dataset.node = s.node;
            onSnapshot(s);
            setConn("live", "live");
            $("#auth-msg").textContent = "";
            break;
          }
          case "leases":
            for (const ev of data as LeaseEvent[]) onLeaseEvent(ev);
            countLeases();
            break;
          case "activity": {
            const d = data as { activities: Activity[]; missed: number };
            flushPending();
            onActivities(d.activities, d.missed);
            if (tlDirty && currentView === "timeline") loadTimeline();
            break;
          }
          case "tick":
            flushPending();
            onTick(data as Tick);
            break;
        }
      });
      setConn("down", "stream ended; reconnecting…");
    } catch (e) {
      report(e);
      if (e instanceof AuthError) return; // wait for a token
    }
    if (performance.now() - started > 5000) delay = 250;
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 5000);
  }
}

performance.mark("script");
let currentView: View = "leases";
function route() {
  const h = decodeURIComponent(location.hash.slice(1));
  const [v, ...rest] = h.split("/");
  currentView = (views as readonly string[]).includes(v) ? (v as View) : "leases";
  for (const name of views) $(`#view-${name}`).hidden = name !== currentView;
  for (const a of document.querySelectorAll<HTMLAnchorElement>("nav a")) {
    if (a.dataset.view === currentView) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (currentView === "timeline") {
    listNames();
    const name = rest.join("/");
    if (name) {
      tlCurrent = name;
      tlName.value = name;
    }
    loadTimeline();
  }
  if (currentView === "cluster") loadCluster();
  if (currentView === "metrics") loadMetrics();
}
window.addEventListener("hashchange", () => {
  route();
  $("#main").focus({ preventScroll: true });
});

$<HTMLFormElement>("#auth").addEventListener("submit", (e) => {
  e.preventDefault();
  setToken($<HTMLInputElement>("#token").value.trim());
  $("#auth-msg").textContent = getToken() ? "token set for this tab" : "";
  restart();
});
$("#token-clear").addEventListener("click", () => {
  setToken("");
  $<HTMLInputElement>("#token").value = "";
  $("#auth-msg").textContent = "";
  restart();
});

let streaming = false;
function restart() {
  if (streaming) location.reload();
  else {
    streaming = true;
    runStream();
  }
}

// Periodic work: countdowns 4 times a second; the cluster every second
// while it is shown (every 3 otherwise, to notice leader changes); the
// open timeline and the metrics every 2 seconds.
let ticks = 0;
setInterval(tickCountdowns, 250);
setInterval(() => {
  ticks++;
  if (currentView === "cluster" || ticks % 3 === 0) loadCluster();
  if (currentView === "timeline" && (tlDirty || ticks % 2 === 0)) loadTimeline();
  if (currentView === "metrics" && ticks % 2 === 0) loadMetrics();
}, 1000);

prefixInput.value = sessionStorage.getItem("tenure-prefix") || scope;
route();
restart();
