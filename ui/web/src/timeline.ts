// The per-name timeline: one bar per term (holder and token), a cross for
// every write refused for its stale token, on a cluster-time axis.

import { svg, fmtClock, fmtDuration } from "./dom";
import type { History } from "./types";

export function drawTimeline(host: HTMLElement, h: History, now: number) {
  if (!h.terms.length && !h.stale.length) {
    host.replaceChildren(document.createTextNode(`Nothing recorded for “${h.name}” on this node yet.`));
    host.setAttribute("aria-label", `No history for ${h.name}`);
    return;
  }
  const t0 = Math.min(...h.terms.map((t) => t.start), ...h.stale.map((s) => s.at));
  const t1 = Math.max(now, ...h.terms.map((t) => t.end ?? now), ...h.stale.map((s) => s.at)) + 1;
  const width = Math.max(320, host.clientWidth || 800);
  const pad = 12;
  const holders = [...new Set(h.terms.map((t) => t.holder))];
  const lane = 34;
  const top = 22;
  const height = top + Math.max(1, holders.length) * lane + 40;
  const x = (t: number) => pad + ((t - t0) / (t1 - t0)) * (width - 2 * pad);
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, class: "timeline" });

  // Axis: start, middle and end.
  const axisY = height - 18;
  root.append(svg("line", { x1: pad, x2: width - pad, y1: axisY, y2: axisY, class: "axis" }));
  for (const f of [0, 0.5, 1]) {
    const t = t0 + f * (t1 - t0);
    root.append(svg("text", { x: x(t), y: axisY + 14, class: "tick", "text-anchor": f === 0 ? "start" : f === 1 ? "end" : "middle" }, fmtClock(t)));
  }

  h.terms.forEach((t) => {
    const lx = holders.indexOf(t.holder);
    const y = top + lx * lane;
    const xs = x(t.start);
    const xe = Math.max(xs + 3, x(t.end ?? now));
    const g = svg("g", { class: "term " + (t.ended ?? "held"), "data-token": t.token });
    g.append(svg("title", {}, `${t.holder}, token ${t.token}: ${fmtClock(t.start)} to ${t.end !== undefined ? fmtClock(t.end) + " (" + t.ended + ")" : "now (held)"}; ${t.writes} writes accepted`));
    g.append(svg("rect", { x: xs, y, width: xe - xs, height: lane - 10, rx: 3 }));
    g.append(svg("text", { x: xs + 4, y: y + lane / 2 - 1, class: "label" }, `${t.holder} · token ${t.token}${t.end !== undefined ? " · " + fmtDuration(t.end - t.start) : ""}`));
    root.append(g);
  });

  for (const s of h.stale) {
    const cx = x(s.at);
    const y = top - 14;
    const g = svg("g", { class: "stale", "data-token": s.token });
    g.append(svg("title", {}, `${fmtClock(s.at)}: write to ${s.key} with stale token ${s.token} REJECTED${s.current ? " (token " + s.current + " held)" : ""}`));
    g.append(svg("line", { x1: cx, x2: cx, y1: y + 6, y2: top + Math.max(1, holders.length) * lane - 10, class: "stale-line" }));
    g.append(svg("text", { x: cx, y: y + 4, "text-anchor": "middle", class: "stale-mark" }, `✕ ${s.token}`));
    root.append(g);
  }
  host.replaceChildren(root);
  host.setAttribute("aria-label",
    `Timeline of ${h.name}: ${h.terms.map((t) => `${t.holder} with token ${t.token}${t.ended ? ", " + t.ended : ", held"}`).join("; ")}; ${h.stale.length} stale writes rejected`);
}
