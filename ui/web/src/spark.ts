// Small line charts for the metrics view: a legend with the latest
// values above, the lines on a wall-clock axis below, fitting the width
// they are given.

import { el, svg, fmtWall } from "./dom";
import { contentWidth } from "./timeline";

export interface Series {
  label: string;
  values: number[];
  cls: string;
}

export function sparkline(host: HTMLElement, ts: number[], series: Series[]) {
  const width = Math.max(240, contentWidth(host, 600));
  const height = 120;
  const left = 36;
  const right = 8;
  const bottom = 18;
  const all = series.flatMap((s) => s.values.filter((v) => isFinite(v)));
  const maxV = Math.max(1, ...all);
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, class: "spark" });
  const n = ts.length;
  const x = (i: number) => left + (n <= 1 ? 0 : (i / (n - 1)) * (width - left - right));
  const y = (v: number) => height - bottom - (v / maxV) * (height - bottom - 8);
  root.append(svg("line", { x1: left, x2: width - right, y1: height - bottom, y2: height - bottom, class: "axis" }));
  root.append(svg("text", { x: left - 4, y: 12, class: "tick", "text-anchor": "end" }, fmt(maxV)));
  root.append(svg("text", { x: left - 4, y: height - bottom, class: "tick", "text-anchor": "end" }, "0"));
  if (n > 0) {
    root.append(svg("text", { x: left, y: height - 4, class: "tick" }, fmtWall(ts[0], false)));
    if (n > 1) root.append(svg("text", { x: width - right, y: height - 4, class: "tick", "text-anchor": "end" }, fmtWall(ts[n - 1], false)));
  }
  const legend: HTMLElement[] = [];
  const said: string[] = [];
  for (const s of series) {
    let d = "";
    s.values.forEach((v, i) => {
      if (!isFinite(v)) return;
      d += (d && isFinite(s.values[i - 1]) ? "L" : "M") + x(i).toFixed(1) + " " + y(v).toFixed(1);
    });
    root.append(svg("path", { d: d || "M0 0", class: "line " + s.cls }));
    const last = [...s.values].reverse().find((v) => isFinite(v));
    const text = `${s.label}: ${last === undefined ? "—" : fmt(last)}`;
    said.push(text);
    legend.push(el("li", {}, el("span", { class: "swatch " + s.cls, "aria-hidden": "true" }), text));
  }
  host.replaceChildren(el("ul", { class: "legend" }, ...legend), root);
  host.setAttribute("aria-label", n ? `${said.join(", ")} (latest of ${n} seconds, from ${fmtWall(ts[0], false)})` : "no samples yet");
}

function fmt(v: number): string {
  if (Number.isInteger(v)) return String(v);
  return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
}
