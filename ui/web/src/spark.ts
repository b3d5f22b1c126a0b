// Small line charts for the metrics view.

import { svg } from "./dom";

export interface Series {
  label: string;
  values: number[];
  cls: string;
}

export function sparkline(host: HTMLElement, ts: number[], series: Series[]) {
  const width = Math.max(300, host.clientWidth || 600);
  const height = 120;
  const pad = 28;
  const all = series.flatMap((s) => s.values.filter((v) => isFinite(v)));
  const maxV = Math.max(1, ...all);
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, class: "spark" });
  const n = ts.length;
  const x = (i: number) => pad + (n <= 1 ? 0 : (i / (n - 1)) * (width - 2 * pad));
  const y = (v: number) => height - 16 - (v / maxV) * (height - 30);
  root.append(svg("line", { x1: pad, x2: width - pad, y1: height - 16, y2: height - 16, class: "axis" }));
  root.append(svg("text", { x: 2, y: 12, class: "tick" }, fmt(maxV)));
  root.append(svg("text", { x: 2, y: height - 18, class: "tick" }, "0"));
  const legend: string[] = [];
  for (const s of series) {
    let d = "";
    s.values.forEach((v, i) => {
      if (!isFinite(v)) return;
      d += (d && isFinite(s.values[i - 1]) ? "L" : "M") + x(i).toFixed(1) + " " + y(v).toFixed(1);
    });
    root.append(svg("path", { d: d || "M0 0", class: "line " + s.cls }));
    const last = [...s.values].reverse().find((v) => isFinite(v));
    legend.push(`${s.label}: ${last === undefined ? "—" : fmt(last)}`);
  }
  root.append(svg("text", { x: width - pad, y: 12, "text-anchor": "end", class: "tick legend" }, legend.join("   ")));
  host.replaceChildren(root);
  host.setAttribute("aria-label", n ? `${legend.join(", ")} (latest of ${n} seconds)` : "no samples yet");
}

function fmt(v: number): string {
  return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
}
