/**
 * Clock is the monotonic clock and the timers the client and sessions use.
 * Every time in this package (a lease's send time, its deadline) is in
 * milliseconds on one Clock. Tests supply a fake one.
 */
export interface Clock {
  /** now returns the current time in milliseconds, monotonic. */
  now(): number;
  /** setTimeout calls fn after ms milliseconds. */
  setTimeout(fn: () => void, ms: number): unknown;
  /** clearTimeout cancels a timer set by setTimeout. */
  clearTimeout(handle: unknown): void;
}

/**
 * systemClock reads performance.now(), which does not jump with the wall
 * clock, and uses the global timers. Timers it sets do not keep a Node.js
 * process alive on their own.
 */
export const systemClock: Clock = {
  now: () => performance.now(),
  setTimeout: (fn, ms) => {
    const t = globalThis.setTimeout(fn, Math.max(0, ms)) as unknown;
    return t;
  },
  clearTimeout: (h) => globalThis.clearTimeout(h as ReturnType<typeof setTimeout>),
};

/** sleep waits ms on clock, or until signal aborts; it reports whether the
 * time passed. */
export function sleep(clock: Clock, ms: number, signal?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(false);
    const onAbort = () => {
      clock.clearTimeout(h);
      resolve(false);
    };
    const h = clock.setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
