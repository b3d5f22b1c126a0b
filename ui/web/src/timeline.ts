// The per-name timeline: one bar per term (holder and token), a cross for
// every write refused for its stale token, on a wall-clock axis. The chart
// fits the width it is given (no sideways scrolling); a term too short to
// see gets a minimum width, and a label beside its bar when the label does
// not fit in it; every bar and cross has a tooltip with its times.

import { svg, fmtClock, fmtDuration, fmtWall } from "./dom";
import { wallOf } from "./clock";
import type { History } from "./types";

/** minBar is the narrowest a term's bar is drawn, in pixels. */
export const minBar = 8;
// The width of a character of a label, about (12px system-ui), for the
// stale marks; the terms' labels are measured.
const charW = 7;

interface Bar {
  lane: number;
  xs: number;
  xe: number;
}

/** contentWidth is the width inside host's padding. */
export function contentWidth(host: HTMLElement, fallback: number): number {
  const cs = getComputedStyle(host);
  const w = host.clientWidth - parseFloat(cs.paddingLeft || "0") - parseFloat(cs.paddingRight || "0");
  return Math.floor(w > 0 ? w : fallback);
}

export function drawTimeline(host: HTMLElement, h: History, nowWall: number) {
  if (!h.terms.length && !h.stale.length) {
    host.replaceChildren(document.createTextNode(`Nothing recorded for “${h.name}” on this node yet.`));
    host.setAttribute("aria-label", `No history for ${h.name}`);
    return;
  }
  const terms = h.terms.map((t) => ({
    t,
    start: wallOf(t.start_wall, t.start),
    end: t.end !== undefined ? wallOf(t.end_wall, t.end) : nowWall,
    held: t.end === undefined,
  }));
  const stale = h.stale.map((s) => ({ s, at: wallOf(s.wall, s.at) }));
  // The axis runs from the first thing recorded to now while a term is
  // held, else to the last thing recorded: a name nobody has held for an
  // hour is not drawn as slivers at the left of an hour of nothing.
  const t0 = Math.min(...terms.map((x) => x.start), ...stale.map((x) => x.at));
  let t1 = Math.max(...terms.map((x) => x.end), ...stale.map((x) => x.at));
  if (terms.some((x) => x.held)) t1 = Math.max(t1, nowWall);
  t1 = Math.max(t1, t0 + 1000);
  t1 += (t1 - t0) * 0.02;
  const width = Math.max(240, contentWidth(host, 800));
  const pad = 8;
  const holders = [...new Set(h.terms.map((t) => t.holder))];
  const lane = 34;
  const top = 22;
  const height = top + Math.max(1, holders.length) * lane + 22;
  const x = (t: number) => pad + ((t - t0) / (t1 - t0)) * (width - 2 * pad);
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, class: "timeline" });
  // In the page from the start, so that labels can be measured.
  host.replaceChildren(root);

  // Axis: start, middle and end, in wall-clock time.
  const axisY = height - 18;
  root.append(svg("line", { x1: pad, x2: width - pad, y1: axisY, y2: axisY, class: "axis" }));
  // With the milliseconds when the whole is a few seconds.
  const ticks = width < 420 ? [0, 1] : [0, 0.5, 1];
  const millis = t1 - t0 < 10_000;
  for (const f of ticks) {
    const t = t0 + f * (t1 - t0);
    root.append(svg("text", { x: x(t), y: axisY + 14, class: "tick", "text-anchor": f === 0 ? "start" : f === 1 ? "end" : "middle" }, fmtWall(t, millis)));
  }

  // Bars first (their places decide where labels fit), then labels.
  const bars: Bar[] = terms.map((x0) => {
    const xs = Math.min(x(x0.start), width - pad - minBar);
    return { lane: holders.indexOf(x0.t.holder), xs, xe: Math.max(xs + minBar, x(x0.end)) };
  });
  terms.forEach((x0, i) => {
    const t = x0.t;
    const b = bars[i];
    const y = top + b.lane * lane;
    const g = svg("g", { class: "term " + (t.ended ?? "held"), "data-token": t.token });
    const why = t.reason ? ": " + t.reason : "";
    const span = `${fmtWall(x0.start)} to ${x0.held ? "now (held)" : fmtWall(x0.end) + " (" + t.ended + why + " after " + fmtDuration(x0.end - x0.start) + ")"}`;
    const cluster = `cluster time ${fmtClock(t.start)} to ${t.end !== undefined ? fmtClock(t.end) : "now"}`;
    g.append(svg("title", {}, `${t.holder}, token ${t.token}: ${span}; ${t.writes} write${t.writes === 1 ? "" : "s"} accepted (${cluster})`));
    g.append(svg("rect", { x: b.xs, y, width: b.xe - b.xs, height: lane - 10, rx: 3 }));
    // The longest label that fits in the bar; else one beside it, up to
    // the next bar in the lane (or the edge); else none (the tooltip
    // says it all).
    const full = `${t.holder} · token ${t.token}${t.end !== undefined ? " · " + fmtDuration(x0.end - x0.start) : ""}`;
    const labels = [full, `${t.holder} · ${t.token}`, String(t.token)];
    const ly = y + (lane - 10) / 2;
    root.append(g);
    const place = (texts: string[], x0: number, room: number, cls: string) => {
      for (const l of texts) {
        const e = svg("text", { x: x0, y: ly, class: cls }, l) as SVGTextElement;
        g.append(e);
        if (e.getComputedTextLength() <= room) return true;
        e.remove();
      }
      return false;
    };
    // Each label, from the longest, in the bar or else beside it.
    const next = Math.min(width - pad, ...bars.filter((o) => o !== b && o.lane === b.lane && o.xs >= b.xe).map((o) => o.xs));
    labels.some((l) => place([l], b.xs + 4, b.xe - b.xs - 8, "label") || place([l], b.xe + 3, next - b.xe - 6, "label out"));
  });

  let lastMark = -Infinity;
  for (const { s, at } of stale) {
    const cx = x(at);
    const y = top - 14;
    const g = svg("g", { class: "stale", "data-token": s.token });
    g.append(svg("title", {}, `${fmtWall(at)}: write to ${s.key} with stale token ${s.token} REJECTED${s.current ? " (token " + s.current + " held)" : ""} (cluster time ${fmtClock(s.at)})`));
    g.append(svg("line", { x1: cx, x2: cx, y1: y + 6, y2: top + Math.max(1, holders.length) * lane - 10, class: "stale-line" }));
    // The token beside the cross unless it would run into the last one.
    const text = `✕ ${s.token}`;
    const label = cx - (text.length * charW) / 2 > lastMark + 2 ? text : "✕";
    const half = (label.length * charW) / 2;
    const lx = Math.min(Math.max(cx, half), width - half); // not cut at the edges
    g.append(svg("text", { x: lx, y: y + 4, "text-anchor": "middle", class: "stale-mark" }, label));
    lastMark = lx + half;
    root.append(g);
  }
  host.setAttribute("aria-label",
    `Timeline of ${h.name}: ${h.terms.map((t) => `${t.holder} with token ${t.token}${t.ended ? ", " + t.ended + (t.reason ? " (" + t.reason + ")" : "") : ", held"}`).join("; ")}; ${h.stale.length} stale writes rejected`);
}
