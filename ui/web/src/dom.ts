// Small DOM helpers.

export function $<T extends HTMLElement = HTMLElement>(sel: string): T {
  const e = document.querySelector<T>(sel);
  if (!e) throw new Error(`dashboard: no element ${sel}`);
  return e;
}

type Child = Node | string | number | null | undefined | false;

export function el(tag: string, attrs: Record<string, string> = {}, ...children: Child[]): HTMLElement {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    e.append(typeof c === "number" ? String(c) : c);
  }
  return e;
}

const svgNS = "http://www.w3.org/2000/svg";

export function svg(tag: string, attrs: Record<string, string | number> = {}, ...children: (Node | string)[]): SVGElement {
  const e = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  e.append(...children);
  return e;
}

export function clear(e: Element) {
  e.replaceChildren();
}

/** fmtDuration formats milliseconds: "850ms", "4.2s", "3m05s", "2h01m". */
export function fmtDuration(ms: number, tenths = false): string {
  if (!isFinite(ms)) return "?";
  if (ms < 1000) return tenths ? (ms / 1000).toFixed(1) + "s" : Math.round(ms) + "ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + "s";
  const s = Math.floor(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

const pad2 = (n: number) => String(n).padStart(2, "0");

/** fmtWall formats a wall-clock time (Unix milliseconds) as this
 * browser's local time of day, 24-hour: "14:03:27.482" (without the
 * milliseconds if millis is false), with the date before it ("2024-03-05
 * 14:03:27.482") when it is not today. */
export function fmtWall(ms: number, millis = true): string {
  if (!isFinite(ms) || ms <= 0) return "?";
  const d = new Date(ms);
  let s = `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`;
  if (millis) s += "." + String(d.getMilliseconds()).padStart(3, "0");
  const today = new Date();
  if (d.toDateString() !== today.toDateString()) s = `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ${s}`;
  return s;
}

/** fmtClock formats a cluster time (milliseconds since the cluster began). */
export function fmtClock(ms: number): string {
  const s = ms / 1000;
  if (s < 3600) return s.toFixed(3) + "s";
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return `${h}h${String(m).padStart(2, "0")}m${(s % 60).toFixed(3).padStart(6, "0")}s`;
}
