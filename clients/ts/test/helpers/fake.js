// A fake cluster for the timing tests: leases in the memory of the test,
// on the mocked Date clock, with switches for a paused or unreachable
// server. Every call is recorded with the time it was sent.
import { LeaseHeldError, StaleTokenError, NotFoundError } from "../../dist/core.js";

/** testClock reads the mocked Date (plus skew, to act as a blocked event
 * loop whose timers have not run yet) and uses the mocked timers. */
export function testClock() {
  const c = {
    skew: 0,
    now: () => Date.now() + c.skew,
    setTimeout: (fn, ms) => setTimeout(fn, Math.max(0, ms)),
    clearTimeout: (h) => clearTimeout(h),
  };
  return c;
}

/** flush lets promise callbacks run (setImmediate is not mocked). */
export async function flush(rounds = 10) {
  for (let i = 0; i < rounds; i++) await new Promise((r) => setImmediate(r));
}

/** advance moves the mocked clock by ms in steps, running what is due. */
export async function advance(ms, step = 10) {
  await flush();
  for (let t = 0; t < ms; t += step) {
    mockTimers().tick(Math.min(step, ms - t));
    await flush();
  }
}

let timers;
export function useTimers(mock) {
  timers = mock.timers;
}
function mockTimers() {
  return timers;
}

function hang(signal) {
  return new Promise((_, rej) => {
    if (signal?.aborted) return rej(signal.reason);
    signal?.addEventListener("abort", () => rej(signal.reason), { once: true });
  });
}

export class FakeCluster {
  constructor(clock) {
    this.clock = clock;
    this.leases = new Map(); // name -> {holder, token, ttlMs, expiresAt}
    this.lastToken = 0n;
    this.calls = [];
    this.paused = false; // requests hang until their signal aborts
    this.failRelease = 0; // the next n releases fail
    this.writes = [];
  }

  now() {
    return Date.now();
  }

  live(name) {
    const l = this.leases.get(name);
    if (l && l.expiresAt <= this.now()) {
      this.leases.delete(name);
      return undefined;
    }
    return l;
  }

  grant(name, l, sentAt) {
    return { name, holder: l.holder, token: l.token, ttlMs: l.ttlMs, remainingMs: l.expiresAt - this.now(), sentAt };
  }

  async acquire(name, holder, ttlMs, opts) {
    const sentAt = this.clock.now();
    this.calls.push({ op: "acquire", at: sentAt, name });
    if (this.paused) await hang(opts?.signal);
    for (;;) {
      const l = this.live(name);
      if (!l || l.holder === holder) break;
      if (!opts?.wait) {
        throw new LeaseHeldError(`held by ${l.holder}`, name, l.holder, l.token, l.expiresAt - this.now());
      }
      await new Promise((r) => setTimeout(r, 10));
    }
    let l = this.live(name);
    if (l) {
      l.expiresAt = this.now() + ttlMs;
    } else {
      l = { holder, token: ++this.lastToken, ttlMs, expiresAt: this.now() + ttlMs };
      this.leases.set(name, l);
    }
    return this.grant(name, l, sentAt);
  }

  async renew(refs, opts) {
    const sentAt = this.clock.now();
    this.calls.push({ op: "renew", at: sentAt, names: refs.map((r) => r.name) });
    if (this.paused) await hang(opts?.signal);
    return refs.map((r) => {
      const l = this.live(r.name);
      if (!l || l.token !== r.token) {
        return { ref: r, err: new StaleTokenError(`lease: stale token ${r.token} for "${r.name}"`) };
      }
      l.expiresAt = this.now() + l.ttlMs;
      return { ref: r, lease: this.grant(r.name, l, sentAt) };
    });
  }

  async release(name, token, opts) {
    this.calls.push({ op: "release", at: this.clock.now(), name, token });
    if (this.onRelease) this.onRelease(name, token);
    if (this.paused) await hang(opts?.signal);
    if (this.failRelease > 0) {
      this.failRelease--;
      throw new Error("fake: release failed");
    }
    const l = this.live(name);
    if (!l || l.token !== token) throw new StaleTokenError(`lease: stale token ${token} for "${name}"`);
    this.leases.delete(name);
  }

  async put(key, value, lease, token) {
    this.calls.push({ op: "put", at: this.clock.now(), key });
    const l = this.live(lease);
    if (!l || l.token !== token) throw new StaleTokenError(`lease: stale token ${token} for "${lease}"`);
    this.writes.push({ key, value, token });
    return BigInt(this.writes.length);
  }

  async delete(key, lease, token) {
    return this.put(key, undefined, lease, token);
  }

  async watch() {
    throw new NotFoundError("fake: no watch");
  }

  count(op) {
    return this.calls.filter((c) => c.op === op).length;
  }
}
