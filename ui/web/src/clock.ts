// The page's two clocks. Cluster time (milliseconds since the cluster
// began; it stands still while there is no leader) is what the server
// decides with: the page uses it for countdowns and shows it on hover.
// Wall-clock time is what people read: every event carries the wall-clock
// time at which the leader appended it, and the page shows that.

import { el, fmtClock, fmtWall } from "./dom";

// The server's last word on each clock, and this page's monotonic clock
// when it came: between two words the page counts on from there.
let clusterNow = 0;
let wallNow = 0;
let at = performance.now();

/** setClocks takes the server's cluster time and wall-clock time now. */
export function setClocks(cluster: number, wall: number) {
  clusterNow = cluster;
  wallNow = wall;
  at = performance.now();
}

/** clusterTime is the cluster time now, as the page estimates it. */
export function clusterTime(): number {
  return clusterNow + (performance.now() - at);
}

/** wallTime is the server's wall-clock time now, as the page estimates
 * it (the browser's own before the server said). */
export function wallTime(): number {
  return wallNow ? wallNow + (performance.now() - at) : Date.now();
}

/** wallOf is the wall-clock time of something recorded at wall, or, when
 * the server did not know it (0), an estimate from its cluster time at. */
export function wallOf(wall: number | undefined, at: number): number {
  return wall && wall > 0 ? wall : wallTime() - (clusterTime() - at);
}

/** timeEl shows a wall-clock time, with its cluster time on hover. */
export function timeEl(wall: number, cluster: number | undefined, millis = true): HTMLElement {
  const t = el("time", { datetime: new Date(wall).toISOString() }, fmtWall(wall, millis));
  if (cluster !== undefined) t.title = "cluster time " + fmtClock(cluster);
  return t;
}
