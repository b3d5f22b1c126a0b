// The tenure dashboard: live leases, events, per-name timelines, the
// cluster and its rates, read from tenured's /ui/api (one Server-Sent
// Events stream for leases and activity, JSON for the rest). No writes.

import { $, el, fmtDuration, fmtClock } from "./dom";
import { api, streamEvents, setToken, getToken, AuthError } from "./api";
import type { Lease, Activity, Snapshot, LeaseEvent, Tick, ClusterView, History, Sample } from "./types";
import { drawTimeline } from "./timeline";
import { sparkline } from "./spark";
import { clusterTime as now, setClocks, timeEl, wallOf, wallTime } from "./clock";

const views = ["leases", "events", "timeline", "cluster", "metrics"] as const;
type View = (typeof views)[number];

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
// Every lease row has the same height (app.css): one line, or two where
// the page is narrow and the row stacks its cells.
const narrow = matchMedia("(max-width: 640px)");
const rowHeightNow = () => (narrow.matches ? 56 : 34);
const overscan = 15;
let order: Rec[] = []; // the records that match the filter, sorted
// The slot of each live holder of a semaphore (a name with a limit above
// 1), counted from 1 in token order, so its rows read "slot 2 of 3".
const slots = new Map<Rec, number>();
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
  const slot = slots.get(rec);
  const limit = l.limit ?? 1;
  const left = el("span", { class: "left" });
  const bar = el("span", { class: "fill" });
  const w = waiters.get(l.name) ?? [];
  const tr = el("tr", { "data-name": l.name, "data-token": String(l.token), "aria-rowindex": String(index + 2) },
    el("th", { scope: "row", class: "name" }, el("span", { class: "cell" }, link,
      limit > 1 ? el("span", {
        class: "slot",
        title: `${l.name} is a semaphore: up to ${limit} holders at once, each with its own token. Its live grants are numbered in token order.`,
      }, slot ? `slot ${slot} of ${limit}` : `semaphore of ${limit}`) : "",
      l.shared ? el("span", {
        class: "slot shared",
        title: `A shared (read) grant: other shared grants of ${l.name} may be held with it, each with its own token; an exclusive grant waits for every one to end.`,
      }, "shared") : "")),
    el("td", { class: "holder" }, l.holder),
    el("td", { class: "token num" }, String(l.token)),
    el("td", { class: "ttl num" }, fmtDuration(l.ttl)),
    el("td", { class: "countdown" }, left, el("span", { class: "meter", "aria-hidden": "true" }, bar)),
    el("td", { class: "waiters", "data-none": String(!w.length) }, w.length ? w.map((h, i) => `${i + 1}. ${h}`).join("  ") : "—")) as HTMLTableRowElement;
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
    numberSlots();
    countLeases();
  }
  const rowHeight = rowHeightNow();
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

function numberSlots() {
  slots.clear();
  let name = "";
  let n = 0;
  for (const r of order) {
    if ((r.lease.limit ?? 1) <= 1 || r.leaving) continue;
    if (r.lease.name !== name) {
      name = r.lease.name;
      n = 0;
    }
    slots.set(r, ++n);
  }
}

function queueRender(reorder = false) {
  if (reorder) orderDirty = true;
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(render);
}

leasesScroll.addEventListener("scroll", () => queueRender(), { passive: true });
window.addEventListener("resize", () => queueRender());
narrow.addEventListener("change", () => queueRender());

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
  // Nothing is said before the first snapshot, or when the stream was
  // refused: "0 live leases" would be untrue.
  if (deniedLeases || !leasesLoaded) return;
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
//
// Newest first, by the wall-clock time shown: each row goes in at its
// place (nearly always the top). Renewals are not rows: they are counted
// per second by the server, and the page shows the counts above the table.

const eventsBody = $<HTMLTableSectionElement>("#events tbody");
const eventPrefix = $<HTMLInputElement>("#event-prefix");
const maxEvents = 500;
const shownKinds = new Set(["granted", "released", "expired", "revoked", "handed_off", "write_accepted", "write_rejected", "reset", "leader"]);
let lastSeq = 0;

const kindLabel: Record<string, string> = {
  granted: "granted",
  released: "released",
  expired: "expired",
  revoked: "REVOKED",
  handed_off: "handed off",
  write_accepted: "write accepted",
  write_rejected: "write REJECTED",
  reset: "state replaced by a snapshot",
  leader: "leader change",
};

/** eventRow is one event at wall-clock time wall (cluster time at). */
function eventRow(kind: string, wall: number, at: number, name: string, holder: string, token: number | undefined, detail: string) {
  const tr = el("tr", { class: "ev " + kind, "data-kind": kind, "data-name": name, "data-wall": String(wall) },
    el("td", { class: "num at" }, timeEl(wall, at)),
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

/** addEvents puts rows in the table, each above every older one. */
function addEvents(trs: HTMLTableRowElement[]) {
  for (const tr of trs) {
    const w = Number(tr.dataset.wall);
    let ref = eventsBody.firstElementChild as HTMLTableRowElement | null;
    while (ref && Number(ref.dataset.wall) > w) ref = ref.nextElementSibling as HTMLTableRowElement | null;
    eventsBody.insertBefore(tr, ref);
  }
  while (eventsBody.rows.length > maxEvents) eventsBody.lastElementChild!.remove();
}

function activityRow(a: Activity): HTMLTableRowElement {
  let detail = "";
  if (a.kind === "write_accepted" || a.kind === "write_rejected") {
    detail = `${a.delete ? "delete" : "put"} ${a.key}`;
    if (a.error) detail += ": " + a.error;
  } else if (a.kind === "revoked") {
    detail = a.reason ? "by an operator: " + a.reason : "by an operator";
  } else if (a.kind === "reset") {
    detail = "events before this one were not applied on this node";
  }
  return eventRow(a.kind, wallOf(a.wall, a.at), a.at, a.name ?? "", a.holder ?? "", a.token, detail);
}

function onActivities(acts: Activity[], missed: number) {
  const trs: HTMLTableRowElement[] = [];
  if (missed > 0 && lastSeq > 0) trs.push(eventRow("reset", wallTime(), now(), "", "", undefined, `${missed} events were not shown (the page fell behind)`));
  for (const a of acts) {
    if (a.seq <= lastSeq) continue;
    lastSeq = a.seq;
    trs.push(activityRow(a));
    if (a.kind === "write_rejected" || a.kind === "write_accepted") noteTimeline(a.name ?? "");
    if (a.kind === "granted" || a.kind === "released" || a.kind === "expired" || a.kind === "revoked" || a.kind === "handed_off") noteTimeline(a.name ?? "");
  }
  addEvents(trs);
}

// Renewals arrive as counts per second of cluster time: the snapshot has
// the last 10 minutes, each tick the last few seconds (the current one
// still counting).
const renewals = new Map<number, number>();
function onRenewals(rs: { second: number; count: number }[]) {
  for (const r of rs) renewals.set(r.second, r.count);
  const t = now();
  let second = 0, minute = 0, all = 0;
  const last = Math.floor(t / 1000) * 1000 - 1000; // the last whole second
  for (const [sec, n] of renewals) {
    if (t - sec > 600_000) {
      renewals.delete(sec);
      continue;
    }
    all += n;
    if (t - sec <= 60_000) minute += n;
    if (sec === last) second = n;
  }
  const p = $("#renewals");
  p.dataset.minute = String(minute);
  const num = (n: number) => n.toLocaleString("en");
  p.replaceChildren(el("strong", {}, "Renewals"), " (counted, not listed): ",
    el("span", { class: "n" }, num(second)), " in the last second · ",
    el("span", { class: "n" }, num(minute)), " in the last minute · ",
    el("span", { class: "n" }, num(all)), " in the last 10 minutes");
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

// The histories last drawn, to draw again at a new width.
let tlShown: History[] = [];

async function loadTimeline() {
  if (!tlCurrent) {
    $("#tl-list").replaceChildren(el("p", { class: "empty" }, "Choose a lease, or a prefix ending in “/” (like demo/) to see every lease under it."));
    return;
  }
  tlDirty = false;
  const want = tlCurrent;
  let hs: History[];
  try {
    if (want.endsWith("/")) {
      const r = await api<{ now: number; histories: History[] }>("history?prefix=" + encodeURIComponent(want));
      hs = r.histories;
    } else {
      hs = [await api<History>("history?name=" + encodeURIComponent(want))];
    }
  } catch (e) {
    if (e instanceof AuthError) $("#tl-list").replaceChildren(el("p", { class: "denied" }, cannotShow("The timeline", "read the history of this name", e)));
    report(e);
    return;
  }
  if (want !== tlCurrent) return;
  if (!hs.length) {
    $("#tl-list").replaceChildren(el("p", { class: "empty" }, `No lease under “${want}” has a history on this node yet.`));
    return;
  }
  tlShown = hs;
  $("#tl-list").replaceChildren(...hs.map((h) => timelineBlock(h, hs.length > 1)));
  drawTimelines();
}

/** drawTimelines draws the charts of the histories shown, to fit the
 * page's width now. */
function drawTimelines() {
  const charts = document.querySelectorAll<HTMLElement>("#tl-list .tl-chart");
  const t = wallTime();
  tlShown.forEach((h, i) => charts[i] && drawTimeline(charts[i], h, t));
}

function timelineBlock(h: History, titled: boolean): HTMLElement {
  const chart = el("div", { class: "chart tl-chart", role: "img", "data-name": h.name });
  const block = el("section", { class: "tl-block", "data-name": h.name, "aria-label": "Timeline of " + h.name },
    titled ? el("h3", {}, el("a", { href: "#timeline/" + encodeURIComponent(h.name) }, h.name)) : "",
    chart);
  const items: [number, HTMLElement][] = [];
  const plural = (n: number) => `${n} write${n === 1 ? "" : "s"} accepted`;
  const row = (cls: string, wall: number, at: number, what: string, holder: string, token: number, detail: string) =>
    el("tr", { class: cls, "data-wall": String(wall) },
      el("td", { class: "num at" }, timeEl(wall, at)), el("td", { class: "kind" }, what), el("td", { class: "holder" }, holder),
      el("td", { class: "token num" }, String(token)), el("td", { class: "detail" }, detail));
  for (const term of h.terms) {
    // How long it was held by the clock on the wall, as the chart draws
    // it (longer than by cluster time if a leader was lost meanwhile).
    const start = wallOf(term.start_wall, term.start);
    const end = term.ended ? wallOf(term.end_wall, term.end!) : 0;
    items.push([start, row("term", start, term.start, "granted", term.holder, term.token,
      term.ended ? `${term.ended} after ${fmtDuration(end - start)}; ${plural(term.writes)}` : `held; ${plural(term.writes)}`)]);
    if (term.ended) items.push([end, row("term-end", end, term.end!, term.ended, term.holder, term.token, "")]);
  }
  for (const s of h.stale) {
    const at = wallOf(s.wall, s.at);
    items.push([at, row("stale", at, s.at, "write REJECTED", "", s.token,
      `${s.key}: stale token ${s.token}${s.current ? `, current token ${s.current}` : ""}`)]);
  }
  // Newest first; of two at the same time, the one recorded later.
  const order = items.map((it, i) => [it[0], i, it[1]] as const).sort((a, b) => b[0] - a[0] || b[1] - a[1]);
  if (items.length) {
    block.append(el("div", { class: "scroll" }, el("table", { class: "tl-table log" },
      el("caption", { class: "sr-only" }, `Terms and refused writes of ${h.name}, newest first`),
      el("thead", {}, el("tr", {}, ...["Time", "What", "Holder", "Token", "Detail"].map((c, i) => el("th", { scope: "col", class: i === 0 || i === 3 ? "num" : "" }, c)))),
      el("tbody", {}, ...order.map((o) => o[2])))));
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
let leaderSeen = false;

function noteLeader(id: string, term: number, where: string) {
  if (id === leaderID) return;
  const before = leaderID;
  leaderID = id;
  leaderTerm = term;
  if (!before && !id) return;
  // The first is the leader as the page found it, not a change.
  const first = !leaderSeen;
  leaderSeen = true;
  const text = id ? (before ? `${before} → ${id} (term ${term})` : `${id} leads (term ${term})${first ? " when this page opened" : ""}`) : `${before} lost leadership: no leader`;
  const wall = wallTime();
  const li = el("li", {}, timeEl(wall, now(), false), " ", text, where ? ` (seen by ${where})` : "");
  const ol = $("#leader-changes");
  ol.prepend(li);
  while (ol.children.length > 50) ol.lastElementChild!.remove();
  if (before) addEvents([eventRow("leader", wall, now(), "", id, undefined, text)]);
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
    if (e instanceof AuthError) deny("cluster", cannotShow("The cluster", "see the cluster's status", e));
    report(e);
    return;
  }
  deny("cluster", "");
  clusterData = c;
  noteLeader(c.leader_id, c.term, c.node);
  const body = $<HTMLTableSectionElement>("#members tbody");
  const td = (label: string, cls: string, ...children: (Node | string)[]) => el("td", { class: cls, "data-label": label }, ...children);
  body.replaceChildren(...c.members.map((m) => {
    const role = m.reachable ? m.state || "?" : "unreachable";
    const applied = td("applied", "num", m.reachable ? String(m.applied_index ?? 0) : "?");
    if (m.reachable) applied.title = `cluster time ${fmtClock(m.cluster_time ?? 0)} at this index`;
    return el("tr", { "data-member": m.id, "data-leader": String(m.id === c.leader_id), class: (m.id === c.leader_id ? "leader " : "") + (m.reachable ? "" : "down") },
      el("th", { scope: "row" }, m.id, m.id === c.leader_id ? el("span", { class: "badge" }, "★ leader") : "", m.self ? el("span", { class: "badge self" }, "this node") : ""),
      td("role", "role", role + (m.voter ? "" : " (non-voter)")),
      td("reachable", "", m.reachable ? "yes" : el("span", { title: m.error ?? "" }, "no")),
      td("last contact", "num", m.self ? "—" : m.last_contact_ms_ago < 0 ? "never" : fmtDuration(m.last_contact_ms_ago) + " ago"),
      applied,
      td("term", "num", m.reachable ? String(m.term ?? 0) : "?"),
      td("API", "addr", m.api_address));
  }));
  renderSummary();
}

// ---- metrics ------------------------------------------------------------

let samples: Sample[] | undefined;

async function loadMetrics() {
  let m: { samples: Sample[] };
  try {
    m = await api<{ samples: Sample[] }>("metrics");
  } catch (e) {
    if (e instanceof AuthError) deny("metrics", cannotShow("The metrics", "see the cluster's status", e));
    report(e);
    return;
  }
  deny("metrics", "");
  samples = m.samples;
  drawMetrics();
}

function drawMetrics() {
  const s = samples;
  if (!s) return;
  sparkline($("#chart-ops"), s.map((x) => x.t), [
    { label: "ops applied/s", values: s.map((x) => x.ops), cls: "s1" },
    { label: "requests/s", values: s.map((x) => x.requests), cls: "s2" },
  ]);
  sparkline($("#chart-lat"), s.map((x) => x.t), [
    { label: "mean ms", values: s.map((x) => (x.commit_mean < 0 ? NaN : x.commit_mean)), cls: "s1" },
    { label: "p99 ms", values: s.map((x) => (x.commit_p99 < 0 ? NaN : x.commit_p99)), cls: "s2" },
  ]);
}

// Charts fit the width they are drawn at: draw them again when it changes.
let redrawQueued = false;
window.addEventListener("resize", () => {
  if (redrawQueued) return;
  redrawQueued = true;
  requestAnimationFrame(() => {
    redrawQueued = false;
    if (currentView === "timeline") drawTimelines();
    if (currentView === "metrics") drawMetrics();
  });
});

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

/** cannotShow says why what cannot be shown: the server wants a token, or
 * this one may not do what it takes. */
function cannotShow(what: string, needs: string, e: AuthError): string {
  return e.status === 401
    ? `${what} cannot be shown: the server wants a token; enter one above.`
    : `${what} cannot be shown: this token may not ${needs}.`;
}

/** deny puts a view in place of its content the reason it cannot be
 * shown, or with "" shows the content again. */
function deny(view: View, why: string) {
  const p = $(`#${view}-denied`);
  p.textContent = why;
  p.hidden = !why;
  $(`#view-${view}`).classList.toggle("is-denied", !!why);
}

// The stream carries the leases and the events: when it is refused,
// neither can be shown (and the page does not pretend there are none).
let deniedLeases = false;
let leasesLoaded = false; // a snapshot came
function denyStream(e: AuthError | undefined) {
  deniedLeases = !!e;
  deny("leases", e ? cannotShow("Leases", "list leases", e) : "");
  deny("events", e ? cannotShow("Events", "read the events", e) : "");
  if (e) {
    $("#lease-count").textContent = "";
    $("#leases-empty").hidden = true;
  } else {
    countLeases();
  }
}

let pending: Snapshot | undefined;
function flushPending() {
  const s = pending;
  if (!s) return;
  pending = undefined;
  addNames(s.activities.map((a) => a.name ?? ""));
  onActivities(s.activities, 0);
  onRenewals(s.renewals);
}

function onSnapshot(s: Snapshot) {
  performance.mark("snapshot");
  leasesLoaded = true;
  setClocks(s.now, s.wall);
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
  if (s.reason) addEvents([eventRow("reset", s.wall, s.now, "", "", undefined, s.reason === "lagged" ? "the page fell behind; reloaded the state" : "the node installed a snapshot; reloaded the state")]);
  document.body.dataset.loaded = "true";
  // When the table is laid out and painted: the first load's measure.
  if (!document.body.dataset.renderedMs) {
    performance.mark("end-snapshot");
    requestAnimationFrame(() => { performance.mark("raf"); setTimeout(() => (document.body.dataset.renderedMs = performance.now().toFixed(1))); });
  }
}

function onTick(t: Tick) {
  setClocks(t.now, t.wall);
  onRenewals(t.renewals);
  // Renewals are not in the Watch stream: each tick brings the new
  // expiries of the grants renewed since the last.
  for (const r of t.renewed ?? []) {
    const rec = recs.get(r.name + "\u0000" + r.token);
    if (rec && !rec.leaving) rec.lease.expires_at = r.expires_at;
  }
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
            denyStream(undefined);
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
      if (e instanceof AuthError) {
        denyStream(e);
        return; // wait for a token
      }
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
